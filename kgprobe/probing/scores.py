"""The read side of probe runs: which score properties a question reads (a model and measure
named as users name them), the facts a model does not know, and two models compared fact by
fact. Cypher lives in :mod:`kgprobe.graph.probe_runs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from kgprobe.checks import check_threshold
from kgprobe.errors import ConfigError
from kgprobe.graph import probe_runs as pr
from kgprobe.probing.config import (
    DEFAULT_MEASURES,
    DEFAULT_STRATEGY,
    DEFAULT_THRESHOLD,
    ProbeConfig,
    measure_key,
    model_key,
)
from kgprobe.records import is_pid
from kgprobe.types import MeasureKey, MeasureKeyParts, ModelKey, Properties

if TYPE_CHECKING:  # pragma: no cover
    from kgprobe.graph.client import Graph


@dataclass(frozen=True)
class Scores:
    """Which score properties a question reads: the model and measure keys, the threshold of
    "known" (the latest run's unless given), and the runs that wrote them."""

    props: pr.ScoreProps
    model: str
    threshold: float
    runs: tuple[str, ...]


def probed(graph: Graph) -> dict[ModelKey, list[Properties]]:
    """Finished or partial probe runs (their ProbeRun's properties), by model key, oldest first."""
    out: dict[ModelKey, list[Properties]] = {}
    for run in pr.list_runs(graph):
        if run.get("model_key"):
            out.setdefault(str(run["model_key"]), []).append(run)
    return out


def model_measures(graph: Graph, model: str) -> tuple[ModelKey, list[Properties], list[MeasureKey]]:
    """The model key ``model`` names (a key, or the name it was probed under), its runs (oldest
    first) and its measure keys, latest run's first."""
    runs_by_model = probed(graph)
    if not runs_by_model:
        raise ConfigError("no probe run in the graph yet; run `kgprobe probe --model M` first")
    # an exact model key, else the key the name gives at float32, else a run under that name
    key: str | None = model if model in runs_by_model else None
    if key is None:
        try:
            key = model_key(model)
        except ConfigError:
            key = None
    if key not in runs_by_model:
        named = [r for rs in runs_by_model.values() for r in rs if r.get("model") == model]
        key = str(max(named, key=lambda r: str(r.get("started")))["model_key"]) if named else None
    if key is None or key not in runs_by_model:
        raise ConfigError(f"no scores for model {model!r}; probed models: {', '.join(sorted(runs_by_model))}")
    runs = runs_by_model[key]
    keys_in_order: list[str] = []
    for r in reversed(runs):
        for k in r.get("measure_keys") or []:
            if k not in keys_in_order:
                keys_in_order.append(k)
    return key, runs, keys_in_order


def _of_measure(key: str, name: str) -> bool:
    """Whether ``key`` is a key of the measure whose name part is ``name``."""
    try:
        MeasureKeyParts.parse(key, name)
    except ConfigError:
        return False
    return True


def choose_measure(model_key: str, keys: Sequence[str], measure: str | None, *,
                   strict: bool = True) -> str:
    """The measure key ``measure`` names among a model's ``keys`` (latest run's first): an exact
    key; else of that measure name, its default configuration's key where the model has it, else
    the latest. Without ``measure``, the default measure (:data:`DEFAULT_MEASURES`), never the
    latest run's: a BELIEF probe does not change what ``unknown`` lists. No such scores: one
    ConfigError line naming the measure asked for and listing the ones the model has; only
    without ``measure`` and not ``strict`` (a whole report of a model probed with other measures
    only), the latest run's first key, which every output names."""
    default = measure is None
    name = DEFAULT_MEASURES[0] if measure is None else measure
    if name in keys:
        return name
    matches = [k for k in keys if _of_measure(k, pr.key_part(name))]
    if not matches and default and not strict:
        return keys[0]
    if not matches:
        what = f"the default measure {name!r}" if default else repr(name)
        raise ConfigError(f"no scores under {what} for {model_key}; measures probed: {', '.join(keys)} "
                          "(choose one with --measure)")
    try:  # the key a plain probe with this measure writes
        preferred: str | None = measure_key(name, DEFAULT_STRATEGY, ProbeConfig().n)
    except ConfigError:  # a plug-in measure not loaded here, or not a measure name
        preferred = None
    return preferred if preferred in matches else matches[0]


def resolve_scores(
    graph: Graph, model: str, measure: str | None = None, threshold: float | None = None, *,
    strict: bool = True,
) -> Scores:
    """The score properties of ``model`` (a model key, or the name it was probed under) and
    ``measure`` (a measure key like ``kmin_temp_sem_n5``, or a measure name like ``kmin``);
    without ``measure``, the default measure (:func:`choose_measure`; ``strict``: or an error,
    never another measure). An exact measure key wins over a longer key it is a prefix of."""
    check_threshold(threshold)
    key, runs, keys_in_order = model_measures(graph, model)
    chosen = choose_measure(key, keys_in_order, measure, strict=strict)
    used = [r for r in runs if chosen in (r.get("measure_keys") or [])]
    thr = threshold if threshold is not None else float(used[-1].get("threshold") or DEFAULT_THRESHOLD)
    return Scores(pr.ScoreProps(key, chosen), str(used[-1].get("model") or key), thr,
                  tuple(str(r["id"]) for r in used))


def shared_scores(
    graph: Graph, models: Sequence[str], measure: str | None = None, threshold: float | None = None
) -> list[Scores]:
    """The scores of several models under one measure key, for comparing them fact by fact.

    Of the keys every model was probed with (only those ``measure`` names, when given: the exact
    key, else the keys of that measure name) the one :func:`choose_measure` picks: a measure
    name's default configuration, else the first model's latest; without ``measure``, the
    default measure's where they share it, else the first model's latest shared key. No common
    key: one ConfigError line naming every list. ``threshold`` defaults to the first model's,
    for all."""
    found = [model_measures(graph, m) for m in models]

    def wanted(keys: list[str]) -> list[str]:
        if measure is None or measure in keys:
            return keys if measure is None else [measure]
        return [k for k in keys if _of_measure(k, pr.key_part(measure))]

    common = [k for k in wanted(found[0][2]) if all(k in wanted(f[2]) for f in found[1:])]
    if not common:
        what = "no measure" if measure is None else f"no {measure!r} measure key"
        names = [f[0] for f in found]
        listed = "; ".join(f"{f[0]}: {', '.join(f[2])}" for f in found)
        hint = "probe one with the other's measure" if len(models) == 2 else "probe them with one measure"
        raise ConfigError(
            f"{', '.join(names[:-1])} and {names[-1]} share {what}, so they cannot be compared "
            f"fact by fact ({listed}); {hint}"
        )
    chosen = choose_measure(" and ".join(f[0] for f in found), common, measure, strict=False)
    first = resolve_scores(graph, models[0], chosen, threshold)  # an exact key: the same for all
    thr = threshold if threshold is not None else first.threshold
    return [first, *(resolve_scores(graph, m, chosen, thr) for m in models[1:])]


def paired_scores(
    graph: Graph, a: str, b: str, measure: str | None = None, threshold: float | None = None
) -> tuple[Scores, Scores]:
    """The scores of two models under one measure key (:func:`shared_scores`)."""
    sa, sb = shared_scores(graph, [a, b], measure, threshold)
    return sa, sb


@dataclass(frozen=True)
class ScoredFact:
    """One fact with a model's score on it."""

    key: str
    pid: str
    relation: str | None
    subject: str
    subject_label: str | None
    object: str
    object_label: str | None
    score: float
    run: str | None = None
    #: the measure key and known threshold the fact was read under (named in every output)
    measure: str | None = None
    threshold: float | None = None


def unknown_in(
    graph: Graph, model: str, *, relation: str | None = None, below: float | None = None,
    measure: str | None = None,
) -> tuple[Scores, list[ScoredFact]]:
    """Facts ``model`` does not know: score below ``below`` (default: the run's threshold)."""
    sc = resolve_scores(graph, model, measure, below)
    pid = None
    if relation is not None:
        pid = relation.strip().upper()
        known = {r["pid"] for r in pr.relations_with_facts(graph)}
        if not is_pid(pid) or pid not in known:
            raise ConfigError(f"unknown relation {relation!r}; relations with facts: {', '.join(sorted(known, key=lambda p: int(p[1:])))}")
    rows = pr.unknown_facts(graph, sc.props, sc.threshold, pid)
    return sc, [ScoredFact(**r, measure=sc.props.measure_key, threshold=sc.threshold) for r in rows]


@dataclass(frozen=True)
class ComparedFact:
    """A fact on which two models disagree about being known, with both scores."""

    key: str
    pid: str
    relation: str | None
    subject: str
    subject_label: str | None
    object: str
    object_label: str | None
    score_a: float
    score_b: float


@dataclass
class Comparison:
    """What one model knows and the other does not, on the facts both were probed on."""

    a: str
    b: str
    measure: str
    threshold: float
    a_not_b: list[ComparedFact]
    b_not_a: list[ComparedFact]
    counts: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare_in(
    graph: Graph, a: str, b: str, *, measure: str | None = None, threshold: float | None = None
) -> Comparison:
    sa, sb = paired_scores(graph, a, b, measure, threshold)
    thr = threshold if threshold is not None else sa.threshold
    rows, counts = pr.compare_facts(graph, sa.props, sb.props, thr)
    facts = [ComparedFact(**r) for r in rows]
    a_not_b = [f for f in facts if f.score_a >= thr]
    b_not_a = [f for f in facts if f.score_a < thr]
    return Comparison(sa.props.model_key, sb.props.model_key, sa.props.measure_key, thr,
                      a_not_b, b_not_a, counts)
