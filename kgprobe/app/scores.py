"""Reading a model's stored scores (``kgprobe unknown``): the same function from the CLI and
:mod:`kgprobe.api`, options checked here before the graph is contacted."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kgprobe.app.options import check_pids, check_threshold, relations
from kgprobe.config import Settings
from kgprobe.graph.client import connect
from kgprobe.probing.scores import ScoredFact, unknown_in


@dataclass(frozen=True)
class UnknownFacts:
    """The facts a model does not know under one measure and known threshold."""

    model: str
    measure: str
    threshold: float
    facts: list[ScoredFact]


def unknown_facts(model: str, *, relation: str | Iterable[str] | None = None,
                  threshold: float | None = None, measure: str | None = None,
                  below: float | None = None, settings: Settings | None = None) -> UnknownFacts:
    """The facts ``model`` does not know: scored below ``threshold`` (default: the run's) under
    ``measure`` (default: what a plain probe scores), of ``relation`` (PIDs) or of every
    relation. ``below``: the old name of ``threshold``."""
    check_threshold(threshold)
    check_threshold(below, "--below")
    wanted = relations(relation)
    check_pids(wanted)
    limit = threshold if threshold is not None else below
    pids: list[str | None] = list(wanted) or [None]
    with connect(settings) as graph:
        found = [unknown_in(graph, model, relation=pid, below=limit, measure=measure) for pid in pids]
    sc = found[0][0]
    return UnknownFacts(model, sc.props.measure_key, sc.threshold, [f for _, fs in found for f in fs])
