"""The bulk first load of an empty Neo4j database (``kgprobe ingest --bulk DIR``); the managed
ArcadeDB's bulk load (graph/bulk_arcadedb.py) takes the same files, turned into what its
GraphImporter reads.

The online ingest (graph/ingest.py) writes every node and edge with a MERGE over Bolt: ~10k
statements/s at best, because each row costs the server an index look-up and a transaction's
share. An empty database needs none of that. This module streams the same rows (`batch_rows`,
`fact_properties`: one mapping for both paths) into the CSV files of ``neo4j-admin database
import full`` (bounded memory: one batch at a time), and `run_import` runs that tool, which
writes the store files directly. The constraints and indexes of graph/schema.py are created on
the first connection afterwards (`ensure_schema`, as for every connection), built in bulk from
the imported data.

What makes the imported graph the online ingest's:

* Node ids are the online MERGE keys: ``qid`` for entities (the import's id space), ``pid`` for
  relations, the statement key on FACT edges and FactSlot nodes, ``T|Q`` on TypeSlot nodes.
* Every Entity node is written once, as exactly one of: a type (the entity's row with its
  sampling counters added), an entity, or a bare stub (an id that facts and types refer to and
  no record describes). Which one is known only at the end, so entity rows go to part files
  first and the referred ids to a list; `BulkWriter.finish` sorts them, using two `QidSet` s
  (the import's own ``--skip-duplicate-nodes`` keeps an arbitrary one of two rows, not the
  first: measured, so it is not used).
* The sampling index (graph/sample_index.py) is numbered as one online writer numbers it on an
  empty graph: per relation and per type, ordinals 0, 1, 2 … in input order; the counters on
  Relation and type Entity nodes and the SampleIndex marker are written with them.
* Every file's rows are in input order (the slots, the referred ids in the order first met),
  never grouped by batch: where batches are cut (a checkpoint's flush, one worker's batches of
  records against N workers' chunks) changes no byte of the files.

With ``--workers N`` > 1 the rows are built where the records are parsed: each worker runs
`build_chunk` on its chunk (the checks, `batch_rows`, `format_batch`: the one formatting code of
both paths) and hands back formatted text (`ChunkRows`) instead of records; `BulkWriter` writes
it in the chunks' order, adding only what depends on the chunks before (an entity met again, the
sampling ordinals, relation properties). A chunk is then one batch.

What it assumes (as in a Wikidata dump): each entity and each statement once in the input. An
entity line met again is an error record, left out with its row, type edges, facts and slots
(the online ingest would merge the two), wherever the batches were cut: in the batch being
filled by `_LinesOnce`, against the batches before by `BulkWriter`. What it refers to (ids as
stubs, relations) stays, in both. A statement key repeated across
batches under another entity's line leaves two FactSlot nodes with that key, and the unique
constraint on ``FactSlot.key`` then cannot be created (load such an input online). Redirect
nodes are written; they are resolved (edges moved to the target) by the next online ingest,
which resolves pending redirects at its end.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NamedTuple, TypedDict, TypeVar, cast

from kgprobe.config import write_private_text
from kgprobe.errors import ConfigError, KgprobeError
from kgprobe.graph.import_rows import ARRAY_DELIMITER
from kgprobe.graph.ingest import (
    SAMPLE_INDEX_MARKER,
    SAMPLE_INDEX_VERSION,
    BatchRows,
    IngestSummary,
    RecordBatcher,
    Refs,
    RelationProps,
    _Written,
    batch_rows,
)
from kgprobe.records import (
    EntityRecord,
    ErrorRecord,
    FactRecord,
    Position,
    Record,
    RedirectRecord,
    RelationRecord,
    SkipRecord,
)
from kgprobe.runtime import rare_collections

_BuiltT = TypeVar("_BuiltT")

#: The database the import writes (Neo4j Community has one user database).
DATABASE = "neo4j"
#: The FACT edge's properties (`fact_properties` builds them) and their Neo4j CSV types.
FACT_COLUMNS: dict[str, str] = {
    "pid": "string", "rank": "string", "statement_id": "string", "source": "string",
    **{f"{p}_{k}": t for p in ("start", "end", "pit")
       for k, t in (("time", "string"), ("precision", "long"), ("year", "long"), ("sort", "long"),
                    ("calendar", "string"))},
    "qualifiers": "string",
}
_ENTITY_FIXED = ("label", "aliases", "description")
_TYPE_COUNTERS = ",member_slots_next:long,member_slots:long"
#: An entity file's extra properties and their CSV types (its header is fixed by them).
Signature = tuple[tuple[str, str], ...]


class _Absent:
    """A property left out: written as an empty unquoted field, which the import reads as no
    property (an empty string is written quoted, ``""``, and stays an empty string). A
    number to the csv module (so it is not quoted), the empty string as text."""

    def __float__(self) -> float:
        return 0.0

    def __str__(self) -> str:
        return ""


ABSENT: Any = _Absent()


def _csv_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    return "string"


def _field(value: Any) -> Any:
    """A property value as the import reads it (booleans as ``true``/``false``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


class FileState(TypedDict):
    """An import file at a checkpoint (`_CsvFile.saved`)."""

    size: int
    rows: int
    multiline: FileState | None


class _CsvFile:
    """One import file: a header line, then rows (strings quoted, numbers bare, `ABSENT` empty).

    A batch's rows are formatted at once; a row whose text spans lines (a value with a line
    break) goes to a sibling ``-ml`` file instead, which the import reads with
    ``--multiline-fields`` (slower, so only the files that need it)."""

    def __init__(self, directory: Path, name: str, header: str) -> None:
        self.directory, self.name, self.header = directory, name, header
        self.rows = 0
        self._fh: IO[str] | None = None
        self.multiline: _CsvFile | None = None
        self._buf = io.StringIO()
        self._writer = csv.writer(self._buf, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")

    def _open(self) -> IO[str]:
        if self._fh is None:
            self._fh = (self.directory / self.name).open("w", encoding="utf-8", newline="")
            self._fh.write(self.header + "\n")
        return self._fh

    def format(self, rows: Sequence[Sequence[Any]]) -> str:
        buf = self._buf
        buf.seek(0)
        buf.truncate()
        self._writer.writerows(rows)
        return buf.getvalue()

    def write(self, rows: Sequence[Sequence[Any]],
              multiline: Callable[[Sequence[Any], str], None] | None = None) -> None:
        """Append ``rows``; a row that spans lines goes to ``multiline`` (row, its text) when
        given, else to the multiline sibling."""
        if not rows:
            return
        text = self.format(rows)
        if text.count("\n") == len(rows) and "\r" not in text:
            self._open().write(text)
            self.rows += len(rows)
            return
        for row in rows:  # some value holds a line break: find which rows
            line = self.format([row])
            if multiline is not None and (line.count("\n") != 1 or "\r" in line):
                multiline(row, line)
            else:
                self.write_text(line)

    def add(self, lines: Lines) -> None:
        """Append rows formatted by `format_rows`."""
        if lines.n:
            self._open().write(lines.text)
            self.rows += lines.n
        for line in lines.multiline:
            self.write_text(line)

    def add_lines(self, lines: list[str]) -> None:
        """Append formatted rows, one string each."""
        text = "".join(lines)
        if _one_line(text, len(lines)):
            self.add(Lines(text, len(lines), []))
        else:
            for line in lines:
                self.write_text(line)

    def write_text(self, line: str) -> None:
        """One formatted row (from `format`), to this file or its multiline sibling."""
        if line.count("\n") == 1 and "\r" not in line:
            self._open().write(line)
            self.rows += 1
            return
        if self.multiline is None:
            stem = self.name.removesuffix(".csv")
            self.multiline = _CsvFile(self.directory, f"{stem}-ml.csv", self.header)
        self.multiline._open().write(line)
        self.multiline.rows += 1

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self.multiline is not None:
            self.multiline.close()

    def saved(self) -> FileState:
        """What a checkpoint keeps of this file: its bytes so far (written through to the
        operating system, so that a killed process leaves them) and rows, and its sibling's."""
        size = 0
        if self._fh is not None:
            self._fh.flush()
            size = os.fstat(self._fh.fileno()).st_size
        ml = self.multiline.saved() if self.multiline is not None else None
        return {"size": size, "rows": self.rows, "multiline": ml}

    def restore(self, state: FileState) -> None:
        """This file as it was at a checkpoint: cut back to its bytes then (rows written after
        it are gone), appended to from there; a file that had no rows then is removed."""
        path = self.directory / self.name
        if state["size"]:
            if not path.is_file() or path.stat().st_size < state["size"]:
                raise ConfigError(f"--resume: {path} is shorter than at the checkpoint; the bulk "
                                  "directory was changed, so start again with an empty one")
            os.truncate(path, state["size"])
            self._fh = path.open("a", encoding="utf-8", newline="")
        else:
            path.unlink(missing_ok=True)
        self.rows = state["rows"]
        ml = state["multiline"]
        if ml is None:
            (self.directory / f"{self.name.removesuffix('.csv')}-ml.csv").unlink(missing_ok=True)
        else:
            stem = self.name.removesuffix(".csv")
            self.multiline = _CsvFile(self.directory, f"{stem}-ml.csv", self.header)
            self.multiline.restore(ml)

    def files(self) -> list[_CsvFile]:
        """This file and its multiline sibling, those that hold rows."""
        return [f for f in (self, self.multiline) if f is not None and f.rows]


_BUF = io.StringIO()
_CSV = csv.writer(_BUF, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")


def _format(rows: Sequence[Sequence[Any]]) -> str:
    """Rows as the import reads them (the module's own writer: call it from one thread, as
    `format_batch` is: the intake thread, or a worker process)."""
    _BUF.seek(0)
    _BUF.truncate()
    _CSV.writerows(rows)
    return _BUF.getvalue()


def _quote(value: str) -> str:
    """A string field as `_format` writes it."""
    return '"' + value.replace('"', '""') + '"'


def _one_line(text: str, rows: int) -> bool:
    return text.count("\n") == rows and "\r" not in text


class Lines(NamedTuple):
    """Formatted rows: the text of those on one line each, how many, and each row whose text
    spans lines (it goes to a ``-ml`` file, read with ``--multiline-fields``)."""

    text: str
    n: int
    multiline: list[str]

    def without(self, subjects: set[str]) -> Lines:
        """These rows less those whose first field is one of ``subjects`` (rare: an entity
        refused after its rows were formatted)."""
        starts = tuple(_quote(q) + "," for q in subjects)
        kept = [ln + "\n" for ln in self.text.split("\n")[:-1] if not ln.startswith(starts)]
        return Lines("".join(kept), len(kept), [ln for ln in self.multiline if not ln.startswith(starts)])


def format_rows(rows: Sequence[Sequence[Any]]) -> Lines:
    """``rows`` formatted, those that span lines apart."""
    if not rows:
        return Lines("", 0, [])
    text = _format(rows)
    if _one_line(text, len(rows)):
        return Lines(text, len(rows), [])
    plain: list[str] = []
    multiline: list[str] = []
    for row in rows:  # some value holds a line break: find which rows
        line = _format([row])
        (plain if _one_line(line, 1) else multiline).append(line)
    return Lines("".join(plain), len(plain), multiline)


def _each_line(rows: Sequence[Sequence[Any]]) -> list[str]:
    """Each row's formatted text (one line, or several for a value with a line break)."""
    text = _format(rows)
    if _one_line(text, len(rows)):
        return [ln + "\n" for ln in text.split("\n")[:-1]]
    return [_format([row]) for row in rows]


class Slots(NamedTuple):
    """A batch's sampling slots (FactSlot or TypeSlot rows) in input order, each row's text but
    its ordinal: the ordinal continues its space's count from the batches before, which only
    `BulkWriter` knows. Row i is ``heads[i] + str(base[spaces[i]] + local[i]) + tails[i]``; a
    row's tail is its subject's field (``",<subject>\\n``)."""

    spaces: list[str]
    #: the row's ordinal among its space's rows in this batch
    local: list[int]
    heads: list[str]
    tails: list[str]
    #: rows per space
    counts: dict[str, int]

    @classmethod
    def numbered(cls, spaces: list[str], heads: list[str], tails: list[str]) -> Slots:
        """Rows of these spaces, heads and tails, numbered within their spaces in order."""
        counts: dict[str, int] = {}
        local: list[int] = []
        for space in spaces:
            n = counts.get(space, 0)
            counts[space] = n + 1
            local.append(n)
        return cls(spaces, local, heads, tails, counts)

    @classmethod
    def of(cls, rows: Iterable[tuple[str, str, str]]) -> Slots:
        """Slots from (space, key, subject) in input order."""
        spaces: list[str] = []
        heads: list[str] = []
        tails: list[str] = []
        for space, key, subject in rows:
            spaces.append(space)
            heads.append(f"{_quote(key)},{_quote(space)[:-1]}:")
            tails.append(f'",{_quote(subject)}\n')
        return cls.numbered(spaces, heads, tails)

    def without(self, refused: set[str]) -> Slots:
        """These slots less the ``refused`` subjects' rows, the rest numbered again."""
        gone = {f'",{_quote(q)}\n' for q in refused}
        keep = [i for i, tail in enumerate(self.tails) if tail not in gone]
        return Slots.numbered([self.spaces[i] for i in keep], [self.heads[i] for i in keep],
                              [self.tails[i] for i in keep])

    def lines(self, next_: dict[str, int]) -> list[str]:
        """The rows' text, numbered on from ``next_`` (each space's count so far), which is
        advanced past them."""
        base = {sp: next_.get(sp, 0) for sp in self.counts}
        for sp, n in self.counts.items():
            next_[sp] = base[sp] + n
        return [f"{h}{base[sp] + i}{t}" for sp, i, h, t
                in zip(self.spaces, self.local, self.heads, self.tails, strict=True)]


@dataclass
class BatchText:
    """One batch's import rows, formatted: everything but what depends on the batches before
    it, which `BulkWriter` adds as it writes them in order (an entity met in an earlier batch,
    the sampling ordinals, the relations' merged properties). Built in the intake thread, or in
    the worker that parsed the batch's chunk (`build_chunk`), so that formatting, the bulk of
    the CSV work, runs on every core."""

    relations: dict[str, RelationProps]
    #: (qid, its file's signature, its row), in input order
    entities: list[tuple[str, Signature, str]]
    #: every id referred to (once within the batch, in the order first met) as ``"Q1"`` lines
    referred: Lines
    instance_of: Lines
    subclass_of: Lines
    inferred: Lines
    facts: Lines
    fact_slots: Slots
    type_slots: Slots
    redirects: list[tuple[str, str]]
    counts: Counter[str]
    errors: list[ErrorRecord]
    #: per fact subject: its facts, qualifiers and temporal facts in the batch (what leaving a
    #: refused entity's facts out takes off the counts)
    by_subject: dict[str, list[int]] = field(default_factory=dict)
    #: the batch's last entity record: the one line whose facts may run on into the next batch
    last_entity: str | None = None


#: Why an entity line met again is refused: one wording wherever the repeat is seen (in the
#: batch being filled, or by the writer against the batches before), so that the summary does
#: not depend on where batches were cut.
MET_AGAIN = "met again (the bulk load takes each entity once: its first line is written)"


def _refusal(qid: str, why: str) -> ErrorRecord:
    return ErrorRecord(location=qid, message=(
        f"entity {qid}: {why}; load it with the online ingest (without --bulk)"))


def signature(props: Mapping[str, object]) -> Signature:
    return tuple(sorted((k, _csv_type(v)) for k, v in props.items() if k not in _ENTITY_FIXED))


def format_batch(b: BatchRows) -> BatchText:
    """The import rows of one batch (`batch_rows`), formatted."""
    errors: list[ErrorRecord] = []
    refused: set[str] = set()
    qids: list[str] = []
    sigs: list[Signature] = []
    rows: list[list[Any]] = []
    for qid, props in b.entities.items():
        aliases = props.get("aliases")
        if aliases and any(ARRAY_DELIMITER in a for a in aliases):
            refused.add(qid)
            errors.append(_refusal(qid, "an alias holds U+001F, which the bulk load uses to separate aliases"))
            continue
        sig = signature(props)
        qids.append(qid)
        sigs.append(sig)
        rows.append([qid, props.get("label", ABSENT),
                     ARRAY_DELIMITER.join(aliases) if aliases else ABSENT,
                     props.get("description", ABSENT), *(_field(props[k]) for k, _t in sig)])
    entities = list(zip(qids, sigs, _each_line(rows) if rows else [], strict=True))
    # type edges: MERGEd online, so one per pair in a batch (the last basis wins)
    instance_of = format_rows([[s, o] for s, o in dict.fromkeys(
        (r["s"], r["o"]) for r in b.instance_of if r["s"] not in refused)])
    subclass_of = format_rows([[s, o] for s, o in dict.fromkeys(
        (r["s"], r["o"]) for r in b.subclass_of if r["s"] not in refused)])
    inferred_pairs = {(r["s"], r["o"]): r["basis"] for r in b.inferred if r["s"] not in refused}
    inferred = format_rows([[s, o, basis] for (s, o), basis in inferred_pairs.items()])
    cols = tuple(FACT_COLUMNS)
    fact_rows = []
    for f_ in b.facts:
        props = f_["props"]
        if not props.keys() <= FACT_COLUMNS.keys():  # pragma: no cover - a new property
            raise AssertionError(f"FACT properties not in FACT_COLUMNS: {props.keys() - FACT_COLUMNS.keys()}")
        fact_rows.append([f_["s"], f_["o"], f_["key"], *(props.get(c, ABSENT) for c in cols)])
    fact_slots = Slots.of((r["space"], r["key"], r["s"]) for r in b.fact_slots)
    type_slots = Slots.of((r["space"], m, r["s"]) for m, r in b.members.items() if r["s"] not in refused)
    counts = b.counts
    counts["entities"] -= len(refused)  # an error, not an entity written, nor its type edges
    if refused:
        counts["type_edges"] -= sum(r["s"] in refused for r in (*b.instance_of, *b.subclass_of, *b.inferred))
    return BatchText(
        relations=b.relations, entities=entities, referred=format_rows([[q] for q in b.stubs]),
        instance_of=instance_of, subclass_of=subclass_of, inferred=inferred,
        facts=format_rows(fact_rows), fact_slots=fact_slots, type_slots=type_slots,
        redirects=[(r["source"], r["target"]) for r in b.redirects], counts=counts, errors=errors,
        by_subject=b.by_subject, last_entity=next(reversed(b.entities), None))


class ChunkRows(NamedTuple):
    """What a worker hands back for a chunk of the dump (`build_chunk`), in place of its entity,
    relation, fact, redirect and skip records: how many records it took, what was skipped, the
    records refused by `RecordBatcher`'s checks, and the rows, formatted."""

    records: int
    skipped: Counter[str]
    refused: list[ErrorRecord]
    rows: BatchText


class _LinesOnce(RecordBatcher[_BuiltT]):
    """`RecordBatcher` for the bulk load: an entity line met again in the batch being filled is
    refused here, as it arrives, with its facts (the records after it up to the next line), the
    way `BulkWriter` refuses one that an earlier batch wrote; the online ingest would merge the
    two. Without it the two lines were merged in one batch (the last one's properties, the
    repeated facts counted as duplicate statements) and refused apart: the files and the summary
    depended on where batches were cut."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: the entities of the batch being filled, and the line that may run on from the last
        self._batch_qids: set[str] = set()
        self._line: str | None = None
        #: the subject of the line being left out, while its records arrive
        self._dropping: str | None = None

    def add(self, record: Record) -> None:
        cls = record.__class__
        if cls is FactRecord:
            fact = cast(FactRecord, record)
            if fact.subject == self._dropping:  # left out with its line, but for what it refers to
                record = cast(Record, Refs((fact.subject, fact.object), fact.pid))
        elif cls is EntityRecord:
            entity = cast(EntityRecord, record)
            qid = entity.qid
            if qid in self._batch_qids:
                self._dropping = self._line = qid
                self._error(_refusal(qid, MET_AGAIN))
                record = cast(Record, Refs((*entity.types, *(t for t, _b in entity.inferred_types),
                                            *entity.superclasses)))
            else:
                self._batch_qids.add(qid)
                self._dropping, self._line = None, qid
        elif cls is RelationRecord or cls is RedirectRecord:
            self._dropping = None
        super().add(record)

    def _hand_over(self) -> None:
        # the last line's facts may run on into the next batch, and a repeat of it with them
        self._batch_qids = {self._line} if self._line is not None else set()
        super()._hand_over()


class _Checker(_LinesOnce[None]):
    """`RecordBatcher`'s checks on one chunk's records (the chunk is the batch), in a worker:
    what it refuses is kept whole, for the ingest's error budget."""

    def __init__(self) -> None:
        super().__init__(batch_size=1 << 62, error_budget=1 << 62)
        self.refused: list[ErrorRecord] = []

    def _error(self, record: ErrorRecord) -> None:
        self.refused.append(record)


def build_chunk(records: list[Record]) -> list[Record]:
    """A chunk's records as the bulk load writes them, in the worker that parsed them
    (kgprobe/loaders/wikidata_json.py `load_json`'s ``post``): one `ChunkRows` for the records
    written and skipped, then the loader's error records as they were. The whole chunk is one
    batch: its rows are the ones `BulkWriter` would build from the same records in one batch."""
    checker = _Checker()
    errors: list[Record] = []
    skips: list[SkipRecord] = []
    try:
        for rec in records:
            if isinstance(rec, ErrorRecord):
                errors.append(rec)
            elif isinstance(rec, SkipRecord):
                skips.append(rec)
            else:
                checker.add(rec)
    finally:
        checker.close()
    s = checker.summary
    if not s.records:  # skips as they were: a file of nothing else is told apart by the caller
        return [*errors, *skips]
    for skip in skips:  # counted here: one per entity line, they would cost the reader as much
        s.records += 1  # as the rows
        s.skipped[skip.reason] += skip.count
    built = ChunkRows(s.records, s.skipped, checker.refused, format_batch(batch_rows(checker._batch)))
    return [cast(Record, built), *errors]


@dataclass
class ImportFiles:
    """What `BulkWriter` wrote: the import's arguments (file names relative to ``directory``)
    and what the load holds."""

    directory: Path
    args: list[str]
    summary: IngestSummary
    multiline: list[str] = field(default_factory=list)


class QidSet:
    """A set of QIDs in bounded memory: one bit per QID number (Wikidata's ~120M QIDs: 15 MB),
    a plain set only for ids that are not ``Q`` + a number (rare)."""

    def __init__(self) -> None:
        self.bits = bytearray()
        self.other: set[str] = set()

    @staticmethod
    def _number(qid: str) -> int | None:
        digits = qid[1:]
        if qid[:1] == "Q" and digits.isdigit() and digits.isascii() and (digits[0] != "0" or digits == "0"):
            return int(digits)
        return None

    def add(self, qid: str) -> bool:
        """Add ``qid``; True when it was not there yet."""
        n = self._number(qid)
        if n is None:
            if qid in self.other:
                return False
            self.other.add(qid)
            return True
        i, bit = n >> 3, 1 << (n & 7)
        bits = self.bits
        if i >= len(bits):
            bits.extend(bytes(max(i + 1 - len(bits), len(bits))))
        if bits[i] & bit:
            return False
        bits[i] |= bit
        return True

    def __contains__(self, qid: object) -> bool:
        if not isinstance(qid, str):
            return False
        n = self._number(qid)
        if n is None:
            return qid in self.other
        i = n >> 3
        return i < len(self.bits) and bool(self.bits[i] & (1 << (n & 7)))


def check_bulk_dir(directory: Path, resume: bool = False) -> Path:
    """``directory`` when it is new or empty, or with ``resume`` when it holds a bulk load's
    checkpoint; `ConfigError` otherwise (the files go there)."""
    directory = Path(directory)
    if resume:
        if not (directory / CHECKPOINT_FILE).is_file():
            raise ConfigError(f"--bulk {directory} --resume: no checkpoint of a bulk load there "
                              f"({CHECKPOINT_FILE}); start with an empty directory, without --resume")
        return directory
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        if (directory / CHECKPOINT_FILE).is_file():
            raise ConfigError(f"--bulk {directory}: holds a bulk load's checkpoint; --resume "
                              "continues that load (or imports its files, if they were complete), "
                              "or give a new or empty directory")
        raise ConfigError(f"--bulk {directory}: not an empty directory (the import files are "
                          "written there; give a new or empty one)")
    return directory


#: A bulk load's checkpoint, in its directory: what `kgprobe ingest --bulk DIR --resume` starts
#: from (`BulkWriter`).
CHECKPOINT_FILE = "checkpoint.json"
#: Seconds between two checkpoints of a bulk load: each writes the written entities' bit set
#: (~15 MB for all of Wikidata) besides a small JSON file, so a killed load loses at most this
#: much work (``KGPROBE_BULK_CHECKPOINT_S`` overrides it in kgprobe.api).
CHECKPOINT_SECONDS = 60.0
CHECKPOINT_VERSION = 1


@dataclass
class BulkCheckpoints:
    """How a bulk load keeps checkpoints: ``record`` turns a reader's position into what is
    kept of it (kgprobe.loaders.resume.position_record: the file's identity too); ``context``
    is the load's sources and options, which a resume must repeat; at most one per
    ``seconds``."""

    record: Callable[[Position], Mapping[str, Any]]
    context: Mapping[str, Any]
    seconds: float = CHECKPOINT_SECONDS


def read_checkpoint(directory: Path) -> dict[str, Any]:
    """The checkpoint of the bulk load in ``directory`` (`check_bulk_dir` with ``resume``
    first); one line when it cannot be read."""
    path = Path(directory) / CHECKPOINT_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(state, dict) or state.get("version") != CHECKPOINT_VERSION:
            raise ValueError(f"not a version {CHECKPOINT_VERSION} checkpoint")
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--resume: {path} cannot be read ({exc}); start again with an empty "
                          "--bulk directory") from None
    return state


def _summary_state(s: IngestSummary) -> dict[str, Any]:
    return {**{k: getattr(s, k) for k in _SUMMARY_COUNTS}, "skipped": dict(s.skipped),
            "errors": [[e.location, e.message] for e in s.errors]}


def summary_of(state: Mapping[str, Any]) -> IngestSummary:
    """The summary a checkpoint kept (`_summary_state`)."""
    s = IngestSummary()
    for k in _SUMMARY_COUNTS:
        setattr(s, k, int(state[k]))
    s.skipped.update({str(k): int(v) for k, v in state["skipped"].items()})
    s.errors = [ErrorRecord(location=str(loc), message=str(msg)) for loc, msg in state["errors"]]
    return s


_SUMMARY_COUNTS = ("records", "entities", "relations", "facts", "qualifiers", "temporal_facts",
                   "type_edges", "redirects", "redirects_resolved", "error_count")


class BulkWriter(_LinesOnce[BatchText]):
    """Writes records as ``neo4j-admin database import full`` files in ``directory`` (which must
    be empty or new); the same intake, batches, checks and error budget as the online ingest
    (`RecordBatcher`), the same rows (`batch_rows`). Call `finish()` at the end.

    Every Entity node is written once: an entity's row, a type's row (the entity's, with its
    sampling counters), or a bare stub (an id that facts or types refer to and no record
    describes), decided at the end from two bounded `QidSet` s. An entity met again in a later
    batch is an error record (the online ingest would merge the two; this load writes each
    entity once)."""

    def __init__(self, directory: Path, *, batch_size: int = 5000, error_budget: int = 100,
                 on_flush: Callable[[IngestSummary], None] | None = None,
                 checkpoints: BulkCheckpoints | None = None,
                 resume: Mapping[str, Any] | None = None) -> None:
        directory = check_bulk_dir(directory, resume=resume is not None)
        super().__init__(batch_size=batch_size, error_budget=error_budget, on_flush=on_flush)
        self._checkpoints = checkpoints
        self._saved_at = time.monotonic()
        self._bits_file: str | None = None  # the written entities' bit set of the last checkpoint
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        d = directory
        fact_header = ":START_ID,:END_ID,key," + ",".join(
            c if t == "string" else f"{c}:{t}" for c, t in FACT_COLUMNS.items())
        self._facts = _CsvFile(d, "rels-fact.csv", fact_header)
        self._instance_of = _CsvFile(d, "rels-instance_of.csv", ":START_ID,:END_ID")
        self._subclass_of = _CsvFile(d, "rels-subclass_of.csv", ":START_ID,:END_ID")
        self._inferred = _CsvFile(d, "rels-inferred_type.csv", ":START_ID,:END_ID,basis")
        #: every id referred to, once; which of them become bare stubs is known at the end
        self._referred = _CsvFile(d, "referred.part", "qid")
        self._fact_slots = _CsvFile(d, "nodes-factslot.csv", "key,id,s")
        self._type_slots = _CsvFile(d, "nodes-typeslot.csv", "member,id,qid")
        #: one entity file per set of extra properties and their types (a CSV header is fixed);
        #: a type's row moves to a type file at the end
        self._entity_files: dict[Signature, _CsvFile] = {}
        #: entity rows that span lines, kept until `finish` sorts types from the rest (rare)
        self._entity_multiline: list[tuple[str, Signature, str]] = []
        # owned by the writer thread
        self._entities = QidSet()
        self._relations: dict[str, RelationProps] = {}
        self._redirects: dict[str, str] = {}
        self._fact_next: dict[str, int] = {}
        self._type_next: dict[str, int] = {}
        #: the subject of a refused line that was its batch's last (its facts may run on)
        self._refused_before: set[str] = set()
        if resume is not None:
            self._restore(resume)

    # --- the batches ----------------------------------------------------------------------
    def add(self, record: Record) -> None:
        """A record, or a chunk's rows built by a worker (`build_chunk`), or a position in the
        input (a checkpoint is saved there when one is due)."""
        if record.__class__ is ChunkRows:
            self._add_chunk(cast(ChunkRows, record))
        elif (record.__class__ is Position and self._checkpoints is not None
              and time.monotonic() - self._saved_at >= self._checkpoints.seconds):
            # everything before the position is written, nothing after it: the files, the
            # written entities and the counts are those of the input up to there, exactly
            self.flush()
            super().add(record)
            self._save(cast(Position, record))
        else:
            super().add(record)

    # --- checkpoints: a killed load resumes (`kgprobe ingest --bulk DIR --resume`) ----------
    def _files(self) -> dict[str, _CsvFile]:
        """The files written as rows arrive, by a name the checkpoint keeps them under."""
        return {"facts": self._facts, "instance_of": self._instance_of,
                "subclass_of": self._subclass_of, "inferred": self._inferred,
                "referred": self._referred, "fact_slots": self._fact_slots,
                "type_slots": self._type_slots}

    def _save(self, position: Position) -> None:
        """A checkpoint at ``position`` (the writer idle, every row before it written): each
        file's length and rows, what the writer keeps in memory, the summary; the written
        entities' bits in a file of their own, named in the checkpoint, which is written last,
        atomically (a kill leaves the previous checkpoint or this one)."""
        assert self._checkpoints is not None
        d = self.directory
        n = int(self._bits_file.split("-")[1].split(".")[0]) + 1 if self._bits_file else 0
        bits = f"entities-{n}.bits"
        with (d / bits).open("wb") as fh:
            fh.write(self._entities.bits)
        state = {
            "version": CHECKPOINT_VERSION, "finished": False,
            "context": dict(self._checkpoints.context),
            "position": dict(self._checkpoints.record(position)),
            "files": {k: f.saved() for k, f in self._files().items()},
            "entity_files": [[[list(x) for x in sig], f.saved()] for sig, f in self._entity_files.items()],
            "entity_multiline": [[q, [list(x) for x in sig], line] for q, sig, line in self._entity_multiline],
            "entities": {"bits": bits, "other": sorted(self._entities.other)},
            "relations": self._relations, "redirects": self._redirects,
            "fact_next": self._fact_next, "type_next": self._type_next,
            "summary": _summary_state(self.summary),
        }
        write_private_text(d / CHECKPOINT_FILE, json.dumps(state))
        if self._bits_file:
            (d / self._bits_file).unlink(missing_ok=True)
        self._bits_file = bits
        self._saved_at = time.monotonic()

    def _restore(self, state: Mapping[str, Any]) -> None:
        """The writer as it was at the checkpoint ``state``: files cut back to their length
        then, files begun after it removed, memory and summary as they were."""
        try:
            for k, f in self._files().items():
                f.restore(state["files"][k])
            for i, (sig, fs) in enumerate(state["entity_files"]):
                f = self._entity_file(tuple(tuple(x) for x in sig))
                if f.name != f"entity-{i}.part":
                    raise ValueError("entity files out of order")
                f.restore(fs)
            known = {f.name for f in (*self._files().values(), *self._entity_files.values())}
            known.add(str(state["entities"]["bits"]))
            # begun after the checkpoint, or left by a kill while one was being saved
            for pattern in ("entity-*.part", "entities-*.bits", f".{CHECKPOINT_FILE}.*.tmp"):
                for path in self.directory.glob(pattern):
                    if path.name not in known:
                        path.unlink()
            self._entity_multiline = [(q, tuple(tuple(x) for x in sig), line)
                                      for q, sig, line in state["entity_multiline"]]
            ents = state["entities"]
            self._bits_file = str(ents["bits"])
            self._entities.bits = bytearray((self.directory / self._bits_file).read_bytes())
            self._entities.other = set(ents["other"])
            self._relations = dict(state["relations"])
            self._redirects = dict(state["redirects"])
            self._fact_next = {str(k): int(v) for k, v in state["fact_next"].items()}
            self._type_next = {str(k): int(v) for k, v in state["type_next"].items()}
            self.summary = summary_of(state["summary"])
        except (KeyError, TypeError, ValueError, OSError) as exc:
            raise ConfigError(f"--resume: the checkpoint in {self.directory} does not match its "
                              f"files ({exc!r}); start again with an empty --bulk directory") from None

    def _add_chunk(self, chunk: ChunkRows) -> None:
        """A worker's chunk: one batch, written after the records buffered before it (the first
        line of a JSON-lines file, parsed here), then its refused records counted."""
        self._hand_over()  # the buffered records, as their own batch; the batch in flight settled
        self._settle()
        s = self.summary
        s.records += chunk.records
        s.skipped.update(chunk.skipped)
        self._in_flight = self._writer.submit(self._write, [], chunk.rows, None)
        self._in_flight_position = self._position
        for e in chunk.refused:
            self._error(e)  # past the budget: the chunk is written, then the load stops

    def _statements(self, batch: list[Record]) -> BatchText:
        return format_batch(batch_rows(batch))

    def _entity_file(self, sig: Signature) -> _CsvFile:
        f = self._entity_files.get(sig)
        if f is None:
            header = "qid:ID,label,aliases:string[],description" + "".join(
                f",{k}" if t == "string" else f",{k}:{t}" for k, t in sig)
            f = self._entity_files[sig] = _CsvFile(
                self.directory, f"entity-{len(self._entity_files)}.part", header)
        return f

    def _write(self, batch: list[Record], built: BatchText, room: int | None = None) -> _Written:
        """Write one batch's rows (writer thread), with what depends on the batches before it:
        an entity written by an earlier batch is refused (with its type edges and slots), the
        sampling ordinals continue from there (per relation, per type: input order)."""
        t = built
        errors = list(t.errors)
        refused: set[str] = set()
        seen = self._entities.add
        by_file: dict[Signature, list[str]] = {}
        for qid, sig, line in t.entities:
            if not seen(qid):
                refused.add(qid)
                errors.append(_refusal(qid, MET_AGAIN))
            elif _one_line(line, 1):
                by_file.setdefault(sig, []).append(line)
            else:  # kept until `finish` sorts types from the rest (rare)
                self._entity_multiline.append((qid, sig, line))
        for sig, lines in by_file.items():
            self._entity_file(sig).add(Lines("".join(lines), len(lines), []))
        for pid, props in t.relations.items():
            self._relations.setdefault(pid, RelationProps()).update(props)
        self._referred.add(t.referred)
        counts = t.counts
        for out, rows in ((self._instance_of, t.instance_of), (self._subclass_of, t.subclass_of),
                          (self._inferred, t.inferred)):
            if refused:
                kept = rows.without(refused)
                counts["type_edges"] -= rows.n + len(rows.multiline) - kept.n - len(kept.multiline)
                rows = kept
            out.add(rows)
        counts["entities"] -= len(refused)  # an error, not an entity written
        # a refused line's facts go with it (written again they would repeat the first line's
        # statement keys, which the unique constraints then refuse, after the whole import); with
        # one worker a line's records may run on into the next batches, up to the next entity
        # record: a refused last line's subject is left out of them too
        gone = [q for q in (*refused, *self._refused_before) if q in t.by_subject]
        if t.last_entity is not None:
            self._refused_before = {t.last_entity} & refused
        facts, fact_slots = t.facts, t.fact_slots
        if gone:
            facts, fact_slots = facts.without(set(gone)), fact_slots.without(set(gone))
            for q in gone:
                n_facts, n_qualifiers, n_temporal = t.by_subject[q]
                counts["facts"] -= n_facts
                counts["qualifiers"] -= n_qualifiers
                counts["temporal_facts"] -= n_temporal
        self._facts.add(facts)
        self._fact_slots.add_lines(fact_slots.lines(self._fact_next))
        types = t.type_slots.without(refused) if refused else t.type_slots
        self._type_slots.add_lines(types.lines(self._type_next))
        self._redirects.update(t.redirects)
        return _Written(counts=counts, errors=errors)

    # --- the end: types, stubs, relations, the marker, the import's arguments ---------------
    def finish(self) -> ImportFiles:
        """Write what only the end knows (which ids are types and stubs, the sampling
        counters) and return the import's files."""
        try:
            self.flush()
        finally:
            self.close()
        d = self.directory
        for f in (self._facts, self._instance_of, self._subclass_of, self._inferred, self._referred,
                  self._fact_slots, self._type_slots, *self._entity_files.values()):
            f.close()
        types = self._type_next
        type_files: list[_CsvFile] = []
        entity_files: list[_CsvFile] = []
        found: set[str] = set()
        parts: list[Path] = []  # removed once the import files are whole (a resume may need them)
        for i, (sig, part) in enumerate(self._entity_files.items()):
            ef = _CsvFile(d, f"nodes-entity-{i}.csv", part.header)
            tf = _CsvFile(d, f"nodes-type-{i}.csv", part.header + _TYPE_COUNTERS)
            lines: Iterable[tuple[str, str]] = ()
            if part.rows:
                with (d / part.name).open(encoding="utf-8", newline="") as fh:
                    next(fh)  # the header
                    # the first field: a quoted QID
                    self._sort_entities(((line[1:line.index('"', 1)], line) for line in fh),
                                        types, found, ef, tf)
            lines = [(q, line) for q, s, line in self._entity_multiline if s == sig]
            self._sort_entities(lines, types, found, ef, tf)
            parts.append(d / part.name)
            ef.close()
            tf.close()
            type_files.append(tf)
            entity_files.append(ef)
        bare = _CsvFile(d, "nodes-type-stub.csv", "qid:ID" + _TYPE_COUNTERS)
        bare.write([[q, n, n] for q, n in sorted(types.items()) if q not in found])
        bare.close()
        stubs = _CsvFile(d, "nodes-stub.csv", "qid:ID")
        if self._referred.rows:
            with (d / self._referred.name).open(encoding="utf-8", newline="") as fh:
                next(fh)
                rows: list[list[str]] = []
                stub = QidSet().add  # each batch lists its ids: once here
                for line in fh:
                    q = line[1:line.index('"', 1)]
                    if q not in self._entities and q not in types and stub(q):
                        rows.append([q])
                        if len(rows) >= 10_000:
                            stubs.write(rows)
                            rows = []
                stubs.write(rows)
        parts.append(d / self._referred.name)
        stubs.close()
        relations = _CsvFile(d, "nodes-relation.csv",
                             "pid,label,description,aliases:string[],slots_next:long,slots:long")
        rel_rows = []
        for pid, props in sorted(self._relations.items()):
            aliases = props.get("aliases")
            n = self._fact_next.get(pid)
            rel_rows.append([pid, props.get("label", ABSENT), props.get("description", ABSENT),
                             ARRAY_DELIMITER.join(aliases) if aliases else ABSENT,
                             ABSENT if n is None else n, ABSENT if n is None else n])
        relations.write(rel_rows)
        relations.close()
        redirects = _CsvFile(d, "nodes-redirect.csv", "qid,target")
        redirects.write([[s, t] for s, t in sorted(self._redirects.items())])
        redirects.close()
        marker = _CsvFile(d, "nodes-sampleindex.csv", "name,version:long,facts_checked:long")
        marker.write([[SAMPLE_INDEX_MARKER, SAMPLE_INDEX_VERSION, 0]])
        marker.close()
        nodes: list[tuple[str, _CsvFile]] = [
            *(("Entity", f) for f in type_files), ("Entity", bare),
            *(("Entity", f) for f in entity_files), ("Entity", stubs),
            ("Relation", relations), ("FactSlot", self._fact_slots), ("TypeSlot", self._type_slots),
            ("Redirect", redirects), ("SampleIndex", marker)]
        rels = [("FACT", self._facts), ("INSTANCE_OF", self._instance_of),
                ("SUBCLASS_OF", self._subclass_of), ("INFERRED_TYPE", self._inferred)]
        args = ["--id-type=string", "--array-delimiter=U+001F"]
        multiline: list[str] = []
        for flag, groups in (("--nodes", nodes), ("--relationships", rels)):
            for label, f in groups:
                for part_ in f.files():
                    args.append(f"{flag}={label}={part_.name}")
                    if part_.name.endswith("-ml.csv"):
                        multiline.append(part_.name)
        if multiline:
            args += ["--multiline-fields-format=v2", f"--multiline-fields={','.join(multiline)}"]
        (d / "import.args").write_text("\n".join(args) + "\n", encoding="utf-8")
        if self._checkpoints is not None:  # a resume goes straight to the import
            write_private_text(d / CHECKPOINT_FILE, json.dumps({
                "version": CHECKPOINT_VERSION, "finished": True,
                "context": dict(self._checkpoints.context), "args": args, "multiline": multiline,
                "summary": _summary_state(self.summary)}))
        for path in (*parts, *d.glob("entities-*.bits")):
            path.unlink(missing_ok=True)
        return ImportFiles(d, args, self.summary, multiline)

    @staticmethod
    def _sort_entities(lines: Iterable[tuple[str, str]], types: dict[str, int], found: set[str],
                       entities: _CsvFile, type_file: _CsvFile) -> None:
        """Entity rows to ``entities``, or, for a type, to ``type_file`` with its counters."""
        for qid, line in lines:
            n = types.get(qid)
            if n is None:
                entities.write_text(line)
            else:
                found.add(qid)
                type_file.write_text(f"{line[:-1]},{n},{n}\n")


def write_import_files(records: Iterable[Record], directory: Path, *, batch_size: int = 5000,
                       error_budget: int = 100,
                       on_flush: Callable[[IngestSummary], None] | None = None,
                       checkpoints: BulkCheckpoints | None = None,
                       resume: Mapping[str, Any] | None = None) -> ImportFiles:
    """Stream ``records`` into import files in ``directory``; `InputError` past the budget.
    With ``checkpoints``, a checkpoint at a position of the records now and then; with
    ``resume`` (a checkpoint: `read_checkpoint`) the files go on from it, and ``records``
    start at its position. Records and rows are made in bulk, so the cyclic collector runs
    rarely meanwhile, as in an online ingest (`kgprobe.runtime`): 3.3 of 21.2 CPU-s for a
    1M-statement dump in one process at Python's default threshold (docs/benchmarks.md)."""
    writer = BulkWriter(directory, batch_size=batch_size, error_budget=error_budget, on_flush=on_flush,
                        checkpoints=checkpoints, resume=resume)
    try:
        with rare_collections():
            for record in records:
                writer.add(record)
            return writer.finish()
    finally:
        writer.close()


def database_dir(neo4j_home: Path, database: str = DATABASE) -> Path:
    return Path(neo4j_home) / "data" / "databases" / database


def check_neo4j_home(neo4j_home: Path, database: str = DATABASE) -> Path:
    """The ``neo4j-admin`` of ``neo4j_home``; `ConfigError` when there is none, or when the
    database already holds data (a bulk load writes an empty database only)."""
    admin = Path(neo4j_home) / "bin" / "neo4j-admin"
    if not admin.is_file():
        raise ConfigError(f"--neo4j-home {neo4j_home}: no bin/neo4j-admin there (give the "
                          "directory Neo4j 5 is installed in)")
    db = database_dir(neo4j_home, database)
    if db.exists() and any(db.iterdir()):
        raise ConfigError(
            f"--neo4j-home {neo4j_home}: database {database!r} is not empty ({db}); --bulk loads "
            "an empty database only: use `kgprobe ingest` without --bulk to add to it")
    return admin


def run_import(files: ImportFiles, neo4j_home: Path, database: str = DATABASE) -> str:
    """Run ``neo4j-admin database import full`` on ``files`` into ``neo4j_home``'s ``database``
    (the server must be stopped); returns the tool's closing lines."""
    admin = check_neo4j_home(neo4j_home, database)
    home = Path(neo4j_home).resolve()
    made = [p for p in (database_dir(home, database), home / "data" / "transactions" / database)
            if not p.exists()]
    env = {**os.environ, "NEO4J_HOME": str(home)}
    cmd = [str(admin.resolve()), "database", "import", "full", database, "@import.args"]
    proc = subprocess.run(cmd, cwd=files.directory, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:  # what a failed import left is removed: the load can run again
        for p in made:
            shutil.rmtree(p, ignore_errors=True)
    out = (proc.stdout + proc.stderr).strip()
    (files.directory / "import.log").write_text(out + "\n", encoding="utf-8")
    if proc.returncode != 0:
        lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
        last = next((ln for ln in reversed(lines) if "rror" in ln or "xception" in ln),
                    lines[-1] if lines else "no output")
        raise KgprobeError(f"neo4j-admin database import failed (exit {proc.returncode}): {last[:300]} "
                           f"(full output: {files.directory / 'import.log'})")
    return "\n".join(out.splitlines()[-3:])
