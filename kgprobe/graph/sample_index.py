"""The sampling index: ordinals kept with the data, so that a probe run draws its facts and a
random distractor its candidates without reading every key or all of Ω(f) into Python.

Ingest (kgprobe/graph/ingest.py) gives every fact the next ordinal of its relation, a node
``(:FactSlot {id: "P19:17", key, s})``, and every (entity, type) pair the next ordinal of its
type, ``(:TypeSlot {id: "Q5:3", member: "Q5|Q42", qid})``; the counters live on the Relation
node (``slots_next``, ``slots``) and on the type's Entity node (``member_slots_next``,
``member_slots``). Both slot labels have a unique index on ``id``: a drawn ordinal is one
index seek on a NODE property, which both servers really use (ArcadeDB's Cypher ignores
relationship-property indexes for an unanchored pattern). From the slot, the FACT edge is
reached from its subject (anchored on the QID index).

Ordinals may have gaps (a re-ingested key keeps its first slot; a redirect deletes entities):
a drawn ordinal without a slot is skipped, and sampling draws on.

A graph written before the index existed (or by raw Cypher) gets it built once, on first use
(`ensure_sample_index`, with progress), never answered with a silently wrong sample: the marker
node ``(:SampleIndex {name: 'kgprobe'})`` says the index covers the graph, and the FACT edges'
count is checked against the slots' on every run (both counts are cheap on both servers).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import TypedDict, cast

from kgprobe.graph.client import Graph
from kgprobe.graph.ingest import (
    ANY_ENTITY,
    FACT_SLOT_NEXT,
    GET_SAMPLE_MARKER,
    MERGE_FACT_SLOTS,
    MERGE_TYPE_SLOTS,
    SAMPLE_INDEX_MARKER,
    SAMPLE_INDEX_VERSION,
    SET_SAMPLE_MARKER,
    TYPE_SLOT_NEXT,
    SlotCounters,
    SlotNext,
)
from kgprobe.types import PID

INDEX_VERSION = SAMPLE_INDEX_VERSION
MARKER = SAMPLE_INDEX_MARKER

#: (what, done, total): progress of a one-time build of the index.
Progress = Callable[[str, int, int], None]

COUNT_FACTS = "MATCH ()-[f:FACT]->() RETURN count(f) AS n"
COUNT_FACT_SLOTS = "MATCH (x:FactSlot) RETURN count(x) AS n"

#: Every FACT edge, for the one-time build (the only full read; migrations only).
ALL_FACT_KEYS = """
MATCH (s:Entity)-[f:FACT]->()
RETURN f.pid AS pid, f.key AS key, s.qid AS s
"""
ALL_TYPE_PAIRS = """
MATCH (c:Entity)-[:INSTANCE_OF|INFERRED_TYPE]->(t:Entity)
RETURN DISTINCT t.qid AS t, c.qid AS c
"""
KNOWN_FACT_SLOTS = """
UNWIND $keys AS k
MATCH (x:FactSlot {key: k})
RETURN x.key AS key
"""
KNOWN_TYPE_SLOTS = """
UNWIND $members AS m
MATCH (x:TypeSlot {member: m})
RETURN x.member AS member
"""

#: Ordinal ranges: how far each relation's / type's ordinals go, and how many slots it holds.
RELATION_SLOTS = """
UNWIND $pids AS p
MATCH (r:Relation {pid: p})
RETURN p AS pid, coalesce(r.slots_next, 0) AS next, coalesce(r.slots, 0) AS size
"""
TYPE_SLOTS = """
UNWIND $qids AS q
MATCH (t:Entity {qid: q})
RETURN q AS qid, coalesce(t.member_slots_next, 0) AS next, coalesce(t.member_slots, 0) AS size
"""
#: Relations whose facts are indexed, with their label and fact count (no FACT scan).
RELATIONS_WITH_SLOTS = """
MATCH (r:Relation)
WHERE r.slots > 0
RETURN r.pid AS pid, r.label AS label, r.slots AS facts
ORDER BY pid
"""

BUILD_BATCH = 5000


def _count(graph: Graph, query: str) -> int:
    return int(graph.read(query)[0]["n"])


def index_state(graph: Graph, thorough: bool = False) -> str | None:
    """Why the index does not cover the graph (None: it does). Two node reads; ``thorough``
    also counts the FACT edges against the slots, which finds facts written by raw Cypher after
    the index was built but scans every FACT edge on ArcadeDB (1.5 s at 765k edges), so a run
    does not pay it: kgprobe's own writers keep the index complete."""
    marker = graph.read(GET_SAMPLE_MARKER, name=MARKER)[0]
    if marker["version"] is None:
        if not graph.read(ANY_ENTITY):
            return None  # an empty graph: ingest will index what it writes
        return "the graph predates the sampling index"
    if int(marker["version"]) < INDEX_VERSION:
        return f"sampling index version {marker['version']} < {INDEX_VERSION}"
    if thorough:
        facts = _count(graph, COUNT_FACTS)
        if facts != marker["facts_checked"] and facts != _count(graph, COUNT_FACT_SLOTS):
            return "FACT edges were written without slots (not through kgprobe's ingest)"
    return None


def mark_indexed(graph: Graph) -> None:
    """Say the index covers the graph (ingest on an empty graph, or after a build)."""
    graph.write(SET_SAMPLE_MARKER, name=MARKER, version=INDEX_VERSION, facts=_count(graph, COUNT_FACTS))


def ensure_sample_index(graph: Graph, on_progress: Progress | None = None, *,
                        thorough: bool = False) -> bool:
    """Build what the index lacks (True when something had to be built). Facts get slots in
    (relation, key) order and type members in (type, member) order, so two servers holding the
    same graph build the same ordinals."""
    why = index_state(graph, thorough)
    if why is None:
        return False
    facts = sorted(graph.read(ALL_FACT_KEYS), key=lambda r: (int(r["pid"][1:]), r["key"]))
    pairs = sorted(graph.read(ALL_TYPE_PAIRS), key=lambda r: (r["t"], r["c"]))
    total = len(facts) + len(pairs)
    done = 0
    fact_counters = SlotCounters(FACT_SLOT_NEXT)
    type_counters = SlotCounters(TYPE_SLOT_NEXT)
    if on_progress:
        on_progress(f"building the sampling index ({why})", 0, total)
    for start in range(0, len(facts), BUILD_BATCH):
        chunk = facts[start:start + BUILD_BATCH]
        have = {r["key"] for r in graph.read(KNOWN_FACT_SLOTS, keys=[r["key"] for r in chunk])}
        rows = [{"space": r["pid"], "key": r["key"], "s": r["s"]} for r in chunk if r["key"] not in have]
        if rows:
            written = graph.write(MERGE_FACT_SLOTS, rows=fact_counters.number(graph, rows, ""))
            fact_counters.update(cast(list[SlotNext], written))
        done += len(chunk)
        if on_progress:
            on_progress("facts", done, total)
    for start in range(0, len(pairs), BUILD_BATCH):
        chunk = pairs[start:start + BUILD_BATCH]
        members = [f"{r['t']}|{r['c']}" for r in chunk]
        have = {r["member"] for r in graph.read(KNOWN_TYPE_SLOTS, members=members)}
        rows = [{"space": r["t"], "member": m, "s": r["c"]}
                for r, m in zip(chunk, members, strict=True) if m not in have]
        if rows:
            written = graph.write(MERGE_TYPE_SLOTS, rows=type_counters.number(graph, rows, ""))
            type_counters.update(cast(list[SlotNext], written))
        done += len(chunk)
        if on_progress:
            on_progress("types", done, total)
    mark_indexed(graph)
    return True


def indexed_fact_count(graph: Graph) -> int | None:
    """The number of FACT edges, from the slots when the index covers the graph (a node count,
    cheap on both servers; counting the edges scans them on ArcadeDB), else None."""
    if index_state(graph) is not None:
        return None
    return _count(graph, COUNT_FACT_SLOTS)


class RelationCount(TypedDict):
    """A relation with facts, its label and how many (:data:`RELATIONS_WITH_SLOTS`, and the
    scans ``probe_runs.RELATIONS_WITH_FACTS`` and ``stats._PER_RELATION``)."""

    pid: PID
    label: str | None
    facts: int


def relations_with_slots(graph: Graph) -> list[RelationCount]:
    return cast(list[RelationCount], graph.read(RELATIONS_WITH_SLOTS))


def relation_ranges(graph: Graph, pids: list[str]) -> dict[str, tuple[int, int]]:
    """pid -> (ordinal upper bound, slot count)."""
    rows = graph.read(RELATION_SLOTS, pids=pids) if pids else []
    return {r["pid"]: (int(r["next"]), int(r["size"])) for r in rows}


def type_ranges(graph: Graph, qids: list[str]) -> dict[str, tuple[int, int]]:
    """type QID -> (ordinal upper bound, member slot count)."""
    rows = graph.read(TYPE_SLOTS, qids=qids) if qids else []
    return {r["qid"]: (int(r["next"]), int(r["size"])) for r in rows}


def permutation(n: int, rng: random.Random) -> Iterator[int]:
    """0..n-1 in a seeded random order, lazily: rejection draws while fewer than half are
    taken (memory and time grow with what is drawn, not with n), then the rest shuffled."""
    seen: set[int] = set()
    while 2 * len(seen) < n:
        j = rng.randrange(n)
        if j not in seen:
            seen.add(j)
            yield j
    rest = [j for j in range(n) if j not in seen]
    rng.shuffle(rest)
    yield from rest
