"""Engine invariances on tiny random GPT-2 / Llama / BERT / T5 models (DESIGN §3)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import TinyModel

from kgprobe.errors import ConfigError
from kgprobe.probing.backends import TrieNode
from kgprobe.probing.cache import ScoreCache
from kgprobe.probing.engine import Engine
from kgprobe.probing.models import LoadedModel, load_model
from kgprobe.probing.requests import (
    BeamSearchRequest,
    BeamSearchResult,
    GenerateRequest,
    LogProbRequest,
    LogProbResult,
    NextTokenRequest,
    NextTokenResult,
    SpanScoreRequest,
    SpanScoreResult,
    kl_divergence,
)

torch.set_num_threads(1)

CONTEXTS = ["The capital of France is", "Answer:", "Berlin is the capital of", "hello world, the"]
CANDIDATES = [" Paris", " London", " Lyon", " Rome.", " the city is old", " Germany and Spain",
              " Madrid", " a large city in France", ","]


def _requests() -> list[LogProbRequest]:
    reqs = [LogProbRequest(c, x) for c in CONTEXTS for x in CANDIDATES]
    reqs.append(LogProbRequest("", "The capital of France is Paris."))
    reqs.append(LogProbRequest("Lyon is a city in", " France", add_eos=True))
    return reqs


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def causal(request: pytest.FixtureRequest, tiny_model: TinyModel) -> LoadedModel:
    return load_model(str(tiny_model(request.param)), device="cpu")


@pytest.fixture(scope="module")
def bert(tiny_model: TinyModel) -> LoadedModel:
    return load_model(str(tiny_model("bert")), device="cpu")


@pytest.fixture(scope="module")
def t5(tiny_model: TinyModel) -> LoadedModel:
    return load_model(str(tiny_model("t5")), device="cpu")


def _naive(lm: LoadedModel, req: LogProbRequest) -> list[float]:
    """Independent reference: one unpadded forward of context+continuation, no cache."""
    enc = lm.tokenization.causal_pair(req.context, req.continuation, req.add_eos)
    ids = list(enc.context_ids) + list(enc.continuation_ids)
    with torch.no_grad():
        logits = lm.model(torch.tensor([ids])).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    n = len(enc.context_ids)
    return [float(lp[n + j - 1, t]) for j, t in enumerate(enc.continuation_ids)]


def _lp(results: list) -> list[LogProbResult]:
    assert all(isinstance(r, LogProbResult) for r in results)
    return results


def test_shared_prefix_equals_naive_full_sequence(causal: LoadedModel) -> None:
    reqs = _requests()
    results = _lp(Engine(causal, batch_size=4).run(reqs))
    for req, res in zip(reqs, results, strict=True):
        ref = _naive(causal, req)
        assert res.token_logprobs == pytest.approx(ref, abs=1e-5)
        assert res.logprob == pytest.approx(sum(ref), abs=1e-5)
        assert res.mean_logprob == pytest.approx(sum(ref) / len(ref), abs=1e-5)


@pytest.mark.parametrize("batch_size", [1, 3, 64])
@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parametrize("share_prefix", [True, False])
def test_scores_do_not_depend_on_batching_or_padding(
    causal: LoadedModel, batch_size: int, padding_side: str, share_prefix: bool
) -> None:
    reqs = _requests()
    reference = _lp(Engine(causal, batch_size=1, batch_tokens=None, share_prefix=False).run(reqs))
    got = _lp(Engine(causal, batch_size=batch_size, padding_side=padding_side,  # type: ignore[arg-type]
                     share_prefix=share_prefix, batch_tokens=None).run(reqs))
    budget = _lp(Engine(causal, batch_size=batch_size, share_prefix=share_prefix,
                        batch_tokens=7).run(reqs))
    assert max(abs(a.logprob - b.logprob) for a, b in zip(got, budget, strict=True)) <= 1e-5
    diff = max(abs(a.logprob - b.logprob) for a, b in zip(reference, got, strict=True))
    assert diff <= 1e-5
    assert [a.is_greedy for a in reference] == [b.is_greedy for b in got]


def test_single_token_shortcut_equals_general_path(causal: LoadedModel) -> None:
    ctx = "The capital of France is"
    vocab_words = [" Paris", " London", " the", " is", " city"]
    singles = [w for w in vocab_words if len(causal.tokenization.causal_pair(ctx, w).continuation_ids) == 1]
    assert len(singles) >= 2
    reqs = [LogProbRequest(ctx, w) for w in singles]
    engine = Engine(causal)
    fast = _lp(engine.run(reqs))
    assert engine.stats.forward_calls == 1  # every single-token continuation: one forward
    slow = _lp(Engine(causal, share_prefix=False, batch_size=1).run(reqs))
    for a, b in zip(fast, slow, strict=True):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-5)
    # and the next-token distribution holds the same numbers
    dist = Engine(causal).run([NextTokenRequest(ctx, top_k=None)])[0]
    assert isinstance(dist, NextTokenResult) and dist.full_logprobs is not None
    for r, w in zip(fast, singles, strict=True):
        tid = causal.tokenization.causal_pair(ctx, w).continuation_ids[0]
        assert float(dist.full_logprobs[tid]) == pytest.approx(r.logprob, abs=1e-5)


def test_results_come_back_in_order_with_duplicates(causal: LoadedModel) -> None:
    reqs = _requests()
    shuffled = list(reversed(reqs)) + reqs[:5]
    engine = Engine(causal)
    a = _lp(engine.run(reqs))
    b = _lp(engine.run(shuffled))
    by_req = dict(zip(reqs, a, strict=True))
    assert [by_req[r].logprob for r in shuffled] == pytest.approx([x.logprob for x in b], abs=1e-5)


def test_distributions_sum_to_one_and_kl_is_nonnegative(causal: LoadedModel) -> None:
    reqs = [NextTokenRequest(c, top_k=None) for c in CONTEXTS]
    results = Engine(causal).run(reqs + [NextTokenRequest(CONTEXTS[0], top_k=5)])
    full = [r.full_logprobs for r in results[:-1] if isinstance(r, NextTokenResult)]
    for lp in full:
        assert lp is not None
        assert float(np.exp(lp.astype(np.float64)).sum()) == pytest.approx(1.0, abs=1e-5)
    for p in full:
        for q in full:
            assert p is not None and q is not None
            assert kl_divergence(p, q) >= 0.0
    assert kl_divergence(full[0], full[0]) == pytest.approx(0.0, abs=1e-9)  # type: ignore[arg-type]
    top = results[-1]
    assert isinstance(top, NextTokenResult) and len(top.token_ids) == 5
    assert list(top.logprobs) == sorted(top.logprobs, reverse=True)
    first = results[0]
    assert isinstance(first, NextTokenResult) and first.full_logprobs is not None
    assert top.entropy == pytest.approx(first.entropy, abs=1e-6)
    assert 0.0 < top.entropy <= math.log(len(first.full_logprobs)) + 1e-6


def test_constrained_beam_search_stays_in_the_trie(causal: LoadedModel) -> None:
    ctx = "The capital of France is"
    allowed = (" Paris", " Paris is old", " London", " Lyon", " a large city", " Rome.")
    tok = causal.tokenization
    trie = TrieNode.build([tok.causal_pair(ctx, a).continuation_ids for a in allowed])
    res = Engine(causal).run([BeamSearchRequest(ctx, num_beams=3, allowed=allowed)])[0]
    assert isinstance(res, BeamSearchResult) and 1 <= len(res.hypotheses) <= 3
    for h in res.hypotheses:
        assert trie.contains(h.token_ids)
        assert h.text in allowed
    # with a beam as wide as the list the search is exhaustive: it ranks exactly as scoring
    wide = Engine(causal).run([BeamSearchRequest(ctx, num_beams=len(allowed), allowed=allowed)])[0]
    assert isinstance(wide, BeamSearchResult)
    scores = _lp(Engine(causal).run([LogProbRequest(ctx, a) for a in allowed]))
    expected = sorted(zip(allowed, scores, strict=True), key=lambda p: -p[1].logprob)
    assert [h.text for h in wide.hypotheses] == [a for a, _ in expected]
    for h, (_, s) in zip(wide.hypotheses, expected, strict=True):
        assert h.logprob == pytest.approx(s.logprob, abs=1e-5)


def test_constrained_beam_search_skips_strings_longer_than_the_context(causal: LoadedModel) -> None:
    """A label that cannot fit after the context (tiny models: 64 positions) is unreachable:
    the search leaves it out instead of failing the whole request."""
    ctx = "The capital of France is"
    too_long = " " + " ".join(["Paris"] * 80)
    assert len(causal.tokenizer(too_long)["input_ids"]) > 64
    res = Engine(causal).run([BeamSearchRequest(ctx, num_beams=4, allowed=(" Paris", too_long, " Lyon"))])[0]
    assert isinstance(res, BeamSearchResult)
    assert {h.text for h in res.hypotheses} == {" Paris", " Lyon"}
    with pytest.raises(ConfigError, match="none of the allowed strings fits"):
        Engine(causal).run([BeamSearchRequest(ctx, num_beams=2, allowed=(too_long,))])


def test_plain_beam_search_and_generation(causal: LoadedModel) -> None:
    ctx = "The capital of France is"
    engine = Engine(causal)
    beam, greedy, s1, s2, s3 = engine.run([
        BeamSearchRequest(ctx, num_beams=3, max_new_tokens=4),
        GenerateRequest(ctx, max_new_tokens=4),
        GenerateRequest(ctx, max_new_tokens=6, temperature=1.0, seed=1),
        GenerateRequest(ctx, max_new_tokens=6, temperature=1.0, seed=1, top_p=0.9),
        GenerateRequest(ctx, max_new_tokens=6, temperature=1.0, seed=2),
    ])
    assert isinstance(beam, BeamSearchResult)
    lps = [h.logprob for h in beam.hypotheses]
    assert lps == sorted(lps, reverse=True) and len(lps) == 3
    # greedy generation's log-prob equals scoring its text; beam search finds at least as good
    from kgprobe.probing.requests import GenerateResult

    assert isinstance(greedy, GenerateResult)
    if len(greedy.token_ids) == 4 and causal.tokenizer.eos_token_id not in greedy.token_ids:
        assert lps[0] >= greedy.logprob - 1e-5
    # sampling is reproducible from its seed, in a fresh engine too
    again = Engine(causal).run([GenerateRequest(ctx, max_new_tokens=6, temperature=1.0, seed=1)])[0]
    assert isinstance(s1, GenerateResult) and isinstance(again, GenerateResult)
    assert again.token_ids == s1.token_ids
    assert isinstance(s2, GenerateResult) and isinstance(s3, GenerateResult)


def test_cache_returns_identical_values_without_calling_the_model(
    causal: LoadedModel, tmp_path: Path
) -> None:
    reqs: list = [*_requests(), SpanScoreRequest.marked("Paris is the capital of France.", "Paris"),
                  NextTokenRequest("The capital of France is", top_k=3),
                  BeamSearchRequest("Answer:", num_beams=2, allowed=(" Paris", " London"))]
    cache = ScoreCache(tmp_path / "scores.sqlite")
    first = Engine(causal, cache=cache)
    a = first.run(reqs)
    assert first.stats.forward_calls > 0 and len(cache) == len(set(reqs))
    cache.close()
    second = Engine(causal, cache=ScoreCache(tmp_path / "scores.sqlite"))
    b = second.run(reqs)
    assert second.stats.forward_calls == 0 and second.stats.cache_hits == len(set(reqs))
    assert a == b
    # another model's fingerprint never reads these entries
    other = load_model(causal.name, device="cpu", dtype="bfloat16")
    third = Engine(other, cache=ScoreCache(tmp_path / "scores.sqlite"))
    third.run(reqs[:3])
    assert third.stats.cache_hits == 0 and third.stats.forward_calls > 0


def test_causal_span_score(causal: LoadedModel) -> None:
    text = "Paris is the capital of France."
    span = SpanScoreRequest.marked(text, "France")
    s, whole = Engine(causal).run([span, LogProbRequest("", text)])
    assert isinstance(s, SpanScoreResult) and isinstance(whole, LogProbResult)
    assert s.sentence_logprob < s.logprob < 0
    # the sentence is scored from the same conditioning token as an empty context
    assert s.sentence_logprob == pytest.approx(whole.logprob, abs=1e-5)
    i = next(k for k, t in enumerate(whole.tokens) if "France" in t)
    assert s.tokens == (whole.tokens[i],)
    assert s.logprob == pytest.approx(whole.token_logprobs[i], abs=1e-5)


def test_masked_lm_pll_within_word_l2r(bert: LoadedModel) -> None:
    text = "Paris is the capital of France."
    engine = Engine(bert, batch_size=3)
    span, whole, cont = engine.run([
        SpanScoreRequest.marked(text, "capital"),
        SpanScoreRequest(text, 0, len(text)),
        LogProbRequest("Paris is the", " capital"),
    ])
    assert isinstance(span, SpanScoreResult) and isinstance(whole, SpanScoreResult)
    assert isinstance(cont, LogProbResult)
    assert whole.logprob == pytest.approx(whole.sentence_logprob, abs=1e-5)
    assert span.sentence_logprob == pytest.approx(whole.sentence_logprob, abs=1e-5)
    # independent reference for the within-word-l2r rule on one multi-piece word
    enc = bert.tokenization.masked_span(text, 0, len(text))
    target = [i for i in range(len(enc.ids)) if enc.in_span[i] and enc.scorable[i]]
    ref = []
    for i in target:
        row = list(enc.ids)
        for j in range(i, len(row)):
            if j == i or (enc.word_ids[j] is not None and enc.word_ids[j] == enc.word_ids[i]):
                row[j] = bert.tokenizer.mask_token_id
        with torch.no_grad():
            logits = bert.model(torch.tensor([row])).logits[0, i].float()
        ref.append(float(torch.log_softmax(logits, -1)[enc.ids[i]]))
    assert whole.token_logprobs == pytest.approx(ref, abs=1e-5)
    # batch size does not change PLL
    again = Engine(bert, batch_size=1).run([SpanScoreRequest(text, 0, len(text))])[0]
    assert isinstance(again, SpanScoreResult)
    assert again.logprob == pytest.approx(whole.logprob, abs=1e-5)


def test_seq2seq_span_scoring(t5: LoadedModel) -> None:
    reqs = [LogProbRequest("The capital of France is", " Paris"),
            LogProbRequest("The capital of France is", " London city", add_eos=True),
            LogProbRequest("Answer:", " Rome.")]
    one = _lp(Engine(t5, batch_size=1).run(reqs))
    many = _lp(Engine(t5, batch_size=8).run(reqs))
    for a, b in zip(one, many, strict=True):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-5)
    # reference: labels-based loss of the model itself
    enc = t5.tokenization.seq2seq_pair("The capital of France is", " Paris")
    with torch.no_grad():
        out = t5.model(input_ids=torch.tensor([enc.context_ids]),
                       labels=torch.tensor([enc.continuation_ids]))
    assert one[0].logprob == pytest.approx(-float(out.loss) * len(enc.continuation_ids), abs=1e-4)
    span = Engine(t5).run([SpanScoreRequest.marked("Paris is the capital of France.", "capital")])[0]
    assert isinstance(span, SpanScoreResult) and span.logprob < 0
    assert span.sentence_logprob <= span.logprob
    dist = Engine(t5).run([NextTokenRequest("The capital of France is", top_k=None)])[0]
    assert isinstance(dist, NextTokenResult) and dist.full_logprobs is not None
    assert float(np.exp(dist.full_logprobs.astype(np.float64)).sum()) == pytest.approx(1.0, abs=1e-5)


def test_beam_searches_and_generations_do_not_depend_on_their_batch(causal: LoadedModel) -> None:
    """Searches and generations are decoded many at once (one key/value cache, right-padded
    contexts of different lengths); each result must equal the same request run alone, and
    each hypothesis's log-probability must equal packed scoring of its tokens (another code
    path: no cache, no padding)."""
    from kgprobe.probing.requests import GenerateResult

    reqs: list = [
        BeamSearchRequest("The capital of France is", num_beams=3, max_new_tokens=4),
        BeamSearchRequest("A", num_beams=2, max_new_tokens=5),
        BeamSearchRequest("Paris is a city in the north of", num_beams=4,
                          allowed=(" France", " Paris", " the country", " Europe")),
        BeamSearchRequest("Answer:", num_beams=1, max_new_tokens=3),
        GenerateRequest("The capital of France is", max_new_tokens=5),
        GenerateRequest("Once upon a time there was a", max_new_tokens=6, temperature=1.0, seed=3),
        GenerateRequest("Hello", max_new_tokens=4, temperature=0.7, top_p=0.8, seed=4),
    ]
    together = Engine(causal).run(reqs)
    for r, got in zip(reqs, together, strict=True):
        alone = Engine(causal).run([r])[0]
        if isinstance(got, GenerateResult):
            assert isinstance(alone, GenerateResult)
            assert got.token_ids == alone.token_ids and got.text == alone.text
            assert got.logprob == pytest.approx(alone.logprob, abs=1e-5)
            continue
        assert isinstance(got, BeamSearchResult) and isinstance(alone, BeamSearchResult)
        assert [h.token_ids for h in got.hypotheses] == [h.token_ids for h in alone.hypotheses]
        for h, a in zip(got.hypotheses, alone.hypotheses, strict=True):
            assert h.logprob == pytest.approx(a.logprob, abs=1e-5)
    backend = Engine(causal).causal
    assert backend is not None
    tok = causal.tokenization
    for r, got in zip(reqs, together, strict=True):
        ctx = tuple(tok.causal_pair(r.context, " x").context_ids)
        hyps = got.hypotheses if isinstance(got, BeamSearchResult) else [got]
        scored, _ = backend.score_items([ctx] * len(hyps), [list(h.token_ids) for h in hyps])
        for h, s in zip(hyps, scored, strict=True):
            assert h.logprob == pytest.approx(sum(s.logprobs), abs=1e-4)
    # a beam of width 1 is greedy decoding when no hypothesis ends early
    beam1, greedy = Engine(causal).run([BeamSearchRequest("Answer:", num_beams=1, max_new_tokens=3),
                                        GenerateRequest("Answer:", max_new_tokens=3)])
    assert isinstance(beam1, BeamSearchResult) and isinstance(greedy, GenerateResult)
    if causal.tokenizer.eos_token_id not in greedy.token_ids:
        assert beam1.hypotheses[0].token_ids == greedy.token_ids
