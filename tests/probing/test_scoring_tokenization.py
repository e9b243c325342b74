"""Tokenization rules (DESIGN §3) and the harness regression cases #1053, #1297, #1455, #3333."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tiny_models import TinyModel

from kgprobe.errors import ConfigError
from kgprobe.probing.engine import Engine
from kgprobe.probing.models import LoadedModel, load_model
from kgprobe.probing.requests import LogProbRequest
from kgprobe.probing.tokenization import Tokenization, split_trailing_whitespace

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def gpt2(tiny_model: TinyModel) -> LoadedModel:
    return load_model(str(tiny_model("gpt2")), device="cpu")


@pytest.fixture(scope="module")
def llama_dir(tiny_model: TinyModel) -> Path:
    return tiny_model("llama")


def test_trailing_whitespace_moves_into_continuation(gpt2: LoadedModel) -> None:
    assert split_trailing_whitespace("The capital is  ", "Paris") == ("The capital is", "  Paris")
    tok = gpt2.tokenization
    a = tok.causal_pair("The capital of France is ", "Paris")
    b = tok.causal_pair("The capital of France is", " Paris")
    assert a == b
    assert tok.tokenizer.decode(list(a.continuation_ids)) == " Paris"


def test_joint_encoding_matches_whole_text(gpt2: LoadedModel) -> None:
    tok = gpt2.tokenization
    enc = tok.causal_pair("The capital of England is", " London.")
    whole = tok.encode("The capital of England is London.")
    assert list(enc.context_ids[-len(whole) + len(enc.continuation_ids):]) == whole[
        : len(whole) - len(enc.continuation_ids)
    ]
    assert list(enc.continuation_ids) == whole[len(whole) - len(enc.continuation_ids):]
    assert not enc.boundary_merged


@pytest.mark.parametrize("context,continuation", [("Ans", "wer"), ("hello wor", "ld")])
def test_token_spanning_the_boundary_is_scored_not_dropped(
    gpt2: LoadedModel, context: str, continuation: str
) -> None:
    """harness #1053/#1297: a token spanning context|continuation left the continuation
    empty and crashed the run. Here the spanning token is scored and flagged."""
    tok = gpt2.tokenization
    whole = tok.encode(context + continuation)
    ctx_alone = tok.encode(context)
    assert whole[: len(ctx_alone)] != ctx_alone  # the case really occurs in this vocabulary
    enc = tok.causal_pair(context, continuation)
    assert enc.boundary_merged and len(enc.continuation_ids) >= 1
    joined = [i for i in enc.context_ids if i != tok.prefix_id] + list(enc.continuation_ids)
    assert joined == whole
    result = Engine(gpt2).run([LogProbRequest(context, continuation)])[0]
    assert result.boundary_merged and result.num_tokens == len(enc.continuation_ids)
    assert torch.isfinite(torch.tensor(result.logprob))


def test_bos_follows_the_tokenizer_and_is_never_doubled(llama_dir: Path) -> None:
    """harness #1455 (Gemma without BOS) and #3333 (BOS added twice)."""
    lm = load_model(str(llama_dir), device="cpu")
    tok = lm.tokenization
    assert tok.add_bos  # this tokenizer's own convention adds <s>
    bos = tok.bos_id
    enc = tok.causal_pair("The capital of France is", " Paris")
    assert enc.context_ids[0] == bos and enc.context_ids.count(bos) == 1
    # a context that already carries the BOS text gets no second one
    enc2 = tok.causal_pair("<s>The capital of France is", " Paris")
    assert enc2.context_ids.count(bos) == 1 and enc2.context_ids[0] == bos
    # empty context: BOS alone conditions the continuation
    assert tok.causal_pair("", "Paris").context_ids == (bos,)
    never = load_model(str(llama_dir), device="cpu", bos_policy="never")
    assert never.tokenization.causal_pair("The capital", " is").context_ids[0] != bos
    assert never.fingerprint != lm.fingerprint  # the policy changes scores, so the identity
    with_bos = Engine(lm).run([LogProbRequest("The capital of France is", " Paris")])[0]
    without = Engine(never).run([LogProbRequest("The capital of France is", " Paris")])[0]
    assert abs(with_bos.logprob - without.logprob) > 1e-4


def test_always_policy_prepends_bos_for_gpt2(gpt2: LoadedModel) -> None:
    tok = Tokenization(gpt2.tokenizer, bos_policy="always")
    enc = tok.causal_pair("The capital", " is")
    assert enc.context_ids[0] == gpt2.tokenizer.bos_token_id
    assert Tokenization(gpt2.tokenizer, bos_policy="auto").add_bos is False
    with pytest.raises(ConfigError):
        Tokenization(gpt2.tokenizer, bos_policy="sometimes")  # type: ignore[arg-type]


def test_eos_is_appended_when_asked(gpt2: LoadedModel) -> None:
    tok = gpt2.tokenization
    plain = tok.causal_pair("The capital of France is", " Paris")
    eos = tok.causal_pair("The capital of France is", " Paris", add_eos=True)
    assert eos.continuation_ids == plain.continuation_ids + (gpt2.tokenizer.eos_token_id,)
    r_plain, r_eos = Engine(gpt2).run([
        LogProbRequest("The capital of France is", " Paris"),
        LogProbRequest("The capital of France is", " Paris", add_eos=True),
    ])
    assert r_eos.token_logprobs[:-1] == pytest.approx(r_plain.token_logprobs, abs=1e-5)
    assert r_eos.logprob < r_plain.logprob


def test_long_context_is_cut_from_the_left_only_when_asked(gpt2: LoadedModel) -> None:
    """Issue 22: a context too long for the model is an error, never a silent cut (it would
    drop the subject); FACTOR's --max-length asks for the cut (truncate_left)."""
    tok = gpt2.tokenization
    assert tok.max_length == 64
    with pytest.raises(ConfigError, match="never cuts a context silently"):
        tok.causal_pair("the city is old. " * 40, " Paris")
    with pytest.raises(ConfigError, match="never cuts a context silently"):
        Engine(gpt2).run([LogProbRequest("the city is old. " * 40, " Paris")])
    tok.truncate_left = True
    try:
        enc = tok.causal_pair("the city is old. " * 40, " Paris")
        assert len(enc.context_ids) + len(enc.continuation_ids) == 64
        r = Engine(gpt2).run([LogProbRequest("the city is old. " * 40, " Paris")])[0]
        assert torch.isfinite(torch.tensor(r.logprob))
    finally:
        tok.truncate_left = False
    with pytest.raises(ConfigError):
        tok.causal_pair("a", " Paris" * 80)


def test_empty_continuation_is_refused() -> None:
    with pytest.raises(ConfigError):
        LogProbRequest("The capital", "")
