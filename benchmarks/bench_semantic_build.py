"""Semantic index build on the configured graph: time per entity, peak memory, what was indexed.

    # a graph ingested once (benchmarks/gen_dump.py, then `kgprobe ingest`), KGPROBE_HOME set:
    python benchmarks/bench_semantic_build.py --templates            # import kgprobe's templates once
    python benchmarks/bench_semantic_build.py --sample 20000 --workers 2
    python benchmarks/bench_semantic_build.py --baseline             # the code before issue 44
    python benchmarks/bench_semantic_build.py --recall --compress-from 0   # IVF-PQ vs exact
    python benchmarks/bench_semantic_build.py --sample 5000 --agreement   # vs the whole-graph fit
    python benchmarks/bench_semantic_build.py --sample 20000 --update 100  # an update after 100 new facts
    python benchmarks/bench_semantic_build.py --sample 20000 --update 100 --update-deep  # by digests
    # no graph, no Java: a synthetic graph of N entities generated on the fly (SyntheticFacts),
    # one fresh process per worker count, wall / CPU (all processes) / entities/s each:
    python benchmarks/bench_semantic_build.py --synthetic 100000 --workers 1,2,4,8,16 --json

Peak memory is this process's maximum resident set (``ru_maxrss``), the graph server apart; each
run is one fresh process. ``--baseline`` times ``ensure_index`` of a kgprobe that has no
``build_index`` (run it with PYTHONPATH pointing at the old checkout). ``--recall`` builds the
exact index and the IVF-PQ one from the same vectors and prints recall@10 of the compressed
index's unfiltered neighbours against the exact ones. ``--agreement`` also builds the index of
a whole-graph fit and prints, besides the overlap of the two builds' top 10, each one's
``neighbour_quality``: the mean exact TF-IDF cosine of the neighbours it returns, beside the
exact top 10 and random entities (:func:`neighbour_quality`).
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
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_s() -> float:
    """CPU seconds of this process and its finished children (the pool's workers)."""
    t = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        t += r.ru_utime + r.ru_stime
    return t


def recall_at_10(idx: Any, qs: np.ndarray, want: np.ndarray, cut: np.ndarray | None = None) -> float:
    """The share of the exact top 10 (``want``: each query row's exact top 11, itself among
    them) that ``idx``'s neighbours of the rows ``qs`` find. With ``cut`` (each query's exact
    10th similarity, itself apart) a neighbour at least that similar counts too: an entity tied
    with the exact 10th is as right as the one the exact search happened to list (synthetic
    graphs hold many entities with the same bag, so ties at the cut are common)."""
    row = idx.row if callable(idx.row) else idx.row.__getitem__  # a dict before step 2
    hits = 0
    for i, (q, w) in enumerate(zip(qs, want, strict=True)):
        found = idx.neighbours(idx.qids[q], 10)
        if cut is not None:
            hits += sum(n.similarity >= cut[i] - 1e-5 for n in found)
            continue
        got = {row(n.qid) for n in found}
        hits += len(got & set(int(x) for x in w if x != q and x >= 0))
    return round(hits / (10 * len(qs)), 4)


def by_nprobe(idx: Any, qs: np.ndarray, want: np.ndarray, cut: np.ndarray,
              probes: list[int]) -> list[dict[str, float]]:
    """recall@10 and the mean wall ms of an unfiltered ``neighbours`` query with each ``nprobe``
    (the lists a query visits) on the same built index: how many lists a given recall needs at
    this index's list occupancy (N / nlist)."""
    kept = idx.stats.nprobe
    out = []
    try:
        for p in probes:
            idx.stats.nprobe = p
            t = time.perf_counter()
            r = recall_at_10(idx, qs, want)
            ms = 1000 * (time.perf_counter() - t) / len(qs)
            out.append({"nprobe": p, "share_of_lists": round(p / int(idx.index.nlist), 5),
                        "recall_at_10": r, "recall_at_10_ties": recall_at_10(idx, qs, want, cut),
                        "ms_per_query": round(ms, 3)})
    finally:
        idx.stats.nprobe = kept
    return out


_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 of each element: a counter-based hash, so an entity's facts depend on its id
    alone (any batch, any process, any order gives the same graph)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _unit(h: np.ndarray) -> np.ndarray:
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


class SyntheticFacts:
    """A graph-free :class:`~kgprobe.probing.semantic.FactSource` of ``n`` entities Q1..Qn with
    about ``facts`` (relation, object) pairs each, like the 1M-statement synthetic dump
    (benchmarks/gen_dump.py: ~10 a subject): one P31 type from a pool of n/50 classes, then
    relations Zipf(1.6) over 300 PIDs and objects half classes, half entities Zipf-popular,
    spread over the ids. Every entity is indexed. Picklable: the build's workers read their
    own batches (``in_workers``)."""

    in_workers = True

    def __init__(self, n: int, seed: int = 0, facts: int = 10, relations: int = 300) -> None:
        self.n, self.seed, self.mean, self.relations = n, seed, facts, relations

    def counts(self) -> dict[str, int]:
        return {"entities": self.n, "synthetic_seed": self.seed}

    def ids(self, settings: object) -> tuple[object, object]:
        from kgprobe.probing.qidtable import QidTable

        t = QidTable(np.arange(1, self.n + 1, dtype=np.int64))
        return t, t

    def facts(self, qids: list[str], batch: int) -> object:
        for i in range(0, len(qids), batch):
            yield from self._facts(qids[i : i + batch])

    def _facts(self, qids: list[str]) -> list[tuple[str, list[tuple[str, str]]]]:
        n, salt = self.n, np.uint64(self.seed * 1_000_003 + 17)
        nums = np.fromiter((int(q[1:]) for q in qids), dtype=np.uint64, count=len(qids))
        k = 1 + (_mix(nums ^ salt) % np.uint64(2 * self.mean - 1)).astype(np.int64)
        rows = np.repeat(np.arange(len(qids)), k)
        j = np.arange(rows.size) - np.repeat(np.cumsum(k) - k, k)
        h = _mix((nums[rows] << np.uint64(6)) + j.astype(np.uint64) + salt)
        h2 = _mix(h)
        classes = max(n // 50, 2)
        rel = np.minimum(np.floor(np.minimum(_unit(h) ** (-1 / 0.6), 1e9)).astype(np.int64), self.relations)
        pop = np.minimum(np.floor(np.minimum(_unit(h2) ** (-1 / 0.2), 1e15)).astype(np.int64) - 1, n - 1)
        is_class = (h2 & np.uint64(1)).astype(bool) | (j == 0)
        cls = np.minimum(np.floor(np.minimum(_unit(h2 ^ salt) ** (-1 / 0.4), 1e15)).astype(np.int64) - 1, classes - 1)
        obj = 1 + np.where(is_class, cls, (pop * 7_919 + 1) % n)  # classes are Q1..Qclasses
        pid = np.where(j == 0, 31, rel + 100)
        out: list[tuple[str, list[tuple[str, str]]]] = []
        ends = np.cumsum(k)
        ps = [f"P{x}" for x in pid.tolist()]
        os_ = [f"Q{x}" for x in obj.tolist()]
        start = 0
        for q, end in zip(qids, ends.tolist(), strict=True):
            out.append((q, sorted(zip(ps[start:end], os_[start:end], strict=True))))
            start = end
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--templates", action="store_true", help="import kgprobe's templates and exit")
    ap.add_argument("--baseline", action="store_true")
    ap.add_argument("--sample", type=int, default=None,
                    help="the most entities fitted on (at most --sample-min of them: a fixed sample)")
    ap.add_argument("--sample-min", type=int, default=None,
                    help="entities the fit starts from before it doubles its sample (default 20,000)")
    ap.add_argument("--coverage", type=float, default=None,
                    help="half_coverage at which the sample stops doubling (default 0.96)")
    ap.add_argument("--workers", default="1",
                    help="processes; a comma list (1,2,4) runs one fresh process per count")
    ap.add_argument("--synthetic", type=int, default=0, metavar="N",
                    help="no graph: N synthetic entities (SyntheticFacts), every one indexed")
    ap.add_argument("--json", action="store_true", help="one JSON document (a sweep: a list)")
    ap.add_argument("--seed", type=int, default=0, help="the build's seed (--agreement's whole fit keeps 0)")
    ap.add_argument("--all-entities", action="store_true", help="candidates_only=False")
    ap.add_argument("--recall", action="store_true")
    ap.add_argument("--compress-from", type=int, default=None)
    ap.add_argument("--pq-m", type=int, default=None, help="bytes per compressed vector")
    ap.add_argument("--exact-threshold", type=int, default=None,
                    help="entities up to which the index is exact (IVF above; default 50,000)")
    ap.add_argument("--nlist", type=int, default=None, help="IVF lists (default 4·sqrt(N))")
    ap.add_argument("--hnsw-from", type=int, default=None,
                    help="IVF lists from which the centroids are searched through HNSW (default 16,384)")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--recall-target", type=float, default=None,
                    help="the recall@10 an IVF build calibrates its nprobe to (default 0.95; 0: nprobe as set)")
    ap.add_argument("--nprobe", default=None, metavar="LIST",
                    help="with --recall: also recall@10 and ms a query at each of these nprobe "
                         "(a comma list), on the same index (what a query visits, not what is built)")
    ap.add_argument("--readers", type=int, default=None,
                    help="threads reading the graph's batches at once (semantic.READERS)")
    ap.add_argument("--update-deep", action="store_true",
                    help="with --update: the check and update by the pass over every bag's digest "
                         "(the code before the change journal), not the journal")
    ap.add_argument("--update", type=int, default=0,
                    help="then add this many FACT edges (removed after) and time ensure_index's update")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="profile the build (cProfile, wall clock) and print its N costliest calls")
    ap.add_argument("--agreement", action="store_true",
                    help="also build with the whole graph as the sample; print overlap@10 of neighbours "
                         "and both builds' neighbour quality (exact TF-IDF cosine)")
    args = ap.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    if len(counts) > 1:
        sweep(counts)
        return
    args.workers = counts[0]

    import contextlib

    out: dict[str, object] = {"load_average_before": round(os.getloadavg()[0], 1),
                              "cpus": os.cpu_count()}
    if args.synthetic:
        if args.update or args.agreement or args.templates or args.baseline:
            ap.error("--synthetic builds only (with --recall, --profile, --sample)")
        opened: contextlib.AbstractContextManager[object] = contextlib.nullcontext(
            SyntheticFacts(args.synthetic, args.seed))
        out["source"] = f"synthetic {args.synthetic} entities"
    else:
        from kgprobe.config import Settings
        from kgprobe.graph.client import connect

        opened = connect(Settings.load())
    with opened as graph, tempfile.TemporaryDirectory(prefix="kgprobe-idx-") as tmp:
        if args.templates:
            from kgprobe.graph.templates import import_own_templates

            print("templates imported:", import_own_templates(graph))
            return
        from kgprobe.probing import semantic as sem

        if args.readers:
            sem.READERS = args.readers
            out["readers"] = args.readers
        t0 = time.perf_counter()
        cpu0 = cpu_s()
        if args.baseline or not hasattr(sem, "build_index"):
            idx = sem.ensure_index(graph, Path(tmp) / "index", sem.IndexSettings())
            out["code"] = "baseline (ensure_index, in memory)"
        else:
            kw: dict[str, object] = {"candidates_only": not args.all_entities, "seed": args.seed}
            for key, val in (("sample", args.sample), ("sample_min", args.sample_min),
                             ("sample_coverage", args.coverage)):
                if val is not None:
                    kw[key] = val
            if args.compress_from is not None:
                kw["compress_from"] = args.compress_from
            if args.pq_m is not None:
                kw["pq_m"] = args.pq_m
            if args.exact_threshold is not None:
                kw["exact_threshold"] = args.exact_threshold
            if args.nlist is not None:
                kw["nlist"] = args.nlist
            if args.hnsw_from is not None:
                kw["hnsw_from"] = args.hnsw_from
            if args.recall_target is not None:
                kw["recall_target"] = args.recall_target
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
        out["workers"] = args.workers
        out["cpu_s"] = round(cpu_s() - cpu0, 1)  # this process and its workers
        out["entities_per_s"] = round(len(idx) / max(wall, 1e-9))
        st = idx.stats
        out["entities_indexed"] = len(idx)
        out["entities_in_graph"] = getattr(st, "n_graph", 0) or len(idx)
        out["indexed_share"] = round(len(idx) / max(int(out["entities_in_graph"]), 1), 3)  # type: ignore[call-overload]
        out["sample"] = getattr(st, "n_sample", None)
        out["sample_steps"] = getattr(st, "sample_steps", None)  # (size, half_coverage) per step
        out["index_kind"] = st.index_kind
        quantizer = getattr(idx.index, "quantizer", None)
        if quantizer is not None:  # an IVF index: its lists and how their centroids are searched
            import faiss

            out["nlist"] = int(idx.index.nlist)
            out["quantizer"] = type(faiss.downcast_index(quantizer)).__name__
            out["nprobe"] = int(getattr(idx, "nprobe", idx.settings.nprobe))  # (a property since calibration)
            out["recall_steps"] = getattr(st, "recall_steps", None)  # (nprobe, recall@10) the build tried
        out["build_wall_s"] = round(wall, 1)
        out["ms_per_indexed_entity"] = round(1000 * wall / max(len(idx), 1), 3)
        out["ms_per_graph_entity"] = round(1000 * wall / max(int(out["entities_in_graph"]), 1), 3)  # type: ignore[call-overload]
        out["steps_s"] = {k: round(v, 1) for k, v in st.seconds.items()}
        out["peak_rss_mb"] = round(peak_mb())
        out["peak_rss_mb_one_worker"] = round(
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
        if args.recall:
            vecs = np.asarray(idx.vecs if idx.vecs is not None else idx.vectors(range(len(idx))))
            exact = sem.make_faiss_index(vecs, sem.IndexSettings(exact_threshold=10**12))
            rng = np.random.default_rng(0)
            qs = rng.choice(len(idx), size=min(args.queries, len(idx)), replace=False)
            sims, want = exact.search(vecs[qs], 11)
            t = time.perf_counter()
            out["recall_at_10"] = recall_at_10(idx, qs, want)
            out["ms_per_query"] = round(1000 * (time.perf_counter() - t) / len(qs), 3)
            out["recall_at_10_ties"] = recall_at_10(idx, qs, want, sims[:, 10])
            if args.nprobe and out.get("nlist"):
                out["by_nprobe"] = by_nprobe(idx, qs, want, sims[:, 10],
                                             [int(x) for x in args.nprobe.split(",")])
            if out.get("quantizer") == "IndexHNSWFlat":  # the same lists' count, centroids compared one by one
                import dataclasses

                t = time.perf_counter()
                flat_q = sem.SemanticIndex(idx.qids, sem.make_faiss_index(
                    vecs, dataclasses.replace(idx.settings, hnsw_from=10**9)), idx.settings,
                    stats=sem.BuildStats(nprobe=idx.stats.nprobe), vecs=vecs)
                out["flat_quantizer_faiss_s"] = round(time.perf_counter() - t, 1)
                out["recall_at_10_flat_quantizer_same_vectors"] = recall_at_10(flat_q, qs, want)
            if idx.stats.index_kind == "IndexIVFPQ":  # the same vectors in IVF-Flat, same nprobe
                flat = sem.SemanticIndex(idx.qids, sem.make_faiss_index(
                    vecs, sem.IndexSettings(compress_from=10**12)), sem.IndexSettings(),
                    stats=sem.BuildStats(nprobe=idx.stats.nprobe), vecs=vecs)
                out["recall_at_10_ivfflat_same_vectors"] = recall_at_10(flat, qs, want)
        if args.update and not args.baseline and hasattr(sem, "build_index"):
            import random

            from kgprobe.api import write_records
            from kgprobe.records import FactRecord

            ids = list(idx.qids)
            rng = random.Random(0)
            # N new facts written by kgprobe's ingest (journaled), then the index brought up to
            # date: by the journal, or (--update-deep) by the pass over every bag's digest
            write_records(graph, [FactRecord(rng.choice(ids), "P9999", rng.choice(ids),
                                             statement_id=f"bench44-{i}")
                                  for i in range(args.update)], quiet=True)
            try:
                t = time.perf_counter()
                upd = sem.ensure_index(graph, Path(tmp) / "index", settings,
                                       deep=True if args.update_deep else None)
                out["update_wall_s"] = round(time.perf_counter() - t, 2)
                out["update_check"] = "deep: every bag digested" if args.update_deep else "journal"
                out["update_embedded"] = upd.stats.n_embedded
                out["update_bags_scanned"] = upd.stats.n_bags_scanned
                out["update_steps_s"] = {k: round(v, 2) for k, v in upd.stats.seconds.items()}
                t = time.perf_counter()
                sem.ensure_index(graph, Path(tmp) / "index", settings, rebuild=False,
                                 deep=True if args.update_deep else None)
                out["check_current_wall_s"] = round(time.perf_counter() - t, 2)
            finally:
                graph.write("MATCH ()-[f:FACT {pid: 'P9999'}]->() DELETE f")
                graph.write("MATCH (x:FactSlot) WHERE x.id STARTS WITH 'P9999:' DELETE x")
        if args.agreement and hasattr(sem, "build_index"):
            whole = sem.build_index(graph, Path(tmp) / "whole",
                                    sem.IndexSettings(sample=10**9, sample_min=10**9,
                                                      candidates_only=not args.all_entities))
            rng = np.random.default_rng(1)
            qs = rng.choice(len(idx), size=min(args.queries, len(idx)), replace=False)
            tops: dict[str, list[list[str]]] = {"sample": [], "whole fit": []}
            for q in qs:
                tops["sample"].append([n.qid for n in idx.neighbours(idx.qids[q], 10)])
                tops["whole fit"].append([n.qid for n in whole.neighbours(idx.qids[q], 10)])
            both = sum(len(set(a) & set(b)) for a, b in zip(tops["sample"], tops["whole fit"], strict=True))
            out["overlap_at_10_with_whole_fit"] = round(both / (10 * len(qs)), 4)
            out["neighbour_quality"] = neighbour_quality(graph, list(idx.qids), [idx.qids[q] for q in qs], tops)
    out["load_average_after"] = round(os.getloadavg()[0], 1)
    print(json.dumps(out, indent=1 if args.json else None))


def neighbour_quality(graph: object, indexed: list[str], queries: list[str],
                      tops: dict[str, list[list[str]]]) -> dict[str, float]:
    """What Sem neighbours are for, measured without the index: the mean exact TF-IDF cosine
    (sklearn, fitted on every entity's bag, as a whole-graph build is) between each query and
    the neighbours each build returned, beside the exact top 10 among the ``indexed`` (the
    ceiling) and 10 random indexed entities (the floor). Overlap between two builds says only
    that they differ; this says which one finds the more similar entities."""
    from sklearn.feature_extraction.text import CountVectorizer, TfidfTransformer

    from kgprobe.probing.semantic import feature_bags

    qids, bags = zip(*feature_bags(graph), strict=True)  # type: ignore[arg-type]
    row = {q: i for i, q in enumerate(qids)}
    counts = CountVectorizer(analyzer=lambda b: b, lowercase=False).fit_transform(bags)
    x = TfidfTransformer(sublinear_tf=True).fit_transform(counts).tocsr()
    cand = np.array(sorted(row[q] for q in indexed))
    rng = np.random.default_rng(2)
    sums = {name: 0.0 for name in tops} | {"exact top 10": 0.0, "random 10": 0.0}
    for lo in range(0, len(queries), 100):  # 100 queries' cosines to every entity at a time
        part = queries[lo : lo + 100]
        sims = (x[[row[q] for q in part]] @ x.T).toarray()
        for i, q in enumerate(part):
            s = sims[i]
            s[row[q]] = -np.inf
            sums["exact top 10"] += float(np.sort(s[cand])[-10:].sum())
            sums["random 10"] += float(np.maximum(s[rng.choice(cand, 10)], 0).sum())
            for name, found in tops.items():
                sums[name] += float(s[[row[n] for n in found[lo + i]]].sum())
    return {k: round(v / (10 * len(queries)), 5) for k, v in sums.items()}


def sweep(counts: list[int]) -> None:
    """The same build once per worker count, each in a fresh process (its own peak RSS and CPU
    count); the other arguments are passed on. Prints a table, or with --json a JSON list."""
    import subprocess

    argv = sys.argv[1:]
    rest: list[str] = []
    skip = False
    for a in argv:  # drop --workers X / --workers=X / --json
        if skip:
            skip = False
            continue
        if a == "--workers":
            skip = True
            continue
        if a.startswith("--workers=") or a == "--json":
            continue
        rest.append(a)
    results = []
    for w in counts:
        r = subprocess.run([sys.executable, str(Path(__file__).resolve()), *rest, "--workers", str(w)],
                           capture_output=True, text=True)
        if r.returncode:
            sys.stderr.write(r.stderr)
            raise SystemExit(f"the build with {w} workers failed (exit {r.returncode})")
        results.append(json.loads(r.stdout.strip().splitlines()[-1]))
        if "--json" not in argv:
            o = results[-1]
            print(f"workers {w:>3}: wall {o['build_wall_s']:>7.1f} s  CPU {o['cpu_s']:>7.1f} s  "
                  f"{o['entities_per_s']:>8} entities/s  steps {o['steps_s']}", flush=True)
    if "--json" in argv:
        base = results[0]["build_wall_s"] or 1e-9
        for o in results:
            o["speedup_vs_first"] = round(base / max(o["build_wall_s"], 1e-9), 2)
        print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
