"""Cypher for distractors: typed candidates, temporal candidates, seeded same-type samples,
Ω(f) membership checks, and the feature bags of the semantic index.

Ω(f) for a fact f = (s, r, o) (distractors paper, §3.3) is the set of entities o* that
1. share a type with o — types are the declared ``INSTANCE_OF`` targets, or the documented
   ``INFERRED_TYPE`` fallback where a dataset declares none (never the P279 closure: with the
   whole hierarchy every entity would share "entity");
2. share no label or alias with o, compared after :func:`normalize_label`;
3. are not a true object of (s, r): no non-deprecated ``FACT`` edge (s)-[pid]->(o*).
Candidates also need a label (a distractor without one cannot be verbalized).

Every query is a named constant with parameters only; label normalization is Python (one
function) because portable Cypher has no Unicode-aware punctuation stripping. Dates are compared
through the ``*_sort`` integers (year·10000 + month·100 + day) that ingest writes, so BCE years
and years above 9999 compare correctly.
"""

from __future__ import annotations

import datetime as dt
import functools
import random
import threading
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict, cast

from kgprobe.errors import ConfigError
from kgprobe.graph import sample_index as si
from kgprobe.records import is_pid, is_qid
from kgprobe.types import QID, CypherParams

if TYPE_CHECKING:  # pragma: no cover
    from kgprobe.graph.client import Graph

#: Relationship types that give an entity its types(e).
TYPE_EDGES = "INSTANCE_OF|INFERRED_TYPE"

# --- queries ------------------------------------------------------------------------------------

#: Label, aliases and types of some entities (also what Ω(f) membership is decided on:
#: :func:`omega_members`), as ONE record holding a [qid, label, aliases, types] list per entity
#: (a list keeps its nulls, where parallel ``collect`` columns would drop a null label).
ENTITY_TERMS = f"""
UNWIND $qids AS q
MATCH (e:Entity {{qid: q}})
OPTIONAL MATCH (e)-[:{TYPE_EDGES}]->(t:Entity)
WITH e, collect(DISTINCT t.qid) AS types
RETURN collect([e.qid, e.label, e.aliases, types]) AS rows
"""

#: Every object of (s, r) with its validity, deprecated statements left out.
TRUE_OBJECTS = """
MATCH (s:Entity {qid: $s})-[f:FACT]->(o:Entity)
WHERE f.pid = $pid AND (f.rank IS NULL OR f.rank <> 'deprecated')
RETURN o.qid AS qid, o.label AS label, f.rank AS rank,
       f.start_sort AS start_sort, f.end_sort AS end_sort, f.pit_sort AS pit_sort,
       f.end_precision AS end_precision, f.pit_precision AS pit_precision,
       f.start_time AS start_time, f.end_time AS end_time, f.pit_time AS pit_time
ORDER BY qid
"""

#: Everything Ω(f) needs about f in one round trip: o's terms and types, s's label, and every
#: non-deprecated object of (s, r).
FACT_CONTEXT = f"""
MATCH (o:Entity {{qid: $o}})
OPTIONAL MATCH (o)-[:{TYPE_EDGES}]->(t:Entity)
WITH o, collect(DISTINCT t.qid) AS types
OPTIONAL MATCH (s:Entity {{qid: $s}})
OPTIONAL MATCH (s)-[f:FACT {{pid: $pid}}]->(x:Entity)
WHERE f.rank IS NULL OR f.rank <> 'deprecated'
WITH o, types, s, collect(DISTINCT x.qid) AS trues
RETURN o.label AS label, o.aliases AS aliases, types, s.label AS subject_label, trues
"""

# Candidate sets come back as ONE record of parallel lists (collect per column): ArcadeDB's
# Bolt costs about 0.1 ms per record, so 400 same-type entities as 400 records took 3-4x
# longer than one record holding 400-element lists (benchmarks/bench_distractor_queries.py).
# Labels are never null there (WHERE) and aliases are coalesced, so the lists stay aligned.
# One (entity, type) pair per position; `_rows()` regroups them by entity in Python.

#: Entities having one of $types (o's types), minus $o and the $exclude list (the true objects
#: of (s, r)).
TYPED_CANDIDATES = f"""
UNWIND $types AS tq
MATCH (t:Entity {{qid: tq}})<-[:{TYPE_EDGES}]-(c:Entity)
WHERE c.qid <> $o AND NOT c.qid IN $exclude AND c.label IS NOT NULL
RETURN collect(c.qid) AS qids, collect(c.label) AS labels,
       collect(coalesce(c.aliases, [])) AS aliases, collect(tq) AS types
"""
#: The same, the first $limit (entity, type) pairs in QID order. (A huge $limit cannot stand
#: for "no limit": ArcadeDB 26.10 returns no rows for LIMIT 2**62 and fails for 2**31-1.)
TYPED_CANDIDATES_LIMITED = f"""
UNWIND $types AS tq
MATCH (t:Entity {{qid: tq}})<-[:{TYPE_EDGES}]-(c:Entity)
WHERE c.qid <> $o AND NOT c.qid IN $exclude AND c.label IS NOT NULL
WITH c, tq ORDER BY c.qid LIMIT $limit
RETURN collect(c.qid) AS qids, collect(c.label) AS labels,
       collect(coalesce(c.aliases, [])) AS aliases, collect(tq) AS types
"""

#: Drawn type-member slots of a batch of facts ($rows: {i, ids, types, o, exclude}) → the
#: members of each fact's Ω(f) among them (one seek per slot on its unique id, then the
#: member's types, anchored on its QID).
DRAWN_MEMBERS_BATCH = f"""
UNWIND $rows AS row
UNWIND row.ids AS id
MATCH (x:TypeSlot {{id: id}})
MATCH (c:Entity {{qid: x.qid}})-[:{TYPE_EDGES}]->(t:Entity)
WHERE t.qid IN row.types AND c.qid <> row.o AND NOT c.qid IN row.exclude AND c.label IS NOT NULL
RETURN row.i AS i, id, c.qid AS qid, c.label AS label, coalesce(c.aliases, []) AS aliases,
       collect(DISTINCT t.qid) AS types
"""

#: TYPED_CANDIDATES_LIMITED for a batch of facts ($rows: {i, o, types, exclude}; one $limit
#: per fact): one record of parallel lists per fact, the same statement run per row.
TYPED_CANDIDATES_BATCH = f"""
UNWIND $rows AS row
CALL {{
  WITH row
  UNWIND row.types AS tq
  MATCH (t:Entity {{qid: tq}})<-[:{TYPE_EDGES}]-(c:Entity)
  WHERE c.qid <> row.o AND NOT c.qid IN row.exclude AND c.label IS NOT NULL
  WITH c, tq ORDER BY c.qid LIMIT $limit
  RETURN collect(c.qid) AS qids, collect(c.label) AS labels,
         collect(coalesce(c.aliases, [])) AS aliases, collect(tq) AS types
}}
RETURN row.i AS i, qids, labels, aliases, types
"""

#: FACT_CONTEXT for a batch of facts ($rows: {i, s, pid, o}), one record per fact whose object
#: is in the graph, anchored on the object's and the subject's QID.
FACT_CONTEXTS = f"""
UNWIND $rows AS row
MATCH (o:Entity {{qid: row.o}})
OPTIONAL MATCH (o)-[:{TYPE_EDGES}]->(t:Entity)
WITH row.i AS i, row.s AS sq, row.pid AS pid, o, collect(DISTINCT t.qid) AS types
OPTIONAL MATCH (s:Entity {{qid: sq}})
OPTIONAL MATCH (s)-[f:FACT {{pid: pid}}]->(x:Entity)
WHERE f.rank IS NULL OR f.rank <> 'deprecated'
WITH i, o, types, s, collect(DISTINCT x.qid) AS trues
RETURN i, o.label AS label, o.aliases AS aliases, types, s.label AS subject_label, trues
"""

#: Objects of (s, r) other than $o that were valid before $ref and are not valid at $ref.
#: Per statement: no temporal qualifier → 'always'; point in time only → past/now/future by
#: pit; otherwise the interval [start, end) decides. An object with any 'always' or 'now'
#: statement is still true at $ref and so is no temporal distractor. A coarse end or point in
#: time covers its whole month (precision 10) or year (precision ≤ 9): a stint "until 2013"
#: is still valid on 2013-06-01. (CE dates only; a BCE one is taken at its sort key.)
_TEMPORAL_STATES = """
     CASE
       WHEN f.end_sort IS NULL OR f.end_sort < 0 OR coalesce(f.end_precision, 11) >= 11 THEN f.end_sort
       WHEN f.end_precision = 10 THEN f.end_sort + 99
       ELSE f.end_sort + 9999
     END AS end_eff,
     CASE
       WHEN f.pit_sort IS NULL OR f.pit_sort < 0 OR coalesce(f.pit_precision, 11) >= 11 THEN f.pit_sort + 1
       WHEN f.pit_precision = 10 THEN f.pit_sort + 99
       ELSE f.pit_sort + 9999
     END AS pit_eff
WITH <keep>c, f, end_eff,
     CASE
       WHEN f.start_sort IS NULL AND f.end_sort IS NULL AND f.pit_sort IS NULL THEN 'always'
       WHEN f.start_sort IS NULL AND f.end_sort IS NULL THEN
         CASE WHEN pit_eff <= $ref THEN 'past' WHEN f.pit_sort <= $ref THEN 'now' ELSE 'future' END
       WHEN (f.start_sort IS NULL OR f.start_sort <= $ref) AND (end_eff IS NULL OR end_eff > $ref)
         THEN 'now'
       WHEN end_eff IS NOT NULL AND end_eff <= $ref THEN 'past'
       ELSE 'future'
     END AS state
WITH <keep>c, collect(state) AS states,
     max(coalesce(f.end_sort, f.pit_sort)) AS last_sort,
     collect({start: f.start_time, end: f.end_time, pit: f.pit_time, state: state}) AS statements
WHERE 'past' IN states AND NOT 'now' IN states AND NOT 'always' IN states
"""
TEMPORAL_CANDIDATES = (
    """
MATCH (s:Entity {qid: $s})-[f:FACT]->(c:Entity)
WHERE f.pid = $pid AND (f.rank IS NULL OR f.rank <> 'deprecated') AND c.qid <> $o
WITH c, f,"""
    + _TEMPORAL_STATES.replace("<keep>", "")
    + """RETURN c.qid AS qid, c.label AS label, c.aliases AS aliases, last_sort, statements
ORDER BY last_sort DESC, qid
"""
)
#: TEMPORAL_CANDIDATES for a batch of facts ($rows: {i, s, pid, o}; one $ref), ``i`` telling
#: which fact a row belongs to; each fact's rows in the per-fact order.
TEMPORAL_CANDIDATES_BATCH = (
    """
UNWIND $rows AS row
MATCH (s:Entity {qid: row.s})-[f:FACT]->(c:Entity)
WHERE f.pid = row.pid AND (f.rank IS NULL OR f.rank <> 'deprecated') AND c.qid <> row.o
WITH row.i AS i, c, f,"""
    + _TEMPORAL_STATES.replace("<keep>", "i, ")
    + """RETURN i, c.qid AS qid, c.label AS label, c.aliases AS aliases, last_sort, statements
ORDER BY i, last_sort DESC, qid
"""
)

#: Same-type entity ids only (the random strategy samples them in Python, seeded).
TYPED_IDS = f"""
UNWIND $types AS tq
MATCH (t:Entity {{qid: tq}})<-[:{TYPE_EDGES}]-(c:Entity)
WHERE c.qid <> $o AND NOT c.qid IN $exclude AND c.label IS NOT NULL
RETURN collect(c.qid) AS qids
"""

#: Feature bags: every entity id (one record), then per batch of subjects their facts, declared
#: types and superclasses, each as one record of parallel lists.
ALL_ENTITY_IDS = "MATCH (e:Entity) RETURN collect(e.qid) AS qids"
BAG_FACTS = """
UNWIND $qids AS q
MATCH (e:Entity {qid: q})-[f:FACT]->(o:Entity)
WHERE f.rank IS NULL OR f.rank <> 'deprecated'
RETURN collect(q) AS s, collect(f.pid) AS pid, collect(o.qid) AS o
"""
BAG_INSTANCE_OF = """
UNWIND $qids AS q
MATCH (e:Entity {qid: q})-[:INSTANCE_OF]->(o:Entity)
RETURN collect(q) AS s, collect(o.qid) AS o
"""
BAG_SUBCLASS_OF = """
UNWIND $qids AS q
MATCH (e:Entity {qid: q})-[:SUBCLASS_OF]->(o:Entity)
RETURN collect(q) AS s, collect(o.qid) AS o
"""
#: Subjects per feature-bag batch.
BAG_BATCH = 5000
#: The types of the objects of some relations ($pids: those with templates), then the members
#: of some types: together the entities that can be in an Ω(f) (semantic index candidates).
#: From the types, not the facts: a type is in as soon as one member is such an object (any()
#: stops there), so the work is about the type edges, not every fact of those relations (1M
#: benchmark graph: 0.16 s against 2.7 s for a scan of the facts).
OBJECT_TYPES = f"""
MATCH (t:Entity)<-[:{TYPE_EDGES}]-(o:Entity)
WITH t, collect(o) AS members
WHERE any(o IN members WHERE exists {{ MATCH (:Entity)-[f:FACT]->(o) WHERE f.pid IN $pids }})
RETURN collect(t.qid) AS types
"""
TYPE_MEMBERS = f"""
UNWIND $types AS tq
MATCH (t:Entity {{qid: tq}})<-[:{TYPE_EDGES}]-(c:Entity)
RETURN collect(DISTINCT c.qid) AS qids
"""
TEMPLATED_PIDS = "MATCH (r:Relation)-[:HAS_TEMPLATE]->(:Template) RETURN collect(DISTINCT r.pid) AS pids"

#: The counts a semantic index manifest records.
#: Edges counted by type alone (only Entity nodes have them): Neo4j answers from its count
#: store, ArcadeDB scans the type without reading the ends (5M benchmark graph: FACT 0.96 s
#: against 2.34 s with the ends' labels, INSTANCE_OF 0.89 s against 2.03 s). They run at once
#: (graph_counts): every index check reads them.
COUNT_QUERIES = {
    "entities": "MATCH (e:Entity) RETURN count(e) AS n",
    "facts": "MATCH ()-[f:FACT]->() RETURN count(f) AS n",
    "instance_of": "MATCH ()-[t:INSTANCE_OF]->() RETURN count(t) AS n",
    "subclass_of": "MATCH ()-[t:SUBCLASS_OF]->() RETURN count(t) AS n",
}

ENTITY_BY_QID = "MATCH (e:Entity {qid: $qid}) RETURN e.qid AS qid, e.label AS label"
REDIRECT_TARGET = "MATCH (r:Redirect {qid: $qid}) RETURN r.target AS target"
ENTITY_BY_LABEL = (
    "MATCH (e:Entity {label: $label}) RETURN e.qid AS qid, e.label AS label ORDER BY qid"
)
ENTITY_BY_ALIAS = """
MATCH (e:Entity) WHERE $label IN e.aliases
RETURN e.qid AS qid, e.label AS label ORDER BY qid LIMIT 20
"""
RELATION_BY_PID = "MATCH (r:Relation {pid: $pid}) RETURN r.pid AS pid, r.label AS label"
RELATION_BY_LABEL = """
MATCH (r:Relation) WHERE toLower(r.label) = toLower($label) OR $label IN coalesce(r.aliases, [])
RETURN r.pid AS pid, r.label AS label ORDER BY pid
"""

# --- label normalization ------------------------------------------------------------------------


@functools.lru_cache(maxsize=1 << 16)
def normalize_label(label: str) -> str:
    """The form in which labels are compared for Ω(f): case, whitespace and punctuation erased.

    NFKC, casefold, then every whitespace and punctuation character removed, so "U.S.A." equals
    "usa" and "Jean-Paul" equals "Jean Paul". A label made only of punctuation keeps its
    casefolded form rather than collapsing to "" (which would match every other such label).
    """
    s = unicodedata.normalize("NFKC", label).casefold()
    out = "".join(ch for ch in s if not (ch.isspace() or unicodedata.category(ch).startswith("P")))
    return out or s.strip()


def label_set(label: str | None, aliases: Iterable[str] | None) -> set[str]:
    """Λ(e): the normalized label and aliases of an entity."""
    names = [label] if label else []
    names.extend(a for a in (aliases or []) if a)
    return {normalize_label(n) for n in names}


# --- the rows of those queries ------------------------------------------------------------------


class _Terms(TypedDict):
    """What a candidate is named by: its QID, label and aliases."""

    qid: QID
    label: str | None
    aliases: list[str] | None


class EntityTermsRow(_Terms):
    """One entity of :data:`ENTITY_TERMS` (what Ω(f) membership is decided on)."""

    types: list[QID]


class TrueObject(TypedDict):
    """A row of :data:`TRUE_OBJECTS`: an object of (s, r) and its statement's dates."""

    qid: QID
    label: str | None
    rank: str | None
    start_sort: int | None
    end_sort: int | None
    pit_sort: int | None
    end_precision: int | None
    pit_precision: int | None
    start_time: str | None
    end_time: str | None
    pit_time: str | None


class _ContextRow(TypedDict):
    """A row of :data:`FACT_CONTEXT`."""

    label: str | None
    aliases: list[str] | None
    types: list[QID]
    subject_label: str | None
    trues: list[QID]


class _ContextsRow(_ContextRow):
    """A row of :data:`FACT_CONTEXTS` (``i``: which fact)."""

    i: int


class _Parallel(TypedDict):
    """The one record of :data:`TYPED_CANDIDATES`: parallel lists, one (entity, type) pair each."""

    qids: list[QID] | None
    labels: list[str | None] | None
    aliases: list[list[str]] | None
    types: list[QID] | None


class _ParallelBatch(_Parallel):
    """A record of :data:`TYPED_CANDIDATES_BATCH` (``i``: which fact)."""

    i: int


class _TypedRow(_Terms):
    """One entity of a :data:`TYPED_CANDIDATES` record, its types merged."""

    shared_types: set[QID]


class TemporalRow(_Terms):
    """A row of :data:`TEMPORAL_CANDIDATES`: a past object, when it was last valid, and its
    statements (``{start, end, pit, state}`` each)."""

    last_sort: int | None
    statements: list[dict[str, str | None]] | None


class _TemporalBatchRow(TemporalRow):
    """A row of :data:`TEMPORAL_CANDIDATES_BATCH` (``i``: which fact)."""

    i: int


class _DrawnMember(_Terms):
    """A row of :data:`DRAWN_MEMBERS_BATCH`: a drawn slot's member and its types."""

    i: int
    id: str
    types: list[QID]


class CandidateDetail(TypedDict, total=False):
    """What a temporal candidate was found through (none for the other strategies): when it
    was last valid, and its past statements without their null dates."""

    last_sort: int | None
    statements: list[dict[str, str]]


# --- fact context -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """An entity that qualified as a distractor, with what it was found through."""

    qid: str
    label: str | None
    aliases: tuple[str, ...] = ()
    shared_types: tuple[str, ...] = ()
    detail: CandidateDetail = field(default_factory=lambda: CandidateDetail())


@dataclass
class FactContext:
    """What every strategy needs to know about f = (s, r, o) to stay inside Ω(f)."""

    subject: str
    pid: str
    object: str
    object_label: str | None
    object_labels: set[str]  # normalized Λ(o)
    object_types: list[str]
    true_objects: list[str]  # every non-deprecated object of (s, r)
    subject_label: str | None = None

    def label_clash(self, label: str | None, aliases: Iterable[str] | None) -> bool:
        return bool(label_set(label, aliases) & self.object_labels)


def check_ids(*, qids: Sequence[str] = (), pids: Sequence[str] = ()) -> None:
    bad = [q for q in qids if not is_qid(q)] + [p for p in pids if not is_pid(p)]
    if bad:
        raise ConfigError(f"not a Wikidata id: {', '.join(bad)}")


def entity_terms(graph: Graph, qids: Sequence[str]) -> dict[QID, EntityTermsRow]:
    """qid -> {qid, label, aliases, types} of those ``qids`` that are in the graph (one round
    trip, one record)."""
    if not qids:
        return {}
    result = graph.read(ENTITY_TERMS, qids=list(qids))
    return {q: EntityTermsRow(qid=q, label=label, aliases=aliases, types=types)
            for q, label, aliases, types in ((result[0]["rows"] or []) if result else [])}


def true_objects(graph: Graph, subject: str, pid: str) -> list[TrueObject]:
    check_ids(qids=[subject], pids=[pid])
    return cast(list[TrueObject], graph.read(TRUE_OBJECTS, s=subject, pid=pid))


def fact_context(graph: Graph, subject: str, pid: str, obj: str) -> FactContext:
    """Read o's labels and types and every true object of (s, r) in one round trip."""
    check_ids(qids=[subject, obj], pids=[pid])
    rows = graph.read(FACT_CONTEXT, s=subject, pid=pid, o=obj)
    if not rows:
        raise ConfigError(f"object {obj} is not in the graph")
    return _context(subject, pid, obj, cast(_ContextRow, rows[0]))


def fact_contexts(
    graph: Graph, facts: Iterable[tuple[str, str, str]]
) -> dict[tuple[str, str, str], FactContext]:
    """:func:`fact_context` of many (subject, pid, object) facts in one round trip (a probe
    batch). A fact whose ids are not Wikidata ids or whose object is not in the graph is left
    out: :func:`fact_context` on it says why."""
    wanted = list(dict.fromkeys(facts))
    rows = [{"i": i, "s": s, "pid": p, "o": o} for i, (s, p, o) in enumerate(wanted)
            if is_qid(s) and is_qid(o) and is_pid(p)]
    if not rows:
        return {}
    out = {}
    for r in cast(list[_ContextsRow], graph.read(FACT_CONTEXTS, rows=rows)):
        s, p, o = wanted[r["i"]]
        out[(s, p, o)] = _context(s, p, o, r)
    return out


def _context(subject: str, pid: str, obj: str, o: _ContextRow) -> FactContext:
    return FactContext(
        subject=subject,
        pid=pid,
        object=obj,
        object_label=o.get("label"),
        object_labels=label_set(o.get("label"), o.get("aliases")),
        object_types=sorted(t for t in (o.get("types") or []) if t),
        true_objects=sorted({q for q in (o.get("trues") or []) if q} | {obj}),
        subject_label=o.get("subject_label"),
    )


def _candidate(row: _Terms, shared_types: Iterable[QID] = (),
               detail: CandidateDetail | None = None) -> Candidate:
    return Candidate(
        qid=row["qid"],
        label=row.get("label"),
        aliases=tuple(row.get("aliases") or ()),
        shared_types=tuple(sorted(shared_types)),
        detail=detail if detail is not None else CandidateDetail(),
    )


def _rows(result: Sequence[_Parallel]) -> list[_TypedRow]:
    """One record of parallel lists → one dict per entity, its types merged, QID order."""
    if not result:
        return []
    r = result[0]
    by_qid: dict[str, _TypedRow] = {}
    for q, label, aliases, t in zip(
        r["qids"] or [], r["labels"] or [], r["aliases"] or [], r["types"] or [], strict=True
    ):
        row = by_qid.setdefault(
            q, _TypedRow(qid=q, label=label, aliases=aliases, shared_types=set())
        )
        row["shared_types"].add(t)
    return [by_qid[q] for q in sorted(by_qid, key=qid_order)]


def typed_candidates(graph: Graph, ctx: FactContext, limit: int | None = None) -> list[Candidate]:
    """Ω(f) in QID order (up to ``limit`` (entity, type) pairs read, before the label check)."""
    if not ctx.object_types:
        return []
    params: CypherParams = {
        "types": ctx.object_types,
        "o": ctx.object,
        "exclude": ctx.true_objects,
    }
    if limit is None:
        result = graph.read(TYPED_CANDIDATES, **params)
    else:
        result = graph.read(TYPED_CANDIDATES_LIMITED, limit=limit, **params)
    return [
        _candidate(r, r["shared_types"])
        for r in _rows(cast(list[_Parallel], result))
        if not ctx.label_clash(r.get("label"), r.get("aliases"))
    ]


def typed_candidates_many(
    graph: Graph, contexts: Sequence[FactContext], limit: int
) -> list[list[Candidate]]:
    """:func:`typed_candidates` with ``limit`` of several facts in one round trip (a probe
    batch's semantic plan B), in the order given."""
    rows = [{"i": i, "o": c.object, "types": c.object_types, "exclude": c.true_objects}
            for i, c in enumerate(contexts) if c.object_types]
    by_fact = {r["i"]: r for r in cast(list[_ParallelBatch], graph.read(TYPED_CANDIDATES_BATCH, rows=rows,
                                                                         limit=limit))} if rows else {}
    return [
        [_candidate(r, r["shared_types"]) for r in _rows([by_fact[i]])
         if not c.label_clash(r.get("label"), r.get("aliases"))]
        if i in by_fact else []
        for i, c in enumerate(contexts)
    ]


class EntityTerms:
    """Label, aliases and types (:data:`ENTITY_TERMS`) of entities, each read from the graph
    once and then kept: a probe run asks about the same nearest neighbours, distractors and
    labels fact after fact, so most of its Ω(f) checks and label reads need no round trip.

    Holds at most ``max_entries`` entities (then starts afresh), so memory stays bounded;
    safe to share between the run's threads. Entity terms do not change while a run writes
    its scores (those go on FACT edges), so what is kept is what the graph would answer."""

    def __init__(self, graph: Graph, max_entries: int = 500_000) -> None:
        self.graph, self.max_entries = graph, max_entries
        self._rows: dict[QID, EntityTermsRow | None] = {}
        self._lock = threading.Lock()
        self.read = 0  # entities asked of the graph (the rest were kept)

    def get(self, qids: Iterable[str]) -> dict[QID, EntityTermsRow]:
        """The rows of those entities that are in the graph, in the order asked."""
        wanted = list(dict.fromkeys(qids))
        with self._lock:
            known = {q: self._rows[q] for q in wanted if q in self._rows}
        unknown = [q for q in wanted if q not in known]
        if unknown:
            got = entity_terms(self.graph, unknown)
            with self._lock:
                if len(self._rows) + len(unknown) > self.max_entries:
                    self._rows.clear()
                for q in unknown:
                    self._rows[q] = known[q] = got.get(q)
                self.read += len(unknown)
        return {q: r for q in wanted if (r := known[q]) is not None}


def omega_members(ctx: FactContext, candidates: Sequence[str],
                  terms: Mapping[str, EntityTermsRow]) -> list[Candidate]:
    """The members of Ω(f) among ``candidates`` (in the order given, once each), decided on
    their :data:`ENTITY_TERMS` rows: a label, a type shared with o (the shared ones are
    reported), not o nor a true object of (s, r), no label or alias in common with o."""
    types = set(ctx.object_types)
    exclude = set(ctx.true_objects) | {ctx.object}
    out = []
    for q in dict.fromkeys(candidates):
        r = terms.get(q)
        if r is None or q in exclude or r.get("label") is None:
            continue
        shared = types.intersection(r.get("types") or ())
        if shared and not ctx.label_clash(r["label"], r.get("aliases")):
            out.append(Candidate(q, r["label"], tuple(r.get("aliases") or ()), tuple(sorted(shared))))
    return out


def omega_filter(graph: Graph, ctx: FactContext, candidates: Sequence[str],
                 terms: EntityTerms | None = None) -> list[Candidate]:
    """The members of Ω(f) among ``candidates`` (at most one round trip: none when ``terms``
    already holds them all), in the order given."""
    if not candidates or not ctx.object_types:
        return []
    rows = terms.get(candidates) if terms is not None else entity_terms(graph, list(dict.fromkeys(candidates)))
    return omega_members(ctx, candidates, rows)


def omega_filters(
    graph: Graph, asks: Sequence[tuple[FactContext, Sequence[str]]], terms: EntityTerms | None = None
) -> list[list[Candidate]]:
    """:func:`omega_filter` of several facts, each with its candidates: the terms of every
    candidate of the batch in one round trip (each entity once)."""
    wanted = [q for ctx, cands in asks if ctx.object_types for q in cands]
    if not wanted:
        return [[] for _ in asks]
    rows = terms.get(wanted) if terms is not None else entity_terms(graph, list(dict.fromkeys(wanted)))
    return [omega_members(ctx, cands, rows) if ctx.object_types else [] for ctx, cands in asks]


def date_sort_key(at: dt.date | str | int | None = None) -> int:
    """A reference date as the ``*_sort`` integer; ``None`` is today (UTC).

    Accepts a date, ``YYYY-MM-DD`` (a leading ``-`` for BCE), or an already-sorted integer.
    """
    if at is None:
        at = dt.datetime.now(dt.UTC).date()
    if isinstance(at, int):
        return at
    if isinstance(at, dt.date):
        return at.year * 10000 + at.month * 100 + at.day
    text = at.strip()
    sign = -1 if text.startswith("-") else 1
    try:
        y, m, d = (int(p) for p in text.lstrip("+-").split("-"))
    except ValueError as exc:
        raise ConfigError(f"not a date (YYYY-MM-DD): {at!r}") from exc
    if not (1 <= m <= 12 and 1 <= d <= 31):
        raise ConfigError(f"not a date (YYYY-MM-DD): {at!r}")
    if 1 <= y <= 9999:  # a real calendar day where Python's calendar reaches (not 2023-02-30)
        try:
            dt.date(y, m, d)
        except ValueError as exc:
            raise ConfigError(f"not a date (YYYY-MM-DD): {at!r}") from exc
    return sign * (y * 10000 + m * 100 + d)


def _widen(sort: int | None, precision: int | None, day: int) -> int | None:
    if sort is None:
        return None
    if sort < 0 or (precision or 11) >= 11:
        return sort + day
    return sort + (99 if precision == 10 else 9999)


def statement_state(row: TrueObject, ref: int) -> str:
    """'always', 'now', 'past' or 'future' of one statement at ``ref`` — the rule of
    :data:`TEMPORAL_CANDIDATES`, for rows of :data:`TRUE_OBJECTS`."""
    start, end, pit = row.get("start_sort"), row.get("end_sort"), row.get("pit_sort")
    if start is None and end is None:
        if pit is None:
            return "always"
        pit_eff = _widen(pit, row.get("pit_precision"), 1)
        assert pit_eff is not None
        return "past" if pit_eff <= ref else ("now" if pit <= ref else "future")
    end_eff = _widen(end, row.get("end_precision"), 0)
    if (start is None or start <= ref) and (end_eff is None or end_eff > ref):
        return "now"
    return "past" if end_eff is not None and end_eff <= ref else "future"


def temporal_candidates(
    graph: Graph, ctx: FactContext, at: dt.date | str | int | None = None
) -> list[Candidate]:
    """Objects of (s, r) valid before ``at`` and not at it, most recently valid first.

    Objects that share a normalized label with o are dropped (they would test nothing).
    """
    rows = graph.read(
        TEMPORAL_CANDIDATES, s=ctx.subject, pid=ctx.pid, o=ctx.object, ref=date_sort_key(at)
    )
    return _temporal(ctx, cast(list[TemporalRow], rows))


def temporal_candidates_many(
    graph: Graph, contexts: Sequence[FactContext], at: dt.date | str | int | None = None
) -> list[list[Candidate]]:
    """:func:`temporal_candidates` of several facts in one round trip, in the order given."""
    if not contexts:
        return []
    facts = [{"i": i, "s": c.subject, "pid": c.pid, "o": c.object} for i, c in enumerate(contexts)]
    by_fact: dict[int, list[_TemporalBatchRow]] = {}
    rows = graph.read(TEMPORAL_CANDIDATES_BATCH, rows=facts, ref=date_sort_key(at))
    for r in cast(list[_TemporalBatchRow], rows):
        by_fact.setdefault(r["i"], []).append(r)
    return [_temporal(c, by_fact.get(i, [])) for i, c in enumerate(contexts)]


def _temporal(ctx: FactContext, rows: Sequence[TemporalRow]) -> list[Candidate]:
    out = []
    for r in rows:
        if ctx.label_clash(r.get("label"), r.get("aliases")) or not r.get("label"):
            continue
        stmts = [
            {k: v for k, v in s.items() if v is not None}
            for s in (r.get("statements") or [])
            if s.get("state") == "past"
        ]
        out.append(_candidate(r, detail=CandidateDetail(last_sort=r.get("last_sort"), statements=stmts)))
    return out


def random_same_type(graph: Graph, ctx: FactContext, n: int, seed: int | str) -> list[Candidate]:
    """``n`` members of Ω(f), a seeded uniform draw, read from the sampling index
    (graph/sample_index.py): ordinals over the union of o's types' member ranges are drawn with
    ``random.Random(seed)``, only the drawn members are read and checked against Ω(f), and a
    member of k of o's types is kept with probability 1/k (uniform over Ω(f)). Cost grows with
    ``n`` and the share of Ω(f) among the types' members, not with the types' size (one read of
    the ranges, then about one round trip per ``2n`` draws)."""
    return random_same_type_many(graph, [ctx], n, [seed])[0]


def random_same_type_many(graph: Graph, contexts: Sequence[FactContext], n: int,
                          seeds: Sequence[int | str]) -> list[list[Candidate]]:
    """:func:`random_same_type` of several facts (each with its seed), the same draws fact by
    fact: one read of the type ranges for all of them, then one round trip per round of
    draws, every fact still short drawing in the same round."""
    types = sorted({t for c in contexts for t in c.object_types})
    ranges = si.type_ranges(graph, types)
    if any(ranges.get(t, (0, 0))[0] == 0 for t in types):
        # o is a member of each of its types, so an empty range means the index does not
        # cover this graph yet: build it (once) rather than draw from nothing
        si.ensure_sample_index(graph)
        ranges = si.type_ranges(graph, types)
    draws = [_Draw(ctx, ranges, n, seed) for ctx, seed in zip(contexts, seeds, strict=True)]
    while asks := [(i, ids) for i, d in enumerate(draws) if (ids := d.next_ids())]:
        got: dict[int, dict[str, _DrawnMember]] = {}
        rows = [{"i": i, "ids": ids, "types": contexts[i].object_types, "o": contexts[i].object,
                 "exclude": contexts[i].true_objects} for i, ids in asks]
        for r in cast(list[_DrawnMember], graph.read(DRAWN_MEMBERS_BATCH, rows=rows)):
            got.setdefault(r["i"], {})[r["id"]] = r
        for i, ids in asks:
            draws[i].take(ids, got.get(i, {}))
    return [list(d.out.values()) for d in draws]


class _Draw:
    """One fact's seeded draw (:func:`random_same_type`): which slots to read next, and what
    to keep of what they hold, in the order of the fact's own generator."""

    def __init__(self, ctx: FactContext, ranges: dict[str, tuple[int, int]], n: int,
                 seed: int | str) -> None:
        self.ctx, self.n = ctx, n
        self.spans = [(t, ranges[t][0]) for t in sorted(set(ctx.object_types))
                      if ranges.get(t, (0, 0))[0] > 0]
        self.rng = random.Random(seed)
        self.order = si.permutation(sum(size for _, size in self.spans), self.rng)
        self.out: dict[str, Candidate] = {}
        self.step = max(2 * n, 16)
        self.done = not ctx.object_types

    def next_ids(self) -> list[str]:
        """The next round's slot ids (none: the draw is over)."""
        if self.done or len(self.out) >= self.n:
            return []
        ids: list[str] = []
        for j in self.order:
            for t, size in self.spans:
                if j < size:
                    ids.append(f"{t}:{j}")
                    break
                j -= size
            if len(ids) >= self.step:
                break
        self.done = not ids
        return ids

    def take(self, ids: list[str], got: dict[str, _DrawnMember]) -> None:
        for slot in ids:
            r = got.get(slot)
            if r is None or r["qid"] in self.out or self.ctx.label_clash(r["label"], r["aliases"]):
                continue
            shared = sorted(set(r["types"]))
            if self.rng.random() * len(shared) < 1:
                self.out[r["qid"]] = _candidate(r, shared)
                if len(self.out) >= self.n:
                    break
        self.step *= 2


def omega_bound(graph: Graph, ctx: FactContext) -> int | None:
    """An upper bound on |Ω(f)| from the sampling index (the members of o's types, counted with
    repeats), one read; None where the index does not cover o's types yet."""
    types = sorted(set(ctx.object_types))
    if not types:
        return 0
    ranges = si.type_ranges(graph, types)
    if any(ranges.get(t, (0, 0))[1] == 0 for t in types):
        return None
    return sum(ranges[t][1] for t in types)


def qid_order(q: str) -> tuple[int, str]:
    return (int(q[1:]), q) if is_qid(q) else (2**62, q)


# --- semantic index input -----------------------------------------------------------------------


def graph_counts(graph: Graph) -> dict[str, int]:
    """Counts that tie a semantic index to the graph state (cheap staleness check), read at
    once (the server counts on several cores)."""
    with ThreadPoolExecutor(len(COUNT_QUERIES), thread_name_prefix="kgprobe-count") as pool:
        got = {k: pool.submit(graph.read, q) for k, q in COUNT_QUERIES.items()}
        return {k: int(f.result()[0]["n"]) for k, f in got.items()}


def all_entity_ids(graph: Graph, *, ordered: bool = True) -> list[str]:
    """Every entity's QID in QID order (one record: the one O(N) read of an index build);
    ``ordered=False``: as the server returns them, for a caller that sorts them itself (the
    semantic index sorts their numbers in an array: no set, no key tuple per entity)."""
    rows = graph.read_plain(ALL_ENTITY_IDS)
    ids: list[str] = (rows[0]["qids"] or []) if rows else []
    return sorted(set(ids), key=qid_order) if ordered else ids


def candidate_ids(graph: Graph, *, ordered: bool = True) -> list[str] | None:
    """The entities that can be in some Ω(f) for a relation with templates — members of a type
    of one of its objects — in QID order (``ordered=False``: unordered); None when no relation
    has a template (then every entity can be asked about and the paper's E is indexed)."""
    rows = graph.read(TEMPLATED_PIDS)
    pids = sorted(rows[0]["pids"] or []) if rows else []
    if not pids:
        return None
    rows = graph.read(OBJECT_TYPES, pids=pids)
    types = sorted(rows[0]["types"] or []) if rows else []
    out: set[str] = set()
    for i in range(0, len(types), 1000):
        r = graph.read_plain(TYPE_MEMBERS, types=types[i : i + 1000])
        if r:
            out.update(r[0]["qids"] or [])
    return sorted(out, key=qid_order) if ordered else list(out)


def entity_facts(graph: Graph, qids: Sequence[str] | None = None,
                 batch: int = BAG_BATCH) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """Each entity's (relation, object) pairs — all entities, or ``qids`` — in the order given
    (QID order by default): what its feature bag is built from
    (:func:`kgprobe.probing.semantic.feature_bags`). Read and yielded ``batch`` subjects at a
    time, so memory holds one batch's facts, never the graph's.

    Declared types (P31) and superclasses (P279) count as relations, as they are triples of
    Wikidata; INFERRED_TYPE edges are not facts and are left out. Pairs are sorted so the
    vocabulary order, and with it the seeded SVD, does not depend on the server's row order.
    """
    ids = all_entity_ids(graph) if qids is None else list(qids)
    for start in range(0, len(ids), batch):
        part = ids[start : start + batch]
        pairs: dict[str, list[tuple[str, str]]] = {q: [] for q in part}
        r = graph.read_plain(BAG_FACTS, qids=part)
        if r:
            for s_, p_, o_ in zip(r[0]["s"] or [], r[0]["pid"] or [], r[0]["o"] or [], strict=True):
                pairs[s_].append((p_, o_))
        for pid, q in (("P31", BAG_INSTANCE_OF), ("P279", BAG_SUBCLASS_OF)):
            r = graph.read_plain(q, qids=part)
            if r:
                for s_, o_ in zip(r[0]["s"] or [], r[0]["o"] or [], strict=True):
                    pairs[s_].append((pid, o_))
        for qid in part:
            yield qid, sorted(pairs[qid])


# --- resolving user input -----------------------------------------------------------------------


def resolve_entity(graph: Graph, text: str) -> str:
    """A QID (following a redirect) or an exact label / alias → QID; ambiguity is an error."""
    t = text.strip()
    if is_qid(t.upper()):
        q = t.upper()
        if graph.read(ENTITY_BY_QID, qid=q):
            return q
        red = graph.read(REDIRECT_TARGET, qid=q)
        if red and graph.read(ENTITY_BY_QID, qid=red[0]["target"]):
            return str(red[0]["target"])
        raise ConfigError(f"entity {q} is not in the graph")
    rows = graph.read(ENTITY_BY_LABEL, label=t) or graph.read(ENTITY_BY_ALIAS, label=t)
    if not rows:
        raise ConfigError(f"no entity labelled {t!r} (give a QID?)")
    if len(rows) > 1:
        shown = ", ".join(f"{r['qid']} ({r['label']})" for r in rows[:10])
        raise ConfigError(f"{t!r} is ambiguous: {shown}; give a QID")
    return str(rows[0]["qid"])


def resolve_relation(graph: Graph, text: str) -> str:
    """A PID or a relation label / alias (case-insensitive) → PID."""
    t = text.strip()
    if is_pid(t.upper()):
        return t.upper()
    rows = graph.read(RELATION_BY_LABEL, label=t)
    if not rows:
        raise ConfigError(f"no relation labelled {t!r} (give a PID?)")
    if len(rows) > 1:
        shown = ", ".join(f"{r['pid']} ({r['label']})" for r in rows[:10])
        raise ConfigError(f"{t!r} is ambiguous: {shown}; give a PID")
    return str(rows[0]["pid"])
