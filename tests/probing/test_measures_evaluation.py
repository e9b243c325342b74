"""Kendall's tau-b (hand-computed, with ties), score files, robustness tau and k-fold grid
search."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scipy.stats import kendalltau

from kgprobe.errors import ConfigError, InputError
from kgprobe.probing.measures.evaluation import (
    grid,
    kendall_tau_b,
    kfold_grid_search,
    read_scores,
    robustness_tau,
    tau_with_human,
)


def test_tau_b_by_hand() -> None:
    # 4 items, 6 pairs: x = 1,2,3,4; y = 1,3,2,4 -> 5 concordant, 1 discordant
    assert kendall_tau_b([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    # ties: x = 1,1,2,3; y = 1,2,3,3 -> pairs (0,1) tied in x, (2,3) tied in y
    # concordant: (0,2),(0,3),(1,2),(1,3) = 4, discordant 0; n0 = 6, n1 = n2 = 1
    assert kendall_tau_b([1, 1, 2, 3], [1, 2, 3, 3]) == pytest.approx(4 / math.sqrt(5 * 5))
    assert math.isnan(kendall_tau_b([1, 1, 1], [1, 2, 3]))
    xs, ys = [0.1, 0.4, 0.4, 0.9, 0.2, 0.7], [0, 1, 0.5, 1, 0, 0.5]
    assert kendall_tau_b(xs, ys) == pytest.approx(kendalltau(xs, ys).statistic)
    with pytest.raises(ConfigError):
        kendall_tau_b([1], [1, 2])


def test_score_files(tmp_path: Path) -> None:
    (tmp_path / "h.csv").write_text("fact,score\nf1,0.5\nf2,1\n", encoding="utf-8")
    (tmp_path / "h.tsv").write_text("id\tval\nf1\t0.25\n", encoding="utf-8")
    (tmp_path / "h.jsonl").write_text('{"fact": "f1", "score": 0.1}\n', encoding="utf-8")
    (tmp_path / "h.json").write_text(json.dumps({"f1": 1}), encoding="utf-8")
    assert read_scores(tmp_path / "h.csv") == {"f1": 0.5, "f2": 1.0}
    assert read_scores(tmp_path / "h.tsv", "id", "val") == {"f1": 0.25}
    assert read_scores(tmp_path / "h.jsonl") == {"f1": 0.1}
    assert read_scores(tmp_path / "h.json") == {"f1": 1.0}
    (tmp_path / "bad.csv").write_text("fact,score\nf1,high\n", encoding="utf-8")
    with pytest.raises(InputError):
        read_scores(tmp_path / "bad.csv")
    with pytest.raises(InputError):
        read_scores(tmp_path / "h.csv", score_column="nope")


def test_human_and_robustness_tau_use_common_scored_facts() -> None:
    human = {"a": 0.0, "b": 0.5, "c": 1.0, "d": 0.2}
    measure = {"a": 0.1, "b": 0.6, "c": 0.9, "e": 0.3, "d": None}
    assert tau_with_human(measure, human) == pytest.approx(1.0)
    assert robustness_tau({"a": 1, "b": 2, "c": 3}, {"a": 3, "b": 2, "c": 1}) == pytest.approx(-1.0)


def test_kfold_grid_search_picks_the_aligned_configuration() -> None:
    human = {f"f{i}": float(i % 7) for i in range(30)}
    noise = {f"f{i}": float((i * 37) % 11) for i in range(30)}

    def scorer(cfg: dict[str, object]) -> dict[str, float]:
        return dict(human) if cfg["n"] == 5 else noise

    assert grid({"n": [1, 5], "agg": ["min", "avg"]})[1] == {"n": 1, "agg": "avg"}
    res = kfold_grid_search(human, scorer, {"n": [1, 5, 10], "agg": ["min"]}, k=3, seed=0)
    assert len(res.folds) == 3
    assert all(f.best["n"] == 5 and f.test_tau == pytest.approx(1.0) for f in res.folds)
    assert res.mean_tau == pytest.approx(1.0) and res.std_tau == pytest.approx(0.0)
    with pytest.raises(ConfigError):
        kfold_grid_search({"a": 1.0}, scorer, {"n": [1]}, k=3)


def test_grid_mean_and_sd_leave_out_folds_without_tau() -> None:
    """A fold whose test scores are all tied has no τ (NaN): the mean and sd over folds are
    taken over the other folds (by hand: mean(0.5, 0.1) = 0.3, pstdev = 0.2), not a crash."""
    from kgprobe.probing.measures.evaluation import FoldResult, GridSearchResult

    res = GridSearchResult([FoldResult(0, {}, 1.0, 0.5), FoldResult(1, {}, 1.0, float("nan")),
                            FoldResult(2, {}, 1.0, 0.1)])
    assert res.mean_tau == pytest.approx(0.3) and res.std_tau == pytest.approx(0.2)
    assert math.isnan(GridSearchResult([FoldResult(0, {}, 1.0, float("nan"))]).mean_tau)
