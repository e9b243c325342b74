"""FACTOR equals AI21's official ``eval_factuality.py`` on identical inputs (issue 21, item 4).

The expected values were computed once by running the official script (AI21Labs/factor @
ee9de30, unchanged) on the default model SmolLM2-135M, fp32, as kgprobe loads it; the rows,
the command and the model are in ``tests/fixtures/factor_reference/README.md``. The sample
holds every Expert-FACTOR row whose prefix ends in two or more spaces (there the engine moves
a space into every completion, which the official script does not score), rows ending in one
space, in no whitespace, and News-FACTOR rows ending in a newline and in a space.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kgprobe.probing.engine import Engine
from kgprobe.probing.measures.factor import FactorItem, factor_scores
from kgprobe.probing.models import DEFAULT_MODEL, load_model

REF = Path(__file__).parents[1] / "fixtures" / "factor_reference"
TOL = 1e-4  # nats/token per row, issue 21


def _rows(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (REF / name).read_text().splitlines() if line.strip()]


def test_fixture_covers_the_moved_spaces() -> None:
    expert = _rows("expert_sample.jsonl")
    ends = [r["prefix"][len(r["prefix"].rstrip()):] for r in expert]
    assert sum(len(e) >= 2 and "\n" not in e for e in ends) == 23  # all of Expert-FACTOR's
    assert "" in ends and " " in ends
    news = [r["prefix"][len(r["prefix"].rstrip()):] for r in _rows("news_sample.jsonl")]
    assert "\n" in news and " " in news


@pytest.mark.slow
def test_factor_equals_the_official_script_on_smollm2() -> None:
    lm = load_model(DEFAULT_MODEL, dtype="float32", threads=1, device="cpu")
    engine = Engine(lm, batch_size=16, progress=False)
    rows = _rows("expert_sample.jsonl") + _rows("news_sample.jsonl")
    items = [FactorItem(r["prefix"], tuple(r["completions"]), str(r["row"])) for r in rows]
    outs = factor_scores(engine, items)
    worst = 0.0
    for r, o in zip(rows, outs, strict=True):
        expected = [-x for x in r["nll"]]  # the official mean NLL per token, sign flipped
        assert list(o.scores) == pytest.approx(expected, abs=TOL), (r["file"], r["row"])
        worst = max(worst, *(abs(a - b) for a, b in zip(o.scores, expected, strict=True)))
        official_pick = min(range(4), key=lambda j: (r["nll"][j], j))
        assert o.correct == (official_pick == 0)
        assert max(range(4), key=lambda j: (o.scores[j], -j)) == official_pick
    assert worst < TOL
