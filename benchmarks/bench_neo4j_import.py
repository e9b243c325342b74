"""`neo4j-admin database import full` on kgprobe's import files, by threads: the bulk load's Java half.

    # import files once (no Neo4j is reached: the URI only says "not the managed ArcadeDB")
    NEO4J_URI=bolt://127.0.0.1:9 NEO4J_PASSWORD=unused kgprobe ingest d.json.gz --bulk FILES --json
    python benchmarks/bench_neo4j_import.py --files FILES --threads 1,2 --rounds 3 --pin
    python benchmarks/bench_neo4j_import.py --files FILES --threads 2 --gc default --schema

Each run imports the same files into a fresh home with the import tool of the test server
(tools/neo4j-test-server: Neo4j 5.26 from Maven Central, `tests/neo4j_server.install_admin`),
``--threads=N`` (the tool's default is every processor the JVM sees) and one heap for the JVM
and one bound for the tool's off-heap memory. Rounds alternate the thread counts, so a noisy
machine weighs on each alike. ``--gc serial`` is what the test suite's wrapper uses (small
machines); ``--gc default`` lets the JVM choose (G1), as an installed neo4j-admin does.
``--schema`` then starts the server on the last run's database and times its first connection's
constraints and indexes (kgprobe's `ensure_schema`, then ``db.awaitIndexes``): the rest of a
first load until probe-ready.

Prints one JSON line per run: wall seconds, the JVM's CPU seconds (user + system of the child),
the tool's own phase times (node import, relationship import, linking, post-processing) and
counts; then the median wall per thread count and its ratio to the first count.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

_PHASE = re.compile(r"^(Node import|Relationship import|Relationship linking|Post processing) COMPLETED in (.+)$")
_DONE = re.compile(r"^IMPORT DONE in (.+?)\.?\s*$")
_COUNT = re.compile(r"^\s*(\d+) (nodes|relationships|properties)\s*$")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
#: the tool's memory: its first estimate for the whole import, and the peak it reports at the end
_MEMORY = re.compile(r"^(Estimated required memory usage|Peak memory usage): ([\d.]+)(GiB|MiB|KiB)$")
_BYTES = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10}


def duration(text: str) -> float:
    """The import tool's ``1m 3s 20ms`` in seconds."""
    parts = re.findall(r"(\d+)(ms|h|m|s)\b", text)
    if not parts:
        raise ValueError(f"not a duration: {text!r}")
    return round(sum(int(n) * _UNIT[u] for n, u in parts), 3)


def parse_log(out: str) -> dict[str, object]:
    phases: dict[str, float] = {}
    counts: dict[str, int] = {}
    memory: dict[str, float] = {}
    done = None
    for line in out.splitlines():
        if m := _PHASE.match(line.strip()):
            phases[m.group(1).lower().replace(" ", "_") + "_s"] = duration(m.group(2))
        elif m := _DONE.match(line.strip()):
            done = duration(m.group(1))
        elif m := _COUNT.match(line):
            counts[m.group(2)] = int(m.group(1))
        elif (m := _MEMORY.match(line.strip())) and (key := m.group(1).split()[0].lower() + "_memory_gib") not in memory:
            memory[key] = round(float(m.group(2)) * _BYTES[m.group(3)] / 2**30, 3)
    return {"tool_s": done, **phases, **counts, **memory}


def admin_script(home: Path, heap: str, gc: str) -> Path:
    """``home/bin/neo4j-admin`` as the test suite installs it, with this run's JVM flags."""
    from neo4j_server import install_admin

    admin = install_admin(home, heap=heap)
    if gc == "default":
        admin.write_text(admin.read_text(encoding="utf-8").replace(" -XX:+UseSerialGC", ""), encoding="utf-8")
    return admin


def one_import(files: Path, base: Path, threads: int, heap: str, gc: str, pin: bool) -> dict[str, object]:
    home = base / "home"
    admin = admin_script(home, heap, gc)
    load = os.getloadavg()[0]  # before the run: the JVM's own threads count in it afterwards
    # --threads sizes the tool's stages, but its JVM runs GC, compiler and I/O threads beside
    # them on every core; pinned, the whole JVM gets that many cores (availableProcessors too)
    pinned = ["taskset", "-c", f"0-{threads - 1}"] if pin else []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run([*pinned, str(admin), "database", "import", "full", "neo4j", f"--threads={threads}",
                           "@import.args"], cwd=files, env={**os.environ, "NEO4J_HOME": str(home)},
                          capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = proc.stdout + proc.stderr
    (base / "import.log").write_text(out, encoding="utf-8")
    if proc.returncode != 0:
        raise SystemExit(f"import failed (exit {proc.returncode}); its output: {base / 'import.log'}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"threads": threads, "pinned": pin, "gc": gc, "heap": heap, "wall_s": round(wall, 2),
            "jvm_cpu_s": round(cpu, 1), **parse_log(out), "load_before": round(load, 2)}


def schema(base: Path, heap: str) -> dict[str, object]:
    """The server started on an imported database, then its first connection's schema."""
    from neo4j_server import USER, Neo4jTestServer

    from kgprobe.config import Settings
    from kgprobe.graph.client import connect

    server = Neo4jTestServer(base, heap=heap, config={"server.memory.pagecache.size": "1g"})
    t0 = time.monotonic()
    uri = server.start()
    try:
        t1 = time.monotonic()
        with connect(Settings(uri=uri, user=USER, password=server.password, home=base)) as graph:
            graph.read("CALL db.awaitIndexes(3600)")
            t2 = time.monotonic()
            facts = graph.read("MATCH ()-[f:FACT]->() RETURN count(f) AS n")[0]["n"]
    finally:
        server.stop()
    return {"server_start_s": round(t1 - t0, 1), "schema_s": round(t2 - t1, 1), "facts": int(facts)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--files", type=Path, required=True, help="a directory of import files (import.args)")
    ap.add_argument("--threads", default="1,2", help="comma-separated --threads values")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--heap", default="1g", help="the JVM's heap and the tool's off-heap bound")
    ap.add_argument("--gc", choices=("serial", "default"), default="serial")
    ap.add_argument("--pin", action="store_true",
                    help="run the JVM on as many cores as threads (taskset -c 0-N-1): core scaling")
    ap.add_argument("--schema", action="store_true", help="then the server's start and the schema, once")
    ap.add_argument("--tmp", default=None)
    args = ap.parse_args()
    files = args.files.resolve()
    if not (files / "import.args").is_file():
        raise SystemExit(f"{files}: no import.args (write the files first: see the docstring)")
    counts = [int(t) for t in args.threads.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="kgprobe-bench-neo4j-import-", dir=args.tmp))
    rows: list[dict[str, object]] = []
    try:
        last = None
        for r in range(args.rounds):
            for threads in counts:
                base = tmp / f"r{r}-t{threads}"
                if last is not None and last != base:
                    shutil.rmtree(last, ignore_errors=True)  # disk: one imported store at a time
                row = {"round": r, **one_import(files, base, threads, args.heap, args.gc, args.pin)}
                print(json.dumps(row), flush=True)
                rows.append(row)
                last = base
        if args.schema and last is not None:
            print(json.dumps({"schema_after": last.name, **schema(last, args.heap)}), flush=True)
        first = statistics.median(float(str(x["wall_s"])) for x in rows if x["threads"] == counts[0])
        for threads in counts:
            med = statistics.median(float(str(x["wall_s"])) for x in rows if x["threads"] == threads)
            print(json.dumps({"threads": threads, "median_wall_s": round(med, 2),
                              "speedup_vs_first": round(first / med, 2)}), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
