"""Implicit instillation as the opt-in of the ``info`` measure (issue 11 §2):
``--measure info:instill=implicit`` through ``run_probe`` on the tiny GPT-2 and the probe world,
checked against the library functions called directly on the same prompt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from probe_world import REF, load
from tiny_models import TinyModel

from kgprobe.errors import ConfigError
from kgprobe.graph import probe_runs as pr
from kgprobe.probing.config import ProbeConfig, measure_key
from kgprobe.probing.run import run_probe


@pytest.fixture(scope="module")
def gpt2(tiny_model: TinyModel) -> Path:
    return tiny_model("gpt2")


def test_implicit_is_in_the_key() -> None:
    assert measure_key("info", "random", 2) == "info"
    assert measure_key("info:instill=implicit", "random", 2) == "info_inimplicit"
    assert measure_key("info:instill=implicit,steps=2", "random", 2) == "info_inimplicit_ft2"
    with pytest.raises(ConfigError, match="instill=implicit"):
        measure_key("info:steps=2", "random", 2)
    with pytest.raises(ConfigError, match="top_k"):
        measure_key("info:instill=implicit,top_k=5", "random", 2)


def test_implicit_instillation_through_run_probe(graph: Any, gpt2: Path) -> None:
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.instill import finetune_copy
    from kgprobe.probing.measures.information import implicit_instillation
    from kgprobe.probing.models import load_model

    load(graph)
    lm = load_model(str(gpt2))
    engine = Engine(lm)
    cfg = ProbeConfig(model=str(gpt2), sample=None, n=2, at=REF, batch_facts=2,
                      strategy="random", relations=("P36",),
                      measures=("info:instill=implicit,steps=2,lr=0.01",))
    s = run_probe(graph, engine, cfg, fingerprint=engine.fingerprint, progress=False)
    key = "info_inimplicit_ft2_lr0_01"
    assert s.score_properties == [f"score__gpt2__{key}"], s.score_properties
    sp = pr.ScoreProps("gpt2", key)
    rows = {r["key"]: r for r in pr.measure_rows(graph, {"score": sp.score,
                                                          "entropy": sp.extra("entropy")})}
    assert len(rows) == 3
    fr = next(r for k, r in rows.items() if k.startswith("Q142"))
    # by hand: P36's one template, France's label, the sentence the copy is tuned on
    tuned = finetune_copy(lm, ["The capital of France is Paris."], steps=2, lr=0.01, seed=0)
    [want] = implicit_instillation(Engine(lm), Engine(tuned), ["The capital of France is"])
    assert fr["score"] == pytest.approx(want.kl, rel=1e-5, abs=1e-7)
    assert fr["entropy"] == pytest.approx(want.entropy_before, rel=1e-6)
    assert want.kl > 0
    # explicit (the default) writes a different property
    assert not pr.measure_rows(graph, {"score": pr.ScoreProps("gpt2", "info").score})
