"""Cypher for probe runs: choosing facts, ProbeRun provenance, score write-back, and the
questions asked of the scores afterwards (unknown facts, model comparison, report rows).

Scores live on the FACT edges as properties named per model and measure (docs/probing.md):

    score__<model_key>__<measure_key>   the measure's value (float)
    known__<model_key>__<measure_key>   score >= the run's threshold (bool)
    stale__<model_key>__<measure_key>   share of cloze sentences where a past value of (s, r)
                                        beats the current object (only facts with a history)
    run__<model_key>__<measure_key>     id of the ProbeRun that wrote them
    cfg__<model_key>__<measure_key>     hash of the configuration that produced them

Property keys cannot be query parameters in a write, so the two dynamic parts are validated
against ``[a-z0-9_]`` without ``__`` (the separator) before a key is built; reads use
``f[$key]`` with the key as a parameter.

A FACT edge is found by its key only from its subject, bound first through the unique QID index
(``MATCH (s:Entity {qid: row.s})-[f:FACT {key: row.key}]->``): ArcadeDB answers an unanchored
``MATCH ()-[f:FACT {key: $k}]->()`` with a scan of every FACT edge (4 s per fact at 765k edges),
so a fact's key always travels with its subject's QID (``tests/graph/test_cypher_anchoring.py``).
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, cast

from neo4j.exceptions import ConstraintError

from kgprobe.errors import ConfigError, GraphWiped
from kgprobe.graph import sample_index as si
from kgprobe.graph.client import Graph
from kgprobe.graph.distractors import TYPE_EDGES, EntityTermsRow, entity_terms
from kgprobe.graph.server import process_start_time
from kgprobe.provenance import now as provenance_now
from kgprobe.records import is_pid, is_qid
from kgprobe.types import MAX_PART as MAX_PART  # re-exported: the guard lives in kgprobe.types
from kgprobe.types import PID, QID, FactKey, GraphRow, Properties, RunId, ScoreProperty
from kgprobe.types import check_part as check_part

# --- queries ------------------------------------------------------------------------------------

#: Relations that have at least one fact, with their label and fact count.
RELATIONS_WITH_FACTS = """
MATCH ()-[f:FACT]->()
WITH f.pid AS pid, count(f) AS facts
OPTIONAL MATCH (r:Relation {pid: pid})
RETURN pid, r.label AS label, facts
ORDER BY pid
"""

#: Keys of the facts of one relation that can be probed now: both ends labelled, not
#: deprecated, valid at $ref (started, not ended).
CANDIDATE_KEYS = """
MATCH (s:Entity)-[f:FACT]->(o:Entity)
WHERE f.pid = $pid AND s.label IS NOT NULL AND o.label IS NOT NULL
  AND (f.rank IS NULL OR f.rank <> 'deprecated')
  AND (f.end_sort IS NULL OR f.end_sort > $ref)
  AND (f.start_sort IS NULL OR f.start_sort <= $ref)
RETURN f.key AS key, s.qid AS s
"""

#: The subset of CANDIDATE_KEYS whose (subject, relation) had another object that ended
#: by $ref: the facts with a history, on which staleness can be measured.
HISTORY_KEYS = """
MATCH (s:Entity)-[f:FACT]->(o:Entity)
WHERE f.pid = $pid AND s.label IS NOT NULL AND o.label IS NOT NULL
  AND (f.rank IS NULL OR f.rank <> 'deprecated')
  AND (f.end_sort IS NULL OR f.end_sort > $ref)
  AND (f.start_sort IS NULL OR f.start_sort <= $ref)
  AND EXISTS {
    MATCH (s)-[g:FACT]->(p:Entity)
    WHERE g.pid = $pid AND p <> o AND g.end_sort IS NOT NULL AND g.end_sort <= $ref
      AND (g.rank IS NULL OR g.rank <> 'deprecated')
  }
RETURN DISTINCT f.key AS key, s.qid AS s
"""

_VALID_AT_REF = """s.label IS NOT NULL AND o.label IS NOT NULL
  AND (f.rank IS NULL OR f.rank <> 'deprecated')
  AND (f.end_sort IS NULL OR f.end_sort > $ref)
  AND (f.start_sort IS NULL OR f.start_sort <= $ref)"""

#: Drawn slots ({id, pid} rows) → the probe-able facts among them (valid at $ref), each found
#: by a seek on the slot's unique id and then from its subject (graph/sample_index.py).
DRAWN_FACTS = f"""
UNWIND $rows AS row
MATCH (x:FactSlot {{id: row.id}})
MATCH (s:Entity {{qid: x.s}})-[f:FACT {{key: x.key}}]->(o:Entity)
WHERE f.pid = row.pid AND {_VALID_AT_REF}
RETURN row.id AS id, f.key AS key, s.qid AS s, false AS history
"""
#: The same, with whether each fact's (subject, relation) had another object that ended by $ref.
DRAWN_FACTS_HISTORY = f"""
UNWIND $rows AS row
MATCH (x:FactSlot {{id: row.id}})
MATCH (s:Entity {{qid: x.s}})-[f:FACT {{key: x.key}}]->(o:Entity)
WHERE f.pid = row.pid AND {_VALID_AT_REF}
RETURN row.id AS id, f.key AS key, s.qid AS s, EXISTS {{
    MATCH (s)-[g:FACT]->(p:Entity)
    WHERE g.pid = row.pid AND p <> o AND g.end_sort IS NOT NULL AND g.end_sort <= $ref
      AND (g.rank IS NULL OR g.rank <> 'deprecated')
  }} AS history
"""

#: What a probe needs of some facts ({key, s} rows), and the configuration hashes already stored
#: on each (one per ``cfg__`` property in $cfgs, in that order).
FACT_DETAILS = f"""
UNWIND $facts AS row
MATCH (s:Entity {{qid: row.s}})-[f:FACT {{key: row.key}}]->(o:Entity)
OPTIONAL MATCH (s)-[:{TYPE_EDGES}]->(st:Entity)
WITH f, s, o, collect(DISTINCT st.qid) AS s_types
OPTIONAL MATCH (o)-[:{TYPE_EDGES}]->(ot:Entity)
WITH f, s, o, s_types, collect(DISTINCT ot.qid) AS o_types
RETURN f.key AS key, f.pid AS pid, s.qid AS s, s.label AS s_label, s.aliases AS s_aliases,
       o.qid AS o, o.label AS o_label, o.aliases AS o_aliases, [c IN $cfgs | f[c]] AS cfgs,
       s_types, o_types
"""

#: One batch of scores: each row is {key, s, props}; a null in props removes that property.
WRITE_SCORES = """
UNWIND $rows AS row
MATCH (:Entity {qid: row.s})-[f:FACT {key: row.key}]->()
SET f += row.props
RETURN count(f) AS n
"""

CREATE_RUN = """
CREATE (r:ProbeRun {id: $id})
SET r += $props
"""

UPDATE_RUN = """
MATCH (r:ProbeRun {id: $id})
SET r += $props
RETURN count(r) AS n
"""

#: Progress counters, written in the same transaction as the batch of scores they count; the
#: count of runs matched tells the writer whether its run record still exists.
COUNT_RUN = """
MATCH (r:ProbeRun {id: $id})
SET r.facts_scored = coalesce(r.facts_scored, 0) + $scored,
    r.facts_unscorable = coalesce(r.facts_unscorable, 0) + $unscorable,
    r.heartbeat = $now
RETURN count(r) AS n
"""

#: Earlier runs of the same configuration still marked running: each one's owner (host, pid,
#: process start time) is checked before it is called interrupted.
RUNNING_RUNS = """
MATCH (r:ProbeRun)
WHERE r.config_hash = $config_hash AND r.status = 'running' AND r.id <> $id
RETURN r.id AS id, r.owner_host AS host, r.owner_pid AS pid, r.owner_start AS start
"""

#: Those of them whose owner is gone (killed, machine rebooted).
MARK_INTERRUPTED = """
UNWIND $ids AS rid
MATCH (r:ProbeRun {id: rid})
WHERE r.status = 'running'
SET r.status = 'interrupted'
RETURN r.id AS id
"""

#: The key a model writes under, claimed for one fingerprint in one statement: concurrent
#: claims of a new key race on its unique constraint, and the loser reads the winner's.
CLAIM_MODEL_KEY = """
MERGE (k:ModelKey {key: $key})
ON CREATE SET k.fingerprint = $fp, k.claimed = $now
RETURN k.fingerprint AS fp
"""

LIST_RUNS = """
MATCH (r:ProbeRun)
RETURN r {.*} AS run
ORDER BY run.started, run.id
"""

GET_RUN = "MATCH (r:ProbeRun {id: $id}) RETURN r {.*} AS run"

GRAPH_COUNTS = {
    "entities": "MATCH (e:Entity) RETURN count(e) AS n",
    "facts": "MATCH ()-[f:FACT]->() RETURN count(f) AS n",
    "relations": "MATCH (r:Relation) RETURN count(r) AS n",
    "templates": "MATCH (t:Template) RETURN count(t) AS n",
}

_UNKNOWN_RETURN = """
OPTIONAL MATCH (r:Relation {pid: f.pid})
RETURN f.key AS key, f.pid AS pid, r.label AS relation, s.qid AS subject, s.label AS subject_label,
       o.qid AS object, o.label AS object_label, f[$score] AS score, f[$run] AS run
ORDER BY score, pid, subject, object
"""

#: Facts scored below $below for one score property (all relations / one relation).
UNKNOWN_ALL = (
    "MATCH (s:Entity)-[f:FACT]->(o:Entity)\n"
    "WHERE f[$score] IS NOT NULL AND f[$score] < $below\n" + _UNKNOWN_RETURN
)
UNKNOWN_ONE = (
    "MATCH (s:Entity)-[f:FACT]->(o:Entity)\n"
    "WHERE f.pid = $pid AND f[$score] IS NOT NULL AND f[$score] < $below\n" + _UNKNOWN_RETURN
)

#: Facts scored under both score properties where exactly one is at or above $threshold.
COMPARE = """
MATCH (s:Entity)-[f:FACT]->(o:Entity)
WHERE f[$a] IS NOT NULL AND f[$b] IS NOT NULL
  AND ((f[$a] >= $threshold AND f[$b] < $threshold) OR (f[$a] < $threshold AND f[$b] >= $threshold))
OPTIONAL MATCH (r:Relation {pid: f.pid})
RETURN f.key AS key, f.pid AS pid, r.label AS relation, s.qid AS subject, s.label AS subject_label,
       o.qid AS object, o.label AS object_label, f[$a] AS score_a, f[$b] AS score_b
ORDER BY pid, subject, object
"""

#: How many facts both score properties cover, and how many each calls known.
COMPARE_COUNTS = """
MATCH ()-[f:FACT]->()
WHERE f[$a] IS NOT NULL AND f[$b] IS NOT NULL
RETURN count(f) AS both_probed,
       sum(CASE WHEN f[$a] >= $threshold THEN 1 ELSE 0 END) AS a_known,
       sum(CASE WHEN f[$b] >= $threshold THEN 1 ELSE 0 END) AS b_known,
       sum(CASE WHEN f[$a] >= $threshold AND f[$b] >= $threshold THEN 1 ELSE 0 END) AS both_known
"""

#: Per-fact rows of a report: score, staleness, the subject's popularity.
REPORT_ROWS = """
MATCH (s:Entity)-[f:FACT]->(o:Entity)
WHERE f[$score] IS NOT NULL
RETURN f.key AS key, f.pid AS pid, f[$score] AS score, f[$stale] AS stale,
       s.popularity AS popularity
ORDER BY key
"""

#: Per-relation aggregates computed by the server (a quick summary; reports add CIs in Python).
RELATION_AGGREGATES = """
MATCH ()-[f:FACT]->()
WHERE f[$score] IS NOT NULL
RETURN f.pid AS pid, count(f) AS facts, avg(f[$score]) AS mean,
       sum(CASE WHEN f[$score] >= $threshold THEN 1 ELSE 0 END) AS known
ORDER BY pid
"""

#: The model fingerprints recorded by the probe runs that wrote under one model key.
KEY_FINGERPRINTS = """
MATCH (r:ProbeRun)
WHERE r.model_key = $key AND r.model_fingerprint IS NOT NULL
RETURN DISTINCT r.model_fingerprint AS fp
"""

#: Subjects of one relation (KaRR's subject replacement), in QID order.
RELATION_SUBJECTS = """
MATCH (s:Entity)-[f:FACT]->(:Entity)
WHERE f.pid = $pid AND s.label IS NOT NULL
RETURN DISTINCT s.qid AS qid
"""

#: Facts of a relation with labelled ends (BELIEF-ICL demonstrations), deprecated ones left out.
RELATION_FACTS = """
MATCH (s:Entity)-[f:FACT]->(o:Entity)
WHERE f.pid = $pid AND s.label IS NOT NULL AND o.label IS NOT NULL
  AND (f.rank IS NULL OR f.rank <> 'deprecated')
RETURN f.key AS key, f.pid AS pid, s.qid AS s, s.label AS s_label, s.aliases AS s_aliases,
       o.qid AS o, o.label AS o_label, o.aliases AS o_aliases
"""

#: Relations the entity is an object of.
OBJECT_RELATIONS = """
MATCH (:Entity)-[f:FACT]->(o:Entity {qid: $qid})
RETURN DISTINCT f.pid AS pid
"""

#: OBJECT_RELATIONS of several entities, anchored on each one's QID.
OBJECT_RELATIONS_MANY = """
UNWIND $qids AS q
MATCH (:Entity)-[f:FACT]->(o:Entity {qid: q})
RETURN q AS qid, collect(DISTINCT f.pid) AS pids
"""

#: Per-fact values of one measure: $names maps a value name to its property.
MEASURE_ROWS = """
MATCH ()-[f:FACT]->()
WHERE f[$score] IS NOT NULL
RETURN f.key AS key, f.pid AS pid, [n IN $names | f[n]] AS vals
ORDER BY key
"""

#: One score property with each fact's statement key and its (subject, relation, object).
SCORES_WITH_ENDS = """
MATCH (s:Entity)-[f:FACT]->(o:Entity)
WHERE f[$score] IS NOT NULL
RETURN f.key AS key, s.qid AS s, f.pid AS pid, o.qid AS o, f[$score] AS score
ORDER BY key
"""

RELATION_LABELS = """
UNWIND $pids AS p
MATCH (r:Relation {pid: p})
RETURN r.pid AS pid, r.label AS label
"""

# --- the rows of those queries --------------------------------------------------------------------


class RelationFact(TypedDict):
    """A row of :data:`RELATION_FACTS`: a fact with its labelled ends."""

    key: FactKey
    pid: PID
    s: QID
    s_label: str | None
    s_aliases: list[str] | None
    o: QID
    o_label: str | None
    o_aliases: list[str] | None


class FactDetail(RelationFact):
    """A row of :data:`FACT_DETAILS`: what a probe needs of a fact, and the configuration
    hashes stored on it (one per asked ``cfg__`` property, in that order; None: none stored).
    :func:`fact_details` still returns plain dicts: kgprobe/probing carries them on as
    plain dict rows (``Planned.row``) until it takes this record."""

    cfgs: list[str | None]
    s_types: list[QID]
    o_types: list[QID]


class _FactEnds(TypedDict):
    """The columns :data:`UNKNOWN_ALL` and :data:`COMPARE` share: a fact and its named ends."""

    key: FactKey
    pid: PID
    relation: str | None
    subject: QID
    subject_label: str | None
    object: QID
    object_label: str | None


class UnknownFact(_FactEnds):
    """A row of :data:`UNKNOWN_ALL` / :data:`UNKNOWN_ONE`."""

    score: float
    run: RunId | None


class ComparedRow(_FactEnds):
    """A row of :data:`COMPARE`: both score properties' values."""

    score_a: float
    score_b: float


class ReportRow(TypedDict):
    """A row of :data:`REPORT_ROWS` (:func:`report_rows` returns plain dicts until
    kgprobe/reports, which passes them on as plain dicts, takes this record)."""

    key: FactKey
    pid: PID
    score: float
    stale: float | None
    popularity: float | None


class RelationAggregate(TypedDict):
    """A row of :data:`RELATION_AGGREGATES`."""

    pid: PID
    facts: int
    mean: float
    known: int


class ScoredEnds(TypedDict):
    """A row of :data:`SCORES_WITH_ENDS`."""

    key: FactKey
    s: QID
    pid: PID
    o: QID
    score: float


class ScoreRow(TypedDict):
    """One fact's values for :func:`write_scores`: its key, its subject's QID, and the FACT
    properties to set (score property names; a None value removes the property).
    :func:`write_scores` checks any mapping of these keys itself: kgprobe/probing builds them
    as plain dicts."""

    key: FactKey
    s: QID
    props: Properties


class RunOwner(TypedDict):
    """The owner properties of a ProbeRun (:func:`run_owner`)."""

    owner_host: str
    owner_pid: int
    owner_start: str | None


# --- property names ------------------------------------------------------------------------------


def key_part(text: str) -> str:
    """``text`` as a property-key part: lower case, runs of anything but ``[a-z0-9]`` → ``_``."""
    part = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:MAX_PART].strip("_")
    if not part:
        raise ConfigError(f"{text!r} gives an empty property-key part")
    return part


@dataclass(frozen=True)
class ScoreProps:
    """The FACT property names of one (model, measure) pair."""

    model_key: str
    measure_key: str

    def __post_init__(self) -> None:
        check_part(self.model_key)
        check_part(self.measure_key)

    def _name(self, kind: str) -> str:
        return ScoreProperty(kind, self.model_key, self.measure_key).compose()

    @property
    def score(self) -> str:
        return self._name("score")

    @property
    def known(self) -> str:
        return self._name("known")

    @property
    def stale(self) -> str:
        return self._name("stale")

    @property
    def run(self) -> str:
        return self._name("run")

    @property
    def cfg(self) -> str:
        return self._name("cfg")

    def extra(self, value: str) -> str:
        """A measure's further per-fact value, e.g. BELIEF's ``..._rank``."""
        return ScoreProperty("score", self.model_key, self.measure_key, value).compose()

    @classmethod
    def parse(cls, name: str) -> ScoreProps:
        """The pair behind a ``score__m__k`` property name."""
        prop = ScoreProperty.parse(name)
        if prop.kind != "score":
            raise ConfigError(f"not a score property: {name!r}")
        return cls(prop.model_key, prop.measure_key)


# --- choosing facts -----------------------------------------------------------------------------


def relations_with_facts(graph: Graph) -> list[si.RelationCount]:
    """Relations with facts, their labels and fact counts: from the sampling index's counters
    when it covers the graph (no FACT scan), else by a scan."""
    rows = si.relations_with_slots(graph) if si.index_state(graph) is None else []
    return rows or cast(list[si.RelationCount], graph.read(RELATIONS_WITH_FACTS))


def candidate_keys(graph: Graph, pid: str, ref: int) -> dict[str, str]:
    """The probe-able facts of ``pid`` at reference date ``ref`` (a ``*_sort`` int): key ->
    subject QID, in key order (the subject is what a later lookup of the key binds first)."""
    if not is_pid(pid):
        raise ConfigError(f"not a Wikidata property id: {pid!r}")
    return _by_key(graph.read(CANDIDATE_KEYS, pid=pid, ref=ref))


def history_keys(graph: Graph, pid: str, ref: int) -> dict[str, str]:
    """The probe-able facts of ``pid`` whose (subject, relation) has a past object: key -> subject."""
    if not is_pid(pid):
        raise ConfigError(f"not a Wikidata property id: {pid!r}")
    return _by_key(graph.read(HISTORY_KEYS, pid=pid, ref=ref))


def _by_key(rows: Iterable[Mapping[str, str]]) -> dict[FactKey, QID]:
    return {r["key"]: r["s"] for r in sorted(rows, key=lambda r: r["key"])}


def allocate(available: dict[str, int], total: int | None, seed: int) -> dict[str, int]:
    """How many facts each relation gets: an even split of ``total``, what a small relation
    cannot use going to the others; the remainder of the split goes to relations in a seeded
    order. ``None`` takes everything."""
    if total is None:
        return dict(available)
    if total < 0:
        raise ConfigError("--sample must be >= 0")
    order = sorted(available)
    random.Random(f"{seed}|allocate").shuffle(order)
    share = {p: 0 for p in order}
    left = min(total, sum(available.values()))
    while left > 0:
        open_ = [p for p in order if share[p] < available[p]]
        each, extra = divmod(left, len(open_))
        for i, p in enumerate(open_):
            take = min(each + (1 if i < extra else 0), available[p] - share[p])
            share[p] += take
            left -= take
    return share


def sample_keys(
    keys_by_pid: dict[str, list[str]], total: int | None, seed: int,
    first: dict[str, list[str]] | None = None,
) -> list[str]:
    """Stratified, seeded sample: each relation's sorted keys sampled with its own
    ``random.Random`` (so adding a relation does not change another's sample). Keys in
    ``first[pid]`` (e.g. facts with a history) are drawn before the others of their relation."""
    share = allocate({p: len(k) for p, k in keys_by_pid.items()}, total, seed)
    out: list[str] = []
    for pid in sorted(keys_by_pid, key=lambda p: int(p[1:])):
        keys = sorted(keys_by_pid[pid])
        k = share.get(pid, 0)
        rng = random.Random(f"{seed}|{pid}")
        preferred = sorted(set((first or {}).get(pid, ())) & set(keys))
        if not preferred:
            out.extend(keys if k >= len(keys) else rng.sample(keys, k))
            continue
        rest = sorted(set(keys) - set(preferred))
        head = preferred if k >= len(preferred) else rng.sample(preferred, k)
        left = k - len(head)
        out.extend(head + (rest if left >= len(rest) else rng.sample(rest, left)))
    return out


class _Stream:
    """One relation's facts in a seeded random order of its ordinals, pulled lazily: only the
    drawn slots are read, and only the facts valid at the reference date are kept."""

    def __init__(self, pid: str, upper: int, seed: int, history: bool) -> None:
        self.pid = pid
        self.order = si.permutation(upper, random.Random(f"{seed}|{pid}|slots"))
        self.history = history
        self.hist: list[tuple[str, str]] = []
        self.rest: list[tuple[str, str]] = []
        self.exhausted = upper == 0
        self.drawn = 0

    @property
    def found(self) -> int:
        return len(self.hist) + len(self.rest)

    def short_of(self, k: int) -> int:
        """How many more valid facts are wanted for a quota of ``k`` (history facts first:
        with --history-first, the relation is read on until ``k`` facts with a history are
        found or none is left)."""
        if self.exhausted:
            return 0
        return max(0, k - (len(self.hist) if self.history else self.found))

    def draw(self, n: int) -> list[dict[str, str]]:
        """The next ``n`` drawn slots as ``{id, pid}`` rows of :data:`DRAWN_FACTS`."""
        ids = []
        for j in self.order:
            ids.append({"id": f"{self.pid}:{j}", "pid": self.pid})
            if len(ids) >= n:
                break
        else:
            self.exhausted = True
        self.drawn += len(ids)
        return ids

    def take(self, k: int) -> list[tuple[str, str]]:
        return (self.hist + self.rest)[:k]


def sample_facts(
    graph: Graph,
    relations: Sequence[str],
    *,
    total: int | None,
    per_relation: int | None = None,
    seed: int,
    ref: int,
    history_first: bool = False,
    shard: tuple[int, int] | None = None,
    on_progress: si.Progress | None = None,
) -> dict[str, str]:
    """The run's facts, key -> subject QID, in relation order (numeric PID), each relation's in
    its seeded draw order (facts with a history first under ``history_first``).

    Stratified as `allocate` splits ``total`` (or ``per_relation`` facts of each relation),
    drawn from the sampling index (graph/sample_index.py): seeded ordinals per relation, only
    the drawn facts read, those valid at ``ref`` kept, more drawn until the quota is met or the
    relation is used up; a relation that has fewer valid facts than its share gives the rest
    to the others. Cost grows with the sample, not the graph. Same graph, seed and arguments →
    the same facts; ``shard`` keeps the part `shard_keys` gives shard K of N."""
    for pid in relations:
        if not is_pid(pid):
            raise ConfigError(f"not a Wikidata property id: {pid!r}")
    si.ensure_sample_index(graph, on_progress)
    pids = sorted(set(relations), key=lambda p: int(p[1:]))
    ranges = si.relation_ranges(graph, pids)
    streams = {p: _Stream(p, ranges.get(p, (0, 0))[0], seed, history_first) for p in pids}
    query = DRAWN_FACTS_HISTORY if history_first else DRAWN_FACTS
    avail = {p: ranges.get(p, (0, 0))[1] for p in pids}
    while True:
        share = ({p: per_relation for p in pids} if per_relation is not None
                 else allocate(avail, total, seed))
        while True:
            rows: list[dict[str, str]] = []
            for p, st in streams.items():
                want = st.short_of(share[p])
                if want:
                    # draw what the shortfall needs at the rate seen so far, never fewer than 8
                    rate = (st.found + 1) / (st.drawn + 2)
                    rows.extend(st.draw(max(8, min(5000, int(want / rate * 1.2) + 1))))
            if not rows:
                break
            got = {r["id"]: r for r in graph.read(query, rows=rows, ref=ref)}
            for row in rows:
                hit = got.get(row["id"])
                if hit is not None:
                    st = streams[row["pid"]]
                    (st.hist if hit["history"] else st.rest).append((hit["key"], hit["s"]))
        if per_relation is not None:
            break
        # a relation used up below its share holds exactly what it has: share the rest again
        short = {p: st.found for p, st in streams.items() if st.exhausted and st.found < avail[p]}
        if not short:
            break
        avail.update(short)
    out: dict[str, str] = {}
    for p in pids:
        for key, s in streams[p].take(share[p]):
            out[key] = s
    return {k: out[k] for k in shard_keys(list(out), shard)}


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` (1 <= K <= N) as (K, N)."""
    k, sep, n = text.partition("/")
    try:
        shard = (int(k), int(n))
    except ValueError:
        shard = (0, 0)
    if not sep or not (1 <= shard[0] <= shard[1]):
        raise ConfigError(f"--shard wants K/N with 1 <= K <= N, got {text!r}")
    return shard


def shard_keys(keys: Sequence[str], shard: tuple[int, int] | None) -> list[str]:
    """The keys of shard K of N: a stable hash of each fact key mod N (sha256, not Python's
    salted ``hash``), so N processes, on one machine or several, split the same sample into
    disjoint parts whose union is the whole, whatever the order the keys come in."""
    if shard is None or shard[1] == 1:
        return list(keys)
    k, n = shard
    return [key for key in keys
            if int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % n == k - 1]


def fact_details(
    graph: Graph, keys: Sequence[str], subjects: Mapping[str, str], cfg_props: Sequence[str]
) -> list[dict[str, Any]]:
    """:class:`FactDetail` rows: subject, object, labels and the stored configuration hashes of
    each key, in key order; ``subjects`` maps each key to its subject's QID (from
    ``candidate_keys``)."""
    facts = [{"key": k, "s": subjects[k]} for k in keys]
    rows = graph.read(FACT_DETAILS, facts=facts, cfgs=list(cfg_props))
    by_key = {r["key"]: r for r in rows}
    return [by_key[k] for k in keys if k in by_key]


def entity_labels(graph: Graph, qids: Iterable[str]) -> dict[QID, EntityTermsRow]:
    wanted = sorted(set(qids))
    if not wanted:
        return {}
    return entity_terms(graph, wanted)


def graph_counts(graph: Graph) -> dict[str, int]:
    """Entities, facts, relations, templates: node counts, and the facts from the sampling
    index's slots where it covers the graph (counting FACT edges scans them on ArcadeDB)."""
    facts = si.indexed_fact_count(graph)
    return {k: facts if k == "facts" and facts is not None else int(graph.read(q)[0]["n"])
            for k, q in GRAPH_COUNTS.items()}


# --- runs and write-back -------------------------------------------------------------------------


def run_owner() -> RunOwner:
    """This process as a ProbeRun's owner: host name, pid and the pid's start time (a pid
    reused by another process after a reboot or wrap-around has another start time)."""
    return {"owner_host": socket.gethostname(), "owner_pid": os.getpid(),
            "owner_start": process_start_time(os.getpid())}


#: Runs this process is probing right now (a process may run several, one after another or
#: at once through the Python API): its own run that is not in here is over.
_ACTIVE: set[str] = set()


def owner_alive(run_id: str, host: object, pid: object, start: object) -> bool:
    """Whether a run's recorded owner may still be probing it. A run without an owner (written
    by an older kgprobe) is not; one of another host is left alone (its processes cannot be
    seen from here); on this host, its process must run (same pid and start time) and, when
    that process is this one, the run must be one it is probing now."""
    if host is None or pid is None:
        return False
    if str(host) != socket.gethostname():
        return True
    me = run_owner()
    if str(pid) == str(me["owner_pid"]) and str(start) == str(me["owner_start"]):
        return run_id in _ACTIVE
    try:
        alive = process_start_time(int(str(pid)))
    except ValueError:
        return False
    return alive is not None and (start is None or str(start) == alive)


def release_run(run_id: str) -> None:
    """This process no longer probes ``run_id`` (finished, failed or interrupted)."""
    _ACTIVE.discard(run_id)


def create_run(graph: Graph, run_id: str, props: Mapping[str, object]) -> list[str]:
    """Record a new ProbeRun, owned by this process (``run_owner``). Earlier runs of the same
    configuration still marked running whose owner is gone are marked ``interrupted`` (returns
    their ids); one whose process is alive (a concurrent probe) is left alone."""
    graph.write(CREATE_RUN, id=run_id, props={**props, **run_owner()})
    _ACTIVE.add(run_id)
    running = graph.read(RUNNING_RUNS, id=run_id, config_hash=props.get("config_hash"))
    dead = [r["id"] for r in running if not owner_alive(r["id"], r["host"], r["pid"], r["start"])]
    return [r["id"] for r in graph.write(MARK_INTERRUPTED, ids=dead)] if dead else []


def update_run(graph: Graph, run_id: str, props: Mapping[str, object]) -> None:
    """Set properties of a run; its record gone (the graph wiped under the run) is `GraphWiped`."""
    if not graph.write(UPDATE_RUN, id=run_id, props=props)[0]["n"]:
        raise GraphWiped(gone(run_id))


def gone(run_id: str) -> str:
    return (f"the graph was wiped, or probe run {run_id[:8]}'s record deleted, while the run was "
            "probing")


def claim_model_key(graph: Graph, key: str, fingerprint: str) -> str:
    """The fingerprint of the weights ``key`` belongs to, claiming it for ``fingerprint`` if it
    belongs to none yet. Decided by the server in one MERGE on the unique ``ModelKey.key``, so
    two probes of different weights under one name started together never both get the key.
    A key used before ModelKey nodes existed belongs to the weights its probe runs recorded."""
    check_part(key)
    seen = key_fingerprints(graph, key)
    owner = fingerprint if not seen or fingerprint in seen and len(seen) == 1 else sorted(seen - {fingerprint})[0]
    for attempt in range(3):
        try:
            return str(graph.write(CLAIM_MODEL_KEY, key=key, fp=owner, now=provenance_now())[0]["fp"])
        except ConstraintError:
            # another probe created the key between our MERGE's look and its commit: read it
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def write_scores(
    graph: Graph, run_id: str, rows: Sequence[Mapping[str, Any]], *, scored: int, unscorable: int, now: str
) -> None:
    """One batch of :class:`ScoreRow` rows (``s``: the subject's QID) and the run's counters,
    in ONE transaction: a batch is either written with its count or not at all.

    The transaction commits only if the run's record and every fact of the batch were found:
    a graph wiped (or a run record deleted) under the probe is `GraphWiped`, nothing of the
    batch written, never scores silently matched to nothing and counted as written."""
    for row in rows:
        if not is_qid(str(row.get("s"))):
            raise ConfigError(f"a score row needs its fact's subject QID, got {row.get('s')!r}")
        for name in row["props"]:
            try:
                ScoreProperty.parse(name)
            except ConfigError as e:
                raise ConfigError(f"refusing to write FACT property: {e}") from None

    def check(results: list[list[GraphRow]]) -> None:
        written, runs = results[0][0]["n"], results[1][0]["n"]
        if not runs:
            raise GraphWiped(gone(run_id))
        if written != len(rows):
            raise GraphWiped(f"{len(rows) - written} of the {len(rows)} facts of a write batch are no "
                             f"longer in the graph: they were deleted while probe run {run_id[:8]} "
                             "ran (the graph wiped or changed under it); nothing of the batch was written")

    graph.write_many([
        (WRITE_SCORES, {"rows": rows}),
        (COUNT_RUN, {"id": run_id, "scored": scored, "unscorable": unscorable, "now": now}),
    ], check=check)


def list_runs(graph: Graph) -> list[Properties]:
    """Every ProbeRun's properties (an open map: ``provenance.read_run`` reads them)."""
    return [r["run"] for r in graph.read(LIST_RUNS)]


def get_run(graph: Graph, run_id: str) -> Properties | None:
    rows = graph.read(GET_RUN, id=run_id)
    return rows[0]["run"] if rows else None


# --- questions ------------------------------------------------------------------------------------


def unknown_facts(
    graph: Graph, props: ScoreProps, below: float, pid: str | None = None
) -> list[UnknownFact]:
    """Facts whose score is below ``below``, lowest first."""
    if pid is None:
        rows = graph.read(UNKNOWN_ALL, score=props.score, run=props.run, below=below)
    elif not is_pid(pid):
        raise ConfigError(f"not a Wikidata property id: {pid!r}")
    else:
        rows = graph.read(UNKNOWN_ONE, score=props.score, run=props.run, below=below, pid=pid)
    return cast(list[UnknownFact], rows)


def compare_facts(
    graph: Graph, a: ScoreProps, b: ScoreProps, threshold: float
) -> tuple[list[ComparedRow], dict[str, int]]:
    """Facts one model knows and the other does not, and the overall counts."""
    rows = cast(list[ComparedRow], graph.read(COMPARE, a=a.score, b=b.score, threshold=threshold))
    counts = graph.read(COMPARE_COUNTS, a=a.score, b=b.score, threshold=threshold)[0]
    return rows, {k: int(v or 0) for k, v in counts.items()}


def report_rows(graph: Graph, props: ScoreProps) -> list[dict[str, Any]]:
    """:class:`ReportRow` rows."""
    return graph.read(REPORT_ROWS, score=props.score, stale=props.stale)


def relation_aggregates(graph: Graph, props: ScoreProps, threshold: float) -> list[RelationAggregate]:
    return cast(list[RelationAggregate],
                graph.read(RELATION_AGGREGATES, score=props.score, threshold=threshold))


def key_fingerprints(graph: Graph, model_key: str) -> set[str]:
    """Fingerprints of the weights whose scores were written under ``model_key``."""
    return {str(r["fp"]) for r in graph.read(KEY_FINGERPRINTS, key=check_part(model_key))}


def relation_subjects(graph: Graph, pid: str, seed: int, limit: int = 50) -> list[str]:
    """Up to ``limit`` subjects of ``pid``, a seeded sample of the QID-sorted list."""
    if not is_pid(pid):
        raise ConfigError(f"not a Wikidata property id: {pid!r}")
    qids = sorted({r["qid"] for r in graph.read(RELATION_SUBJECTS, pid=pid)})
    return qids if len(qids) <= limit else sorted(random.Random(f"{seed}|{pid}|subjects").sample(qids, limit))


def relation_facts(graph: Graph, pid: str, seed: int, limit: int = 20) -> list[RelationFact]:
    """Up to ``limit`` facts of ``pid`` (key, ends, labels), a seeded sample of the key-sorted
    list: BELIEF-ICL's demonstration pool, independent of which facts a batch holds."""
    if not is_pid(pid):
        raise ConfigError(f"not a Wikidata property id: {pid!r}")
    rows = sorted(cast(list[RelationFact], graph.read(RELATION_FACTS, pid=pid)), key=lambda r: r["key"])
    if len(rows) > limit:
        picked = set(random.Random(f"{seed}|{pid}|facts").sample(range(len(rows)), limit))
        rows = [r for i, r in enumerate(rows) if i in picked]
    return rows


def object_relations(graph: Graph, qid: str) -> list[str]:
    return sorted({r["pid"] for r in graph.read(OBJECT_RELATIONS, qid=qid)}, key=lambda p: int(p[1:]))


def object_relations_many(graph: Graph, qids: Iterable[str]) -> dict[str, list[str]]:
    """:func:`object_relations` of several entities in one round trip (every one asked for is
    in the answer, with [] when it is the object of no fact)."""
    wanted = sorted(set(qids))
    out: dict[str, list[str]] = {q: [] for q in wanted}
    if wanted:
        for r in graph.read(OBJECT_RELATIONS_MANY, qids=wanted):
            out[r["qid"]] = sorted(set(r["pids"] or []), key=lambda p: int(p[1:]))
    return out


def measure_rows(graph: Graph, names: dict[str, str]) -> list[GraphRow]:
    """{key, pid, <value name>: value} per fact that has ``names['score']`` (a GraphRow: the
    caller names the value columns)."""
    order = list(names)
    rows = graph.read(MEASURE_ROWS, score=names["score"], names=[names[n] for n in order])
    return [{"key": r["key"], "pid": r["pid"], **dict(zip(order, r["vals"], strict=True))} for r in rows]


def scores_with_ends(graph: Graph, props: ScoreProps) -> list[ScoredEnds]:
    """{key, s, pid, o, score} of every fact scored under ``props``."""
    return cast(list[ScoredEnds], graph.read(SCORES_WITH_ENDS, score=props.score))


def relation_labels(graph: Graph, pids: Iterable[str]) -> dict[str, str | None]:
    wanted = sorted(set(pids))
    return {r["pid"]: r["label"] for r in graph.read(RELATION_LABELS, pids=wanted)} if wanted else {}
