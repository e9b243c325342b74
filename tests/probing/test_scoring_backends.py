"""The backend contract (one table from request kind to backend) and in-memory models: a backend
is one class, the engine dispatches through its table, an unserved kind is an error naming both;
a transformers model object scores exactly as the same weights loaded from disk, and its
fingerprint follows its weights (DESIGN §3, issue 20 item 2)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from probe_world import REF, load
from tiny_models import TinyModel

from kgprobe.probing.backends import (
    BACKENDS,
    EngineStats,
    ScoringBackend,
    UnsupportedRequest,
    get_backend,
    register_backend,
)
from kgprobe.probing.backends.base import Handler
from kgprobe.probing.cache import ScoreCache
from kgprobe.probing.engine import Engine
from kgprobe.probing.models import LoadedModel, load_model
from kgprobe.probing.requests import (
    BeamSearchRequest,
    GenerateRequest,
    LogProbRequest,
    LogProbResult,
    NextTokenRequest,
    SpanScoreRequest,
    TokenScoresRequest,
)

torch.set_num_threads(1)

REQS = [LogProbRequest(c, x) for c in ("The capital of France is", "Lyon is a city in")
        for x in (" Paris", " France", " the city is old")]


@pytest.fixture(scope="module")
def gpt2_dir(tiny_model: TinyModel) -> Path:
    return tiny_model("gpt2", name="tinygpt")


@pytest.fixture(scope="module")
def gpt2(gpt2_dir: Path) -> LoadedModel:
    return load_model(str(gpt2_dir), device="cpu")


def _objects(path: Path) -> tuple[Any, Any]:
    """The model and tokenizer as a user's own code holds them (plain transformers)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(str(path)), AutoTokenizer.from_pretrained(str(path))


def _naive(lm: LoadedModel, req: LogProbRequest) -> list[float]:
    """One unpadded forward of context+continuation, no packing, no cache."""
    enc = lm.tokenization.causal_pair(req.context, req.continuation, req.add_eos)
    ids = list(enc.context_ids) + list(enc.continuation_ids)
    with torch.no_grad():
        lp = torch.log_softmax(lm.model(torch.tensor([ids])).logits[0].float(), -1)
    n = len(enc.context_ids)
    return [float(lp[n + j - 1, t]) for j, t in enumerate(enc.continuation_ids)]


class NaiveLogProbs(ScoringBackend):
    """A backend written the way a plug-in would be: one class, one kind, its own fingerprint."""

    name = "test-naive"

    def __init__(self, lm: LoadedModel) -> None:
        self.lm = lm
        self.fingerprint = "naive-" + lm.fingerprint
        self.stats = EngineStats()
        self.calls = 0

    def handlers(self) -> Mapping[type, Handler]:
        return {LogProbRequest: self._logprobs}

    def _logprobs(self, reqs: list[LogProbRequest]) -> list[LogProbResult]:
        self.calls += len(reqs)
        out = []
        for r in reqs:
            vals = _naive(self.lm, r)
            out.append(LogProbResult(sum(vals), tuple(vals), (), False))
        return out


def test_hf_backends_declare_their_kinds(gpt2: LoadedModel, tmp_path: Path, tiny_model: TinyModel) -> None:
    assert set(Engine(gpt2).backend.serves()) == {
        LogProbRequest, SpanScoreRequest, NextTokenRequest, BeamSearchRequest, GenerateRequest,
        TokenScoresRequest}  # KaRR's reference scoring: causal models only
    bert = load_model(str(tiny_model("bert")), device="cpu")
    assert set(Engine(bert).backend.serves()) == {LogProbRequest, SpanScoreRequest}
    assert {"hf-causal", "hf-masked", "hf-seq2seq", "openai-completions"} <= set(BACKENDS)


def test_unserved_kind_names_backend_and_kind(tmp_path: Path, tiny_model: TinyModel) -> None:
    bert = load_model(str(tiny_model("bert")), device="cpu")
    engine = Engine(bert)
    with pytest.raises(UnsupportedRequest, match=r"'hf-masked' does not serve NextTokenRequest"):
        engine.run([NextTokenRequest("The capital of France is")])
    t5 = load_model(str(tiny_model("t5")), device="cpu")
    with pytest.raises(UnsupportedRequest, match=r"'hf-seq2seq' does not serve GenerateRequest"):
        Engine(t5).run([GenerateRequest("The capital of France is", max_new_tokens=2)])


def test_a_new_backend_is_one_class(gpt2: LoadedModel, tmp_path: Path) -> None:
    """The engine dedupes, caches and dispatches for any backend; its scores are the local
    causal backend's (both compute the same log-probs, by different code paths)."""
    backend = NaiveLogProbs(gpt2)
    cache = ScoreCache(tmp_path / "scores.sqlite")
    try:
        engine = Engine(backend, cache=cache)
        got = engine.run(REQS + REQS[:2])
        assert backend.calls == len(REQS)  # duplicates computed once
        ref = Engine(gpt2).run(REQS)
        for a, b in zip(got, ref, strict=False):
            assert isinstance(a, LogProbResult) and isinstance(b, LogProbResult)
            assert a.token_logprobs == pytest.approx(b.token_logprobs, abs=1e-4)
        again = Engine(NaiveLogProbs(gpt2), cache=cache)
        assert again.run(REQS) == got[: len(REQS)] and again.stats.cache_hits == len(REQS)
        # an unserved kind in the chunk fails before anything of the chunk is computed
        fresh = NaiveLogProbs(gpt2)
        mixed = [LogProbRequest("Paris is in", " France"), SpanScoreRequest.marked("Paris is big", "big")]
        with pytest.raises(UnsupportedRequest, match=r"'test-naive' does not serve SpanScoreRequest"
                           r" \(it serves: LogProbRequest\)"):
            Engine(fresh).run(mixed)
        assert fresh.calls == 0
    finally:
        cache.close()


def test_register_backend_refuses_a_taken_name() -> None:
    register_backend("test-naive")(NaiveLogProbs)
    assert get_backend("test-naive") is NaiveLogProbs
    with pytest.raises(TypeError, match=r"backend name 'hf-causal' of .*NaiveLogProbs is taken by "
                       r"the built-in backend kgprobe\.probing\.backends\.hf\.HFCausal"):
        register_backend("hf-causal")(NaiveLogProbs)
    del BACKENDS["test-naive"]
    with pytest.raises(Exception, match="unknown backend 'test-naive'"):
        get_backend("test-naive")


def test_in_memory_model_scores_as_loaded_from_disk(gpt2: LoadedModel, gpt2_dir: Path) -> None:
    model, tok = _objects(gpt2_dir)
    engine = Engine(model, tokenizer=tok)
    assert engine.lm is not None and engine.lm.kind == "causal" and engine.lm.dtype == "float32"
    got = engine.run(REQS)
    for req, res in zip(REQS, got, strict=True):
        assert isinstance(res, LogProbResult)
        assert list(res.token_logprobs) == pytest.approx(_naive(gpt2, req), abs=1e-4)
    # the same weights give the same fingerprint; a loaded copy of other weights does not
    model2, tok2 = _objects(gpt2_dir)
    assert Engine(model2, tokenizer=tok2).fingerprint == engine.fingerprint
    with pytest.raises(Exception, match="needs its tokenizer"):
        Engine(model2)


def test_training_step_changes_the_fingerprint_and_the_cache_key(gpt2_dir: Path,
                                                                 tmp_path: Path) -> None:
    """An in-memory model changed by training never gets its earlier weights' cached scores."""
    model, tok = _objects(gpt2_dir)
    cache = ScoreCache(tmp_path / "scores.sqlite")
    try:
        before = Engine(model, tokenizer=tok, cache=cache)
        first = before.run(REQS[:1])[0]
        with torch.no_grad():
            model.get_output_embeddings().weight.mul_(1.5)  # a "training step"
        after = Engine(model, tokenizer=tok, cache=cache)
        assert after.fingerprint != before.fingerprint
        second = after.run(REQS[:1])[0]
        assert after.stats.cache_hits == 0
        assert isinstance(first, LogProbResult) and isinstance(second, LogProbResult)
        assert abs(first.logprob - second.logprob) > 1e-3
        assert after.lm is not None
        assert second.token_logprobs == pytest.approx(_naive(after.lm, REQS[0]), abs=1e-4)
    finally:
        cache.close()


def test_score_takes_a_model_object(gpt2: LoadedModel, gpt2_dir: Path) -> None:
    import kgprobe

    model, tok = _objects(gpt2_dir)
    scored = kgprobe.score("The capital of France is", [" Paris", " the city is old"],
                           model=model, tokenizer=tok)
    by_hand = [sum(_naive(gpt2, LogProbRequest("The capital of France is", c)))
               for c in (" Paris", " the city is old")]
    assert [s.logprob for s in scored] == pytest.approx(by_hand, abs=1e-4)
    assert [s.rank for s in scored] == ([1, 2] if by_hand[0] > by_hand[1] else [2, 1])


def test_probe_takes_a_model_object(graph: Any, gpt2_dir: Path) -> None:
    """probe() on a model object: the same per-fact scores as the same weights by path, under
    the given name, with the object's own fingerprint on the run."""
    from kgprobe.graph import probe_runs as pr
    from kgprobe.probing.run import probe

    load(graph)
    seen: dict[str, dict[Any, Any]] = {"path": {}, "memory": {}}

    def keep(where: str) -> Any:
        def on_fact(plan: Any, values: dict[str, dict[str, Any]]) -> None:
            seen[where][plan.row.get("key") or repr(plan.row)] = {m: v.get("score") for m, v in values.items()}
        return on_fact

    common: dict[str, Any] = {"graph": graph, "strategy": "random", "n": 2, "sample": None,
                              "at": REF, "cache": False, "progress": False, "measures": ("kmin",)}
    by_path = probe(str(gpt2_dir), on_fact=keep("path"), **common)
    model, tok = _objects(gpt2_dir)
    in_memory = probe(model, tokenizer=tok, model_name="tinygpt-mem", on_fact=keep("memory"),
                      **common)
    assert by_path.model_key == "tinygpt" and in_memory.model_key == "tinygpt_mem"
    assert in_memory.scored == by_path.scored > 0
    assert seen["memory"].keys() == seen["path"].keys()
    for k, v in seen["path"].items():
        assert seen["memory"][k]["kmin"] == pytest.approx(v["kmin"], abs=1e-4)
    runs = {r["model_key"]: r for r in pr.list_runs(graph)}
    assert runs["tinygpt_mem"]["model_fingerprint"] == Engine(model, tokenizer=tok).fingerprint
    assert runs["tinygpt_mem"]["model_fingerprint"] != runs["tinygpt"]["model_fingerprint"]
