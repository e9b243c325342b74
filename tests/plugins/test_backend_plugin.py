"""Issue 39 items 1-2 for scoring backends: the `kgprobe.backends` entry-point group is loaded
from the CLI, and a backend from outside the package (examples/kgprobe-letters, a letter-frequency
baseline, pip-installed into a temporary folder) scores `kgprobe probe --backend letters` on the
bundled demo graph; every stored score is recomputed by hand from the object's label."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cli_support import kgprobe
from plugin_support import install_example, with_path

from kgprobe.graph import probe_runs as pr

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "kgprobe-letters"
CORPUS = "abracadabra"
AT = "2025-01-01"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_example(tmp_path_factory, "kgprobe-letters")


def by_hand(label: str) -> float:
    """The baseline's definition for the corpus "abracadabra" (a 5, b 2, r 2, c 1, d 1: eleven
    letters, 27 symbols): each character of the label that is not a space has probability
    (count + 1) / 38, its case ignored, every character outside a-z counted as one symbol
    that the corpus never holds."""
    counts = Counter({"a": 5, "b": 2, "r": 2, "c": 1, "d": 1})
    return math.prod((counts[c.lower()] + 1) / 38 for c in label if not c.isspace())


def test_by_hand_is_what_the_docstring_says() -> None:
    """Paris: p 1/38, a 6/38, r 3/38, i 1/38, s 1/38."""
    assert by_hand("Paris") == pytest.approx(18 / 38**5)
    assert by_hand("Abra Cadabra") == pytest.approx(6**5 * 3**2 * 3**2 * 2 * 2 / 38**11)


def test_installed_backend_through_probe_on_the_demo_graph(graph: Any, kgprobe_env: dict[str, str],
                                                          site: Path) -> None:
    """Not installed: `--backend letters` is one line, exit 2. Installed (entry point of
    `kgprobe.backends`): `kgprobe plugins` and `kgprobe models` list it with its origin and its
    `--model-arg` key, and `kgprobe probe --backend letters --model-arg corpus=abracadabra` on
    the demo graph stores, per fact of P36, the probability of the object's label (one label,
    the same on every cloze sentence since the baseline ignores the context) as computed by
    hand; the run records the backend."""
    from kgprobe.graph.ingest import ingest
    from kgprobe.graph.templates import demo_paths, import_own_templates
    from kgprobe.loaders.wikidata_json import load_json

    graph.write("MATCH (n) DETACH DELETE n")
    ingest(graph, load_json(demo_paths()[0]))
    import_own_templates(graph)
    args = ["probe", "--backend", "letters", "--model-arg", f"corpus={CORPUS}", "--measure",
            "probability", "-r", "P36", "--sample", "0", "--at", AT, "--max-labels", "1",
            "--no-cache", "--json"]
    before = kgprobe(*args, env=kgprobe_env)
    assert before.returncode == 2
    assert before.stderr.startswith("error: unknown backend 'letters'; choose from: hf-causal, ")
    assert len(before.stderr.strip().splitlines()) == 1

    env = with_path(kgprobe_env, site)
    origin = "entry point letters = kgprobe_letters of kgprobe-letters 0.1.0 (kgprobe.backends)"
    listed = json.loads(kgprobe("plugins", "--json", env=env).stdout)["plugins"]
    assert [p["origin"] for p in listed if (p["kind"], p["name"]) == ("backend", "letters")] == [origin]
    models = json.loads(kgprobe("models", "--json", env=env).stdout)["backends"]
    assert [(b["origin"], b["arguments"]) for b in models if b["name"] == "letters"] == [
        (origin, ["corpus=The quick brown fox jumps over the lazy dog."])]

    r = kgprobe(*args, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["score_properties"] == ["score__letters__probability_o1"]
    rows = graph.read("MATCH (s:Entity)-[f:FACT {pid: 'P36'}]->(o:Entity) "
                      "WHERE f.score__letters__probability_o1 IS NOT NULL "
                      "RETURN o.label AS label, f.score__letters__probability_o1 AS score")
    assert len(rows) >= 10
    for row in rows:
        assert row["score"] == pytest.approx(by_hand(row["label"]), rel=1e-9), row
    run = [x for x in pr.list_runs(graph) if x.get("model_key") == "letters"]
    assert run and run[0]["model_kind"] == "letters"


def test_the_docs_example_is_the_package() -> None:
    """docs/backends.md shows the example package's module and pyproject.toml as they are."""
    doc = (REPO / "docs" / "backends.md").read_text(encoding="utf-8")
    part = doc.split("### Worked example: a backend from another package", 1)[1].split("\n## ", 1)[0]
    for path in (EXAMPLE / "kgprobe_letters" / "__init__.py", EXAMPLE / "pyproject.toml"):
        assert path.read_text(encoding="utf-8") in part, path
