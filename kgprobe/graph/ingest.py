"""Write loader records into the graph: batched, idempotent, one transaction per batch.

Every write is a MERGE keyed by QID, PID or statement key, so re-running an ingest (or finishing
one that was killed) creates no duplicate node or edge. Nodes go in their own statements before
the edges that use them (DESIGN.md §2: ``UNWIND … MERGE … MERGE … ON CREATE SET`` is unreliable
on ArcadeDB), but inside the same transaction, so a failed batch leaves nothing behind.
"""

from __future__ import annotations

import json
import queue
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kgprobe.errors import InputError
from kgprobe.graph.client import Graph
from kgprobe.records import (
    EntityRecord,
    ErrorRecord,
    FactRecord,
    Record,
    RedirectRecord,
    RelationRecord,
    SkipRecord,
    TimeValue,
)

_PROP_KEY = re.compile(r"^[a-z_][a-z0-9_]*$")

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

    def to_dict(self) -> dict[str, Any]:
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


def _time_props(prefix: str, value: TimeValue | None) -> dict[str, Any]:
    if value is None:
        return {}
    return {
        f"{prefix}_time": value.time,
        f"{prefix}_precision": value.precision,
        f"{prefix}_year": value.year,
        f"{prefix}_sort": value.sort_key,
        f"{prefix}_calendar": value.calendar,
    }


def fact_properties(fact: FactRecord) -> dict[str, Any]:
    """The FACT edge's properties (documented in docs/data-model.md); None values left out."""
    props: dict[str, Any] = {"pid": fact.pid, "rank": fact.rank}
    if fact.statement_id:
        props["statement_id"] = fact.statement_id
    if fact.source:
        props["source"] = fact.source
    props.update(_time_props("start", fact.start))
    props.update(_time_props("end", fact.end))
    props.update(_time_props("pit", fact.point_in_time))
    if fact.qualifiers:
        props["qualifiers"] = json.dumps(fact.qualifiers, sort_keys=True, ensure_ascii=False)
    return props


class Ingestor:
    """Buffers records and writes them in batches; call `finish()` at the end."""

    ERRORS_KEPT = 20
    #: QIDs known to have a node, remembered (most recent first out) to skip re-MERGEing stub
    #: nodes for objects that earlier batches already wrote; bounded, so memory stays flat.
    KNOWN_NODES = 500_000

    def __init__(
        self,
        graph: Graph,
        *,
        batch_size: int = 5000,
        error_budget: int = 100,
        on_flush: Callable[[IngestSummary], None] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        self.graph = graph
        self.batch_size = batch_size
        self.error_budget = error_budget
        self.on_flush = on_flush
        self.summary = IngestSummary()
        self._known: OrderedDict[str, None] = OrderedDict()
        self._reset()

    def _remember(self, qids: Iterable[str]) -> None:
        known = self._known
        for q in qids:
            known[q] = None
            known.move_to_end(q)
        while len(known) > self.KNOWN_NODES:
            known.popitem(last=False)

    def _reset(self) -> None:
        self._relations: dict[str, dict[str, Any]] = {}
        self._entities: dict[str, dict[str, Any]] = {}
        self._stubs: set[str] = set()
        self._instance_of: list[dict[str, str]] = []
        self._subclass_of: list[dict[str, str]] = []
        self._inferred: list[dict[str, str]] = []
        self._facts: dict[str, dict[str, Any]] = {}
        self._redirects: list[dict[str, str]] = []
        self._pending = 0

    # --- intake ---------------------------------------------------------------------------
    def add(self, record: Record) -> None:
        s = self.summary
        s.records += 1
        if isinstance(record, EntityRecord):
            self._add_entity(record)
        elif isinstance(record, FactRecord):
            self._add_fact(record)
        elif isinstance(record, RelationRecord):
            props: dict[str, Any] = {
                k: v for k, v in (("label", record.label), ("description", record.description)) if v
            }
            if record.aliases:
                props["aliases"] = list(record.aliases)
            self._relations.setdefault(record.pid, {}).update(props)
            s.relations += 1
        elif isinstance(record, RedirectRecord):
            self._redirects.append({"source": record.source, "target": record.target})
            s.redirects += 1
        elif isinstance(record, SkipRecord):
            s.skipped[record.reason] += record.count
            return
        elif isinstance(record, ErrorRecord):
            s.error_count += 1
            if len(s.errors) < self.ERRORS_KEPT:
                s.errors.append(record)
            if s.error_count > self.error_budget:
                self.flush()
                first = s.errors[0]
                raise InputError(
                    f"stopped after {s.error_count} malformed records (error budget {self.error_budget}); "
                    f"first at {first.location}: {first.message}. Everything before was written; "
                    "fix the input or raise --max-errors and run again"
                )
            return
        else:  # pragma: no cover - a loader bug
            raise TypeError(f"not a record: {record!r}")
        self._pending += 1
        if self._pending >= self.batch_size:
            self.flush()

    def _add_entity(self, rec: EntityRecord) -> None:
        props: dict[str, Any] = {}
        if rec.label:
            props["label"] = rec.label
        if rec.aliases:
            props["aliases"] = list(dict.fromkeys(rec.aliases))
        if rec.description:
            props["description"] = rec.description
        for key, value in rec.extra.items():
            if not _PROP_KEY.match(key) or key in ("qid", "label", "aliases", "description"):
                raise InputError(f"entity {rec.qid}: invalid extra property name {key!r}")
            props[key] = value
        self._entities.setdefault(rec.qid, {}).update(props)
        for t in rec.types:
            self._stubs.add(t)
            self._instance_of.append({"s": rec.qid, "o": t})
        for t, basis in rec.inferred_types:
            self._stubs.add(t)
            self._inferred.append({"s": rec.qid, "o": t, "basis": basis})
        for t in rec.superclasses:
            self._stubs.add(t)
            self._subclass_of.append({"s": rec.qid, "o": t})
        self.summary.entities += 1
        self.summary.type_edges += len(rec.types) + len(rec.superclasses) + len(rec.inferred_types)

    def _add_fact(self, fact: FactRecord) -> None:
        self._stubs.update((fact.subject, fact.object))
        self._relations.setdefault(fact.pid, {})
        self._facts[fact.key] = {"s": fact.subject, "o": fact.object, "key": fact.key, "props": fact_properties(fact)}
        s = self.summary
        s.facts += 1
        s.qualifiers += sum(len(v) for v in fact.qualifiers.values()) + sum(
            t is not None for t in (fact.start, fact.end, fact.point_in_time)
        )
        s.temporal_facts += fact.is_temporal

    # --- output ---------------------------------------------------------------------------
    def flush(self) -> None:
        """Write everything buffered in ONE transaction."""
        stmts: list[tuple[str, dict[str, Any]]] = []
        if self._relations:
            rel_rows = [{"pid": p, "props": props} for p, props in self._relations.items()]
            stmts.append((MERGE_RELATIONS, {"rows": rel_rows}))
        if self._entities:
            ent_rows = [{"qid": q, "props": props} for q, props in self._entities.items()]
            stmts.append((MERGE_ENTITIES, {"rows": ent_rows}))
        stubs = sorted(q for q in self._stubs - self._entities.keys() if q not in self._known)
        if stubs:
            stmts.append((MERGE_STUBS, {"rows": stubs}))
        edge_batches: tuple[tuple[str, list[Any]], ...] = (
            (MERGE_INSTANCE_OF, self._instance_of),
            (MERGE_SUBCLASS_OF, self._subclass_of),
            (MERGE_INFERRED_TYPE, self._inferred),
            (MERGE_FACTS, list(self._facts.values())),
            (MERGE_REDIRECTS, self._redirects),
        )
        for cypher, rows in edge_batches:
            if rows:
                stmts.append((cypher, {"rows": rows}))
        if stmts:
            self.graph.write_many(stmts)
            # only after the transaction committed: a failed batch leaves no node behind
            self._remember(self._entities)
            self._remember(stubs)
        self._reset()
        if self.on_flush:
            self.on_flush(self.summary)

    def finish(self) -> IngestSummary:
        self.flush()
        self.summary.redirects_resolved = resolve_redirects(self.graph)
        return self.summary


def resolve_redirects(graph: Graph) -> int:
    """Merge every redirected entity that has a node into its target; returns how many."""
    rows = graph.read(_PENDING_REDIRECTS)
    rows = [r for r in rows if r["source"] != r["target"]]
    if rows:
        graph.write_many(
            [(q, {"rows": rows}) for q in (_MOVE_OUT_FACTS, _MOVE_IN_FACTS, _MOVE_TYPE_EDGES, _DELETE_REDIRECTED)]
        )
    return len(rows)


_DONE = object()


def prefetch(records: Iterable[Record], chunk: int = 1000, depth: int = 16) -> Iterator[Record]:
    """Read ``records`` in a background thread, so that parsing the next batch overlaps with
    the server writing this one (the Bolt call waits on a socket and releases the GIL).

    Order is kept; an exception in the reader is raised here; closing the iterator early stops
    the reader at its next chunk.
    """
    q: queue.Queue[Any] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def reader() -> None:
        try:
            buf: list[Record] = []
            for rec in records:
                buf.append(rec)
                if len(buf) >= chunk:
                    q.put(buf)
                    buf = []
                    if stop.is_set():
                        return
            if buf:
                q.put(buf)
            q.put(_DONE)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, re-raised there
            q.put(exc)

    thread = threading.Thread(target=reader, name="kgprobe-reader", daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield from item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a reader waiting on a full queue
            try:
                q.get_nowait()
            except queue.Empty:
                thread.join(0.05)


def ingest(
    graph: Graph,
    records: Iterable[Record],
    *,
    batch_size: int = 5000,
    error_budget: int = 100,
    on_flush: Callable[[IngestSummary], None] | None = None,
) -> IngestSummary:
    """Write all ``records``; raises `InputError` once the error budget is exceeded."""
    ingestor = Ingestor(graph, batch_size=batch_size, error_budget=error_budget, on_flush=on_flush)
    for record in prefetch(records):
        ingestor.add(record)
    return ingestor.finish()
