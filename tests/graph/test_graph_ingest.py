"""The ingest writer against a real graph server: idempotence, batches, error budget, redirects."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import pytest

from kgprobe.errors import InputError
from kgprobe.graph.ingest import MERGE_REDIRECTS, Ingestor, ingest, write_retrying
from kgprobe.graph.stats import graph_stats
from kgprobe.records import (
    EntityRecord,
    ErrorRecord,
    FactRecord,
    RedirectRecord,
    RelationRecord,
    SkipRecord,
    TimeValue,
)


def synthetic_records(n_entities: int, facts_per_entity: int = 3) -> list[Any]:
    """A deterministic little world: people with birthplaces, employers and dated positions."""
    out: list[Any] = [RelationRecord("P19", "place of birth"), RelationRecord("P39", "position held")]
    for i in range(1, n_entities + 1):
        qid = f"Q{1000 + i}"
        out.append(EntityRecord(qid, f"Person {i}", [f"P. {i}"], "synthetic person", types=["Q5"]))
        for j in range(facts_per_entity):
            out.append(
                FactRecord(
                    qid,
                    "P39",
                    f"Q{9000 + (i + j) % 17}",
                    statement_id=f"{qid}$S{j}",
                    start=TimeValue(f"+{1900 + j:04d}-01-01T00:00:00Z", 9),
                    end=TimeValue(f"+{1901 + j:04d}-06-01T00:00:00Z", 10) if j % 2 else None,
                    qualifiers={"P642": [f"Q{j + 1}"]},
                )
            )
    return out


def counts(graph: Any) -> dict[str, int]:
    s = graph_stats(graph)
    return {k: s[k] for k in ("entities", "relations", "facts", "temporal_facts", "instance_of")}


def test_ingest_writes_entities_facts_and_temporal_values(graph: Any) -> None:
    bce = TimeValue("-0199-01-01T00:00:00Z", 9)
    far = TimeValue("+20000-01-01T00:00:00Z", 9)
    records = [
        EntityRecord("Q1", "Alpha", ["A", "Alf"], "first", types=["Q5"], extra={"popularity": 42}),
        EntityRecord("Q2", "Beta", inferred_types=[("Q515", "range of P19")]),
        FactRecord("Q1", "P19", "Q2", statement_id="Q1$AAA", start=bce, end=far, rank="preferred"),
        SkipRecord("value type: quantity", "x", count=3),
    ]
    summary = ingest(graph, records)
    assert summary.entities == 2 and summary.facts == 1 and summary.temporal_facts == 1
    assert summary.skipped == {"value type: quantity": 3}
    rows = graph.read(
        "MATCH (a:Entity {qid: 'Q1'})-[f:FACT]->(b) RETURN f.start_time AS st, f.start_year AS sy, "
        "f.end_time AS et, f.end_year AS ey, f.rank AS rank, b.qid AS o, a.aliases AS al, a.popularity AS pop"
    )
    assert rows == [
        {"st": "-0199-01-01T00:00:00Z", "sy": -199, "et": "+20000-01-01T00:00:00Z", "ey": 20000,
         "rank": "preferred", "o": "Q2", "al": ["A", "Alf"], "pop": 42}
    ]
    # declared P31 vs documented fallback: the fallback is never an INSTANCE_OF edge
    types = graph.read("MATCH (a)-[t]->(b) WHERE type(t) <> 'FACT' RETURN a.qid AS a, type(t) AS t, t.basis AS basis")
    assert sorted((r["a"], r["t"], r["basis"]) for r in types) == [
        ("Q1", "INSTANCE_OF", None),
        ("Q2", "INFERRED_TYPE", "range of P19"),
    ]


def test_reingest_creates_no_duplicates(graph: Any) -> None:
    records = synthetic_records(40)
    ingest(graph, records, batch_size=37)
    first = counts(graph)
    ingest(graph, records, batch_size=11)
    assert counts(graph) == first
    assert first["facts"] == 120 and first["entities"] == 40 + 17 + 1  # people, offices, Q5


def test_partial_ingest_then_full_run_equals_uninterrupted(graph: Any) -> None:
    records = synthetic_records(30)
    ingest(graph, records)
    expected = counts(graph)
    graph.write("MATCH (n) DETACH DELETE n")
    ingest(graph, records[: len(records) // 3])  # as if killed after a third
    ingest(graph, records)
    assert counts(graph) == expected


def test_error_budget_stops_with_location_and_keeps_good_batches(graph: Any) -> None:
    records: list[Any] = synthetic_records(5)
    records += [ErrorRecord(f"dump.json:{i}", "invalid JSON") for i in range(4)]
    with pytest.raises(InputError, match=r"dump\.json:0: invalid JSON"):
        ingest(graph, records, error_budget=2)
    assert counts(graph)["facts"] == 15  # everything before the errors was written

    summary = ingest(graph, records, error_budget=10)
    assert summary.error_count == 4 and summary.errors[0].location == "dump.json:0"


def test_failed_batch_leaves_nothing_half_written(graph: Any) -> None:
    ingestor = Ingestor(graph, batch_size=1000)
    stmts, *_ = ingestor._statements(synthetic_records(3))
    # A property value the driver cannot send makes the last statement of the batch fail:
    # the entities and facts MERGEd earlier in the same transaction must roll back with it.
    stmts.append((MERGE_REDIRECTS, {"rows": [{"source": "Q1", "target": object()}]}))
    with pytest.raises(Exception):  # noqa: B017 - the driver's own error, wrapped
        write_retrying(graph, stmts)
    assert counts(graph) == {"entities": 0, "relations": 0, "facts": 0, "temporal_facts": 0, "instance_of": 0}


def test_refused_record_is_found_reported_and_the_rest_written(graph: Any) -> None:
    """The server refuses one record of a batch (a label above its index key limit, ~256 KB on
    ArcadeDB): the batch is split until that record is alone, it becomes one error with its
    location, and every other record is written (issue 10, item 7)."""
    records: list[Any] = synthetic_records(40)
    people = [r for r in records if isinstance(r, EntityRecord)]
    huge = people[25]
    huge.label = "x" * 400_000
    huge.location = "dump.json:7002"
    summary = ingest(graph, records, batch_size=5000, error_budget=10)
    assert summary.error_count == 1
    err = summary.errors[0]
    assert err.location == "dump.json:7002" and huge.qid in err.message and "refused" in err.message
    # expected by hand: 40 people + 17 stub employers + Q5 are nodes; the refused person's facts
    # still create it as a stub (its subject), so it exists, unlabelled
    c = counts(graph)
    assert c["facts"] == 120 and c["relations"] == 2 and c["instance_of"] == 39
    assert summary.entities == 39 and summary.facts == 120
    labelled = graph.read("MATCH (e:Entity) WHERE e.label IS NOT NULL RETURN count(e) AS n")[0]["n"]
    assert labelled == 39
    with pytest.raises(InputError, match=r"error budget 0.*dump\.json:7002"):
        ingest(graph, records, error_budget=0)


def test_refusals_while_the_next_batch_is_being_built(graph: Any) -> None:
    """Small batches, so that the writer thread is splitting a refused batch while the intake
    thread builds the next ones: every refused record is one error, everything else is written,
    progress is reported batch after batch, and the sampling index's ordinals have no gap and
    no collision (expected by hand: 40 people, 2 refused, 3 facts each)."""
    records: list[Any] = synthetic_records(40)
    people = [r for r in records if isinstance(r, EntityRecord)]
    for i in (6, 25):
        people[i].label = "x" * 400_000
        people[i].location = f"dump.json:{i}"
    seen: list[int] = []
    summary = ingest(graph, records, batch_size=9, error_budget=10,
                     on_flush=lambda s: seen.append(s.facts))
    assert summary.error_count == 2
    assert sorted(e.location for e in summary.errors) == ["dump.json:25", "dump.json:6"]
    assert summary.entities == 38 and summary.facts == 120
    assert len(seen) >= 10 and seen == sorted(seen) and seen[-1] == 120
    fact_ids = {r["id"] for r in graph.read("MATCH (x:FactSlot) RETURN x.id AS id")}
    assert fact_ids == {f"P39:{i}" for i in range(120)}
    type_ids = {r["id"] for r in graph.read("MATCH (x:TypeSlot) RETURN x.id AS id")}
    assert type_ids == {f"Q5:{i}" for i in range(38)}


def test_the_gil_switches_promptly_and_cycles_are_collected_rarely_while_ingesting(graph: Any) -> None:
    """The writer thread needs the GIL each time the server answers; at Python's default 5 ms
    interval the server waited on it (docs/benchmarks.md: 1M statements 102.5 s against 82.9 s
    at 5 µs). The cyclic collector at its default threshold (700) ran thousands of times per
    million statements, holding the GIL. Both settings must hold while records are read, and be
    back to what they were after the ingest, also when the source fails midway."""
    before = sys.getswitchinterval(), gc.get_threshold()
    seen: list[tuple[float, int]] = []

    def source(fail: bool) -> Any:
        for i, rec in enumerate(synthetic_records(5)):
            seen.append((sys.getswitchinterval(), gc.get_threshold()[0]))
            if fail and i == 7:
                raise InputError("truncated input")
            yield rec

    ingest(graph, source(False), batch_size=4)
    assert seen and max(s for s, _ in seen) <= 1e-5
    assert min(t for _, t in seen) >= 100_000
    assert (sys.getswitchinterval(), gc.get_threshold()) == before
    with pytest.raises(InputError, match="truncated"):
        ingest(graph, source(True), batch_size=4)
    assert (sys.getswitchinterval(), gc.get_threshold()) == before


def test_overlapping_ingests_restore_the_interpreter_settings_once_both_end(graph: Any) -> None:
    """Two ingests in two threads, the first to start ending first: it must not restore the
    settings the other still runs under, and the last one out restores Python's own."""
    before = sys.getswitchinterval(), gc.get_threshold()
    second_in, first_out = threading.Event(), threading.Event()
    during: list[tuple[float, int]] = []

    def second_source() -> Any:
        second_in.set()
        assert first_out.wait(30)
        for rec in synthetic_records(2):
            during.append((sys.getswitchinterval(), gc.get_threshold()[0]))
            yield rec

    second = threading.Thread(target=ingest, args=(graph, second_source()), kwargs={"batch_size": 4})

    def first_source() -> Any:
        second.start()
        assert second_in.wait(30)
        yield from synthetic_records(1)

    ingest(graph, first_source(), batch_size=4)
    first_out.set()
    second.join(60)
    assert not second.is_alive()
    assert during and all(s <= 1e-5 and g >= 100_000 for s, g in during)
    assert (sys.getswitchinterval(), gc.get_threshold()) == before


def test_the_driver_packs_with_its_rust_extension() -> None:
    """neo4j-rust-ext is a dependency (a tenth of the pure-Python codec's cost per batch): it
    must be installed for the driver release in use, or the driver silently falls back."""
    import importlib.metadata as md

    from neo4j._codec.packstream import v1

    assert md.version("neo4j-rust-ext").startswith(md.version("neo4j"))
    assert v1._rust_pack is not None


def test_redirects_are_resolved(graph: Any) -> None:
    records = [
        EntityRecord("Q10", "Target"),
        FactRecord("Q1", "P19", "Q6825", statement_id="Q1$R1"),
        FactRecord("Q6825", "P17", "Q2", statement_id="Q6825$R2"),
        RedirectRecord("Q6825", "Q10"),
    ]
    summary = ingest(graph, records)
    assert summary.redirects_resolved == 1
    assert graph.read("MATCH (e:Entity {qid: 'Q6825'}) RETURN e.qid AS q") == []
    rows = graph.read("MATCH (a)-[f:FACT]->(b) RETURN a.qid AS s, f.pid AS p, b.qid AS o ORDER BY p")
    assert rows == [{"s": "Q10", "p": "P17", "o": "Q2"}, {"s": "Q1", "p": "P19", "o": "Q10"}]


def test_ingest_killed_midway_then_rerun_matches(graph: Any, graph_settings: Any, tmp_path: Any) -> None:
    """A separate process ingesting is SIGKILLed after a few batches; a re-run completes it."""
    script = tmp_path / "ingest.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, time
            sys.path.insert(0, {os.path.dirname(__file__)!r})
            from pathlib import Path
            from kgprobe.config import Settings
            from kgprobe.graph.client import connect
            from kgprobe.graph.ingest import ingest
            from test_graph_ingest import synthetic_records
            s = Settings(uri={graph_settings.uri!r}, user={graph_settings.user!r},
                         password=sys.stdin.readline().strip() or None,
                         database={graph_settings.database!r},
                         home=Path({str(graph_settings.home)!r}), bolt_port={graph_settings.bolt_port},
                         http_port={graph_settings.http_port})
            g = connect(s)
            def written(summary):
                print("batch", flush=True)
                time.sleep(0.3)
            ingest(g, synthetic_records(120), batch_size=50, on_flush=written)
            print("done", flush=True)
            """
        )
    )
    # the password on standard input: never in the script file or the child's argv
    proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write((graph_settings.password or "") + "\n")
    proc.stdin.close()
    seen = 0
    deadline = time.monotonic() + 120
    while seen < 4 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith("batch"):
            seen += 1
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = counts(graph)
    assert 0 < partial["facts"] < 360  # it really stopped midway

    ingest(graph, synthetic_records(120))
    resumed = counts(graph)
    graph.write("MATCH (n) DETACH DELETE n")
    ingest(graph, synthetic_records(120))
    assert resumed == counts(graph)
    assert resumed["facts"] == 360


def test_demo_graph_in_the_graph_every_object_typed(graph: Any) -> None:
    """The packaged demo graph through the real loader and writer: every object has a type
    (declared or fallback), fallbacks are INFERRED_TYPE edges, popularity is on the nodes."""
    from kgprobe.graph.templates import demo_paths
    from kgprobe.loaders.wikidata_json import load_json

    summary = ingest(graph, load_json(demo_paths()[0]))
    assert summary.facts >= 3000 and summary.error_count == 0
    untyped = graph.read(
        "MATCH ()-[:FACT]->(o:Entity) WHERE NOT (o)-[:INSTANCE_OF|INFERRED_TYPE]->() "
        "RETURN count(DISTINCT o) AS n"
    )
    assert untyped == [{"n": 0}]
    stats = graph_stats(graph)
    assert stats["inferred_types"] > 1000 and stats["instance_of"] < 50
    popular = graph.read("MATCH (e:Entity) WHERE e.popularity IS NOT NULL RETURN count(e) AS n")
    assert popular[0]["n"] > 1000
