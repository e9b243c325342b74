"""Evaluating measures (distractor paper §4.2–4.3): Kendall's τ-b against human scores per
fact, robustness τ between two verbalizations of the same facts, and k-fold grid search of a
measure's hyperparameters (best configuration on the training folds, τ on the held-out fold,
mean and stdev over folds).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from kgprobe.errors import ConfigError, InputError
from kgprobe.loaders.common import (
    check_json_file_size,
    json_too_large,
    max_json_chars,
    read_text_file,
)
from kgprobe.types import JSONObject


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's τ-b, from ``scipy.stats.kendalltau`` (O(n log n); the paper's statistic, with
    ties in either sequence accounted for). NaN when either side is constant or n < 2."""
    from scipy.stats import kendalltau

    if len(x) != len(y):
        raise ConfigError("Kendall's tau needs two sequences of the same length")
    if len(x) < 2 or len(set(x)) < 2 or len(set(y)) < 2:
        return math.nan
    return float(kendalltau(list(x), list(y), variant="b").statistic)


def read_scores(path: str | Path, id_column: str = "fact", score_column: str = "score") -> dict[str, float]:
    """Scores per fact from a CSV/TSV (header with ``id_column`` and ``score_column``) or a
    JSONL file (one object per line with those keys) or a JSON object {id: score}."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"score file {p} does not exist")
    out: dict[str, float] = {}
    try:
        if p.suffix == ".json":
            check_json_file_size(p)
            text = read_text_file(p, "score file")
            if len(text) > max_json_chars():
                raise json_too_large(p)
            data = json.loads(text)
            if not isinstance(data, dict):
                raise InputError(f"{p.name}: expected a JSON object {{fact id: score}}")
            return {str(k): float(v) for k, v in data.items()}
        if p.suffix == ".jsonl":
            for line in read_text_file(p, "score file").splitlines():
                if line.strip():
                    row = json.loads(line)
                    out[str(row[id_column])] = float(row[score_column])
            return out
        with io.StringIO(read_text_file(p, "score file"), newline="") as fh:
            dialect = "excel-tab" if p.suffix in (".tsv", ".tab") else "excel"
            for row in csv.DictReader(fh, dialect=dialect):
                out[str(row[id_column])] = float(row[score_column])
    except KeyError as exc:
        raise InputError(f"{p.name}: missing column {exc}") from None
    except (ValueError, TypeError) as exc:
        raise InputError(f"{p.name}: a score is not a number ({exc})") from None
    return out


def _paired(a: Mapping[str, float | None], b: Mapping[str, float | None],
            ids: Sequence[str] | None = None) -> tuple[list[float], list[float]]:
    keys = ids if ids is not None else sorted(set(a) & set(b))
    xs, ys = [], []
    for k in keys:
        va, vb = a.get(k), b.get(k)
        if va is None or vb is None or (isinstance(va, float) and math.isnan(va)):
            continue
        xs.append(float(va))
        ys.append(float(vb))
    return xs, ys


def tau_with_human(measure: Mapping[str, float | None], human: Mapping[str, float]) -> float:
    """τ-b over the facts scored by both (facts the measure could not score are left out)."""
    xs, ys = _paired(measure, human)
    return kendall_tau_b(xs, ys)


def robustness_tau(scores_a: Mapping[str, float | None], scores_b: Mapping[str, float | None]) -> float:
    """§4.3: τ-b between a measure's scores of the same facts under two verbalizations."""
    xs, ys = _paired(scores_a, scores_b)
    return kendall_tau_b(xs, ys)


class UndefinedTau(ConfigError):
    """No configuration has a defined τ on some training folds (their scores, or the humans',
    all tied): that measure's grid has no answer, which says nothing about other measures'."""


#: the type of a hyperparameter's values (a grid's configurations map each name to one)
_V = TypeVar("_V")


@dataclass
class FoldResult(Generic[_V]):
    fold: int
    best: dict[str, _V]  # the configuration chosen on the other folds
    train_tau: float
    test_tau: float


@dataclass
class GridSearchResult(Generic[_V]):
    folds: list[FoldResult[_V]]

    def _defined(self) -> list[float]:
        """Test τ of the folds where τ is defined: a fold whose scores (or human scores) are
        all tied has no τ (NaN) and is left out of the mean and sd, not allowed to poison them."""
        return [float(f.test_tau) for f in self.folds if not math.isnan(f.test_tau)]

    @property
    def mean_tau(self) -> float:
        got = self._defined()
        return statistics.fmean(got) if got else math.nan

    @property
    def std_tau(self) -> float:
        got = self._defined()
        return statistics.pstdev(got) if got else math.nan


def grid(space: Mapping[str, Sequence[_V]]) -> list[dict[str, _V]]:
    """Every combination of the hyperparameter values (in key order)."""
    keys = list(space)
    return [dict(zip(keys, vals, strict=True)) for vals in itertools.product(*(space[k] for k in keys))]


def kfold_grid_search(
    human: Mapping[str, float],
    scorer: Callable[[dict[str, _V]], Mapping[str, float | None]],
    space: Mapping[str, Sequence[_V]],
    *,
    k: int = 3,
    seed: int = 0,
) -> GridSearchResult[_V]:
    """§4.2: facts split into ``k`` folds (shuffled with ``seed``); for each fold the
    configuration with the highest τ on the other folds is kept and its τ on the fold
    reported. ``scorer(config)`` returns the measure's scores of all facts for a config
    (called once per config; cheap when the plausibilities are already computed)."""
    ids = sorted(human)
    if k < 2 or len(ids) < k:
        raise ConfigError(f"k-fold needs k >= 2 and at least k facts (have {len(ids)})")
    random.Random(seed).shuffle(ids)
    folds = [ids[i::k] for i in range(k)]
    configs = grid(space)
    if not configs:
        raise ConfigError("empty hyperparameter grid")
    scored = [(c, scorer(c)) for c in configs]
    out = []
    for i, test in enumerate(folds):
        train = [x for j, f in enumerate(folds) if j != i for x in f]
        best_c, best_tau, best_scores = None, -math.inf, None
        for c, s in scored:
            t = kendall_tau_b(*_paired(s, human, train))
            if not math.isnan(t) and t > best_tau:
                best_c, best_tau, best_scores = c, t, s
        if best_c is None or best_scores is None:
            raise UndefinedTau("no configuration gives a defined tau on the training folds "
                               "(tied scores)")
        test_tau = kendall_tau_b(*_paired(best_scores, human, test))
        out.append(FoldResult(i, best_c, best_tau, test_tau))
    return GridSearchResult(out)


# --- evaluation of stored scores (``kgprobe evaluate``) -----------------------------------------


def tau_b(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Kendall's τ-b and its p-value by ``scipy.stats.kendalltau`` (NaN when undefined)."""
    from scipy.stats import kendalltau

    if len(x) < 2:
        return math.nan, math.nan
    res = kendalltau(x, y, variant="b")
    return float(res.statistic), float(res.pvalue)


def read_human_scores(path: str | Path, score_column: str = "score") -> dict[str, float]:
    """Human scores per fact from CSV/TSV/JSONL: keyed by a statement id column
    (``statement`` / ``key`` / ``fact``) or by ``subject``, ``relation``, ``object`` columns
    (QIDs and a PID; the key is then ``"S|P|O"``)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"score file {p} does not exist")
    rows: list[JSONObject] = []  # JSONL objects or CSV rows: checked below
    if p.suffix == ".jsonl":
        for n, line in enumerate(read_text_file(p, "score file").splitlines(), 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    raise InputError(f"{p.name}:{n}: not JSON") from None
    else:
        # UTF-8 (with or without BOM) or UTF-16/32 with BOM; else one line with the byte offset
        with io.StringIO(read_text_file(p, "score file"), newline="") as fh:
            dialect = "excel-tab" if p.suffix in (".tsv", ".tab") else "excel"
            rows = list(csv.DictReader(fh, dialect=dialect))
    out: dict[str, float] = {}
    for n, row in enumerate(rows, 2):
        sid = next((str(row[c]) for c in ("statement", "key", "fact") if row.get(c)), None)
        if sid is None:
            try:
                sid = f"{str(row['subject']).strip()}|{str(row['relation']).strip().upper()}|{str(row['object']).strip()}"
            except KeyError:
                raise InputError(f"{p.name}:{n}: needs a statement/key/fact column or "
                                 "subject, relation, object columns") from None
        try:
            out[sid] = float(row[score_column])
        except KeyError:
            raise InputError(f"{p.name}:{n}: missing column {score_column!r}") from None
        except (TypeError, ValueError):
            raise InputError(f"{p.name}:{n}: score {row.get(score_column)!r} is not a number") from None
        if not math.isfinite(out[sid]):
            raise InputError(f"{p.name}:{n}: score {row.get(score_column)!r} is not a finite number")
    if not out:
        raise InputError(f"{p.name}: no scores")
    return out
