"""Semantic index build on the configured graph: time per entity, peak memory, what was indexed.

    # a graph ingested once (benchmarks/gen_dump.py, then `kgprobe ingest`), KGPROBE_HOME set:
    python benchmarks/bench_semantic_build.py --templates            # import kgprobe's templates once
    python benchmarks/bench_semantic_build.py --sample 20000 --workers 2
    python benchmarks/bench_semantic_build.py --baseline             # the code before issue 44
    python benchmarks/bench_semantic_build.py --recall --compress-from 0   # IVF-PQ vs exact
    python benchmarks/bench_semantic_build.py --sample 5000 --agreement   # vs the whole-graph fit
    python benchmarks/bench_semantic_build.py --sample 20000 --update 100  # an update after 100 new facts

Peak memory is this process's maximum resident set (``ru_maxrss``), the graph server apart; each
run is one fresh process. ``--baseline`` times ``ensure_index`` of a kgprobe that has no
``build_index`` (run it with PYTHONPATH pointing at the old checkout). ``--recall`` builds the
exact index and the IVF-PQ one from the same vectors and prints recall@10 of the compressed
index's unfiltered neighbours against the exact ones.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--templates", action="store_true", help="import kgprobe's templates and exit")
    ap.add_argument("--baseline", action="store_true")
    ap.add_argument("--sample", type=int, default=None)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0, help="the build's seed (--agreement's whole fit keeps 0)")
    ap.add_argument("--all-entities", action="store_true", help="candidates_only=False")
    ap.add_argument("--recall", action="store_true")
    ap.add_argument("--compress-from", type=int, default=None)
    ap.add_argument("--pq-m", type=int, default=None, help="bytes per compressed vector")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--update", type=int, default=0,
                    help="then add this many FACT edges (removed after) and time ensure_index's update")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="profile the build (cProfile, wall clock) and print its N costliest calls")
    ap.add_argument("--agreement", action="store_true",
                    help="also build with the whole graph as the sample; print overlap@10 of neighbours")
    args = ap.parse_args()

    from kgprobe.config import Settings
    from kgprobe.graph.client import connect

    out: dict[str, object] = {"load_average_before": round(os.getloadavg()[0], 1)}
    with connect(Settings.load()) as graph, tempfile.TemporaryDirectory(prefix="kgprobe-idx-") as tmp:
        if args.templates:
            from kgprobe.graph.templates import import_own_templates

            print("templates imported:", import_own_templates(graph))
            return
        from kgprobe.probing import semantic as sem

        t0 = time.perf_counter()
        cpu0 = time.process_time()
        if args.baseline or not hasattr(sem, "build_index"):
            idx = sem.ensure_index(graph, Path(tmp) / "index", sem.IndexSettings())
            out["code"] = "baseline (ensure_index, in memory)"
        else:
            kw: dict[str, object] = {"candidates_only": not args.all_entities, "seed": args.seed}
            if args.sample is not None:
                kw["sample"] = args.sample
            if args.compress_from is not None:
                kw["compress_from"] = args.compress_from
            if args.pq_m is not None:
                kw["pq_m"] = args.pq_m
            settings = sem.IndexSettings(**kw)  # type: ignore[arg-type]
            if args.profile:
                import cProfile
                import pstats

                prof = cProfile.Profile()
                idx = prof.runcall(sem.build_index, graph, Path(tmp) / "index", settings, workers=args.workers)
                pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(args.profile)
                pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(args.profile)
            else:
                idx = sem.build_index(graph, Path(tmp) / "index", settings, workers=args.workers)
            out["code"] = f"build_index sample={settings.sample} workers={args.workers}"
        wall = time.perf_counter() - t0
        out["cpu_s_this_process"] = round(time.process_time() - cpu0, 1)
        st = idx.stats
        out["entities_indexed"] = len(idx)
        out["entities_in_graph"] = getattr(st, "n_graph", 0) or len(idx)
        out["indexed_share"] = round(len(idx) / max(int(out["entities_in_graph"]), 1), 3)  # type: ignore[call-overload]
        out["sample"] = getattr(st, "n_sample", None)
        out["index_kind"] = st.index_kind
        out["build_wall_s"] = round(wall, 1)
        out["ms_per_indexed_entity"] = round(1000 * wall / max(len(idx), 1), 3)
        out["ms_per_graph_entity"] = round(1000 * wall / max(int(out["entities_in_graph"]), 1), 3)  # type: ignore[call-overload]
        out["steps_s"] = {k: round(v, 1) for k, v in st.seconds.items()}
        out["peak_rss_mb"] = round(peak_mb())
        if args.recall:
            import numpy as np

            vecs = np.asarray(idx.vecs if idx.vecs is not None else idx.vectors(range(len(idx))))
            exact = sem.make_faiss_index(vecs, sem.IndexSettings(exact_threshold=10**12))
            rng = np.random.default_rng(0)
            qs = rng.choice(len(idx), size=min(args.queries, len(idx)), replace=False)
            _, want = exact.search(vecs[qs], 11)
            hits = 0
            row = idx.row if callable(idx.row) else idx.row.__getitem__  # a dict before step 2
            for q, w in zip(qs, want, strict=True):
                got = {row(n.qid) for n in idx.neighbours(idx.qids[q], 10)}
                hits += len(got & set(int(x) for x in w if x != q and x >= 0))
            out["recall_at_10"] = round(hits / (10 * len(qs)), 4)
            if idx.stats.index_kind == "IndexIVFPQ":  # the same vectors in IVF-Flat, same nprobe
                flat = sem.SemanticIndex(idx.qids, sem.make_faiss_index(
                    vecs, sem.IndexSettings(compress_from=10**12)), sem.IndexSettings(), vecs=vecs)
                hits = 0
                frow = flat.row if callable(flat.row) else flat.row.__getitem__
                for q, w in zip(qs, want, strict=True):
                    got = {frow(n.qid) for n in flat.neighbours(flat.qids[q], 10)}
                    hits += len(got & set(int(x) for x in w if x != q and x >= 0))
                out["recall_at_10_ivfflat_same_vectors"] = round(hits / (10 * len(qs)), 4)
        if args.update and not args.baseline and hasattr(sem, "build_index"):
            import random

            ids = list(idx.qids)
            rng = random.Random(0)
            pairs = [{"s": rng.choice(ids), "o": rng.choice(ids)} for _ in range(args.update)]
            graph.write("UNWIND $rows AS r MATCH (s:Entity {qid: r.s}), (o:Entity {qid: r.o}) "
                        "CREATE (s)-[:FACT {pid: 'P9999', key: 'bench44', rank: 'normal'}]->(o)", rows=pairs)
            try:
                t = time.perf_counter()
                upd = sem.ensure_index(graph, Path(tmp) / "index", settings)
                out["update_wall_s"] = round(time.perf_counter() - t, 1)
                out["update_embedded"] = upd.stats.n_embedded
                out["update_steps_s"] = {k: round(v, 1) for k, v in upd.stats.seconds.items()}
            finally:
                graph.write("MATCH ()-[f:FACT {key: 'bench44'}]->() DELETE f")
        if args.agreement and hasattr(sem, "build_index"):
            import numpy as np

            whole = sem.build_index(graph, Path(tmp) / "whole",
                                    sem.IndexSettings(sample=10**9, candidates_only=not args.all_entities))
            rng = np.random.default_rng(1)
            qs = rng.choice(len(idx), size=min(args.queries, len(idx)), replace=False)
            both = 0
            for q in qs:
                a = {n.qid for n in idx.neighbours(idx.qids[q], 10)}
                b = {n.qid for n in whole.neighbours(idx.qids[q], 10)}
                both += len(a & b)
            out["overlap_at_10_with_whole_fit"] = round(both / (10 * len(qs)), 4)
    out["load_average_after"] = round(os.getloadavg()[0], 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
