"""`kgprobe ingest --workers N` and `--resume` (issue 37 #3 and #5): a dump parsed in worker
processes gives the very records of one process, and a killed load resumes at its checkpoint.

Small chunks (``KGPROBE_INGEST_CHUNK_MB``) make small files span many chunks, so that the
workers and the checkpoints really take part."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from _kgprobe_process import run_kgprobe, start_kgprobe
from loaders_support import WD, gen_dump_module

from kgprobe.api import _server_here
from kgprobe.config import Settings
from kgprobe.loaders.common import Filters
from kgprobe.loaders.parallel import (
    ENV_CHUNK_MB,
    default_workers,
    ordered_map,
    plain_chunks,
    read_ahead,
    read_chunks,
)
from kgprobe.loaders.wikidata_json import load_json
from kgprobe.records import EntityRecord, ErrorRecord, Position

REAL = sorted((WD / "entity-json").glob("*.json"))


def _real_lines() -> list[str]:
    """The fixtures' real entities, each under 8 ids of its own (ids and statement ids
    rewritten, as benchmarks/gen_dump.py does), one JSON line each."""
    out = []
    for copy in range(8):
        for path in REAL:
            for eid, ent in json.loads(path.read_text(encoding="utf-8"))["entities"].items():
                new = f"Q{int(eid[1:]) * 10 + copy}"
                text = re.sub(rf'"{eid}(?=[$-])', f'"{new}', json.dumps(ent), flags=re.IGNORECASE)
                text = text.replace(f'"id": "{eid}"', f'"id": "{new}"')
                out.append(text)
    return out


def _dump(path: Path, lines: list[str]) -> Path:
    text = "[\n" + ",\n".join(lines) + "\n]\n"
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _pid(_: int) -> int:
    return os.getpid()


def _sigint_ignored(_: int) -> bool:
    return signal.getsignal(signal.SIGINT) == signal.SIG_IGN


def test_workers_leave_ctrl_c_to_the_ingest() -> None:
    """Ctrl-C reaches the whole process group: a worker ignores it (no traceback per worker),
    the ingest answers it and shuts the pool down."""
    assert [ok for _, ok in ordered_map(_sigint_ignored, iter(range(4)), 2)] == [True] * 4


def test_ordered_map_runs_in_worker_processes_in_order() -> None:
    """The pool is real: jobs run in other processes, and results come back in job order."""
    pids = [pid for _, pid in ordered_map(_pid, iter(range(8)), 2)]
    assert os.getpid() not in pids and len(pids) == 8
    assert [job for job, _ in ordered_map(_pid, iter(range(8)), 2)] == list(range(8))


def test_the_workers_results_are_taken_in_with_the_collector_held_back() -> None:
    """The workers' records are unpickled in bulk in this process: while the pool runs its
    cyclic collector's first threshold is raised (kgprobe.runtime), and it is back to what it
    was when the iterator ends, and when it is closed early."""
    import gc

    before = gc.get_threshold()
    seen = [gc.get_threshold()[0] for _ in ordered_map(_pid, iter(range(6)), 2)]
    assert len(seen) == 6 and min(seen) >= 100_000  # Python's default is 700
    assert gc.get_threshold() == before
    early = ordered_map(_pid, iter(range(20)), 2)
    next(early)
    assert gc.get_threshold()[0] >= 100_000
    early.close()
    assert gc.get_threshold() == before
    # one job (or one worker) runs here, with no pool: nothing is changed
    assert [gc.get_threshold() for _ in ordered_map(_pid, iter(range(3)), 1)] == [before] * 3


@pytest.mark.parametrize("cores, beside, alone", [(1, 1, 1), (2, 1, 2), (16, 15, 16)])
def test_the_default_workers_leave_a_core_to_a_graph_server_on_this_machine(
    monkeypatch: pytest.MonkeyPatch, cores: int, beside: int, alone: int
) -> None:
    """On 2 cores an online ingest into the managed server was slower with 2 parsing processes
    than with 1 (the server uses more than a core): the default leaves it one; a bulk load, or
    a server elsewhere, gets every core."""
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    assert default_workers(server_here=True) == beside
    assert default_workers(server_here=False) == alone == default_workers()


@pytest.mark.parametrize("uri, here", [
    (None, True),  # the managed server
    ("bolt://127.0.0.1:7687", True), ("neo4j://localhost", True), ("bolt://[::1]:7687", True),
    ("neo4j+s://graph.example.org:7687", False), ("bolt://10.0.0.7:7687", False),
])
def test_a_graph_server_on_this_machine_is_the_managed_one_or_a_loopback_uri(
    uri: str | None, here: bool
) -> None:
    assert _server_here(Settings(uri=uri)) is here


class _Trickle:
    """A file whose reads return at most 3 bytes (as a pipe or a network file may)."""

    def __init__(self, fh: Any) -> None:
        self.fh = fh

    def readinto(self, b: memoryview) -> int:
        return int(self.fh.readinto(b[:3]))

    def readline(self) -> bytes:
        return bytes(self.fh.readline())


@pytest.mark.parametrize("text, size, expected", [
    # (line, offset, next line, bytes), worked out by hand: 6 bytes read, then to the end of
    # the line they stop in; the last chunk ends at the file's end, newline or not
    (b"aaaa\nbb\ncccccccccccc\nd\n\neee", 6, [(1, 0, 3, 8), (3, 8, 4, 13), (4, 21, 6, 6)]),
    (b"aaaa\nbb\ncccccccccccc\nd\n\nee", 6, [(1, 0, 3, 8), (3, 8, 4, 13), (4, 21, 6, 5)]),
    (b"aaaa\nbb\n", 5, [(1, 0, 2, 5), (2, 5, 3, 3)]),  # a chunk that ends on a newline
    (b"x" * 20 + b"\ny\n", 4, [(1, 0, 2, 21), (2, 21, 3, 2)]),  # a line longer than a chunk
])
def test_a_plain_files_chunks_are_counted_not_copied(
    tmp_path: Path, text: bytes, size: int, expected: list[tuple[int, int, int, int]]
) -> None:
    """A plain file's chunks (which the workers read themselves) have the boundaries and line
    numbers that the chunks of a compressed file's text have, with no text in them."""
    path = tmp_path / "f.json"
    path.write_bytes(text)
    with open(path, "rb") as fh:
        plain = list(plain_chunks(fh, 1, 0, size))
    with open(path, "rb") as fh:  # a reader that hands out 3 bytes at a time: the same chunks
        assert list(plain_chunks(_Trickle(fh), 1, 0, size)) == plain  # type: ignore[arg-type]
    with open(path, "rb") as fh:
        read = list(read_chunks(fh, 1, 0, size))
    assert [(c.lineno, c.offset, c.next_lineno, c.size) for c in plain] == expected
    assert [(c.lineno, c.offset, c.next_lineno, c.size) for c in read] == expected
    assert [c.data for c in plain] == [b""] * len(expected)
    assert b"".join(c.data for c in read) == text


@pytest.mark.parametrize("name", ["dump.json", "dump.json.gz", "lines.json"])
def test_two_workers_give_the_records_of_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             name: str) -> None:
    """Real entity lines (a dump, the same gzipped, and JSON lines without brackets): the record
    list of 2 workers equals that of 1, positions included, over many chunks."""
    monkeypatch.setenv(ENV_CHUNK_MB, "0.4")
    lines = _real_lines()
    if name == "lines.json":
        path = tmp_path / name
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        path = _dump(tmp_path / name, lines)
    one = list(load_json(path, workers=1, positions=True))
    two = list(load_json(path, workers=2, positions=True))
    assert one == two
    assert len([r for r in one if isinstance(r, EntityRecord)]) == len(lines) == 24
    assert len([r for r in one if isinstance(r, Position)]) >= 5  # many chunks
    # and the records are those of the reader without positions
    assert [r for r in two if not isinstance(r, Position)] == list(load_json(path))


def test_read_ahead_hands_on_in_order_raises_in_place_and_stops_when_closed() -> None:
    """Items made in another thread, handed on in their order; the source's exception raised
    after the items before it; a consumer that stops early stops the thread, which has made
    at most ``depth`` + 1 items beyond what was taken (one being made while the box was full)."""
    import threading

    made: list[tuple[int, str]] = []

    def source(n: int, fail_at: int | None = None) -> Any:
        for i in range(n):
            if i == fail_at:
                raise ValueError(f"broken at {i}")
            made.append((i, threading.current_thread().name))
            yield i

    assert list(read_ahead(source(50), depth=2, name="t-read")) == list(range(50))
    assert {name for _, name in made} == {"t-read"}
    got: list[int] = []
    with pytest.raises(ValueError, match="broken at 7"):
        got.extend(read_ahead(source(20, fail_at=7)))
    assert got == list(range(7))
    made.clear()
    before = threading.active_count()
    ahead = read_ahead(source(1000), depth=2)
    assert [next(ahead) for _ in range(3)] == [0, 1, 2]
    time.sleep(0.3)  # the thread fills the box and waits
    ahead.close()
    assert threading.active_count() == before  # the thread stopped, and was waited for
    assert 3 <= len(made) <= 3 + 2 + 1


def test_a_compressed_files_chunks_are_read_in_a_thread_of_their_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With workers, a .gz is decompressed and cut into chunks beside the main thread (which
    submits them and takes the results in), and the records are those of one reader."""
    import threading

    import kgprobe.loaders.wikidata_json as wj

    monkeypatch.setenv(ENV_CHUNK_MB, "0.2")
    path = _dump(tmp_path / "dump.json.gz", _real_lines())
    threads: set[str] = set()
    real = wj.read_chunks

    def watched(*args: Any) -> Any:
        for chunk in real(*args):
            threads.add(threading.current_thread().name)
            yield chunk

    monkeypatch.setattr(wj, "read_chunks", watched)
    assert list(load_json(path, workers=2)) == list(load_json(path, workers=1))
    assert threads == {"kgprobe-decompress"}


def test_two_workers_on_a_generated_realistic_dump(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_CHUNK_MB, "0.2")
    path = tmp_path / "real.json.gz"
    stats = gen_dump_module().write_realistic_dump(path, 150, seed=3)
    one = list(load_json(path, workers=1))
    two = list(load_json(path, workers=2))
    assert one == two
    assert len([r for r in two if isinstance(r, EntityRecord)]) == stats["entities"]


def test_a_malformed_line_in_a_worker_names_its_line_and_byte_offset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken line far into the file (in a later chunk): an error naming file:line and the
    line's byte offset, counted from the file's bytes here; the lines after it still load."""
    monkeypatch.setenv(ENV_CHUNK_MB, "0.4")
    lines = _real_lines()
    lines[17] = '{"id": "Q1", "claims": broken'
    path = _dump(tmp_path / "dump.json", lines)
    raw = path.read_bytes().split(b"\n")
    lineno = raw.index(b'{"id": "Q1", "claims": broken,') + 1
    offset = sum(len(line) + 1 for line in raw[:lineno - 1])
    for workers in (1, 2):
        recs = list(load_json(path, workers=workers))
        errors = [r for r in recs if isinstance(r, ErrorRecord)]
        assert len(errors) == 1
        assert errors[0].location == f"{path}:{lineno}"
        assert f"byte offset {offset:,}" in errors[0].message
        assert len([r for r in recs if isinstance(r, EntityRecord)]) == len(lines) - 1


def test_a_truncated_gz_with_workers_hands_on_every_complete_line_then_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A .gz cut short: 2 workers hand on the records of every complete line, as 1 does, then
    the one-line error naming the last line read."""
    from kgprobe.errors import InputError

    monkeypatch.setenv(ENV_CHUNK_MB, "0.2")
    whole = tmp_path / "dump.json.gz"
    gen_dump_module().write_dump(whole, 6_000, seed=5)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole.read_bytes()[: int(whole.stat().st_size * 0.6)])
    last_line = zlib.decompressobj(wbits=31).decompress(cut.read_bytes()).count(b"\n")
    seen = {}
    for workers in (1, 2):
        recs: list[Any] = []
        with pytest.raises(InputError, match="truncated") as info:
            recs.extend(load_json(cut, workers=workers))
        seen[workers] = (recs, str(info.value))
    assert seen[1] == seen[2]
    assert len(seen[2][0]) > 1000 and f"{cut}:{last_line}, none after it" in seen[2][1]


@pytest.mark.parametrize("limit", [0, 1, 5, 23])
def test_the_entity_limit_holds_exactly_with_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     limit: int) -> None:
    monkeypatch.setenv(ENV_CHUNK_MB, "0.4")
    lines = _real_lines()
    path = _dump(tmp_path / "dump.json", lines)
    expected = [json.loads(line)["id"] for line in lines][:limit]
    for workers in (1, 2):
        got = [r.qid for r in load_json(path, Filters(limit=limit), workers=workers)
               if isinstance(r, EntityRecord)]
        assert got == expected


def test_workers_below_one_is_one_line(tmp_path: Path) -> None:
    from kgprobe.errors import ConfigError

    with pytest.raises(ConfigError, match="--workers must be at least 1"):
        load_json(_dump(tmp_path / "d.json", _real_lines()[:1]), workers=0)


# --------------------------------------------------------------------------- the CLI, a real graph


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_kgprobe(args, env, timeout=600)


def _graph_state(graph: Any) -> dict[str, Any]:
    """What the graph holds, counted and keyed by queries of its own."""
    return {
        "entities": graph.read("MATCH (e:Entity) RETURN count(e) AS n")[0]["n"],
        "labelled": graph.read("MATCH (e:Entity) WHERE e.label IS NOT NULL RETURN count(e) AS n")[0]["n"],
        "types": graph.read("MATCH ()-[t:INSTANCE_OF]->() RETURN count(t) AS n")[0]["n"],
        "facts": sorted((r["k"], r["p"], r["q"]) for r in graph.read(
            "MATCH ()-[f:FACT]->() RETURN f.key AS k, f.pid AS p, f.qualifiers AS q")),
    }


def test_ingest_with_two_workers_writes_the_graph_of_one(
        tmp_path: Path, kgprobe_env: dict[str, str], graph: Any) -> None:
    path = tmp_path / "real.json.gz"
    gen_dump_module().write_realistic_dump(path, 60, seed=5)
    env = {**kgprobe_env, ENV_CHUNK_MB: "0.1"}
    one = _cli("ingest", str(path), "--workers", "1", "--json", env=env)
    assert one.returncode == 0, one.stderr
    state = _graph_state(graph)
    graph.write("MATCH (n) DETACH DELETE n")
    two = _cli("ingest", str(path), "--workers", "2", "--json", env=env)
    assert two.returncode == 0, two.stderr
    assert json.loads(two.stdout) == json.loads(one.stdout)
    assert _graph_state(graph) == state and len(state["facts"]) > 50


def test_malformed_lines_in_workers_count_against_max_errors(
        tmp_path: Path, kgprobe_env: dict[str, str], graph: Any) -> None:
    """Two broken lines in different chunks, parsed by 2 workers: with --max-errors 5 both are
    reported with their byte offsets and the rest loads; with --max-errors 1 the ingest stops
    in one line."""
    lines = _real_lines()
    lines[3] = lines[20] = "{not json"
    path = _dump(tmp_path / "dump.json", lines)
    raw = path.read_bytes().split(b"\n")
    offsets = [sum(len(x) + 1 for x in raw[:i]) for i, x in enumerate(raw) if x == b"{not json,"]
    env = {**kgprobe_env, ENV_CHUNK_MB: "0.4"}
    ok = _cli("ingest", str(path), "--workers", "2", "--max-errors", "5", "--json", env=env)
    assert ok.returncode == 0, ok.stderr
    summary = json.loads(ok.stdout)
    assert summary["errors"] == 2 and summary["entities"] == len(lines) - 2
    assert [f"byte offset {o:,}" in e for o, e in zip(offsets, summary["first_errors"], strict=True)] == [True, True]
    stopped = _cli("ingest", str(path), "--workers", "2", "--max-errors", "1", env=env)
    assert stopped.returncode == 4
    assert "error budget 1" in stopped.stderr and "Traceback" not in stopped.stderr


def test_a_killed_ingest_resumes_at_its_checkpoint(
        tmp_path: Path, kgprobe_env: dict[str, str], graph: Any) -> None:
    """SIGKILL after the first checkpoint, then --resume: the graph equals a clean ingest's,
    and the resumed run read only the rest of the file (fewer records; it says where)."""
    from kgprobe.config import Settings
    from kgprobe.loaders.resume import checkpoint_file

    path = tmp_path / "real.json"
    gen_dump_module().write_realistic_dump(path, 240, seed=7)
    env = {**kgprobe_env, ENV_CHUNK_MB: "0.05"}
    checkpoint = checkpoint_file(Settings.load().home, path)

    clean = _cli("ingest", str(path), "--json", "--batch-size", "20", env=env)
    assert clean.returncode == 0, clean.stderr
    expected = _graph_state(graph)
    assert not checkpoint.exists()  # a complete load leaves none
    graph.write("MATCH (n) DETACH DELETE n")

    proc = start_kgprobe(["ingest", str(path), "--json", "--batch-size", "20", "--workers", "2"], env,
                         text=False)
    try:
        deadline = time.monotonic() + 300
        while not checkpoint.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, "the ingest ended before it could be killed"
    saved = json.loads(checkpoint.read_text())
    assert 0 < saved["offset"] < path.stat().st_size
    assert _graph_state(graph) != expected  # stopped midway

    resumed = _cli("ingest", str(path), "--json", "--resume", "--batch-size", "20", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming at byte {saved['offset']:,} (line {saved['line']:,})" in resumed.stderr
    assert json.loads(resumed.stdout)["records"] < json.loads(clean.stdout)["records"]
    assert _graph_state(graph) == expected
    assert not checkpoint.exists()


def test_resume_refuses_a_changed_file(tmp_path: Path, kgprobe_env: dict[str, str]) -> None:
    from kgprobe.config import Settings
    from kgprobe.loaders.resume import save_checkpoint

    path = _dump(tmp_path / "dump.json", _real_lines()[:3])
    save_checkpoint(Settings.load().home, Position(source=str(path), offset=10, line=2))
    with path.open("a") as fh:
        fh.write("\n")
    result = _cli("ingest", str(path), "--resume", env=kgprobe_env)
    assert result.returncode == 4
    assert "changed since its checkpoint" in result.stderr and "Traceback" not in result.stderr


def test_progress_names_the_bytes_read_the_rate_and_the_eta() -> None:
    """120 of 286 MB read in 10 s (from the run's first position at 0): 12.0 MB/s, and the
    166 MB left take 13.8 s."""
    from kgprobe.api import _bytes_progress

    first = Position(source="d.json", offset=0, line=1, read=0, size=286_000_000)
    last = Position(source="d.json", offset=120_000_000, line=9, read=120_000_000, size=286_000_000)
    assert _bytes_progress(last, first, 10.0) == "120.0/286.0 MB read (12.0 MB/s, ETA 0:00:13)"


@pytest.mark.parametrize("name", ["dump.json", "dump.json.gz"])
def test_a_resumed_read_gives_exactly_the_records_after_its_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Started at the third position (a seek, or for .gz decompressed and dropped): the records
    that a whole read gives after that position, no more, no fewer; --limit counts on."""
    monkeypatch.setenv(ENV_CHUNK_MB, "0.4")
    path = _dump(tmp_path / name, _real_lines())
    whole = list(load_json(path, positions=True))
    marks = [i for i, r in enumerate(whole) if isinstance(r, Position)]
    at = marks[2]
    start = whole[at]
    assert isinstance(start, Position)
    for workers in (1, 2):
        assert list(load_json(path, positions=True, start=start, workers=workers)) == whole[at + 1:]
    limited = list(load_json(path, Filters(limit=start.entities + 2), start=start))
    assert [r.qid for r in limited if isinstance(r, EntityRecord)] == \
        [r.qid for r in whole[at + 1:] if isinstance(r, EntityRecord)][:2]
