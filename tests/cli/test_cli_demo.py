"""Issue 40 item 8: the demo keeps its promise. Run through the real CLI on the bundled demo
graph with a tiny real model: every relation the demo shows has its 10 scored facts (an
unscorable fact is replaced by the next one drawn with the same seed) and so its interval, the
report's title names the model, and ``--no-cache`` leaves the score cache alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from cli_support import kgprobe
from tiny_models import TinyModel

from kgprobe.api import DEMO_RELATIONS

torch.set_num_threads(1)


def test_demo_shows_ten_scored_facts_per_relation_and_names_the_model(
        graph: Any, kgprobe_env: dict[str, str], tmp_path: Path, tiny_model: TinyModel) -> None:
    gpt2 = str(tiny_model("gpt2", positions=256, name="tiny-gpt2"))
    cache = tmp_path / "scores.sqlite"
    env = {**kgprobe_env, "KGPROBE_SCORE_CACHE": str(cache)}
    # the user's folder: its name is text, never Rich markup, and its line is never wrapped
    out = tmp_path / ("a folder whose name is long enough to wrap an 80-column line " * 2 + "[bold]report[/bold]")
    r = kgprobe("demo", "-m", gpt2, "--no-cache", "--json", "--out", str(out), env=env, timeout=1500)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    groups = {g["key"]: g for g in doc["report"]["primary"]["relations"]}
    assert set(groups) == set(DEMO_RELATIONS)
    for pid, g in groups.items():
        assert g["facts"] == 10, (pid, g)
        assert g["ci_low"] is not None and g["ci_high"] is not None, pid
    # the raw wording is compared on the same facts
    raw = {g["key"]: g["facts"] for g in doc["report"]["other"]["relations"]}
    assert raw == dict.fromkeys(DEMO_RELATIONS, 10)
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "<title>kgprobe report: tiny-gpt2</title>" in page
    assert "<h1>What tiny-gpt2 knows: careful vs raw labels</h1>" in page
    assert not cache.exists()  # --no-cache: neither read nor written
    # the text (a second demo scores nothing new): the graph's counts, the report, its files
    # COLUMNS=80, as on a terminal of 80 columns (and as pytest-xdist's workers have it): Rich
    # must not break the paths' line (a user copies it)
    again = kgprobe("demo", "-m", gpt2, "--no-cache", "--out", str(out), env={**env, "COLUMNS": "80"},
                    timeout=1500)
    assert again.returncode == 0, again.stderr
    counts = doc["graph"]
    assert (f"{counts['entities']:,} entities, {counts['facts']:,} facts ({counts['temporal_facts']:,} dated) "
            f"over {len(counts['per_relation'])} relations; {counts['templates']} templates") in again.stdout
    assert f"report: {out / 'report.html'}; results: {out / 'results.json'}" in again.stdout
