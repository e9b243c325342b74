"""ArcadeDB's GraphImporter at several heaps: the least heap a bulk load's import completes in;
and on 1, 2, ... cores: whether it spreads over them.

    # import files once (the URI only says "not the managed ArcadeDB": no server is reached)
    NEO4J_URI=bolt://127.0.0.1:9 NEO4J_PASSWORD=unused kgprobe ingest d.json.gz --bulk FILES --workers 2
    python benchmarks/bench_graphimporter_heap.py --files FILES --heaps 1g,1152m,1280m
    python benchmarks/bench_graphimporter_heap.py --files FILES --heaps 3g --cores 1,2 --rounds 2

With ``--cores``, each run's JVM is pinned to that many cores (``taskset -c 0-N-1``: the JVM
sizes its collector and compiler threads, and GraphImporter anything it sizes by
``availableProcessors``, to them), alternated round by round, and its CPU seconds are read.

The files are turned into GraphImporter's JSON lines once (graph/bulk_arcadedb.py, as
``kgprobe ingest --bulk`` does), then GraphImporter runs with each ``-Xmx`` in turn, with the
managed server's own JRE and jars, into a fresh database that is removed after. Each run prints
one JSON line: whether it completed or ran out of heap, its wall time, and its G1 log's largest
occupancy after a full collection (what was still live when the heap was full). The least heap
that completes is what kgprobe's ``importer_heap_need`` is built from (docs/benchmarks.md,
"GraphImporter's heap"). Same flags as ``run_graph_importer`` but the GC log.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kgprobe.graph.bulk import ImportFiles  # noqa: E402
from kgprobe.graph.bulk_arcadedb import IMPORTER_CLASS, SUBDIR, write_arcadedb_files  # noqa: E402
from kgprobe.graph.server import _package_dir  # noqa: E402

_AFTER_FULL = re.compile(r"Pause Full.*?->(\d+)M\(")


def one(config: Path, heap: str, work: Path, cores: int | None = None) -> dict[str, object]:
    pkg = _package_dir()
    db = work / "db"
    shutil.rmtree(db, ignore_errors=True)
    gclog = work / f"gc-{heap}.log"
    pinned = ["taskset", "-c", f"0-{cores - 1}"] if cores else []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run([*pinned, str(pkg / "jre" / "bin" / "java"), f"-Xmx{heap}", f"-Xlog:gc:file={gclog}",
                           "-cp", f"{pkg / 'jars'}/*", IMPORTER_CLASS, str(config), str(db), str(config.parent)],
                          capture_output=True, text=True, cwd=config.parent, check=False)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out = proc.stdout + proc.stderr
    gc = gclog.read_text(encoding="utf-8") if gclog.exists() else ""
    full = [int(m) for m in _AFTER_FULL.findall(gc)]
    done = re.search(r"Import complete: ([\d,]+) vertices, ([\d,]+) edges", out)
    shutil.rmtree(db, ignore_errors=True)
    return {"heap": heap, "cores": cores, "completed": proc.returncode == 0 and done is not None,
            "out_of_heap": "java.lang.OutOfMemoryError" in out, "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1),
            "full_gcs": len(full), "max_after_full_gc_mb": max(full, default=0),
            "vertices": int(done.group(1).replace(",", "")) if done else None,
            "edges": int(done.group(2).replace(",", "")) if done else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=Path, required=True, help="a directory of import files (import.args)")
    ap.add_argument("--heaps", required=True, help="comma-separated -Xmx values, tried in this order")
    ap.add_argument("--cores", help="comma-separated core counts: each run pinned to that many cores")
    ap.add_argument("--rounds", type=int, default=1, help="runs of every heap (and core count)")
    args = ap.parse_args()
    files = args.files.resolve()
    if not (files / "import.args").is_file():
        raise SystemExit(f"{files}: no import.args (write the files first: see the docstring)")
    config = files / SUBDIR / "graphimporter.json"
    if not config.is_file():
        t0 = time.monotonic()
        arcade = write_arcadedb_files(ImportFiles(files, (files / "import.args").read_text(encoding="utf-8").split(), None))
        print(json.dumps({"json_lines_s": round(time.monotonic() - t0, 1), "vertices": arcade.vertices,
                          "edges": arcade.edges}), flush=True)
    work = files.parent / f".{files.name}-heap"  # the database and the GC logs, removed after
    work.mkdir(exist_ok=True)
    try:
        cores: list[int | None] = [int(c) for c in args.cores.split(",")] if args.cores else [None]
        for r in range(args.rounds):
            for heap in args.heaps.split(","):
                for n in cores:
                    print(json.dumps({"round": r + 1, **one(config, heap, work, n)}), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
