"""Paired model comparisons and the chance line (issue 20, item 1), against numbers worked out
by hand on 11 hand-seeded facts, scipy's binomial test called here, and a direct numpy
resampling written here."""

from __future__ import annotations

import ast
import csv
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _kgprobe_process import run_kgprobe
from distractor_world import BACH, BIDEN, BUSH, CLINTON, CURIE, FRANCE, GERMANY, OBAMA, TRUMP, USA
from probe_world import load
from scipy.stats import binomtest

from kgprobe.errors import ConfigError
from kgprobe.graph import probe_runs as pr

KMIN = "kmin_temp_sem_n5"
ROOT = Path(__file__).resolve().parents[2]

# (subject, pid, object, score of A = "hand", score of B = "other"); known = score >= 0.5.
# Discordant on known: b (only A knows) = GERMANY P36, CLINTON P27 -> 2;
# c (only B knows) = USA P35, OBAMA, TRUMP, BIDEN, BACH -> 5; both: USA P36, BUSH; neither:
# FRANCE P36, CURIE.
PAIRS = [
    (USA, "P35", BIDEN, 0.0, 1.0),
    (USA, "P36", "Q61", 1.0, 1.0),
    (FRANCE, "P36", "Q90", 0.0, 0.0),
    (GERMANY, "P36", "Q64", 1.0, 0.0),
    (OBAMA, "P27", USA, 0.0, 1.0),
    (TRUMP, "P27", USA, 0.25, 0.75),
    (BIDEN, "P27", USA, 0.0, 0.5),
    (BUSH, "P27", USA, 0.75, 1.0),
    (CLINTON, "P27", USA, 0.5, 0.25),
    (CURIE, "P27", FRANCE, 0.0, 0.0),
    (BACH, "P27", GERMANY, 0.0, 1.0),
]


def _key(graph: Any, subject: str, pid: str, obj: str) -> str:
    rows = graph.read(
        "MATCH (s:Entity {qid: $s})-[f:FACT]->(o:Entity {qid: $o}) WHERE f.pid = $p RETURN f.key AS k",
        s=subject, p=pid, o=obj,
    )
    return str(rows[0]["k"])


def _seed(graph: Any, model: str, measure: str, scores: list[float], started: str,
          stale: float | None = None) -> None:
    """One finished run of ``model`` with ``measure`` and these scores on PAIRS' facts;
    ``stale`` on the first fact (USA P35) only."""
    sp = pr.ScoreProps(model, measure)
    run_id = f"run-{model}-{measure}"
    pr.create_run(graph, run_id, {"model": model, "model_key": model, "measure_keys": [measure],
                                  "threshold": 0.5, "status": "finished", "started": started})
    rows = [{"key": _key(graph, s, p, o), "s": s,
             "props": {sp.score: v, sp.run: run_id, sp.stale: stale if i == 0 else None}}
            for i, ((s, p, o, *_), v) in enumerate(zip(PAIRS, scores, strict=True))]
    pr.write_scores(graph, run_id, rows, scored=len(rows), unscorable=0, now=started)


A_SCORES = [p[3] for p in PAIRS]
B_SCORES = [p[4] for p in PAIRS]


@pytest.fixture()
def pair_graph(graph: Any) -> Any:
    load(graph)
    _seed(graph, "hand", KMIN, A_SCORES, "t1", stale=1.0)
    _seed(graph, "other", KMIN, B_SCORES, "t1", stale=0.0)
    return graph


# --- the statistics module ---------------------------------------------------------------------------


def test_results_do_not_reach_the_report_builder() -> None:
    """Every import statement of each module (top level, function level, TYPE_CHECKING), followed
    through kgprobe's own modules: the results writer never reaches the report builder; stats
    reaches nothing of kgprobe but errors; the measure registry imports no report module."""

    def imports(mod: str) -> set[str]:
        path = ROOT / (mod.replace(".", "/") + ".py")
        if not path.is_file():
            path = ROOT / mod.replace(".", "/") / "__init__.py"
        if not path.is_file():
            return set()
        out = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kgprobe"):
                out.add(node.module)
                out.update(f"{node.module}.{a.name}" for a in node.names
                           if (ROOT / (node.module + "." + a.name).replace(".", "/")).with_suffix(".py").is_file())
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name.startswith("kgprobe"))
        return out

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            m = todo.pop()
            for n in imports(m):
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return seen

    assert "kgprobe.reports.results" in reach("kgprobe.reports.write")  # the walk follows imports
    assert "kgprobe.reports.build" not in reach("kgprobe.reports.results")
    assert reach("kgprobe.stats") <= {"kgprobe.errors"}
    assert not {m for m in imports("kgprobe.probing.measures.registry") if m.startswith("kgprobe.reports")}
    assert "kgprobe.stats" in imports("kgprobe.probing.measures.registry")


def test_bootstrap_ci_keeps_its_numbers() -> None:
    """kgprobe.stats.bootstrap_ci: a direct numpy percentile bootstrap with the same generator
    gives the same interval (scipy draws the same indices)."""
    from kgprobe.stats import bootstrap_ci

    x = np.array(A_SCORES)
    rng = np.random.default_rng(11)
    means = x[rng.integers(0, x.size, size=(1000, x.size))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    assert bootstrap_ci(x.tolist(), 11) == pytest.approx((lo, hi), abs=1e-12)


def test_paired_bootstrap_against_direct_resampling() -> None:
    from kgprobe.stats import paired_bootstrap_ci

    a, b = np.array(A_SCORES), np.array(B_SCORES)
    rng = np.random.default_rng(5)
    idx = rng.integers(0, a.size, size=(1000, a.size))  # the same facts for both models
    d = b[idx].mean(axis=1) - a[idx].mean(axis=1)
    lo, hi = np.percentile(d, [2.5, 97.5])
    got = paired_bootstrap_ci(A_SCORES, B_SCORES, 5)
    assert got == pytest.approx((lo, hi), abs=1e-12)
    assert got[0] <= 3 / 11 <= got[1]  # contains the observed difference
    # swapping the models negates the interval
    lo2, hi2 = paired_bootstrap_ci(B_SCORES, A_SCORES, 5)
    assert (lo2, hi2) == pytest.approx((-got[1], -got[0]), abs=1e-12)


def test_constant_shift_gives_zero_width_where_marginal_intervals_overlap() -> None:
    """B = A + 0.125 on every fact: the marginal intervals overlap, the paired one is exactly
    the shift (every resample has the same difference)."""
    from kgprobe.stats import bootstrap_ci, paired_bootstrap_ci

    a = [0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 0.25, 0.5, 0.125, 0.375]
    b = [x + 0.125 for x in a]  # exact in binary
    assert paired_bootstrap_ci(a, b, 0) == (0.125, 0.125)
    lo_a, hi_a = bootstrap_ci(a, 0)
    lo_b, hi_b = bootstrap_ci(b, 1)
    assert lo_b < hi_a  # overlap
    with pytest.raises(ValueError):
        paired_bootstrap_ci(a, b[:-1], 0)


def test_mcnemar_exact_by_hand() -> None:
    from kgprobe.stats import mcnemar

    ka = [v >= 0.5 for v in A_SCORES]
    kb = [v >= 0.5 for v in B_SCORES]
    m = mcnemar(ka, kb)
    assert (m.b, m.c) == (2, 5)
    # two-sided exact: 2 · P(X <= 2), X ~ Bin(7, 1/2) = 2 · (1 + 7 + 21) / 128
    assert m.p == pytest.approx(58 / 128) and m.p == pytest.approx(binomtest(2, 7, 0.5).pvalue)
    assert mcnemar([True, False], [True, False]).p == 1.0  # no discordant fact
    # the demo numbers: discordant 2 vs 7 -> p = 0.18
    m2 = mcnemar([True] * 2 + [False] * 7, [False] * 2 + [True] * 7)
    assert (m2.b, m2.c) == (2, 7) and m2.p == pytest.approx(0.1797, abs=1e-4)


# --- the report -----------------------------------------------------------------------------------------


def test_paired_section_by_hand(pair_graph: Any) -> None:
    from kgprobe.reports.build import build_report
    from kgprobe.stats import paired_bootstrap_ci

    rep = build_report(pair_graph, "hand", vs="other", seed=0)
    by = {pg.key: pg for pg in rep.paired}
    # per relation in the primary's order (best first: P36 2/3, P27 1.5/7, P35 0), then all
    assert [pg.key for pg in rep.paired] == ["P36", "P27", "P35", "all"]
    al = by["all"]
    assert al.facts == 11 and al.mean_a == pytest.approx(3.5 / 11) and al.mean_b == pytest.approx(6.5 / 11)
    assert al.diff == pytest.approx(3 / 11)
    assert (al.a_known, al.b_known, al.b, al.c) == (4, 7, 2, 5) and al.p == pytest.approx(58 / 128)
    assert al.diff_ci_low is not None and al.diff_ci_high is not None
    assert al.diff_ci_low <= al.diff <= al.diff_ci_high
    width = al.diff_ci_high - al.diff_ci_low
    lo, hi = paired_bootstrap_ci(A_SCORES, B_SCORES, 123)  # another seed, about the same width
    assert width == pytest.approx(hi - lo, abs=0.08)
    p27 = by["P27"]  # a: 0 .25 0 .75 .5 0 0; b: 1 .75 .5 1 .25 0 1
    assert p27.facts == 7 and p27.diff == pytest.approx(3 / 7)
    assert (p27.b, p27.c) == (1, 4) and p27.p == pytest.approx(2 * (1 + 5) / 32)
    assert (p27.diff_ci_low, p27.diff_ci_high) == (None, None)  # n < 10: "n too small"
    p36 = by["P36"]
    assert p36.diff == pytest.approx(-1 / 3) and (p36.b, p36.c, p36.p) == (1, 0, 1.0)
    p35 = by["P35"]
    assert (p35.facts, p35.b, p35.c, p35.p) == (1, 0, 1, 1.0)
    # swapping the models: difference and interval negated, b and c swapped, same p
    rev = {pg.key: pg for pg in build_report(pair_graph, "other", vs="hand", seed=0).paired}["all"]
    assert rev.diff == pytest.approx(-al.diff) and (rev.b, rev.c) == (5, 2) and rev.p == al.p
    assert (rev.diff_ci_low, rev.diff_ci_high) == pytest.approx((-al.diff_ci_high, -al.diff_ci_low), abs=1e-12)
    # the single-model report is unchanged: no paired section
    assert build_report(pair_graph, "hand", seed=0).paired == []


def test_paired_section_in_every_output(pair_graph: Any, tmp_path: Path) -> None:
    from rich.console import Console

    from kgprobe.reports.build import build_report
    from kgprobe.reports.console import print_report
    from kgprobe.reports.write import write_report

    rep = build_report(pair_graph, "hand", vs="other", seed=0)
    paths = write_report(rep, tmp_path)
    doc = json.loads(paths["json"].read_text())
    al = doc["paired"][-1]
    assert al["key"] == "all" and (al["b"], al["c"]) == (2, 5) and al["p"] == pytest.approx(58 / 128)
    assert al["diff"] == pytest.approx(3 / 11) and al["diff_ci_low"] is not None
    res = json.loads(paths["results"].read_text())
    assert res["paired"][-1]["c"] == 5
    rows = list(csv.DictReader(paths["paired_csv"].open()))
    assert [r["key"] for r in rows] == ["P36", "P27", "P35", "all"]
    assert rows[-1]["model_a"] == "hand" and rows[-1]["model_b"] == "other"
    assert (rows[-1]["mcnemar_b"], rows[-1]["mcnemar_c"]) == ("2", "5")
    assert float(rows[-1]["diff"]) == pytest.approx(3 / 11)
    page = paths["html"].read_text()
    assert 'id="paired"' in page and "+0.273 [" in page and "2 / 5" in page and "0.453" in page
    con = Console(record=True, width=300)
    print_report(rep, con)
    text = con.export_text()
    assert "paired: other vs hand" in text and "+0.273 [" in text and "0.453" in text
    assert "+0.429 (n too small)" in text  # P27, n = 7
    # a single-model report writes no paired.csv
    only = write_report(build_report(pair_graph, "hand", seed=0), tmp_path / "one")
    assert "paired_csv" not in only and not (tmp_path / "one" / "paired.csv").exists()


def test_one_model_against_itself_under_another_measure_key(graph: Any, kgprobe_env: dict[str, str],
                                                           tmp_path: Path) -> None:
    """report --vs-measure (the demo's careful-vs-raw section): the same model's two measure
    keys paired on the same facts give the numbers worked out by hand for hand vs other."""
    from dataclasses import replace

    from kgprobe.reports.build import build_report
    from kgprobe.reports.text import other_measures, title
    from kgprobe.reports.write import write_report

    load(graph)
    _seed(graph, "hand", KMIN, A_SCORES, "t1")
    _seed(graph, "hand", KMIN + "_vraw", B_SCORES, "t2")
    rep = build_report(graph, "hand", measure=KMIN, vs_measure=KMIN + "_vraw", seed=0)
    al = rep.paired[-1]
    assert al.key == "all" and al.facts == 11 and al.diff == pytest.approx(3 / 11)
    assert (al.a_known, al.b_known, al.b, al.c) == (4, 7, 2, 5) and al.p == pytest.approx(58 / 128)
    assert rep.comparison is not None and rep.comparison["both_probed"] == 11
    assert rep.names() == ("careful", "raw")
    assert title(rep).startswith("hand, careful vs raw labels: Min@5")
    # the compared key is in the paired tables, not again under "other measures"
    rows = [{"measure_key": KMIN + "_vraw", "pid": "P27"}, {"measure_key": "kavg_temp_sem_n5", "pid": "P27"}]
    assert [r["measure_key"] for r in other_measures(replace(rep, measures=rows))] == ["kavg_temp_sem_n5"]
    alone = replace(build_report(graph, "hand", measure=KMIN, seed=0), measures=rows)
    assert [r["measure_key"] for r in other_measures(alone)] == [KMIN + "_vraw", "kavg_temp_sem_n5"]
    assert write_report(rep, tmp_path / "r")  # one model's report: the owner is that model
    manifest = json.loads(next((tmp_path / "r").glob(".kgprobe*")).read_text())
    assert manifest["owner"]["models"] == ["hand"]
    with pytest.raises(ConfigError, match="not both"):
        build_report(graph, "hand", vs="hand", vs_measure=KMIN + "_vraw")
    with pytest.raises(ConfigError, match="is the report's own measure key"):
        build_report(graph, "hand", measure=KMIN, vs_measure=KMIN)
    r = run_kgprobe(["report", "-m", "hand", "--measure", KMIN, "--vs-measure", KMIN + "_vraw", "--json"],
                    kgprobe_env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["paired"][-1]["c"] == 5


def test_vs_picks_the_common_measure(graph: Any) -> None:
    """A's latest run used kavg, an older one kmin; B has only kmin. Today's code asked B for
    A's latest measure and failed; the report now uses kmin, the measure both have."""
    from kgprobe.reports.build import build_report

    load(graph)
    _seed(graph, "hand", KMIN, A_SCORES, "t1")
    _seed(graph, "hand", "kavg_temp_sem_n5", [0.5] * len(PAIRS), "t2")
    _seed(graph, "other", KMIN, B_SCORES, "t1")
    rep = build_report(graph, "hand", vs="other", seed=0)
    assert rep.primary.measure_key == KMIN and rep.other is not None and rep.other.measure_key == KMIN
    assert rep.paired[-1].diff == pytest.approx(3 / 11)
    # without --vs too: the default measure (kmin), not the latest run's kavg (issue 40 item 3)
    assert build_report(graph, "hand", seed=0).primary.measure_key == KMIN


def test_compare_and_vs_keep_the_default_measure_when_both_probed_another_later(graph: Any) -> None:
    """Issue 40 item 3: both models' latest runs used kavg, an older one kmin; without
    ``--measure`` compare and ``report --vs`` read kmin for BOTH models (not the latest kavg),
    and say so."""
    from kgprobe.probing.scores import compare_in
    from kgprobe.reports.build import build_report

    load(graph)
    _seed(graph, "hand", KMIN, A_SCORES, "t1")
    _seed(graph, "other", KMIN, B_SCORES, "t1")
    _seed(graph, "hand", "kavg_temp_sem_n5", [0.5] * len(PAIRS), "t2")
    _seed(graph, "other", "kavg_temp_sem_n5", [0.5] * len(PAIRS), "t2")
    cmp = compare_in(graph, "hand", "other")
    # on kmin, A knows 4 and B 7 of the 11 facts (test_vs_measure_name_picks_the_key_both_have);
    # on kavg every score is 0.5: both would know all 11
    assert cmp.measure == KMIN and (cmp.counts["a_known"], cmp.counts["b_known"]) == (4, 7)
    rep = build_report(graph, "hand", vs="other", seed=0)
    assert rep.primary.measure_key == KMIN and rep.other is not None and rep.other.measure_key == KMIN
    assert rep.paired[-1].diff == pytest.approx(3 / 11)


def test_vs_measure_name_picks_the_key_both_have(graph: Any) -> None:
    """``--measure kmin``: A's latest kmin key is kmin_random_n5, B has only kmin_temp_sem_n5,
    which A also has; both the report and ``compare`` use that one."""
    from kgprobe.probing.scores import compare_in
    from kgprobe.reports.build import build_report

    load(graph)
    _seed(graph, "hand", KMIN, A_SCORES, "t1")
    _seed(graph, "hand", "kmin_random_n5", [1.0] * len(PAIRS), "t2")
    _seed(graph, "other", KMIN, B_SCORES, "t1")
    rep = build_report(graph, "hand", vs="other", measure="kmin", seed=0)
    assert rep.primary.measure_key == KMIN and (rep.paired[-1].b, rep.paired[-1].c) == (2, 5)
    cmp = compare_in(graph, "hand", "other", measure="kmin")
    assert cmp.measure == KMIN and cmp.counts["a_known"] == 4 and cmp.counts["b_known"] == 7
    with pytest.raises(ConfigError, match="share no 'kavg' measure key"):
        build_report(graph, "hand", vs="other", measure="kavg", seed=0)


def test_vs_exact_measure_key_wins_over_a_longer_one(graph: Any) -> None:
    """B's latest key extends A's (``kmin_temp_sem_n5_lrall``): the exact key is used, not the
    first key it is a prefix of."""
    from kgprobe.reports.build import build_report

    load(graph)
    _seed(graph, "hand", KMIN, A_SCORES, "t1")
    _seed(graph, "other", KMIN, B_SCORES, "t1")
    _seed(graph, "other", KMIN + "_lrall", [0.0] * len(PAIRS), "t2")
    rep = build_report(graph, "hand", vs="other", seed=0)
    assert rep.other is not None and rep.other.measure_key == KMIN
    assert (rep.paired[-1].b, rep.paired[-1].c) == (2, 5)


def test_vs_without_a_common_measure_is_one_line(graph: Any, kgprobe_env: dict[str, str]) -> None:
    import subprocess
    import sys

    from kgprobe.reports.build import build_report

    load(graph)
    _seed(graph, "hand", KMIN, A_SCORES, "t1")
    _seed(graph, "other", "kavg_temp_sem_n5", B_SCORES, "t1")
    with pytest.raises(ConfigError, match="hand and other share no measure") as err:
        build_report(graph, "hand", vs="other", seed=0)
    assert "\n" not in str(err.value) and KMIN in str(err.value) and "kavg_temp_sem_n5" in str(err.value)
    exe = str(Path(sys.executable).parent / "kgprobe")
    r = subprocess.run([exe, "report", "-m", "hand", "--vs", "other"], capture_output=True, text=True,
                       env=kgprobe_env, timeout=300)
    assert r.returncode == 2 and "share no measure" in r.stderr and "Traceback" not in r.stderr


# --- the chance line --------------------------------------------------------------------------------------


def test_chance_line(pair_graph: Any, tmp_path: Path) -> None:
    """Min@5: 1/(5+1) (the object first among 6 exchangeable plausibilities); Avg@n: 1/2;
    a measure without a defined chance level: none."""
    from rich.console import Console

    from kgprobe.reports.build import build_report
    from kgprobe.reports.console import print_report
    from kgprobe.reports.write import write_report

    rep = build_report(pair_graph, "hand", seed=0)
    assert rep.chance is not None and rep.chance.level == pytest.approx(1 / 6)
    paths = write_report(rep, tmp_path)
    assert json.loads(paths["json"].read_text())["chance"]["level"] == pytest.approx(1 / 6)
    assert 'id="chance"' in paths["html"].read_text() and "0.167" in paths["html"].read_text()
    con = Console(record=True, width=300)
    print_report(rep, con)
    assert "chance level: 0.167 (1/(n+1) for n = 5 distractors" in con.export_text()

    _seed(pair_graph, "avg", "kavg_temp_sem_n10", A_SCORES, "t3")
    avg = build_report(pair_graph, "avg", seed=0)
    assert avg.chance is not None and avg.chance.level == 0.5
    _seed(pair_graph, "prob", "probability", A_SCORES, "t4")
    prob = build_report(pair_graph, "prob", seed=0)
    assert prob.chance is None
    con = Console(record=True, width=300)
    print_report(prob, con)
    assert "chance level: not defined for this measure" in con.export_text()


# --- popularity and staleness for every model ---------------------------------------------------------


def test_popularity_and_staleness_for_both_models(pair_graph: Any, tmp_path: Path) -> None:
    """Subject popularity in probe_world: USA 9 (two facts), FRANCE 8, GERMANY 7, OBAMA 6,
    TRUMP 5.5, BIDEN 5, BUSH 4, CLINTON 3, CURIE 1.5, BACH 1: tertile edges 4.33 and 6.67.
    B ("other") per bucket: low (BUSH, CLINTON, CURIE, BACH) 1, .25, 0, 1 -> 0.5625, 2/4 known;
    mid (OBAMA, TRUMP, BIDEN) 1, .75, .5 -> 0.75, 3/3; high 1, 1, 0, 0 -> 0.5, 2/4. Staleness
    on USA P35 only: A 1.0, B 0.0."""
    from rich.console import Console

    from kgprobe.reports.build import build_report
    from kgprobe.reports.console import print_report
    from kgprobe.reports.write import write_report

    rep = build_report(pair_graph, "hand", vs="other", seed=0)
    assert rep.other is not None
    bp = rep.other.overall.by_popularity
    assert bp["low"].mean == pytest.approx(0.5625) and bp["mid"].mean == pytest.approx(0.75)
    assert (bp["mid"].known, bp["mid"].facts) == (3, 3) and bp["high"].mean == pytest.approx(0.5)
    con = Console(record=True, width=300)
    print_report(rep, con)
    lines = con.export_text().splitlines()
    # a row per model under each bucket: hand's, then other's on the next line
    mid = next(i for i, line in enumerate(lines) if line.startswith("│ mid (4.33 – 6.67)"))
    assert "hand" in lines[mid] and "0.083 (n too small)" in lines[mid]
    assert "other" in lines[mid + 1] and "0.750 (n too small)" in lines[mid + 1] and "3/3 (100%)" in lines[mid + 1]
    # one groups table per model: P35's staleness, hand's (100%) in the first, other's (0%) in the second
    p35 = [line for line in lines if line.startswith("│ P35 head of state")]
    assert p35[0].endswith("│ 100% (n=1) │") and p35[1].rstrip().endswith("│ 0% (n=1)  │")
    page = write_report(rep, tmp_path)["html"].read_text()
    pop_table = page[page.index('<table id="popularity">'):]
    pop_table = pop_table[:pop_table.index("</table>")]
    other_row = re.search(r'<td class="model">other</td>(.*?)</tr>', pop_table.split("mid (4.33")[1], re.S)
    assert other_row is not None and "0.750 (n too small)" in other_row.group(1)
    assert "other: 1 of 11 probed facts have a past value; overall staleness 0% (n=1)" in page
    assert "hand: 1 of 11 probed facts have a past value; overall staleness 100% (n=1)" in page
    assert "staleness (n)" in page


def _details(sentence: str, obj: float, label: str, dist: float, dist_sentence: str) -> dict[str, Any]:
    """A per-fact record as the probe writes it (kgprobe.reports.results.FactDetails)."""
    return {"unscorable": None, "templates": ["[X] t [Y]."],
            "clozes": [{"template": "[X] t [Y].", "subject_label": "S", "context": "S t",
                        "sentence": sentence, "log_pl_object": obj}],
            "distractors": [{"qid": "Q1", "label": label, "role": "distractor",
                             "also_past_value": False, "log_pl": [dist], "scored": [dist_sentence]}]}


def test_careful_vs_raw_lists_the_facts_that_moved_and_why(graph: Any, tmp_path: Path) -> None:
    """Issue 41: the careful-vs-raw section lists every fact whose score moved (8 of PAIRS'
    11: all but USA P36, FRANCE P36 and CURIE), largest move first, each with the cloze
    whose verdict changed: the object's two sentences and Δ log Pl, and each flipped
    distractor's; a change of exactly log 2 (a sentence counted twice) is flagged."""
    import math

    from kgprobe.reports.write import report

    load(graph)
    _seed(graph, "hand", KMIN, A_SCORES, "t1")
    _seed(graph, "hand", KMIN + "_vraw", B_SCORES, "t2")
    germany, clinton = _key(graph, GERMANY, "P36", "Q64"), _key(graph, CLINTON, "P27", USA)
    careful = {germany: _details("S t Berlin.", -1.0, "Bonn", -2.0, "S t Bonn."),
               clinton: _details("S t the United States.", -2.0, "Canada", -2.0, "S t Canada.")}
    raw = {germany: _details("S t Berlin.", -3.0, "Bonn", -2.0, "S t Bonn."),
           clinton: _details("S t United States.", -2.0, "Canada", -2.0 - math.log(2), "S t Canada.")}
    rep, paths = report("hand", measure=KMIN, vs_measure=KMIN + "_vraw", graph=graph,
                        details=careful, vs_details=raw, out=tmp_path / "r")
    moved = {_key(graph, s, p, o) for s, p, o, a, b in PAIRS if a != b}
    assert len(moved) == 8 and {m["key"] for m in rep.moves} == moved
    assert [abs(m["score_a"] - m["score_b"]) for m in rep.moves] == [1.0] * 4 + [0.5] * 2 + [0.25] * 2
    by_key = {m["key"]: m for m in rep.moves}
    [g] = by_key[germany]["clozes"]
    assert (g["sentence_a"], g["sentence_b"], g["delta_object"]) == ("S t Berlin.", "S t Berlin.", 2.0)
    assert [(f["label"], f["object_wins_a"], f["delta"], f["counted_twice"]) for f in g["flips"]] == [
        ("Bonn", True, 0.0, False)]
    [c] = by_key[clinton]["clozes"]
    assert c["delta_object"] == 0.0 and not c["counted_twice"]
    [f] = c["flips"]
    assert f["object_wins_a"] is False and f["delta"] == pytest.approx(math.log(2)) and f["counted_twice"]
    assert by_key[_key(graph, BACH, "P27", GERMANY)]["clozes"] == []  # no details: listed, not explained
    md = paths["markdown"].read_text()
    assert "Facts that moved between raw and careful wording (8)" in md
    assert "object: raw “S t United States.” → careful “S t the United States.”: Δ log Pl +0.00" in md
    assert "distractor Canada (the object now loses to it)" in md and "≈ log 2: a sentence counted twice?" in md
    assert "Facts that moved" in paths["html"].read_text()
