"""The batched gather (issue 18 #2): each need of a whole probe batch in one UNWIND round trip.

Every batched read is compared with the per-fact read it replaces, fact by fact, on the real
test server: the hand-made world (the US head-of-state history: temporal distractors, a
deprecated claim, label clashes, an untyped object) and the bundled demo graph (real Wikidata
facts, with the distractor strategies end to end). The per-fact functions are the reference:
the batch must return the same values in the same order.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from distractor_world import ADAMS, CURIE, IMPOSTOR, OBAMA, TRUMP, USA, load, world

from kgprobe.graph import distractors as gd
from kgprobe.graph import probe_runs as pr
from kgprobe.graph.templates import demo_paths
from kgprobe.loaders.wikidata_json import load_json
from kgprobe.probing.distractors import find_distractors, prefetch
from kgprobe.probing.semantic import IndexSettings, SemanticIndex
from kgprobe.records import EntityRecord, FactRecord

torch.set_num_threads(1)

DATES = ("2000-01-01", "2010-06-01", "2024-06-01", "2026-01-01")


@pytest.fixture()
def world_graph(graph: Any) -> Any:
    load(graph)
    return graph


def _world_facts() -> list[tuple[str, str, str]]:
    return [(r.subject, r.pid, r.object) for r in world() if isinstance(r, FactRecord)]


def test_fact_contexts_equal_the_per_fact_reads(world_graph: Any) -> None:
    facts = _world_facts()
    # an object missing from the graph and a malformed id are left out, as fact_context refuses them
    asked = [*facts, (USA, "P35", "Q424242"), (USA, "P35", "not-a-qid"), facts[0]]
    got = gd.fact_contexts(world_graph, asked)
    assert set(got) == set(facts)
    for s, p, o in facts:
        assert got[(s, p, o)] == gd.fact_context(world_graph, s, p, o)
    assert got[(USA, "P35", OBAMA)].true_objects == sorted(
        ["Q1124", "Q207", OBAMA, TRUMP, "Q6279"])  # the deprecated Adams claim left out
    assert gd.fact_contexts(world_graph, []) == {}


@pytest.mark.parametrize("at", DATES)
def test_temporal_candidates_many_equal_the_per_fact_reads(world_graph: Any, at: str) -> None:
    ctxs = list(gd.fact_contexts(world_graph, _world_facts()).values())
    random.Random(at).shuffle(ctxs)  # the batch's order is the caller's, not the server's
    many = gd.temporal_candidates_many(world_graph, ctxs, at)
    assert many == [gd.temporal_candidates(world_graph, c, at) for c in ctxs]
    if at >= "2010":  # the head-of-state history is in there (in 2000, no term had ended)
        assert any(len(c) >= 2 for c in many)
    assert gd.temporal_candidates_many(world_graph, [], at) == []


def test_omega_filters_equal_the_per_fact_reads(world_graph: Any) -> None:
    humans = [r.qid for r in world() if isinstance(r, EntityRecord) and "Q5" in r.types]
    ctxs = gd.fact_contexts(world_graph, _world_facts())
    rng = random.Random(3)
    asks = []
    for ctx in ctxs.values():
        pool = [*humans, USA, "Q424242", IMPOSTOR, CURIE, CURIE]
        rng.shuffle(pool)
        asks.append((ctx, pool[: rng.randint(0, len(pool))]))
    got = gd.omega_filters(world_graph, asks)
    assert got == [gd.omega_filter(world_graph, ctx, cands) for ctx, cands in asks]
    obama = ctxs[(USA, "P35", OBAMA)]
    assert [c.qid for c in gd.omega_filters(world_graph, [(obama, [CURIE, TRUMP, IMPOSTOR, ADAMS])])[0]] == [
        CURIE, ADAMS]


def test_omega_membership_in_python_equals_the_cypher_typed_candidates(world_graph: Any) -> None:
    """Ω(f) checks are decided in Python on the entities' terms (omega_members); the typed
    candidates are decided in Cypher (TYPED_CANDIDATES): on every fact of the world, the two
    agree on who is a member and on the shared types, with and without the run's cache."""
    everyone = sorted({r.qid for r in world() if isinstance(r, EntityRecord)} | {"Q424242"})
    terms = gd.EntityTerms(world_graph)
    for ctx in gd.fact_contexts(world_graph, _world_facts()).values():
        cypher = {c.qid: c.shared_types for c in gd.typed_candidates(world_graph, ctx)}
        for cache in (None, terms):
            python = {c.qid: c.shared_types for c in gd.omega_filter(world_graph, ctx, everyone, cache)}
            assert python == cypher, ctx
    assert terms.read == len(everyone)  # each entity asked of the graph once, then kept


def test_entity_terms_keep_what_they_read_and_stay_bounded(world_graph: Any) -> None:
    terms = gd.EntityTerms(world_graph, max_entries=3)
    first = terms.get([USA, OBAMA, "Q424242"])
    assert list(first) == [USA, OBAMA] and first[USA]["label"] == "United States of America"
    assert terms.get([OBAMA, USA]) == {OBAMA: first[OBAMA], USA: first[USA]} and terms.read == 3
    terms.get([TRUMP])  # a fourth entity: the cache starts afresh rather than grow
    assert terms.read == 4 and len(terms._rows) == 1
    assert terms.get([USA]) == {USA: first[USA]} and terms.read == 5


@pytest.mark.parametrize("seed", [0, 7, "x"])
def test_random_draws_of_a_batch_equal_the_per_fact_draws(world_graph: Any, seed: int | str) -> None:
    ctxs = list(gd.fact_contexts(world_graph, _world_facts()).values())
    for n in (1, 2, 5):
        many = gd.random_same_type_many(world_graph, ctxs, n, [seed] * len(ctxs))
        assert many == [gd.random_same_type(world_graph, c, n, seed) for c in ctxs]
        assert any(many)
    # per-fact seeds stay per fact
    seeds = [f"{seed}|{i}" for i in range(len(ctxs))]
    assert gd.random_same_type_many(world_graph, ctxs, 2, seeds) == [
        gd.random_same_type(world_graph, c, 2, s) for c, s in zip(ctxs, seeds, strict=True)]


@pytest.mark.parametrize("limit", [1, 3, 50_001])
def test_typed_candidates_many_equal_the_per_fact_reads(world_graph: Any, limit: int) -> None:
    ctxs = list(gd.fact_contexts(world_graph, _world_facts()).values())
    got = gd.typed_candidates_many(world_graph, ctxs, limit)
    assert got == [gd.typed_candidates(world_graph, c, limit=limit) for c in ctxs]
    obama = gd.fact_contexts(world_graph, [(USA, "P35", OBAMA)])[(USA, "P35", OBAMA)]
    assert {c.qid for c in gd.typed_candidates_many(world_graph, [obama], limit)[0]} == (
        {ADAMS, "Q1339", CURIE} if limit > 10 else set(c.qid for c in gd.typed_candidates(
            world_graph, obama, limit=limit)))
    assert gd.typed_candidates_many(world_graph, [], limit) == []


def test_object_relations_many_equal_the_per_fact_reads(world_graph: Any) -> None:
    qids = sorted({o for _, _, o in _world_facts()} | {USA, "Q424242"})
    got = pr.object_relations_many(world_graph, qids)
    assert got == {q: pr.object_relations(world_graph, q) for q in qids}
    assert got[USA] == ["P27"] and got["Q424242"] == []


# --- the demo graph: distractors end to end ---------------------------------------------------------

RECORDS = list(load_json(demo_paths()[0]))
_FACTS = [r for r in RECORDS if isinstance(r, FactRecord)]
SAMPLE = random.Random(11).sample(_FACTS, 60) + [f for f in _FACTS if f.end is not None][:30]
REF = "2026-01-01"


@pytest.fixture(scope="module")
def demo(_session_graph: Any) -> Iterator[tuple[Any, SemanticIndex]]:
    from kgprobe.graph.ingest import ingest

    g = _session_graph
    g.write("MATCH (n) DETACH DELETE n")
    ingest(g, RECORDS)
    yield g, SemanticIndex.from_graph(g, IndexSettings(dim=32, seed=0))
    g.write("MATCH (n) DETACH DELETE n")


@pytest.mark.parametrize("strategy", ["sem", "temp+sem"])
@pytest.mark.parametrize("n", [1, 5])
def test_prefetched_distractors_equal_the_per_fact_path(
    demo: tuple[Any, SemanticIndex], strategy: str, n: int
) -> None:
    graph, index = demo
    facts = [(f.subject, f.pid, f.object) for f in SAMPLE]
    ctxs = gd.fact_contexts(graph, facts)
    assert len(ctxs) == len(set(facts))
    order = list(ctxs)
    pfs = prefetch(graph, [ctxs[k] for k in order], strategy=strategy, n=n, at=REF, index=index)
    full = 0
    for k, pf in zip(order, pfs, strict=True):
        s, p, o = k
        ref = find_distractors(graph, s, p, o, strategy=strategy, n=n, at=REF, index=index)
        got = find_distractors(graph, s, p, o, strategy=strategy, n=n, at=REF, index=index,
                               context=ctxs[k], prefetched=pf)
        assert got == ref
        full += len(got.distractors) == n
    assert full > len(order) // 2  # most facts get their n distractors: the test tests something


def test_prefetch_answers_the_first_semantic_checks_without_the_graph(
    demo: tuple[Any, SemanticIndex],
) -> None:
    """Plan A's first check of each fact is answered from the batch's one round trip."""
    graph, index = demo

    class Counting:
        """The real graph, counting the reads that go to it."""

        def __init__(self) -> None:
            self.reads = 0

        def read(self, cypher: str, **params: Any) -> Any:
            self.reads += 1
            return graph.read(cypher, **params)

    facts = [(f.subject, f.pid, f.object) for f in SAMPLE[:40]]
    ctxs = list(gd.fact_contexts(graph, facts).values())
    g = Counting()
    pfs = prefetch(g, ctxs, strategy="temp+sem", n=5, at=REF, index=index)  # type: ignore[arg-type]
    # temporal candidates, the Ω(f) checks, Ω(f) for the facts plan A leaves short: one round
    # trip each (the last only when some fact needs it)
    assert g.reads in (2, 3)
    base = g.reads
    for ctx, pf in zip(ctxs, pfs, strict=True):
        find_distractors(g, ctx.subject, ctx.pid, ctx.object, strategy="temp+sem", n=5,  # type: ignore[arg-type]
                         at=REF, index=index, context=ctx, prefetched=pf)
    per_fact = Counting()
    for ctx in ctxs:
        find_distractors(per_fact, ctx.subject, ctx.pid, ctx.object, strategy="temp+sem", n=5,  # type: ignore[arg-type]
                         at=REF, index=index, context=ctx)
    assert per_fact.reads >= 2 * len(ctxs) - 5  # at least the temporal read and one check per fact
    assert g.reads - base < per_fact.reads / 4


def test_prefetch_asks_the_strategy_entry_not_its_name(demo: tuple[Any, SemanticIndex]) -> None:
    """Issue 39 item 4: what `prefetch` reads for a batch follows what the strategy's entry
    says it uses. A plug-in that is temp+sem under another name gets exactly temp+sem's batch
    reads (past objects, plan A, Ω(f) checks); one that declares none gets none, and the
    random draw is done for the batch only for a strategy that draws."""
    from kgprobe.probing.distractors import TemporalSemanticStrategy
    from kgprobe.probing.strategies import STRATEGIES, DistractorStrategy

    class Recent(TemporalSemanticStrategy):
        """temp+sem under a name of its own."""

        name = "recent+sem"

    class Asks(DistractorStrategy):
        """Reads nothing ahead."""

        name, summary = "asks-per-fact", "asks the graph per fact"

        def find(self, graph: Any, ctx: Any, n: int, search: Any) -> Any:
            return [], "none"

    graph, index = demo
    facts = [(f.subject, f.pid, f.object) for f in SAMPLE[:15] + SAMPLE[-15:]]  # 15 with an end
    ctxs = list(gd.fact_contexts(graph, facts).values())
    STRATEGIES.register(Recent)
    STRATEGIES.register(Asks)
    try:
        ref = prefetch(graph, ctxs, strategy="temp+sem", n=5, at=REF, index=index)
        got = prefetch(graph, ctxs, strategy="recent+sem", n=5, at=REF, index=index)
        none = prefetch(graph, ctxs, strategy="asks-per-fact", n=5, at=REF, index=index)
    finally:
        STRATEGIES.pop("recent+sem")
        STRATEGIES.pop("asks-per-fact")
    assert [(p.temporal, p.omega, p.plan_a, p.typed) for p in got] == \
        [(p.temporal, p.omega, p.plan_a, p.typed) for p in ref]
    assert all(p.temporal is not None for p in got) and any(p.temporal for p in got)
    assert sum(p.plan_a is not None for p in got) > len(got) // 2
    assert all(p.temporal is None and not p.omega and p.plan_a is None and p.random is None
               for p in none)
    drawn = prefetch(graph, ctxs, strategy="random", n=3, at=REF, index=index, seed=4)
    assert all(p.random is not None for p, c in zip(drawn, ctxs, strict=True) if c.object_types)
    assert all(p.temporal is None and p.plan_a is None for p in drawn)
