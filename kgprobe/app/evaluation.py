"""Evaluating stored measures (``kgprobe evaluate``): against human judgements (Kendall's τ-b),
between two stored score sets (robustness), and the k-fold grid search over every stored
configuration (the DFA paper's §4.2-4.3). They read scores from the graph; the statistics are
:mod:`kgprobe.probing.measures.evaluation`, which imports none of this.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from kgprobe.app.options import check_number, check_seed
from kgprobe.config import Settings
from kgprobe.errors import ConfigError
from kgprobe.graph import probe_runs as pr
from kgprobe.graph.client import connect
from kgprobe.probing.measures.evaluation import (
    UndefinedTau,
    kfold_grid_search,
    read_human_scores,
    tau_b,
)
from kgprobe.probing.scores import model_measures, probed, resolve_scores
from kgprobe.types import MeasureKey, ModelKey


class HumanTau(TypedDict):
    """τ-b between a stored measure and the human scores (``evaluate --human``)."""

    model: ModelKey
    measure: MeasureKey
    facts: int
    human: int
    tau_b: float
    p_value: float


class Robustness(TypedDict):
    """τ-b between two stored score sets of the same facts (``evaluate --vs-model``):
    ``a`` and ``b`` as ``<model key>/<measure key>``."""

    a: str
    b: str
    facts: int
    tau_b: float
    p_value: float


class GridRow(TypedDict):
    """One measure's k-fold grid search (``evaluate --grid``): its configurations (measure
    keys), the facts taking part, τ-b on the held-out folds as mean ± sd, each fold's choice,
    or ``why`` there is no answer."""

    measure: str
    configs: list[MeasureKey]
    facts: int
    tau_mean: float | None
    tau_sd: float | None
    chosen: list[MeasureKey]
    why: str | None


def stored_scores(graph: Any, model: str, measure: str | None) -> tuple[Any, dict[str, float], dict[str, str]]:
    """(resolved Scores, {statement key: score}, {"S|P|O": statement key}) of a stored measure."""
    sc = resolve_scores(graph, model, measure)
    rows = pr.scores_with_ends(graph, sc.props)
    return (sc, {r["key"]: float(r["score"]) for r in rows},
            {f"{r['s']}|{r['pid']}|{r['o']}": r["key"] for r in rows})


def _align(scores: Mapping[str, float], ends: Mapping[str, str],
           human: Mapping[str, float]) -> tuple[list[str], list[float], list[float]]:
    keys, xs, ys = [], [], []
    for hk, hv in sorted(human.items()):
        k = hk if hk in scores else ends.get(hk)
        if k is not None and k in scores and not math.isnan(scores[k]):
            keys.append(k)
            xs.append(scores[k])
            ys.append(hv)
    return keys, xs, ys


def evaluate_measure(graph: Any, model: str, measure: str | None, human: Mapping[str, float]) -> HumanTau:
    """τ-b between a stored measure and human scores, over the facts both have."""
    sc, scores, ends = stored_scores(graph, model, measure)
    keys, xs, ys = _align(scores, ends, human)
    tau, p = tau_b(xs, ys)
    return {"model": sc.props.model_key, "measure": sc.props.measure_key, "facts": len(keys),
            "human": len(human), "tau_b": tau, "p_value": p}


def robustness(graph: Any, a: tuple[str, str | None], b: tuple[str, str | None]) -> Robustness:
    """§4.3: τ-b between two stored score sets of the same facts (two runs, models, or
    verbalizations probed under different keys)."""
    sa, xa, _ = stored_scores(graph, *a)
    sb, xb, _ = stored_scores(graph, *b)
    keys = sorted(set(xa) & set(xb))
    tau, p = tau_b([xa[k] for k in keys], [xb[k] for k in keys])
    return {"a": f"{sa.props.model_key}/{sa.props.measure_key}",
            "b": f"{sb.props.model_key}/{sb.props.measure_key}", "facts": len(keys),
            "tau_b": tau, "p_value": p}


def _config_scores(table: Mapping[str, Mapping[str, float]], config: Mapping[str, object]) -> Mapping[str, float | None]:
    return table[str(config["key"])]


def grid_table(graph: Any, model: str, human: Mapping[str, float], *, k: int = 3,
               seed: int = 0) -> list[GridRow]:
    """§4.2, the layout of the paper's Tables 3/4: per measure name, the k-fold grid search
    over every configuration stored for ``model`` (its measure keys: n, strategy, parameters),
    τ-b on the held-out folds as mean ± sd, and the configuration each fold chose. Only facts
    scored by every configuration and by the humans take part; a measure without an answer
    (too few such facts, or tied scores on a training fold) has ``tau_mean`` None and says
    ``why``, and the other measures' rows stand."""
    key = model_measures(graph, model)[0]  # every measure of the model, not only the default
    by_name: dict[str, list[str]] = {}
    for r in probed(graph).get(key, []):
        for name, mk in zip(r.get("measures") or [], r.get("measure_keys") or [], strict=False):
            if mk not in by_name.setdefault(name, []):
                by_name[name].append(mk)
    out: list[GridRow] = []
    for name, mkeys in sorted(by_name.items()):
        per = {mk: stored_scores(graph, key, mk) for mk in mkeys}
        human_by_key: dict[str, float] = {}
        for _, scores, ends in per.values():
            for h, v in human.items():
                s = h if h in scores else ends.get(h)
                if s is not None:
                    human_by_key[s] = v
        facts = {f: v for f, v in human_by_key.items() if all(f in per[mk][1] for mk in mkeys)}
        row: GridRow = {"measure": name, "configs": mkeys, "facts": len(facts),
                               "tau_mean": None, "tau_sd": None, "chosen": [], "why": None}
        out.append(row)
        if len(facts) < max(k, 2):
            row["why"] = f"{len(facts)} facts scored by every configuration and the humans, fewer than k = {k}"
            continue
        table = {mk: v[1] for mk, v in per.items()}
        try:
            res = kfold_grid_search(facts, functools.partial(_config_scores, table), {"key": mkeys},
                                    k=k, seed=seed)
        except UndefinedTau as exc:
            row["why"] = str(exc)
            continue
        row["tau_mean"], row["tau_sd"] = res.mean_tau, res.std_tau
        row["chosen"] = [str(f.best["key"]) for f in res.folds]
    return out


@dataclass(frozen=True)
class Evaluation:
    """``kgprobe evaluate``: what was asked for, each part None when it was not: τ-b against the
    human scores, between two stored score sets (robustness), or the k-fold grid search."""

    human: HumanTau | None = None
    robustness: Robustness | None = None
    grid: list[GridRow] | None = None
    folds: int = 3

    def to_dict(self) -> dict[str, object]:
        """The parts that were asked for (robustness first, as printed)."""
        parts = (("robustness", self.robustness), ("grid", self.grid), ("human", self.human))
        return {k: v for k, v in parts if v is not None}


def evaluate(model: str, *, measure: str | None = None, human: str | Path | None = None,
             score_column: str = "score", vs_model: str | None = None, vs_measure: str | None = None,
             grid: bool = False, folds: int = 3, seed: int = 0,
             settings: Settings | None = None) -> Evaluation:
    """Kendall's τ-b of ``model``'s stored scores under ``measure`` against the human scores in
    the file ``human`` (its ``score_column``), against a second stored score set (``vs_model``
    under ``vs_measure``, default the same measure: robustness), or, with ``grid``, the k-fold
    grid search over every stored configuration (``folds`` folds split with ``seed``)."""
    if vs_model is None and human is None:
        raise ConfigError("give --human FILE (tau against human scores) or --vs-model (robustness)")
    check_number("--folds", folds, 2)
    check_seed(seed)
    scores = read_human_scores(human, score_column) if human is not None else None
    with connect(settings) as g:
        rob = (robustness(g, (model, measure), (vs_model, vs_measure or measure))
               if vs_model is not None else None)
        table = grid_table(g, model, scores, k=folds, seed=seed) if scores is not None and grid else None
        against = evaluate_measure(g, model, measure, scores) if scores is not None and not grid else None
    return Evaluation(human=against, robustness=rob, grid=table, folds=folds)
