"""Issue 40 item 7, the consistent interface, through the real CLI on a real graph with a tiny
real model: ``probe --dry-run`` previews and touches nothing, ``probe`` ends with the mean score
per relation of what it scored, the same option has the same default everywhere, the Python
API takes the CLI's option names, and ``--help`` has an example and plain metavars."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from _scoring_models import build
from probe_world import REF, load
from test_cli_graph import kgprobe

torch.set_num_threads(1)
COMMON = ["--strategy", "random", "-n", "2", "--at", REF, "--sample", "0", "--no-cache"]


def _ok(args: list[str], env: dict[str, str]) -> Any:
    r = kgprobe(*args, env=env, timeout=600)
    assert r.returncode == 0, (args, r.stderr)
    return r


def _written(graph: Any) -> dict[str, int]:
    """What a probe leaves in the graph: run records, model keys, scored facts."""
    runs = graph.read("MATCH (r:ProbeRun) RETURN count(r) AS n")[0]["n"]
    keys = graph.read("MATCH (k:ModelKey) RETURN count(k) AS n")[0]["n"]
    return {"runs": int(runs), "keys": int(keys)}


def test_dry_run_previews_and_touches_nothing_then_probe_summarizes(
        graph: Any, kgprobe_env: dict[str, str], tmp_path: Path) -> None:
    load(graph)
    env = kgprobe_env
    gpt2 = str(build("gpt2", tmp_path / "gpt2"))
    args = ["probe", "--model", gpt2, "-r", "P35", "-r", "P36", *COMMON]
    before = _written(graph)
    dry = json.loads(_ok([*args, "--dry-run", "--json"], env).stdout)
    text = _ok([*args, "--dry-run"], env).stdout
    assert _written(graph) == before  # no ProbeRun, no ModelKey
    assert not graph.read("MATCH ()-[f:FACT]->() WHERE f.score__gpt2__kmin_random_n2 IS NOT NULL "
                          "RETURN f.key AS k")
    assert dry["status"] == "dry run" and dry["scored"] == 0
    # one rendered prompt per relation for the measure: the template with the subject's label,
    # and the object's label as the continuation
    prompts = dry["prompts"]["kmin_random_n2"]
    assert len(prompts) == 2
    assert prompts[0].startswith('P35: "The head of state of') or prompts[0].startswith('P35: "Who is')
    assert prompts[1].startswith('P36: "The capital of ')
    assert f"dry run: {dry['planned']} facts would be probed" in " ".join(text.split())
    assert "nothing was scored or written (dry run)" in text

    # the real probe samples what the dry run said, relation by relation
    out = _ok(args, env).stdout
    done = json.loads(_ok([*args, "--force", "--json"], env).stdout)
    assert done["planned"] == dry["planned"]
    assert {r["relation"]: r["n"] + r["unscorable"] for r in done["by_relation"]} == \
        {p: n for p, n in dry["planned_by_relation"].items() if n}
    assert done["summary_measure"] == "kmin_random_n2"
    # the means printed are those of the scores stored on the graph (read back independently)
    facts = json.loads(_ok(["unknown", "--model", "gpt2", "--threshold", "1e9", "--json"], env).stdout)
    by: dict[str, list[float]] = {}
    for f in facts:
        by.setdefault(f["pid"], []).append(f["score"])
    flat = " ".join(out.split())
    assert "scored by this run (kmin_random_n2)" in flat
    for pid, scores in by.items():
        mean = sum(scores) / len(scores)
        assert re.search(rf"{pid} +[│|]? *{len(scores)} +[│|]? *{mean:.3f}", flat), (pid, mean, out)
        row = next(r for r in done["by_relation"] if r["relation"] == pid)
        assert row["n"] == len(scores) and row["mean"] == pytest.approx(mean, abs=1e-9)
    # nothing new to score: said so, not an empty table
    again = _ok(args, env).stdout
    assert "nothing newly scored under kmin_random_n2" in again


def test_dry_run_beside_a_probe_set_is_one_line(kgprobe_env: dict[str, str], tmp_path: Path) -> None:
    r = kgprobe("probe", "--set", str(tmp_path / "x.parquet"), "--output-path", str(tmp_path / "o"),
                "--dry-run", env=kgprobe_env)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "--dry-run" in r.stderr
