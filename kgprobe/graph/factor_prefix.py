"""Cypher for FACTOR prefixes built from the graph: the other facts of each item's subject
(the paper's prefix is the text before the completion in the same document; from a graph, the
nearest thing is what else the graph says about the same subject).

Anchored on the subject node through the unique QID index and batched (one query for every
subject of a run, ``UNWIND $subjects``), as ``probe_runs`` reads facts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict, cast

from kgprobe.graph.client import Graph
from kgprobe.graph.distractors import check_ids
from kgprobe.types import PID, QID, FactKey

#: Facts of some subjects valid at $ref (started, not ended, not deprecated), both ends
#: labelled; at most $per_subject per subject are used, the rest cut in Python (a per-group
#: limit is not portable across Neo4j and ArcadeDB).
SUBJECT_FACTS = """
UNWIND $subjects AS q
MATCH (s:Entity {qid: q})-[f:FACT]->(o:Entity)
WHERE s.label IS NOT NULL AND o.label IS NOT NULL
  AND (f.rank IS NULL OR f.rank <> 'deprecated')
  AND (f.end_sort IS NULL OR f.end_sort > $ref)
  AND (f.start_sort IS NULL OR f.start_sort <= $ref)
RETURN q AS s, f.key AS key, f.pid AS pid, o.qid AS o, o.label AS o_label
"""


class SubjectFact(TypedDict):
    """A row of :data:`SUBJECT_FACTS`: a valid fact of subject ``s``."""

    s: QID
    key: FactKey
    pid: PID
    o: QID
    o_label: str | None


def subject_facts(graph: Graph, subjects: Sequence[str], ref: int) -> dict[QID, list[SubjectFact]]:
    """Per subject QID, its valid facts ``{key, pid, o, o_label}`` sorted by (PID number,
    object QID number, key) so that prefixes do not depend on the server's row order."""
    wanted = sorted(set(subjects))
    if not wanted:
        return {}
    check_ids(qids=wanted)
    out: dict[QID, list[SubjectFact]] = {q: [] for q in wanted}
    for r in cast(list[SubjectFact], graph.read(SUBJECT_FACTS, subjects=wanted, ref=ref)):
        out[r["s"]].append(r)

    def order(r: SubjectFact) -> tuple[int, int, str]:
        pid, o = str(r["pid"]), str(r["o"])
        return (int(pid[1:]) if pid[1:].isdigit() else 0, int(o[1:]) if o[1:].isdigit() else 0,
                str(r["key"]))

    for rows in out.values():
        rows.sort(key=order)
    return out
