"""Resident memory of a loaded semantic index at N entities, no graph needed.

    # one process writes the index, a fresh one loads it and answers queries:
    python benchmarks/bench_semantic_memory.py make /tmp/idx --entities 1000000
    python benchmarks/bench_semantic_memory.py load /tmp/idx
    # the code before issue 44 step 2: the same, with PYTHONPATH at the old checkout

``make`` builds a ``SemanticIndex`` over N synthetic unit vectors (QIDs Q1..QN with gaps, dim
128, IVF-PQ with 64-byte codes: what an index at Wikidata's size is) through the public
constructor and ``save``, so the old code (QIDs as a JSON list) and the new (an int64 array)
write their own formats. ``load`` is what a probe pays: ``SemanticIndex.load`` then 200
filtered-free neighbour queries; it prints the process's resident set after the load and its
peak (VmRSS/VmHWM), and the same with the QID part alone (``rss_ids_mb``: the load's RSS
minus that of reading only the FAISS file).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def rss_mb() -> dict[str, float]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            k, v = line.split(":")
            out[k] = round(int(v.split()[0]) / 1024, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=["make", "load", "faiss-only"])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--entities", type=int, default=1_000_000)
    args = ap.parse_args()
    import numpy as np

    from kgprobe.probing import semantic as sem

    if args.step == "make":
        n = args.entities
        rng = np.random.default_rng(0)
        vecs = rng.normal(size=(n, 128)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        qids = [f"Q{3 * i + 1}" for i in range(n)]  # Wikidata's ids have gaps
        s = sem.IndexSettings(compress_from=0, exact_threshold=0, nlist=1024)
        t = time.perf_counter()
        idx = sem.SemanticIndex(qids, sem.make_faiss_index(vecs, s), s)
        idx.save(args.dir)
        print(json.dumps({"made": n, "seconds": round(time.perf_counter() - t, 1)}))
        return
    import faiss

    before = rss_mb()
    t = time.perf_counter()
    if args.step == "faiss-only":
        index = faiss.read_index(str(args.dir / sem.INDEX_FILE))
        print(json.dumps({"step": "faiss-only", "ntotal": index.ntotal, **rss_mb(), "before": before}))
        return
    idx = sem.SemanticIndex.load(args.dir)
    load_s = time.perf_counter() - t
    after_load = rss_mb()
    qs = np.random.default_rng(1).choice(len(idx), size=200, replace=False)
    t = time.perf_counter()
    for q in qs:
        idx.neighbours(idx.qids[int(q)], 10)
    print(json.dumps({"step": "load", "entities": len(idx), "load_s": round(load_s, 2),
                      "query_ms": round(1000 * (time.perf_counter() - t) / len(qs), 2),
                      "rss_after_load_mb": after_load["VmRSS"], "rss_after_queries": rss_mb(),
                      "rss_before_mb": before["VmRSS"], "load_avg": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
