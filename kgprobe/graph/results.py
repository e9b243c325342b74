"""Cypher for reports and results files: the per-fact rows behind every figure, the popularity
of all facts, and the type subgraph (``--by type``).

Score property names come from :class:`kgprobe.graph.probe_runs.ScoreProps` (validated there)
and reach Cypher as parameters (``f[$score]``), never spliced into the text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict, cast

from kgprobe.graph.client import Graph
from kgprobe.graph.probe_runs import ScoreProps
from kgprobe.types import PID, QID, FactKey, MeasureKey, RunId

#: Per-fact rows of one (model, measure): ends with labels, the subject's popularity, the score,
#: staleness, the run that wrote it, and the values of the model's other measures ($others, in
#: that order; null where a measure did not score the fact).
FACT_ROWS = """
MATCH (s:Entity)-[f:FACT]->(o:Entity)
WHERE f[$score] IS NOT NULL
RETURN f.key AS key, f.pid AS pid, s.qid AS subject, s.label AS subject_label,
       o.qid AS object, o.label AS object_label, s.popularity AS popularity,
       o.popularity AS object_popularity, f[$score] AS score, f[$stale] AS stale, f[$run] AS run,
       [p IN $others | f[p]] AS others
ORDER BY key
"""

#: The ends of some facts (rows {key, s}) as a report shows them: labels and popularity. A probe
#: set carries them (``kgprobe export``) so that its report needs no graph.
FACT_ENDS = """
UNWIND $facts AS row
MATCH (s:Entity {qid: row.s})-[f:FACT {key: row.key}]->(o:Entity)
RETURN f.key AS key, s.label AS subject_label, o.label AS object_label,
       s.popularity AS popularity, o.popularity AS object_popularity
"""

#: Direct classes of some entities: declared P31 (INSTANCE_OF) and the documented fallback
#: types (INFERRED_TYPE), as docs/data-model.md says "the type of an entity" is read.
ENTITY_CLASSES = """
UNWIND $qids AS q
MATCH (e:Entity {qid: q})-[t:INSTANCE_OF|INFERRED_TYPE]->(c:Entity)
RETURN q AS qid, c.qid AS class, c.label AS label
"""

#: The whole P279 subgraph, pulled once; the closure is computed in networkx.
SUBCLASS_EDGES = """
MATCH (a:Entity)-[:SUBCLASS_OF]->(b:Entity)
RETURN a.qid AS sub, a.label AS sub_label, b.qid AS super, b.label AS super_label
"""


class FactEnds(TypedDict):
    """What a report shows of a fact's ends (:data:`FACT_ENDS` without its key)."""

    subject_label: str | None
    object_label: str | None
    popularity: float | None
    object_popularity: float | None


class FactScoreRow(FactEnds):
    """A row of :data:`FACT_ROWS`; ``others``: measure key -> that measure's value of the fact
    (None: it did not score it). :func:`fact_rows` returns plain dicts: kgprobe/reports adds
    its own columns to them (``scale``) and passes them on as plain dicts."""

    key: FactKey
    pid: PID
    subject: QID
    object: QID
    score: float
    stale: float | None
    run: RunId | None
    others: dict[MeasureKey, float | None]


#: A row of :data:`ENTITY_CLASSES` (``class`` is a keyword: the functional form)
EntityClass = TypedDict("EntityClass", {"qid": QID, "class": QID, "label": str | None})


class SubclassEdge(TypedDict):
    """A row of :data:`SUBCLASS_EDGES`."""

    sub: QID
    sub_label: str | None
    super: QID
    super_label: str | None


def fact_rows(graph: Graph, props: ScoreProps, others: Sequence[ScoreProps] = ()) -> list[dict[str, Any]]:
    """Every fact scored under ``props`` (:class:`FactScoreRow`), with ``others``' values of the
    same facts."""
    rows = graph.read(FACT_ROWS, score=props.score, stale=props.stale, run=props.run,
                      others=[o.score for o in others])
    for r in rows:
        r["others"] = dict(zip([o.measure_key for o in others], r.get("others") or [], strict=False))
    return rows


def fact_ends(graph: Graph, facts: Sequence[Mapping[str, object]]) -> dict[FactKey, FactEnds]:
    """key -> {subject_label, object_label, popularity, object_popularity} of ``facts``
    (rows with ``key`` and ``s``, the subject's QID)."""
    rows = graph.read(FACT_ENDS, facts=[{"key": f["key"], "s": f["s"]} for f in facts]) if facts else []
    return {r["key"]: FactEnds(subject_label=r["subject_label"], object_label=r["object_label"],
                               popularity=r["popularity"], object_popularity=r["object_popularity"])
            for r in rows}


def entity_classes(graph: Graph, qids: Iterable[str]) -> list[EntityClass]:
    wanted = sorted(set(qids))
    return cast(list[EntityClass], graph.read(ENTITY_CLASSES, qids=wanted)) if wanted else []


def subclass_edges(graph: Graph) -> list[SubclassEdge]:
    return cast(list[SubclassEdge], graph.read(SUBCLASS_EDGES))
