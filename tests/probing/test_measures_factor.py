"""FACTOR on rows of the real CSV format (News- and Expert-FACTOR), with a tiny random GPT-2;
joining rules of the official script; items generated from facts; the CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from _kgprobe_process import run_kgprobe
from tiny_models import TinyModel

from kgprobe.errors import InputError
from kgprobe.probing.engine import Engine
from kgprobe.probing.measures.common import Entity, Fact
from kgprobe.probing.measures.factor import (
    FactorItem,
    factor_accuracy,
    factor_items_from_fact,
    factor_pair,
    factor_scores,
    read_factor_csv,
)
from kgprobe.probing.models import LoadedModel, load_model
from kgprobe.probing.requests import LogProbRequest, LogProbResult

torch.set_num_threads(1)
FIX = Path(__file__).parents[1] / "fixtures" / "factor"


@pytest.fixture(scope="module")
def gpt2_dir(tiny_model: TinyModel) -> Path:
    return tiny_model("gpt2", positions=4096)


@pytest.fixture(scope="module")
def gpt2(gpt2_dir: Path) -> LoadedModel:
    return load_model(str(gpt2_dir), device="cpu")


def test_read_real_csvs() -> None:
    news = read_factor_csv(FIX / "news_factor_sample.csv")
    expert = read_factor_csv(FIX / "expert_factor_sample.csv")
    assert len(news) == 3 and len(expert) == 3
    assert all(len(i.completions) == 4 for i in news + expert)
    assert news[0].completions[0].startswith("Whether or not it gets a second season")
    assert news[1].prefix.endswith("\n")  # multi-line quoted field kept whole
    full = read_factor_csv(FIX / "news_factor_sample.csv", prefix_column="full_prefix")
    assert len(full[0].prefix) >= len(news[0].prefix)
    with pytest.raises(InputError):
        read_factor_csv(FIX / "missing.csv")


def test_official_joining() -> None:
    assert factor_pair("Prefix ends. ", " Completion.") == ("Prefix ends.", " Completion.")
    assert factor_pair("Prefix line\n", "Completion.") == ("Prefix line\n", "Completion.")


def test_accuracy_matches_direct_mean_logprobs(gpt2: LoadedModel) -> None:
    engine = Engine(gpt2, batch_size=4)
    items = read_factor_csv(FIX / "news_factor_sample.csv") + read_factor_csv(
        FIX / "expert_factor_sample.csv")
    outcomes = factor_scores(engine, items)
    correct = 0
    for it, out in zip(items, outcomes, strict=True):
        means = []
        for c in it.completions:
            ctx, cont = factor_pair(it.prefix, c)
            if ctx.endswith("\n"):
                # the newline is context, not completion: score the completion after it by
                # joining the newline to the context's last word (same tokens, same position)
                [whole] = engine.run([LogProbRequest(ctx, cont)])
                assert isinstance(whole, LogProbResult)
                lps = list(whole.token_logprobs)
                toks = list(whole.tokens)
                assert not toks[0].strip()  # the moved newline token
                while toks and not toks[0].strip():
                    toks.pop(0)
                    lps.pop(0)
                means.append(sum(lps) / len(lps))
            else:
                [r] = engine.run([LogProbRequest(ctx, cont)])
                assert isinstance(r, LogProbResult)
                means.append(r.logprob / r.num_tokens)
        # fp32 scores move by ~1e-6 relative with the batch they are packed in
        assert list(out.scores) == pytest.approx(means, rel=1e-4)
        ok = out.scores[0] >= max(out.scores[1:])
        assert out.correct == ok
        correct += ok
    assert factor_accuracy(outcomes) == pytest.approx(correct / len(items))


def test_items_from_facts() -> None:
    fact = Fact(Entity("France"), "P36", Entity("Paris"))
    item = factor_items_from_fact(fact, "The capital of [X] is [Y].",
                                  [Entity("Lyon"), "Marseille", "Nice", "Lille"])
    assert item.completions == ("The capital of France is Paris.", "The capital of France is Lyon.",
                                "The capital of France is Marseille.", "The capital of France is Nice.")
    with pytest.raises(InputError):
        factor_items_from_fact(fact, "The capital of [X] is [Y].", [])
    with pytest.raises(InputError):
        FactorItem("p", ("only one",))


def test_generated_items_score_on_tiny_model(gpt2: LoadedModel) -> None:
    fact = Fact(Entity("France"), "P36", Entity("Paris"))
    item = factor_items_from_fact(fact, "The capital of [X] is [Y].", ["London", "Rome"])
    [out] = factor_scores(Engine(gpt2), [item])
    assert len(out.scores) == 3 and out.correct == (out.scores[0] >= max(out.scores[1:]))


def test_cli_json(gpt2_dir: Path) -> None:
    proc = run_kgprobe(["factor", str(FIX / "expert_factor_sample.csv"), "--model", str(gpt2_dir), "--json"],
                       os.environ, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["items"] == 3 and 0.0 <= data["accuracy"] <= 1.0
    assert data["correct"] == sum(r["correct"] for r in data["per_item"])
    bad = run_kgprobe(["factor", str(FIX / "nope.csv"), "--model", str(gpt2_dir)], os.environ, timeout=300)
    assert bad.returncode != 0 and "does not exist" in bad.stderr and "Traceback" not in bad.stderr


def test_cli_max_length_truncates_the_prefix_from_the_left(gpt2_dir: Path) -> None:
    """``kgprobe factor --max-length 1024`` (the paper's cap): the official script tokenizes
    prefix + completion with ``truncation_side='left'`` and ``model_max_length=1024`` and
    scores the completion's tokens after what is left. Two News-FACTOR prefixes are longer
    than 1024 tokens, the third is not. Expected scores come from the tokenizer and the model
    called directly (no kgprobe code): the last 1024 ids of the joined text, mean log-prob of
    the completion's ids."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cap = 1024
    proc = run_kgprobe(["factor", str(FIX / "news_factor_sample.csv"), "--model", str(gpt2_dir),
                        "--max-length", str(cap), "--json"], os.environ, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["max_length"] == cap and data["items"] == 3

    tok = AutoTokenizer.from_pretrained(gpt2_dir, truncation_side="left", model_max_length=cap)
    model = AutoModelForCausalLM.from_pretrained(gpt2_dir).eval()
    items = read_factor_csv(FIX / "news_factor_sample.csv")
    truncated = []
    for it, got in zip(items, data["per_item"], strict=True):
        expected, untruncated = [], []
        for c in it.completions:
            # the official joining: a prefix's final space moves to the completion
            c = c.lstrip(" ")
            text, label = ((it.prefix[:-1] + " " + c, " " + c) if it.prefix.endswith(" ")
                           else (it.prefix + c, c))
            whole = tok(text, add_special_tokens=False, truncation=False)["input_ids"]
            kept = tok(text, add_special_tokens=False, truncation=True)["input_ids"]
            target = tok(label, add_special_tokens=False)["input_ids"]
            assert kept == whole[-cap:] and kept[-len(target):] == target
            untruncated.append(len(whole) > cap)
            with torch.no_grad():
                logp = torch.log_softmax(model(torch.tensor([kept])).logits[0].double(), -1)
            start = len(kept) - len(target)
            expected.append(sum(float(logp[i - 1, kept[i]]) for i in range(start, len(kept)))
                            / len(target))
        assert len(set(untruncated)) == 1  # the four completions of an item: all cut or none
        truncated.append(untruncated[0])
        assert got["scores"] == pytest.approx(expected, rel=1e-4, abs=1e-5)
        assert got["correct"] == (got["scores"][0] >= max(got["scores"][1:]))
    assert truncated == [True, True, False]


def test_moved_spaces_are_not_part_of_the_completion(gpt2_dir: Path, gpt2: LoadedModel) -> None:
    """A prefix ending in two or more spaces: the joining takes one, the engine moves the rest
    in front of every completion, and the official script (which scores exactly the tokens of
    " c", counted by tokenizing it alone) does not score them. Expected values: the tokenizer
    and the model called directly, the official algorithm (issue 21, item 4)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gpt2_dir)
    model = AutoModelForCausalLM.from_pretrained(gpt2_dir).eval()
    comps = ("Paris is the capital.", "Lyon is the capital.", " Nice is the capital.")
    for prefix in ("Question: what is it? Answer:  ", "Answer: it is.   ", "Line one.\n",
                   "Line one.\n ", "Answer:"):
        [out] = factor_scores(Engine(gpt2), [FactorItem(prefix, comps)])
        expected = []
        for c in comps:
            c = c.lstrip(" ")
            text, label = ((prefix[:-1] + " " + c, " " + c) if prefix.endswith(" ")
                           else (prefix + c, c))
            ids = tok(text, add_special_tokens=False)["input_ids"]
            target = tok(label, add_special_tokens=False)["input_ids"]
            assert ids[-len(target):] == target
            with torch.no_grad():
                logp = torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), -1)
            start = len(ids) - len(target)
            expected.append(sum(float(logp[i - 1, ids[i]]) for i in range(start, len(ids)))
                            / len(target))
        assert list(out.scores) == pytest.approx(expected, rel=1e-4, abs=1e-5), prefix


def test_factor_accuracy_has_an_interval() -> None:
    """An accuracy gets the report's 95% bootstrap interval where n >= 10: 30 of 40 correct lies
    within a few points of the normal interval p ± 1.96·sqrt(p(1−p)/n) = 0.75 ± 0.134; fewer
    than 10 items get none."""
    from kgprobe.probing.measures.factor import accuracy_interval

    lo, hi = accuracy_interval([True] * 30 + [False] * 10)
    half = 1.96 * (0.75 * 0.25 / 40) ** 0.5
    assert lo == pytest.approx(0.75 - half, abs=0.03) and hi == pytest.approx(0.75 + half, abs=0.03)
    assert accuracy_interval([True] * 5 + [False] * 4) == (None, None)


def test_cli_text_says_when_n_is_too_small(gpt2_dir: Path) -> None:
    proc = run_kgprobe(["factor", str(FIX / "expert_factor_sample.csv"), "--model", str(gpt2_dir)],
                       os.environ, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "(n too small for an interval) (" in proc.stdout and "95% percentile bootstrap" in proc.stdout
