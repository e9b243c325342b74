"""Write loader records into the graph: batched, idempotent, one transaction per batch.

Every write is a MERGE keyed by QID, PID or statement key, so re-running an ingest (or finishing
one that was killed) creates no duplicate node or edge. Nodes go in their own statements before
the edges that use them (docs/design.md §2: ``UNWIND … MERGE … MERGE … ON CREATE SET`` is unreliable
on ArcadeDB), but inside the same transaction, so a failed batch leaves nothing behind.

A batch refused for a transient reason (a concurrent writer) runs again; one refused for a
record's sake is split until that record is alone, which becomes an error record — the rest is
written (docs/loaders.md#guarantees).
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypedDict, TypeVar, cast

from neo4j.exceptions import DriverError, Neo4jError

from kgprobe.errors import ConfigError, GraphUnavailable, InputError
from kgprobe.graph import journal
from kgprobe.graph.client import Graph
from kgprobe.records import (
    EntityRecord,
    ErrorRecord,
    FactRecord,
    Position,
    Record,
    RedirectRecord,
    RelationRecord,
    SkipRecord,
    TimeValue,
    is_pid,
)
from kgprobe.runtime import GC_THRESHOLD, prompt_gil_switch, rare_collections
from kgprobe.types import PID, QID, CypherParams, FactKey, GraphRow, Properties

_PROP_KEY = re.compile(r"^[a-z_][a-z0-9_]*\Z")
_RESERVED = frozenset({"qid", "label", "aliases", "description"})

MERGE_RELATIONS = """
UNWIND $rows AS row
MERGE (r:Relation {pid: row.pid})
SET r += row.props
"""
MERGE_ENTITIES = """
UNWIND $rows AS row
MERGE (e:Entity {qid: row.qid})
SET e += row.props
"""
MERGE_STUBS = """
UNWIND $rows AS qid
MERGE (:Entity {qid: qid})
"""
MERGE_INSTANCE_OF = """
UNWIND $rows AS row
MATCH (a:Entity {qid: row.s}) MATCH (b:Entity {qid: row.o})
MERGE (a)-[:INSTANCE_OF]->(b)
"""
MERGE_SUBCLASS_OF = """
UNWIND $rows AS row
MATCH (a:Entity {qid: row.s}) MATCH (b:Entity {qid: row.o})
MERGE (a)-[:SUBCLASS_OF]->(b)
"""
MERGE_INFERRED_TYPE = """
UNWIND $rows AS row
MATCH (a:Entity {qid: row.s}) MATCH (b:Entity {qid: row.o})
MERGE (a)-[t:INFERRED_TYPE]->(b)
SET t.basis = row.basis
"""
MERGE_FACTS = """
UNWIND $rows AS row
MATCH (a:Entity {qid: row.s}) MATCH (b:Entity {qid: row.o})
MERGE (a)-[f:FACT {key: row.key}]->(b)
SET f += row.props
"""
#: The sampling index (kgprobe/graph/sample_index.py): each new fact gets the next ordinal of
#: its relation, each new (entity, type) pair the next ordinal of its type. Ordinals come from
#: Python ($rows[].id, .ord); a key already indexed keeps its slot, and the counters move past the
#: highest ordinal really created. Two writers that drew the same ordinals collide on the unique
#: slot id (ConstraintError): the batch runs again with fresh counters.
MERGE_FACT_SLOTS = """
UNWIND $rows AS row
MERGE (x:FactSlot {key: row.key})
ON CREATE SET x.id = row.id, x.s = row.s
WITH row, x WHERE x.id = row.id
WITH row.space AS space, max(row.ord) AS last, count(*) AS created
MERGE (r:Relation {pid: space})
SET r.slots_next = CASE WHEN coalesce(r.slots_next, 0) > last THEN r.slots_next ELSE last + 1 END,
    r.slots = coalesce(r.slots, 0) + created
RETURN space, r.slots_next AS next
"""
MERGE_TYPE_SLOTS = """
UNWIND $rows AS row
MERGE (x:TypeSlot {member: row.member})
ON CREATE SET x.id = row.id, x.qid = row.s
WITH row, x WHERE x.id = row.id
WITH row.space AS space, max(row.ord) AS last, count(*) AS created
MATCH (t:Entity {qid: space})
SET t.member_slots_next = CASE WHEN coalesce(t.member_slots_next, 0) > last
                               THEN t.member_slots_next ELSE last + 1 END,
    t.member_slots = coalesce(t.member_slots, 0) + created
RETURN space, t.member_slots_next AS next
"""
#: The marker saying the sampling index covers the whole graph (graph/sample_index.py); an
#: ingest into an empty graph sets it in its first transaction.
SAMPLE_INDEX_VERSION = 1
SAMPLE_INDEX_MARKER = "kgprobe"
GET_SAMPLE_MARKER = """
OPTIONAL MATCH (m:SampleIndex {name: $name})
RETURN m.version AS version, m.facts_checked AS facts_checked
"""
SET_SAMPLE_MARKER = """
MERGE (m:SampleIndex {name: $name})
SET m.version = $version, m.facts_checked = $facts
"""
ANY_ENTITY = "MATCH (e:Entity) RETURN e.qid AS qid LIMIT 1"
#: A write that any server with room takes: when a lone record is refused, this tells the
#: record's fault (the rest goes on) from a server that takes no write at all (a full disk)
WRITE_CHECK = "MERGE (m:SampleIndex {name: $name}) SET m.write_checked = $at"
FACT_SLOT_NEXT = """
UNWIND $spaces AS p
MATCH (r:Relation {pid: p})
RETURN p AS space, coalesce(r.slots_next, 0) AS next
"""
TYPE_SLOT_NEXT = """
UNWIND $spaces AS q
MATCH (t:Entity {qid: q})
RETURN q AS space, coalesce(t.member_slots_next, 0) AS next
"""
#: A redirected subject's facts keep their keys; their slots must follow them to the target.
_MOVE_FACT_SLOTS = """
UNWIND $rows AS row
MATCH (old:Entity {qid: row.source})-[f:FACT]->()
MATCH (x:FactSlot {key: f.key})
SET x.s = row.target
"""
MERGE_REDIRECTS = """
UNWIND $rows AS row
MERGE (r:Redirect {qid: row.source})
SET r.target = row.target
"""

# Redirect resolution: move every edge of a redirected entity to its target, then delete it.
_PENDING_REDIRECTS = """
MATCH (r:Redirect) MATCH (old:Entity {qid: r.qid})
RETURN r.qid AS source, r.target AS target
"""
_MOVE_OUT_FACTS = """
UNWIND $rows AS row
MATCH (old:Entity {qid: row.source})-[f:FACT]->(o)
MERGE (new:Entity {qid: row.target})
MERGE (new)-[g:FACT {key: f.key}]->(o)
SET g += properties(f)
DELETE f
"""
_MOVE_IN_FACTS = """
UNWIND $rows AS row
MATCH (s)-[f:FACT]->(old:Entity {qid: row.source})
MERGE (new:Entity {qid: row.target})
MERGE (s)-[g:FACT {key: f.key}]->(new)
SET g += properties(f)
DELETE f
"""
_MOVE_TYPE_EDGES = """
UNWIND $rows AS row
MATCH (s)-[t:INSTANCE_OF]->(old:Entity {qid: row.source})
MERGE (new:Entity {qid: row.target})
MERGE (s)-[:INSTANCE_OF]->(new)
DELETE t
"""
_DELETE_REDIRECTED = """
UNWIND $rows AS row
MATCH (old:Entity {qid: row.source})
DETACH DELETE old
"""


class IngestSummaryDict(TypedDict):
    """:meth:`IngestSummary.to_dict`: the summary as ``kgprobe ingest --json`` prints it."""

    records: int
    entities: int
    relations: int
    facts: int
    qualifiers: int
    temporal_facts: int
    type_edges: int
    redirects: int
    redirects_resolved: int
    skipped: dict[str, int]
    errors: int
    first_errors: list[str]


@dataclass
class IngestSummary:
    """What an ingest wrote and what it left out, with reasons."""

    records: int = 0
    entities: int = 0
    relations: int = 0
    facts: int = 0
    qualifiers: int = 0
    temporal_facts: int = 0
    type_edges: int = 0
    redirects: int = 0
    redirects_resolved: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    error_count: int = 0
    errors: list[ErrorRecord] = field(default_factory=list)

    def to_dict(self) -> IngestSummaryDict:
        return {
            "records": self.records,
            "entities": self.entities,
            "relations": self.relations,
            "facts": self.facts,
            "qualifiers": self.qualifiers,
            "temporal_facts": self.temporal_facts,
            "type_edges": self.type_edges,
            "redirects": self.redirects,
            "redirects_resolved": self.redirects_resolved,
            "skipped": dict(self.skipped),
            "errors": self.error_count,
            "first_errors": [f"{e.location}: {e.message}" for e in self.errors],
        }


#: a FACT edge's property map (:func:`fact_properties`): strings and integers, its keys those of
#: docs/data-model.md (the time ones per qualifier present)
FactProps = dict[str, str | int]


def _time_props(prefix: str, value: TimeValue) -> FactProps:
    return {
        f"{prefix}_time": value.time,
        f"{prefix}_precision": value.precision,
        f"{prefix}_year": value.year,
        f"{prefix}_sort": value.sort_key,
        f"{prefix}_calendar": value.calendar,
    }


def fact_properties(fact: FactRecord) -> FactProps:
    """The FACT edge's properties (documented in docs/data-model.md); None values left out."""
    props: FactProps = {"pid": fact.pid, "rank": fact.rank}
    if fact.statement_id:
        props["statement_id"] = fact.statement_id
    if fact.source:
        props["source"] = fact.source
    for prefix, value in (("start", fact.start), ("end", fact.end), ("pit", fact.point_in_time)):
        if value is not None:
            props.update(_time_props(prefix, value))
    if fact.qualifiers:
        props["qualifiers"] = json.dumps(fact.qualifiers, sort_keys=True, ensure_ascii=False)
    return props


#: skip reason for a statement met twice in one batch with identical content
SKIP_DUPLICATE = "duplicate-statement"
#: how often a batch is tried again after a transient refusal (a concurrent writer), and the
#: first and the longest wait between tries (doubling, with jitter)
RETRIES = 6
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 1.0


class _Rejected(Exception):
    """The server refused a batch for a reason that is not the connection (nor transient)."""


def _first_line(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc) or exc.__class__.__name__
    line = " ".join(str(text).split())
    return line if len(line) <= 300 else line[:300] + "…"


Statements = list[tuple[str, CypherParams]]


def write_retrying(
    graph: Graph, statements: Statements | Callable[[int], Statements]
) -> list[list[GraphRow]]:
    """``graph.write_many`` with bounded retries on transient refusals; `_Rejected` otherwise.

    ``statements`` may be a function of the attempt number (0 first), so that a retry can
    rebuild what depended on the graph's state (the sampling index's counters).
    A lost server (`GraphUnavailable`) is raised as it is: no retry can cure that here.
    """
    for attempt in range(RETRIES + 1):
        try:
            return graph.write_many(statements(attempt) if callable(statements) else statements)
        except GraphUnavailable:
            raise
        except (Neo4jError, DriverError, OverflowError, TypeError, ValueError) as exc:
            if attempt < RETRIES and graph.transient(exc):
                wait = min(RETRY_MAX_S, RETRY_FIRST_S * 2**attempt)
                time.sleep(wait * (0.5 + random.random()))  # noqa: S311 - jitter, not data
                continue
            raise _Rejected(_first_line(exc)) from exc
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


#: a sampling-index slot before it is numbered: ``{space, key, s}`` (a fact's: space is its
#: relation) or ``{member, space, s}`` (a type member's: space is the type)
SlotRow = dict[str, str]


class SlotNext(TypedDict):
    """A row of the slot-counter queries (``FACT_SLOT_NEXT``, ``MERGE_FACT_SLOTS`` …): a
    sampling space and its next free ordinal."""

    space: str
    next: int


class SlotCounters:
    """The next free ordinal of each sampling space (a relation's facts, a type's members), read
    from the graph once per space and then kept here; `forget` drops spaces whose counters a
    concurrent writer may have moved."""

    def __init__(self, query: str) -> None:
        self.query = query
        self.next: dict[str, int] = {}

    def forget(self, spaces: Iterable[str]) -> None:
        for sp in spaces:
            self.next.pop(sp, None)

    def number(self, graph: Graph, rows: list[SlotRow], prefix: str) -> list[dict[str, str | int]]:
        """``rows`` ({space, ...}) with consecutive ordinals per space from its counter."""
        missing = sorted({r["space"] for r in rows} - self.next.keys())
        if missing:
            read = cast(list[SlotNext], graph.read(self.query, spaces=missing))
            got = {r["space"]: int(r["next"]) for r in read}
            for sp in missing:
                self.next[sp] = got.get(sp, 0)
        taken: Counter[str] = Counter()
        out: list[dict[str, str | int]] = []
        for r in rows:
            sp = r["space"]
            ordinal = self.next[sp] + taken[sp]
            taken[sp] += 1
            out.append({**r, "ord": ordinal, "id": f"{prefix}{sp}:{ordinal}"})
        return out

    def update(self, result: Iterable[SlotNext]) -> None:
        for r in result:
            self.next[r["space"]] = int(r["next"])


def _describe(record: Record) -> str:
    if isinstance(record, FactRecord):
        return f"statement {record.key}"
    if isinstance(record, EntityRecord):
        return f"entity {record.qid}"
    if isinstance(record, RelationRecord):
        return f"property {record.pid}"
    if isinstance(record, RedirectRecord):
        return f"redirect {record.source} → {record.target}"
    return type(record).__name__


@dataclass
class _Written:
    """What one batch's write did, handed from the writer thread back to the intake thread
    (which alone touches the summary and the known-node cache)."""

    nodes: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    errors: list[ErrorRecord] = field(default_factory=list)

    def merge(self, other: _Written) -> None:
        self.nodes += other.nodes
        self.counts.update(other.counts)
        self.errors += other.errors


class _Slots(TypedDict):
    """A batch's sampling-index rows, numbered at write time."""

    facts: list[SlotRow]
    types: list[SlotRow]


_Built = tuple[Statements, list[str], list[str], Counter[str], _Slots]
_BuiltT = TypeVar("_BuiltT")


class RelationProps(TypedDict, total=False):
    """A Relation node's properties, those its records gave."""

    label: str
    description: str
    aliases: list[str]


class FactRow(TypedDict):
    """A FACT edge to write: its ends, its key and its properties (:func:`fact_properties`)."""

    s: QID
    o: QID
    key: FactKey
    props: FactProps


@dataclass(frozen=True, slots=True)
class Refs:
    """What a line the bulk load leaves out (an entity met again) still refers to, in its place
    among the batch's records: ids, which become stubs where nothing else describes them, and
    a fact's relation. The bulk load that refuses such a line later, against the batches before
    it, has only formatted rows and keeps the same, so both give the same files."""

    ids: tuple[str, ...]
    pid: str | None = None


@dataclass
class BatchRows:
    """One batch of records as the graph's rows, before any statement is chosen: the online
    ingest MERGEs them, the bulk load (graph/bulk.py) writes them to the import tool's files.
    The one place that says which nodes, edges and properties a record becomes."""

    relations: dict[PID, RelationProps]
    #: an entity's property map: label, aliases, description and the loader's extras
    entities: dict[QID, Properties]
    #: every id the batch refers to, once, in the order first met (an ordered set: the bulk
    #: load's files then do not depend on where batches were cut)
    stubs: dict[str, None]
    instance_of: list[dict[str, str]]
    subclass_of: list[dict[str, str]]
    inferred: list[dict[str, str]]
    facts: list[FactRow]
    fact_slots: list[SlotRow]
    redirects: list[dict[str, str]]
    members: dict[str, dict[str, str]]
    counts: Counter[str]
    #: per fact subject: its facts, qualifiers and temporal facts (the bulk load takes a
    #: refused entity's facts off the counts with it)
    by_subject: dict[str, list[int]]


def batch_rows(batch: list[Record]) -> BatchRows:
    """The rows ``batch`` writes, and what it counts."""
    relations: dict[PID, RelationProps] = {}
    entities: dict[QID, Properties] = {}
    stubs: dict[str, None] = {}
    instance_of: list[dict[str, str]] = []
    subclass_of: list[dict[str, str]] = []
    inferred: list[dict[str, str]] = []
    facts: list[FactRow] = []
    fact_slots: list[SlotRow] = []
    redirects: list[dict[str, str]] = []
    members: dict[str, dict[str, str]] = {}
    n: Counter[str] = Counter()
    n_qualifiers = n_temporal = 0
    by_subject: dict[str, list[int]] = {}
    for rec in batch:
        if isinstance(rec, FactRecord):
            subject, key = rec.subject, rec.key
            stubs[subject] = None
            stubs[rec.object] = None
            relations.setdefault(rec.pid, RelationProps())
            facts.append(FactRow(s=subject, o=rec.object, key=key, props=fact_properties(rec)))
            fact_slots.append({"space": rec.pid, "key": key, "s": subject})
            mine = by_subject.get(subject)
            if mine is None:
                mine = by_subject[subject] = [0, 0, 0]
            mine[0] += 1
            q = sum(map(len, rec.qualifiers.values())) if rec.qualifiers else 0
            if rec.is_temporal:
                n_temporal += 1
                mine[2] += 1
                q += (rec.start is not None) + (rec.end is not None) + (rec.point_in_time is not None)
            n_qualifiers += q
            mine[1] += q
        elif isinstance(rec, EntityRecord):
            props: Properties = {}
            if rec.label:
                props["label"] = rec.label
            if rec.aliases:
                props["aliases"] = list(dict.fromkeys(rec.aliases))
            if rec.description:
                props["description"] = rec.description
            props.update(rec.extra)
            entities.setdefault(rec.qid, {}).update(props)
            for t in rec.types:
                stubs[t] = None
                instance_of.append({"s": rec.qid, "o": t})
                members.setdefault(f"{t}|{rec.qid}", {"space": t, "s": rec.qid})
            for t, basis in rec.inferred_types:
                stubs[t] = None
                inferred.append({"s": rec.qid, "o": t, "basis": basis})
                members.setdefault(f"{t}|{rec.qid}", {"space": t, "s": rec.qid})
            for t in rec.superclasses:
                stubs[t] = None
                subclass_of.append({"s": rec.qid, "o": t})
            n["entities"] += 1
            n["type_edges"] += len(rec.types) + len(rec.superclasses) + len(rec.inferred_types)
        elif isinstance(rec, RelationRecord):
            rprops = RelationProps()
            if rec.label:
                rprops["label"] = rec.label
            if rec.description:
                rprops["description"] = rec.description
            if rec.aliases:
                rprops["aliases"] = list(rec.aliases)
            relations.setdefault(rec.pid, RelationProps()).update(rprops)
            n["relations"] += 1
        elif isinstance(rec, RedirectRecord):
            redirects.append({"source": rec.source, "target": rec.target})
            n["redirects"] += 1
        elif isinstance(rec, Refs):
            stubs.update(dict.fromkeys(rec.ids))
            if rec.pid is not None:
                relations.setdefault(rec.pid, RelationProps())
    n["facts"] += len(facts)
    n["qualifiers"] += n_qualifiers
    n["temporal_facts"] += n_temporal
    return BatchRows(relations, entities, stubs, instance_of, subclass_of, inferred, facts,
                     fact_slots, redirects, members, n, by_subject)


class RecordBatcher(Generic[_BuiltT]):
    """Takes records one by one and hands them over in batches to a writer thread: what the
    online ingest (`Ingestor`) and the bulk load (graph/bulk.py) share — the checks on each
    record (a statement key met twice in a batch, invalid property names), the error budget,
    the summary's counts. A subclass says how a batch is built (`_statements`, in the calling
    thread) and written (`_write`, in the writer thread); call `finish()` at the end.

    Write-behind: a full batch is built here, then written by one writer thread while the next
    batch is read and built, so that the client's work overlaps the writer's. One batch at most
    is in flight, so memory stays bounded and batches still land in order.
    """

    ERRORS_KEPT = 20

    def __init__(
        self,
        *,
        batch_size: int = 5000,
        error_budget: int = 100,
        on_flush: Callable[[IngestSummary], None] | None = None,
        on_checkpoint: Callable[[Position], None] | None = None,
    ) -> None:
        check_ingest_options(batch_size, error_budget)
        self.on_checkpoint = on_checkpoint
        #: the last position passed, and the one the batch in flight covers (issue 37 #5)
        self._position: Position | None = None
        self._in_flight_position: Position | None = None
        self._reported: Position | None = None
        self.batch_size = batch_size
        self.error_budget = error_budget
        self.on_flush = on_flush
        self.summary = IngestSummary()
        self.stopped = False
        self._batch: list[Record] = []
        self._keys: dict[str, FactRecord] = {}
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kgprobe-writer")
        self._in_flight: Future[_Written] | None = None

    def _statements(self, batch: list[Record]) -> _BuiltT:
        raise NotImplementedError

    def _write(self, batch: list[Record], built: _BuiltT, room: int | None = None) -> _Written:
        raise NotImplementedError

    def _remember(self, qids: Iterable[str]) -> None:
        """Nodes a batch has written (the online ingest skips their stubs later)."""

    # --- intake ---------------------------------------------------------------------------
    def add(self, record: Record) -> None:
        if record.__class__ is Position:  # nothing to write: a checkpoint once committed
            self._position = record  # type: ignore[assignment]
            return
        s = self.summary
        s.records += 1
        if isinstance(record, FactRecord):
            key = record.key
            earlier = self._keys.get(key)
            if earlier is not None:
                if earlier == record:  # the same statement twice (location is not compared)
                    s.skipped[SKIP_DUPLICATE] += 1
                else:
                    at = f" at {earlier.location}" if earlier.location else ""
                    self._error(
                        ErrorRecord(
                            location=record.location or key,
                            message=f"statement key {key} is already used by a different statement{at}",
                        )
                    )
                return
            self._keys[key] = record
        elif isinstance(record, EntityRecord):
            bad = [k for k in record.extra if not _PROP_KEY.fullmatch(k) or k in _RESERVED]
            if bad:
                self._error(
                    ErrorRecord(
                        location=record.location or record.qid,
                        message=f"entity {record.qid}: invalid property name {bad[0]!r}",
                    )
                )
                return
        elif isinstance(record, (RelationRecord, RedirectRecord, Refs)):
            pass
        elif isinstance(record, SkipRecord):
            s.skipped[record.reason] += record.count
            return
        elif isinstance(record, ErrorRecord):
            self._error(record)
            return
        else:  # pragma: no cover - a loader bug
            raise TypeError(f"not a record: {record!r}")
        self._batch.append(record)
        if len(self._batch) >= self.batch_size:
            self.flush(wait=False)

    def _error(self, record: ErrorRecord) -> None:
        s = self.summary
        s.error_count += 1
        if len(s.errors) < self.ERRORS_KEPT:
            s.errors.append(record)
        if s.error_count > self.error_budget and not self.stopped:
            self.flush()

    def _check_budget(self) -> None:
        s = self.summary
        if s.error_count > self.error_budget:
            self.stopped = True
            first = s.errors[0]
            raise InputError(
                f"stopped after {s.error_count} malformed records (error budget {self.error_budget}); "
                f"first at {first.location}: {first.message}. Everything before was written; "
                "fix the input or raise --max-errors and run again"
            )

    def _settle(self) -> None:
        """Wait for the batch in flight and account for it here (a lost server or any other
        failure of the writer is raised here)."""
        pending, self._in_flight = self._in_flight, None
        if pending is None:
            return
        done = pending.result()
        self._remember(done.nodes)
        s = self.summary
        for e in done.errors:
            s.error_count += 1
            if len(s.errors) < self.ERRORS_KEPT:
                s.errors.append(e)
        self._checkpoint(self._in_flight_position)
        self._in_flight_position = None
        c = done.counts
        s.entities += c["entities"]
        s.relations += c["relations"]
        s.facts += c["facts"]
        s.qualifiers += c["qualifiers"]
        s.temporal_facts += c["temporal_facts"]
        s.type_edges += c["type_edges"]
        s.redirects += c["redirects"]
        if self.on_flush:
            self.on_flush(s)

    def _hand_over(self) -> None:
        """Build the buffered batch's statements (while the previous batch is still being
        written), then give it to the writer once that one is done."""
        batch, self._batch, self._keys = self._batch, [], {}
        built = self._statements(batch) if batch else None
        self._settle()
        if built is not None:
            room = self.error_budget - self.summary.error_count + 1
            self._in_flight = self._writer.submit(self._write, batch, built, room)
            # every record before the last position passed is in this batch or an earlier one
            self._in_flight_position = self._position
        else:  # nothing to write, and everything before is written
            self._checkpoint(self._position)

    def _checkpoint(self, position: Position | None) -> None:
        """Tell ``on_checkpoint`` that every record before ``position`` is committed."""
        if position is not None and position is not self._reported and self.on_checkpoint:
            self.on_checkpoint(position)
            self._reported = position

    def flush(self, *, wait: bool = True) -> None:
        """Write everything buffered; with ``wait`` (the default) return once it is written."""
        self._hand_over()
        if wait or self.summary.error_count > self.error_budget:
            self._settle()  # stopping on the budget: what was handed over is written first
        self._check_budget()

    def close(self) -> None:
        """Stop the writer thread, after the batch in flight (if any) is done."""
        self._writer.shutdown(wait=True)


class Ingestor(RecordBatcher[_Built]):
    """Buffers records and writes them in batches; call `finish()` at the end (or `close()`).

    Write-behind: a full batch is turned into statements here, then written by one writer
    thread while the next batch is read and built, so that the client's work overlaps the
    server's. One batch at most is in flight, so memory stays bounded and batches still commit
    in order.

    A batch the server refuses is split in halves until the refused record is alone: that one
    becomes an error (with its ``file:line``, counted against the budget) and the rest is
    written, so one bad record costs one record.
    """

    #: QIDs and PIDs known to have a node, remembered (most recent first out) to skip
    #: re-MERGEing stub nodes for objects (and relations) that earlier batches already wrote;
    #: bounded, so memory stays flat.
    KNOWN_NODES = 500_000

    def __init__(
        self,
        graph: Graph,
        *,
        batch_size: int = 5000,
        error_budget: int = 100,
        on_flush: Callable[[IngestSummary], None] | None = None,
        on_checkpoint: Callable[[Position], None] | None = None,
    ) -> None:
        super().__init__(batch_size=batch_size, error_budget=error_budget, on_flush=on_flush,
                         on_checkpoint=on_checkpoint)
        self.graph = graph
        self._known: OrderedDict[str, None] = OrderedDict()
        # owned by the writer thread: the slot counters and the marker move only there
        self._fact_slots = SlotCounters(FACT_SLOT_NEXT)
        self._marker_checked = False
        self._type_slots = SlotCounters(TYPE_SLOT_NEXT)

    def _remember(self, qids: Iterable[str]) -> None:
        known = self._known
        for q in qids:
            known[q] = None
            known.move_to_end(q)
        while len(known) > self.KNOWN_NODES:
            known.popitem(last=False)

    # --- output ---------------------------------------------------------------------------
    def _statements(self, batch: list[Record]) -> _Built:
        """The batch as Cypher statements, the node ids it writes, what it counts, and the
        rows of the sampling index (numbered at write time, see `_slot_statements`)."""
        b = batch_rows(batch)
        relations, entities = b.relations, b.entities
        stmts: Statements = []
        known = self._known
        # a relation met again with nothing to set needs no MERGE (known: an earlier batch did)
        rel_rows = [{"pid": p, "props": props} for p, props in relations.items()
                    if props or p not in known]
        if rel_rows:
            stmts.append((MERGE_RELATIONS, {"rows": rel_rows}))
        if entities:
            ent_rows = [{"qid": q, "props": props} for q, props in entities.items()]
            stmts.append((MERGE_ENTITIES, {"rows": ent_rows}))
        stub_list = sorted(q for q in b.stubs.keys() - entities.keys() if q not in known)
        if stub_list:
            stmts.append((MERGE_STUBS, {"rows": stub_list}))
        edge_batches: tuple[tuple[str, list[Any]], ...] = (
            (MERGE_INSTANCE_OF, b.instance_of),
            (MERGE_SUBCLASS_OF, b.subclass_of),
            (MERGE_INFERRED_TYPE, b.inferred),
            (MERGE_FACTS, b.facts),
            (MERGE_REDIRECTS, b.redirects),
        )
        for cypher, rows in edge_batches:
            if rows:
                stmts.append((cypher, {"rows": rows}))
        if b.facts or b.instance_of or b.subclass_of or b.inferred:
            # what the semantic index depends on changed: journal it (graph/journal.py)
            subjects = {r["s"] for r in b.facts}
            subjects.update(r["s"] for r in b.instance_of)
            subjects.update(r["s"] for r in b.subclass_of)
            stmts.extend(journal.bump_statements(sorted(subjects)))
        slots = _Slots(facts=b.fact_slots, types=[{"member": m, **row} for m, row in b.members.items()])
        return stmts, [*entities, *relations], stub_list, b.counts, slots

    def _slot_statements(self, slots: _Slots, attempt: int) -> Statements:
        """The sampling index's statements for one batch, numbered from the counters (read
        afresh on a retry: a concurrent writer may have taken the same ordinals)."""
        out: Statements = []
        for rows, counters, cypher in ((slots["facts"], self._fact_slots, MERGE_FACT_SLOTS),
                                       (slots["types"], self._type_slots, MERGE_TYPE_SLOTS)):
            if not rows:
                continue
            if attempt:
                counters.forget({r["space"] for r in rows})
            out.append((cypher, {"rows": counters.number(self.graph, rows, "")}))
        return out

    def _marker_statements(self) -> Statements:
        """Mark the sampling index as complete when this ingest starts on an empty graph (a
        graph that holds older, unindexed data is indexed on its first probe instead)."""
        if self._marker_checked:
            return []
        marker = self.graph.read(GET_SAMPLE_MARKER, name=SAMPLE_INDEX_MARKER)[0]
        if marker["version"] is not None or self.graph.read(ANY_ENTITY):
            return []
        return [(SET_SAMPLE_MARKER, {"name": SAMPLE_INDEX_MARKER, "version": SAMPLE_INDEX_VERSION,
                                     "facts": 0})]

    def _write(self, batch: list[Record], built: _Built | None = None, room: int | None = None) -> _Written:
        """Write ``batch`` in one transaction; on refusal, bisect to the refused record(s), but
        no further than ``room`` refused records (what the error budget has left: past it the
        ingest stops anyway, and a batch of 10,000 refused records must not count 10,000
        errors). A lone refused record whose server then takes no write at all is the server's
        failure (`GraphUnavailable`), never the record's. Runs in the writer thread."""
        stmts, nodes, stubs, counts, slots = built or self._statements(batch)
        if not stmts:
            return _Written()
        n_slot = bool(slots["facts"]) + bool(slots["types"])
        marker = self._marker_statements()
        try:
            results = write_retrying(
                self.graph, lambda attempt: marker + stmts + self._slot_statements(slots, attempt))
        except _Rejected as exc:
            if len(batch) == 1:
                rec = batch[0]
                self._check_server_writes(rec, exc)
                return _Written(errors=[ErrorRecord(
                    location=getattr(rec, "location", "") or _describe(rec),
                    message=f"{_describe(rec)}: refused by the graph server ({exc})",
                )])
            mid = len(batch) // 2
            room = self.error_budget + 1 if room is None else room
            done = self._write(batch[:mid], room=room)
            if len(done.errors) < room:
                done.merge(self._write(batch[mid:], room=room - len(done.errors)))
            return done
        # only after the transaction committed: a failed batch leaves no node behind
        self._marker_checked = True
        for result in results[len(results) - n_slot:]:
            for r in cast(list[SlotNext], result):
                (self._fact_slots if is_pid(r["space"]) else self._type_slots).update([r])
        return _Written(nodes=nodes + stubs, counts=counts)

    def _check_server_writes(self, rec: Record, exc: _Rejected) -> None:
        """Raise `GraphUnavailable` when the server refuses even :data:`WRITE_CHECK`."""
        try:
            self.graph.write_many([(WRITE_CHECK, {"name": SAMPLE_INDEX_MARKER, "at": time.time()})])
        except GraphUnavailable:
            raise
        except (Neo4jError, DriverError) as check:
            raise GraphUnavailable(
                f"the graph server refuses every write ({_first_line(check)}; the record "
                f"{_describe(rec)} was refused with: {exc}): is the disk under its data "
                "directory full? Everything before that record was written; free space and run "
                "the same ingest again (it is idempotent)") from check

    def finish(self) -> IngestSummary:
        try:
            self.flush()
            self.summary.redirects_resolved = resolve_redirects(self.graph)
        finally:
            self.close()
        return self.summary


def check_ingest_options(batch_size: int, error_budget: int) -> None:
    """One clear line for impossible options (before any graph is touched)."""
    if batch_size < 1:
        raise ConfigError(f"--batch-size must be at least 1, got {batch_size}")
    if error_budget < 0:
        raise ConfigError(f"--max-errors must be 0 or more, got {error_budget}")


def resolve_redirects(graph: Graph) -> int:
    """Merge every redirected entity that has a node into its target; returns how many."""
    rows = graph.read(_PENDING_REDIRECTS)
    rows = [r for r in rows if r["source"] != r["target"]]
    if rows:
        try:
            # journaled: the entities pointing at a redirected one get its target in their bags
            # (marked before the moves), the targets get its facts (marked after them)
            write_retrying(
                graph,
                [*journal.bump_statements([]),
                 (journal.MARK_POINTERS, {"journal": journal.NAME, "rows": rows}),
                 *[(q, {"rows": rows}) for q in (_MOVE_FACT_SLOTS, _MOVE_OUT_FACTS, _MOVE_IN_FACTS,
                                                 _MOVE_TYPE_EDGES, _DELETE_REDIRECTED)],
                 *journal.mark_statements(sorted({r["target"] for r in rows}))],
            )
        except _Rejected as exc:
            raise InputError(f"resolving {len(rows)} redirects failed: {exc}") from exc.__cause__
    return len(rows)


#: Python's cyclic collector, run rarely while records are made in bulk: see
#: `kgprobe.runtime.GC_THRESHOLD` (also the parsing workers' setting).
INGEST_GC_THRESHOLD = GC_THRESHOLD


@contextlib.contextmanager
def _ingest_tuning(
    switch_s: float = 0.000005, gc_threshold: int = INGEST_GC_THRESHOLD
) -> Iterator[None]:
    """The interpreter settings an ingest runs with, restored after it (the last of
    overlapping ingests, or of a probe loop beside them, restores them: `kgprobe.runtime`).

    A short GIL switch interval: the writer thread wakes from the server's socket several times
    per statement and needs the GIL each time, which the calling thread (parsing and building
    the next batch) holds; with Python's default 5 ms interval the server sat idle while the
    writer waited. Measured at 1M statements (docs/benchmarks.md): 102.5 s at 5 ms, 101.4 s at
    0.5 ms, 89.2 s at 20 µs, 82.9 s at 5 µs. It costs nothing when only one thread wants the
    GIL. And a rarer cyclic collection (`INGEST_GC_THRESHOLD`)."""
    with prompt_gil_switch(switch_s), rare_collections(gc_threshold):
        yield


def ingest(
    graph: Graph,
    records: Iterable[Record],
    *,
    batch_size: int = 5000,
    error_budget: int = 100,
    on_flush: Callable[[IngestSummary], None] | None = None,
    on_checkpoint: Callable[[Position], None] | None = None,
) -> IngestSummary:
    """Write all ``records``; raises `InputError` once the error budget is exceeded.
    ``on_checkpoint`` gets each :class:`~kgprobe.records.Position` of the records once
    everything before it is committed."""
    ingestor = Ingestor(graph, batch_size=batch_size, error_budget=error_budget, on_flush=on_flush,
                        on_checkpoint=on_checkpoint)
    with _ingest_tuning():
        try:
            try:
                for record in records:
                    ingestor.add(record)
            except InputError:
                if not ingestor.stopped:
                    # the source failed mid-stream (e.g. a truncated .gz): what was read is
                    # written, then the failure is reported — never a buffered batch dropped
                    ingestor.flush()
                raise
            return ingestor.finish()
        finally:
            ingestor.close()
