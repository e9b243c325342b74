"""The distractor-based knowledge measure (Ammar Khodja et al., "Factual Knowledge Assessment
of Language Models Using Distractors", §3.2).

    Pl(o|c)  = Σ_{λ∈Λ(o)} P(λ + EOS | c)                               (1)

(the sum runs over the distinct sentences the labels make: two labels written alike count once)
    K(f|c)   = Agg_{o*∈Δ_n(f)} 1[Pl(o|c) > Pl(o*|c)]                   (2)
    K(f)     = 1/|C| Σ_{c∈C} K(f|c)                                     (3)

Agg is ``min`` (Min@n: 1 only if o beats every distractor) or ``avg`` (Avg@n). Δ_n(f) is the
first n distractors of a ranked list from any retrieval strategy; the plausibilities of the
longest list are scored once, so K for every n ≤ len(list) and both aggregations come from one
engine run (what the grid search of §4.2 needs). Plausibilities are kept as log-values
(log-sum-exp over labels); the comparison is strict, a tie counts as not preferred.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from kgprobe.errors import ConfigError
from kgprobe.probing.measures.common import (
    ClozeSentence,
    EndMarker,
    Entity,
    Fact,
    Runner,
    cloze_sentences,
    logsumexp,
)
from kgprobe.probing.requests import LogProbRequest, LogProbResult

Aggregation = Literal["min", "avg"]


def knowledge_given_cloze(
    log_pl_true: float, log_pl_distractors: Sequence[float], n: int | None, agg: Aggregation
) -> float | None:
    """K(f|c) (eq. 2) over the first ``n`` distractors (all when ``n`` is None).

    ``None`` when there is no distractor: the aggregation over an empty set is undefined."""
    if agg not in ("min", "avg"):
        raise ConfigError(f"unknown aggregation {agg!r}; use min or avg")
    if n is not None and n < 1:
        raise ConfigError("n must be >= 1")
    ds = list(log_pl_distractors if n is None else log_pl_distractors[:n])
    if not ds:
        return None
    wins = [1.0 if log_pl_true > d else 0.0 for d in ds]
    return min(wins) if agg == "min" else sum(wins) / len(wins)


@dataclass
class ClozePlausibility:
    """log Pl(o|c) and log Pl(o*|c) for each distractor (in the ranked order given)."""

    sentence: ClozeSentence
    log_pl_true: float
    log_pl_distractors: list[float]


@dataclass
class FactPlausibilities:
    """Everything K(f) needs for one fact, for any n and either aggregation."""

    fact: Fact
    distractors: list[Entity]
    clozes: list[ClozePlausibility] = field(default_factory=list)

    def k(self, n: int | None = None, agg: Aggregation = "min") -> float | None:
        """K(f) (eq. 3): the mean over cloze sentences of K(f|c); None without a cloze or a
        distractor. With fewer than ``n`` distractors available, all of them are used."""
        vals = [
            knowledge_given_cloze(c.log_pl_true, c.log_pl_distractors, n, agg) for c in self.clozes
        ]
        got = [v for v in vals if v is not None]
        return sum(got) / len(got) if got else None

    def plausibility(self) -> float | None:
        """Mean over clozes of Pl(o|c) itself (for reports)."""
        if not self.clozes:
            return None
        return sum(math.exp(c.log_pl_true) for c in self.clozes) / len(self.clozes)


@dataclass(frozen=True)
class DistractorItem:
    """A fact with its templates (C(s,r) is built from them × subject labels) and its ranked
    distractors (any strategy: labels or entities with aliases)."""

    fact: Fact
    templates: tuple[str, ...]
    distractors: tuple[Entity | str, ...]


def plausibility_requests(
    c: ClozeSentence, entity: Entity, end: EndMarker, max_labels: int | None = None
) -> list[LogProbRequest]:
    """One request per distinct sentence of ``entity``'s labels λ: log P(λ + EOS | c) (two
    labels written alike are one sentence, counted once in Pl; EndMarker.continuations)."""
    return [LogProbRequest(c.context, cont, eos)
            for cont, eos in end.continuations(c.cloze, entity, max_labels)]


#: One item's clozes, each with its request groups (the true object's, then each distractor's).
_ClozePlan = tuple[tuple[ClozeSentence, tuple[tuple[LogProbRequest, ...], ...]], ...]


@functools.lru_cache(maxsize=2048)
def _item_plan(item: DistractorItem, end: EndMarker, max_distractors: int | None,
               max_subject_labels: int | None, max_object_labels: int | None,
               ) -> tuple[tuple[Entity, ...], _ClozePlan]:
    """An item's distractors (Δ_n) and its requests, C(s, r) × Λ of each entity. Cached: the
    probe loop plans a batch twice, once for its requests, once to read its values off the
    results (kgprobe.probing.measures.registry), and writing the sentences is most of the
    measure's own time. Equal items (frozen, compared by value) give equal requests."""
    ds = tuple(Entity.of(d) for d in item.distractors)[:max_distractors]
    per_cloze = tuple(
        (c, tuple(tuple(plausibility_requests(c, e, end, max_object_labels))
                  for e in (item.fact.object, *ds)))
        for c in cloze_sentences(item.templates, item.fact.subject,
                                 max_subject_labels=max_subject_labels))
    return ds, per_cloze


def distractor_measure(
    runner: Runner,
    items: Sequence[DistractorItem],
    *,
    end: EndMarker | None = None,
    max_distractors: int | None = None,
    max_subject_labels: int | None = None,
    max_object_labels: int | None = None,
) -> list[FactPlausibilities]:
    """Score every item's plausibilities in one engine run.

    ``max_distractors`` truncates each ranked list (Δ_n for the largest n wanted);
    ``max_subject_labels``/``max_object_labels`` bound |Λ(s)| and |Λ(o)|."""
    end = end or EndMarker()
    plans: list[tuple[FactPlausibilities, _ClozePlan]] = []
    requests: list[LogProbRequest] = []
    for item in items:
        args = (item, end, max_distractors, max_subject_labels, max_object_labels)
        try:
            ds, per_cloze = _item_plan(*args)
        except TypeError:  # an item built with lists is not hashable: planned without the cache
            ds, per_cloze = _item_plan.__wrapped__(*args)
        for _, groups in per_cloze:
            for g in groups:
                requests.extend(g)
        plans.append((FactPlausibilities(item.fact, list(ds)), per_cloze))
    results = runner.run(requests)
    if len(results) != len(requests):
        raise ConfigError(f"the engine returned {len(results)} results for {len(requests)} requests")
    # one result per request, in order: read them in the order the requests were listed
    at = 0
    out = []
    for fp, per_cloze in plans:
        for c, groups in per_cloze:
            logs = []
            for g in groups:
                logs.append(logsumexp([_lp(x) for x in results[at : at + len(g)]]))
                at += len(g)
            fp.clozes.append(ClozePlausibility(c, logs[0], logs[1:]))
        out.append(fp)
    return out


def k_scores(
    facts: Sequence[FactPlausibilities], n: int | None, agg: Aggregation
) -> dict[str, float | None]:
    """K(f) per fact key for one (n, Agg): what a grid search's scorer returns, read off the
    stored plausibilities without any new model call."""
    return {fp.fact.key: fp.k(n, agg) for fp in facts}


def _lp(result: object) -> float:
    if not isinstance(result, LogProbResult):
        raise ConfigError("the engine returned a non log-prob result for a LogProbRequest")
    return result.logprob
