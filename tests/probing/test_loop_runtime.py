"""The probe loop's interpreter settings (kgprobe.runtime): Python's cyclic collector runs
rarely while the loop makes a batch's requests, results and item plans, and is back to what it
was after the loop, also after a failure; settings that overlapping work holds are restored
once, by the last holder out."""

from __future__ import annotations

import gc
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from tiny_models import TinyModel

from kgprobe.probing.engine import Engine
from kgprobe.probing.models import load_model
from kgprobe.probing.probe_set import read_set, score_set
from kgprobe.runtime import prompt_gil_switch, rare_collections


class _Recording:
    """The engine, noting the collector's first threshold at each of the loop's runs; it fails
    at run ``fail_at`` (counted from 1) when given."""

    def __init__(self, engine: Engine, fail_at: int | None = None) -> None:
        self.engine, self.fail_at = engine, fail_at
        self.seen: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def run(self, requests: Sequence[Any]) -> list[Any]:
        self.seen.append(gc.get_threshold()[0])
        if self.fail_at is not None and len(self.seen) == self.fail_at:
            raise RuntimeError("device lost")
        return self.engine.run(requests)


def test_the_loop_collects_cycles_rarely_and_restores_the_collector(tiny_model: TinyModel) -> None:
    engine = Engine(load_model(str(tiny_model("gpt2", positions=512)), device="cpu"))
    pset = read_set("demo")  # 60 facts, 16 per batch: four runs of the engine
    before = gc.get_threshold()
    runner = _Recording(engine)
    got = score_set(pset, runner, None, model="gpt2", fingerprint=engine.fingerprint, progress=False)
    assert got.summary.scored > 0
    assert len(runner.seen) == 4 and min(runner.seen) >= 100_000  # Python's default is 700
    assert gc.get_threshold() == before

    failing = _Recording(engine, fail_at=2)
    with pytest.raises(RuntimeError, match="device lost"):
        score_set(pset, failing, None, model="gpt2", fingerprint=engine.fingerprint, progress=False)
    assert failing.seen[0] >= 100_000
    assert gc.get_threshold() == before


def test_overlapping_holders_restore_each_setting_once_the_last_ends() -> None:
    """A probe loop (the collector) and an ingest (the collector and the GIL switch) that
    overlap: the first to end leaves what the other still runs under; the last restores."""
    before = sys.getswitchinterval(), gc.get_threshold()
    loop = rare_collections()
    loop.__enter__()
    try:
        assert gc.get_threshold()[0] >= 100_000 and gc.get_threshold()[1:] == before[1][1:]
        with prompt_gil_switch(0.000005), rare_collections(5):
            assert sys.getswitchinterval() <= 0.000005
            loop.__exit__(None, None, None)  # the loop ends first
            loop = None  # type: ignore[assignment]
            assert gc.get_threshold()[0] >= 100_000 and sys.getswitchinterval() <= 0.000005
        assert (sys.getswitchinterval(), gc.get_threshold()) == before
    finally:
        if loop is not None:
            loop.__exit__(None, None, None)
    assert (sys.getswitchinterval(), gc.get_threshold()) == before
