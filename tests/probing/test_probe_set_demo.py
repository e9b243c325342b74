"""The probe set shipped with kgprobe (issue 42 #5): ``kgprobe probe --set demo`` scores the
default model with no graph at all, and the shipped file is one this kgprobe scores."""

from __future__ import annotations

import fnmatch
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from test_probe_sets import OFFLINE, _offline_env

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "kgprobe" / "data" / "demo-set.parquet"


def test_the_shipped_demo_set_is_current_small_and_packaged() -> None:
    """The file is read by this kgprobe (its schema, its content hash) and was exported for
    this kgprobe's scoring code (the measures' and verbalizer's versions), with the documented
    options: else ``probe --set demo`` would refuse it, and scripts/build_demo_set.py must be
    run again. It stays small and is in the package data."""
    from kgprobe.api import DEMO_FACTS_PER_RELATION, DEMO_RELATIONS, DEMO_SET_AT
    from kgprobe.probing.probe_set import SET_SCHEMA, measure_versions, read_set

    pset = read_set("demo")
    assert pset.path.resolve() == SHIPPED.resolve()
    assert pset.header["schema"] == SET_SCHEMA
    config = pset.config("smollm2-135m", "float32", None)
    assert pset.header["scoring"] == measure_versions(config), "run scripts/build_demo_set.py"
    assert tuple(config.relations) == DEMO_RELATIONS and config.per_relation == DEMO_FACTS_PER_RELATION
    assert config.at == DEMO_SET_AT and config.seed == 0 and config.history_first
    assert len(pset.rows) == len(DEMO_RELATIONS) * DEMO_FACTS_PER_RELATION
    assert all(r["subject_label"] and r["object_label"] for r in pset.rows)
    assert SHIPPED.stat().st_size < 1_000_000
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["kgprobe"]
    assert any(fnmatch.fnmatch("data/demo-set.parquet", pattern) for pattern in data)


@pytest.mark.slow
def test_probe_set_demo_scores_the_default_model_with_no_graph(tmp_path: Path) -> None:
    """One command, no graph server, no Java, no network: the default model (SmolLM2-135M)
    scored on the shipped set, with the report files."""
    env = _offline_env(tmp_path)
    out = tmp_path / "demo-out"
    done = subprocess.run([sys.executable, "-c", OFFLINE, "probe", "--set", "demo", "--output-path",
                           str(out), "--no-cache", "--json"],
                          capture_output=True, text=True, env=env, timeout=1200)
    assert "VIOLATION" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr
    assert not Path(env["KGPROBE_HOME"]).exists()  # no managed server home was made
    summary = json.loads(done.stdout)
    assert summary["model"] == "smollm2-135m" and summary["scored"] >= 50
    doc = json.loads((out / "results.json").read_text())
    model = doc["models"][0]
    assert model["model_key"] == "smollm2_135m" and model["overall"]["n"] == summary["scored"]
    assert set(model["results"]) == {"P27", "P17", "P36", "P26", "P39", "P54"}
    # the demo's contrast (README): the default model knows the country of a place well
    assert model["results"]["P17"]["known_share"] >= 0.7
    assert (out / "scores.parquet").is_file() and (out / "report.html").is_file()
