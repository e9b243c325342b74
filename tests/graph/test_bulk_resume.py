"""`kgprobe ingest --bulk DIR --resume`: a bulk load that was stopped goes on from its last
checkpoint (issue 37, item 5), never from the start, and its import files end byte for byte
those of a load that was never stopped.

Most tests need no graph server: the import files are compared (``FILES_ONLY``: a Neo4j URI
that nothing answers, so only the files are written); whether the same files make the online
graph is `test_ingest_bulk.py`'s. The last test loads the managed ArcadeDB end to end.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _kgprobe_process import run_kgprobe, start_kgprobe
from conftest import TEST_SERVER
from ingest_support import FILES_ONLY, graph_dump, import_rows
from loaders_support import gen_dump_module
from test_ingest_bulk import EXTERNAL_SERVER, _claim, _entity, _second_managed_home, awkward_dump

from kgprobe.api import ENV_BULK_CHECKPOINT_S
from kgprobe.graph.bulk import CHECKPOINT_FILE, BulkCheckpoints, read_checkpoint, write_import_files
from kgprobe.loaders import open_source
from kgprobe.loaders.common import Filters
from kgprobe.loaders.parallel import ENV_CHUNK_MB
from kgprobe.loaders.resume import position_of, position_record
from kgprobe.records import Position, Record

#: a checkpoint at every position (one a minute by default), chunks of 50 kB
EVERY = {**FILES_ONLY, ENV_BULK_CHECKPOINT_S: "0", ENV_CHUNK_MB: "0.05"}


def run(*args: str, env: dict[str, str] = EVERY) -> subprocess.CompletedProcess[str]:
    return run_kgprobe(args, env, timeout=600)


def _files(directory: Path) -> dict[str, bytes]:
    """Every import file and the argument file, byte for byte (the checkpoint aside)."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())
            if p.name != CHECKPOINT_FILE}


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_killed_bulk_load_resumes_at_its_checkpoint_and_writes_the_files_of_a_whole_one(
        tmp_path: Path, workers: str) -> None:
    """SIGKILL after the first checkpoint, then --resume: it says where it starts (past the
    file's start), and the import files and the summary are those of a load never stopped,
    byte for byte (a line read twice would be an entity met again, an error, and a fact row
    more)."""
    path = tmp_path / "real.json.gz"
    gen_dump_module().write_realistic_dump(path, 600, seed=3)
    whole = run("ingest", str(path), "--bulk", str(tmp_path / "whole"), "--workers", workers, "--json")
    assert whole.returncode == 0, whole.stderr

    stopped = tmp_path / "stopped"
    _kill_at_first_checkpoint(["ingest", str(path), "--bulk", str(stopped), "--workers", workers, "--json"],
                              EVERY, stopped)
    saved = read_checkpoint(stopped)
    assert saved["finished"] is False
    assert saved["position"]["offset"] > 0 and saved["summary"]["records"] > 0
    assert _files(stopped) != _files(tmp_path / "whole")  # stopped midway

    resumed = run("ingest", str(path), "--bulk", str(stopped), "--workers", workers, "--json", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    offset, line = saved["position"]["offset"], saved["position"]["line"]
    assert f"resuming the bulk load at byte {offset:,} (line {line:,})" in resumed.stderr
    assert json.loads(resumed.stdout) == json.loads(whole.stdout)
    assert _files(stopped) == _files(tmp_path / "whole")
    assert read_checkpoint(stopped)["finished"] is True


def test_the_import_files_do_not_depend_on_where_batches_are_cut(tmp_path: Path) -> None:
    """One worker's batches of 5,000 or of 700 records, a checkpoint's flush at every position,
    two workers' 50 kB chunks: each load cuts its batches elsewhere, and every file is the same,
    byte for byte. The slots and the referred ids are written in input order; grouped by batch
    (per relation, sorted ids), a checkpoint taken at another moment, or another number of
    workers, wrote the same rows in another order."""
    path = tmp_path / "real.json.gz"
    gen_dump_module().write_realistic_dump(path, 600, seed=3)
    loads = {"one": (["--workers", "1"], FILES_ONLY), "small": (["--workers", "1", "--batch-size", "700"], FILES_ONLY),
             "every": (["--workers", "1"], EVERY), "two": (["--workers", "2"], EVERY)}
    for name, (options, env) in loads.items():
        got = run("ingest", str(path), "--bulk", str(tmp_path / name), *options, "--json", env=env)
        assert got.returncode == 0, got.stderr
    files = {name: _files(tmp_path / name) for name in loads}
    assert files["one"]["nodes-factslot.csv"].count(b"\n") > 2000  # 2,201 facts over many relations
    for name in ("small", "every", "two"):
        assert files[name] == files["one"], name


def _kill_at_first_checkpoint(args: list[str], env: dict[str, str], directory: Path) -> None:
    """``kgprobe ARGS`` killed (SIGKILL) as soon as ``directory`` holds a checkpoint."""
    proc = start_kgprobe(args, env, text=False)
    try:
        deadline = time.monotonic() + 300
        while (not (directory / CHECKPOINT_FILE).exists() and proc.poll() is None
               and time.monotonic() < deadline):
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the load ended before it could be killed"


def _crash_after(records: Iterator[Record], positions: int, more: int) -> Iterator[Record]:
    """``records`` up to the ``positions``-th position and ``more`` records after it, then a
    crash (an exception: what was handed to the writer is written, buffers reach the files)."""
    seen = 0
    for rec in records:
        yield rec
        if isinstance(rec, Position):
            seen += 1
        elif seen >= positions:
            more -= 1
            if more <= 0:
                raise RuntimeError("crash")


def _multiline_last(path: Path) -> Path:
    """The awkward dump with its first entity, whose label has a line break, moved last."""
    lines = path.read_text(encoding="utf-8").splitlines()
    entities = [ln.rstrip(",") for ln in lines[1:-1]]
    entities = [*entities[1:], entities[0]]
    path.write_text("[\n" + ",\n".join(entities) + "\n]\n", encoding="utf-8")
    return path


def _checkpoints(path: Path) -> BulkCheckpoints:
    return BulkCheckpoints(position_record, {"sources": [str(path.resolve())]}, seconds=0)


def test_a_resume_cuts_the_files_back_to_the_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A load that crashed after its checkpoint had written rows past it (those of an entity
    whose label has a line break: its row is kept in memory until the end, where it goes to an
    ``-ml`` file): resumed in process from the checkpoint's position, the files and the
    summary are those of a whole load, byte for byte."""
    monkeypatch.setenv(ENV_CHUNK_MB, "0.0001")  # a position after each line
    path = _multiline_last(awkward_dump(tmp_path / "awkward.json"))
    whole = write_import_files(open_source(path, Filters.make(), positions=True), tmp_path / "whole",
                               batch_size=1, checkpoints=_checkpoints(path))
    assert any(p.name.endswith("-ml.csv") for p in (tmp_path / "whole").iterdir())

    crashed = tmp_path / "crashed"
    records = open_source(path, Filters.make(), positions=True)
    with pytest.raises(RuntimeError, match="crash"):
        # three entity lines read, their checkpoint, then the last line's two records written
        write_import_files(_crash_after(records, 3, 2), crashed, batch_size=1,
                           checkpoints=_checkpoints(path))
    gc.collect()  # the crashed writer's files closed: their buffers on disk
    state = read_checkpoint(crashed)
    on_disk = {p.name: p.stat().st_size for p in crashed.iterdir()}
    assert on_disk["rels-fact.csv"] > state["files"]["facts"]["size"] > 0, on_disk  # rows past it
    assert state["entity_multiline"] == []  # the row with a line break came after it

    start = position_of(state["position"], path, crashed / CHECKPOINT_FILE)
    got = write_import_files(open_source(path, Filters.make(), positions=True, start=start), crashed,
                             batch_size=1, checkpoints=_checkpoints(path), resume=state)
    assert got.summary.to_dict() == whole.summary.to_dict()
    assert _files(crashed) == _files(tmp_path / "whole")
    assert import_rows(crashed) == import_rows(tmp_path / "whole")


def test_a_resume_between_repeated_lines_gives_the_files_of_a_whole_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Entity lines met again (A twice in a row, B again two lines on), a checkpoint after every
    line, the load crashed after each checkpoint in turn and resumed: the repeat is refused as
    the line arrives in the whole load (A's second line, right after its first) and by the
    writer against the written entities after a resume, which keeps no memory of the line
    before; either way the files and the summary are the whole load's, byte for byte."""
    monkeypatch.setenv(ENV_CHUNK_MB, "0.0001")  # a position after each line
    a = _entity("Q990000051", "a", "", [], {"P27": [_claim("Q990000051", "P27", "Q990000061", 1)],
                                          "P31": [_claim("Q990000051", "P31", "Q5", 2)]})
    b = _entity("Q990000052", "b", "", [], {"P19": [_claim("Q990000052", "P19", "Q990000062", 3)]})
    c = _entity("Q990000053", "c", "", [], {"P19": [_claim("Q990000053", "P19", "Q990000062", 4)]})
    path = tmp_path / "repeats.json"
    path.write_text("[\n" + ",\n".join(json.dumps(e) for e in (a, a, b, c, b)) + "\n]\n", encoding="utf-8")
    whole = write_import_files(open_source(path, Filters.make(), positions=True), tmp_path / "whole",
                               batch_size=1, checkpoints=_checkpoints(path))
    s = whole.summary
    assert (s.entities, s.facts, s.type_edges, s.error_count) == (3, 3, 1, 2)  # by hand
    for k in range(1, 5):
        crashed = tmp_path / f"crashed-{k}"
        with pytest.raises(RuntimeError, match="crash"):
            write_import_files(_crash_after(open_source(path, Filters.make(), positions=True), k, 1),
                               crashed, batch_size=1, checkpoints=_checkpoints(path))
        gc.collect()  # the crashed writer's files closed: their buffers on disk
        state = read_checkpoint(crashed)
        start = position_of(state["position"], path, crashed / CHECKPOINT_FILE)
        got = write_import_files(open_source(path, Filters.make(), positions=True, start=start), crashed,
                                 batch_size=1, checkpoints=_checkpoints(path), resume=state)
        assert got.summary.to_dict() == s.to_dict(), k
        assert _files(crashed) == _files(tmp_path / "whole"), k


def test_resume_refusals_and_a_complete_load_goes_straight_to_the_import(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--resume where no checkpoint is, with other options than the stopped load's, of a file
    changed since, or with --sparql: one line each, nothing written. A load whose files were
    complete: --resume reads nothing and hands the same files to the import."""
    path = awkward_dump(tmp_path / "awkward.json")
    out = tmp_path / "import"
    empty = run("ingest", str(path), "--bulk", str(tmp_path / "none"), "--resume")
    assert empty.returncode == 2 and "no checkpoint of a bulk load there" in empty.stderr
    assert not (tmp_path / "none").exists()

    first = run("ingest", str(path), "--bulk", str(out), "--json")
    assert first.returncode == 0, first.stderr
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    used = run("ingest", str(path), "--bulk", str(out))
    assert used.returncode == 2 and "holds a bulk load's checkpoint; --resume continues that load" in used.stderr

    other = run("ingest", str(path), "--bulk", str(out), "--resume", "-r", "P27")
    assert other.returncode == 2 and "the stopped load read other sources or options" in other.stderr
    assert "Traceback" not in other.stderr
    sparql = run("ingest", str(path), "--bulk", str(out), "--resume", "--sparql", "http://127.0.0.1:9/sparql")
    assert sparql.returncode == 2 and "(--sparql and RDF files have no checkpoints)" in sparql.stderr

    again = run("ingest", str(path), "--bulk", str(out), "--resume", "--json")
    assert again.returncode == 0, again.stderr
    assert "its import files are complete; importing them" in again.stderr
    assert json.loads(again.stdout) == json.loads(first.stdout)
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before  # nothing rewritten
    assert "neo4j-admin database import full neo4j @import.args" in again.stderr

    crashed = tmp_path / "crashed"
    monkeypatch.setenv(ENV_CHUNK_MB, "0.0001")  # a position after each line
    with pytest.raises(RuntimeError, match="crash"):
        write_import_files(_crash_after(open_source(path, Filters.make(), positions=True), 1, 1),
                           crashed, batch_size=1, checkpoints=BulkCheckpoints(
                               position_record, _context(path), seconds=0))
    with path.open("a", encoding="utf-8") as fh:
        fh.write("\n")
    changed = run("ingest", str(path), "--bulk", str(crashed), "--resume")
    assert changed.returncode == 4 and "changed since its checkpoint" in changed.stderr
    assert "Traceback" not in changed.stderr


def _context(path: Path) -> dict[str, object]:
    """The context `kgprobe ingest --bulk` keeps for ``path`` with the default options."""
    return {"sources": [str(path.resolve())], "relation": [], "subject": [], "language": "en",
            "rank": [], "limit": None}


@pytest.mark.skipif(TEST_SERVER != "arcadedb" or EXTERNAL_SERVER,
                    reason="bulk load into the managed ArcadeDB: runs in the ArcadeDB half")
def test_a_killed_bulk_load_into_arcadedb_resumes_and_imports_the_online_graph(
        graph: Any, kgprobe_env: dict[str, str], tmp_path: Path) -> None:
    """The default server, end to end: a bulk load killed while it writes its files, then
    --resume, which writes the rest and runs GraphImporter: the graph the online ingest of the
    same dump writes."""
    from kgprobe.graph.client import connect
    from kgprobe.graph.server import ManagedServer

    path = tmp_path / "real.json.gz"
    gen_dump_module().write_realistic_dump(path, 400, seed=5)
    online = run("ingest", str(path), "--json", env=kgprobe_env)
    assert online.returncode == 0, online.stderr
    expected = graph_dump(graph)

    env, settings = _second_managed_home(kgprobe_env, tmp_path / "bulk-home")
    env = {**env, ENV_BULK_CHECKPOINT_S: "0", ENV_CHUNK_MB: "0.05"}
    stopped = tmp_path / "import"
    try:
        _kill_at_first_checkpoint(["ingest", str(path), "--bulk", str(stopped), "--workers", "2"], env, stopped)
        assert read_checkpoint(stopped)["finished"] is False
        resumed = run("ingest", str(path), "--bulk", str(stopped), "--workers", "2", "--resume", "--json",
                      env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert "resuming the bulk load at byte" in resumed.stderr and "Import complete" in resumed.stderr
        summary = json.loads(resumed.stdout)
        assert {k: v for k, v in summary.items() if k != "redirects_resolved"} == {
            k: v for k, v in json.loads(online.stdout).items() if k != "redirects_resolved"}
        with connect(settings) as bulk_graph:
            assert graph_dump(bulk_graph) == expected
    finally:
        ManagedServer(settings).stop()
