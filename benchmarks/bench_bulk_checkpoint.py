"""What a bulk load's checkpoints cost (`kgprobe ingest --bulk DIR`, issue 37 item 5).

Two figures, in one run:

1. One checkpoint at the full dump's scale, in process: a `BulkWriter` whose written-entity bit
   set spans ``--max-qid`` QIDs (Wikidata's ~120M: 15 MB) and whose sampling ordinals cover
   ``--types`` types and ``--relations`` relations, saved ``--saves`` times (each save flushes
   the files, writes the bits and the JSON, renames it into place).
2. A whole bulk load of ``--dump`` (import files only: a Neo4j URI nothing answers), with a
   checkpoint at every chunk (``KGPROBE_BULK_CHECKPOINT_S=0``) against none
   (``KGPROBE_BULK_CHECKPOINT_S=3600``, beyond the load), alternated ``--rounds`` times; the
   import files of both are checked equal.

    python benchmarks/bench_bulk_checkpoint.py --dump /tmp/d70k.json.gz --workers 2 --rounds 3
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kgprobe.graph.bulk import CHECKPOINT_FILE, BulkCheckpoints, BulkWriter
from kgprobe.records import Position


def save_cost(max_qid: int, types: int, relations: int, saves: int) -> list[float]:
    """Seconds per checkpoint of a writer holding a full dump's in-memory state."""
    with tempfile.TemporaryDirectory() as d:
        source = Path(d) / "dump.json"
        source.write_bytes(b"[\n]\n")
        w = BulkWriter(Path(d) / "import", checkpoints=BulkCheckpoints(
            lambda p: {"path": p.source, "offset": p.offset}, {"sources": [str(source)]}, seconds=0))
        try:
            w._entities.add(f"Q{max_qid}")  # the bit set grows to the largest QID
            w._type_next = {f"Q{i}": i for i in range(1, types + 1)}
            w._fact_next = {f"P{i}": 1_000_000 + i for i in range(1, relations + 1)}
            out = []
            for i in range(saves):
                t = time.perf_counter()
                w._save(Position(source=str(source), offset=i, line=i))
                out.append(time.perf_counter() - t)
            size = (Path(d) / "import" / CHECKPOINT_FILE).stat().st_size
            bits = len(w._entities.bits)
        finally:
            w.close()
    print(f"one checkpoint, bit set of {bits / 1e6:.1f} MB (QIDs to Q{max_qid:,}), {types:,} types, "
          f"{relations:,} relations (JSON {size / 1e6:.2f} MB): median {statistics.median(out) * 1e3:.1f} ms, "
          f"range {min(out) * 1e3:.1f}-{max(out) * 1e3:.1f} ms over {saves} saves")
    return out


def load(dump: Path, workers: int, every: bool, directory: Path) -> tuple[float, int]:
    """Wall seconds of a bulk load's import files, and the checkpoints it saved."""
    env = {**os.environ, "NEO4J_URI": "bolt://127.0.0.1:9", "NEO4J_PASSWORD": "unused",
           "KGPROBE_BULK_CHECKPOINT_S": "0" if every else "3600"}
    t = time.perf_counter()
    r = subprocess.run([str(Path(sys.executable).parent / "kgprobe"), "ingest", str(dump), "--bulk", str(directory),
                        "--workers", str(workers), "--json"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(r.stderr)
    facts = json.loads(r.stdout)["facts"]
    return wall, facts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", type=Path, help="a JSON dump for the whole-load comparison (none: skip it)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-qid", type=int, default=120_000_000)
    ap.add_argument("--types", type=int, default=100_000)
    ap.add_argument("--relations", type=int, default=12_000)
    ap.add_argument("--saves", type=int, default=10)
    a = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    save_cost(a.max_qid, a.types, a.relations, a.saves)
    if a.dump is None:
        return
    walls: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as d:
        for r in range(a.rounds):
            for every in (False, True):
                out = Path(d) / f"{'every' if every else 'none'}-{r}"
                wall, facts = load(a.dump, a.workers, every, out)
                walls[every].append(wall)
                print(f"round {r + 1}: {'a checkpoint every chunk' if every else 'no checkpoint'}: "
                      f"{wall:.2f} s, {facts:,} facts")
            a_, b_ = Path(d) / f"none-{r}", Path(d) / f"every-{r}"
            names = sorted(p.name for p in a_.iterdir() if p.name != CHECKPOINT_FILE)
            same = filecmp.cmpfiles(a_, b_, names, shallow=False)[0] == names
            print(f"  import files equal: {same}")
    none, every = statistics.median(walls[False]), statistics.median(walls[True])
    print(f"median: no checkpoint {none:.2f} s, every chunk {every:.2f} s: {every / none:.3f}x")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
