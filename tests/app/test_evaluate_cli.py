"""`kgprobe evaluate` (τ-b against a constructed human-score file, robustness, the k-fold
grid-search table) and `kgprobe factor --from-graph`, on the probe world with a tiny model."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from probe_world import REF, load
from tiny_models import TinyModel

from kgprobe.app import evaluation as app_ev
from kgprobe.errors import ConfigError, InputError
from kgprobe.graph import probe_runs as pr
from kgprobe.probing.measures import evaluation as ev
from kgprobe.probing.run import ProbeConfig, run_probe


@pytest.fixture(scope="module")
def gpt2(tiny_model: TinyModel) -> Path:
    return tiny_model("gpt2")


@pytest.fixture()
def probed(graph: Any, gpt2: Path, tmp_path: Path) -> Any:
    """Two configurations of kmin and kavg (n = 1, 2) on the 11 facts of the world."""
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.models import load_model

    load(graph)
    eng = Engine(load_model(str(gpt2)))
    for n in (1, 2):
        run_probe(graph, eng, ProbeConfig(model=str(gpt2), sample=None, n=n, at=REF,
                                          strategy="random", measures=("kmin", "kavg", "probability")),
                  fingerprint=eng.fingerprint, progress=False)
    return graph


def _stored(graph: Any, key: str) -> list[dict[str, Any]]:
    return pr.scores_with_ends(graph, pr.ScoreProps("gpt2", key))


def test_tau_against_constructed_human_scores(probed: Any, tmp_path: Path) -> None:
    rows = _stored(probed, "probability")
    assert len(rows) == 11 and len({r["score"] for r in rows}) == 11  # no ties: a clean check
    # humans agree exactly (keyed by statement id) -> tau-b = 1; reversed (keyed by
    # subject, relation, object) -> -1; one adjacent pair swapped -> 1 - 2*2/55 = 51/55
    order = sorted(rows, key=lambda r: r["score"])
    agree = tmp_path / "agree.csv"
    with agree.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["statement", "score"])
        for rank, r in enumerate(order):
            w.writerow([r["key"], rank])
    reverse = tmp_path / "reverse.tsv"
    with reverse.open("w", newline="") as fh:
        w = csv.writer(fh, dialect="excel-tab")
        w.writerow(["subject", "relation", "object", "score"])
        for rank, r in enumerate(order):
            w.writerow([r["s"], r["pid"], r["o"], -rank])
    swapped = tmp_path / "swapped.jsonl"
    ranks = list(range(11))
    ranks[4], ranks[5] = ranks[5], ranks[4]
    swapped.write_text("".join(json.dumps({"key": r["key"], "score": k}) + "\n"
                               for r, k in zip(order, ranks, strict=True)))
    got = app_ev.evaluate_measure(probed, "gpt2", "probability", ev.read_human_scores(agree))
    assert got["facts"] == 11 and got["tau_b"] == pytest.approx(1.0)
    got = app_ev.evaluate_measure(probed, "gpt2", "probability", ev.read_human_scores(reverse))
    assert got["tau_b"] == pytest.approx(-1.0)
    got = app_ev.evaluate_measure(probed, "gpt2", "probability", ev.read_human_scores(swapped))
    # 55 pairs, one discordant: (54 - 1) / 55
    assert got["tau_b"] == pytest.approx(53 / 55)

    bad = tmp_path / "bad.csv"
    bad.write_text("statement,score\nQ1$x,high\n")
    with pytest.raises(InputError, match="bad.csv:2"):
        ev.read_human_scores(bad)


def test_robustness_and_grid_table(probed: Any, tmp_path: Path, kgprobe_env: dict[str, str]) -> None:
    same = app_ev.robustness(probed, ("gpt2", "kmin_random_n1"), ("gpt2", "kmin_random_n1"))
    assert same["facts"] == 11 and (same["tau_b"] == pytest.approx(1.0) or math.isnan(same["tau_b"]))
    # human scores = the probability measure itself: its grid has one configuration (tau 1
    # on every fold), the kmin grid picks n per fold
    human = tmp_path / "human.csv"
    rows = _stored(probed, "probability")
    human.write_text("statement,score\n" + "".join(f"{r['key']},{r['score']}\n" for r in rows))
    table = {r["measure"]: r for r in app_ev.grid_table(probed, "gpt2", ev.read_human_scores(human), k=3)}
    assert set(table) == {"kmin", "kavg", "probability"}
    assert table["probability"]["tau_mean"] == pytest.approx(1.0) and table["probability"]["tau_sd"] == pytest.approx(0.0)
    assert set(table["kmin"]["configs"]) == {"kmin_random_n1", "kmin_random_n2"}
    assert len(table["kmin"]["chosen"]) == 3

    exe = str(Path(sys.executable).parent / "kgprobe")
    out = subprocess.run([exe, "evaluate", "--model", "gpt2", "--human", str(human), "--grid", "--json"],
                         capture_output=True, text=True, env=kgprobe_env, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)  # one JSON document
    assert {r["measure"] for r in doc["grid"]} == {"kmin", "kavg", "probability"}
    out = subprocess.run([exe, "evaluate", "--model", "gpt2", "--measure", "probability", "--human", str(human)],
                         capture_output=True, text=True, env=kgprobe_env, timeout=300)
    assert out.returncode == 0 and "tau-b 1.000" in out.stdout and "over 11 facts" in out.stdout
    out = subprocess.run([exe, "evaluate", "--model", "gpt2"], capture_output=True, text=True,
                         env=kgprobe_env, timeout=300)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1


def test_a_measure_with_tied_scores_leaves_the_other_rows_of_the_grid(probed: Any, tmp_path: Path) -> None:
    """A measure whose every configuration scores all facts alike has no τ on any training fold:
    its row says why, and the other measures' rows are still computed (before: the whole grid
    stopped with "no configuration gives a defined tau")."""
    for mk in ("kavg_random_n1", "kavg_random_n2"):
        prop = pr.ScoreProps("gpt2", mk).score
        probed.write(f"MATCH ()-[f:FACT]->() WHERE f.`{prop}` IS NOT NULL SET f.`{prop}` = 0.5")
    human = tmp_path / "human.csv"
    rows = _stored(probed, "probability")
    human.write_text("statement,score\n" + "".join(f"{r['key']},{r['score']}\n" for r in rows))
    table = {r["measure"]: r for r in app_ev.grid_table(probed, "gpt2", ev.read_human_scores(human), k=3)}
    assert table["kavg"]["tau_mean"] is None and table["kavg"]["chosen"] == []
    assert "no configuration gives a defined tau" in table["kavg"]["why"]
    # the humans are the probability scores themselves: tau 1 on every fold, by construction
    assert table["probability"]["tau_mean"] == pytest.approx(1.0) and table["probability"]["why"] is None
    assert len(table["kmin"]["chosen"]) == 3


def test_factor_from_graph(graph: Any, gpt2: Path, kgprobe_env: dict[str, str]) -> None:
    """Items from facts: true sentence vs typed random distractors; accuracy per relation;
    the CLI prints one JSON document."""
    from kgprobe.app.factor_pipeline import PipelineSettings, run_factor_pipeline

    load(graph)
    two = PipelineSettings(n=2, strategy="random", prefix_facts=0)  # short: nothing to cut
    res = run_factor_pipeline(str(gpt2), relations=("P36",), sample=None, settings=two,
                              progress=False, graph=graph, at=REF)
    assert res["items"] == 3 and set(res["relations"]) == {"P36"}
    assert res["accuracy"] == res["correct"] / 3
    # by hand: each item is correct when its first score is the largest
    assert res["correct"] == sum(1 for r in res["per_item"] if r["scores"][0] >= max(r["scores"][1:]))
    assert all(len(r["scores"]) == 3 for r in res["per_item"])
    capped = run_factor_pipeline(str(gpt2), relations=("P36",), sample=None, settings=two,
                                 progress=False, graph=graph, at=REF, max_length=48)
    assert capped["max_length"] == 48 and capped["per_item"] == res["per_item"]  # nothing to cut
    with pytest.raises(ConfigError):
        run_factor_pipeline(str(gpt2), relations=("P36",), graph=graph, max_length=1, progress=False)

    exe = str(Path(sys.executable).parent / "kgprobe")
    out = subprocess.run([exe, "factor", "--from-graph", "-r", "P36", "-m", str(gpt2), "-n", "2",
                          "--prefix-facts", "0", "--sample", "0", "--json"], capture_output=True, text=True, env=kgprobe_env,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["source"] == "graph" and doc["items"] == 3
    out = subprocess.run([exe, "factor", "-m", str(gpt2)], capture_output=True, text=True,
                         env=kgprobe_env, timeout=300)
    assert out.returncode == 2 and "--from-graph" in out.stderr
