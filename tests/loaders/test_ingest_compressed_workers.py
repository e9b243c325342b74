"""A multi-stream .bz2 decompressed in the workers (issue 37 #3, kgprobe/loaders/streams.py):
split at its stream boundaries, each worker decompresses a run of whole streams, and the records,
their lines and byte offsets, and the graph are those of the file read by one process.

The fixtures are the real entity lines of tests/fixtures, compressed in groups with Python's
bz2 module and concatenated (what a parallel bzip2 writes), cut at byte positions that fall
mid-line, exactly at a line start, and inside a line spanning three streams."""

from __future__ import annotations

import bz2
import io
import json
from pathlib import Path
from typing import Any

import pytest
from ingest_support import FILES_ONLY, graph_dump, import_rows
from test_ingest_workers import _cli, _real_lines

from kgprobe.errors import InputError
from kgprobe.loaders.parallel import ENV_CHUNK_MB
from kgprobe.loaders.streams import Run, bz2_stream_starts, run_text, zst_frame_starts
from kgprobe.loaders.wikidata_json import load_json
from kgprobe.records import EntityRecord, ErrorRecord, Position


def _text(lines: list[str]) -> bytes:
    return ("[\n" + ",\n".join(lines) + "\n]\n").encode()


def _cuts(text: bytes) -> list[int]:
    """Stream boundaries in ``text``: mid-line every ~1/9 of it, one just after a newline (a
    line starting exactly at a boundary), and two inside one long line (a stream of no
    newline)."""
    n = len(text)
    cuts = {n * i // 9 + 13 for i in range(1, 9)}
    cuts.add(text.index(b"\n", n // 2) + 1)
    long_line = max(range(len(text.split(b"\n"))), key=lambda i: len(text.split(b"\n")[i]))
    at = sum(len(x) + 1 for x in text.split(b"\n")[:long_line])
    cuts |= {at + 100, at + 2000}
    return sorted(cuts)


def _zstd_frame(i: int, data: bytes) -> bytes:
    """A zstd frame of ``data``, its header varied by ``i``: with or without the content size
    and a checksum (written by a stream writer, the size is not in the header)."""
    zstandard = pytest.importorskip("zstandard")
    if i % 2:
        return bytes(zstandard.ZstdCompressor(level=3, write_checksum=True).compress(data))
    out = io.BytesIO()
    with zstandard.ZstdCompressor(level=1).stream_writer(out, closefd=False) as w:
        w.write(data)
    return out.getvalue()


def _multistream(path: Path, text: bytes, cuts: list[int]) -> list[int]:
    """Write ``text`` as one bzip2 stream (or, for a .zst path, one zstd frame) per piece
    between ``cuts``; the streams' start offsets."""
    bounds = [0, *cuts, len(text)]
    pack = _zstd_frame if path.suffix == ".zst" else (lambda _i, data: bz2.compress(data))
    streams = [pack(i, text[a:b]) for i, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False))]
    path.write_bytes(b"".join(streams))
    starts = [0]
    for s in streams[:-1]:
        starts.append(starts[-1] + len(s))
    return starts


def _with_a_colliding_statement(line: str) -> str:
    """The entity ``line`` with a second statement under the id of its first item-valued one,
    pointing elsewhere: the ingest refuses it (statement key already used)."""
    ent = json.loads(line)
    for claims in ent["claims"].values():
        for st in claims:
            value = st["mainsnak"].get("datavalue", {}).get("value")
            if isinstance(value, dict) and value.get("entity-type") == "item":
                other = json.loads(json.dumps(st))
                other["mainsnak"]["datavalue"]["value"].update({"id": "Q4", "numeric-id": 4})
                claims.append(other)
                return json.dumps(ent)
    raise AssertionError("no item-valued statement")


def _located(recs: list[Any]) -> list[tuple[str, str]]:
    return [(type(r).__name__, getattr(r, "location", "")) for r in recs if not isinstance(r, Position)]


def test_stream_starts_are_found_and_a_lookalike_is_not(tmp_path: Path) -> None:
    """Every stream's start, and no other offset: the header bytes not preceded by a stream's
    end-of-stream marker (inside compressed data, or after other bytes) are not a start."""
    text = _text(_real_lines())
    starts = _multistream(tmp_path / "d.json.bz2", text, _cuts(text))
    with (tmp_path / "d.json.bz2").open("rb") as fh:
        assert list(bz2_stream_starts(fh)) == starts
    fake = bz2.compress(b"a") + b"not an end-of-stream" + b"BZh91AY&SY" + bz2.compress(b"b")[10:]
    assert list(bz2_stream_starts(io.BytesIO(fake))) == [0]


def test_zstd_frames_are_walked_by_their_headers(tmp_path: Path) -> None:
    """Every frame's start (headers with and without content size and checksum), a skippable
    frame between two taken as part of the frame before it."""
    text = _text(_real_lines())
    path = tmp_path / "d.json.zst"
    starts = _multistream(path, text, _cuts(text))
    with path.open("rb") as fh:
        assert list(zst_frame_starts(fh)) == starts
    a, b = _zstd_frame(0, b"a\n"), _zstd_frame(1, b"b\n")
    skippable = (0x184D2A53).to_bytes(4, "little") + (5).to_bytes(4, "little") + b"12345"
    assert list(zst_frame_starts(io.BytesIO(a + skippable + b))) == [0, len(a) + len(skippable)]


def test_a_run_that_ends_inside_a_stream_is_one_line(tmp_path: Path) -> None:
    """The worker's check of a boundary: a run whose end is not where a stream ended (a false
    match the scan let through) stops the load with one line, not with wrong lines."""
    text = _text(_real_lines())
    path = tmp_path / "d.json.bz2"
    starts = _multistream(path, text, _cuts(text))
    with pytest.raises(InputError, match=f"byte {starts[2] - 50:,} looked like the start of a bzip2 stream"):
        run_text(str(path), "bz2", Run(starts[1], starts[2] - 50), None)
    assert run_text(str(path), "bz2", Run(starts[1], starts[2]), None).error is None


@pytest.mark.parametrize(("chunk_mb", "suffix"), [("0.02", ".bz2"), ("0.3", ".bz2"), ("0.02", ".zst")])
def test_two_workers_decompress_the_streams_and_give_the_records_of_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk_mb: str, suffix: str) -> None:
    """The records of 2 workers equal one process's, locations included; a checkpoint falls
    after each run of streams, at a line start, its compressed bytes those of whole streams
    (the progress counts the file as stored, to its size)."""
    monkeypatch.setenv(ENV_CHUNK_MB, chunk_mb)
    lines = _real_lines()
    text = _text(lines)
    path = tmp_path / f"dump.json{suffix}"
    starts = _multistream(path, text, _cuts(text))
    one = list(load_json(path, workers=1))
    two = list(load_json(path, workers=2, positions=True))
    got = [r for r in two if not isinstance(r, Position)]
    assert got == one and _located(got) == _located(one)
    assert len([r for r in one if isinstance(r, EntityRecord)]) == len(lines)
    marks = [r for r in two if isinstance(r, Position)]
    size = path.stat().st_size
    assert len(marks) >= 2
    for m in marks:
        assert m.read in {*starts[1:], size} and m.size == size
        assert text[m.offset - 1:m.offset] == b"\n" and m.line == text[:m.offset].count(b"\n") + 1
    assert marks[-1].read == size and marks[-1].offset == len(text)


def test_a_malformed_line_in_a_later_stream_names_its_line_and_byte_offset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_CHUNK_MB, "0.02")
    lines = _real_lines()
    lines[19] = '{"id": "Q1", "claims": broken'
    text = _text(lines)
    path = tmp_path / "dump.json.bz2"
    _multistream(path, text, _cuts(text))
    raw = text.split(b"\n")
    lineno = raw.index(b'{"id": "Q1", "claims": broken,') + 1
    offset = sum(len(line) + 1 for line in raw[:lineno - 1])
    errors = [r for r in load_json(path, workers=2) if isinstance(r, ErrorRecord)]
    assert len(errors) == 1 and errors[0].location == f"{path}:{lineno}"
    assert errors[0].message.endswith(f"(line at byte offset {offset:,})")


def test_a_truncated_multistream_file_hands_on_what_one_process_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_CHUNK_MB, "0.02")
    text = _text(_real_lines())
    whole = tmp_path / "whole.json.bz2"
    _multistream(whole, text, _cuts(text))
    cut = tmp_path / "cut.json.bz2"
    cut.write_bytes(whole.read_bytes()[: int(whole.stat().st_size * 0.7)])
    seen = {}
    for workers in (1, 2):
        recs: list[Any] = []
        with pytest.raises(InputError, match="truncated") as info:
            recs.extend(load_json(cut, workers=workers))
        seen[workers] = (recs, _located(recs), str(info.value))
    assert seen[1] == seen[2] and len(seen[2][0]) > 100


@pytest.mark.parametrize(("suffix", "unit", "writer"), [(".bz2", "one bzip2 stream", "parallel bzip2"),
                                                       (".zst", "one zstd frame", "pzstd")])
def test_a_single_stream_file_with_workers_is_decompressed_here_and_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        suffix: str, unit: str, writer: str) -> None:
    monkeypatch.setenv(ENV_CHUNK_MB, "0.1")
    path = tmp_path / f"one.json{suffix}"
    text = _text(_real_lines())
    path.write_bytes(bz2.compress(text) if suffix == ".bz2" else _zstd_frame(1, text))
    assert list(load_json(path, workers=2)) == list(load_json(path, workers=1))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and unit in err[0] and writer in err[0]


def test_a_zst_file_without_the_zstandard_package_is_one_line_naming_the_extra(tmp_path: Path) -> None:
    """Exit 2 and one line naming ``kgprobe[zst]``, never an ImportError traceback (the bulk
    import files only: no server needed)."""
    import os
    import subprocess
    import sys

    path = tmp_path / "dump.json.zst"
    path.write_bytes(b"(\xb5/\xfd")
    code = ("import sys; sys.modules['zstandard'] = None; sys.argv[1:] = ['ingest', sys.argv[1], '--bulk', sys.argv[2]]; "
            "from kgprobe.cli import main; main()")
    proc = subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path / "import")],
                          env={**os.environ, **FILES_ONLY},
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1:] == [
        f"error: {path}: reading a .zst file needs the zstandard package: pip install 'kgprobe[zst]'"]


def test_a_corrupt_zst_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "dump.json.zst"
    path.write_bytes(_zstd_frame(1, b"[\n")[:4] + b"\x00" * 40)
    with pytest.raises(InputError, match="truncated or corrupt compressed file"):
        list(load_json(path))


@pytest.mark.parametrize("suffix", [".bz2", ".zst"])
def test_a_resumed_multistream_read_starts_at_its_stream_and_gives_the_records_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    """A checkpoint of a stream run, saved and loaded as the ingest does: resumed by 2 workers,
    the records after it, no more, no fewer, and nothing before its stream is decompressed (the
    streams between the first and it, overwritten with zeros, are never read); one process
    resumes as before, decompressing up to it."""
    from kgprobe.loaders.resume import load_checkpoint, save_checkpoint

    monkeypatch.setenv(ENV_CHUNK_MB, "0.02")
    text = _text(_real_lines())
    path = tmp_path / f"dump.json{suffix}"
    starts = _multistream(path, text, _cuts(text))
    whole = list(load_json(path, workers=2, positions=True))
    at = [i for i, r in enumerate(whole) if isinstance(r, Position)][3]
    after = [r for r in whole[at + 1:] if not isinstance(r, Position)]
    save_checkpoint(tmp_path, whole[at])  # type: ignore[arg-type]
    start = load_checkpoint(tmp_path, path)
    assert start is not None and start.stream == whole[at].read in starts  # type: ignore[union-attr]
    assert list(load_json(path, workers=1, start=start)) == after
    data = bytearray(path.read_bytes())
    data[starts[1]:start.stream - 11] = bytes(start.stream - 11 - starts[1])
    path.write_bytes(bytes(data))
    resumed = list(load_json(path, workers=2, start=start))
    assert resumed == after and _located(resumed) == _located(after) and after


# --------------------------------------------------------------------------- the CLI


def test_bulk_rows_of_two_workers_on_a_multistream_bz2_are_those_of_the_plain_file(tmp_path: Path) -> None:
    """--bulk with 2 workers on the .bz2 (rows built where the streams are decompressed) writes
    the import files of one process reading the plain file."""
    lines = _real_lines()
    lines[5] = "{not json"
    lines[20] = _with_a_colliding_statement(lines[20])  # refused in the worker, not the reader
    text = _text(lines)
    plain = tmp_path / "dump.json"
    plain.write_bytes(text)
    _multistream(tmp_path / "dump.json.bz2", text, _cuts(text))
    r1 = _cli("ingest", str(plain), "--bulk", str(tmp_path / "one"), "--workers", "1", "--json",
              env=FILES_ONLY)
    r2 = _cli("ingest", str(tmp_path / "dump.json.bz2"), "--bulk", str(tmp_path / "two"),
              "--workers", "2", "--json", env={**FILES_ONLY, ENV_CHUNK_MB: "0.02"})
    assert r1.returncode == r2.returncode == 0, r1.stderr + r2.stderr
    s1, s2 = json.loads(r1.stdout), json.loads(r2.stdout)
    assert s2["first_errors"] == [e.replace(str(plain), str(tmp_path / "dump.json.bz2"))
                                  for e in s1["first_errors"]] and s1["errors"] == 2
    line = text.split(b"\n").index(lines[20].encode() + b",") + 1
    assert f"{plain}:{line}: statement key" in s1["first_errors"][1]
    assert s1["first_errors"][1].endswith(f"at {plain}:{line}")
    assert {k: v for k, v in s1.items() if k != "first_errors"} == \
        {k: v for k, v in s2.items() if k != "first_errors"}
    assert import_rows(tmp_path / "one") == import_rows(tmp_path / "two")


def test_ingest_with_two_workers_of_a_multistream_bz2_writes_the_graph_of_the_plain_file(
        tmp_path: Path, kgprobe_env: dict[str, str], graph: Any) -> None:
    text = _text(_real_lines())
    plain = tmp_path / "dump.json"
    plain.write_bytes(text)
    packed = tmp_path / "dump.json.bz2"
    _multistream(packed, text, _cuts(text))
    one = _cli("ingest", str(plain), "--workers", "1", "--json", env=kgprobe_env)
    assert one.returncode == 0, one.stderr
    expected = graph_dump(graph)
    graph.write("MATCH (n) DETACH DELETE n")
    two = _cli("ingest", str(packed), "--workers", "2", "--json",
               env={**kgprobe_env, ENV_CHUNK_MB: "0.02"})
    assert two.returncode == 0, two.stderr
    assert json.loads(two.stdout) == json.loads(one.stdout)
    assert graph_dump(graph) == expected and len(expected[1]) > 50
