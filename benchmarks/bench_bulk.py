"""Bulk first load (`kgprobe ingest --bulk`) against the online ingest, same dump, one run.

    python benchmarks/bench_bulk.py --entities 70000                      # Neo4j, ~1M statements
    python benchmarks/bench_bulk.py --entities 70000 --server arcadedb    # the managed ArcadeDB

With ``--server arcadedb`` both sides run on managed ArcadeDB homes of their own (the bulk side:
`write_import_files`, `write_arcadedb_files`, the server stopped for ArcadeDB's GraphImporter and
started again, the first connection's constraints and indexes, `write_after_import`: everything
from an empty running server until the graph is probe-ready; see graph/bulk_arcadedb.py).

Both sides load the same realistic dump (`benchmarks/gen_dump.py --realistic`: lines made of real
entity JSON) from the file through the loader into an empty Neo4j 5.26 (the test server of
tools/neo4j-test-server) of its own:

* bulk: `write_import_files` (the import files), `run_import` (``neo4j-admin database import
  full``, the import tool from Maven Central), the server started on the imported database, and
  the first connection's constraints and indexes built (``db.awaitIndexes``): everything until
  the graph is probe-ready;
* online: `ingest` into a running, empty server (constraints and indexes made up front, as on
  every connection).

Prints one JSON line per side (wall seconds per phase, dump statements/s, facts/s, the Python
process's peak memory after the bulk side, which runs first) and the ratio; figures go to
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from benchmarks.bench_neo4j_import import schema  # noqa: E402
from benchmarks.gen_dump import write_realistic_dump  # noqa: E402
from benchmarks.servers import fresh_graph  # noqa: E402
from kgprobe.api import _records_for  # noqa: E402
from kgprobe.config import Settings  # noqa: E402
from kgprobe.graph.bulk import build_chunk, run_import, write_import_files  # noqa: E402
from kgprobe.graph.client import connect  # noqa: E402
from kgprobe.graph.ingest import _ingest_tuning, ingest  # noqa: E402
from kgprobe.loaders import open_source  # noqa: E402
from kgprobe.loaders.common import Filters  # noqa: E402


def records(dump: Path, workers: int) -> Iterable[Any]:
    """The dump's records as `kgprobe ingest --bulk --workers N` reads them: with workers > 1
    each worker also formats its chunk's import rows (`graph.bulk.build_chunk`)."""
    if workers == 1:
        return open_source(dump, Filters.make())
    return _records_for([dump], sparql=None, relations=None, subjects=None, language="en", ranks=None,
                        limit=None, workers=workers, post=build_chunk)


def bulk_side(root: Path, dump: Path, heap: str, batch_size: int, workers: int = 1) -> dict[str, object]:
    from neo4j_server import install_admin

    home = root / "home"
    install_admin(home, heap=heap)
    t0 = time.monotonic()
    files = write_import_files(records(dump, workers), root / "import", batch_size=batch_size)
    t1 = time.monotonic()
    run_import(files, home)
    t2 = time.monotonic()
    started = schema(root, heap)  # the server started on the imported database, its schema built
    s = files.summary
    assert started["facts"] == s.facts, (started["facts"], s.facts)
    return {"side": "bulk", "workers": workers, "facts": s.facts, "entities": s.entities,
            "files_s": round(t1 - t0, 1), "import_s": round(t2 - t1, 1),
            "server_start_s": started["server_start_s"], "schema_s": started["schema_s"],
            "wall_s": round(t2 - t0 + float(started["server_start_s"]) + float(started["schema_s"]), 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def arcadedb_bulk_side(root: Path, dump: Path, heap: str, batch_size: int, workers: int = 1) -> dict[str, object]:
    from kgprobe.graph.bulk_arcadedb import (
        run_graph_importer,
        write_after_import,
        write_arcadedb_files,
    )
    from kgprobe.graph.server import ManagedServer, free_port

    settings = Settings(home=root / "home", bolt_port=free_port(), http_port=free_port(), heap=heap)
    server = ManagedServer(settings)
    server.start()  # an empty running server, as the online side's (not counted)
    marks: list[float] = []

    def importer(java: Path, classpath: str, database: Path) -> str:
        marks.append(time.monotonic())
        out = run_graph_importer(arcade, java, classpath, database, heap)
        marks.append(time.monotonic())
        return out

    try:
        t0 = time.monotonic()
        files = write_import_files(records(dump, workers), root / "import", batch_size=batch_size)
        t1 = time.monotonic()
        arcade = write_arcadedb_files(files, workers)  # as `kgprobe ingest --bulk --workers N`
        t2 = time.monotonic()
        server.while_stopped(importer)
        t3 = time.monotonic()
        with connect(settings) as graph:
            t4 = time.monotonic()
            write_after_import(graph, arcade, batch_size)
            t5 = time.monotonic()
            facts = graph.read("MATCH ()-[f:FACT]->() RETURN count(f) AS n")[0]["n"]
    finally:
        server.stop()
    s = files.summary
    assert facts == s.facts, (facts, s.facts)
    return {"side": "bulk", "workers": workers, "facts": s.facts, "entities": s.entities,
            "files_s": round(t1 - t0, 1), "jsonl_s": round(t2 - t1, 1), "stop_s": round(marks[0] - t2, 1),
            "import_s": round(marks[1] - marks[0], 1), "server_start_s": round(t3 - marks[1], 1),
            "schema_s": round(t4 - t3, 1), "after_s": round(t5 - t4, 1), "patched": arcade.patched,
            "wall_s": round(t5 - t0, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def online_side(root: Path, dump: Path, heap: str, batch_size: int, server: str = "neo4j") -> dict[str, object]:
    with fresh_graph(server, root, heap) as (graph, _pid):
        t0 = time.monotonic()
        with _ingest_tuning():
            s = ingest(graph, open_source(dump, Filters.make()), batch_size=batch_size)
        wall = time.monotonic() - t0
    return {"side": "online", "facts": s.facts, "entities": s.entities, "wall_s": round(wall, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entities", type=int, default=70_000, help="realistic dump lines (~14.3 statements each: 70,000 ≈ 1M)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--heap", default="1g")
    ap.add_argument("--batch-size", type=int, default=5000)
    ap.add_argument("--server", choices=("neo4j", "arcadedb"), default="neo4j")
    ap.add_argument("--tmp", default=None, help="where the dump, import files and servers go")
    ap.add_argument("--workers", type=int, default=1,
                    help="the bulk side's parse workers (rows formatted in them, and for ArcadeDB its JSON "
                         "lines written, as `kgprobe ingest --bulk --workers N`); the online side runs in one process, the default "
                         "for an online load on 2 cores")
    ap.add_argument("--dump", type=Path, default=None,
                    help="a dump made before by gen_dump.py --realistic (with --statements: its count)")
    ap.add_argument("--statements", type=int, default=None, help="the --dump's statement count")
    ap.add_argument("--bulk-only", action="store_true", help="the bulk side alone (code against code)")
    args = ap.parse_args()
    if (args.dump is None) != (args.statements is None):
        ap.error("--dump and --statements go together")
    tmp = Path(tempfile.mkdtemp(prefix="kgprobe-bench-bulk-", dir=args.tmp))
    try:
        if args.dump is not None:
            dump, stats = args.dump.resolve(), {"statements": args.statements, "path": str(args.dump)}
        else:
            dump = tmp / "dump.json.gz"
            stats = write_realistic_dump(dump, args.entities, args.seed)
        print(json.dumps({"dump": stats}), flush=True)
        bulk = arcadedb_bulk_side if args.server == "arcadedb" else bulk_side
        rows = [bulk(tmp / "bulk", dump, args.heap, args.batch_size, args.workers)]
        if not args.bulk_only:
            rows.append(online_side(tmp / "online", dump, args.heap, args.batch_size, args.server))
        for row in rows:
            wall = float(row["wall_s"])  # type: ignore[arg-type]
            row["statements_per_s"] = round(stats["statements"] / wall)
            row["facts_per_s"] = round(int(row["facts"]) / wall)  # type: ignore[call-overload]
            print(json.dumps(row), flush=True)
        if args.bulk_only:
            return
        print(json.dumps({"statements": stats["statements"], "server": args.server,
                          "bulk_over_online": round(float(rows[1]["wall_s"]) / float(rows[0]["wall_s"]), 2)}))  # type: ignore[arg-type]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
