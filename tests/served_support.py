"""llama-cpp-python's OpenAI-compatible server on the default model's GGUF file, started by a
test on a free loopback port: shared by tests/probing/test_scoring_served.py (the backend) and
tests/cli/test_cli_served.py (the CLI)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kgprobe.probing.models import REGISTRY, registry_gguf

#: a Python that has llama-cpp-python's server: this one when ``[served]`` is installed, else
#: the one this variable names (a separate venv, so the package's build stays optional)
ENV_PYTHON = "KGPROBE_TEST_LLAMA_PYTHON"
#: tolerances (nats) between the server's Q4_1 arithmetic and fp32 transformers on these
#: prompts: the median per-token gap, and the gap 80% of the tokens stay within (measured:
#: median 0.03, 8 of 10 tokens under 0.3, one outlier of 4.5 nats; docs/backends.md)
MEDIAN_TOL = 0.1
TOKEN_TOL = 0.35
KEY = "test-key-not-a-secret"


def _server_python() -> str | None:
    if importlib.util.find_spec("llama_cpp") is not None:
        return sys.executable
    return os.environ.get(ENV_PYTHON) or None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: llama-cpp-python 0.3.36 reads echoed log-probs one position off unless a BOS token starts
#: the prompt, and SmolLM2's GGUF says add_bos_token false: the server is told to prepend one,
#: <|endoftext|> (id 0: what separates SmolLM2's pretraining documents), and the local
#: reference is conditioned on the same token (docs/backends.md)
BOS_FIX = ["--kv_overrides", "tokenizer.ggml.add_bos_token=bool:true",
           "tokenizer.ggml.bos_token_id=int:0"]
BOS_TEXT = "<|endoftext|>"


@contextlib.contextmanager
def _llama_server(log: Path, extra: list[str]) -> Iterator[str]:
    """llama-cpp-python's server on the default model's GGUF, on a free port, until the block
    ends; the API key reaches it through its environment (API_KEY), as it reaches kgprobe."""
    python = _server_python()
    if python is None:
        pytest.skip(f"llama-cpp-python is not installed (make served, or pip install '.[served]', or set {ENV_PYTHON})")
    gguf = registry_gguf(REGISTRY["smollm2-135m"])
    port = _free_port()
    env = {**os.environ, "API_KEY": KEY}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [python, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
             "--port", str(port), "--n_ctx", "512", "--n_threads", "1", "--n_batch", "512",
             "--model_alias", "smollm2-135m-q4_1", "--verbose", "false", *extra],
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
