"""The ``openai-completions`` backend against a real server the test starts: llama-cpp-python's
OpenAI-compatible server on the default model's GGUF file (``pip install '.[served]'``). Its
log-probs are compared with the local transformers backend on the same file: the server computes
with the Q4_1 weights natively (activations quantized to 8 bits), transformers with the same
weights de-quantized to fp32, so they agree to a tolerance, not exactly (docs/backends.md)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from served_support import BOS_FIX, BOS_TEXT, KEY, MEDIAN_TOL, TOKEN_TOL, _free_port, _llama_server

from kgprobe.errors import ConfigError
from kgprobe.probing.backends import UnsupportedRequest
from kgprobe.probing.backends.served import OpenAICompletions, ServerError
from kgprobe.probing.engine import Engine
from kgprobe.probing.models import load_model
from kgprobe.probing.requests import LogProbRequest, LogProbResult, NextTokenRequest

PAIRS = [("The capital of France is", " Paris"), ("The capital of France is", " London"),
         ("Berlin is the capital of", " Germany"), ("Albert Einstein was born in", " Ulm"),
         ("The Eiffel Tower is located in", " the city of Paris"),
         ("Water is made of hydrogen and", " oxygen")]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with _llama_server(tmp_path_factory.mktemp("llama") / "server.log", BOS_FIX) as base:
        yield base


@pytest.fixture()
def keyed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGPROBE_API_KEY", KEY)


def test_served_logprobs_match_local_transformers(server: str, keyed: None) -> None:
    backend = OpenAICompletions(server)
    assert backend.model == "smollm2-135m-q4_1"  # the first model /v1/models lists
    engine = Engine(backend)
    reqs = [LogProbRequest(c, x) for c, x in PAIRS]
    served = engine.run(reqs)
    # /models and the alignment check, then one call per prompt
    assert engine.stats.forward_calls == 2 + len(reqs)
    local = Engine(load_model("smollm2-135m", device="cpu")).run(
        [LogProbRequest(BOS_TEXT + r.context, r.continuation) for r in reqs])
    gaps: list[float] = []
    for req, s, loc in zip(reqs, served, local, strict=True):
        assert isinstance(s, LogProbResult) and isinstance(loc, LogProbResult)
        # the same tokens, text for text (the server's vocabulary is the GGUF's)
        assert "".join(s.tokens) == req.continuation
        assert len(s.token_logprobs) == len(loc.token_logprobs), (s.tokens, loc.tokens)
        gaps += [abs(a - b) for a, b in zip(s.token_logprobs, loc.token_logprobs, strict=True)]
    gaps.sort()
    print(f"per-token gap served vs local fp32 over {len(gaps)} tokens: median "
          f"{gaps[len(gaps) // 2]:.4f}, largest {gaps[-1]:.4f} nats")
    assert gaps[len(gaps) // 2] < MEDIAN_TOL
    assert sum(g < TOKEN_TOL for g in gaps) >= 0.8 * len(gaps)
    # the ranking of the two candidates of one context is the local one
    assert (served[0].logprob > served[1].logprob) == (local[0].logprob > local[1].logprob)


def test_served_batch_concurrency_and_kinds(server: str, keyed: None) -> None:
    one = Engine(OpenAICompletions(server)).run([LogProbRequest(c, x) for c, x in PAIRS])
    many = Engine(OpenAICompletions(server, concurrency=3)).run(
        [LogProbRequest(c, x) for c, x in PAIRS])
    assert many == one  # deterministic server, order kept with parallel calls
    with pytest.raises(UnsupportedRequest,
                       match=r"'openai-completions' does not serve NextTokenRequest"):
        Engine(OpenAICompletions(server)).run([NextTokenRequest("The capital of France is")])
    with pytest.raises(Exception, match="end-of-sequence"):
        Engine(OpenAICompletions(server)).run([LogProbRequest("Paris is in", " France", True)])


def test_served_key_from_the_environment_only(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KGPROBE_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ServerError, match="HTTP 401") as no_key:
        OpenAICompletions(server, retries=2, backoff=0.01)
    assert "1 attempt" in str(no_key.value)  # a refusal is not retried
    monkeypatch.setenv("OPENAI_API_KEY", "wrong-" + KEY)
    with pytest.raises(ServerError) as wrong:
        OpenAICompletions(server, retries=0)
    assert KEY not in str(wrong.value)  # the key never appears in an error
    monkeypatch.setenv("KGPROBE_API_KEY", KEY)  # KGPROBE_API_KEY wins over OPENAI_API_KEY
    assert OpenAICompletions(server).model == "smollm2-135m-q4_1"


def test_a_misaligned_server_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same server without a BOS token: its echoed log-probs are one position off, and
    the backend refuses it before scoring anything."""
    monkeypatch.setenv("KGPROBE_API_KEY", KEY)
    with _llama_server(tmp_path / "raw.log", []) as base:
        with pytest.raises(ConfigError, match="one token off"):
            OpenAICompletions(base)
        # what the check guards against: " Paris" after "The capital of France is" read off
        # that server is far from the model's value (-0.26 nats locally)
        raw = OpenAICompletions(base, check_alignment=False)
        got = Engine(raw).run([LogProbRequest("The capital of France is", " Paris")])[0]
        local = Engine(load_model("smollm2-135m", device="cpu")).run(
            [LogProbRequest("The capital of France is", " Paris")])[0]
        assert isinstance(got, LogProbResult) and isinstance(local, LogProbResult)
        assert abs(got.logprob - local.logprob) > 1.0


def test_unreachable_server_is_retried_then_one_clear_error() -> None:
    port = _free_port()  # nothing listens there
    t0 = time.monotonic()
    with pytest.raises(ServerError, match=r"failed after 3 attempt\(s\)"):
        OpenAICompletions(f"http://127.0.0.1:{port}/v1", retries=2, backoff=0.2, timeout=2)
    assert time.monotonic() - t0 >= 0.2 + 0.4  # the backoff really waited


def test_served_fingerprint_names_model_and_identity(server: str, keyed: None) -> None:
    a = OpenAICompletions(server)
    b = OpenAICompletions(server, identity="sha256:abc")
    assert a.fingerprint != b.fingerprint
    assert OpenAICompletions(server.replace("127.0.0.1", "localhost"), identity="sha256:abc"
                             ).fingerprint == b.fingerprint


def test_probe_through_a_served_model(server: str, keyed: None, graph: Any) -> None:
    """A whole probe run on the served model: the run records the backend as the model's kind,
    every planned fact gets a score, and a re-run skips them."""
    from probe_world import REF, load

    from kgprobe.graph import probe_runs as pr
    from kgprobe.probing.run import probe

    load(graph)
    # one relation with one template: a few dozen prompts, one HTTP call each
    common: dict[str, Any] = {"graph": graph, "strategy": "random", "n": 2, "sample": None,
                              "at": REF, "cache": False, "progress": False,
                              "measures": ("kavg",), "relations": ("P36",)}
    served: dict[str, float] = {}

    def on_fact(plan: Any, values: dict[str, dict[str, Any]]) -> None:
        if values["kavg"].get("score") is not None:
            served[str(plan.row.get("key"))] = float(values["kavg"]["score"])

    summary = probe(OpenAICompletions(server), model_name="smollm2-served", on_fact=on_fact,
                    **common)
    assert summary.model_key == "smollm2_served" and summary.scored > 0
    run = next(r for r in pr.list_runs(graph) if r["model_key"] == "smollm2_served")
    assert run["model_kind"] == "openai-completions" and run["device"] == "served"
    assert len(served) == summary.scored and all(0 <= v <= 1 for v in served.values())
    # a second run is answered from the graph: nothing is asked of the server again
    again = probe(OpenAICompletions(server), model_name="smollm2-served", **common)
    assert again.scored == 0 and again.skipped == summary.scored
