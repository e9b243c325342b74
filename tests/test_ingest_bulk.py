"""`kgprobe ingest --bulk`: the bulk first load of an empty Neo4j database (issue 37, item 4).

The bulk load (graph/bulk.py: import files + ``neo4j-admin database import full``) must write the
graph the online ingest writes: every node with all its properties, every edge with its own,
the sampling index and its counters, and the same constraints and indexes; afterwards the
online ingest must go on as on any graph (re-ingesting adds nothing, an update lands as it would
have). Compared here as sorted dumps read back by Cypher, on the packaged demo graph plus a small
dump of awkward values (line breaks, quotes, commas, separators in labels and aliases, stubs).

The Neo4j comparison runs in the Neo4j half (KGPROBE_TEST_SERVER=neo4j): it needs the import
tool from Maven Central, as the Neo4j test server does. The refusals need no server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, TEST_SERVER
from test_demo_graph import facts as item_facts

from kgprobe.graph.templates import demo_paths

DEMO = demo_paths()[0]
UPDATE = FIXTURES / "wikidata" / "entity-json" / "Q182397.json"
#: the suite runs against a server named in the environment (read before `kgprobe_env` sets it)
EXTERNAL_SERVER = bool(os.environ.get("NEO4J_URI"))


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kgprobe.cli", *args], env=env or dict(os.environ),
                          capture_output=True, text=True, timeout=600)


def _time(year: int) -> dict[str, Any]:
    return {"snaktype": "value", "property": "P580", "datatype": "time", "datavalue": {"type": "time", "value": {
        "time": f"+{year}-01-01T00:00:00Z", "timezone": 0, "before": 0, "after": 0, "precision": 9,
        "calendarmodel": "http://www.wikidata.org/entity/Q1985727"}}}


def _claim(subject: str, pid: str, obj: str, n: int, **extra: Any) -> dict[str, Any]:
    return {"mainsnak": {"snaktype": "value", "property": pid, "datatype": "wikibase-item", "datavalue": {
        "type": "wikibase-entityid", "value": {"entity-type": "item", "id": obj, "numeric-id": int(obj[1:])}}},
        "type": "statement", "id": f"{subject}$00000000-0000-0000-0000-{n:012d}", "rank": "normal", **extra}


def _entity(qid: str, label: str, description: str, aliases: list[str], claims: dict[str, Any]) -> dict[str, Any]:
    return {"type": "item", "id": qid, "labels": {"en": {"language": "en", "value": label}},
            "descriptions": {"en": {"language": "en", "value": description}} if description else {},
            "aliases": {"en": [{"language": "en", "value": a} for a in aliases]}, "claims": claims}


def awkward_dump(path: Path) -> Path:
    """A dump of values a CSV file can get wrong: a label with a line break, quotes and commas,
    aliases holding the import's default separator ';' and quotes, non-ASCII text, an object no
    record describes (a stub), a qualifier, a fact whose subject comes later in the file."""
    entities = [
        _entity("Q990000001", 'a "quoted", label\nover two lines', "line one\r\nline two", ['x;y', '"q"', "ünï,cödé"],
                {"P27": [_claim("Q990000001", "P27", "Q990000002", 1, qualifiers={"P580": [_time(1999)]})],
                 "P31": [_claim("Q990000001", "P31", "Q990000003", 2)]}),
        _entity("Q990000002", "plain", "", [],
                {"P17": [_claim("Q990000002", "P17", "Q990000009", 3)],  # Q990000009: a stub
                 "P36": [_claim("Q990000002", "P36", "Q990000004", 4)]}),
        _entity("Q990000003", "a type, with a comma", "its description, \"quoted\"", [], {}),
        _entity("Q990000004", "described last", "", ["\\ backslash \\"], {}),
    ]
    path.write_text("[\n" + ",\n".join(json.dumps(e, ensure_ascii=False) for e in entities) + "\n]\n",
                    encoding="utf-8")
    return path


def graph_dump(graph: Any) -> tuple[list[str], list[str]]:
    """Every node (labels, properties) and every edge (type, end QIDs, properties), sorted."""
    nodes = sorted(json.dumps([sorted(r["labels"]), r["props"]], sort_keys=True, ensure_ascii=False)
                   for r in graph.read("MATCH (n) RETURN labels(n) AS labels, properties(n) AS props"))
    edges = sorted(json.dumps([r["t"], r["a"], r["b"], r["props"]], sort_keys=True, ensure_ascii=False)
                   for r in graph.read("MATCH (a)-[e]->(b) RETURN type(e) AS t, a.qid AS a, b.qid AS b, "
                                       "properties(e) AS props"))
    return nodes, edges


def schema(graph: Any) -> list[tuple[str, str, list[str], list[str]]]:
    rows = graph.read("SHOW INDEXES YIELD name, type, labelsOrTypes, properties "
                      "RETURN name, type, labelsOrTypes, properties")
    return sorted((r["name"], r["type"], r["labelsOrTypes"] or [], r["properties"] or []) for r in rows)


@pytest.mark.skipif(TEST_SERVER != "neo4j" or EXTERNAL_SERVER,
                    reason="bulk load into Neo4j: runs in the Neo4j half (KGPROBE_TEST_SERVER=neo4j)")
def test_bulk_load_writes_the_online_graph_and_the_online_ingest_goes_on(
    graph: Any, kgprobe_env: dict[str, str], graph_settings: Any, tmp_path: Path
) -> None:
    from neo4j_server import USER, Neo4jTestServer, install_admin

    from kgprobe.config import Settings
    from kgprobe.graph.client import connect

    awkward = awkward_dump(tmp_path / "awkward.json")
    online = run("ingest", str(DEMO), str(awkward), "--json", env=kgprobe_env)
    assert online.returncode == 0, online.stderr
    expected = graph_dump(graph)
    expected_schema = schema(graph)

    base = tmp_path / "bulk-server"
    install_admin(base / "home")
    bulk = run("ingest", str(DEMO), str(awkward), "--bulk", str(tmp_path / "import"),
               "--neo4j-home", str(base / "home"), "--json", env=kgprobe_env)
    assert bulk.returncode == 0, bulk.stderr + bulk.stdout
    summary = json.loads(bulk.stdout)
    assert {k: v for k, v in summary.items() if k != "redirects_resolved"} == {
        k: v for k, v in json.loads(online.stdout).items() if k != "redirects_resolved"}
    assert "imported into" in bulk.stderr
    # the awkward values did go through the multiline path of the import
    assert "--multiline-fields" in (tmp_path / "import" / "import.args").read_text(encoding="utf-8")

    server = Neo4jTestServer(base)
    uri = server.start()
    try:
        settings = Settings(uri=uri, user=USER, password=server.password, home=graph_settings.home)
        with connect(settings) as bulk_graph:  # the first connection creates the schema
            got = graph_dump(bulk_graph)
            assert len(got[0]) == len(expected[0]) and len(got[1]) == len(expected[1])
            assert got == expected
            assert schema(bulk_graph) == expected_schema
            facts = bulk_graph.read("MATCH ()-[f:FACT]->() RETURN count(f) AS n")[0]["n"]
            assert facts == summary["facts"] > 6000

            env = {**kgprobe_env, "NEO4J_URI": uri, "NEO4J_USER": USER, "NEO4J_PASSWORD": server.password}
            # idempotent: the online ingest of the same input adds nothing
            again = run("ingest", str(DEMO), str(awkward), env=env)
            assert again.returncode == 0, again.stderr
            assert graph_dump(bulk_graph) == expected
            # an update lands as on the online graph (sampling counters go on from the bulk's)
            for target in (env, kgprobe_env):
                update = run("ingest", str(UPDATE), env=target)
                assert update.returncode == 0, update.stderr
            updated = graph_dump(graph)
            assert updated != expected
            assert graph_dump(bulk_graph) == updated
    finally:
        server.stop()


def test_bulk_refuses_a_database_that_is_not_empty_and_a_used_directory(tmp_path: Path) -> None:
    home = tmp_path / "neo4j"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "neo4j-admin").write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    (home / "data" / "databases" / "neo4j").mkdir(parents=True)
    (home / "data" / "databases" / "neo4j" / "neostore").write_bytes(b"x")
    r = run("ingest", str(DEMO), "--bulk", str(tmp_path / "import"), "--neo4j-home", str(home))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"error: --neo4j-home {home}: database 'neo4j' is not empty ({home / 'data' / 'databases' / 'neo4j'}); "
        "--bulk loads an empty database only: use `kgprobe ingest` without --bulk to add to it"]
    assert not (tmp_path / "import").exists()  # refused before anything was written

    used = tmp_path / "used"
    used.mkdir()
    (used / "nodes-entity-0.csv").write_text("qid:ID\n", encoding="utf-8")
    r = run("ingest", str(DEMO), "--bulk", str(used))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"error: --bulk {used}: not an empty directory (the import files are written there; give a new "
        "or empty one)"]

    r = run("ingest", str(DEMO), "--neo4j-home", str(home))
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: --neo4j-home goes with --bulk DIR (the directory of the import files)"]


def test_bulk_import_files_without_a_server(tmp_path: Path) -> None:
    """Without --neo4j-home: the import files and their argument file, and the command to run."""
    r = run("ingest", str(DEMO), "--bulk", str(tmp_path / "import"), "--json")
    assert r.returncode == 0, r.stderr
    demo_facts = len(item_facts())  # the demo's item-valued statements, P31 aside, read from the file
    assert json.loads(r.stdout)["facts"] == demo_facts
    args = (tmp_path / "import" / "import.args").read_text(encoding="utf-8").split()
    files = [a.split("=", 2)[2] for a in args if a.startswith(("--nodes=", "--relationships="))]
    assert files and all((tmp_path / "import" / f).is_file() for f in files)
    assert sorted(p.name for p in (tmp_path / "import").iterdir()) == sorted([*files, "import.args"])
    # one line per FACT edge, plus the header
    fact_lines = (tmp_path / "import" / "rels-fact.csv").read_text(encoding="utf-8").count("\n")
    assert fact_lines == demo_facts + 1
    assert "neo4j-admin database import full neo4j @import.args" in r.stderr


def test_a_failed_import_is_one_line_and_leaves_no_database_behind(tmp_path: Path) -> None:
    """The import tool fails after creating the database's directories: kgprobe says so in one
    line (exit 1) and removes them, so that the same load can run again."""
    home = tmp_path / "neo4j"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "neo4j-admin").write_text(
        '#!/bin/sh\nmkdir -p "$NEO4J_HOME/data/databases/neo4j" "$NEO4J_HOME/data/transactions/neo4j"\n'
        'touch "$NEO4J_HOME/data/databases/neo4j/neostore"\necho "ERROR: disk full (made up)" >&2\nexit 70\n',
        encoding="utf-8")
    (home / "bin" / "neo4j-admin").chmod(0o755)
    r = run("ingest", str(DEMO), "--bulk", str(tmp_path / "import"), "--neo4j-home", str(home))
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()  # progress lines (not a terminal), then the one error
    assert "Traceback" not in r.stderr and [ln for ln in lines if ln.startswith("error:")] == lines[-1:]
    assert lines[-1].startswith("error: neo4j-admin database import failed (exit 70): ERROR: disk full (made up)")
    assert not (home / "data" / "databases" / "neo4j").exists()
    assert not (home / "data" / "transactions" / "neo4j").exists()
