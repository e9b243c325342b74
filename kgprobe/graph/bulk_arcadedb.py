"""The bulk first load of the managed ArcadeDB (``kgprobe ingest --bulk DIR``, no ``NEO4J_URI``).

ArcadeDB's own bulk importer is ``GraphImporter`` (``com.arcadedb.integration.importer.graph``,
in the ``arcadedb-integration`` jar the ``arcadedb-embedded`` wheel ships): on a stopped server
it creates the database afresh and writes vertices, then edges, through ``GraphBatch`` (no WAL,
no per-row index look-up). The rows are the Neo4j import files' (graph/bulk.py writes them:
one row builder for both servers); this module turns them into what GraphImporter reads, runs
it, and writes afterwards over Bolt what it cannot write as the online ingest does.

Why not the CSV files as they are, and what goes over Bolt (measured on 26.10.2):

* Its CSV reader splits on the delimiter with no quoting (a label with a comma breaks a row),
  so the rows are read back with Python's csv module and written as JSON lines, which it reads
  (graph/import_rows.py: each file cut into parts at line ends, converted in the ingest's worker
  processes, the parts joined in order: the same files for any number of workers).
* A numeric property missing from a row is written as 0 (``RecordReader.getLong`` and friends),
  where the online graph has none. FACT edges are therefore split into one file per set of
  numeric properties present (several edge sources of one type are allowed); Entity nodes, which
  must come from ONE source (a second source of a type is refused), leave their numeric
  properties (a type's sampling counters, kgprobe's ``popularity``) to a patch over Bolt, by
  ``qid``. Relation and SampleIndex nodes (a few hundred) are created over Bolt.
* An empty string is left out (no row builder writes one: labels, descriptions and FACT
  properties are written only when not empty).

The constraints and indexes of the imported labels are built by GraphImporter itself once its
rows are in (its ``postImportCommands``), with ArcadeDB's sorted build (``buildMode: SORTED``: an
external sort of the keys, then the index pages written in order). The first connection's
`ensure_schema` afterwards finds them (``IF NOT EXISTS``) and creates the rest, before the patch
(which finds nodes by ``qid`` through them). Cypher's ``CREATE CONSTRAINT`` and ``CREATE INDEX``
build an index on existing records one record at a time; a unique index so built costs more per
record as it grows (5M statements: 28 s for each of FactSlot's two, 71 s for the schema in all;
the sorted build: 2 s; docs/benchmarks.md). The sorted build is an ArcadeDB SQL option only, so
the commands are SQL and name each index and constraint as the Cypher of graph/schema.py does
(a unique constraint's name is ArcadeDB's Cypher registry entry on the type); the suite compares
the schema with the online ingest's (``SHOW CONSTRAINTS``, ``SHOW INDEXES``).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NotRequired, TypedDict

from kgprobe.errors import ConfigError, KgprobeError
from kgprobe.graph.bulk import ImportFiles
from kgprobe.graph.import_rows import Job, columns, ranges, read_header, read_rows
from kgprobe.graph.import_rows import convert as convert_rows
from kgprobe.graph.schema import (
    FACT_INDEXES,
    NODE_INDEXES,
    UNIQUE_KEYS,
    schema_name,
)
from kgprobe.processes import ordered_map
from kgprobe.types import Properties

#: The importer's class; its ``main`` takes (config file, database path, data directory).
IMPORTER_CLASS = "com.arcadedb.integration.importer.graph.GraphImporter"
#: Labels created over Bolt after the import (few rows, numeric properties that may be absent).
OVER_BOLT = ("Relation", "SampleIndex")
#: Sub-directory of the --bulk directory with the importer's files.
SUBDIR = "arcadedb"
#: the start of an ArcadeDB log line: "2026-11-28 23:18:16.201 INFO  [GraphImporter] "
_LOG_PREFIX = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ +[A-Z]+ +\[[^\]]*\] +")


class _VertexSource(TypedDict):
    """One of GraphImporter's ``vertices``: a label's JSON-lines file and its property specs
    (``id``: the key column, Entity's only)."""

    type: str
    file: str
    properties: dict[str, str]
    id: NotRequired[str]


#: One of GraphImporter's ``edgeSources`` (``from`` is a keyword: the functional form)
_EdgeSource = TypedDict("_EdgeSource", {"edge": str, "file": str, "from": str, "to": str,
                                        "properties": dict[str, str]})


#: GraphImporter's heap need, measured on realistic dumps (docs/benchmarks.md, "GraphImporter's
#: heap"): (nodes + edges imported, the least -Xmx of those tried that it completed in). Its edge
#: pass needs the heap (the 350,000-entity dump's vertices alone ran in 256 MB, the whole import
#: in 896 MB), and the need grew as the square root of the count: 427 MB x sqrt(million rows)
#: fits every size from 0.76M to 15M rows within the step tried.
IMPORTER_HEAP_MEASURED: tuple[tuple[int, int], ...] = (
    (22_459, 96 << 20), (759_656, 384 << 20), (3_770_585, 896 << 20), (7_560_960, 1280 << 20),
    (15_147_344, 1664 << 20))


def importer_heap_need(vertices: int, edges: int) -> tuple[int, bool]:
    """Bytes of heap GraphImporter needs for a load of this size, and whether that is measured
    (the points above, interpolated) or projected (past the last point: its need times the
    square root of the ratio of the counts, the growth every measured step followed)."""
    rows = vertices + edges
    points = IMPORTER_HEAP_MEASURED
    if rows <= points[0][0]:
        return points[0][1], True
    for (r0, h0), (r1, h1) in zip(points, points[1:], strict=False):
        if rows <= r1:
            return int(h0 + (h1 - h0) * (rows - r0) / (r1 - r0)), True
    last_rows, last_heap = points[-1]
    return int(last_heap * (rows / last_rows) ** 0.5), False


@dataclass
class ArcadeFiles:
    """What GraphImporter reads (``config``, files beside it) and what goes over Bolt after."""

    config: Path
    #: the nodes and edges GraphImporter writes
    vertices: int = 0
    edges: int = 0
    #: per label created over Bolt, its rows
    created: dict[str, list[Properties]] = field(default_factory=dict)
    #: JSON lines of ``{"qid": ..., "props": {...}}``: Entity numeric properties
    patch: Path | None = None
    patched: int = 0


def _spec(name: str, kind: str) -> str:
    """GraphImporter's property spec for a column type."""
    return {"string": name, "string[]": f"list:{name}", "long": f"long:{name}",
            "double": f"double:{name}", "boolean": f"bool:{name}"}[kind]


def _groups(args: list[str]) -> Iterator[tuple[str, str, str]]:
    """(``nodes``/``relationships``, label or type, file name) from the import's arguments."""
    for arg in args:
        for flag in ("nodes", "relationships"):
            if arg.startswith(f"--{flag}="):
                label, name = arg[len(flag) + 3:].split("=", 1)
                yield flag, label, name


#: Bytes of an import file one conversion job reads. Outside their ``-ml`` siblings the import
#: files hold one row a line (graph/bulk.py), so a file splits at any line end; the jobs run in
#: the ingest's worker processes (`kgprobe.processes.ordered_map`) and their parts are joined in
#: order, so the files are those one process writes.
PART_BYTES = 8 << 20
#: Below this many bytes of import files the conversion runs in this process: a worker's start
#: (spawn, imports: ~0.3 CPU-s) would cost more than it saves.
PARALLEL_BYTES = 64 << 20


def _append(target: IO[bytes], part: Path) -> None:
    """``part``'s bytes at the end of ``target``; ``part`` removed."""
    with part.open("rb") as fh:
        shutil.copyfileobj(fh, target, 1 << 20)
    part.unlink()


def write_arcadedb_files(files: ImportFiles, workers: int = 1, part_bytes: int = PART_BYTES) -> ArcadeFiles:
    """The import files of ``files`` as GraphImporter's JSON lines and configuration, converted
    in ``workers`` processes (one where the files are small: `PARALLEL_BYTES`); the same files
    whatever the number."""
    d = files.directory
    out = d / SUBDIR
    if out.is_dir():  # made by a load that stopped after its import files were complete
        shutil.rmtree(out)
    out.mkdir()
    parts = out / "parts"
    parts.mkdir()
    result = ArcadeFiles(config=out / "graphimporter.json")
    vertex_files: dict[str, list[str]] = {}
    edge_files: dict[str, list[str]] = {}
    for flag, label, name in _groups(files.args):
        (vertex_files if flag == "nodes" else edge_files).setdefault(label, []).append(name)
    jobs: list[Job] = []
    for edge, groups in ((False, vertex_files), (True, edge_files)):
        for label, names in groups.items():
            if label in OVER_BOLT:
                result.created[label] = [r for n in names for r in read_rows(d / n)]
                continue
            for n in names:
                jobs += [Job(edge, label, str(d / n), a, b, str(parts / str(len(jobs) + i)))
                         for i, (a, b) in enumerate(ranges(d / n, part_bytes))]
    big = sum(j.end - j.start for j in jobs) >= PARALLEL_BYTES
    vertices: dict[str, _VertexSource] = {}
    edges: list[_EdgeSource] = []
    kinds: dict[str, dict[str, str]] = {}  # per edge type, the columns of its files met so far
    split_names: dict[tuple[str, tuple[str, ...]], str] = {}
    handles: dict[str, IO[bytes]] = {}
    patch = out / "entity-numbers.jsonl"
    heads: dict[str, list[tuple[str, str]]] = {}  # each file's columns, read once
    try:
        for job, done in ordered_map(convert_rows, iter(jobs), workers if big else 1):
            cols = heads.get(job.path)
            first_part = cols is None  # a file's columns count from its first row on
            if cols is None:
                cols = heads[job.path] = columns(read_header(Path(job.path)))
            if not job.edge:
                source = vertices.get(job.label)
                if source is None:
                    source = vertices[job.label] = _VertexSource(
                        type=job.label, file=f"nodes-{job.label.lower()}.jsonl", properties={})
                    if job.label == "Entity":
                        source["id"] = "qid"
                    handles[source["file"]] = (out / source["file"]).open("wb")
                numeric = {c for c, k in cols if k not in ("string", "string[]")}
                source["properties"].update((c, _spec(c, k)) for c, k in cols if c not in numeric)
                _append(handles[source["file"]], Path(f"{job.out}.v.jsonl"))
                result.vertices += done.rows
                if done.patched:
                    if "p" not in handles:
                        handles["p"] = patch.open("wb")
                    _append(handles["p"], Path(f"{job.out}.p.jsonl"))
                    result.patched += done.patched
                continue
            etype = job.label
            if first_part:
                kinds.setdefault(etype, {}).update((c, k) for c, k in cols if c not in ("s", "o"))
            for i, (present, _n) in enumerate(done.splits):
                target = split_names.get((etype, present))
                if target is None:
                    n_sets = sum(1 for t, _ in split_names if t == etype)
                    target = split_names[(etype, present)] = f"rels-{etype.lower()}-{n_sets}.jsonl"
                    handles[target] = (out / target).open("wb")
                    edges.append({"edge": etype, "file": target, "from": "s:Entity", "to": "o:Entity",
                                  "properties": {c: _spec(c, k) for c, k in kinds[etype].items()
                                                 if k in ("string", "string[]") or c in present}})
                _append(handles[target], Path(f"{job.out}.e{i}.jsonl"))
            result.edges += done.rows
    finally:
        for h in handles.values():
            h.close()
        shutil.rmtree(parts, ignore_errors=True)
    if result.patched:
        result.patch = patch
    commands = schema_commands(set(vertices), {e["edge"] for e in edges})
    result.config.write_text(json.dumps({"vertices": list(vertices.values()), "edgeSources": edges,
                                         "postImportCommands": commands}, indent=1) + "\n",
                             encoding="utf-8")
    return result


def schema_commands(vertex_types: set[str], edge_types: set[str]) -> list[dict[str, str]]:
    """GraphImporter's post-import SQL: graph/schema.py's constraints and indexes on the types it
    imported, each built sorted (``buildMode: SORTED``), named as its Cypher names them. The
    names come from schema.py's constants, never from data."""
    sorted_build = '{"buildMode": "SORTED"}'
    out: list[str] = []
    for label, prop in UNIQUE_KEYS:
        if label not in vertex_types:
            continue  # not imported: ensure_schema's Cypher creates it, on an empty type
        # what ArcadeDB's Cypher CREATE CONSTRAINT records on the type (SHOW CONSTRAINTS' name)
        owner = json.dumps({"kind": "UNIQUE", "properties": [prop], "index": f"{label}[{prop}]",
                            "mandatory": [], "declared": [prop]}, separators=(",", ":"))
        out += [f"CREATE PROPERTY `{label}`.`{prop}` IF NOT EXISTS STRING",
                f"CREATE INDEX ON `{label}` (`{prop}`) UNIQUE METADATA {sorted_build}",
                f"ALTER TYPE `{label}` CUSTOM `cypher.constraint.{schema_name(label, prop)}` = "
                f"{json.dumps(owner)}"]
    lookups = [("FACT", prop) for prop in FACT_INDEXES] + list(NODE_INDEXES)
    for label, prop in lookups:
        if label in vertex_types or label in edge_types:
            out += [f"CREATE PROPERTY `{label}`.`{prop}` IF NOT EXISTS STRING",
                    f"CREATE INDEX `{schema_name(label, prop)}` ON `{label}` (`{prop}`) NOTUNIQUE "
                    f"METADATA {sorted_build}"]
    return [{"language": "sql", "command": c} for c in out]


def run_graph_importer(files: ArcadeFiles, java: Path, classpath: str, database: Path, heap: str) -> str:
    """Run GraphImporter into ``database`` (it deletes and creates it: the server must be
    stopped); returns its closing line and the count of sorted builds. A failure is one line,
    the output kept in a log."""
    cmd = [str(java), f"-Xmx{heap}", "-cp", classpath, IMPORTER_CLASS, str(files.config),
           str(database), str(files.config.parent)]
    # in its own directory: ArcadeDB writes its log/ under the working directory
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, umask=0o077,  # noqa: S603
                          cwd=files.config.parent)
    out = (proc.stdout + proc.stderr).strip()
    log = files.config.parent / "import.log"
    log.write_text(out + "\n", encoding="utf-8")
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    if proc.returncode != 0:
        shutil.rmtree(database, ignore_errors=True)  # the server starts on an empty one again
        if "java.lang.OutOfMemoryError" in out:
            need, measured = importer_heap_need(files.vertices, files.edges)
            size = (f"loads of realistic dumps needed about {need / 2**30:.1f} GB at that size" if measured
                    else f"about {need / 2**30:.1f} GB is projected for that size from loads of up to "
                         f"{IMPORTER_HEAP_MEASURED[-1][0] / 1e6:.0f}M")
            raise KgprobeError(
                f"ArcadeDB GraphImporter ran out of its heap ({heap}, KGPROBE_DB_HEAP) importing "
                f"{files.vertices:,} nodes and {files.edges:,} edges; {size} (docs/benchmarks.md): "
                f"set KGPROBE_DB_HEAP={_suggest(need)} and load again into an empty --bulk directory "
                f"(full output: {log})")
        last = next((ln for ln in reversed(lines) if "rror" in ln or "xception" in ln),
                    lines[-1] if lines else "no output")
        raise KgprobeError(f"ArcadeDB GraphImporter failed (exit {proc.returncode}): {last[:300]} "
                           f"(full output: {log})")
    warned = [ln for ln in lines if "were skipped" in ln or "name an identity no" in ln]
    if warned:
        raise KgprobeError(f"ArcadeDB GraphImporter left edges out: {warned[0][:300]} (full output: {log})")
    # its own closing line comes before the post-import builds' log; without its log prefix
    # (time, level, class) it reads as a sentence
    closing = next((ln for ln in reversed(lines) if "Import complete" in ln), lines[-1] if lines else "")
    closing = _LOG_PREFIX.sub("", closing)
    built = sum("Published sorted index" in ln for ln in lines)
    return closing + (f"; then {built} constraints and indexes built sorted" if built else "")


def _suggest(need: int) -> str:
    """A heap setting with a quarter's margin over ``need``, in whole MB or GB."""
    mb = -(-need * 5 // 4 // 2**20)
    return f"{mb}m" if mb < 1024 else f"{-(-mb // 1024)}g"


def write_after_import(graph: Any, files: ArcadeFiles, batch_size: int = 5000) -> None:
    """What GraphImporter cannot write as the online ingest does: Relation and SampleIndex
    nodes, and Entity numeric properties (call after `ensure_schema`: found by ``qid``)."""
    for label, rows in files.created.items():
        graph.write_batches(f"UNWIND $rows AS row CREATE (n:{label}) SET n = row", rows, batch_size)
    if files.patch is not None:
        with files.patch.open(encoding="utf-8") as fh:
            graph.write_batches("UNWIND $rows AS row MATCH (n:Entity {qid: row.qid}) SET n += row.props",
                                (json.loads(line) for line in fh), batch_size)


def refuse_non_empty(graph: Any, where: str) -> None:
    """`ConfigError` when the graph holds any node: a bulk load writes an empty database only."""
    if graph.read("MATCH (n) RETURN 1 AS one LIMIT 1"):
        raise ConfigError(
            f"the managed graph ({where}) is not empty; --bulk loads an empty database only: use "
            "`kgprobe ingest` without --bulk to add to it, or `kgprobe db wipe --yes` first")
