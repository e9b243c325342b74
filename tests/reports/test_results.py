"""Results files: a real probe (tiny real model, real graph server) writes results.json and
per-fact records with the distractors' scores; kgprobe.load_results reads them into pandas; the
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
from distractor_world import BIDEN, OBAMA, TRUMP, USA
from probe_world import REF, load
from tiny_models import TinyModel

from kgprobe.probing.run import ProbeConfig, run_probe
from kgprobe.reports.build import build_report
from kgprobe.reports.results import SCHEMA, FactDetails
from kgprobe.reports.results import load as load_results
from kgprobe.reports.write import write_report

torch.set_num_threads(1)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "results.md"


@pytest.fixture(scope="module")
def model_dir(tiny_model: TinyModel) -> Path:
    return tiny_model("gpt2", name="tinygpt")


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
    assert doc["schema"] == SCHEMA == "kgprobe-results/2" and doc["primary_model"] == "tinygpt"
    assert doc["report_settings"]["measure"] == "Min@2, temp+sem distractors"
    assert doc["report_settings"]["min_n_for_interval"] == 10 and doc["probe_settings"]["n"] == 2
    assert doc["models"][0]["model_fingerprint"] == [engine.fingerprint]
    assert doc["graph_snapshot"]["facts"] > 0 and doc["kgprobe"]["version"]
    # no top-level key borrowed from the harness's results file with another meaning
    assert not {"versions", "config", "results", "model_name", "date", "git_hash"} & set(doc)

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
    # ... and as scored, with the end marker (the question's answer too), the distractors' alike
    assert [c["scored"] for c in usa["clozes"]] == [
        "The head of state of the United States of America is Joe Biden.",
        "Who is the head of state of the United States of America? Joe Biden."]
    assert by_q[OBAMA]["scored"] == [
        "The head of state of the United States of America is Barack Obama.",
        "Who is the head of state of the United States of America? Barack Obama."]

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
    documented = set(re.findall(r"^\| `([a-z_.-]+)`", doc_text, re.M))
    results = json.loads(paths["results"].read_text())
    harness = json.loads(paths["harness"].read_text())
    sample = json.loads(paths["samples"].read_text().splitlines()[0])
    model = results["models"][0]
    group = model["results"]["P27"]
    written = (
        set(results) | {f"{part}.{k}" for part in ("report_settings", "kgprobe", "scope", "timing",
                                                   "popularity") for k in results[part]}
        | {f"models.{k}" for k in model} | {f"environment.{k}" for k in model["environment"]}
        | {f"results.{k}" for k in group} | {f"harness.{k}" for k in harness}
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
    assert res.document["report_settings"]["measure_key"] == "kmin_random_n2"
    assert len(res.samples) == 11 and res.samples["distractors"].map(len).min() >= 1
    assert (res.samples["model"] == "tinygpt").all()


def test_harness_export_means_what_the_harness_means(probed: tuple[Any, dict[str, Path], Any]) -> None:
    """harness.json: one task per relation and a group over all facts, with the harness's metric
    keys (``<metric>,none`` and ``<metric>_stderr,none``) holding what the harness means: the
    mean of the per-fact scores and its standard error (sample sd / sqrt n), recomputed here
    from samples.jsonl with the statistics module."""
    import statistics

    _, paths, _ = probed
    h = json.loads(paths["harness"].read_text())
    samples = [json.loads(line) for line in paths["samples"].read_text().splitlines()]
    by_rel: dict[str, list[float]] = {}
    for r in samples:
        by_rel.setdefault(r["relation"], []).append(r["score"])
    group = "kgprobe_kmin_temp_sem_n2"
    assert {t.rsplit("_", 1)[1] for t in h["group_subtasks"][group]} == set(by_rel) == {"P27", "P35", "P36"}
    for pid, scores in by_rel.items():
        res = h["results"][f"{group}_{pid}"]
        assert res["mean,none"] == pytest.approx(statistics.fmean(scores))
        known = [1.0 if v >= 0.5 else 0.0 for v in scores]
        assert res["known,none"] == pytest.approx(statistics.fmean(known))
        if len(scores) > 1:
            assert res["mean_stderr,none"] == pytest.approx(statistics.stdev(scores) / math.sqrt(len(scores)))
        else:
            assert res["mean_stderr,none"] is None
        assert h["n-samples"][f"{group}_{pid}"] == {"original": len(scores), "effective": len(scores)}
        assert h["higher_is_better"][f"{group}_{pid}"] == {"mean": True, "known": True}
    every = [r["score"] for r in samples]
    assert h["results"][group]["mean,none"] == pytest.approx(statistics.fmean(every))
    assert h["groups"][group] == h["results"][group]
    assert h["versions"][group] == 2  # the measure's version, not a library's
    assert h["config"]["model_args"].startswith("pretrained=tinygpt,dtype=float32")
    assert h["model_name"] == "tinygpt" and isinstance(h["date"], float)
    assert float(h["total_evaluation_time_seconds"]) >= 0


def test_every_setting_that_moves_a_number_is_recorded(probed: tuple[Any, dict[str, Path], Any],
                                                       engine: Any, graph: Any) -> None:
    """The run's environment, on the ProbeRun node and in results.json: the interpreter and
    platform as Python reports them, torch's threads, the engine's row budget, batch size."""
    import platform

    from kgprobe.graph import probe_runs as pr

    rep, paths, _ = probed
    model = json.loads(paths["results"].read_text())["models"][0]
    run = pr.get_run(graph, rep.primary.runs[-1])
    assert run is not None
    env = json.loads(run["environment"])
    assert env == model["environment"]
    assert env["python"] == platform.python_version() and env["platform"] == platform.platform()
    assert env["torch_threads"] == torch.get_num_threads() == model["threads"]
    assert env["batch_tokens"] == engine.causal.batch_tokens == model["batch_tokens"]
    assert env["device"] == "cpu" and env["accelerator"] is None
    assert run["batch_facts"] == 4 == model["batch_facts"]
    assert model["library_versions"]["torch"] in (torch.__version__, torch.__version__.split("+")[0])
    assert model["seconds"] >= 0 and model["wall_seconds"] is not None and model["wall_seconds"] >= 0


def test_output_path_holds_this_runs_facts_only(graph: Any, model_dir: Path, tmp_path: Path) -> None:
    """Scores of an earlier run (P27) stay out of a later run's --output-path (P36 only); a
    rerun that skips every fact as already scored still reports its sample."""
    from kgprobe.api import probe

    load(graph)
    kw = {"graph": graph, "strategy": "random", "n": 2, "sample": None, "at": REF, "cache": False,
          "progress": False}
    first = probe(str(model_dir), relations=("P27",), **kw)
    assert first.scored == 7
    out = tmp_path / "p36"
    second = probe(str(model_dir), relations=("P36",), output_path=out, **kw)
    assert second.scored == 3
    res = load_results(out)
    assert set(res.samples["relation"]) == {"P36"} and len(res.samples) == 3
    assert res.document["scope"] == {"facts": "run", "runs": [second.run_id]}
    assert res.document["models"][0]["overall"]["n"] == 3
    again = probe(str(model_dir), relations=("P36",), output_path=out, **kw)
    assert again.scored == 0 and again.skipped == 3
    res = load_results(out)
    assert len(res.samples) == 3 and res.document["scope"]["runs"] == [second.run_id]


def test_the_documented_pandas_example_means_one_measure(graph: Any, engine: Any, tmp_path: Path) -> None:
    """Issue 40 item 7: docs/results.md's pandas example, run as written on a report of one
    model under two measure keys (what the demo writes: careful and raw), gives the primary
    key's per-relation means — read here straight off the FACT edges — not the two pooled."""
    from kgprobe.graph import probe_runs as pr
    from kgprobe.probing.config import measure_key

    load(graph)
    cfg = ProbeConfig(model="tinygpt", sample=None, n=2, at=REF, strategy="random", measures=("kmin", "kavg"))
    run_probe(graph, engine, cfg, fingerprint=engine.fingerprint, progress=False)
    kmin, kavg = (measure_key(m, "random", 2) for m in ("kmin", "kavg"))
    rep = build_report(graph, "tinygpt", measure=kmin, vs_measure=kavg, seed=0)
    write_report(rep, tmp_path / "out")
    score = pr.ScoreProps("tinygpt", kmin).score
    want = {r["pid"]: r["mean"] for r in graph.read(
        f"MATCH ()-[f:FACT]->() WHERE f.`{score}` IS NOT NULL RETURN f.pid AS pid, avg(f.`{score}`) AS mean")}
    text = DOCS.read_text(encoding="utf-8").split("Read them back into pandas", 1)[1]
    code = text.split("```python\n", 1)[1].split("```", 1)[0].replace('"report/"', repr(str(tmp_path / "out")))
    *body, last = [line.split("  #")[0] for line in code.splitlines() if line.strip()]
    scope: dict[str, Any] = {}
    exec("\n".join(body), scope)  # noqa: S102 - the documentation's own example
    got = eval(last, scope)  # noqa: S307
    assert len(want) >= 2 and got.to_dict() == pytest.approx(want)
    pooled = scope["res"].samples.groupby("relation")["score"].mean().to_dict()
    assert pooled != pytest.approx(want)  # the old example's answer: both keys averaged
