"""Typed measure values (issue 39, step 7): a measure's outcome on a fact is a ``MeasureValue``
(score, reason it was not scored, details, stored values); a plug-in's plain dicts become one
at the loop's one boundary (``registry.checked_values``), their ``_reason``/``_details`` keys
honoured, and the values still read as the dicts an ``on_fact`` callback was written for."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from probe_world import REF, load
from tiny_models import TinyModel

from kgprobe.graph import probe_runs as pr
from kgprobe.probing.config import ProbeConfig
from kgprobe.probing.measures.common import Entity, Runner
from kgprobe.probing.measures.registry import (
    REGISTRY,
    FactInput,
    Measure,
    RunContext,
    Values,
    register,
)
from kgprobe.probing.run import run_probe
from kgprobe.reports.results import FactDetails

torch.set_num_threads(1)


class LabelLength(Measure):
    """An outside measure as a plug-in writes one: plain dicts, the old private keys. Scores
    facts of P36 by the object label's length / 100 (with details), refuses the others."""

    name = "labellen"
    section = "test plug-in"
    summary = "object label length / 100 on P36"
    extras = ("chars",)

    def score(self, runner: Runner, facts: Sequence[FactInput], ctx: RunContext) -> list[Values]:
        return [{"score": len(f.object.label) / 100, "chars": len(f.object.label), "known": True,
                 "_details": {"templates": ["own"], "clozes": None, "distractors": None}}
                if f.pid == "P36" else {"score": None, "_reason": f"not a capital: {f.pid}"}
                for f in facts]


def test_plain_dicts_become_measure_values_at_the_boundary() -> None:
    from kgprobe.probing.measures.registry import MeasureValue, checked_values

    facts = [FactInput(f"Q{i}${pid}", pid, Entity("s"), Entity("o"), ())
             for i, pid in enumerate(("P36", "P27", "P36"))]
    given = [{"score": np.float32(0.25), "chars": 3, "known": False},
             {"score": None, "_reason": "no cloze", "_details": {"clozes": []}},
             MeasureValue(1.0, stored={"chars": 2})]
    out = checked_values(LabelLength(), facts, given)
    assert [type(v) for v in out] == [MeasureValue] * 3
    assert (out[0].score, type(out[0].score), out[0].reason) == (0.25, float, None)
    assert out[0].stored == {"chars": 3, "known": False}
    assert (out[1].score, out[1].reason, out[1].details, out[1].stored) == (None, "no cloze", {"clozes": []}, {})
    assert out[2] is given[2]
    # read as the dict it came from: an on_fact callback written for dicts keeps working
    assert out[1] == {"score": None, "_reason": "no cloze", "_details": {"clozes": []}}
    assert out[0].get("score") == 0.25 and out[0]["known"] is False and "_reason" not in out[0]


@pytest.fixture(scope="module")
def engine(tiny_model: TinyModel) -> tuple[Path, Any]:
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.models import load_model

    path = tiny_model("gpt2")
    return path, Engine(load_model(str(path)))


def test_a_plugins_reason_and_details_are_honoured(graph: Any, engine: tuple[Path, Any], tmp_path: Path) -> None:
    from kgprobe.probing.measures.registry import MeasureValue
    from kgprobe.probing.semantic import IndexSettings, ensure_index

    path, eng = engine
    load(graph)
    index = ensure_index(graph, tmp_path / "index", IndexSettings(dim=8, seed=0))
    seen: dict[str, Any] = {}
    details = FactDetails()

    def on_fact(plan: Any, values: dict[str, Any]) -> None:
        details(plan, values)
        seen[plan.row["key"]] = values["labellen"]

    register(LabelLength)
    try:
        cfg = ProbeConfig(model=str(path), sample=None, n=2, at=REF, batch_facts=4, strategy="random",
                          measures=("labellen",), relations=("P36", "P27"))
        s = run_probe(graph, eng, cfg, fingerprint=eng.fingerprint, index=index, progress=False,
                      on_fact=on_fact)
    finally:
        REGISTRY.pop("labellen", None)
    rows = {r["key"]: r for r in graph.read(
        "MATCH ()-[f:FACT]->() WHERE f.key IN $keys RETURN f.key AS key, f.pid AS pid, "
        "f.score__gpt2__labellen AS score, f.score__gpt2__labellen_chars AS chars, "
        "f.known__gpt2__labellen AS known", keys=s.fact_keys)}
    p36 = [k for k, r in rows.items() if r["pid"] == "P36"]
    p27 = [k for k, r in rows.items() if r["pid"] == "P27"]
    assert len(rows) == len(s.fact_keys) and p36 and p27 and s.scored == len(p36) and s.unscorable == len(p27)
    # the plug-in's "_reason" is the reason the run counts, and the one per-fact record gives
    assert s.unscorable_reasons == {"labellen: not a capital: P27": len(p27)}
    assert all(isinstance(v, MeasureValue) for v in seen.values())
    for k in p27:
        assert seen[k].reason == "not a capital: P27" and rows[k]["score"] is None
        assert details.records[k]["unscorable"] == "not a capital: P27"
    for k in p36:
        # its "_details" reach the per-fact record; its other keys the FACT edge
        assert details.records[k] == {"unscorable": None, "templates": ["own"], "clozes": None,
                                      "distractors": None}
        assert rows[k]["score"] == rows[k]["chars"] / 100 and rows[k]["known"] is True
    assert pr.get_run(graph, s.run_id) is not None
