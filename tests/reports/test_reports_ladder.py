"""The model ladder (issue 20 #1: three or more models), against numbers worked out by hand on
the 11 hand-seeded facts of test_reports_paired, scipy's binomial test and a direct numpy
resampling written here."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kgprobe_process import run_kgprobe
from probe_world import load
from scipy.stats import binomtest
from test_reports_paired import A_SCORES, B_SCORES, KMIN, PAIRS, _seed

from kgprobe.errors import ConfigError

# a third model, "third" (sum 8.25): known (>= 0.5) on all but FRANCE P36 and CURIE (9 of 11).
# "other" (B) knows USA P35, USA P36, OBAMA, TRUMP, BIDEN, BUSH, BACH (7), all known to third too;
# only third knows GERMANY P36 (B 0) and CLINTON P27 (B 0.25): McNemar b = 0, c = 2
C_SCORES = [1.0, 1.0, 0.0, 0.5, 1.0, 1.0, 0.75, 1.0, 0.75, 0.25, 1.0]


@pytest.fixture()
def ladder_graph(graph: Any) -> Any:
    load(graph)
    _seed(graph, "hand", KMIN, A_SCORES, "t1")
    _seed(graph, "other", KMIN, B_SCORES, "t1")
    _seed(graph, "third", KMIN, C_SCORES, "t1")
    return graph


def _direct_paired(a: list[float], b: list[float], seed: int) -> tuple[float, float]:
    x, y = np.array(a), np.array(b)
    idx = np.random.default_rng(seed).integers(0, x.size, size=(1000, x.size))
    lo, hi = np.percentile(y[idx].mean(axis=1) - x[idx].mean(axis=1), [2.5, 97.5])
    return float(lo), float(hi)


def test_ladder_by_hand(ladder_graph: Any) -> None:
    from kgprobe.reports.ladder import build_ladder

    lad = build_ladder(ladder_graph, ["hand", "other", "third"], seed=0)
    assert lad.measure_key == KMIN and lad.facts == 11 and lad.threshold == 0.5
    assert [r.model_key for r in lad.rungs] == ["hand", "other", "third"]  # the order given
    assert [r.overall.mean for r in lad.rungs] == pytest.approx([3.5 / 11, 6.5 / 11, 8.25 / 11])
    assert [r.overall.known for r in lad.rungs] == [4, 7, 9]
    for r in lad.rungs:  # n = 11 >= 10: an interval around each mean
        assert r.overall.ci_low is not None and r.overall.ci_high is not None
        assert r.overall.ci_low <= r.overall.mean <= r.overall.ci_high
    # per relation: P27 has 7 facts (no interval), means by hand
    assert lad.relations == ["P27", "P35", "P36"]
    p27 = [r.relations["P27"] for r in lad.rungs]
    assert [g.facts for g in p27] == [7, 7, 7] and all(g.ci_low is None for g in p27)
    assert [g.mean for g in p27] == pytest.approx([1.5 / 7, 4.5 / 7, 5.75 / 7])
    # step 1 = the report's paired numbers (hand -> other)
    s1, s2 = lad.steps
    assert (s1.lower, s1.upper) == ("hand", "other")
    assert s1.overall.diff == pytest.approx(3 / 11) and (s1.overall.b, s1.overall.c) == (2, 5)
    assert s1.overall.p == pytest.approx(58 / 128)
    # step 2: other -> third, discordant 0 / 2: p = 2 * P(X <= 0 | Bin(2, 1/2)) = 0.5
    assert (s2.lower, s2.upper) == ("other", "third")
    assert s2.overall.diff == pytest.approx(1.75 / 11)
    assert (s2.overall.b, s2.overall.c) == (0, 2) and s2.overall.p == pytest.approx(binomtest(0, 2, 0.5).pvalue)
    lo, hi = _direct_paired(B_SCORES, C_SCORES, 123)  # another seed: about the same width
    assert s2.overall.diff_ci_low is not None and s2.overall.diff_ci_high is not None
    assert s2.overall.diff_ci_high - s2.overall.diff_ci_low == pytest.approx(hi - lo, abs=0.08)
    assert lad.chance is not None and lad.chance.level == pytest.approx(1 / 6)  # Min@5: 1/(n+1)


def test_ladder_only_on_facts_all_models_have(ladder_graph: Any) -> None:
    """A fourth model scored on 10 of the 11 facts: the ladder of all four uses those 10."""
    from kgprobe.reports.ladder import build_ladder

    _seed(ladder_graph, "fourth", KMIN, [1.0] * len(PAIRS), "t1")
    key = ladder_graph.read("MATCH (:Entity)-[f:FACT]->(:Entity) WHERE f.score__fourth__" + KMIN
                            + " IS NOT NULL RETURN f.key AS k ORDER BY k LIMIT 1")[0]["k"]
    ladder_graph.write("MATCH (:Entity)-[f:FACT {key: $k}]->(:Entity) REMOVE f.score__fourth__" + KMIN, k=key)
    lad = build_ladder(ladder_graph, ["hand", "other", "third", "fourth"], seed=0)
    assert lad.facts == 10 and lad.rungs[3].overall.mean == 1.0
    assert all(r.overall.facts == 10 for r in lad.rungs)


def test_ladder_refusals(ladder_graph: Any) -> None:
    from kgprobe.reports.ladder import build_ladder

    with pytest.raises(ConfigError, match="at least three"):
        build_ladder(ladder_graph, ["hand", "other"])
    with pytest.raises(ConfigError, match="given twice"):
        build_ladder(ladder_graph, ["hand", "other", "hand"])
    _seed(ladder_graph, "lone", "kavg_temp_sem_n5", A_SCORES, "t1")
    with pytest.raises(ConfigError, match="hand, other and lone share no measure"):
        build_ladder(ladder_graph, ["hand", "other", "lone"])
    with pytest.raises(ConfigError, match="no scores for model 'nobody'"):
        build_ladder(ladder_graph, ["hand", "other", "nobody"])


def test_ladder_files_and_cli(ladder_graph: Any, tmp_path: Path) -> None:
    from kgprobe.reports.ladder import build_ladder, write_ladder

    lad = build_ladder(ladder_graph, ["hand", "other", "third"], seed=0)
    paths = write_ladder(lad, tmp_path / "lad")
    assert sorted(p.name for p in paths.values()) == ["ladder.csv", "ladder.json", "ladder.md", "ladder.svg"]
    rows = list(csv.DictReader((tmp_path / "lad" / "ladder.csv").open()))
    steps = [r for r in rows if r["row"] == "step" and r["key"] == "all"]
    assert [(r["model"], r["upper_model"]) for r in steps] == [("hand", "other"), ("other", "third")]
    assert float(steps[1]["value"]) == pytest.approx(1.75 / 11) and steps[1]["mcnemar_c"] == "2"
    doc = json.loads((tmp_path / "lad" / "ladder.json").read_text())
    assert doc["facts"] == 11 and [r["model_key"] for r in doc["rungs"]] == ["hand", "other", "third"]
    md = (tmp_path / "lad" / "ladder.md").read_text()
    # one interval per number: the markdown shows the JSON's interval for "hand", all facts
    hand = doc["rungs"][0]["overall"]
    assert f"{hand['mean']:.3f} [{hand['ci_low']:.3f}, {hand['ci_high']:.3f}]" in md
    assert "| P27" in md and "(n too small)" in md and "hand → other" in md
    svg = (tmp_path / "lad" / "ladder.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg and "third" in svg

    # no silent overwrite: the same ladder again is fine; another ladder, or a ladder over a
    # report's directory, is refused with nothing written, unless overwrite
    write_ladder(lad, tmp_path / "lad")
    other = build_ladder(ladder_graph, ["third", "other", "hand"], seed=0)
    before = md
    with pytest.raises(ConfigError, match="holds the ladder of hand, other, third; this is the ladder of third, other, hand"):
        write_ladder(other, tmp_path / "lad")
    assert (tmp_path / "lad" / "ladder.md").read_text() == before
    write_ladder(other, tmp_path / "lad", overwrite=True)
    assert "third → other" in (tmp_path / "lad" / "ladder.md").read_text()
    from kgprobe.reports.build import build_report
    from kgprobe.reports.write import write_report

    write_report(build_report(ladder_graph, "hand", seed=0), tmp_path / "rep")
    with pytest.raises(ConfigError, match="holds the report of hand; this is the ladder of hand, other, third"):
        write_ladder(lad, tmp_path / "rep")
    assert not (tmp_path / "rep" / "ladder.md").exists() and (tmp_path / "rep" / "report.md").is_file()


def test_ladder_cli(kgprobe_env: dict[str, str], ladder_graph: Any, tmp_path: Path) -> None:
    env = kgprobe_env
    base = ["ladder", "-m", "hand", "-m", "other", "-m", "third"]
    r = run_kgprobe([*base, "--json"], env, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["steps"][1]["overall"]["c"] == 2 and doc["facts"] == 11
    r = run_kgprobe([*base, "--out", str(tmp_path / "o")], env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "model ladder" in r.stdout and "other → third" in r.stdout and (tmp_path / "o" / "ladder.svg").is_file()
    r = run_kgprobe(base[:-2], env, timeout=300)
    assert r.returncode == 2 and "at least three" in r.stderr and "Traceback" not in r.stderr
