"""`kgprobe cypher` (issue 40): a user's own query against the real test server, read-only
unless --write, values as parameters, table/JSON/CSV output, one line for what it refuses."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import kgprobe
from probe_world import load

CAPITALS = "MATCH (s:Entity)-[f:FACT]->(o:Entity) WHERE f.pid = $p RETURN s.qid AS s, o.label AS o ORDER BY s"


def one_line(r: Any, code: int, text: str) -> None:
    assert r.returncode == code, (r.returncode, r.stdout[-1000:], r.stderr[-1000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr and text in lines[0], r.stderr


def entities(graph: Any) -> int:
    return int(graph.read("MATCH (e:Entity) RETURN count(e) AS n")[0]["n"])


def test_a_read_query_with_parameters_in_each_format(graph: Any, kgprobe_env: dict[str, str],
                                                     tmp_path: Path) -> None:
    load(graph)
    r = kgprobe("cypher", CAPITALS, "-p", "p=P36", "--json", env=kgprobe_env)
    assert r.returncode == 0, r.stderr
    # probe_world's capitals, written out: USA, France, Germany
    assert json.loads(r.stdout) == [{"s": "Q142", "o": "Paris"}, {"s": "Q183", "o": "Berlin"},
                                    {"s": "Q30", "o": "Washington, D.C."}]
    table = kgprobe("cypher", CAPITALS, "-p", "p=P36", env=kgprobe_env)
    assert table.returncode == 0 and "3 rows" in table.stdout and "Washington, D.C." in table.stdout
    graph.write("MATCH (r:Relation {pid: 'P36'}) SET r.label = '=1+1'")
    query = tmp_path / "labels.cypher"
    query.write_text("// a query from a file; the word CREATE in a comment or 'CREATE' in a string reads\n"
                     "MATCH (r:Relation) WHERE r.pid IN $pids AND r.label <> 'CREATE' "
                     "RETURN r.pid AS pid, r.label AS label, [r.pid] AS list ORDER BY pid")
    out = kgprobe("cypher", str(query), "-p", 'pids=["P36", "P27"]', "--format", "csv", env=kgprobe_env)
    assert out.returncode == 0, out.stderr
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [r["pid"] for r in rows] == ["P27", "P36"]
    assert rows[1]["label"] == "'=1+1"  # a formula from data never runs in a spreadsheet
    assert json.loads(rows[0]["list"]) == ["P27"]


@pytest.mark.parametrize("query", [
    "MATCH (e:Entity) DETACH DELETE e",
    "MATCH (e:Entity) SET e.label = 'x'",
    "match (e:Entity) with e limit 1 merge (e)-[:X]->(e)",
    "CALL apoc.periodic.iterate('MATCH (e) RETURN e', 'DELETE e', {})",
    "DROP INDEX some_index",
])
def test_a_writing_query_is_refused_without_write(graph: Any, kgprobe_env: dict[str, str], query: str) -> None:
    load(graph)
    before = entities(graph)
    one_line(kgprobe("cypher", query, env=kgprobe_env), 2, "--write")
    assert entities(graph) == before
    assert graph.read("MATCH (e:Entity) WHERE e.label = 'x' RETURN count(e) AS n")[0]["n"] == 0


def test_write_allows_a_write_and_errors_are_one_line(graph: Any, kgprobe_env: dict[str, str]) -> None:
    load(graph)
    r = kgprobe("cypher", "MATCH (e:Entity {qid: $q}) SET e.note = $n RETURN e.note AS note",
                "-p", "q=Q90", "-p", "n=checked", "--write", "--json", env=kgprobe_env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [{"note": "checked"}]
    assert graph.read("MATCH (e:Entity {qid: 'Q90'}) RETURN e.note AS n")[0]["n"] == "checked"
    one_line(kgprobe("cypher", "MATCH (n RETURN n", env=kgprobe_env), 2, "refused the query")
    one_line(kgprobe("cypher", "   ", env=kgprobe_env), 2, "empty")
    one_line(kgprobe("cypher", "RETURN $x", "-p", "no equals sign", env=kgprobe_env), 2, "NAME=VALUE")
    one_line(kgprobe("cypher", "missing.cypher", env=kgprobe_env), 4, "no such query file")
