"""Entropy, KL, the top-k approximation with an oov bucket (hand-computed), and explicit /
implicit instillation on a tiny random GPT-2."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tiny_models import TinyModel

from kgprobe.errors import ConfigError
from kgprobe.probing.engine import Engine
from kgprobe.probing.instill import finetune_copy
from kgprobe.probing.measures.information import (
    entropy,
    explicit_instillation,
    explicit_instillation_topk,
    implicit_instillation,
    instilled_prompt,
    kl,
    probs_from_logprobs,
    prompt_entropy,
    topk_approximation,
)
from kgprobe.probing.models import LoadedModel, load_model
from kgprobe.probing.requests import NextTokenRequest, NextTokenResult

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def gpt2(tiny_model: TinyModel) -> LoadedModel:
    return load_model(str(tiny_model("gpt2")), device="cpu")


def test_entropy_and_kl_by_hand() -> None:
    p = np.array([0.5, 0.25, 0.25])
    assert entropy(p) == pytest.approx(1.5 * math.log(2))
    assert entropy(p, base=2) == pytest.approx(1.5)
    assert entropy(np.array([1.0, 0.0])) == 0.0
    q = np.array([0.25, 0.5, 0.25])
    assert kl(p, q) == pytest.approx(0.5 * math.log(2) + 0.25 * math.log(0.5))
    assert kl(p, p) == 0.0
    assert kl(np.array([0.5, 0.5]), np.array([1.0, 0.0])) == math.inf
    with pytest.raises(ConfigError):
        kl(p, np.array([1.0]))


def test_topk_approximation_by_hand() -> None:
    vocab, p, q = topk_approximation({"a": 0.5, "b": 0.3}, {"a": 0.6, "c": 0.2})
    assert vocab == ["a", "b", "c", "<oov>"]
    # before: c and oov share 0.2; after: b and oov share 0.2
    assert p.tolist() == pytest.approx([0.5, 0.3, 0.1, 0.1])
    assert q.tolist() == pytest.approx([0.6, 0.1, 0.2, 0.1])
    expected = 0.5 * math.log(0.5 / 0.6) + 0.3 * math.log(0.3 / 0.1) + 0.1 * math.log(0.1 / 0.2)
    assert kl(p, q) == pytest.approx(expected)
    with pytest.raises(ConfigError):
        topk_approximation({"a": 0.9, "b": 0.3}, {})


def test_explicit_instillation_matches_direct(gpt2: LoadedModel) -> None:
    engine = Engine(gpt2)
    prompt, fact = "The capital of France is", "The capital of France is Paris."
    assert instilled_prompt(fact, prompt) == "The capital of France is Paris. The capital of France is"
    [s] = explicit_instillation(engine, [prompt], [fact])
    b, a = engine.run([NextTokenRequest(prompt, None),
                       NextTokenRequest(instilled_prompt(fact, prompt), None)])
    assert isinstance(b, NextTokenResult) and isinstance(a, NextTokenResult)
    assert b.full_logprobs is not None and a.full_logprobs is not None
    pb, pa = probs_from_logprobs(b.full_logprobs), probs_from_logprobs(a.full_logprobs)
    assert s.entropy_before == pytest.approx(b.entropy, rel=1e-4)
    assert s.entropy_after == pytest.approx(entropy(pa), rel=1e-4)
    assert s.kl == pytest.approx(float((pb * np.log(pb / pa)).sum()), rel=1e-4, abs=1e-9)
    assert s.kl > 0
    assert s.entropy_difference == pytest.approx(s.entropy_before - s.entropy_after)
    assert prompt_entropy(engine, [prompt]) == pytest.approx([s.entropy_before])
    # top-k: entropy over V' (at most 2k + 1 entries) cannot exceed log |V'|
    [t] = explicit_instillation_topk(engine, [prompt], [fact], k=5)
    assert 0 <= t.entropy_before <= math.log(11) + 1e-9 and t.kl >= 0


def test_implicit_instillation_on_a_copy(gpt2: LoadedModel) -> None:
    prompt, fact = "The capital of France is", "The capital of France is Paris."
    before = Engine(gpt2)
    [d0] = before.run([NextTokenRequest(prompt, None)])
    tuned = finetune_copy(gpt2, [fact], steps=3, lr=1e-2, seed=0)
    assert tuned.fingerprint != gpt2.fingerprint
    [s] = implicit_instillation(before, Engine(tuned), [prompt])
    assert s.kl > 0
    # the original model is untouched by fine-tuning its copy
    [d1] = Engine(gpt2).run([NextTokenRequest(prompt, None)])
    assert isinstance(d0, NextTokenResult) and isinstance(d1, NextTokenResult)
    assert d0.full_logprobs is not None and d1.full_logprobs is not None
    assert np.array_equal(d0.full_logprobs, d1.full_logprobs)
    with pytest.raises(ConfigError):
        finetune_copy(gpt2, [], steps=1)
