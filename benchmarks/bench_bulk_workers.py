"""The main process's CPU in `kgprobe ingest --bulk DIR --workers N`: what stays serial.

    python benchmarks/bench_bulk_workers.py --entities 10000                 # this checkout
    python benchmarks/bench_bulk_workers.py --entities 10000 --code /work/main   # another one
    python benchmarks/bench_bulk_workers.py --dump real.json.gz --workers 1 4 8 16   # a dump made before

A realistic dump (`benchmarks/gen_dump.py --realistic`, gzip) is loaded into import files
(no Neo4j: the import tool's time is not the question) by ``kgprobe ingest --bulk`` in a
subprocess, once per number of workers. The subprocess reports its own CPU (``RUSAGE_SELF``: the
main process — reading, gunzip, coordination, whatever it still formats and writes) apart from
its workers' (``RUSAGE_CHILDREN``), and each of its threads' own CPU (``threads_cpu_s``: the
main thread, the decompressing thread, the pool's threads, the writer), whose busiest one is the
serial part on many cores. With the main process's CPU per MB of JSON, the load cannot
go faster than ``MB / main CPU`` whatever the cores: that bound is printed too. Figures go to
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.gen_dump import write_realistic_dump  # noqa: E402

#: run in the subprocess: the CLI, then its own CPU and its children's on the last stderr line
_RUN = """
import json, re, resource, sys, threading, time
threads = {}
inner = threading.Thread._bootstrap_inner
def counted(self):  # each thread's own CPU when it ends, by name (numbers dropped)
    try:
        inner(self)
    finally:
        name = re.sub(r"[-_]?[0-9]+", "", self.name)
        threads[name] = threads.get(name, 0.0) + time.thread_time()
threading.Thread._bootstrap_inner = counted
from kgprobe.cli import main
try:
    main()
except SystemExit:
    pass
threads["main thread"] = time.thread_time()
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print("THREADS", json.dumps({k: round(v, 2) for k, v in threads.items()}), file=sys.stderr)
print("CPU", me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime, file=sys.stderr)
"""


def run(code: Path, dump: Path, out: Path, workers: int) -> dict[str, object]:
    # the checkout measured first on PYTHONPATH, then what PYTHONPATH held (packages installed
    # apart, as on a GPU machine whose missing wheels go into a folder of their own); a cwd with
    # no kgprobe (``-c`` puts it first); a Neo4j server named, never reached: only the import
    # files are written (with no NEO4J_URI --bulk loads the managed ArcadeDB)
    path = os.pathsep.join(p for p in (str(code), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "NEO4J_URI": "bolt://127.0.0.1:9", "NEO4J_PASSWORD": "unused"}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _RUN, "ingest", str(dump), "--bulk", str(out),
                           "--workers", str(workers), "--json"],
                          env=env, cwd=out.parent, capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    cpu = [ln for ln in proc.stderr.splitlines() if ln.startswith("CPU ")]
    if proc.returncode != 0 or not cpu:
        raise SystemExit(f"ingest failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    _, main_cpu, child_cpu = cpu[-1].split()
    threads = json.loads([ln for ln in proc.stderr.splitlines() if ln.startswith("THREADS ")][-1][8:])
    facts = json.loads(proc.stdout)["facts"]
    shutil.rmtree(out, ignore_errors=True)
    return {"workers": workers, "wall_s": round(wall, 1), "main_cpu_s": round(float(main_cpu), 2),
            "workers_cpu_s": round(float(child_cpu), 2), "facts": facts,
            # the main process's threads: its busiest one bounds the load on many cores
            "threads_cpu_s": threads, "busiest_thread_cpu_s": max(threads.values())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--entities", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout whose kgprobe runs")
    ap.add_argument("--plain", action="store_true",
                    help="an uncompressed dump: the workers read their chunks themselves, so the main "
                         "process neither decompresses nor sends text")
    ap.add_argument("--repeat", type=int, default=1, help="runs per number of workers (a loaded machine)")
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--dump", type=Path, default=None,
                    help="an existing dump (gen_dump.py --realistic) instead of generating one")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kgprobe-bench-bulk-workers-", dir=args.tmp))
    try:
        if args.dump is not None:
            dump = args.dump.resolve()
            with gzip.open(dump, "rb") if dump.suffix == ".gz" else open(dump, "rb") as fh:
                stats = {"path": str(dump), "bytes": sum(len(line) for line in fh)}
        else:
            dump = tmp / ("dump.json" if args.plain else "dump.json.gz")
            stats = write_realistic_dump(dump, args.entities, args.seed)
        mb = stats["bytes"] / 1e6
        print(json.dumps({"dump": stats, "code": str(args.code)}), flush=True)
        for n in [n for n in args.workers for _ in range(args.repeat)]:
            row = run(args.code, dump, tmp / f"import-{n}", n)
            main_cpu = float(row["main_cpu_s"])  # type: ignore[arg-type]
            row["main_cpu_ms_per_mb"] = round(1000 * main_cpu / mb, 1)
            row["main_bound_mb_per_s"] = round(mb / max(main_cpu, 1e-9), 1)
            print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
