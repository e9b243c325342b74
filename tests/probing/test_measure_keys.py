"""A measure key and a score property name are composed and parsed by one record each
(kgprobe/types.py: MeasureKeyParts, ScoreProperty; issue 39, item 4): round trips over every
valid part, the built-in keys written out by hand, one line for a malformed name, and a
report that reads a real probe run's measure back by its key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from probe_world import REF, load
from tiny_models import TinyModel

from kgprobe.errors import ConfigError
from kgprobe.graph import probe_runs as pr
from kgprobe.types import MeasureKeyParts, ScoreProperty

torch.set_num_threads(1)

_word = st.from_regex(r"[a-z0-9]{1,6}", fullmatch=True)
_not_n = _word.filter(lambda w: not (w[0] == "n" and w[1:].isdigit() and len(w) > 1))
_plain = st.lists(_not_n, min_size=1, max_size=3).map("_".join)
_any = st.lists(_word, min_size=1, max_size=3).map("_".join)


@st.composite
def measure_keys(draw: st.DrawFn) -> MeasureKeyParts:
    """Valid parts: a one-word name (a key cannot say where a longer one ends), a strategy with
    no ``n<digits>`` word (the count is the first), any settings after the count; no count, no
    ``n<digits>`` word in the settings either."""
    name = draw(_not_n)
    if draw(st.booleans()):
        return MeasureKeyParts(name, draw(_plain), draw(st.integers(0, 10_000)),
                               draw(st.just("") | _any))
    return MeasureKeyParts(name, rest=draw(st.just("") | _plain))


@given(measure_keys())
def test_a_measure_key_round_trips(parts: MeasureKeyParts) -> None:
    assert MeasureKeyParts.parse(parts.compose()) == parts


@given(st.sampled_from(["score", "known", "stale", "run", "cfg"]), _any, _any)
def test_a_score_property_round_trips(kind: str, model: str, key: str) -> None:
    prop = ScoreProperty(kind, model, key)
    assert ScoreProperty.parse(prop.compose()) == prop


# the built-in keys as a probe writes them (docs/probing.md, docs/measures.md), parts by hand
BUILT_IN = [
    ("kmin_temp_sem_n5", None, MeasureKeyParts("kmin", "temp_sem", 5)),
    ("kavg_random_n10", None, MeasureKeyParts("kavg", "random", 10)),
    ("kmin_temp_sem_n5_o1", None, MeasureKeyParts("kmin", "temp_sem", 5, "o1")),
    ("kmin_temp_sem_n5_vraw", None, MeasureKeyParts("kmin", "temp_sem", 5, "vraw")),
    ("kmin_appropt_n2", None, MeasureKeyParts("kmin", "appropt", 2)),
    ("probability", None, MeasureKeyParts("probability")),
    ("belief", None, MeasureKeyParts("belief")),
    ("precision_at_n", "precision_at_n", MeasureKeyParts("precision_at_n")),
    ("karr_temp_sem_n5", None, MeasureKeyParts("karr", "temp_sem", 5)),
]


@pytest.mark.parametrize(("key", "name", "parts"), BUILT_IN, ids=[k for k, _, _ in BUILT_IN])
def test_the_built_in_keys_by_hand(key: str, name: str | None, parts: MeasureKeyParts) -> None:
    assert MeasureKeyParts.parse(key, name) == parts
    assert parts.compose() == key


def test_score_property_names_by_hand() -> None:
    assert ScoreProperty.parse("score__smollm2_135m__kmin_temp_sem_n5") == ScoreProperty(
        "score", "smollm2_135m", "kmin_temp_sem_n5")
    assert ScoreProperty.parse("cfg__gpt2__kavg_random_n2") == ScoreProperty("cfg", "gpt2", "kavg_random_n2")
    assert ScoreProperty("score", "gpt2", "belief", "rank").compose() == "score__gpt2__belief_rank"
    sp = pr.ScoreProps("gpt2", "kmin_random_n2")
    assert (sp.score, sp.known, sp.stale, sp.run, sp.cfg, sp.extra("rank")) == (
        "score__gpt2__kmin_random_n2", "known__gpt2__kmin_random_n2", "stale__gpt2__kmin_random_n2",
        "run__gpt2__kmin_random_n2", "cfg__gpt2__kmin_random_n2", "score__gpt2__kmin_random_n2_rank")


@pytest.mark.parametrize("name", [
    "score__gpt2", "score__gpt2__kmin__x", "weight__gpt2__kmin", "score__GPT2__kmin",
    "score__gpt2__kmin-n5", "score____kmin", "score__gpt2__" + "k" * 65, "",
])
def test_a_malformed_property_name_is_one_clear_line(name: str) -> None:
    with pytest.raises(ConfigError) as e:
        ScoreProperty.parse(name)
    assert "\n" not in str(e.value) and repr(name)[:40] in str(e.value)


@pytest.mark.parametrize(("key", "name"), [
    ("", None), ("kmin__n5", None), ("Kmin_random_n5", None), ("kavg_random_n5", "kmin"),
])
def test_a_malformed_measure_key_is_one_clear_line(key: str, name: str | None) -> None:
    with pytest.raises(ConfigError) as e:
        MeasureKeyParts.parse(key, name)
    assert "\n" not in str(e.value) and repr(key) in str(e.value)


def test_refused_parts() -> None:
    with pytest.raises(ConfigError, match="strategy and n together"):
        MeasureKeyParts("kmin", "random")
    with pytest.raises(ConfigError, match="not a score property kind"):
        ScoreProperty("weight", "gpt2", "kmin")


def test_a_report_reads_back_the_measure_of_a_real_probe(graph: Any, tmp_path: Path, tiny_model: TinyModel) -> None:
    """Probe the tiny model (as tests/probing/test_probe_runs.py does), then the report names the key,
    its label and chance level from the key's parts, and averages the scores under that name."""
    from kgprobe.probing.config import ProbeConfig
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.models import load_model
    from kgprobe.probing.run import run_probe
    from kgprobe.probing.semantic import IndexSettings, ensure_index
    from kgprobe.reports.build import build_report

    load(graph)
    index = ensure_index(graph, tmp_path / "index", IndexSettings(dim=8, seed=0))
    model = tiny_model("gpt2")
    eng = Engine(load_model(str(model)))
    cfg = ProbeConfig(model=str(model), sample=None, n=2, at=REF, batch_facts=4, strategy="random")
    run_probe(graph, eng, cfg, fingerprint=eng.fingerprint, index=index, progress=False)

    rows = graph.read("MATCH ()-[f:FACT]->() WHERE f['score__gpt2__kmin_random_n2'] IS NOT NULL "
                      "RETURN f['score__gpt2__kmin_random_n2'] AS s")
    assert len(rows) == 11
    rep = build_report(graph, "gpt2", measure="kmin", n_boot=50)
    assert rep.primary.measure_key == "kmin_random_n2"
    assert rep.primary.score_property == "score__gpt2__kmin_random_n2"
    assert rep.primary.measure_label == "Min@2, random distractors"
    assert rep.chance is not None and rep.chance.level == pytest.approx(1 / 3)
    assert rep.primary.overall.facts == 11
    assert rep.primary.overall.mean == pytest.approx(sum(r["s"] for r in rows) / 11, abs=1e-12)
