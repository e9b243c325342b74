"""FACTOR generated from the graph as the paper builds it (§3.2): prefixes from the subject's
other facts, contradictions of the five error types from a generator model next to the typed
graph swaps, the NLI and fluency filters, diversity selection, the CSV; end to end on the probe
world with real small models (tiny random GPT-2 and NLI classifier built here, SmolLM2-135M
as a generator)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from probe_world import REF, load
from tiny_models import TinyModel

from kgprobe.app.factor_pipeline import (
    GRAPH_ONLY,
    Candidate,
    PipelineSettings,
    run_factor_pipeline,
    select_diverse,
)
from kgprobe.app.factor_prompts import (
    ERROR_TYPES,
    generation_prompt,
    near_context,
    parse_contradictions,
    relevant_error_types,
)
from kgprobe.errors import ConfigError, InputError
from kgprobe.probing.measures.factor import FactorItem, read_factor_csv, write_factor_csv

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def gpt2_dir(tiny_model: TinyModel) -> Path:
    return tiny_model("gpt2", positions=4096)


@pytest.fixture(scope="module")
def nli_dir(tiny_model: TinyModel) -> Path:
    return tiny_model("nli")


# --- pure parts -----------------------------------------------------------------------------

@pytest.mark.parametrize(("sentence", "types"), [
    ("The capital of France is Paris.", ["predicate", "entity"]),
    ("After completing his term, he became Chief Justice of Nauru in 1985.",
     ["predicate", "entity", "circumstance", "coreference", "link"]),
    ("Marie Curie was born in Warsaw.", ["predicate", "entity", "circumstance"]),
    ("The treaty was signed on 4 March.", ["predicate", "entity", "circumstance"]),
    ("She sang because it rained.", ["predicate", "entity", "coreference", "link"]),
    ("", []),
])
def test_relevant_error_types(sentence: str, types: list[str]) -> None:
    assert relevant_error_types(sentence) == types
    assert relevant_error_types(sentence, ("link",)) == [t for t in types if t == "link"]


def test_parse_contradictions() -> None:
    c = "The capital of France is Paris."
    gen = (' "Paris" to "Lyon".\nContradiction: The capital of France is Lyon.\n'
           '2. Change: "capital" to "largest port".\ncontradiction:  "The largest port of France is Paris."\n'
           "3. Change: nothing.\nContradiction: the capital of  France is Paris\n"  # c⁺ again
           "4. Change: x.\nContradiction: The capital of France is Lyon.\n"  # a repeat
           "5. Change: x.\nContradiction: NA\n"
           '6. Change: "Paris" to "Marseille".\n'  # planned, not written: kgprobe applies it
           '7. Change: "Paris" to "Paris".\n8. Change: "Rome" to "Lyon".\n'  # no edit of c⁺
           '9. Change: "the capital" to "the largest city"\n'  # any case; capitalized at the start
           "##\nContradiction: After the next example.\n")
    assert parse_contradictions(gen, c, limit=9) == [
        "The capital of France is Lyon.", "The largest port of France is Paris.",
        "The capital of France is Marseille.", "The largest city of France is Paris."]
    assert parse_contradictions(gen, c, limit=1) == ["The capital of France is Lyon."]
    assert parse_contradictions("Contradiction: " + "x" * 200, c) == []  # runaway line
    assert parse_contradictions("random tokens without the format", c) == []


def test_prompts_follow_the_papers_layout() -> None:
    ctx, comp = "The head of state of France is Emmanuel Macron.", "The capital of France is Paris."
    for t in ERROR_TYPES:
        p = generation_prompt(t, ctx, comp)
        assert p.endswith(f"Completion: {comp}\n1. Change:") or t == "link"
        assert p.count("##") == 2 and "Contradiction:" in p
    link = generation_prompt("link", ctx, comp)
    assert link.endswith(f"Sentence: {comp}\n1. Change:") and ctx not in link  # no context
    assert "Context: (none)" in generation_prompt("entity", "", comp)
    with pytest.raises(ValueError):
        generation_prompt("tense", ctx, comp)


def test_near_context_is_the_last_sentence() -> None:
    assert near_context("A is B. C is D! E is F. ") == "E is F."
    assert near_context("") == ""


def test_diversity_takes_one_of_each_type_first() -> None:
    e1, e2, e3 = (Candidate(f"e{i}", "entity", "graph:random") for i in (1, 2, 3))
    p1 = Candidate("p1", "predicate", "generator:g")
    bad = Candidate("c1", "circumstance", "generator:g", nli=0.1, nli_passed=False)
    cands = [e1, e2, e3, bad, p1]
    for seed in range(5):
        rng = random.Random(seed)
        # two types pass: one of each first, then the next entity; the refused one never
        assert set(select_diverse(cands, 2, rng)) == {e1, p1}
        assert set(select_diverse(cands, 3, rng)) == {e1, p1, e2}
        assert select_diverse(cands, 9, rng)[2:] == [e2, e3]
    assert select_diverse([bad], 3, random.Random(0)) == []


def test_csv_round_trip(tmp_path: Path) -> None:
    items = [FactorItem("Prefix one. ", ("True one.", "False a.", "False b."), "k1", "k1"),
             FactorItem("", ("True, with \"quotes\"\nand a newline.", "F1.", "F2."), "k2", "k2")]
    extra = [{"error_type_0": "entity", "nli_contradiction_0": 0.75}, {"error_type_0": "predicate"}]
    p = write_factor_csv(tmp_path / "out.csv", items, extra)
    assert read_factor_csv(p) == items
    assert read_factor_csv(p, "full_prefix") == items
    header = p.read_text().splitlines()[0].split(",")
    assert header == ["", "turncated_prefixes", "full_prefix", "completion", "contradiction_0",
                      "contradiction_1", "doc_id", "error_type_0", "nli_contradiction_0"]
    with pytest.raises(InputError):
        write_factor_csv(tmp_path / "bad.csv", items, [{"contradiction_9": "x"}, {}])
    with pytest.raises(InputError):
        write_factor_csv(tmp_path / "bad.csv", [items[0], FactorItem("", ("a", "b"), "k3")])


def test_settings_are_checked() -> None:
    with pytest.raises(ConfigError):
        PipelineSettings(error_types=("entity", "tense"))
    with pytest.raises(ConfigError):
        PipelineSettings(n=0)


# --- models ---------------------------------------------------------------------------------

def test_nli_probabilities_match_the_transformers_pipeline(nli_dir: Path) -> None:
    from transformers import pipeline

    from kgprobe.probing.nli import NliModel, contradiction_index

    nli = NliModel.load(str(nli_dir))
    pairs = [("The capital of France is Paris.", "The capital of France is Lyon."),
             ("Berlin is the capital of Germany.", "Berlin is a city in Germany and the world is large.")]
    got = nli.contradiction_probs(pairs, batch_size=1)
    clf = pipeline("text-classification", model=str(nli_dir), top_k=None, device="cpu")
    for (p, h), g in zip(pairs, got, strict=True):
        [scores] = clf([{"text": p, "text_pair": h}])
        want = next(s["score"] for s in scores if s["label"] == "CONTRADICTION")
        assert g == pytest.approx(want, abs=1e-6)
    assert nli.contradiction_probs(pairs, batch_size=2) == pytest.approx(got, abs=1e-6)
    assert contradiction_index({0: "entailment", 1: "neutral", 2: "contradiction"}) == 2
    with pytest.raises(ConfigError):
        contradiction_index({0: "LABEL_0", 1: "LABEL_1"})
    with pytest.raises(ConfigError):
        NliModel.load(str(nli_dir / "tokenizer.json"))


# --- the graph ------------------------------------------------------------------------------

def test_subject_facts_are_the_valid_ones(graph: Any) -> None:
    import distractor_world as w

    from kgprobe.graph.distractors import date_sort_key
    from kgprobe.graph.factor_prefix import subject_facts

    load(graph)
    got = subject_facts(graph, [w.USA, w.FRANCE, w.ADAMS], date_sort_key(REF))
    # USA at REF: Biden (the current head of state: past ones ended, Trump's second term has
    # not started, Adams' claim is deprecated), Washington, and two P999 objects
    assert [(r["pid"], r["o"]) for r in got[w.USA]] == [
        ("P35", w.BIDEN), ("P36", w.WASHINGTON), ("P999", w.UNTYPED), ("P999", w.LONELY)]
    assert [(r["pid"], r["o"]) for r in got[w.FRANCE]] == [("P36", w.PARIS)]
    assert got[w.ADAMS] == []  # its one object (Q145) has no label
    with pytest.raises(ConfigError):
        subject_facts(graph, ["Q1' OR 1=1"], 0)


# --- end to end -----------------------------------------------------------------------------

def _direct_mean_logprob(lm: Any, prefix: str, completion: str) -> float:
    """Mean per-token log-prob of the completion after the prefix, straight from the model's
    logits (the official script's way: tokens of prefix + completion, the last |c| scored)."""
    tok = lm.tokenizer
    ctx, cont = prefix.rstrip(" "), (" " if prefix.endswith(" ") else "") + completion
    ctx_ids = tok(ctx)["input_ids"] if ctx else [0]  # GPT-2: an empty prefix conditions on BOS
    cont_ids = tok(cont)["input_ids"]
    ids = torch.tensor([ctx_ids + cont_ids])
    with torch.no_grad():
        logp = torch.log_softmax(lm.model(ids).logits[0].double(), -1)
    n = len(cont_ids)
    lps = [logp[len(ctx_ids) - 1 + i, cont_ids[i]].item() for i in range(n)]
    return sum(lps) / n


def test_pipeline_end_to_end_with_tiny_models(graph: Any, gpt2_dir: Path, nli_dir: Path,
                                              tmp_path: Path) -> None:
    """Tiny random GPT-2 as generator, fluency model and scored model, tiny random NLI: the
    filters keep exactly the candidates over their thresholds (set between the candidates'
    own scores so that both sides are populated), the CSV reads back, scores are the models'."""
    from transformers import pipeline

    from kgprobe.probing.models import load_model

    load(graph)
    common: dict[str, Any] = {"relations": ("P36",), "sample": None, "at": REF, "graph": graph,
                              "generator": str(gpt2_dir), "nli_model": str(nli_dir),
                              "fluency_model": str(gpt2_dir), "progress": False}
    loose = run_factor_pipeline(str(gpt2_dir), settings=PipelineSettings(
        n=1, tau_nli=0.0, tau_nli_coreference=0.0, tau_lm=1e9), **common)
    every = [c for cs in loose["candidates"].values() for c in cs]
    assert every and all(c["passed"] for c in every)
    nlis = sorted(c["nli"] for c in every)
    flu = sorted(c["fluency"] for c in every)
    tau_nli = (nlis[0] + nlis[1]) / 2 if nlis[0] < nlis[1] else nlis[0] - 1e-9
    tau_lm = -flu[len(flu) // 2]  # refuses the candidates at or below the median delta
    out = tmp_path / "items.csv"
    res = run_factor_pipeline(str(gpt2_dir), settings=PipelineSettings(
        n=1, tau_nli=tau_nli, tau_nli_coreference=tau_nli, tau_lm=tau_lm), out_csv=out, **common)
    again = [c for cs in res["candidates"].values() for c in cs]
    assert [c["text"] for c in again] == [c["text"] for c in every]  # same seed, same candidates
    for c in again:
        assert c["passed"] == (c["nli"] > tau_nli and c["fluency"] > -tau_lm)
    assert any(c["passed"] for c in again) and not all(c["passed"] for c in again)
    assert res["items"] + res["skipped"] == 3 and res["steps"]["generator"] == str(gpt2_dir)
    assert res["mode"] == "pipeline" and "NLI filter" in res["steps_line"]

    items = read_factor_csv(out)
    assert [it.item_id for it in items] == [r["id"] for r in res["per_item"]]
    rows = {it.item_id: it for it in items}
    usa = rows.get("Q30$P36")
    if usa is not None:  # the prefix: the other relations' facts of the subject
        assert usa.prefix.startswith("The head of state of United States of America is Joe Biden. ")
    import csv as _csv

    with out.open(newline="") as fh:
        extra = list(_csv.DictReader(fh))
    lm = load_model(str(gpt2_dir), device="cpu")
    clf = pipeline("text-classification", model=str(nli_dir), top_k=None, device="cpu")
    for row, it in zip(extra, items, strict=True):
        assert row["error_type_0"] in ERROR_TYPES and row["source_0"].startswith(("graph:", "generator:"))
        near = near_context(it.prefix)
        lead = near + " " if near else ""
        [scores] = clf([{"text": lead + it.completions[0], "text_pair": lead + it.completions[1]}])
        want = next(s["score"] for s in scores if s["label"] == "CONTRADICTION")
        assert float(row["nli_contradiction_0"]) == pytest.approx(want, abs=1e-5)
        delta = (_direct_mean_logprob(lm, it.prefix, it.completions[1])
                 - _direct_mean_logprob(lm, it.prefix, it.completions[0]))
        assert float(row["fluency_delta_0"]) == pytest.approx(delta, abs=1e-4)
        assert float(row["nli_contradiction_0"]) > tau_nli and float(row["fluency_delta_0"]) > -tau_lm


def test_pipeline_with_smollm2_as_generator(graph: Any, gpt2_dir: Path, nli_dir: Path) -> None:
    """SmolLM2-135M writes contradictions (prompted for entity and predicate errors, the types
    that suit template sentences) next to the graph's entity swaps; where two types pass,
    diversity selection takes one of each first. (A 135M base model rarely writes a sensible
    contradiction: this checks the plumbing, not the generator's quality.)"""
    load(graph)
    res = run_factor_pipeline(
        str(gpt2_dir), relations=("P36",), sample=None, at=REF, graph=graph,
        generator="smollm2-135m", nli_model=str(nli_dir), fluency_model=str(gpt2_dir),
        progress=False, settings=PipelineSettings(n=2, tau_nli=0.0, tau_nli_coreference=0.0,
                                                  tau_lm=1e9, generator_tokens=48))
    cands = [c for cs in res["candidates"].values() for c in cs]
    gen = [c for c in cands if c["source"] == "generator:smollm2-135m"]
    # template sentences hold no pronoun, link word, time or place: entity and predicate only
    assert gen and {c["error_type"] for c in gen} <= {"entity", "predicate"}
    assert res["error_types"]["entity"]["candidates"] >= 1
    for item in res["per_item"]:
        types = {c["error_type"] for c in res["candidates"][item["id"]] if c["passed"]}
        assert len(set(item["error_types"])) == min(len(types), 2)  # one of each type first


def test_cli_says_which_steps_ran(graph: Any, gpt2_dir: Path, nli_dir: Path,
                                  kgprobe_env: dict[str, str], tmp_path: Path) -> None:
    load(graph)
    exe = str(Path(sys.executable).parent / "kgprobe")
    base = [exe, "factor", "--from-graph", "-r", "P36", "-m", str(gpt2_dir), "-n", "1",
            "--sample", "0", "--at", REF]
    only = subprocess.run(base, capture_output=True, text=True, env=kgprobe_env, timeout=300)
    assert only.returncode == 0, only.stderr
    assert GRAPH_ONLY in only.stdout and "Not comparable with Wiki-" in only.stdout
    out = tmp_path / "cli.csv"
    strict = subprocess.run(base + ["--nli", str(nli_dir)], capture_output=True, text=True,
                            env=kgprobe_env, timeout=300)
    # the paper's τ_NLI = 0.6 refuses every swap of the tiny random classifier (p ≈ 0.27)
    assert strict.returncode == 4 and "passed the filters" in strict.stderr
    full = subprocess.run(base + ["--nli", str(nli_dir), "--tau-nli", "0", "--tau-lm", "1000",
                                  "--fluency-model", str(gpt2_dir), "--out", str(out), "--json"],
                          capture_output=True, text=True, env=kgprobe_env, timeout=300)
    assert full.returncode == 0, full.stderr
    doc = json.loads(full.stdout)
    assert doc["steps"]["nli"] and doc["steps"]["fluency"] == str(gpt2_dir)
    assert doc["steps"]["generator"] is None and doc["comparable_with_published_factor"] is False
    assert len(read_factor_csv(out)) == doc["items"]
    for extra in (["--nli", str(tmp_path / "none")], ["--tau-nli", "1.5"]):
        bad = subprocess.run(base + extra, capture_output=True, text=True, env=kgprobe_env,
                             timeout=300)
        assert bad.returncode != 0 and "Traceback" not in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1


def test_drafts_from_the_graph(graph: Any) -> None:
    """Prefix = the subject's other relations' facts (no template stored in this world: each
    relation's fallback "[X] <label> [Y]."), c⁺ = the fact, entity swaps = typed distractors;
    the graph-only mode keeps the first n of them."""
    import distractor_world as w

    from kgprobe.app.factor_pipeline import drafts_from_graph, finish
    from kgprobe.graph.distractors import date_sort_key

    w.load(graph)
    rows = [{"key": "k-biden", "pid": "P35", "s": w.USA, "s_label": "United States of America",
             "o": w.BIDEN, "o_label": "Joe Biden"},
            {"key": "k-paris", "pid": "P36", "s": w.FRANCE, "s_label": "France", "o": w.PARIS,
             "o_label": "Paris"}]
    st = PipelineSettings(n=2, seed=1)
    drafts, skipped = drafts_from_graph(graph, rows, st, date_sort_key(REF))
    assert not skipped
    biden, paris = drafts
    assert biden.prefix == ("United States of America capital Washington, D.C.. "
                            "United States of America mystery relation Untyped thing. "
                            "United States of America mystery relation Only member. ")
    assert biden.prefix_facts == 3 and paris.prefix == "" and paris.prefix_facts == 0
    assert biden.completion == "United States of America head of state Joe Biden."
    # typed swaps: other humans, never Biden nor a name equal to his; Adams' claim is deprecated
    assert all(c.error_type == "entity" and c.source == "graph:random" for c in biden.candidates)
    assert len(biden.candidates) == 4 and all("Joe Biden" not in c.text for c in biden.candidates)
    assert {c.text for c in paris.candidates} == {"France capital Berlin.",
                                                  "France capital Washington, D.C.."}
    built, dropped = finish(drafts, st)
    assert not dropped and [b.item.completions[1:] for b in built] == [
        tuple(c.text for c in d.candidates[:2]) for d in drafts]
    again, _ = drafts_from_graph(graph, rows, st, date_sort_key(REF))
    assert [d.candidates for d in again] == [d.candidates for d in drafts]  # seeded
    none, _ = drafts_from_graph(graph, rows[:1], PipelineSettings(prefix_facts=1), date_sort_key(REF))
    assert none[0].prefix == "United States of America capital Washington, D.C.. "
