"""Results files: a real probe (tiny real model, real graph server) writes results.json and
per-fact records with the distractors' scores; kgprobe.results.load reads them into pandas; the
documented schema (docs/results.md) is the one written."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from _scoring_models import build
from distractor_world import BIDEN, OBAMA, TRUMP, USA
from probe_world import REF, load

from kgprobe.probing.run import ProbeConfig, run_probe
from kgprobe.reporting import build_report, write_report
from kgprobe.results import SCHEMA, FactDetails
from kgprobe.results import load as load_results

torch.set_num_threads(1)
DOCS = Path(__file__).resolve().parent.parent / "docs" / "results.md"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build("gpt2", tmp_path_factory.mktemp("results-model") / "tinygpt")


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> Any:
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.models import load_model

    return Engine(load_model(str(model_dir)))


def _pl(engine: Any, context: str, labels: list[str]) -> float:
    """Eq. (1) of the distractors paper by hand: log Σ_λ P(" λ." | c)."""
    vals = [r.logprob for r in engine.score(context, [f" {lab}." for lab in labels])]
    top = max(vals)
    return top + math.log(sum(math.exp(v - top) for v in vals))


@pytest.fixture()
def probed(graph: Any, engine: Any, tmp_path: Path) -> tuple[Any, dict[str, Path], Any]:
    from kgprobe.probing.semantic import IndexSettings, ensure_index

    load(graph)
    index = ensure_index(graph, tmp_path / "index", IndexSettings(dim=8, seed=0))
    details = FactDetails()
    cfg = ProbeConfig(model="tinygpt", sample=None, n=2, at=REF, batch_facts=4, measures=("kmin", "kavg"))
    summary = run_probe(graph, engine, cfg, fingerprint=engine.fingerprint, index=index,
                        progress=False, on_fact=details)
    assert summary.scored == 11
    rep = build_report(graph, "tinygpt", measure="kmin", seed=0)
    paths = write_report(rep, tmp_path / "out", details=details.records)
    return rep, paths, details


def test_results_round_trip_into_pandas(probed: tuple[Any, dict[str, Path], Any], engine: Any) -> None:
    rep, paths, _ = probed
    res = load_results(paths["results"].parent)
    doc = res.document
    assert doc["schema"] == SCHEMA and doc["model_name"] == "tinygpt"
    assert doc["config"]["measure"] == "Min@2, temp+sem distractors"
    assert doc["config"]["min_n_for_interval"] == 10 and doc["config"]["probe"]["n"] == 2
    assert doc["models"][0]["model_fingerprint"] == [engine.fingerprint]
    assert doc["graph_snapshot"]["facts"] > 0 and doc["versions"]["kgprobe"]

    # aggregates: one row per relation + all, the numbers of the report
    rel = res.relations.set_index("relation")
    assert isinstance(res.relations, pd.DataFrame)
    assert set(rel.index) == {"P27", "P35", "P36", "all"}
    assert rel.loc["P27", "n"] == 7 and rel.loc["all", "n"] == 11
    assert rel.loc["P27", "mean"] == pytest.approx(rep.primary.relations[[g.key for g in rep.primary.relations].index("P27")].mean)
    assert math.isnan(rel.loc["P27", "ci_low"])  # n = 7: no interval
    assert not math.isnan(rel.loc["all", "ci_low"])

    # per-fact records: 11 facts, both measures as columns, the score column = the graph's
    s = res.samples
    assert len(s) == 11 and s["key"].is_unique
    assert {"score.kmin_temp_sem_n2", "score.kavg_temp_sem_n2"} <= set(s.columns)
    assert (s["score"] == s["score.kmin_temp_sem_n2"]).all()
    # Min@n never exceeds Avg@n on the same plausibilities
    assert (s["score.kmin_temp_sem_n2"] <= s["score.kavg_temp_sem_n2"] + 1e-12).all()
    # every record's Min@2 follows from its own exported distractor scores (eq. 2, 3)
    for _, r in s.iterrows():
        ds = [d for d in r["distractors"] if d["role"] == "distractor"]
        wins = [min(1.0 if c["log_pl_object"] > d["log_pl"][i] else 0.0 for d in ds)
                for i, c in enumerate(r["clozes"])]
        assert r["score"] == pytest.approx(sum(wins) / len(wins))

    # the head-of-state fact: object and distractors' plausibilities recomputed by hand
    usa = s[(s["subject"] == USA) & (s["relation"] == "P35")].iloc[0]
    assert usa["object"] == BIDEN and usa["subject_label"] == "United States of America"
    assert usa["templates"] == ["The head of state of [X] is [Y].", "Who is the head of state of [X]?"]
    assert len(usa["template_ids"]) == 2
    by_q = {d["qid"]: d for d in usa["distractors"]}
    assert {q for q, d in by_q.items() if d["role"] == "distractor"} == {TRUMP, OBAMA}
    for i, c in enumerate(usa["clozes"]):
        assert c["log_pl_object"] == pytest.approx(_pl(engine, c["context"], ["Joe Biden"]), abs=1e-4)
        assert by_q[OBAMA]["log_pl"][i] == pytest.approx(
            _pl(engine, c["context"], ["Barack Obama", "Obama"]), abs=1e-4)
    assert usa["stale"] is not None and not math.isnan(usa["stale"])
    # the sentences as the careful verbalizer wrote them (by hand)
    assert [c["sentence"] for c in usa["clozes"]] == [
        "The head of state of the United States of America is Joe Biden.",
        "Who is the head of state of the United States of America? Joe Biden"]

    # the Parquet copy holds the same records
    pq = pd.read_parquet(paths["parquet"])
    assert sorted(pq["key"]) == sorted(s["key"])
    assert json.loads(pq.set_index("key").loc[usa["key"], "distractors"]) == usa["distractors"]
    # and load() falls back to it when the JSONL is gone
    paths["samples"].unlink()
    again = load_results(paths["results"].parent)
    assert again.samples.set_index("key").loc[usa["key"], "distractors"] == usa["distractors"]


def test_schema_is_documented(probed: tuple[Any, dict[str, Path], Any]) -> None:
    """Every key written in results.json and samples.jsonl appears in docs/results.md, and every
    field the doc's tables list is written."""
    _, paths, _ = probed
    doc_text = DOCS.read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([a-z_.]+)`", doc_text, re.M))
    results = json.loads(paths["results"].read_text())
    sample = json.loads(paths["samples"].read_text().splitlines()[0])
    model = results["models"][0]
    group = model["results"]["P27"]
    written = (
        set(results) | {f"config.{k}" for k in results["config"]} | {f"models.{k}" for k in model}
        | {f"results.{k}" for k in group} | {f"popularity.{k}" for k in results["popularity"]}
        | {f"samples.{k}" for k in sample} | {f"distractors.{k}" for k in sample["distractors"][0]}
        | {f"clozes.{k}" for k in sample["clozes"][0]}
    )
    assert written - documented == set(), "written but not documented"
    assert documented - written == set(), "documented but not written"


def test_probe_output_path_writes_the_results(graph: Any, model_dir: Path, tmp_path: Path) -> None:
    """`kgprobe probe --output-path` (the API behind it): probe, then the results files, with
    the distractors of every fact this call scored."""
    from kgprobe.api import probe

    load(graph)
    summary = probe(str(model_dir), graph=graph, strategy="random", n=2, sample=None, at=REF,
                    cache=False, progress=False, output_path=tmp_path / "o")
    assert summary.scored == 11 and set(summary.output_files) >= {"results", "samples", "html"}
    res = load_results(tmp_path / "o")
    assert res.document["config"]["measure_key"] == "kmin_random_n2"
    assert len(res.samples) == 11 and res.samples["distractors"].map(len).min() >= 1
    assert (res.samples["model"] == "tinygpt").all()
