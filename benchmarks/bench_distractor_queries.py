"""Latency of the distractor Cypher queries and strategies on the demo graph (p50 / p95).

Starts its own managed ArcadeDB server in a temporary home on free ports (or uses NEO4J_URI
when set), ingests the bundled demo graph, builds the semantic index, then times each named
query over a seeded sample of the demo's facts:

    .venv/bin/python benchmarks/bench_distractor_queries.py --facts 300

Target (issue 5): typed and temporal Cypher queries p95 ≤ 50 ms on the demo graph.
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def timed(fn: Callable[[], Any], out: list[float]) -> Any:
    t = time.perf_counter()
    r = fn()
    out.append(time.perf_counter() - t)
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--facts", type=int, default=300)
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--at", default="2026-01-01")
    args = ap.parse_args()

    from kgprobe.config import Settings
    from kgprobe.graph import distractors as gd
    from kgprobe.graph.client import connect
    from kgprobe.graph.ingest import ingest
    from kgprobe.graph.server import ManagedServer, free_port
    from kgprobe.graph.templates import demo_paths
    from kgprobe.loaders.wikidata_json import load_json
    from kgprobe.probing.distractors import find_distractors
    from kgprobe.probing.semantic import IndexSettings, SemanticIndex
    from kgprobe.records import FactRecord

    server = None
    if os.environ.get("NEO4J_URI"):
        settings = Settings.load()
    else:
        home = Path(tempfile.mkdtemp(prefix="kgprobe-bench-"))
        settings = Settings(home=home, bolt_port=free_port(), http_port=free_port(), heap="1g")
        server = ManagedServer(settings)
        server.start()
    try:
        with connect(settings) as g:
            g.write("MATCH (n) DETACH DELETE n")
            records = list(load_json(demo_paths()[0]))
            t0 = time.perf_counter()
            ingest(g, records)
            t_ingest = time.perf_counter() - t0
            t0 = time.perf_counter()
            index = SemanticIndex.from_graph(g, IndexSettings())
            t_index = time.perf_counter() - t0
            counts = gd.graph_counts(g)
            print(f"demo graph: {counts}; ingest {t_ingest:.1f}s; semantic index {t_index:.1f}s "
                  f"({index.stats.index_kind}, dim {index.stats.dim})")
            facts = [r for r in records if isinstance(r, FactRecord)]
            sample = random.Random(args.seed).sample(facts, min(args.facts, len(facts)))
            ref = gd.date_sort_key(args.at)
            lat: dict[str, list[float]] = {k: [] for k in (
                "fact_context", "typed_candidates", "temporal_candidates", "omega_filter(40)",
                "random_same_type", "strategy random", "strategy sem", "strategy temp+sem")}
            sizes = []
            for f in sample:
                ctx = timed(lambda f=f: gd.fact_context(g, f.subject, f.pid, f.object), lat["fact_context"])
                cands = timed(lambda ctx=ctx: gd.typed_candidates(g, ctx), lat["typed_candidates"])
                sizes.append(len(cands))
                timed(lambda ctx=ctx: gd.temporal_candidates(g, ctx, ref), lat["temporal_candidates"])
                batch = [n.qid for n in index.search_vector(index.vector(f.object), 40)] if f.object in index else []
                timed(lambda ctx=ctx, b=batch: gd.omega_filter(g, ctx, b), lat["omega_filter(40)"])
                timed(lambda ctx=ctx: gd.random_same_type(g, ctx, args.n, args.seed), lat["random_same_type"])
                for s in ("random", "sem", "temp+sem"):
                    timed(lambda f=f, s=s: find_distractors(g, f.subject, f.pid, f.object, strategy=s, n=args.n,
                                                          at=ref, index=index), lat[f"strategy {s}"])
            print(f"{len(sample)} facts, n={args.n}; |typed candidates| median {int(np.median(sizes))}, "
                  f"max {max(sizes)}")
            for k, xs in lat.items():
                a = np.asarray(xs) * 1000
                print(f"  {k:<22} p50 {np.percentile(a, 50):7.2f} ms   p95 {np.percentile(a, 95):7.2f} ms   "
                      f"max {a.max():7.2f} ms")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
