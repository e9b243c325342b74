"""Issue 10, ingest items 3, 7, 8, 9, 10: bad input costs one record, never a traceback, a lost
batch or a silent merge — checked through `kgprobe ingest` on the session's real graph server
and real files (docs/loaders.md#guarantees lists what each test shows)."""

from __future__ import annotations

import json
import re
import subprocess
import zlib
from pathlib import Path
from typing import Any

from _kgprobe_process import run_kgprobe, start_kgprobe
from conftest import FIXTURES
from loaders_support import gen_dump_module

from kgprobe.loaders import open_source
from kgprobe.records import EntityRecord, ErrorRecord

ID_RE = re.compile(r"^[QP][1-9][0-9]*$")


def run(*args: str, env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return run_kgprobe(args, env, timeout=timeout)


def entity(qid: Any, label: str = "", claims: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    ent: dict[str, Any] = {"type": "item", "id": qid, "claims": claims or {}}
    if label:
        ent["labels"] = {"en": {"language": "en", "value": label}}
    ent.update(extra)
    return ent


def item_statement(sid: str, pid: str, obj: str, **quals: Any) -> dict[str, Any]:
    st: dict[str, Any] = {
        "id": sid,
        "rank": "normal",
        "mainsnak": {
            "snaktype": "value",
            "property": pid,
            "datavalue": {"type": "wikibase-entityid", "value": {"entity-type": "item", "id": obj}},
        },
    }
    if quals:
        st["qualifiers"] = quals
    return st


def time_qualifier(pid: str, time: str, precision: int = 11) -> list[dict[str, Any]]:
    value = {"time": time, "precision": precision, "calendarmodel": "http://www.wikidata.org/entity/Q1985727"}
    return [{"snaktype": "value", "property": pid, "datavalue": {"type": "time", "value": value}}]


def write_dump(path: Path, lines: list[str]) -> Path:
    """Wikidata's dump layout: ``[``, one entity per line with a comma, ``]`` (line n+1 = entity n)."""
    path.write_text("[\n" + "".join(line + ",\n" for line in lines) + "]\n")
    return path


def ids_in_graph(graph: Any) -> tuple[list[str], list[str], list[str]]:
    qids = [r["q"] for r in graph.read("MATCH (e:Entity) RETURN e.qid AS q")]
    pids = [r["p"] for r in graph.read("MATCH (r:Relation) RETURN r.pid AS p")]
    fact_pids = [r["p"] for r in graph.read("MATCH ()-[f:FACT]->() RETURN f.pid AS p")]
    return qids, pids, fact_pids


# --- item 3: every identifier validated at the loader boundary --------------------------------


def test_bad_ids_are_errors_with_their_line_and_never_stored(tmp_path: Path, graph: Any, kgprobe_env: dict[str, str]) -> None:
    good = entity("Q1", "good one", {"P19": [item_statement("Q1$A1", "P19", "Q2")]})
    lines = [
        json.dumps(good),  # line 2
        json.dumps(entity("Q42'; MATCH (n) DETACH DELETE n //", "injected")),  # line 3
        json.dumps(entity(None, "null id")),  # 4
        json.dumps(entity(42, "number id")),  # 5
        json.dumps(entity("q9500011", "lower case")),  # 6
        # a good entity with one bad object id: only that statement is an error
        json.dumps(
            entity(
                "Q3",
                "three",
                {"P19": [item_statement("Q3$B1", "P19", "Q1'}) DETACH DELETE n //"), item_statement("Q3$B2", "P19", "Q2")]},
            )
        ),  # 7
        json.dumps({"type": "property", "id": "P99`]->()<-[:X]-(n) DETACH DELETE n //", "labels": {}}),  # 8
    ]
    dump = write_dump(tmp_path / "dump.json", lines)
    result = run("ingest", str(dump), "--json", env=kgprobe_env)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["errors"] == 6
    where = [e.split(": ", 1)[0] for e in summary["first_errors"]]
    assert where == [f"{dump}:{n}" for n in (3, 4, 5, 6, 7, 8)]
    assert "null" in summary["first_errors"][1] and "'42'" in summary["first_errors"][2]
    assert summary["entities"] == 2 and summary["facts"] == 2  # Q1 -> Q2 and Q3 -> Q2

    qids, pids, fact_pids = ids_in_graph(graph)
    assert sorted(qids) == ["Q1", "Q2", "Q3"]
    assert pids == ["P19"] and fact_pids == ["P19", "P19"]
    assert all(ID_RE.match(x) for x in qids + pids)


def test_rdf_goes_through_the_same_validation(tmp_path: Path) -> None:
    """The same rules apply to RDF: a label over the documented limit is an error at its line."""
    from kgprobe.loaders.validate import MAX_TERM_CHARS

    ttl = tmp_path / "two.ttl"
    ttl.write_text(
        "@prefix wd: <http://www.wikidata.org/entity/> .\n"
        "@prefix wdt: <http://www.wikidata.org/prop/direct/> .\n"
        "@prefix rdfs: <http://www.w3.org/2000/01/rdf-schema#> .\n"
        'wd:Q1 rdfs:label "fine"@en ;\n  wdt:P19 wd:Q2 .\n'
        f'wd:Q5 rdfs:label "{"y" * (MAX_TERM_CHARS + 1)}"@en ;\n  wdt:P19 wd:Q2 .\n'
    )
    recs = list(open_source(ttl))
    errors = [r for r in recs if isinstance(r, ErrorRecord)]
    assert [e.location for e in errors] == [f"{ttl}:6"]
    assert f"{MAX_TERM_CHARS + 1:,} characters" in errors[0].message
    assert [r.qid for r in recs if isinstance(r, EntityRecord)] == ["Q1"]


# --- item 7: one bad record costs one record ---------------------------------------------------


def test_400kb_label_at_record_7001_of_10000(tmp_path: Path, graph: Any, kgprobe_env: dict[str, str]) -> None:
    lines = [
        json.dumps(entity(f"Q{i}", "x" * 400_000 if i == 7001 else f"entity {i}")) for i in range(1, 10_001)
    ]
    dump = write_dump(tmp_path / "big.json", lines)
    ok = run("ingest", str(dump), "--json", "--max-errors", "1000", env=kgprobe_env)
    assert ok.returncode == 0, ok.stderr[-2000:]
    summary = json.loads(ok.stdout)
    assert summary["entities"] == 9_999 and summary["errors"] == 1
    assert summary["first_errors"][0].startswith(f"{dump}:7002: entity not loaded: label has 400,000 characters")
    rows = graph.read("MATCH (e:Entity) RETURN count(e) AS n, max(size(e.label)) AS longest")
    assert rows == [{"n": 9_999, "longest": len("entity 10000")}]

    graph.write("MATCH (n) DETACH DELETE n")
    stopped = run("ingest", str(dump), "--max-errors", "0", "--batch-size", "500", env=kgprobe_env)
    assert stopped.returncode == 4 and "Traceback" not in stopped.stderr
    assert "error budget 0" in stopped.stderr and f"{dump}:7002" in stopped.stderr
    # everything before the error was written (7,000 records), nothing after it
    assert graph.read("MATCH (e:Entity) RETURN count(e) AS n") == [{"n": 7_000}]


def test_values_out_of_range_are_error_records_not_tracebacks(tmp_path: Path, graph: Any, kgprobe_env: dict[str, str]) -> None:
    def with_start(qid: str, time: str, precision: int = 11) -> str:
        st = item_statement(f"{qid}$T1", "P39", "Q2", P580=time_qualifier("P580", time, precision))
        return json.dumps(entity(qid, qid, {"P39": [st]}))

    lines = [
        with_start("Q10", "+1952-03-11T00:00:00Z"),  # line 2: fine
        with_start("Q11", "+99999999999999999999-01-01T00:00:00Z"),  # 3: OverflowError before
        with_start("Q12", "+2001-13-01T00:00:00Z", 10),  # 4: month 13
        with_start("Q13", "+2001-01-45T00:00:00Z"),  # 5: day 45
        "[" * 100_000 + "]" * 100_000,  # 6: RecursionError before
        json.dumps(entity("Q14", "nan", kgprobe_popularity=float("nan"))),  # 7: NaN
        json.dumps(entity("Q15", "inf", kgprobe_popularity=float("inf"))),  # 8: Infinity
        json.dumps(entity("Q16", "fine", kgprobe_popularity=12.5)),  # 9: fine
        json.dumps(entity("Q17", "long id", {"P39": [item_statement("Q17$" + "A" * 1_000_000, "P39", "Q2")]})),  # 10
    ]
    dump = write_dump(tmp_path / "values.json", lines)
    result = run("ingest", str(dump), "--json", env=kgprobe_env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    summary = json.loads(result.stdout)
    assert summary["errors"] == 7
    errors = dict(e.split(": ", 1) for e in summary["first_errors"])
    assert set(errors) == {f"{dump}:{n}" for n in (3, 4, 5, 6, 7, 8, 10)}
    assert "statement id has 1,000,004 characters" in errors[f"{dump}:10"]
    assert "out of range" in errors[f"{dump}:3"] and "month 13" in errors[f"{dump}:4"]
    assert "day 45" in errors[f"{dump}:5"] and "nested too deeply" in errors[f"{dump}:6"]
    assert "nan" in errors[f"{dump}:7"] and "inf" in errors[f"{dump}:8"]
    facts = graph.read("MATCH (a)-[f:FACT]->() RETURN a.qid AS s, f.start_time AS t ORDER BY s")
    # Q11-Q13 and Q17 themselves load (only their statement is the error); Q14, Q15 do not
    assert facts == [{"s": "Q10", "t": "+1952-03-11T00:00:00Z"}]
    pops = graph.read("MATCH (e:Entity) WHERE e.popularity IS NOT NULL RETURN e.qid AS q, e.popularity AS p")
    assert pops == [{"q": "Q16", "p": 12.5}]


# --- item 8: no silent merges or drops ---------------------------------------------------------


def test_statement_ids_never_collapse(tmp_path: Path, graph: Any, kgprobe_env: dict[str, str]) -> None:
    """Four statements whose ids end in '/' used to become one key; each is now accounted for,
    and two different statements that normalise to one id are one fact plus one error."""
    lines = [
        json.dumps(entity("Q1", "one", {"P19": [item_statement("Q1$AAA/", "P19", "Q7"), item_statement("Q1$BBB/", "P19", "Q8")]})),
        json.dumps(entity("Q2", "two", {"P19": [item_statement("Q2$AAA/", "P19", "Q7"), item_statement("Q2$BBB/", "P19", "Q8")]})),
        json.dumps(entity("Q3", "three", {"P19": [item_statement("Q3$CCC", "P19", "Q7"), item_statement("q3$ccc", "P19", "Q8")]})),
    ]
    dump = write_dump(tmp_path / "ids.json", lines)
    result = run("ingest", str(dump), "--json", env=kgprobe_env)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    read = 6
    stored = graph.read("MATCH ()-[f:FACT]->() RETURN f.key AS k")
    assert summary["facts"] == len(stored) == 1 and stored == [{"k": "Q3$CCC"}]
    assert summary["facts"] + summary["errors"] + sum(summary["skipped"].values()) == read
    assert any("already used by a different statement" in e for e in summary["first_errors"])
    assert sum("Q1$AAA/" in e or "Q2$BBB/" in e for e in summary["first_errors"]) == 2


def _complete_lines(data: bytes) -> list[str]:
    """Whole lines of the readable prefix of a truncated gzip file (zlib, not kgprobe)."""
    text = zlib.decompressobj(wbits=31).decompress(data).decode("utf-8", errors="ignore")
    return text.split("\n")[:-1]  # the last piece has no newline: it was cut


def test_truncated_gz_writes_every_record_read_and_says_where_it_stopped(
    tmp_path: Path, graph: Any, kgprobe_env: dict[str, str]
) -> None:
    gen = gen_dump_module()
    whole = tmp_path / "dump.json.gz"
    gen.write_dump(whole, 6_000, seed=5)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole.read_bytes()[: int(whole.stat().st_size * 0.6)])

    result = run("ingest", str(cut), "--batch-size", "500", env=kgprobe_env)
    assert result.returncode == 4 and "Traceback" not in result.stderr
    assert "truncated" in result.stderr
    entities = [json.loads(line.rstrip(",")) for line in _complete_lines(cut.read_bytes())[1:]]
    last_line = len(entities) + 1
    assert f"{cut}:{last_line}" in result.stderr.replace("\n", "")
    # what the graph must hold, counted from the decoded JSON by hand: item-valued, not
    # deprecated, not P31/P279 statements are FACT edges; every entity is a labelled node
    expected = sum(
        1
        for ent in entities
        for pid, sts in ent["claims"].items()
        if pid not in ("P31", "P279")
        for st in sts
        if st["rank"] != "deprecated" and st["mainsnak"]["datavalue"]["type"] == "wikibase-entityid"
    )
    assert graph.read("MATCH ()-[f:FACT]->() RETURN count(f) AS n") == [{"n": expected}]
    ids = [e["id"] for e in entities]
    labelled = graph.read("MATCH (e:Entity) WHERE e.qid IN $ids AND e.label IS NOT NULL RETURN count(e) AS n", ids=ids)
    assert labelled == [{"n": len(ids)}]


# --- item 9: two ingests at once -----------------------------------------------------------------


def test_two_concurrent_ingests_equal_a_sequential_run(tmp_path: Path, graph: Any, kgprobe_env: dict[str, str]) -> None:
    gen = gen_dump_module()
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    gen.write_dump(a, 3_000, seed=11)
    gen.write_dump(b, 3_000, seed=12)  # the same QID range: overlapping entities and objects
    cmd = ["ingest", "--json", "--batch-size", "100"]
    procs = [start_kgprobe([*cmd, str(a), str(b)], kgprobe_env), start_kgprobe([*cmd, str(b), str(a)], kgprobe_env)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    concurrent = json.loads(run("stats", "--json", env=kgprobe_env).stdout)
    summaries = [json.loads(out) for out, _ in outs]
    assert summaries[0]["errors"] == summaries[1]["errors"] == 0

    graph.write("MATCH (n) DETACH DELETE n")
    seq = run("ingest", str(a), str(b), "--json", "--batch-size", "100", env=kgprobe_env)
    assert seq.returncode == 0, seq.stderr
    sequential = json.loads(run("stats", "--json", env=kgprobe_env).stdout)
    assert concurrent == sequential
    assert sequential["facts"] == json.loads(seq.stdout)["facts"] > 0


# --- item 10: one clear line for usage errors --------------------------------------------------


def test_batch_size_and_max_errors_are_checked_in_one_line(kgprobe_env: dict[str, str]) -> None:
    q42 = str(FIXTURES / "wikidata" / "entity-json" / "Q182397.json")
    for args, what in (
        (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
        (["--batch-size", "-5"], "--batch-size must be at least 1, got -5"),
        (["--max-errors", "-1"], "--max-errors must be 0 or more, got -1"),
    ):
        result = run("ingest", q42, *args, env=kgprobe_env)
        assert result.returncode == 2, result.stderr
        assert what in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_all_garbage_turtle_says_nothing_was_loaded(tmp_path: Path, graph: Any, kgprobe_env: dict[str, str]) -> None:
    bad = tmp_path / "garbage.ttl"
    bad.write_text("@prefix wd: <http://www.wikidata.org/entity/> .\nthis is { not turtle .\nnor ]] this .\n")
    result = run("ingest", str(bad), env=kgprobe_env)
    assert result.returncode == 4 and "Traceback" not in result.stderr
    assert "nothing was loaded" in result.stderr and f"{bad}:2" in result.stderr
    assert graph.read("MATCH (n) RETURN count(n) AS n") == [{"n": 0}]
