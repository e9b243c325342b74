"""Semantic index: build time, query latency (p50/p95) and memory at synthetic sizes.

Synthetic entities imitate a Wikidata slice: each has 1 + Poisson(6) facts over 500 relations,
objects drawn from a Zipf-like popularity over the entities themselves and a pool of types, so
the feature bags (self, relations, objects, (relation, object) pairs) have Wikidata's long tail.
The count matrix is generated with numpy directly (no Python loop per entity), then goes through
the same ``embed`` / ``make_faiss_index`` code as a real build.

    .venv/bin/python benchmarks/bench_semantic_index.py --sizes 10000 100000 1000000

``--faiss-only N`` skips TF-IDF/SVD at size N and indexes random unit vectors of the same
dimension (to measure the FAISS part alone where the SVD would not fit the machine).
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import numpy as np
import scipy.sparse as sp


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def synthetic_counts(n: int, seed: int, n_rel: int = 500, n_types: int = 2000) -> sp.csr_matrix:
    """Entities × features count matrix with the paper's four kinds of features.

    Feature columns: [0, n) entity tokens, [n, n+n_rel) relations, pair tokens hashed into a
    space of 4n columns after that (an exact pair vocabulary would be the same up to collisions).
    """
    rng = np.random.default_rng(seed)
    k = 1 + rng.poisson(6, size=n)
    rows = np.repeat(np.arange(n), k)
    m = rows.size
    rel = np.minimum(rng.zipf(1.6, size=m) - 1, n_rel - 1)
    # objects: half "types/classes" (a small popular pool), half other entities (Zipf over ids)
    is_type = rng.random(m) < 0.5
    obj = np.where(
        is_type,
        np.minimum(rng.zipf(1.4, size=m) - 1, n_types - 1),
        np.minimum(rng.zipf(1.2, size=m) - 1, n - 1),
    )
    obj = rng.permutation(n)[obj]  # popular objects spread over ids
    pair = (rel.astype(np.int64) * 1_000_003 + obj) % (4 * n)
    self_cols = np.arange(n)
    r_all = np.concatenate([np.arange(n), rows, rows, rows])
    c_all = np.concatenate([self_cols, n + rel, obj, n + n_rel + pair])
    data = np.ones(r_all.size, dtype=np.float32)
    mat = sp.csr_matrix((data, (r_all, c_all)), shape=(n, n + n_rel + 4 * n))
    mat.sum_duplicates()
    return mat


def percentile_ms(xs: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1000, p))


def bench(n: int, args: argparse.Namespace) -> None:
    import faiss

    from kgprobe.probing.semantic import (
        BuildStats,
        IndexSettings,
        SemanticIndex,
        embed,
        make_faiss_index,
    )

    faiss.omp_set_num_threads(args.threads)
    settings = IndexSettings(
        dim=args.dim, exact_threshold=args.exact_threshold, nprobe=args.nprobe, seed=args.seed
    )
    qids = [f"Q{i + 1}" for i in range(n)]
    rss0 = rss_mb()
    stats = BuildStats(n_entities=n)
    t0 = time.perf_counter()
    if n in args.faiss_only:
        rng = np.random.default_rng(args.seed)
        vecs = rng.standard_normal((n, args.dim), dtype=np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        t_gen = time.perf_counter() - t0
        stats.seconds = {"tfidf": float("nan"), "svd": float("nan")}
        gen_note = f"random unit vectors ({t_gen:.1f}s), TF-IDF/SVD skipped"
    elif args.vectors_cache and os.path.exists(
        cache := f"{args.vectors_cache}/vecs_{n}_{args.dim}_{args.seed}.npy"
    ):
        vecs = np.load(cache)
        stats.seconds = {"tfidf": float("nan"), "svd": float("nan")}
        gen_note = f"TF-IDF/SVD vectors reused from {cache}"
    else:
        counts = synthetic_counts(n, args.seed)
        t_gen = time.perf_counter() - t0
        gen_note = f"counts {counts.shape[0]}x{counts.shape[1]} nnz={counts.nnz} ({t_gen:.1f}s)"
        vecs = embed(counts, settings, stats)
        del counts
        if args.vectors_cache:
            os.makedirs(args.vectors_cache, exist_ok=True)
            np.save(f"{args.vectors_cache}/vecs_{n}_{args.dim}_{args.seed}.npy", vecs)
    t1 = time.perf_counter()
    index = make_faiss_index(vecs, settings)
    t_faiss = time.perf_counter() - t1
    idx = SemanticIndex(qids, index, settings, None, stats)
    rss1 = rss_mb()
    index_mb = vecs.nbytes / 2**20 if isinstance(index, faiss.IndexFlat) else None
    tmp = f"/tmp/bench_semidx_{os.getpid()}.faiss"
    faiss.write_index(index, tmp)
    file_mb = os.path.getsize(tmp) / 2**20
    os.unlink(tmp)
    del vecs

    rng = np.random.default_rng(args.seed + 1)
    probes = rng.choice(n, size=min(args.queries, n), replace=False)
    # unfiltered top-n by an entity's own vector (what Sem does before the Ω filter)
    lat: list[float] = []
    cpu0 = time.process_time()
    for r in probes:
        t = time.perf_counter()
        idx.neighbours(qids[r], args.n)
        lat.append(time.perf_counter() - t)
    cpu_ms = (time.process_time() - cpu0) / len(probes) * 1000
    # filtered to an allowed set of 5% of entities (a type), exact over the set when small
    allowed = set(qids[i] for i in rng.choice(n, size=max(1, n // 20), replace=False))
    lat_f: list[float] = []
    lat_map: list[float] = []
    for r in probes[: max(1, len(probes) // 4)]:
        t = time.perf_counter()
        rows = idx.rows(allowed)  # QIDs → rows: a caller reusing one type's set does this once
        t1 = time.perf_counter()
        idx.neighbours(qids[r], args.n, allowed_rows=rows)
        lat_f.append(time.perf_counter() - t1)
        lat_map.append(t1 - t)
    recall = ""
    if not isinstance(index, faiss.IndexFlat):
        # recall@n of the approximate index against exact search over the same vectors
        sample = probes[:100]
        q = index.reconstruct_batch(np.asarray(sample, dtype=np.int64))
        flat = faiss.IndexFlatIP(index.d)
        flat.add(index.reconstruct_n(0, n))
        _, exact = flat.search(q, args.n + 1)
        _, approx = index.search(q, args.n + 1)
        hits = sum(len(set(a) & set(e)) for a, e in zip(approx, exact, strict=True))
        recall = f" recall@{args.n + 1}={hits / (len(sample) * (args.n + 1)):.3f}"
        del flat
    s = stats.seconds
    print(
        f"N={n:>8} dim={index.d} kind={type(index).__name__}"
        + (f" nlist={index.nlist} nprobe={index.nprobe}" if hasattr(index, "nprobe") else "")
        + f" | gen {gen_note} | tfidf {s.get('tfidf', 0):.1f}s svd {s.get('svd', 0):.1f}s faiss {t_faiss:.1f}s"
        + f" | query n={args.n} p50 {percentile_ms(lat, 50):.2f} ms p95 {percentile_ms(lat, 95):.2f} ms"
        + f" | filtered(5%) p50 {percentile_ms(lat_f, 50):.2f} ms p95 {percentile_ms(lat_f, 95):.2f} ms"
        + f" + QID→row mapping of the set p50 {percentile_ms(lat_map, 50):.1f} ms"
        + f" (CPU {cpu_ms:.2f} ms/query, load avg {os.getloadavg()[0]:.1f})"
        + f" | index file {file_mb:.0f} MiB"
        + (f" vectors {index_mb:.0f} MiB" if index_mb else "")
        + f" RSS +{rss1 - rss0:.0f} MiB{recall}",
        flush=True,
    )


def main() -> None:
    from kgprobe.probing.semantic import IndexSettings

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--faiss-only", type=int, nargs="*", default=[])
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--exact-threshold", type=int, default=IndexSettings().exact_threshold)
    ap.add_argument("--nprobe", type=int, default=IndexSettings().nprobe)
    ap.add_argument("--n", type=int, default=10, help="distractors per query")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=1, help="FAISS/BLAS threads for the queries")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--vectors-cache", default=None, help="directory to keep/reuse the SVD vectors between runs"
    )
    args = ap.parse_args()
    for n in args.sizes:
        bench(n, args)


if __name__ == "__main__":
    main()
