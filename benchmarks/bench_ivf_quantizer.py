"""The IVF index's fill and k-means at Wikidata's list counts: a flat quantizer against the HNSW
graph over the centroids (`IndexSettings.hnsw_from`), side by side in one process.

    python benchmarks/bench_ivf_quantizer.py                                  # 16,384 and 40,000 lists
    python benchmarks/bench_ivf_quantizer.py --nlist 4096,16384,40000 --threads 1,2 --train

Why: at 100M indexed entities the index has nlist = 4·sqrt(N) = 40,000 lists, and a flat
quantizer compares every vector with every centroid while the index is filled (N·nlist·dim
multiply-adds) and every k-means point with every centroid in each iteration. That cannot be
timed at 100M on a small machine; the cost per vector at the same nlist can, and it does not
depend on N (a list's length does not enter it).

Vectors: unit vectors around 5,000 seeded Gaussian centres (dim 128, as the index's SVD gives).
Fill: the quantizer holds ``nlist`` centroids (a seeded sample of the vectors: no k-means, which
would only move them), then ``--vectors`` vectors are added to an ``IndexIVFFlat``; printed:
vectors/s and the share placed in the list the flat quantizer picks. ``--train``: one k-means
iteration on ``nlist`` × KMEANS_PER_LIST points (what ``make_faiss_index`` trains on), flat
against the HNSW assignment; a build runs KMEANS_ITER of them. ``--threads``: FAISS's OpenMP
threads, so the scaling with cores can be read. Figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kgprobe.probing import semantic as sem  # noqa: E402

DIM = 128
#: bytes a vector of an IVF-PQ index filled instead of IVF-Flat (``--pq``); 0: IVF-Flat
PQ_M = 0


def clustered(n: int, rng: np.random.Generator, centres: np.ndarray) -> np.ndarray:
    x = centres[rng.integers(0, len(centres), n)] + 0.7 * rng.standard_normal((n, DIM), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def quantizer(kind: str, ef: int) -> Any:
    import faiss

    if kind == "flat":
        return faiss.IndexFlatIP(DIM)
    q = faiss.IndexHNSWFlat(DIM, sem.HNSW_M, faiss.METRIC_INNER_PRODUCT)
    q.hnsw.efConstruction = sem.HNSW_EF_CONSTRUCTION
    q.hnsw.efSearch = ef
    return q


def fill(nlist: int, vecs: np.ndarray, cents: np.ndarray, kind: str, ef: int
         ) -> tuple[float, float, np.ndarray]:
    """Seconds to build the quantizer over ``cents``, seconds to add ``vecs``, and each vector's list."""
    import faiss

    q = quantizer(kind, ef)
    t = time.perf_counter()
    q.add(cents)
    built = time.perf_counter() - t
    index: Any
    if PQ_M:  # the compressed index of a large graph: codebooks trained first, not timed
        index = faiss.IndexIVFPQ(q, DIM, nlist, PQ_M, 8, faiss.METRIC_INNER_PRODUCT)
        index.pq.cp.niter = sem.KMEANS_ITER
        index.train(vecs[:20_000])  # (the quantizer holds its nlist centroids: only the codebooks)
    else:
        index = faiss.IndexIVFFlat(q, DIM, nlist, faiss.METRIC_INNER_PRODUCT)
        index.is_trained = True
    t = time.perf_counter()
    index.add(vecs)
    added = time.perf_counter() - t
    _, lists = q.search(vecs, 1)
    return built, added, lists[:, 0]


def kmeans_iteration(nlist: int, points: np.ndarray, kind: str) -> float:
    """Seconds of one spherical k-means iteration (FAISS's Clustering, as IVF trains) with the
    given assignment index."""
    import faiss

    cp = faiss.ClusteringParameters()
    cp.niter, cp.seed, cp.spherical = 1, 0, True
    clus = faiss.Clustering(DIM, nlist, cp)
    t = time.perf_counter()
    clus.train(points, quantizer(kind, sem.HNSW_EF_TRAIN))
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nlist", default="16384,40000", help="comma list of IVF list counts")
    ap.add_argument("--vectors", type=int, default=200_000, help="vectors filled in per run")
    ap.add_argument("--threads", default=str(os.cpu_count() or 1), help="comma list of FAISS threads")
    ap.add_argument("--train", action="store_true", help="also time one k-means iteration each")
    ap.add_argument("--ef", default=str(sem.HNSW_EF_ADD),
                    help="comma list: the HNSW fill's candidates (default: what the build uses)")
    ap.add_argument("--pq", action="store_true",
                    help="fill an IVF-PQ index (pq_m = IndexSettings.pq_m), as above compress_from")
    args = ap.parse_args()
    import faiss

    global PQ_M
    PQ_M = sem.IndexSettings().pq_m if args.pq else 0

    rng = np.random.default_rng(0)
    centres = rng.standard_normal((5000, DIM), dtype=np.float32)
    vecs = clustered(args.vectors, rng, centres)
    print(json.dumps({"faiss": faiss.__version__, "cpus": os.cpu_count(), "vectors": args.vectors,
                      "index": f"IVF-PQ, {PQ_M} bytes" if PQ_M else "IVF-Flat",
                      "hnsw": {"M": sem.HNSW_M, "ef_construction": sem.HNSW_EF_CONSTRUCTION,
                               "ef_train": sem.HNSW_EF_TRAIN, "ef_fill": sem.HNSW_EF_ADD,
                               "ef_search": sem.HNSW_EF_SEARCH}}), flush=True)
    efs = [int(x) for x in args.ef.split(",")]
    for nlist in (int(x) for x in args.nlist.split(",")):
        cents = np.ascontiguousarray(vecs[rng.choice(len(vecs), nlist, replace=False)])
        points = clustered(nlist * sem.KMEANS_PER_LIST, rng, centres) if args.train else None
        for threads in (int(x) for x in args.threads.split(",")):
            faiss.omp_set_num_threads(threads)
            row: dict[str, object] = {"nlist": nlist, "threads": threads}
            built, added, flat_lists = fill(nlist, vecs, cents, "flat", 0)
            row["flat_fill_vectors_per_s"] = round(len(vecs) / added)
            for ef in efs:
                built, added, lists = fill(nlist, vecs, cents, "hnsw", ef)
                row[f"hnsw_ef{ef}_fill_vectors_per_s"] = round(len(vecs) / added)
                row[f"hnsw_ef{ef}_same_list_as_flat"] = round(float(np.mean(lists == flat_lists)), 4)
                row[f"hnsw_ef{ef}_fill_speedup"] = round(len(vecs) / added
                                                         / float(row["flat_fill_vectors_per_s"]), 2)  # type: ignore[arg-type]
            row["hnsw_quantizer_build_s"] = round(built, 2)
            if points is not None:
                took = {kind: kmeans_iteration(nlist, points, kind) for kind in ("flat", "hnsw")}
                for kind, secs in took.items():
                    row[f"{kind}_kmeans_iteration_s"] = round(secs, 3)
                row["kmeans_points"] = len(points)
                row["kmeans_speedup"] = round(took["flat"] / max(took["hnsw"], 1e-9), 2)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
