"""kgprobe-shortest: a distractor strategy from outside kgprobe (docs/distractors.md)."""

from __future__ import annotations

from kgprobe.graph.client import Graph
from kgprobe.graph.distractors import FactContext, qid_order, typed_candidates
from kgprobe.probing.distractors import Distractor
from kgprobe.probing.strategies import STRATEGIES, DistractorStrategy, Search


@STRATEGIES.register
class Shortest(DistractorStrategy):
    """The members of Ω(f) (entities sharing o's type, not objects of (s, r)) whose labels are
    the shortest; ties in QID order."""

    name = "shortest"
    summary = "the members of Ω(f) with the shortest labels"

    def find(self, graph: Graph, ctx: FactContext, n: int,
             search: Search) -> tuple[list[Distractor], str | None]:
        members = sorted(typed_candidates(graph, ctx),
                         key=lambda c: (len(c.label or ""), qid_order(c.qid)))[:n]
        found = [Distractor(i + 1, c.qid, c.label, "short label", None, list(c.shared_types))
                 for i, c in enumerate(members)]
        return found, None if len(found) == n else f"Ω(f) has only {len(found)} members"
