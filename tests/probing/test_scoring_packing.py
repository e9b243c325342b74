"""Packed scoring (DESIGN §3): many (context + continuation trie) segments per forward.

The plan is checked against its definition (what each read position can see), and the
engine's packed scores against a plain, unpadded forward per request, on tiny random GPT-2 /
Llama models (fp32), for every row budget and batch composition.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from tiny_models import TinyModel

from kgprobe.probing.backends import causal as causal_backend
from kgprobe.probing.backends.packing import plan
from kgprobe.probing.engine import Engine
from kgprobe.probing.models import LoadedModel, load_model
from kgprobe.probing.requests import (
    LogProbRequest,
    LogProbResult,
    NextTokenRequest,
    NextTokenResult,
    SpanScoreRequest,
    SpanScoreResult,
)

torch.set_num_threads(1)

DEMOS = ("Question: What is the capital of France? Answer: Paris.\n"
         "Question: What is the capital of Spain? Answer: Madrid.\n")
CONTEXTS = ["The capital of France is", "Answer:", "Berlin is the capital of", "hello world, the",
            "Question: What is the capital of Italy? Answer:",
            # few-shot contexts: the demonstrations are a trunk shared by both segments
            DEMOS + "Question: What is the capital of Italy? Answer:",
            DEMOS + "Question: Where is Lyon? Answer:"]
CANDIDATES = [" Paris", " London", " Lyon", " Rome.", " the city is old", " Germany and Spain",
              " Madrid", " a large city in France", ",", " Paris is the capital", " the world"]
TOL = 1e-5


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def causal(request: pytest.FixtureRequest, tiny_model: TinyModel) -> LoadedModel:
    return load_model(str(tiny_model(request.param)), device="cpu")


def _plain_logprobs(lm: LoadedModel, ids: list[int]) -> torch.Tensor:
    """Independent reference: one unpadded forward of the whole sequence, no mask, no cache."""
    with torch.no_grad():
        return torch.log_softmax(lm.model(torch.tensor([ids])).logits[0].float(), -1)


def _plain_pair(lm: LoadedModel, req: LogProbRequest) -> list[float]:
    enc = lm.tokenization.causal_pair(req.context, req.continuation, req.add_eos)
    lp = _plain_logprobs(lm, list(enc.context_ids) + list(enc.continuation_ids))
    n = len(enc.context_ids)
    return [float(lp[n + j - 1, t]) for j, t in enumerate(enc.continuation_ids)]


def _requests() -> list[LogProbRequest]:
    return [LogProbRequest(c, x) for c in CONTEXTS for x in CANDIDATES] + [
        LogProbRequest("Lyon is a city in", " France", add_eos=True)]


# -- the plan, against its definition ---------------------------------------------------------


def _check_plan(ctxs: list[tuple[int, ...]], conts: list[tuple[int, ...]], budget: int,
                segment: int | None = 512) -> int:
    p = plan(ctxs, conts, budget, segment)
    for i, (cx, ct) in enumerate(zip(ctxs, conts, strict=True)):
        a, b = int(p.read_start[i]), int(p.read_start[i + 1])
        assert b - a == max(1, len(ct))
        for k in range(a, b):
            row = p.rows[int(p.read_row[k])]
            q = int(p.read_pos[k])
            kv = np.arange(len(row.ids))
            visible = (kv <= q) & (q < row.end[kv])
            t = k - a
            # what the read position attends to is exactly context + the continuation so far,
            # at positions 0..n-1: the tree mask and the restarted positions
            assert row.ids[visible].tolist() == list(cx) + list(ct[:t])
            assert row.positions[visible].tolist() == list(range(len(cx) + t))
            assert int(p.read_target[k]) == (ct[t] if ct else -1)
    for row in p.rows:
        # the attention blocks tile the row, and every position's visible keys lie in its
        # block's trunk or in the block itself (what block-wise attention computes)
        b = row.blocks
        assert b[0, 0] == 0 and b[-1, 1] == len(row.ids) and (b[1:, 0] == b[:-1, 1]).all()
        kv = np.arange(len(row.ids))
        for q0, q1, t0, t1 in b.tolist():
            assert t0 <= t1 <= q0
            for q in range(q0, q1):
                seen = kv[(kv <= q) & (q < row.end)]
                assert (((seen >= t0) & (seen < t1)) | ((seen >= q0) & (seen <= q))).all()
    return p.tokens


def test_plan_reads_see_exactly_their_context_and_prefix() -> None:
    rng = random.Random(0)
    for trial in range(300):
        pool = [tuple(rng.randint(0, 9) for _ in range(rng.randint(1, 4)))
                for _ in range(rng.randint(1, 4))]
        items = [(rng.choice(pool), tuple(rng.randint(0, 4) for _ in range(
            rng.randint(0 if trial % 3 == 0 else 1, 5)))) for _ in range(rng.randint(1, 25))]
        _check_plan([a for a, _ in items], [b for _, b in items],
                    rng.choice([3, 5, 8, 20, 10**6]))


def test_plan_feeds_each_context_and_each_prefix_once() -> None:
    rng = random.Random(1)
    for _ in range(100):
        pool = [tuple(rng.randint(0, 9) for _ in range(rng.randint(1, 4))) for _ in range(3)]
        items = [(rng.choice(pool), tuple(rng.randint(0, 3) for _ in range(rng.randint(1, 5))))
                 for _ in range(20)]
        p = plan([a for a, _ in items], [b for _, b in items], 10**6)
        # counted by hand: distinct contexts, plus distinct proper prefixes per context
        expected = sum(len(c) for c in {a for a, _ in items}) + len(
            {(a, b[:k]) for a, b in items for k in range(1, len(b))})
        assert p.tokens == expected and len(p.rows) == 1


def test_plan_shares_a_long_common_context_prefix_as_a_trunk() -> None:
    """Few-shot contexts (the same demonstrations, then a prompt): the demonstrations are
    fed once per row, not once per context, and every read still sees exactly its own
    context and prefix at positions 0..n-1."""
    rng = random.Random(3)
    for trial in range(200):
        demos = [tuple(rng.randint(0, 9) for _ in range(rng.randint(0, 30))) for _ in range(2)]
        pool = [rng.choice(demos) + tuple(rng.randint(0, 9) for _ in range(rng.randint(1, 4)))
                for _ in range(rng.randint(1, 6))]
        items = [(rng.choice(pool), tuple(rng.randint(0, 4) for _ in range(
            rng.randint(0 if trial % 3 == 0 else 1, 5)))) for _ in range(rng.randint(1, 25))]
        _check_plan([a for a, _ in items], [b for _, b in items],
                    rng.choice([5, 20, 40, 100, 10**6]), rng.choice([16, 512, None]))
    demo = tuple(range(100, 130))  # 30 tokens
    prompts = [(1, 2), (1, 3, 4), (5,), (6, 7), (20, 21), (22,), (23, 24, 25), (26,)]
    conts = [(8, 9, 10), (8, 9), (11, 12), (13,)]
    items = [(demo + q, c) for q in prompts for c in conts]
    ctxs, cnts = [a for a, _ in items], [b for _, b in items]
    p = plan(ctxs, cnts, 10**6)
    # by hand: the 30 demonstration tokens once, the prompts' own 15 tokens, and per context
    # the continuation prefixes (8), (8, 9), (11,): 3 nodes
    assert p.tokens == 30 + 15 + 8 * 3 and len(p.rows) == 1
    assert _check_plan(ctxs, cnts, 10**6) == p.tokens
    # segments of 5, 6, 4, 5, 5, 4, 6, 4 tokens in rows of 60: the trunk and the first six
    # (59), then the trunk again and the last two (40)
    small = plan(ctxs, cnts, 60)
    assert sorted(len(r.ids) for r in small.rows) == [40, 59]
    _check_plan(ctxs, cnts, 60)


def test_plan_respects_the_budget() -> None:
    ctxs = [(1, 2, 3)] * 40 + [(4, 5)] * 40
    conts = [(i % 7, i % 5, i) for i in range(80)]
    for budget in (6, 10, 25, 60):
        p = plan(ctxs, conts, budget)
        assert all(len(r.ids) <= budget for r in p.rows)
        _check_plan(ctxs, conts, budget)


def test_plan_caps_segments_so_one_big_trie_is_not_one_quadratic_block() -> None:
    """BEAR's sentences all share one conditioning token: one trie of thousands of nodes.
    With a segment cap every segment (counted from the rows: positions restart at 0) stays
    within max(cap, 2 × context), the rows still fill the budget, and every read still sees
    exactly its context and prefix."""
    rng = random.Random(2)
    ctxs = [(7,)] * 300 + [tuple(range(40))] * 50
    conts = [tuple(rng.randint(0, 50) for _ in range(rng.randint(2, 8))) for _ in range(350)]
    for cap in (32, 64, 512):
        p = plan(ctxs, conts, 4096, cap)
        sizes = []
        for r in p.rows:
            starts = np.flatnonzero(r.positions == 0).tolist() + [len(r.ids)]
            sizes += [b - a for a, b in zip(starts[:-1], starts[1:], strict=True)]
        assert max(sizes) <= max(cap, 80) and len(sizes) > 1
        assert all(len(r.ids) <= 4096 for r in p.rows)
        _check_plan(ctxs, conts, 4096, cap)
    whole = plan(ctxs, conts, 4096, None)  # uncapped: each context's trie is one segment
    assert sum(int((r.positions == 0).sum()) for r in whole.rows) == 2 < len(sizes)


# -- the engine, against a plain forward per request -----------------------------------------


def test_packed_equals_plain_forward_and_unpacked(causal: LoadedModel) -> None:
    reqs = _requests()
    engine = Engine(causal, batch_tokens=4096)
    packed = engine.run(reqs)
    assert engine.causal is not None and engine.causal.packing_works()
    # every context and every continuation trie in one row: one forward for all requests
    assert engine.stats.forward_calls == 1
    unpacked = Engine(causal, share_prefix=False, batch_size=1).run(reqs)
    for r, a, b in zip(reqs, packed, unpacked, strict=True):
        assert isinstance(a, LogProbResult) and isinstance(b, LogProbResult)
        ref = _plain_pair(causal, r)
        assert np.allclose(a.token_logprobs, ref, atol=TOL, rtol=0)
        assert np.allclose(a.token_logprobs, b.token_logprobs, atol=TOL, rtol=0)
        assert a.tokens == b.tokens and a.is_greedy == b.is_greedy


def test_a_failed_packing_check_scores_on_the_padded_path_with_the_same_scores(
    causal: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The self-check's figure is kept; when it exceeds the tolerance (forced here: a tolerance
    below zero) nothing is packed, and the padded path gives the packed path's scores."""
    reqs = _requests()
    packed_engine = Engine(causal, batch_tokens=4096)
    packed = packed_engine.run(reqs)
    assert packed_engine.causal is not None and packed_engine.causal.packing_works()
    assert packed_engine.causal.packing_check_diff is not None
    assert 0.0 <= packed_engine.causal.packing_check_diff < 5e-2
    monkeypatch.setattr(causal_backend, "PACKING_TOLERANCE", -1.0)
    engine = Engine(causal, batch_tokens=4096)
    padded = engine.run(reqs)
    assert engine.causal is not None and not engine.causal.packing_works()
    assert engine.stats.tokens_fed == 0 and engine.stats.forward_calls > 1  # no packed row ran
    for r, a, b in zip(reqs, packed, padded, strict=True):
        assert isinstance(a, LogProbResult) and isinstance(b, LogProbResult)
        assert np.allclose(b.token_logprobs, _plain_pair(causal, r), atol=TOL, rtol=0)
        assert np.allclose(a.token_logprobs, b.token_logprobs, atol=TOL, rtol=0)
        assert a.is_greedy == b.is_greedy


@pytest.mark.parametrize("budget", [1, 9, 17, 40, 128])
def test_scores_independent_of_row_budget_and_batch_composition(
    causal: LoadedModel, budget: int
) -> None:
    reqs = _requests()
    reference = [r.token_logprobs for r in Engine(causal, batch_tokens=4096).run(reqs)
                 if isinstance(r, LogProbResult)]
    rng = random.Random(budget)
    mixed: list[LogProbRequest | SpanScoreRequest | NextTokenRequest] = list(reqs)
    mixed += [SpanScoreRequest.marked("Berlin is the capital of Germany.", "Germany"),
              NextTokenRequest("Answer:", top_k=3)]
    rng.shuffle(mixed)
    engine = Engine(causal, batch_tokens=budget)
    got = dict(zip(mixed, engine.run(mixed), strict=True))
    if budget < 40:
        assert engine.stats.forward_calls > 1  # really split over several rows
    for r, ref in zip(reqs, reference, strict=True):
        res = got[r]
        assert isinstance(res, LogProbResult)
        assert np.allclose(res.token_logprobs, ref, atol=TOL, rtol=0)


def test_sentences_share_their_prefix_and_match_a_plain_forward(causal: LoadedModel) -> None:
    objects = ["Paris", "London", "Lyon", "Rome", "Madrid", "Berlin"]
    reqs = [SpanScoreRequest.marked(f"The capital of France is {o}.", o) for o in objects]
    reqs += [SpanScoreRequest.marked(f"{o} is the capital of France.", o) for o in objects]
    engine = Engine(causal)
    res = engine.run(reqs)
    tok = causal.tokenization
    total = 0
    for r, s in zip(reqs, res, strict=True):
        assert isinstance(s, SpanScoreResult)
        enc = tok.causal_span(r.text, r.start, r.end)
        total += len(enc.ids)
        lp = _plain_logprobs(causal, list(enc.ids))
        per = [float(lp[i - 1, enc.ids[i]]) for i in range(1, len(enc.ids))]
        chosen = [v for v, f in zip(per, enc.in_span[1:], strict=True) if f]
        assert abs(s.sentence_logprob - sum(per)) < TOL * len(per)
        assert np.allclose(s.token_logprobs, chosen, atol=TOL, rtol=0)
    # " The capital of France is" is fed once for its six sentences, not six times
    assert engine.stats.forward_calls == 1 and engine.stats.tokens_fed < total - 20


def test_next_token_distributions_packed(causal: LoadedModel) -> None:
    reqs = [NextTokenRequest(c, top_k=None) for c in CONTEXTS]
    engine = Engine(causal)
    res = engine.run(reqs)
    assert engine.stats.forward_calls == 1
    for r, d in zip(reqs, res, strict=True):
        assert isinstance(d, NextTokenResult) and d.full_logprobs is not None
        ids = causal.tokenization._fit(causal.tokenization._with_prefix(
            causal.tokenization.encode(r.context.rstrip())), 1)
        ref = _plain_logprobs(causal, ids)[-1].numpy()
        assert np.allclose(d.full_logprobs, ref, atol=TOL, rtol=0)


def test_flex_path_matches_dense_or_falls_back(causal: LoadedModel) -> None:
    """FlexAttention (the CUDA path) asked for on the CPU: either it runs and agrees with the
    dense mask, or it falls back to the dense mask and says why. Skipped by default: the
    CPU compile takes a minute."""
    import os

    if os.environ.get("KGPROBE_TEST_FLEX") != "1":
        pytest.skip("set KGPROBE_TEST_FLEX=1 to compile FlexAttention on the CPU")
    reqs = _requests()[:12]
    dense = [r.logprob for r in Engine(causal, attention="dense").run(reqs)
             if isinstance(r, LogProbResult)]
    engine = Engine(causal, attention="flex")
    try:
        flex = [r.logprob for r in engine.run(reqs) if isinstance(r, LogProbResult)]
    finally:
        causal.model.set_attn_implementation("sdpa")
    assert engine.causal is not None
    assert engine.causal.attention_fallback is not None or engine.causal.attention_path() == "flex"
    assert np.allclose(flex, dense, atol=1e-4, rtol=0)


@pytest.mark.parametrize("budget", [64, 512, 8192])
def test_segment_attention_matches_plain_forwards(causal: LoadedModel, budget: int) -> None:
    """The CPU's block-sparse path: SDPA segment by segment inside each packed row. Its
    scores equal one plain forward per request (no mask, no packing) and the dense-mask path,
    at every row budget; the rows really are multi-segment, and the model stays a plain SDPA
    model for any forward outside a packed row."""
    reqs = _requests()
    engine = Engine(causal, attention="segments", batch_tokens=budget)
    got = engine.run(reqs)
    assert engine.causal is not None and engine.causal.attention_path() == "segments"
    assert causal.model.config._attn_implementation == "kgprobe_segments"
    assert engine.stats.forward_calls < len(set(r.context for r in reqs)) or budget == 64
    dense = Engine(causal, attention="dense", batch_tokens=budget).run(reqs)
    for r, g, d in zip(reqs, got, dense, strict=True):
        assert isinstance(g, LogProbResult) and isinstance(d, LogProbResult)
        want = _plain_pair(causal, r)
        assert np.allclose(g.token_logprobs, want, atol=TOL, rtol=0)
        assert g.logprob == pytest.approx(d.logprob, abs=TOL)
    ids = causal.tokenization.encode("The capital of France is Paris")
    with torch.no_grad():
        after = torch.log_softmax(causal.model(torch.tensor([ids])).logits[0].float(), -1)
    causal.model.set_attn_implementation("sdpa")
    assert torch.allclose(after, _plain_logprobs(causal, ids), atol=TOL)


def test_padded_row_masks_every_pad_out_of_the_real_tokens() -> None:
    """FlexAttention's rows are padded to whole blocks (``_padded``): by the plan's own mask
    definition (what position q sees: kv <= q < end[kv]), every real position sees what it
    saw unpadded, no real position sees a pad, and each pad sees itself alone (no row all
    masked, which SDPA would turn into NaN)."""
    rng = random.Random(5)
    ctxs = [tuple(rng.randint(0, 50) for _ in range(rng.randint(1, 9))) for _ in range(40)]
    conts = [tuple(rng.randint(0, 50) for _ in range(rng.randint(1, 4))) for _ in range(40)]
    rows = plan(ctxs, conts, 60).rows
    assert len(rows) > 1 and any(len(r.ids) < 128 for r in rows)  # a one-block row is padded
    for row in rows:
        n = len(row.ids)
        ids, pos, end = causal_backend._padded(row, 128)
        m = len(ids)
        assert m == max(128 * math.ceil(n / 128), 256)  # the fewest whole blocks, two at least
        assert ids[:n].tolist() == row.ids.tolist() and pos[:n].tolist() == row.positions.tolist()
        kv = np.arange(m)
        for q in range(m):
            seen = kv[(kv <= q) & (q < end)]
            if q < n:
                assert seen.tolist() == np.arange(n)[(np.arange(n) <= q) & (q < row.end)].tolist()
            else:
                assert seen.tolist() == [q]


@pytest.mark.parametrize("attention", ["dense", "flex"])
def test_padded_rows_score_as_unpadded(causal: LoadedModel, attention: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows padded to whole blocks give every score the unpadded rows give. The padding is
    FlexAttention's (``row_block`` None pads on the flex path alone), forced here onto the
    dense path, which the CPU runs; asked for flex, the CPU's compile falls back
    (``attention_fallback``) and the fallen-back rows run unpadded. The rows handed to the
    model are seen padded (or not) where they are sent to the device."""
    reqs = _requests()
    want = Engine(causal, attention="dense", batch_tokens=64).run(reqs)
    engine = Engine(causal, attention=attention, batch_tokens=64)
    assert engine.causal is not None
    if attention == "dense":
        engine.causal.row_block = 128
    sent: list[int] = []
    upload = engine.causal._upload
    monkeypatch.setattr(engine.causal, "_upload",
                        lambda arrays: sent.append(len(arrays[0])) or upload(arrays))
    try:
        got = engine.run(reqs)
    finally:
        causal.model.set_attn_implementation("sdpa")
    # (one more row than forwards: the packing self-check's)
    assert engine.stats.forward_calls > 1 and len(sent) > engine.stats.forward_calls
    padded = [n % 128 == 0 and n >= 256 for n in sent]
    if attention == "dense" or "llama" in causal.name:
        # forced; or flex, which Llama has: every row padded for it (the CPU's compile may
        # fail on the first: that row and the rest then run unpadded, and it says why)
        assert all(padded)
        assert engine.causal.attention_path() == attention or engine.causal.attention_fallback
    else:  # GPT-2 has no FlexAttention: another path from the start, never padded
        assert not any(padded) and engine.causal.attention_path() != "flex"
    assert engine.stats.tokens_fed < sum(sent)  # the pad is not counted as fed
    for r, g, w in zip(reqs, got, want, strict=True):
        assert isinstance(g, LogProbResult) and isinstance(w, LogProbResult)
        assert np.allclose(g.token_logprobs, w.token_logprobs, atol=TOL, rtol=0), r


def test_compile_failures_are_told_from_other_errors() -> None:
    """A later FlexAttention row falls back on torch's compiler failing, not on any error
    (an out-of-memory error is raised, not hidden behind another path)."""
    import torch._dynamo.exc as dynamo_exc
    import torch._inductor.exc as inductor_exc

    assert causal_backend._compile_failure(dynamo_exc.TorchDynamoException("x"))
    assert causal_backend._compile_failure(
        inductor_exc.InductorError(RuntimeError("NoValidChoicesError"), None))
    assert not causal_backend._compile_failure(RuntimeError("x"))
    assert not causal_backend._compile_failure(torch.OutOfMemoryError("x"))


# -- the host ahead of the device (issue 43) -----------------------------------------------


def _mixed_requests() -> list[LogProbRequest | SpanScoreRequest | NextTokenRequest]:
    mixed: list[LogProbRequest | SpanScoreRequest | NextTokenRequest] = list(_requests())
    mixed += [SpanScoreRequest.marked("Berlin is the capital of Germany.", "Germany"),
              NextTokenRequest("Answer:", top_k=None), NextTokenRequest("hello world", top_k=3)]
    random.Random(43).shuffle(mixed)
    return mixed


def _row_trace(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[object]]:
    """What the packed path does, in order: ``mask`` (a row's attention blocks built),
    ``forward`` / ``end`` (the model's forward entered / left), ``head`` (LM head on a
    row's read positions) and ``read`` (a tensor's values copied to the host: ``.cpu()``,
    ``.numpy()``, ``.item()``, ``.tolist()`` outside a forward); and the forward hooks, for
    the caller to remove (the model is shared by the module's tests)."""
    backend = engine.causal
    assert backend is not None
    trace: list[str] = []
    inside = [False]
    base = backend.model.base_model

    def pre(*_: object) -> None:
        inside[0] = True
        trace.append("forward")

    def post(*_: object) -> None:
        inside[0] = False
        trace.append("end")

    hooks = [base.register_forward_pre_hook(pre), base.register_forward_hook(post)]
    block_masks, head = backend._block_masks, backend._head
    monkeypatch.setattr(backend, "_block_masks",
                        lambda row: (trace.append("mask"), block_masks(row))[1])
    monkeypatch.setattr(backend, "_head", lambda h: (trace.append("head"), head(h))[1])
    for name in ("cpu", "numpy", "item", "tolist"):
        orig = getattr(torch.Tensor, name)

        def reading(self: torch.Tensor, *a: object, _orig: object = orig, **k: object) -> object:
            if not inside[0]:
                trace.append("read")
            return _orig(self, *a, **k)  # type: ignore[operator]

        monkeypatch.setattr(torch.Tensor, name, reading)
    return trace, hooks


@pytest.mark.parametrize("attention", ["segments", "dense"])
def test_overlapped_rows_score_bit_for_bit_as_rows_run_one_by_one(
    causal: LoadedModel, attention: str
) -> None:
    """The overlapped loop (row r+1 prepared while row r runs, results kept on the device and
    read back once) against the per-row one (each row prepared just before its forward,
    ``overlap`` off): every log-prob, greedy flag, sentence and whole next-token
    distribution equal (==), over many rows."""
    reqs = _mixed_requests()
    fast = Engine(causal, batch_tokens=40, attention=attention)
    got = fast.run(reqs)
    slow = Engine(causal, batch_tokens=40, attention=attention)
    assert slow.causal is not None
    slow.causal.overlap = False
    want = slow.run(reqs)
    assert fast.stats.forward_calls == slow.stats.forward_calls > 5
    for g, w in zip(got, want, strict=True):
        if isinstance(g, NextTokenResult):
            assert isinstance(w, NextTokenResult)
            if g.full_logprobs is not None:
                assert w.full_logprobs is not None
                assert np.array_equal(g.full_logprobs, w.full_logprobs)
            assert (g.token_ids, g.logprobs, g.entropy) == (w.token_ids, w.logprobs, w.entropy)
        else:
            assert g == w


def test_the_next_row_is_built_while_a_row_runs_and_nothing_is_read_back_between_rows(
    causal: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Row r+1's attention blocks are built after row r's forward is launched and before
    row r's head (on a GPU the host works while the device runs), and no tensor is copied
    to the host between the first forward and the last head (no synchronisation per row);
    with ``overlap`` off each row is built just before its forward."""
    engine = Engine(causal, batch_tokens=40, attention="segments")
    assert engine.causal is not None
    engine.causal.packing_works()  # its own check forwards stay out of the trace
    assert engine.causal.head_splits()
    trace, hooks = _row_trace(engine, monkeypatch)
    try:
        _check_row_order(engine, trace)
    finally:
        for h in hooks:
            h.remove()  # type: ignore[attr-defined]


#: calls that, on a CUDA tensor, make the host wait for the device: a value read by Python, or an
#: output whose size depends on the values
_HOST_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__int__", "__float__", "__index__",
               "nonzero", "unique", "any", "all")


@pytest.mark.parametrize("attention", ["segments", "dense"])
def test_nothing_is_read_back_inside_the_models_forward(
    causal: LoadedModel, attention: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside the model's forward (kgprobe's masks and segment attention, and the model's own
    code) no tensor value reaches Python and no output size depends on one: on a GPU each
    such call waits for the device, so the host could not launch ahead of it. Caught here on
    the CPU by wrapping those calls (and boolean-mask indexing) while a forward runs."""
    engine = Engine(causal, batch_tokens=40, attention=attention)
    assert engine.causal is not None
    engine.run(_requests())  # the packing check and first rows, outside the trace
    depth = [0]
    forwards = [0]

    def enter(*_: object) -> None:
        depth[0] += 1
        forwards[0] += 1

    base = engine.causal.model.base_model
    hooks = [base.register_forward_pre_hook(enter),
             base.register_forward_hook(lambda *_: depth.__setitem__(0, depth[0] - 1))]
    reads: list[str] = []

    def traced(owner: object, name: str) -> None:
        orig = getattr(owner, name)

        def call(*a: object, **k: object) -> object:
            if depth[0]:
                reads.append(name)
            return orig(*a, **k)

        monkeypatch.setattr(owner, name, call)

    for name in _HOST_READS:
        traced(torch.Tensor, name)
    for name in ("nonzero", "unique", "masked_select", "repeat_interleave"):
        traced(torch, name)
    getitem = torch.Tensor.__getitem__

    def index(self: torch.Tensor, key: object) -> object:
        keys = key if isinstance(key, tuple) else (key,)
        if depth[0] and any(isinstance(x, torch.Tensor) and x.dtype == torch.bool for x in keys):
            reads.append("boolean index")
        return getitem(self, key)  # type: ignore[index]

    monkeypatch.setattr(torch.Tensor, "__getitem__", index)
    # the check can see: a read inside a layer's forward is caught
    probe = base.get_submodule(next(n for n, m in base.named_modules() if n and list(m.parameters())))

    def reads_a_value(_m: object, _a: object, out: object) -> None:
        (out[0] if isinstance(out, tuple) else out).sum().item()  # type: ignore[union-attr]

    seen = probe.register_forward_hook(reads_a_value)
    try:
        engine.run(_requests()[:3])
        assert "item" in reads
        seen.remove()
        reads.clear()
        forwards[0] = 0
        engine.run([LogProbRequest("So, " + r.context, r.continuation) for r in _requests()])
    finally:
        seen.remove()
        for h in hooks:
            h.remove()
    assert forwards[0] > 5  # many rows, none of them cached
    assert reads == []


def _check_row_order(engine: Engine, trace: list[str]) -> None:
    assert engine.causal is not None
    engine.run(_requests())
    rows = trace.count("forward")
    assert rows == engine.stats.forward_calls > 5
    first, last = trace.index("forward"), len(trace) - 1 - trace[::-1].index("head")
    assert "read" not in trace[first:last]
    steps = [t for t in trace if t in ("mask", "end", "head")]
    # mask 0, then per row: its forward ends, the next row's mask, the row's head
    squeezed = [t for i, t in enumerate(steps) if t != "head" or steps[i - 1] != "head"]
    expect = ["mask"]
    for r in range(rows):
        expect += ["end"] + (["mask"] if r + 1 < rows else []) + ["head"]
    assert squeezed == expect
    trace.clear()
    engine.causal.overlap = False
    engine.run(_requests())
    steps = [t for t in trace if t in ("mask", "end", "head")]
    squeezed = [t for i, t in enumerate(steps) if t != "head" or steps[i - 1] != "head"]
    assert squeezed == ["mask", "end", "head"] * rows


def test_small_models_get_longer_rows_on_a_large_gpu(causal: LoadedModel) -> None:
    """On CUDA a small model's rows are 32768 tokens where the device has 40 GiB (fewer,
    longer forwards: launching is what costs); an 8B shape, a smaller device, the CPU and a
    dense mask keep their budgets. The device is named, not used: nothing runs on it."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from kgprobe.probing.backends.causal import default_batch_tokens

    with torch.device("meta"):  # Llama-3-8B's shape without its memory
        big = LlamaForCausalLM(LlamaConfig(vocab_size=128256, hidden_size=4096,
                                           intermediate_size=14336, num_hidden_layers=32,
                                           num_attention_heads=32, num_key_value_heads=8))
    gib = 1024**3
    assert default_batch_tokens("cuda:0", causal.model, memory=80 * gib) == 32768
    assert default_batch_tokens("cuda", causal.model, memory=40 * gib) == 32768
    assert default_batch_tokens("cuda:0", causal.model, memory=24 * gib) == 8192
    assert default_batch_tokens("cuda:0", big, memory=80 * gib) == 8192
    assert default_batch_tokens("cuda:0", None, memory=80 * gib) == 8192
    assert default_batch_tokens("cpu", causal.model) == 8192
