"""Cypher for distractors against the real test server: Ω(f), temporal order, seeded samples."""

from __future__ import annotations

import pytest
from distractor_world import (
    ADAMS,
    BACH,
    BIDEN,
    BUSH,
    CLINTON,
    CURIE,
    IMPOSTOR,
    NOLABEL,
    OBAMA,
    TRUMP,
    USA,
    load,
)

from kgprobe.errors import ConfigError
from kgprobe.graph import distractors as gd
from kgprobe.probing.semantic import feature_bags


@pytest.fixture()
def world_graph(graph):
    load(graph)
    return graph


def test_normalize_label() -> None:
    assert gd.normalize_label("U.S.A.") == gd.normalize_label("usa")
    assert gd.normalize_label("  Jean-Paul\tSartre ") == gd.normalize_label("jean paul sartre")
    assert gd.normalize_label("Ｐａｒｉｓ") == "paris"  # NFKC full-width
    assert gd.normalize_label("...") == "..."  # never collapses to ""
    assert gd.normalize_label("Paris") != gd.normalize_label("Pari")


def test_typed_candidates_are_omega(world_graph) -> None:
    ctx = gd.fact_context(world_graph, USA, "P35", OBAMA)
    assert ctx.object_types == ["Q5"]
    assert set(ctx.true_objects) == {CLINTON, BUSH, OBAMA, TRUMP, BIDEN}
    got = {c.qid for c in gd.typed_candidates(world_graph, ctx)}
    # humans, minus every president (true objects), the label clash and the unlabelled one
    assert got == {ADAMS, BACH, CURIE}
    assert IMPOSTOR not in got and NOLABEL not in got
    assert all(c.shared_types == ("Q5",) for c in gd.typed_candidates(world_graph, ctx))
    assert len(gd.typed_candidates(world_graph, ctx, limit=2)) <= 2


def test_omega_filter_keeps_order_and_membership(world_graph) -> None:
    ctx = gd.fact_context(world_graph, USA, "P35", OBAMA)
    got = gd.omega_filter(world_graph, ctx, [CURIE, TRUMP, "Q30", IMPOSTOR, ADAMS, "Q424242"])
    assert [c.qid for c in got] == [CURIE, ADAMS]


@pytest.mark.parametrize(
    ("obj", "at", "expected"),
    [
        (TRUMP, "2026-01-01", [BIDEN, OBAMA, BUSH, CLINTON]),
        # on 2024-06-01 Trump's first term is past and his second not begun: a temporal distractor
        (BIDEN, "2024-06-01", [TRUMP, OBAMA, BUSH, CLINTON]),
        # the day a term ends it is no longer valid ([start, end) intervals)
        (OBAMA, "2009-01-20", [BUSH, CLINTON]),
        (CLINTON, "1990-01-01", []),
    ],
)
def test_temporal_candidates_order(world_graph, obj, at, expected) -> None:
    ctx = gd.fact_context(world_graph, USA, "P35", obj)
    got = gd.temporal_candidates(world_graph, ctx, at)
    assert [c.qid for c in got] == expected
    for c in got:
        assert c.detail["statements"] and all(s["state"] == "past" for s in c.detail["statements"])


def test_temporal_default_date_is_today(world_graph) -> None:
    ctx = gd.fact_context(world_graph, USA, "P35", TRUMP)
    assert [c.qid for c in gd.temporal_candidates(world_graph, ctx)] == [
        BIDEN,
        OBAMA,
        BUSH,
        CLINTON,
    ]


def test_random_same_type_is_seeded(world_graph) -> None:
    ctx = gd.fact_context(world_graph, USA, "P35", OBAMA)
    a = [c.qid for c in gd.random_same_type(world_graph, ctx, 2, seed=11)]
    b = [c.qid for c in gd.random_same_type(world_graph, ctx, 2, seed=11)]
    assert a == b and len(a) == 2 and set(a) <= {ADAMS, BACH, CURIE}
    draws = {
        tuple(c.qid for c in gd.random_same_type(world_graph, ctx, 3, seed=s)) for s in range(12)
    }
    assert len(draws) > 1  # the seed matters


def test_feature_bags_and_counts(world_graph) -> None:
    bags = dict(feature_bags(world_graph))
    assert bags[OBAMA][0] == OBAMA
    assert {"P27", USA, f"P27={USA}", "P31", "Q5", "P31=Q5"} <= set(bags[OBAMA])
    counts = gd.graph_counts(world_graph)
    assert counts["facts"] == 21 and counts["entities"] == len(bags)


def test_resolve(world_graph) -> None:
    assert gd.resolve_entity(world_graph, "Barack Obama") == OBAMA
    assert gd.resolve_entity(world_graph, "q76") == OBAMA
    assert gd.resolve_relation(world_graph, "president") == "P35"
    assert gd.resolve_relation(world_graph, "Head of State") == "P35"
    with pytest.raises(ConfigError):
        gd.resolve_entity(world_graph, "Nobody At All")
    with pytest.raises(ConfigError):
        gd.date_sort_key("2024-13-01")
    assert gd.date_sort_key("-0044-03-15") == -440315


def test_statement_state_coarse_precision() -> None:
    ref = gd.date_sort_key("2013-06-01")
    year = {"start_sort": 20130000, "end_sort": 20130000, "end_precision": 9}
    assert gd.statement_state(year, ref) == "now"  # "2013 to 2013" covers all of 2013
    assert gd.statement_state(year, gd.date_sort_key("2014-01-01")) == "past"
    assert gd.statement_state({"start_sort": 20140000}, ref) == "future"
    assert gd.statement_state({}, ref) == "always"
    assert gd.statement_state({"pit_sort": 20130601, "pit_precision": 11}, ref) == "now"
    assert gd.statement_state({"pit_sort": 20120000, "pit_precision": 9}, ref) == "past"
