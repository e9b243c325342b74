"""The engine's cheaper bookkeeping (issue 18, benchmarks/bench_engine_overhead.py) changes no
score: tokenizing distinct contexts and continuations apart gives the joint encoding, each
attention block's own mask is the whole row's mask sliced, and a mixed batch scores the same,
bit for bit, with the cheap paths on and off."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest
import torch
from test_scoring_packing import DEMOS  # the same few-shot demonstrations
from tiny_models import TinyModel

from kgprobe.probing.backends import causal as causal_module
from kgprobe.probing.backends.packing import plan
from kgprobe.probing.cache import ScoreCache, _dump, request_key
from kgprobe.probing.engine import Engine
from kgprobe.probing.models import DEFAULT_MODEL, LoadedModel, load_model
from kgprobe.probing.requests import (
    BeamSearchRequest,
    GenerateRequest,
    LogProbRequest,
    NextTokenRequest,
    NextTokenResult,
    Request,
    SpanScoreRequest,
    TokenScoresRequest,
)
from kgprobe.probing.tokenization import split_trailing_whitespace

torch.set_num_threads(1)

CONTEXTS = ["The capital of France is", "Answer:", "Berlin is the capital of", "hello world, the",
            "The capital of France is ", "x'", "city (", "Lyon 19", "",
            DEMOS + "Question: What is the capital of Italy? Answer:",
            DEMOS + "Question: Where is Lyon? Answer:"]
CANDIDATES = [" Paris", " London", " Lyon", " Rome.", " the city is old", "  Madrid", "Paris",
              " 1999", ",", " 's", " (France)", " Ünter", "\nRome", " Germany and Spain"]


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def causal(request: pytest.FixtureRequest, tiny_model: TinyModel) -> LoadedModel:
    return load_model(str(tiny_model(request.param)), device="cpu")


def _pairs() -> list[tuple[str, str]]:
    return [split_trailing_whitespace(c, x) for c in CONTEXTS for x in CANDIDATES]


def test_apart_encoding_is_the_joint_encoding(causal: LoadedModel) -> None:
    """Reference: the tokenizer's own encoding of each joint text, split by character
    offsets. The byte-level BPE (gpt2) takes the apart route for space-led words; the
    SentencePiece-style one (llama) never does."""
    tok = causal.tokenization
    assert tok._splits_at_space == ("gpt2" in causal.name)
    pairs = _pairs()
    want = tok.split_joint_many(pairs)
    assert tok.split_many(pairs) == want
    # and through the wrapper rather than the Rust tokenizer directly
    direct = [list(x) for x in causal.tokenizer([c + x for c, x in pairs],
                                                 add_special_tokens=False)["input_ids"]]
    assert [c + x for c, x, _ in want] == direct


@pytest.mark.slow
def test_the_default_tokenizer_takes_the_apart_route_and_agrees() -> None:
    """SmolLM2's real tokenizer (converted locally from the GGUF): cloze pairs of many
    scripts, digits and signs encode apart exactly as jointly."""
    tok = load_model(DEFAULT_MODEL, threads=1).tokenization
    assert tok._splits_at_space
    rng = random.Random(0)
    words = ["Paris", "Zürich", "東京", "Αθήνα", "Москва", "1999", "3.14", "(born", "'s", "$5",
             "O'Neil", "l'été", "-", "...", "«Paris»", "São Paulo", "İzmir", "ʻOumuamua"]
    ctxs = ["was born in", "The capital of", "In 19", "He said:", "x'", "A (", "Price: $",
            "Toronto, Canada", "née", "東京", "end.", "Ok\n", "tab\t"]
    pairs = [split_trailing_whitespace(c, x) for c in ctxs
             for x in [" " + w for w in words] + ["  " + w for w in words] + words]
    rng.shuffle(pairs)
    assert tok.split_many(pairs) == tok.split_joint_many(pairs)


@pytest.mark.parametrize("small_blocks", ["none", "some", "all"])
def test_block_masks_are_the_row_mask_sliced(causal: LoadedModel, small_blocks: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """What each attention block reads: its own mask equals the dense row mask's slice
    (trunk keys, then its own), so the attention sees exactly what it saw before — whether
    the block's mask is built with the small blocks at once, on its own, or both in one row."""
    engine = Engine(causal, attention="segments", batch_tokens=96)
    assert engine.causal is not None and engine.causal.attention_path() == "segments"
    encs = causal.tokenization.causal_pairs([(c, x, False) for c, x in _pairs() if x.strip()])
    p = plan([e.context_ids for e in encs], [e.continuation_ids for e in encs], 96)
    assert len(p.rows) > 1 and any(len(r.blocks) > 1 for r in p.rows)
    assert any(int(b[3]) > int(b[2]) for r in p.rows for b in r.blocks)  # trunks present
    pairs = sorted((int(b[1]) - int(b[0])) * (int(b[3]) - int(b[2]) + int(b[1]) - int(b[0]))
                   for b in p.rows[0].blocks)
    some = pairs[len(pairs) // 2]
    assert pairs[0] <= some < pairs[-1]  # "some": the first row has blocks of both kinds
    monkeypatch.setattr(causal_module, "SMALL_BLOCK",
                        {"none": 0, "some": some, "all": 10**9}[small_blocks])
    for row in p.rows:
        full = engine.causal._row_mask(row)
        segs = engine.causal._block_masks(row)
        for (a, b, t0, t1), m in zip(segs.blocks, segs.masks, strict=True):
            want = torch.cat([full[..., a:b, t0:t1], full[..., a:b, a:b]], dim=-1)
            assert m.dtype == want.dtype and torch.equal(m, want)


def test_mixed_batch_scores_identical_with_cheap_paths_on_and_off(causal: LoadedModel) -> None:
    """Log-probs (with EOS, duplicates, boundary merges), sentences and next-token
    distributions in one batch: every result equal (==, not close) whether pairs are
    tokenized apart or jointly."""
    reqs: list[Request] = [LogProbRequest(c, x) for c, x in
                           ((c, x) for c in CONTEXTS for x in CANDIDATES) if (c + x).strip()
                           and split_trailing_whitespace(c, x)[1].strip()]
    reqs += [LogProbRequest("Lyon is a city in", " France", add_eos=True),
             SpanScoreRequest.marked("Berlin is the capital of Germany.", "Germany"),
             NextTokenRequest("Answer:", top_k=3)]
    reqs += reqs[:5]  # duplicates
    random.Random(1).shuffle(reqs)
    tok = causal.tokenization
    apart = Engine(causal, batch_tokens=128).run(reqs)
    saved = tok._splits_at_space
    tok._splits_at_space = False
    try:
        joint = Engine(causal, batch_tokens=128).run(reqs)
    finally:
        tok._splits_at_space = saved
    assert apart == joint


def test_cache_keys_and_stored_text_unchanged(causal: LoadedModel, tmp_path: Path) -> None:
    """Cache files written before stay valid: a key is the canonical JSON of
    ``dataclasses.asdict(request)`` and a stored result the JSON of ``asdict(result)``, as
    they always were; a batch lookup finds exactly what one query per request found."""
    reqs: list[Request] = [
        LogProbRequest("The capital of France is", " Paris"),
        LogProbRequest("Lyon is a city in", " France", add_eos=True),
        SpanScoreRequest.marked("Berlin is the capital of Germany.", "Germany"),
        NextTokenRequest("Answer:", top_k=3),
        BeamSearchRequest("The capital of France is", num_beams=2, max_new_tokens=2,
                          allowed=(" Paris", " Lyon")),
        GenerateRequest("Answer:", max_new_tokens=2, stop=("\n",)),
        TokenScoresRequest("Paris is the capital of France."),
    ]
    results = Engine(causal).run(reqs)
    for req, res in zip(reqs, results, strict=True):
        old_key = json.dumps([type(req).__name__, dataclasses.asdict(req)], ensure_ascii=False,
                             sort_keys=True)
        assert request_key(req) == old_key
        old = dataclasses.asdict(res)
        old.pop("full_logprobs", None)
        assert _dump(res) == json.dumps(old, ensure_ascii=False)
    cache = ScoreCache(tmp_path / "scores.sqlite")
    cache.put_many("fp", zip(reqs, results, strict=True))
    assert cache._db is not None
    one_by_one = {}
    for req in reqs:
        row = cache._db.execute("SELECT value FROM scores WHERE fingerprint = ? AND key = ?",
                                ("fp", request_key(req))).fetchone()
        if row is not None:
            one_by_one[req] = row[0]
    missing = LogProbRequest("The capital of France is", " Rome")
    got = cache.get_many("fp", [*reqs, missing, NextTokenRequest("Answer:", top_k=None)])
    assert set(got) == set(one_by_one) == set(reqs)
    assert all(got[r] == res for r, res in zip(reqs, results, strict=True)
               if not isinstance(res, NextTokenResult))
    cache.close()
