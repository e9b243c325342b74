"""Issue 39 items 1-2 for distractor strategies: random, sem, temp+sem and appropt are entries
of one registry (`kgprobe.probing.strategies.STRATEGIES`, entry-point group
`kgprobe.strategies`), and a strategy from outside the package (examples/kgprobe-shortest,
pip-installed into a temporary folder) is used by `kgprobe distractors -s NAME` and
`kgprobe probe --strategy NAME`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import clean_env, kgprobe
from distractor_world import ADAMS, BACH, CURIE, OBAMA, USA
from distractor_world import load as load_distractor_world
from plugin_support import install_example, with_path
from probe_world import REF
from probe_world import load as load_probe_world
from tiny_models import TinyModel

from kgprobe.errors import ConfigError
from kgprobe.probing.strategies import BUILTIN, STRATEGIES, DistractorStrategy, strategy_class

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "kgprobe-shortest"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_example(tmp_path_factory, "kgprobe-shortest")


def test_the_built_in_strategies_are_the_registry() -> None:
    """The four built-ins, what each needs, and one line for an unknown name."""
    assert BUILTIN == ("random", "sem", "temp+sem", "appropt") and list(STRATEGIES)[:4] == list(BUILTIN)
    needs = {n: (strategy_class(n).needs_index, strategy_class(n).needs_model) for n in BUILTIN}
    assert needs == {"random": (False, False), "sem": (True, False), "temp+sem": (True, False),
                     "appropt": (False, True)}
    assert all(issubclass(strategy_class(n), DistractorStrategy) for n in BUILTIN)
    with pytest.raises(ConfigError, match=r"^unknown distractor strategy 'nearest'; choose from: "
                                          r"random, sem, temp\+sem, appropt"):
        strategy_class("nearest")


def test_installed_strategy_through_distractors_and_probe(graph: Any, kgprobe_env: dict[str, str],
                                                        site: Path, tmp_path: Path, tiny_model: TinyModel) -> None:
    """Not installed: one line, exit 2. Installed: listed by `kgprobe plugins`, and
    `kgprobe distractors -s shortest` gives the members of Ω(f) by label length, read by eye:
    the humans who are no object of (USA, P35) — Marie Curie (11 characters), Douglas Adams
    (13), Johann Sebastian Bach (21); the impersonator's label clashes with Obama's and one human
    has no label. `kgprobe probe --strategy shortest` scores with it."""
    load_distractor_world(graph)
    args = ["distractors", USA, "P35", "--object", OBAMA, "-s", "shortest", "-n", "5", "--at", REF, "--json"]
    before = kgprobe(*args, env=kgprobe_env)
    assert before.returncode == 2
    assert before.stderr.startswith("error: unknown distractor strategy 'shortest'; choose from: ")
    assert len(before.stderr.strip().splitlines()) == 1

    env = with_path(kgprobe_env, site)
    listed = json.loads(kgprobe("plugins", "--json", env=env).stdout)["plugins"]
    assert list(dict.fromkeys(p["kind"] for p in listed)) == ["measure", "backend", "loader",
                                                              "distractor strategy", "report section",
                                                              "graph server", "template format"]
    assert [(p["name"], p["origin"]) for p in listed if p["kind"] == "distractor strategy"] == [
        ("random", "built-in"), ("sem", "built-in"), ("temp+sem", "built-in"), ("appropt", "built-in"),
        ("shortest", "entry point shortest = kgprobe_shortest of kgprobe-shortest 0.1.0 (kgprobe.strategies)")]

    r = kgprobe(*args, env=env)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["strategy"] == "shortest"
    assert [(d["rank"], d["qid"], d["reason"]) for d in got["distractors"]] == [
        (1, CURIE, "short label"), (2, ADAMS, "short label"), (3, BACH, "short label")]
    assert got["reason"] == "Ω(f) has only 3 members"

    graph.write("MATCH (n) DETACH DELETE n")
    load_probe_world(graph)
    gpt2 = tiny_model("gpt2")
    r = kgprobe("probe", "--model", str(gpt2), "--measure", "kmin", "--strategy", "shortest", "-n", "2",
                "-r", "P36", "--sample", "0", "--at", REF, "--no-cache", "--json", env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["score_properties"] == ["score__gpt2__kmin_shortest_n2"]
    rows = graph.read("MATCH ()-[f:FACT]->() WHERE f.score__gpt2__kmin_shortest_n2 IS NOT NULL "
                      "RETURN count(f) AS n")
    assert rows[0]["n"] >= 3


def test_a_bad_strategy_plugin_is_one_line(tmp_path: Path) -> None:
    """A plug-in strategy that takes a built-in's name: one line naming both, exit 2."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "random_again.py").write_text(
        "from kgprobe.probing.strategies import STRATEGIES, DistractorStrategy\n\n\n"
        "@STRATEGIES.register\nclass Mine(DistractorStrategy):\n    name = 'random'\n"
        "    summary = 'mine'\n\n    def find(self, graph, ctx, n, search):\n        return [], None\n")
    env = clean_env()
    env = with_path({**env, "KGPROBE_HOME": str(tmp_path / "home")}, mods)
    r = kgprobe("--plugin", "random_again", "distractors", "Q30", "P35", "-s", "random", env=env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: plugin module random_again: TypeError: distractor strategy name "
                               "'random' of random_again.Mine is taken by ")
    assert "RandomStrategy" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "home" / "server.json").exists()


def test_the_docs_example_is_the_package() -> None:
    """docs/distractors.md shows the example package's module and pyproject.toml as they are."""
    doc = (REPO / "docs" / "distractors.md").read_text(encoding="utf-8")
    part = doc.split("### Worked example: adding a strategy", 1)[1].split("\n## ", 1)[0]
    for path in (EXAMPLE / "kgprobe_shortest" / "__init__.py", EXAMPLE / "pyproject.toml"):
        assert path.read_text(encoding="utf-8") in part, path
