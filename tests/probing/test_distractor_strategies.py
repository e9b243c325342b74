"""The four strategies on a real server: Ω(f) (property-based, against an oracle computed from
the records alone), temporal order, seeds, and empty lists with a reason."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
from _kgprobe_process import run_kgprobe
from distractor_world import (
    BACH,
    BIDEN,
    BUSH,
    CLINTON,
    LONELY,
    OBAMA,
    TRUMP,
    UNTYPED,
    USA,
    Oracle,
    load,
    world,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_models import TinyModel

from kgprobe.graph import distractors as gd
from kgprobe.probing.distractors import REASON_TEMPORAL, find_distractors
from kgprobe.probing.semantic import IndexSettings, SemanticIndex, ensure_index
from kgprobe.records import EntityRecord, FactRecord

torch.set_num_threads(1)

RECORDS = world()
ENTITIES = {r.qid: r for r in RECORDS if isinstance(r, EntityRecord)}
FACTS = [r for r in RECORDS if isinstance(r, FactRecord)]
REF = "2026-01-01"


ORACLE = Oracle(RECORDS)


def oracle_omega(s: str, pid: str, o: str) -> set[str]:
    return ORACLE.omega(s, pid, o)


def oracle_temporal(s: str, pid: str, o: str, ref: int) -> set[str]:
    return ORACLE.temporal(s, pid, o, ref)


@pytest.fixture(scope="module")
def engine(tiny_model: TinyModel):
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.models import load_model

    return Engine(load_model(str(tiny_model("gpt2")), device="cpu"))


@pytest.fixture()
def world_graph(graph, tmp_path):
    load(graph)
    return graph, ensure_index(graph, tmp_path / "index", IndexSettings(dim=8, seed=0))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    fact=st.sampled_from(FACTS),
    strategy=st.sampled_from(["random", "sem", "temp+sem", "appropt"]),
    n=st.integers(1, 8),
    seed=st.integers(0, 2**31),
)
def test_every_strategy_stays_in_omega(world_graph, engine, fact, strategy, n, seed) -> None:
    graph, index = world_graph
    res = find_distractors(
        graph,
        fact.subject,
        fact.pid,
        fact.object,
        strategy=strategy,
        n=n,
        seed=seed,
        at=REF,
        index=index,
        engine=engine,
    )
    omega = oracle_omega(fact.subject, fact.pid, fact.object)
    temporal = oracle_temporal(fact.subject, fact.pid, fact.object, gd.date_sort_key(REF))
    qids = [d.qid for d in res.distractors]
    assert len(qids) == len(set(qids)) <= n
    assert [d.rank for d in res.distractors] == list(range(1, len(qids) + 1))
    for d in res.distractors:
        if d.reason == REASON_TEMPORAL:
            assert strategy == "temp+sem" and d.qid in temporal
        else:
            assert d.qid in omega, (d, omega)
    if len(qids) < n:
        assert res.reason  # a short list always says why
    if strategy in ("random", "sem"):  # these draw from Ω(f) alone: full unless Ω(f) is small
        assert len(qids) == min(n, len(omega))


def test_temp_sem_puts_the_history_first(world_graph) -> None:
    graph, index = world_graph
    res = find_distractors(graph, USA, "P35", TRUMP, strategy="temp+sem", n=7, at=REF, index=index)
    ds = res.distractors
    assert [d.qid for d in ds[:4]] == [BIDEN, OBAMA, BUSH, CLINTON]
    assert all(d.reason == REASON_TEMPORAL and d.detail["statements"] for d in ds[:4])
    assert ds[0].detail["statements"][0]["end"] == "+2025-01-20T00:00:00Z"
    assert len(ds) == 7 and {d.qid for d in ds[4:]} < oracle_omega(USA, "P35", TRUMP)
    sims = [d.score for d in ds[4:]]
    assert all(d.reason == "similarity" for d in ds[4:]) and sims == sorted(sims, reverse=True)
    # without an object, the one valid at the date is meant
    assert find_distractors(graph, USA, "P35", strategy="random", n=1, at=REF).object == TRUMP
    assert (
        find_distractors(graph, USA, "P35", strategy="random", n=1, at="2022-01-01").object == BIDEN
    )


def test_same_seed_same_distractors(world_graph, tmp_path: Path) -> None:
    graph, index = world_graph
    args = dict(strategy="random", n=2, at=REF)
    a = find_distractors(graph, USA, "P35", OBAMA, seed=5, **args)
    assert a.distractors == find_distractors(graph, USA, "P35", OBAMA, seed=5, **args).distractors
    # the semantic index too: rebuilt from scratch with the same seed, same answer
    other = SemanticIndex.from_graph(graph, IndexSettings(dim=8, seed=0))
    s1 = find_distractors(graph, USA, "P35", OBAMA, strategy="sem", n=3, at=REF, index=index)
    s2 = find_distractors(graph, USA, "P35", OBAMA, strategy="sem", n=3, at=REF, index=other)
    assert [(d.qid, d.score) for d in s1.distractors] == [(d.qid, d.score) for d in s2.distractors]


@pytest.mark.parametrize("strategy", ["random", "sem", "temp+sem", "appropt"])
def test_no_type_or_no_alternative_gives_an_empty_list_with_a_reason(
    world_graph, engine, strategy
) -> None:
    graph, index = world_graph
    untyped = find_distractors(
        graph, USA, "P999", UNTYPED, strategy=strategy, index=index, engine=engine
    )
    assert untyped.distractors == [] and "no type" in (untyped.reason or "")
    lonely = find_distractors(
        graph, USA, "P999", LONELY, strategy=strategy, index=index, engine=engine
    )
    assert lonely.distractors == [] and "shares a type" in (lonely.reason or "")


def test_appropt_ranks_by_model_probability(world_graph, engine) -> None:
    graph, _ = world_graph
    res = find_distractors(
        graph,
        OBAMA,
        "P27",
        USA,
        strategy="appropt",
        n=2,
        engine=engine,
        template="[X] is a citizen of [Y].",
    )
    assert [d.reason for d in res.distractors] == ["model probability"] * 2
    lps = [d.score for d in res.distractors]
    assert lps == sorted(lps, reverse=True)
    assert {d.qid for d in res.distractors} <= oracle_omega(OBAMA, "P27", USA)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_appropt_passes_the_key_value_cache_as_transformers_asks(world_graph, tmp_path, kind, tiny_model: TinyModel) -> None:
    """transformers (5.24 here) renamed the forward's cache keyword ``past_key_values`` to ``cache``
    (the old name raises a FutureWarning and goes in 5.40): appropt's beam search, on a
    fresh model (nothing cached), runs with that warning as an error."""
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.models import load_model

    graph, _ = world_graph
    eng = Engine(load_model(str(tiny_model(kind)), device="cpu"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        res = find_distractors(graph, OBAMA, "P27", USA, strategy="appropt", n=2, engine=eng,
                               template="[X] is a citizen of [Y].")
    assert [d.reason for d in res.distractors] == ["model probability"] * 2


def test_stale_index_is_rebuilt(world_graph, tmp_path: Path) -> None:
    graph, index = world_graph
    d = tmp_path / "index"
    again = ensure_index(graph, d, IndexSettings(dim=8, seed=0))
    assert again.manifest()["graph_state"] == index.manifest()["graph_state"]
    graph.write(
        "MATCH (e:Entity {qid: $q}) CREATE (e)-[:FACT {pid: 'P27', key: 'x', rank: 'normal'}]->(e)",
        q=BACH,
    )
    from kgprobe.probing.semantic import StaleIndexError

    with pytest.raises(StaleIndexError, match="facts"):
        ensure_index(graph, d, IndexSettings(dim=8, seed=0), rebuild=False)
    rebuilt = ensure_index(graph, d, IndexSettings(dim=8, seed=0))
    assert rebuilt.state and rebuilt.state.counts["facts"] == index.state.counts["facts"] + 1  # type: ignore[union-attr]


def test_cli_json(world_graph, kgprobe_env, tmp_path: Path) -> None:
    out = run_kgprobe(
        [
            "distractors",
            "United States of America",
            "president",
            "--object",
            "Donald Trump",
            "--strategy",
            "temp+sem",
            "-n",
            "3",
            "--at",
            REF,
            "--json",
            "--index-dir",
            str(tmp_path / "cli-index"),
        ],
        kgprobe_env,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [d["qid"] for d in data["distractors"]] == [BIDEN, OBAMA, BUSH]
    bad = run_kgprobe(
        ["distractors", "Nobody", "P35", "--strategy", "sem"], kgprobe_env,
        timeout=180,
    )
    assert bad.returncode != 0 and "Nobody" in bad.stderr and "Traceback" not in bad.stderr


def test_appropt_uses_the_scoring_end_marker_and_a_seeded_candidate_sample(world_graph, engine) -> None:
    """Issue 11 §3: the constrained beam search ends each label with the same end marker as
    the Eq. 1 scoring it serves (not always EOS), and a candidate cap takes a seeded sample of
    Ω(f), not the first N by QID string."""
    from kgprobe.probing.distractors import appropt_candidates
    from kgprobe.probing.measures.common import EndMarker
    from kgprobe.probing.requests import BeamSearchRequest

    graph, _ = world_graph
    seen: list[BeamSearchRequest] = []

    class Recording:
        lm = engine.lm

        def run(self, requests):
            seen.extend(r for r in requests if isinstance(r, BeamSearchRequest))
            return engine.run(requests)

    t = "[X] is a citizen of [Y]."
    for end, eos, suffix in ((EndMarker("tail", "."), False, "."), (EndMarker("eos"), True, ""),
                             (EndMarker("none"), False, "")):
        seen.clear()
        res = find_distractors(graph, OBAMA, "P27", USA, strategy="appropt", n=2,
                               engine=Recording(), template=t, end=end)
        assert seen and all(r.add_eos is eos for r in seen)
        assert " France" + suffix in seen[0].allowed and " Germany" + suffix in seen[0].allowed
        assert {d.qid for d in res.distractors} <= oracle_omega(OBAMA, "P27", USA)
        assert all(not (d.detail["form"]).endswith(".") for d in res.distractors)
    # the default is the model's documented marker: tail "." for an unlisted model
    seen.clear()
    find_distractors(graph, OBAMA, "P27", USA, strategy="appropt", n=2, engine=Recording(), template=t)
    assert seen[0].add_eos is False and " France." in seen[0].allowed

    ctx = gd.fact_context(graph, OBAMA, "P27", USA)
    everything = [c.qid for c in gd.typed_candidates(graph, ctx)]
    assert [c.qid for c in appropt_candidates(graph, ctx, None, 0)] == everything
    assert len(everything) >= 2
    a = [c.qid for c in appropt_candidates(graph, ctx, 1, seed=0)]
    draws = {tuple(c.qid for c in appropt_candidates(graph, ctx, 1, seed=s)) for s in range(12)}
    assert len(a) == 1 and a == [c.qid for c in appropt_candidates(graph, ctx, 1, seed=0)]
    assert len(draws) > 1  # seeded, not always the first by QID string
