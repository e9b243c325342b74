"""Sampling from the index kept with the data (kgprobe/graph/sample_index.py), on a real server.

Expectations come from an independent oracle: the full-scan queries `candidate_keys` and
`history_keys` (every valid fact of a relation, read whole), never from the sampler's own draw.
"""

from __future__ import annotations

from typing import Any

import pytest

from kgprobe.graph import probe_runs as pr
from kgprobe.graph import sample_index as si
from kgprobe.graph.distractors import (
    FactContext,
    fact_context,
    label_set,
    random_same_type,
    random_same_type_many,
)
from kgprobe.graph.ingest import ingest
from kgprobe.records import EntityRecord, FactRecord, RelationRecord, TimeValue

REF = 20240601


def world() -> list[Any]:
    """Three relations of different sizes: P1 (60 facts; every 5th deprecated, every 7th ended
    before REF, every 11th with an unlabelled object), P2 (1 fact), P3 (24 facts, a third of
    the subjects with an earlier, ended object: a history)."""
    out: list[Any] = [RelationRecord(p, f"rel {p}") for p in ("P1", "P2", "P3")]
    for i in range(200):
        labelled = i % 11 != 0 or i < 100
        out.append(EntityRecord(f"Q{i + 1}", f"Thing {i}" if labelled else None, [],
                                types=["Q9001"] if i % 2 else ["Q9001", "Q9002"]))
    for i in range(60):
        out.append(FactRecord(f"Q{i + 1}", "P1", f"Q{100 + i + 1}", statement_id=f"P1-{i}",
                              rank="deprecated" if i % 5 == 4 else "normal",
                              end=TimeValue("+2001-01-01T00:00:00Z", 11) if i % 7 == 6 else None))
    out.append(FactRecord("Q1", "P2", "Q2", statement_id="P2-0"))
    for i in range(24):
        s = f"Q{i + 1}"
        out.append(FactRecord(s, "P3", f"Q{150 + i}", statement_id=f"P3-{i}",
                              start=TimeValue("+2010-01-01T00:00:00Z", 11)))
        if i % 3 == 0:
            out.append(FactRecord(s, "P3", f"Q{180 + i % 20}", statement_id=f"P3-old-{i}",
                                  end=TimeValue("+2009-01-01T00:00:00Z", 11)))
    return out


@pytest.fixture()
def g(graph: Any) -> Any:
    ingest(graph, world(), batch_size=37)  # several batches: ordinals continue across them
    return graph


def valid(graph: Any) -> dict[str, dict[str, str]]:
    return {p: pr.candidate_keys(graph, p, REF) for p in ("P1", "P2", "P3")}


def by_pid(keys: dict[str, str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for k in keys:
        out.setdefault(k.split("-")[0], []).append(k)
    return out


def test_ingest_indexes_every_fact_once(g: Any) -> None:
    facts = g.read("MATCH ()-[f:FACT]->() RETURN count(f) AS n")[0]["n"]
    assert g.read("MATCH (x:FactSlot) RETURN count(x) AS n")[0]["n"] == facts
    ranges = si.relation_ranges(g, ["P1", "P2", "P3"])
    assert ranges == {"P1": (60, 60), "P2": (1, 1), "P3": (32, 32)}
    assert si.index_state(g) is None
    ingest(g, world(), batch_size=50)  # idempotent: nothing new, no new ordinal
    assert si.relation_ranges(g, ["P1", "P2", "P3"]) == ranges
    assert g.read("MATCH (x:FactSlot) RETURN count(x) AS n")[0]["n"] == facts
    # every ordinal of a relation names one of its facts, with its subject
    rows = g.read("MATCH (x:FactSlot) RETURN x.id AS id, x.key AS key, x.s AS s")
    assert sorted(int(r["id"].split(":")[1]) for r in rows if r["id"].startswith("P1:")) == list(range(60))
    subjects = {k: s for p in ("P1", "P2", "P3")
                for k, s in pr._by_key(g.read(  # every fact, valid or not
                    "MATCH (s:Entity)-[f:FACT {pid: $p}]->() RETURN f.key AS key, s.qid AS s", p=p)).items()}
    assert {r["key"]: r["s"] for r in rows} == subjects
    # types: 200 entities of Q9001, the even ones also of Q9002
    assert si.type_ranges(g, ["Q9001", "Q9002"]) == {"Q9001": (200, 200), "Q9002": (100, 100)}


@pytest.mark.parametrize("total", [1, 7, 30, 61, 1000])
def test_sample_is_stratified_subset_of_valid_facts(g: Any, total: int) -> None:
    ok = valid(g)
    got = pr.sample_facts(g, ["P1", "P2", "P3"], total=total, seed=5, ref=REF)
    assert len(got) == len(set(got))
    for k, s in got.items():
        assert ok[k.split("-")[0]].get(k) == s
    share = pr.allocate({p: len(v) for p, v in ok.items()}, total, seed=5)
    assert {p: len(v) for p, v in by_pid(got).items()} == {p: n for p, n in share.items() if n}
    assert list(got) == [k for p in ("P1", "P2", "P3") for k in by_pid(got).get(p, [])]  # relation order


def test_same_seed_same_sample_other_seed_other(g: Any) -> None:
    a = pr.sample_facts(g, ["P1", "P3"], total=20, seed=1, ref=REF)
    assert a == pr.sample_facts(g, ["P3", "P1"], total=20, seed=1, ref=REF)
    assert list(a) == list(pr.sample_facts(g, ["P1", "P3"], total=20, seed=1, ref=REF))
    assert set(a) != set(pr.sample_facts(g, ["P1", "P3"], total=20, seed=2, ref=REF))
    everything = pr.sample_facts(g, ["P1", "P2", "P3"], total=None, seed=1, ref=REF)
    assert everything == {k: s for p in ("P1", "P2", "P3") for k, s in valid(g)[p].items()}


def test_per_relation(g: Any) -> None:
    ok = valid(g)
    got = pr.sample_facts(g, ["P1", "P2", "P3"], total=None, per_relation=5, seed=0, ref=REF)
    assert {p: len(v) for p, v in by_pid(got).items()} == {p: min(5, len(ok[p])) for p in ok}
    assert all(ok[k.split("-")[0]][k] == s for k, s in got.items())


def test_history_first(g: Any) -> None:
    hist = pr.history_keys(g, "P3", REF)
    assert len(hist) == 8  # the oracle: subjects 0, 3, ..., 21 had an object that ended in 2009
    got = list(pr.sample_facts(g, ["P3"], total=5, seed=3, ref=REF, history_first=True))
    assert len(got) == 5 and set(got) <= set(hist)
    more = list(pr.sample_facts(g, ["P3"], total=12, seed=3, ref=REF, history_first=True))
    assert more[:8] and set(more[:8]) == set(hist) and not set(more[8:]) & set(hist)
    plain = list(pr.sample_facts(g, ["P3"], total=12, seed=3, ref=REF))
    assert set(plain) <= set(valid(g)["P3"]) and len(plain) == 12


def test_shards_split_the_sample(g: Any) -> None:
    whole = pr.sample_facts(g, ["P1", "P2", "P3"], total=40, seed=9, ref=REF)
    parts = [pr.sample_facts(g, ["P1", "P2", "P3"], total=40, seed=9, ref=REF, shard=(k, 3))
             for k in (1, 2, 3)]
    assert sum(len(p) for p in parts) == len(whole)
    assert set().union(*parts) == set(whole)
    assert all(not set(a) & set(b) for i, a in enumerate(parts) for b in parts[i + 1:])


def test_graph_without_index_gets_it_built(graph: Any) -> None:
    """Facts written by raw Cypher (no slots): the first sample builds the index, never a
    silently empty or partial sample; a raw fact added later is noticed too."""
    graph.write("""
        UNWIND range(1, 30) AS i
        MERGE (s:Entity {qid: 'Q' + toString(i)}) SET s.label = 'S' + toString(i)
        MERGE (o:Entity {qid: 'Q' + toString(100 + i)}) SET o.label = 'O' + toString(i)
        MERGE (s)-[:FACT {key: 'raw-' + toString(i), pid: 'P7', rank: 'normal'}]->(o)
    """)
    assert si.index_state(graph) is not None
    seen: list[tuple[str, int, int]] = []
    got = pr.sample_facts(graph, ["P7"], total=10, seed=0, ref=REF,
                          on_progress=lambda what, done, total: seen.append((what, done, total)))
    assert seen and seen[-1][1] == seen[-1][2] == 30
    assert len(got) == 10 and set(got) <= set(pr.candidate_keys(graph, "P7", REF))
    assert si.index_state(graph) is None
    assert [r["facts"] for r in pr.relations_with_facts(graph)] == [30]
    assert pr.graph_counts(graph)["facts"] == 30
    graph.write("MATCH (s:Entity {qid: 'Q1'}), (o:Entity {qid: 'Q105'}) "
                "CREATE (s)-[:FACT {key: 'raw-late', pid: 'P7', rank: 'normal'}]->(o)")
    # a run does not scan the FACT edges for this (kgprobe's writers keep the index complete);
    # the thorough check does, and builds what is missing
    assert si.index_state(graph) is None and si.index_state(graph, thorough=True) is not None
    assert si.ensure_sample_index(graph, thorough=True)
    everything = pr.sample_facts(graph, ["P7"], total=None, seed=0, ref=REF)
    assert set(everything) == set(pr.candidate_keys(graph, "P7", REF)) and "raw-late" in everything


def test_random_same_type_samples_omega(g: Any) -> None:
    """Ω(f) = labelled entities sharing a type with o, minus o and the true objects; the draw is
    seeded, inside Ω(f), and reaches every member when asked for all."""
    types = ["Q9002"]  # the even-numbered entities
    ctx = FactContext(subject="Q1", pid="P1", object="Q3", object_label="Thing 2",
                      object_labels=label_set("Thing 2", []), object_types=types,
                      true_objects=["Q5"], subject_label="Thing 0")
    rows = g.read("MATCH (c:Entity)-[:INSTANCE_OF]->(:Entity {qid: 'Q9002'}) "
                  "WHERE c.label IS NOT NULL RETURN c.qid AS q")
    omega = {r["q"] for r in rows} - {"Q3", "Q5"}
    a = random_same_type(g, ctx, 7, seed=4)
    assert len(a) == 7 and {c.qid for c in a} <= omega and len({c.qid for c in a}) == 7
    assert [c.qid for c in a] == [c.qid for c in random_same_type(g, ctx, 7, seed=4)]
    assert [c.qid for c in a] != [c.qid for c in random_same_type(g, ctx, 7, seed=5)]
    assert {c.qid for c in random_same_type(g, ctx, 10_000, seed=4)} == omega


def test_the_same_seed_draws_the_same_on_every_server(g: Any) -> None:
    """Same graph, seed and arguments -> the same facts and the same random distractors, in the
    same order, whichever server holds the graph: these draws were recorded on ArcadeDB, and
    the suite asserts them on Neo4j 5 too (the ordinals come from ingest order, the draws from
    Python's seeded generator; nothing here may depend on a server's scan order)."""
    assert list(pr.sample_facts(g, ["P1", "P2", "P3"], total=12, seed=7, ref=REF)) == [
        "P1-16", "P1-57", "P1-38", "P1-28", "P1-15", "P1-31", "P2-0",
        "P3-18", "P3-19", "P3-8", "P3-17", "P3-1"]
    assert list(pr.sample_facts(g, ["P1", "P3"], total=None, per_relation=3, seed=7, ref=REF,
                                history_first=True)) == [
        "P1-16", "P1-57", "P1-38", "P3-18", "P3-3", "P3-12"]
    ctxs = [fact_context(g, "Q1", "P1", "Q101"), fact_context(g, "Q2", "P1", "Q102")]
    assert [[c.qid for c in cs] for cs in random_same_type_many(g, ctxs, 4, [4, 4])] == [
        ["Q121", "Q156", "Q5", "Q80"], ["Q61", "Q78", "Q27", "Q185"]]


def test_per_relation_option_is_checked() -> None:
    from kgprobe.errors import ConfigError
    from kgprobe.probing.config import ProbeConfig

    with pytest.raises(ConfigError, match="--per-relation must be at least 1"):
        ProbeConfig(per_relation=0).validate()
    ProbeConfig(per_relation=3).validate()
