"""ArcadeDB's GraphImporter at several heaps: the least heap a bulk load's import completes in;
and on 1, 2, ... cores: whether it spreads over them.

    # import files once (the URI only says "not the managed ArcadeDB": no server is reached)
    NEO4J_URI=bolt://127.0.0.1:9 NEO4J_PASSWORD=unused kgprobe ingest d.json.gz --bulk FILES --workers 2
    python benchmarks/bench_graphimporter_heap.py --files FILES --heaps 1g,1152m,1280m
    python benchmarks/bench_graphimporter_heap.py --files FILES --heaps 3g --cores 1,2 --rounds 2
    # a carried runtime (the device kit's: benchmarks/device/java_kit.py --server arcadedb)
    python benchmarks/bench_graphimporter_heap.py --files FILES --heaps 4g --cores 1,16 --runtime DIR

With ``--cores``, each run's JVM is pinned to that many cores (``taskset -c 0-N-1``: the JVM
sizes its collector and compiler threads, and GraphImporter anything it sizes by
``availableProcessors``, to them), alternated round by round, and its CPU seconds are read.

The files are turned into GraphImporter's JSON lines once (graph/bulk_arcadedb.py, as
``kgprobe ingest --bulk`` does), then GraphImporter runs with each ``-Xmx`` in turn, with the
managed server's own JRE and jars (or ``--runtime DIR``'s ``jre/`` and ``classpath.txt``, the
device kit's, on a machine without the wheel), into a fresh database that is removed after. Each run prints
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
from kgprobe.graph.server import _package_dir  # noqa: E402  (its wheel is imported only when called)

_AFTER_FULL = re.compile(r"Pause Full.*?->(\d+)M\(")


def java_runtime(runtime: Path | None) -> tuple[Path, str]:
    """The ``java`` and classpath GraphImporter runs with: the managed server's (the wheel's JRE
    and jars), or a carried runtime's (``DIR/jre``, ``DIR/classpath.txt``'s jars in order)."""
    if runtime is None:
        pkg = _package_dir()
        return pkg / "jre" / "bin" / "java", f"{pkg / 'jars'}/*"
    names = (runtime / "classpath.txt").read_text(encoding="utf-8").split()
    return runtime / "jre" / "bin" / "java", ":".join(str(runtime / n) for n in names)


def one(config: Path, heap: str, work: Path, cores: int | None = None,
        runtime: Path | None = None) -> dict[str, object]:
    java, classpath = java_runtime(runtime)
    db = work / "db"
    shutil.rmtree(db, ignore_errors=True)
    gclog = work / f"gc-{heap}.log"
    pinned = ["taskset", "-c", f"0-{cores - 1}"] if cores else []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run([*pinned, str(java), f"-Xmx{heap}", f"-Xlog:gc:file={gclog}",
                           "-cp", classpath, IMPORTER_CLASS, str(config), str(db), str(config.parent)],
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
    ap.add_argument("--runtime", type=Path, help="a carried runtime (jre/, classpath.txt) instead of the wheel's")
    ap.add_argument("--workers", type=int, default=1, help="processes that write the JSON lines (timed once)")
    args = ap.parse_args()
    files = args.files.resolve()
    if not (files / "import.args").is_file():
        raise SystemExit(f"{files}: no import.args (write the files first: see the docstring)")
    config = files / SUBDIR / "graphimporter.json"
    if not config.is_file():
        t0 = time.monotonic()
        arcade = write_arcadedb_files(ImportFiles(files, (files / "import.args").read_text(encoding="utf-8").split(), None),
                                      workers=args.workers)
        print(json.dumps({"json_lines_s": round(time.monotonic() - t0, 1), "workers": args.workers,
                          "vertices": arcade.vertices, "edges": arcade.edges}), flush=True)
    work = files.parent / f".{files.name}-heap"  # the database and the GC logs, removed after
    work.mkdir(exist_ok=True)
    try:
        cores: list[int | None] = [int(c) for c in args.cores.split(",")] if args.cores else [None]
        for r in range(args.rounds):
            for heap in args.heaps.split(","):
                for n in cores:
                    print(json.dumps({"round": r + 1, **one(config, heap, work, n, args.runtime)}), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
