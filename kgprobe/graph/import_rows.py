"""The import files' rows read back as JSON lines (what ArcadeDB's GraphImporter reads):
their columns, types and values, and one conversion job over a byte range of a file.

Its own module, importing nothing heavy, because the jobs run in worker processes
(graph/bulk_arcadedb.py `write_arcadedb_files`, `kgprobe.processes.ordered_map`): a worker
that imported graph/bulk.py would load the Neo4j driver (~0.5 CPU-s a worker) to convert CSV.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any, NamedTuple

import orjson

from kgprobe.errors import KgprobeError
from kgprobe.types import Properties

#: Separates the elements of a list property (aliases) in a CSV field: a control character that
#: labels and aliases do not hold (an alias that does is refused, as an error record).
ARRAY_DELIMITER = "\x1f"
_ID_COLUMNS = {":ID": "qid", ":START_ID": "s", ":END_ID": "o"}

def columns(header: list[str]) -> list[tuple[str, str]]:
    """(name, type) of each column of an import file's header (``aliases:string[]``,
    ``qid:ID``, ``:START_ID``, ``year:long``, ``label``)."""
    out = []
    for col in header:
        name, _, kind = col.partition(":")
        if not name:
            out.append((_ID_COLUMNS[":" + kind], "string"))
        elif kind == "ID":
            out.append((name, "string"))
        else:
            out.append((name, kind or "string"))
    return out


def _split_list(text: str) -> list[str]:
    return text.split(ARRAY_DELIMITER)


def _true(text: str) -> bool:
    return text == "true"


#: how a column's text becomes its value (None: the text itself)
_CONVERT: dict[str, Callable[[str], Any] | None] = {
    "string": None, "string[]": _split_list, "long": int, "double": float, "boolean": _true}


def typed(rows: Iterator[list[str]], header: list[str]) -> Iterator[Properties]:
    """CSV rows of an import file as typed properties; an empty field is no property. (Each
    column's conversion is looked up once per file, not once per value: with the JSON
    encoding, most of this conversion's time; docs/benchmarks.md.)"""
    cols = []
    for name, kind in columns(header):
        if kind not in _CONVERT:
            raise KgprobeError(f"bulk load into ArcadeDB: no mapping for a column of type {kind!r}")
        cols.append((name, _CONVERT[kind]))
    for row in rows:
        yield {name: text if conv is None else conv(text)
               for (name, conv), text in zip(cols, row, strict=True) if text}


def read_header(path: Path) -> list[str]:
    with path.open(encoding="utf-8", newline="") as fh:
        return next(csv.reader(fh))


def read_rows(path: Path) -> Iterator[Properties]:
    """An import file's rows as typed properties."""
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        yield from typed(reader, next(reader))


def line(row: Properties) -> bytes:
    """One JSON line of GraphImporter's input (UTF-8, as ``json.dumps(..., ensure_ascii=False)``
    writes it, in a tenth of the time)."""
    return orjson.dumps(row) + b"\n"


class Job(NamedTuple):
    """Bytes ``start``..``end`` of an import file (whole rows) for ``label``, converted into
    files named from ``out``."""

    edge: bool
    label: str
    path: str
    start: int
    end: int
    out: str


class Done(NamedTuple):
    """A job's parts: its vertex rows (in ``out``.v.jsonl) and Entity numbers patched (in
    ``out``.p.jsonl), or, for edges, per set of numeric columns present, in the order first met,
    the set and its rows (in ``out``.e<i>.jsonl)."""

    rows: int
    patched: int
    splits: list[tuple[tuple[str, ...], int]]


def ranges(path: Path, part: int) -> Iterator[tuple[int, int]]:
    """Byte ranges of ``path``'s rows, each ending at a line end, about ``part`` bytes each (a
    ``-ml`` file, whose rows span lines, in one range)."""
    with path.open("rb") as fh:
        start = len(fh.readline())
        size = path.stat().st_size
        whole = path.name.endswith("-ml.csv")
        while start < size:
            end = size if whole or start + part >= size else start + part
            if end < size:
                fh.seek(end)
                end += len(fh.readline())
            yield start, end
            start = end


def convert(job: Job) -> Done:
    """One job: its rows read back with Python's csv module, written as JSON lines (module
    level: it runs in worker processes)."""
    path = Path(job.path)
    head = read_header(path)
    cols = columns(head)
    numeric = [c for c, k in cols if k not in ("string", "string[]")]  # (column order: the same file every run)
    with path.open("rb") as fh:
        fh.seek(job.start)
        text = fh.read(job.end - job.start).decode("utf-8")
    rows = typed(csv.reader(io.StringIO(text, newline="")), head)
    if not job.edge:
        if numeric and job.label != "Entity":
            raise KgprobeError(f"bulk load into ArcadeDB: numeric columns {sorted(numeric)} "
                               f"on {job.label} (only Entity's are patched)")
        n = patched = 0
        patch: IO[bytes] | None = None
        try:
            with open(f"{job.out}.v.jsonl", "wb") as out:
                for row in rows:
                    numbers = {c: row.pop(c) for c in numeric if c in row}
                    if numbers:
                        if patch is None:
                            patch = open(f"{job.out}.p.jsonl", "wb")  # noqa: SIM115 - closed below
                        patch.write(line({"qid": row["qid"], "props": numbers}))
                        patched += 1
                    out.write(line(row))
                    n += 1
        finally:
            if patch is not None:
                patch.close()
        return Done(n, patched, [])
    # one file per set of numeric columns present: an absent number stays absent
    split: dict[tuple[str, ...], tuple[IO[bytes], list[int]]] = {}
    try:
        for row in rows:
            present = tuple(c for c in numeric if c in row)
            got = split.get(present)
            if got is None:
                got = split[present] = (open(f"{job.out}.e{len(split)}.jsonl", "wb"), [0])  # noqa: SIM115
            got[0].write(line(row))
            got[1][0] += 1
    finally:
        for fh_, _ in split.values():
            fh_.close()
    return Done(sum(c[0] for _, c in split.values()), 0, [(k, c[0]) for k, (_, c) in split.items()])


