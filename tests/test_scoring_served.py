"""The ``openai-completions`` backend against a real server the test starts: llama-cpp-python's
OpenAI-compatible server on the default model's GGUF file (``pip install '.[served]'``). Its
log-probs are compared with the local transformers backend on the same file: the server computes
with the Q4_1 weights natively (activations quantized to 8 bits), transformers with the same
weights de-quantized to fp32, so they agree to a tolerance, not exactly (docs/backends.md)."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

from kgprobe.probing.backends import UnsupportedRequest
from kgprobe.probing.backends.served import OpenAICompletions, ServerError
from kgprobe.probing.engine import Engine
from kgprobe.probing.models import REGISTRY, load_model, registry_gguf
from kgprobe.probing.requests import LogProbRequest, LogProbResult, NextTokenRequest

#: a Python that has llama-cpp-python's server: this one when ``[served]`` is installed, else
#: the one this variable names (a separate venv, so the package's build stays optional)
ENV_PYTHON = "KGPROBE_TEST_LLAMA_PYTHON"
#: per-token tolerance (nats) between the server's Q4_1 arithmetic and fp32 transformers;
#: measured largest gap on these prompts: see docs/backends.md
TOKEN_TOL = 0.35
KEY = "test-key-not-a-secret"

PAIRS = [("The capital of France is", " Paris"), ("The capital of France is", " London"),
         ("Berlin is the capital of", " Germany"), ("Albert Einstein was born in", " Ulm"),
         ("The Eiffel Tower is located in", " the city of Paris"),
         ("Water is made of hydrogen and", " oxygen")]


def _server_python() -> str | None:
    if importlib.util.find_spec("llama_cpp") is not None:
        return sys.executable
    return os.environ.get(ENV_PYTHON) or None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    python = _server_python()
    if python is None:
        pytest.skip(f"llama-cpp-python is not installed (pip install '.[served]', or set {ENV_PYTHON})")
    gguf = registry_gguf(REGISTRY["smollm2-135m"])
    port = _free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    # the key reaches the server through its environment (API_KEY), as it reaches kgprobe
    env = {**os.environ, "API_KEY": KEY}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [python, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
             "--port", str(port), "--n_ctx", "512", "--n_threads", "1", "--n_batch", "512",
             "--model_alias", "smollm2-135m-q4_1", "--verbose", "false"],
            stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama-cpp-python server exited: {log.read_text()[-2000:]}")
            try:
                req = urllib.request.Request(f"{base}/models",
                                             headers={"Authorization": f"Bearer {KEY}"})
                with urllib.request.urlopen(req, timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"server did not answer in 180 s: {log.read_text()[-2000:]}")
                time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture()
def keyed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KGPROBE_API_KEY", KEY)


def test_served_logprobs_match_local_transformers(server: str, keyed: None) -> None:
    backend = OpenAICompletions(server)
    assert backend.model == "smollm2-135m-q4_1"  # the first model /v1/models lists
    engine = Engine(backend)
    reqs = [LogProbRequest(c, x) for c, x in PAIRS]
    served = engine.run(reqs)
    assert engine.stats.forward_calls == 1 + len(reqs)  # /models, then one call per prompt
    local = Engine(load_model("smollm2-135m", device="cpu")).run(reqs)
    worst = 0.0
    for req, s, loc in zip(reqs, served, local, strict=True):
        assert isinstance(s, LogProbResult) and isinstance(loc, LogProbResult)
        # the same tokens, text for text (the server's vocabulary is the GGUF's)
        assert "".join(s.tokens) == req.continuation
        assert len(s.token_logprobs) == len(loc.token_logprobs), (s.tokens, loc.tokens)
        for a, b in zip(s.token_logprobs, loc.token_logprobs, strict=True):
            worst = max(worst, abs(a - b))
    print(f"largest per-token gap served vs local fp32: {worst:.4f} nats")
    assert worst < TOKEN_TOL
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
