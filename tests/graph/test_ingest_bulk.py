"""`kgprobe ingest --bulk`: the bulk first load of an empty Neo4j database (issue 37, item 4).

The bulk load (graph/bulk.py: import files + ``neo4j-admin database import full``) must write the
graph the online ingest writes: every node with all its properties, every edge with its own,
the sampling index and its counters, and the same constraints and indexes; afterwards the
online ingest must go on as on any graph (re-ingesting adds nothing, an update lands as it would
have), and the same probes must write the same scores. Compared here as sorted dumps read back
by Cypher, on the packaged demo graph plus a small dump of awkward values (line breaks, quotes,
commas, separators in labels and aliases, stubs) and 300 realistic dump lines.

The Neo4j comparison runs in the Neo4j half (KGPROBE_TEST_SERVER=neo4j): it needs the import
tool from Maven Central, as the Neo4j test server does. The refusals need no server.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _kgprobe_process import run_kgprobe
from conftest import FIXTURES, TEST_SERVER
from ingest_support import FILES_ONLY, graph_dump, import_rows
from loaders_support import gen_dump_module
from probe_world import same_props, score_props
from test_demo_graph import facts as item_facts
from tiny_models import TinyModel

import kgprobe
from kgprobe.graph.templates import demo_paths
from kgprobe.loaders.parallel import ENV_CHUNK_MB

DEMO = demo_paths()[0]
UPDATE = FIXTURES / "wikidata" / "entity-json" / "Q182397.json"
#: the checkout under test, for a CLI run from another directory
CODE = os.pathsep.join([str(Path(kgprobe.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])
#: the suite runs against a server named in the environment (read before `kgprobe_env` sets it)
EXTERNAL_SERVER = bool(os.environ.get("NEO4J_URI"))


def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_kgprobe(args, env or FILES_ONLY, cwd=cwd, timeout=600)


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


def schema(graph: Any) -> list[tuple[str, str, list[str], list[str]]]:
    rows = graph.read("SHOW INDEXES YIELD name, type, labelsOrTypes, properties "
                      "RETURN name, type, labelsOrTypes, properties")
    return sorted((r["name"], r["type"], r["labelsOrTypes"] or [], r["properties"] or []) for r in rows)


def constraints(graph: Any) -> list[tuple[str, str, list[str], list[str]]]:
    rows = graph.read("SHOW CONSTRAINTS YIELD name, type, labelsOrTypes, properties "
                      "RETURN name, type, labelsOrTypes, properties")
    return sorted((r["name"], r["type"], r["labelsOrTypes"] or [], r["properties"] or []) for r in rows)


def comparison_inputs(tmp_path: Path) -> list[str]:
    """What the bulk and the online load are compared on: the demo graph, the awkward dump, and
    300 realistic dump lines (every language's terms, sitelinks, references, qualifiers, the
    non-item datatypes; benchmarks/gen_dump.py) under QIDs of their own."""
    realistic = tmp_path / "realistic.json.gz"
    gen_dump_module().write_realistic_dump(realistic, 300, seed=7, first_id=990_100_001)
    return [str(DEMO), str(awkward_dump(tmp_path / "awkward.json")), str(realistic)]


def online_ingest_goes_on(env: dict[str, str], online_env: dict[str, str], inputs: list[str],
                          graph: Any, bulk_graph: Any, expected: tuple[list[str], list[str]]) -> None:
    """After a bulk load (reached through ``env``): the online ingest of the same input adds
    nothing, and an update lands on the bulk graph as on the online one (``online_env``), the
    sampling counters going on from the bulk's."""
    again = run("ingest", *inputs, env=env)
    assert again.returncode == 0, again.stderr
    assert graph_dump(bulk_graph) == expected
    for target in (env, online_env):
        update = run("ingest", str(UPDATE), env=target)
        assert update.returncode == 0, update.stderr
    updated = graph_dump(graph)
    assert updated != expected
    assert graph_dump(bulk_graph) == updated


#: two probes (a run has one distractor strategy) whose measures take their inputs from the
#: graph: distractors by temp+sem (the semantic index over the graph's entities, temporal
#: neighbours) and by random (the sampling index), other subjects and objects, object relations
PROBES = [["--measure", "kmin", "--measure", "karr", "--measure", "belief", "--measure", "factor"],
          ["--strategy", "random", "--measure", "kmin", "--measure", "kavg"]]
PROBE_OPTIONS = ["--sample", "40", "--at", "2025-01-01", "--no-cache", "--device", "cpu", "--json"]


def probes_agree(online_env: dict[str, str], bulk_env: dict[str, str], graph: Any, bulk_graph: Any,
                 model: Path) -> None:
    """The same probes of the online-loaded and the bulk-loaded graph write the same scores onto
    the same facts (within 1e-6). Each graph's semantic index is built from it, from scratch
    with the same settings: an index kept from an earlier graph in the same home is updated,
    not refitted, so its vectors would depend on that history."""
    templates = str(demo_paths()[1])
    props: list[list[str]] = []
    for env in (online_env, bulk_env):
        imported = run("templates", "import", templates, "-f", "kgprobe", env=env)
        assert imported.returncode == 0, imported.stderr
        built = run("index", "--rebuild", "--sample", "200000", "--dim", "128", "--json", env=env)
        assert built.returncode == 0, built.stderr
        for measures in PROBES:
            probed = run("probe", "--model", str(model), *measures, *PROBE_OPTIONS, env=env)
            assert probed.returncode == 0, probed.stderr
            summary = json.loads(probed.stdout)
            assert summary["scored"] >= 30, summary
            props.append(summary["score_properties"])
    assert props[:2] == props[2:] and sum(map(len, props[:2])) == 6
    want, got = score_props(graph), score_props(bulk_graph)
    for prop in props[0] + props[1]:  # every measure scored facts
        assert sum(p.get(prop) is not None for p in want.values()) >= 30, prop
    same_props(got, want)


def _second_managed_home(kgprobe_env: dict[str, str], home: Path) -> tuple[dict[str, str], Any]:
    """The environment and settings of a second, fresh managed ArcadeDB home on free ports."""
    from kgprobe.config import Settings
    from kgprobe.graph.server import free_port

    settings = Settings(home=home, bolt_port=free_port(), http_port=free_port(), heap="1g")
    env = {**kgprobe_env, "KGPROBE_HOME": str(home), "KGPROBE_BOLT_PORT": str(settings.bolt_port),
           "KGPROBE_HTTP_PORT": str(settings.http_port), "KGPROBE_DB_HEAP": "1g"}
    return env, settings


@pytest.mark.skipif(TEST_SERVER != "arcadedb" or EXTERNAL_SERVER,
                    reason="bulk load into the managed ArcadeDB: runs in the ArcadeDB half")
def test_bulk_load_into_arcadedb_writes_the_online_graph_and_the_online_ingest_goes_on(
    graph: Any, kgprobe_env: dict[str, str], tmp_path: Path, tiny_model: TinyModel
) -> None:
    """`--bulk DIR` with no NEO4J_URI: ArcadeDB's GraphImporter into the managed server's empty
    database, then the schema and what the importer cannot write; the same graph as online, and
    the same probe scores."""
    from kgprobe.graph.client import connect
    from kgprobe.graph.server import ManagedServer

    inputs = comparison_inputs(tmp_path)
    online = run("ingest", *inputs, "--json", env=kgprobe_env)
    assert online.returncode == 0, online.stderr
    expected = graph_dump(graph)

    env, settings = _second_managed_home(kgprobe_env, tmp_path / "bulk-home")
    try:
        cwd = tmp_path / "cwd"
        cwd.mkdir()
        bulk = run("ingest", *inputs, "--bulk", str(tmp_path / "import"), "--json",
                   "--workers", "2", env={**env, ENV_CHUNK_MB: "0.1", "PYTHONPATH": CODE}, cwd=cwd)
        assert bulk.returncode == 0, bulk.stderr + bulk.stdout
        assert not any(cwd.iterdir())  # nothing written where the command ran (the importer's log/)
        summary = json.loads(bulk.stdout)
        assert {k: v for k, v in summary.items() if k != "redirects_resolved"} == {
            k: v for k, v in json.loads(online.stdout).items() if k != "redirects_resolved"}
        assert "GraphImporter" in bulk.stderr
        # its own closing line, then the builds (not the last lines of their log)
        assert "Import complete" in bulk.stderr and "then 8 constraints and indexes built sorted" in bulk.stderr
        assert " INFO [GraphImporter]" not in bulk.stderr  # its line without the log's prefix
        with connect(settings) as bulk_graph:
            got = graph_dump(bulk_graph)
            assert len(got[0]) == len(expected[0]) and len(got[1]) == len(expected[1])
            assert got == expected
            facts = bulk_graph.read("MATCH ()-[f:FACT]->() RETURN count(f) AS n")[0]["n"]
            assert facts == summary["facts"] > 6000
            lines = bulk_graph.read("MATCH (e:Entity)-[f:FACT]->() WHERE e.qid STARTS WITH 'Q9901' "
                                    "RETURN count(DISTINCT e) AS n, count(f) AS facts")[0]
            assert lines["n"] >= 150 and lines["facts"] >= 1000, lines  # the realistic lines' facts
            # the importer's own sorted builds made the schema the online ingest's Cypher makes:
            # the same names, kinds, labels and properties (graph/bulk_arcadedb.schema_commands)
            # (GraphImporter declares the types of the properties it writes, which ArcadeDB lists
            # as property-type constraints, as it did before the indexes were built there)
            typed = [c for c in constraints(bulk_graph) if c[1].endswith("PROPERTY_TYPE")]
            assert [c[2:] for c in typed] == [(["Entity"], ["label"]), (["FACT"], ["key"]), (["FACT"], ["pid"])]
            assert [c for c in constraints(bulk_graph) if c not in typed] == constraints(graph)
            assert schema(bulk_graph) == schema(graph)
            assert ("factslot_key", "UNIQUENESS", ["FactSlot"], ["key"]) in constraints(bulk_graph)
            assert "Executing post-import command [sql]: CREATE INDEX `fact_key`" in (
                tmp_path / "import" / "arcadedb" / "import.log").read_text(encoding="utf-8")
            # the unique constraints hold on the imported data: a second Entity with a QID is refused
            with pytest.raises(Exception, match="(?i)duplicate|unique|already"):
                bulk_graph.write("CREATE (:Entity {qid: 'Q990000001'})")
            with pytest.raises(Exception, match="(?i)duplicate|unique|already"):
                bulk_graph.write("MATCH (s:FactSlot) WITH s LIMIT 1 CREATE (:FactSlot {id: s.id})")
            online_ingest_goes_on(env, kgprobe_env, inputs, graph, bulk_graph, expected)
            probes_agree(kgprobe_env, env, graph, bulk_graph, tiny_model("gpt2", positions=512))
        # a database that holds data is refused, in one line, before any file is written
        refused = run("ingest", str(DEMO), "--bulk", str(tmp_path / "again"), env=env)
        assert refused.returncode == 2
        assert refused.stderr.strip().splitlines() == [
            f"error: the managed graph ({settings.home}) is not empty; --bulk loads an empty database "
            "only: use `kgprobe ingest` without --bulk to add to it, or `kgprobe db wipe --yes` first"]
        assert not (tmp_path / "again").exists()
    finally:
        ManagedServer(settings).stop()


#: the statement id that `_key_twice_dump` puts under two entities
KEY_TWICE = "Q990000041$00000000-0000-0000-0000-000000000001"


def _key_twice_dump(path: Path) -> Path:
    """Two entities that hold one statement (its id ``KEY_TWICE``): a key twice in the input,
    which a bulk load in 2-record batches does not see (the writer checks one batch)."""
    shared = _claim("Q990000041", "P27", "Q990000031", 1)
    one = _entity("Q990000041", "one", "", [], {"P27": [shared]})
    two = _entity("Q990000042", "two", "", [], {"P27": [shared]})
    path.write_text("[\n" + ",\n".join(json.dumps(e) for e in (one, two)) + "\n]\n", encoding="utf-8")
    return path


@pytest.mark.skipif(TEST_SERVER != "arcadedb" or EXTERNAL_SERVER,
                    reason="bulk load into the managed ArcadeDB: runs in the ArcadeDB half")
def test_a_key_twice_across_batches_stops_an_arcadedb_bulk_load_in_one_line(
    kgprobe_env: dict[str, str], tmp_path: Path
) -> None:
    """One statement id under two entities, in two batches (the writer's check of a key met
    twice sees one batch): ArcadeDB's sorted build of the unique index is skipped without a
    word, so the load checks the constraints and stops in one line (exit 4) naming the key,
    where it used to end with exit 0, the fact twice and no ``factslot_key`` constraint."""
    from kgprobe.graph.server import ManagedServer

    path = _key_twice_dump(tmp_path / "twice.json")
    env, settings = _second_managed_home(kgprobe_env, tmp_path / "bulk-home")
    try:
        got = run("ingest", str(path), "--bulk", str(tmp_path / "import"), "--batch-size", "2",
                  "--workers", "1", env={**env, "PYTHONPATH": CODE})
        assert got.returncode == 4, got.stderr + got.stdout
        line = got.stderr.strip().splitlines()[-1]
        assert line == (f"error: the graph has FactSlot nodes whose key repeats ('{KEY_TWICE}'), so the "
                        "unique constraint factslot_key cannot be built: a bulk load of an input that "
                        "holds such a key twice does this. Load the input without --bulk (the online "
                        "ingest merges them) after `kgprobe db wipe --yes`"), got.stderr
    finally:
        ManagedServer(settings).stop()


@pytest.mark.skipif(TEST_SERVER != "neo4j" or EXTERNAL_SERVER,
                    reason="bulk load into Neo4j: runs in the Neo4j half (KGPROBE_TEST_SERVER=neo4j)")
def test_bulk_load_writes_the_online_graph_and_the_online_ingest_goes_on(
    graph: Any, kgprobe_env: dict[str, str], graph_settings: Any, tmp_path: Path, tiny_model: TinyModel
) -> None:
    from neo4j_server import USER, Neo4jTestServer, install_admin

    from kgprobe.config import Settings
    from kgprobe.graph.client import connect

    inputs = comparison_inputs(tmp_path)
    online = run("ingest", *inputs, "--json", env=kgprobe_env)
    assert online.returncode == 0, online.stderr
    expected = graph_dump(graph)
    expected_schema = schema(graph)

    base = tmp_path / "bulk-server"
    install_admin(base / "home")
    # two workers on small chunks: each worker formats its chunks' rows (build_chunk)
    bulk = run("ingest", *inputs, "--bulk", str(tmp_path / "import"),
               "--neo4j-home", str(base / "home"), "--json", "--workers", "2",
               env={**kgprobe_env, ENV_CHUNK_MB: "0.1"})
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
            lines = bulk_graph.read("MATCH (e:Entity)-[f:FACT]->() WHERE e.qid STARTS WITH 'Q9901' "
                                    "RETURN count(DISTINCT e) AS n, count(f) AS facts")[0]
            assert lines["n"] >= 150 and lines["facts"] >= 1000, lines  # the realistic lines' facts

            env = {**kgprobe_env, "NEO4J_URI": uri, "NEO4J_USER": USER, "NEO4J_PASSWORD": server.password}
            online_ingest_goes_on(env, kgprobe_env, inputs, graph, bulk_graph, expected)
            # a home of its own: the semantic index the probe builds is this graph's
            probes_agree(kgprobe_env, {**env, "KGPROBE_HOME": str(tmp_path / "bulk-probe-home")}, graph,
                         bulk_graph, tiny_model("gpt2", positions=512))
    finally:
        server.stop()


@pytest.mark.skipif(TEST_SERVER != "neo4j" or EXTERNAL_SERVER,
                    reason="bulk load into Neo4j: runs in the Neo4j half (KGPROBE_TEST_SERVER=neo4j)")
def test_a_key_twice_across_batches_stops_the_first_connection_to_a_neo4j_import_in_one_line(
    kgprobe_env: dict[str, str], tmp_path: Path
) -> None:
    """The Neo4j side of the ArcadeDB test above: the import tool takes the key twice (the
    FactSlot's id is its ordinal, not its key), and the first connection afterwards, which
    creates the constraints, meets Neo4j's refusal of ``factslot_key``. That refusal becomes
    kgprobe's one line (exit 4) naming the key and what to do, not the server's error."""
    from neo4j_server import USER, Neo4jTestServer, install_admin

    path = _key_twice_dump(tmp_path / "twice.json")
    base = tmp_path / "bulk-server"
    install_admin(base / "home")
    bulk = run("ingest", str(path), "--bulk", str(tmp_path / "import"), "--neo4j-home",
               str(base / "home"), "--batch-size", "2", "--workers", "1", env=kgprobe_env)
    assert bulk.returncode == 0, bulk.stderr + bulk.stdout
    server = Neo4jTestServer(base)
    uri = server.start()
    try:
        env = {**kgprobe_env, "NEO4J_URI": uri, "NEO4J_USER": USER, "NEO4J_PASSWORD": server.password}
        for _ in range(2):  # and again: the refused constraint is not left half made
            got = run("stats", env=env)
            assert got.returncode == 4, got.stderr + got.stdout
            assert got.stderr.strip().splitlines() == [
                f"error: the graph has FactSlot nodes whose key repeats ('{KEY_TWICE}'), so the unique "
                "constraint factslot_key cannot be built: a bulk load of an input that holds such a "
                "key twice does this. Load the input without --bulk (the online ingest merges them) "
                "into an empty database"], got.stderr
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
    """Without --neo4j-home, a Neo4j server configured: the import files and their argument
    file, and the command to run (the server is not reached)."""
    r = run("ingest", str(DEMO), "--bulk", str(tmp_path / "import"), "--json")
    assert r.returncode == 0, r.stderr
    demo_facts = len(item_facts())  # the demo's item-valued statements, P31 aside, read from the file
    assert json.loads(r.stdout)["facts"] == demo_facts
    args = (tmp_path / "import" / "import.args").read_text(encoding="utf-8").split()
    files = [a.split("=", 2)[2] for a in args if a.startswith(("--nodes=", "--relationships="))]
    assert files and all((tmp_path / "import" / f).is_file() for f in files)
    # and the load's last checkpoint: a --resume goes straight to the import (test_bulk_resume.py)
    assert sorted(p.name for p in (tmp_path / "import").iterdir()) == sorted([*files, "import.args",
                                                                              "checkpoint.json"])
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


@pytest.mark.skipif(TEST_SERVER != "arcadedb", reason="ArcadeDB's importer, no server: the ArcadeDB half")
def test_graphimporter_out_of_heap_names_the_heap_a_load_like_it_needs(tmp_path: Path) -> None:
    """GraphImporter in too small a heap: one line with the heap it had, the nodes and edges it
    was importing, and a KGPROBE_DB_HEAP to set; no database left; that setting then imports."""
    import re

    from kgprobe.errors import KgprobeError
    from kgprobe.graph.bulk import ImportFiles
    from kgprobe.graph.bulk_arcadedb import run_graph_importer, write_arcadedb_files
    from kgprobe.graph.server import _package_dir

    r = run("ingest", str(DEMO), "--bulk", str(tmp_path / "import"), "--json")
    assert r.returncode == 0, r.stderr
    d = tmp_path / "import"
    arcade = write_arcadedb_files(ImportFiles(d, (d / "import.args").read_text(encoding="utf-8").split(), None))
    # counted apart: the lines of the importer's files
    lines = {kind: sum(f.read_bytes().count(b"\n") for f in (d / "arcadedb").glob(f"{kind}-*.jsonl"))
             for kind in ("nodes", "rels")}
    assert (arcade.vertices, arcade.edges) == (lines["nodes"], lines["rels"]) and arcade.edges > 7000
    pkg = _package_dir()
    java, classpath, database = pkg / "jre" / "bin" / "java", f"{pkg / 'jars'}/*", tmp_path / "db"
    with pytest.raises(KgprobeError) as failed:
        run_graph_importer(arcade, java, classpath, database, "40m")
    message = str(failed.value)
    assert message.startswith(
        f"ArcadeDB GraphImporter ran out of its heap (40m, KGPROBE_DB_HEAP) importing "
        f"{lines['nodes']:,} nodes and {lines['rels']:,} edges; ")
    assert "java.lang.OutOfMemoryError" in (d / "arcadedb" / "import.log").read_text(encoding="utf-8")
    assert not database.exists()
    suggested = re.search(r"set KGPROBE_DB_HEAP=(\d+[mg]) and load again", message)
    assert suggested, message
    closing = run_graph_importer(arcade, java, classpath, database, suggested.group(1))
    assert closing.startswith(f"Import complete: {lines['nodes']:,} vertices, {lines['rels']:,} edges")


def test_graphimporter_heap_need_follows_the_measured_points_and_their_square_root_beyond() -> None:
    """The heap a GraphImporter load needs: the measured completing heaps at their sizes
    (docs/benchmarks.md), between them in between, and beyond the last one the growth every
    measured step followed, 427 MB x sqrt(million nodes and edges) (fitted by hand to the
    table: 0.76M 384, 3.8M 896, 7.6M 1,280, 15.1M 1,664 MB)."""
    from kgprobe.graph.bulk_arcadedb import importer_heap_need

    mb = 2**20
    assert importer_heap_need(2_060_354, 1_710_231) == (896 * mb, True)  # the 350,000-entity dump
    assert importer_heap_need(8_273_724, 6_873_620) == (1664 * mb, True)  # the 1.4M-entity dump
    between, measured = importer_heap_need(3_000_000, 2_000_000)
    assert measured and 896 * mb < between < 1280 * mb
    full, measured = importer_heap_need(700_000_000, 600_000_000)  # ~all of Wikidata
    assert not measured and abs(full / (427 * mb * 1300**0.5) - 1) < 0.05


def test_bulk_workers_hand_back_rows_not_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With --bulk and several workers, what crosses back to the main process per chunk is one
    `ChunkRows` (the chunk's rows, formatted by its worker) and its error records, never the
    entity and fact records; written by `BulkWriter`, they make the import files of one process
    reading the records."""
    from kgprobe.graph.bulk import BulkWriter, ChunkRows, build_chunk, write_import_files
    from kgprobe.loaders import open_source
    from kgprobe.loaders.common import Filters
    from kgprobe.records import EntityRecord, FactRecord

    monkeypatch.setenv(ENV_CHUNK_MB, "0.1")
    sources = [DEMO, awkward_dump(tmp_path / "awkward.json")]
    handed = [r for src in sources for r in open_source(src, Filters.make(), workers=2, post=build_chunk)]
    chunks = [r for r in handed if isinstance(r, ChunkRows)]
    assert len(chunks) > 5  # the demo spans many chunks
    # only the JSON-lines head line of a file is parsed here: records of one entity at most
    assert len([r for r in handed if isinstance(r, (EntityRecord, FactRecord))]) <= 20
    writer = BulkWriter(tmp_path / "workers")
    for r in handed:
        writer.add(r)
    got = writer.finish()
    one = write_import_files((r for src in sources for r in open_source(src, Filters.make())),
                             tmp_path / "one")
    assert got.summary.to_dict() == one.summary.to_dict()
    assert got.summary.facts == len(item_facts()) + 3  # the awkward dump's facts, P31 aside
    assert import_rows(tmp_path / "workers") == import_rows(tmp_path / "one")


def test_bulk_cli_with_two_workers_writes_the_files_of_one(tmp_path: Path) -> None:
    r1 = run("ingest", str(DEMO), "--bulk", str(tmp_path / "one"), "--workers", "1", "--json")
    r2 = run("ingest", str(DEMO), "--bulk", str(tmp_path / "two"), "--workers", "2", "--json",
             env={**FILES_ONLY, ENV_CHUNK_MB: "0.1"})
    assert r1.returncode == r2.returncode == 0, r1.stderr + r2.stderr
    assert json.loads(r1.stdout) == json.loads(r2.stdout)
    one, two = (sorted((p.name, p.read_bytes()) for p in (tmp_path / d).iterdir()) for d in ("one", "two"))
    assert one == two  # every file, byte for byte
    assert import_rows(tmp_path / "one")  # rows were written


def test_slots_are_written_in_input_order_and_numbered_on_per_space() -> None:
    """A batch's slots keep their input order across spaces; each space's ordinals go on from
    the batches before; a refused subject's rows go, and the rest of its space close up."""
    from kgprobe.graph.bulk import Slots

    rows = [("P19", "Q1$a", "Q1"), ("P27", "Q1$b", "Q1"), ("P19", "Q2$c", "Q2"), ("P19", "Q3$d", "Q3")]
    counts = {"P19": 5}  # five P19 slots written by earlier batches
    assert Slots.of(rows).lines(counts) == [
        '"Q1$a","P19:5","Q1"\n', '"Q1$b","P27:0","Q1"\n', '"Q2$c","P19:6","Q2"\n', '"Q3$d","P19:7","Q3"\n']
    assert counts == {"P19": 8, "P27": 1}
    kept = Slots.of(rows).without({"Q2"}).lines({})
    assert kept == ['"Q1$a","P19:0","Q1"\n', '"Q1$b","P27:0","Q1"\n', '"Q3$d","P19:1","Q3"\n']


def test_bulk_workers_refuse_an_entity_met_in_an_earlier_chunk(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """An entity line met again in a later chunk is an error record: written once (the first),
    and the second's type edge and sampling slot are left out with it."""
    from kgprobe.graph.bulk import build_chunk, write_import_files
    from kgprobe.loaders import open_source
    from kgprobe.loaders.common import Filters

    monkeypatch.setenv(ENV_CHUNK_MB, "0.0003")  # 314 bytes: one line per chunk
    first = _entity("Q990000011", "first", "", [], {"P31": [_claim("Q990000011", "P31", "Q990000013", 1)]})
    again = _entity("Q990000011", "again", "", [], {"P31": [_claim("Q990000011", "P31", "Q990000014", 2)]})
    other = _entity("Q990000012", "other", "", [], {"P27": [_claim("Q990000012", "P27", "Q990000011", 3)]})
    path = tmp_path / "again.json"
    path.write_text("[\n" + ",\n".join(json.dumps(e) for e in (first, other, again)) + "\n]\n", encoding="utf-8")
    files = write_import_files(open_source(path, Filters.make(), workers=2, post=build_chunk),
                               tmp_path / "import")
    s = files.summary
    assert (s.entities, s.facts, s.error_count) == (2, 1, 1)
    assert s.errors[0].message.startswith("entity Q990000011: met again (the bulk load takes each entity once")
    rows = import_rows(tmp_path / "import")
    assert rows[("--relationships", "INSTANCE_OF", ":START_ID,:END_ID")] == ['"Q990000011","Q990000013"']
    slots = [row for (flag, label, _h), v in rows.items() if label == "TypeSlot" for row in v]
    assert slots == ['"Q990000013|Q990000011","Q990000013:0","Q990000011"']
    entity_rows = [row for (flag, label, _h), v in rows.items() if label == "Entity" for row in v]
    # Q990000014: a bare stub, as the one-process load leaves the refused line's types
    assert sorted(row.split(",")[0] for row in entity_rows) == [
        '"Q990000011"', '"Q990000012"', '"Q990000013"', '"Q990000014"']
    assert [row for row in entity_rows if row.startswith('"Q990000011"')] == ['"Q990000011","first",,']


@pytest.mark.parametrize("workers", [1, 2])
def test_a_line_met_again_in_a_later_batch_is_left_out_with_its_facts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int) -> None:
    """A dump whose entity line comes again after an earlier batch wrote it (a download joined
    twice, say): the second line is one error record, and neither its facts nor their sampling
    slots are written, so no statement key is repeated (the unique constraints, built after the
    whole import, refused the load when they were). With one worker the batches are cut inside
    a line (two records each), so the line's facts run on into the next batch; with two, one
    line per chunk. The counts are the first line's."""
    from kgprobe.graph.bulk import build_chunk, write_import_files
    from kgprobe.loaders import open_source
    from kgprobe.loaders.common import Filters

    monkeypatch.setenv(ENV_CHUNK_MB, "0.0003")  # 314 bytes: one line per chunk
    claims = {"P27": [_claim("Q990000021", "P27", "Q990000031", 1, qualifiers={"P580": [_time(1990)]})],
              "P19": [_claim("Q990000021", "P19", "Q990000032", 2)],
              "P69": [_claim("Q990000021", "P69", "Q990000033", 3)]}
    first = _entity("Q990000021", "first", "", [], claims)
    other = _entity("Q990000022", "other", "", [], {"P27": [_claim("Q990000022", "P27", "Q990000031", 4)]})
    path = tmp_path / "again.json"
    path.write_text("[\n" + ",\n".join(json.dumps(e) for e in (first, other, first, other)) + "\n]\n",
                    encoding="utf-8")
    post = build_chunk if workers > 1 else None
    files = write_import_files(open_source(path, Filters.make(), workers=workers, post=post),
                               tmp_path / "import", batch_size=2)
    s = files.summary
    # by hand: 2 entities; facts 3 + 1; one qualifier and one temporal fact (P27 from 1990)
    assert (s.entities, s.facts, s.qualifiers, s.temporal_facts, s.error_count) == (2, 4, 1, 1, 2)
    assert [e.message.split(":")[0] for e in s.errors] == ["entity Q990000021", "entity Q990000022"]
    rows = import_rows(tmp_path / "import")
    facts = [row for (flag, label, _h), v in rows.items() if label == "FACT" for row in v]
    slots = [row for (flag, label, _h), v in rows.items() if label == "FactSlot" for row in v]
    keys = ["Q990000021$00000000-0000-0000-0000-000000000001", "Q990000021$00000000-0000-0000-0000-000000000002",
            "Q990000021$00000000-0000-0000-0000-000000000003", "Q990000022$00000000-0000-0000-0000-000000000004"]
    assert sorted(row.split(",")[2].strip('"') for row in facts) == keys
    assert sorted(row.split(",")[0].strip('"') for row in slots) == keys
    assert sorted(row.split(",")[1] for row in slots) == ['"P19:0"', '"P27:0"', '"P27:1"', '"P69:0"']


def test_a_repeated_line_is_refused_whole_wherever_the_batches_are_cut(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An entity line met again with other content (a later label, a type and a fact more: two
    snapshots joined) is one error record wherever it falls: in the batch of the first line,
    in a later batch, its facts running on over several batches (one record a batch), in the
    chunk of the first line or in another. The first line is written, and of the second only
    what it refers to (ids as stubs, relations: a load that refuses it against earlier batches
    has only formatted rows): the same files byte for byte and the same summary for every cut. Before, one batch merged
    the two lines (the second label, its type and fact, both entities counted, the facts again
    counted as duplicate statements) while two batches refused the second, and in batches of
    one record its facts after the first run-on batch were written again (a key twice)."""
    from kgprobe.graph.bulk import build_chunk, write_import_files
    from kgprobe.loaders import open_source
    from kgprobe.loaders.common import Filters

    q = "Q990000021"
    facts = {"P27": [_claim(q, "P27", "Q990000031", 1, qualifiers={"P580": [_time(1990)]})],
             "P19": [_claim(q, "P19", "Q990000032", 2)], "P69": [_claim(q, "P69", "Q990000033", 3)]}
    first = _entity(q, "first", "", [], {**facts, "P31": [_claim(q, "P31", "Q5", 5)]})
    again = _entity(q, "again", "", [], {**facts, "P31": [_claim(q, "P31", "Q5", 5), _claim(q, "P31", "Q6", 6)],
                                         "P106": [_claim(q, "P106", "Q990000034", 7)]})
    other = _entity("Q990000022", "other", "", [], {"P27": [_claim("Q990000022", "P27", "Q990000031", 4)]})
    third = _entity("Q990000023", "third", "", [], {"P19": [_claim("Q990000023", "P19", "Q990000032", 8)]})
    path = tmp_path / "joined.json"
    path.write_text("[\n" + ",\n".join(json.dumps(e) for e in (first, other, again, third)) + "\n]\n",
                    encoding="utf-8")
    loads = {f"batch {n}": (1, n, "1") for n in (1, 2, 3, 5000)}
    loads |= {"a line a chunk": (2, 5000, "0.0003"), "one chunk": (2, 5000, "1")}
    files: dict[str, dict[str, bytes]] = {}
    summaries: dict[str, Any] = {}
    for name, (workers, batch, chunk_mb) in loads.items():
        monkeypatch.setenv(ENV_CHUNK_MB, chunk_mb)
        out = tmp_path / name.replace(" ", "-")
        got = write_import_files(open_source(path, Filters.make(), workers=workers,
                                             post=build_chunk if workers > 1 else None), out, batch_size=batch)
        s = got.summary
        summaries[name] = (s.records, s.entities, s.facts, s.qualifiers, s.temporal_facts, s.type_edges,
                           s.error_count, [(e.location, e.message) for e in s.errors], dict(s.skipped))
        files[name] = {f.name: f.read_bytes() for f in sorted(out.iterdir()) if f.is_file()}
    one = summaries["batch 5000"]
    # by hand: entities first, other, third; facts 3 + 1 + 1; the P27 fact's qualifier and
    # temporal fact; the first line's one type edge; the second line is the one error
    assert one[1:7] == (3, 5, 1, 1, 1, 1), one
    assert one[7] == [(q, f"entity {q}: met again (the bulk load takes each entity once: its first line "
                          "is written); load it with the online ingest (without --bulk)")]
    assert "duplicate-statement" not in one[8]
    rows = import_rows(tmp_path / "batch-5000")
    keys = sorted(row.split(",")[2].strip('"') for (_f, label, _h), v in rows.items() if label == "FACT"
                  for row in v)
    assert keys == [f"{q}$00000000-0000-0000-0000-00000000000{n}" for n in (1, 2, 3)] + [
        "Q990000022$00000000-0000-0000-0000-000000000004", "Q990000023$00000000-0000-0000-0000-000000000008"]
    entity_rows = [row for (_f, label, _h), v in rows.items() if label == "Entity" for row in v]
    assert any(row.startswith(f'"{q}","first"') for row in entity_rows), entity_rows
    assert not any('"again"' in row for row in entity_rows)
    assert [row for (_f, label, _h), v in rows.items() if label == "INSTANCE_OF" for row in v] == [f'"{q}","Q5"']
    for name in loads:
        assert summaries[name] == one, name
        assert files[name] == files["batch 5000"], name


def test_bulk_workers_report_malformed_lines_with_their_byte_offsets(tmp_path: Path) -> None:
    """Two broken lines in different chunks of two workers: --max-errors 5 reports both with
    their byte offsets and writes the rest; --max-errors 1 stops with exit 4."""
    good = [_entity(f"Q99000010{i}", f"e{i}", "", [], {"P27": [_claim(f"Q99000010{i}", "P27", "Q990000200", i)]})
            for i in range(6)]
    lines = [json.dumps(e) + "," for e in good[:2]] + ["{not json,"] + [json.dumps(e) + "," for e in good[2:4]] \
        + ["{not json,"] + [json.dumps(e) + "," for e in good[4:]]
    lines[-1] = lines[-1].rstrip(",")
    raw = ["[", *lines, "]"]
    path = tmp_path / "broken.json"
    path.write_text("\n".join(raw) + "\n", encoding="utf-8")
    offsets = [sum(len(x.encode()) + 1 for x in raw[:i]) for i, x in enumerate(raw) if x == "{not json,"]
    env = {**FILES_ONLY, ENV_CHUNK_MB: "0.0003"}
    ok = run("ingest", str(path), "--bulk", str(tmp_path / "ok"), "--workers", "2", "--max-errors", "5",
             "--json", env=env)
    assert ok.returncode == 0, ok.stderr
    summary = json.loads(ok.stdout)
    assert (summary["facts"], summary["errors"]) == (6, 2)
    assert [f"byte offset {o:,}" in e for o, e in zip(offsets, summary["first_errors"], strict=True)] == [True, True]
    stopped = run("ingest", str(path), "--bulk", str(tmp_path / "stopped"), "--workers", "2",
                  "--max-errors", "1", env=env)
    assert stopped.returncode == 4, stopped.stderr
    assert f"byte offset {offsets[0]:,}" in stopped.stderr.strip().splitlines()[-1]


def test_the_import_files_are_written_with_the_collector_held_back(tmp_path: Path) -> None:
    """Records and rows are made in bulk: `write_import_files` reads its records with the cyclic
    collector's first threshold raised, as an online ingest does (kgprobe.runtime), and leaves
    it as it found it, also when the records fail midway."""
    import gc

    from kgprobe.errors import InputError
    from kgprobe.graph.bulk import write_import_files
    from kgprobe.loaders import open_source
    from kgprobe.loaders.common import Filters

    seen: list[int] = []

    def noting(fail: bool) -> Any:
        for i, r in enumerate(open_source(DEMO, Filters.make())):
            seen.append(gc.get_threshold()[0])
            if fail and i == 50:
                raise InputError("truncated input")
            yield r

    before = gc.get_threshold()
    files = write_import_files(noting(False), tmp_path / "b")
    assert files.summary.facts > 0 and len(seen) > 100
    assert min(seen) >= 100_000  # Python's default is 700
    assert gc.get_threshold() == before
    with pytest.raises(InputError, match="truncated"):
        write_import_files(noting(True), tmp_path / "c")
    assert gc.get_threshold() == before


def test_graphimporters_files_are_the_same_whatever_the_workers_and_parts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ArcadeDB conversion in 2 worker processes, each import file cut into parts of 2 kB
    (the rows' line ends; the ``-ml`` file of rows with line breaks whole), writes byte for byte
    the files one process writes from whole files: the same rows, in the same order, the same
    edge files by numeric properties present, the same configuration."""
    import filecmp

    from kgprobe.graph import bulk_arcadedb
    from kgprobe.graph.bulk import ImportFiles, write_import_files
    from kgprobe.graph.import_rows import ranges
    from kgprobe.loaders import open_source
    from kgprobe.loaders.common import Filters

    awkward = awkward_dump(tmp_path / "awkward.json")
    made = []
    for name in ("one", "two"):
        files = write_import_files((r for src in (DEMO, awkward) for r in open_source(src, Filters.make())),
                                   tmp_path / name)
        made.append(ImportFiles(files.directory, files.args, files.summary, files.multiline))
    assert any(n.endswith("-ml.csv") for n in made[0].multiline)
    assert len(list(ranges(tmp_path / "two" / "rels-fact.csv", 2048))) > 100
    one = bulk_arcadedb.write_arcadedb_files(made[0], 1, part_bytes=1 << 40)
    monkeypatch.setattr(bulk_arcadedb, "PARALLEL_BYTES", 0)  # workers, small as the files are
    two = bulk_arcadedb.write_arcadedb_files(made[1], 2, part_bytes=2048)
    assert (one.vertices, one.edges, one.patched) == (two.vertices, two.edges, two.patched)
    assert one.edges > 7000 and one.patched > 0
    a, b = tmp_path / "one" / "arcadedb", tmp_path / "two" / "arcadedb"
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir()) and "parts" not in names
    assert filecmp.cmpfiles(a, b, names, shallow=False)[0] == names
    assert one.created == two.created
