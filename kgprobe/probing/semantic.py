"""Semantic index of entities for the Sem / Temp+Sem distractor strategies.

Each entity is a bag of features as in the distractors paper (§3.3): the entity itself, every
relation it is the subject of, every object it points to, and every (relation, object) pair.
Entities and objects share one vocabulary (an entity's own token is the token other entities
get when they point to it), so entities that point to the same things, or that are pointed to
by the same things' neighbours, end up close.

Bags → TF-IDF (scikit-learn) → truncated SVD (randomized, seeded) → L2 normalization → FAISS
inner product, which is then cosine similarity. Below ``exact_threshold`` entities the index is
exact (``IndexFlatIP``); above it it is an inverted file (``IndexIVFFlat``, k-means seeded; the
lists a query visits, ``nprobe``, measured on the built index to reach ``recall_target``:
:func:`calibrate_nprobe`) with a direct map so an entity's own vector can be read back.

The index lives in a directory with a JSON manifest that ties it to the graph state (counts and
a hash of the feature bags) and to its settings and library versions, so that a stale index is
detected instead of silently used. This module holds no Cypher: the entities' facts and the
graph counts come through :mod:`kgprobe.graph.distractors` (it sits beside the distractor
finder, :mod:`kgprobe.probing.distractors`, that uses it).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import itertools
import json
import mmap
import multiprocessing
import os
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, runtime_checkable

import numpy as np

from kgprobe.config import private_dir, write_private_text
from kgprobe.errors import ConfigError, InputError, KgprobeError
from kgprobe.graph import journal
from kgprobe.graph.distractors import all_entity_ids, candidate_ids, entity_facts, graph_counts
from kgprobe.probing.qidtable import QidTable
from kgprobe.progress import Progress
from kgprobe.runtime import collect_rarely_here, rare_collections
from kgprobe.types import JSONObject

if TYPE_CHECKING:  # pragma: no cover
    import scipy.sparse as sp

    from kgprobe.graph.client import Graph

MANIFEST = "manifest.json"
INDEX_FILE = "index.faiss"
QIDS_FILE = "qids.npy"
#: raw float32 rows (no header: an update appends rows); the shape is in the manifest
VECTORS_FILE = "vectors.f32"
#: one uint64 bag digest per row (:func:`bag_digest`)
HASHES_FILE = "hashes.npy"
MODEL_FILE = "model.npz"
VOCAB_FILE = "vocab.json"
SAMPLE_FILE = "sample.json"
WORK_DIR = ".build"
#: in the work directory: the journal mark of a build's first attempt (kept by a resume)
JOURNAL_FILE = "journal.json"
FORMAT_VERSION = 3
#: entities read from the graph and embedded per batch (one checkpoint each).
BUILD_BATCH = 5000
#: vectors added to FAISS per call (the index holds them; the caller's array may be on disk).
ADD_BATCH = 65536
#: IVF k-means: iterations and training points per list. FAISS's defaults (25 iterations, and
#: kgprobe's 64 points a list before) cost 3.7x the CPU for the same recall: at 100k synthetic
#: entities 14.7 -> 3.9 CPU s, raw IVF recall@10 0.839 -> 0.838 (docs/benchmarks.md, issue 44
#: step 3). 39 a list is the least FAISS trains on without warning. IVF-PQ's codebooks get the
#: same number of iterations (25 → 10: 46 → 10 s of training at 31k points, recall below).
KMEANS_ITER = 10
KMEANS_PER_LIST = 39
#: The HNSW graph over the IVF lists' centroids (from ``IndexSettings.hnsw_from`` lists): links
#: per centroid, the candidates kept while it is built, and those kept while a k-means point is
#: assigned (training), a vector is placed in its list (the fill) and a query finds its
#: ``nprobe`` lists. Why a graph: a flat quantizer compares every vector with every centroid,
#: N·nlist products, and at 100M entities (nlist 40,000) the fill and the k-means are most of the
#: build. Measured on 2 cores at 40,000 lists (docs/benchmarks.md, "Semantic index at scale, step
#: 8"): a k-means iteration on 1.56M points 94.6 -> 33.3 s; the fill 19.5k vectors/s flat, 37.7k/s
#: with 32 candidates, 64.6k/s with 16. The fill keeps 32: with 16, recall@10 fell 0.030 at 8,192
#: lists (with 32: 0.012, and searched with 128 candidates; at 2,048 lists 0.0004); the k-means'
#: 16 cost no recall there.
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 40
HNSW_EF_TRAIN = 16
HNSW_EF_ADD = 32
HNSW_EF_SEARCH = 128
#: The queries an IVF build asks to set its ``nprobe`` (:func:`calibrate_nprobe`): seeded indexed
#: entities, each one's Sem neighbours against the exact top 10. At recall 0.95 the measured
#: recall's standard error over 200 queries (2,000 neighbours) is about 0.005.
CALIBRATION_QUERIES = 200
CALIBRATION_K = 10
#: a count is kept when the recall's lower one-sided 95 % bound over the queries reaches the
#: target, not the sample mean alone: at 1M synthetic entities a mean of 0.951 on 200 queries
#: was 0.943 on 1,000 others (docs/benchmarks.md)
CALIBRATION_Z = 1.645
#: the calibration stops doubling once a doubling gained less recall than this: what is missing
#: is then not in the lists a query skips (an IVF-PQ index's codes lose some neighbours that no
#: count of lists brings back), and every further doubling would double each query's cost.
CALIBRATION_MIN_GAIN = 0.005
#: and it visits at most this share of the lists: past it a query costs that share of a scan of
#: every vector, the inverted file no longer pays, and the calibration's last steps would cost
#: minutes at 100M entities (200 queries each over a share of 100M codes)
CALIBRATION_MAX_SHARE = 1 / 8
#: A compressed (IVF-PQ) index's query fetches this many times the neighbours asked for by
#: their approximate distances, then keeps the best by the exact vectors. The exact products
#: are cheap beside visiting more lists: at 4M synthetic entities (nlist 8,000) recall@10 0.969
#: in 4.3 ms a query with 16 and 256 lists, where 4 needed 1,024 lists (11.6 ms) for 0.956.
RERANK_FACTOR = 16
#: An approximate (IVF) index's query filtered to at most this many allowed entities (and no
#: predicate) scores each of them on its vector instead of searching the lists: exact, and no
#: slower at this size (docs/benchmarks.md, step 10). Sem's plan B passes Ω(f) when it holds at
#: most 50,000 members (``distractors.OMEGA_READ_LIMIT``).
EXACT_FILTER_MAX = 50_000
#: Filter sets larger than this become an IDSelectorBitmap, smaller ones an IDSelectorBatch.
BITMAP_FROM = 2048
#: an update that would change (add, re-embed or remove) more than this share of the indexed
#: entities is a full rebuild instead: the model and the IVF quantizers were fitted on the old
#: distribution, and past this much change a refit is worth its cost.
RETRAIN_FRACTION = 0.2


class StaleIndexError(KgprobeError):
    """The index on disk was built from another graph state or with other settings."""

    exit_code = 5


@dataclass(frozen=True)
class IndexSettings:
    """What the index depends on besides the graph; part of its identity (manifest)."""

    dim: int = 128
    #: at or below this many entities the index is exact (IndexFlatIP), above it IVF.
    exact_threshold: int = 50_000
    #: IVF lists; 0 = about 4·sqrt(N), clipped to [16, 65536].
    nlist: int = 0
    #: lists visited per query, at least (recall/latency trade-off of the approximate index): an
    #: IVF build doubles it, up to every list, until its queries reach ``recall_target``.
    nprobe: int = 32
    #: recall@10 of Sem neighbours against the exact search that an IVF build makes its queries
    #: reach (:func:`calibrate_nprobe`): how many lists that takes depends on the vectors (on
    #: the synthetic benchmark graph 32 lists gave 0.84, on the realistic dump's graph 0.9998),
    #: so it is measured on the built index, not assumed. 0: ``nprobe`` as it is.
    recall_target: float = 0.95
    seed: int = 0
    #: randomized-SVD power iterations (sklearn's default is 5).
    svd_iter: int = 5
    sublinear_tf: bool = True
    #: the most entities the vocabulary, IDF and SVD are fitted on: a seeded sample of all
    #: entities, the one memory knob of a build (a graph with no more entities may be fitted
    #: whole). The fit starts from ``sample_min`` of them and doubles the sample while the
    #: features a random half of it shares carry less than ``sample_coverage`` of the pairwise
    #: similarity within it (:func:`half_coverage`); ``sample`` ≤ ``sample_min`` is a fixed sample.
    sample: int = 200_000
    sample_min: int = 20_000
    sample_coverage: float = 0.96
    #: index only the entities that can be in some Ω(f) (:func:`candidate_ids`); their
    #: features still come from all their facts.
    candidates_only: bool = True
    #: above this many indexed entities the index is IVF-PQ (compressed, ``pq_m`` bytes per
    #: vector, re-ranked on the exact vectors) instead of IVF-Flat.
    compress_from: int = 2_000_000
    pq_m: int = 64
    #: from this many IVF lists on, the lists' centroids are found through an HNSW graph
    #: (``IndexHNSWFlat``) instead of being compared one by one: the fill and k-means cost
    #: about log(nlist) per vector instead of nlist. nlist reaches it at ~16.8M entities.
    hnsw_from: int = 16_384

    def resolved_nlist(self, n: int) -> int:
        if self.nlist > 0:
            return self.nlist
        return int(min(65536, max(16, 4 * int(np.sqrt(max(n, 1))))))


@dataclass(frozen=True)
class GraphState:
    """Fingerprint of the part of the graph the index is built from."""

    counts: dict[str, int]
    #: sha256 over the sorted feature bags; "" when only counts were read (cheap check).
    bags_hash: str = ""
    #: the graph's change journal (:mod:`kgprobe.graph.journal`) when the build or update
    #: began: its ``rev`` and the journaled ``writes`` by then; None on a graph without one
    journal_rev: int | None = None
    journal_writes: int | None = None
    journal_epoch: str | None = None


@dataclass
class Neighbour:
    qid: str
    similarity: float


@dataclass
class BuildStats:
    n_entities: int = 0
    n_features: int = 0
    nnz: int = 0
    dim: int = 0
    index_kind: str = ""
    seconds: dict[str, float] = field(default_factory=dict)
    #: entities in the graph, entities the model was fitted on, entities embedded by this build
    #: (fewer than n_entities after an incremental update or a resume)
    n_graph: int = 0
    n_sample: int = 0
    #: :func:`half_coverage` of each sample size the fit read, in order (empty: a fixed sample,
    #: or a graph fitted whole from the start)
    sample_steps: list[tuple[int, float]] = field(default_factory=list)
    n_embedded: int = 0
    resumed_from: int = 0
    #: bags read by this call only to tell what changed (digests), and bags read to embed them
    n_bags_scanned: int = 0
    n_bags_read: int = 0
    #: an update that exceeded RETRAIN_FRACTION (or was asked to) and rebuilt in full
    retrained: bool = False
    #: the lists an IVF index's query visits, as :func:`calibrate_nprobe` set them (0: the
    #: settings' ``nprobe``, as for an exact index or an index built before calibration), and
    #: each nprobe it tried with the recall@10 measured there and its lower 95 % bound
    nprobe: int = 0
    recall_steps: list[tuple[int, float, float]] = field(default_factory=list)


# --- feature bags -------------------------------------------------------------------------------


def bag_tokens(qid: str, facts: Iterable[tuple[str, str]]) -> list[str]:
    """The paper's bag for one entity from its (relation, object) pairs.

    Tokens: the entity's own id, each relation id, each object id, each ``PID=QID`` pair.
    Repeated tokens count (term frequency), as in a document.
    """
    tokens = [qid]
    for pid, obj in facts:
        tokens.extend((pid, obj, f"{pid}={obj}"))
    return tokens


def feature_bags(graph: Graph) -> Iterator[tuple[str, list[str]]]:
    """Every entity's bag (:func:`bag_tokens`), in QID order, from the graph's facts."""
    for qid, pairs in entity_facts(graph):
        yield qid, bag_tokens(qid, pairs)


def bag_digest(qid: str, toks: Sequence[str]) -> int:
    """One entity's bag as a 64-bit number (tokens sorted): what an update compares."""
    raw = hashlib.blake2b(f"{qid}\0{chr(31).join(sorted(toks))}".encode(), digest_size=8).digest()
    return int.from_bytes(raw, "little")


def digests_hash(table: QidTable, digests: np.ndarray) -> str:
    """Order-independent digest of the live rows' (id, :func:`bag_digest`) pairs: the ids in
    sorted order, then their digests in that order (two arrays, no per-entity Python)."""
    codes, rows = table.canonical()
    h = hashlib.sha256(str(codes.dtype).encode() if table.is_int else b"bytes")
    # bytes ids: joined, so the array's width (its longest id) does not change the hash
    h.update(np.ascontiguousarray(codes).tobytes() if table.is_int else b"\n".join(codes.tolist()))
    h.update(np.ascontiguousarray(np.asarray(digests, dtype=np.uint64)[rows]).tobytes())
    return h.hexdigest()


def bags_hash(bags: Iterable[tuple[str, Sequence[str]]]) -> str:
    """Order-independent digest of the bags (tokens sorted)."""
    pairs = [(q, bag_digest(q, t)) for q, t in bags]
    return digests_hash(QidTable.from_ids([q for q, _ in pairs]),
                        np.asarray([d for _, d in pairs], dtype=np.uint64))


def bags_to_matrix(bags: Iterable[tuple[str, Sequence[str]]]) -> tuple[list[str], sp.csr_matrix]:
    """Term-count matrix (entities × features) of the bags, rows in the order given."""
    import scipy.sparse as sp

    vocab: dict[str, int] = {}
    qids: list[str] = []
    indptr = [0]
    indices: list[int] = []
    for qid, toks in bags:
        qids.append(qid)
        for t in toks:
            indices.append(vocab.setdefault(t, len(vocab)))
        indptr.append(len(indices))
    data = np.ones(len(indices), dtype=np.float32)
    m = sp.csr_matrix(
        (data, np.asarray(indices, dtype=np.int64), np.asarray(indptr, dtype=np.int64)),
        shape=(len(qids), max(len(vocab), 1)),
    )
    m.sum_duplicates()  # repeated tokens → counts
    return qids, m


# --- vectors ------------------------------------------------------------------------------------


def embed(
    counts: sp.csr_matrix, settings: IndexSettings, stats: BuildStats | None = None
) -> np.ndarray:
    """TF-IDF → truncated SVD → L2 normalization; float32 rows of unit norm.

    When the vocabulary is not larger than ``dim`` the SVD would not reduce anything, so the
    dense TF-IDF rows are used as they are (then similarities are exactly TF-IDF cosines).
    """
    return fit(counts[:, shared_first(counts)], settings, stats)[0]


@dataclass
class Model:
    """The fitted part of a build: vocabulary, IDF and SVD components (None: no SVD, the dense
    TF-IDF rows are the vectors). Applied to any bag by :meth:`transform`, so entities outside
    the sample, and entities added later, get vectors without a refit."""

    vocab: dict[str, int]
    idf: np.ndarray
    #: (dim, k): the SVD's components over the first k vocabulary columns, the features of at
    #: least two fitted entities (:func:`fit`); the others weigh in a row's norm only
    components: np.ndarray | None
    sublinear_tf: bool = True

    def transform(self, bags: Sequence[Sequence[str]]) -> np.ndarray:
        """What sklearn's ``TfidfTransformer.transform`` then ``TruncatedSVD.transform`` give,
        L2-normalized; tokens outside the vocabulary are dropped (they carry no weight)."""
        import scipy.sparse as sp

        # one C-level pass over every token of the batch (map + dict.get), then numpy: a token
        # outside the vocabulary is -1 and dropped
        flat = np.fromiter(map(self.vocab.get, itertools.chain.from_iterable(bags),
                               itertools.repeat(-1)), dtype=np.int64)
        keep = flat >= 0
        ends = np.cumsum(np.fromiter(map(len, bags), dtype=np.int64, count=len(bags)))
        kept = np.zeros(flat.size + 1, dtype=np.int64)  # kept[i]: tokens kept among the first i
        np.cumsum(keep, out=kept[1:])
        indptr = np.zeros(len(bags) + 1, dtype=np.int64)
        indptr[1:] = kept[ends]
        indices = flat[keep]
        m = sp.csr_matrix(
            (np.ones(len(indices), dtype=np.float64), indices, indptr),
            shape=(len(bags), max(len(self.vocab), 1)),
        )
        m.sum_duplicates()
        return self.transform_counts(m)

    def transform_counts(self, counts: sp.csr_matrix) -> np.ndarray:
        """:meth:`transform` of bags given as term counts over the vocabulary's columns."""
        import scipy.sparse as sp

        m = counts.astype(np.float64)
        if self.sublinear_tf:
            np.log(m.data, m.data)
            m.data += 1
        m = m @ sp.diags(self.idf)
        norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
        m = sp.diags(1 / np.maximum(norms, 1e-12)) @ m
        if self.components is None:
            vecs = np.asarray(m.todense()).astype(np.float32)
        else:
            k = self.components.shape[1]
            vecs = np.asarray(m.tocsc()[:, :k] @ self.components.T).astype(np.float32)
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        return np.ascontiguousarray(vecs)

    def save(self, d: Path) -> None:
        write_private_text(d / VOCAB_FILE, json.dumps(sorted(self.vocab, key=self.vocab.__getitem__)))
        comp = self.components if self.components is not None else np.zeros((0, 0), np.float32)
        with open(d / MODEL_FILE, "wb") as fh:
            np.savez(fh, idf=self.idf, components=comp, sublinear=np.asarray(self.sublinear_tf))
        os.chmod(d / MODEL_FILE, 0o600)

    @classmethod
    def load(cls, d: Path) -> Model:
        words = json.loads((d / VOCAB_FILE).read_text())
        z = np.load(d / MODEL_FILE)
        comp = z["components"]
        return cls({w: i for i, w in enumerate(words)}, z["idf"],
                   comp if comp.size else None, bool(z["sublinear"]))


def shared_first(counts: sp.csr_matrix) -> np.ndarray:
    """The column order :func:`fit` needs: the features of at least two rows first (in their
    order), then those of one row only."""
    df = np.bincount(counts.indices, minlength=counts.shape[1])  # rows per feature (CSR, summed)
    return np.concatenate([np.flatnonzero(df >= 2), np.flatnonzero(df < 2)])


def fit(
    counts: sp.csr_matrix, settings: IndexSettings, stats: BuildStats | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """:func:`embed`'s vectors of the rows it was fitted on, with the IDF and SVD components
    (None without SVD) that :class:`Model` applies to other rows.

    With the SVD, ``counts``' columns must come in :func:`shared_first` order: the SVD is fitted
    on the features of at least two rows only, after TF-IDF normalized every row over all its
    features. A feature of one row adds nothing to any inner product between two rows, so the
    fitted rows' inner products are those of the TF-IDF rows (the paper's cosines) all the
    same, while the matrix the SVD works on shrinks (at 20,000 sampled entities of the 1M
    benchmark graph, 226k columns to 61k; the fit 6.0 s -> 1.4 s). Components cover those
    columns only."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfTransformer

    t0 = time.perf_counter()
    tt = TfidfTransformer(sublinear_tf=settings.sublinear_tf, norm="l2")
    tfidf = tt.fit_transform(counts)
    t1 = time.perf_counter()
    n, f = tfidf.shape
    components: np.ndarray | None = None
    if f <= settings.dim or n <= settings.dim:
        vecs = np.asarray(tfidf.todense(), dtype=np.float32)
    else:
        df = np.bincount(counts.indices, minlength=f)
        k = int((df >= 2).sum())
        if k and (df[:k] < 2).any():
            raise ValueError("fit: columns not in shared_first order")
        svd = TruncatedSVD(
            n_components=min(settings.dim, max(k - 1, 1)),
            algorithm="randomized",
            n_iter=settings.svd_iter,
            random_state=settings.seed,
        )
        vecs = svd.fit_transform(tfidf.tocsc()[:, :k]).astype(np.float32)
        components = np.asarray(svd.components_, dtype=np.float64)
    t2 = time.perf_counter()
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    vecs /= np.maximum(norms, 1e-12)
    if stats is not None:
        stats.seconds["tfidf"] = t1 - t0
        stats.seconds["svd"] = t2 - t1
        stats.n_features = f
        stats.nnz = int(counts.nnz)
        stats.dim = vecs.shape[1]
    return np.ascontiguousarray(vecs), np.asarray(tt.idf_, dtype=np.float64), components


def _add(index: Any, vecs: np.ndarray) -> None:
    """Add ``vecs`` (maybe a disk array) in slices, so only one slice is copied at a time, and
    only one slice of a disk array's pages stays resident (`drop_pages`)."""
    for i in range(0, vecs.shape[0], ADD_BATCH):
        index.add(np.ascontiguousarray(vecs[i : i + ADD_BATCH], dtype=np.float32))
        drop_pages(vecs, i, i + ADD_BATCH)


def drop_pages(vecs: np.ndarray, lo: int, hi: int) -> None:
    """Rows ``lo:hi`` of a disk array out of this process's resident memory.

    Why: the vectors file is mapped, and every page a build writes or reads stays in the
    process's RSS until the mapping goes: 4 bytes a dimension an entity (512 B at 128), as much
    as an IVF-Flat index and eight times an IVF-PQ one (docs/benchmarks.md). The pages are
    the file's (written back by ``flush``, kept in the page cache), so dropping them loses
    nothing; a later read maps them again. Only a ``np.memmap`` whose first row is the
    mapping's first byte has pages to drop (the vectors file's arrays are); else nothing."""
    mm = getattr(vecs, "_mmap", None)
    if mm is None or not hasattr(mmap, "MADV_DONTNEED") or vecs.ndim != 2 or not vecs.flags.c_contiguous:
        return
    if vecs.ctypes.data != np.frombuffer(mm, dtype=np.uint8, count=0).ctypes.data:
        return  # rows that start elsewhere in the mapping (a file offset, a later slice)
    row = vecs.shape[1] * vecs.itemsize
    page = mmap.PAGESIZE
    start = lo * row // page * page
    end = min(len(mm), -(-min(hi, vecs.shape[0]) * row // page) * page)
    if end > start:
        mm.madvise(mmap.MADV_DONTNEED, start, end - start)


def make_faiss_index(vecs: np.ndarray, settings: IndexSettings, *, direct_map: bool = True,
                     timings: dict[str, float] | None = None) -> Any:
    """Exact inner-product index for small N, seeded IVF-Flat above, IVF-PQ (compressed:
    ``pq_m`` bytes a vector) above ``compress_from``. FAISS ids are the rows of ``vecs``.
    ``direct_map``: an IVF index that can give its vectors back (an in-memory index has no
    other copy); a built index reads its disk vectors instead, and without the map FAISS can
    remove and add ids in place (an update). ``timings`` gets the k-means (``faiss_train``) and
    the filling (``faiss_add``) seconds of an IVF index apart: they grow differently with N
    (about N and N^1.5)."""
    import faiss

    n, d = vecs.shape
    index: Any
    if n <= settings.exact_threshold:
        index = faiss.IndexFlatIP(d)
        _add(index, vecs)
        return index
    nlist = settings.resolved_nlist(n)
    hnsw = nlist >= settings.hnsw_from
    quantizer: Any
    if hnsw:
        quantizer = faiss.IndexHNSWFlat(d, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        quantizer.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
        quantizer.hnsw.efSearch = HNSW_EF_TRAIN  # (FAISS's k-means assigns through the quantizer)
    else:
        quantizer = faiss.IndexFlatIP(d)
    pq = n > settings.compress_from and d % settings.pq_m == 0
    if pq:
        index = faiss.IndexIVFPQ(quantizer, d, nlist, settings.pq_m, 8, faiss.METRIC_INNER_PRODUCT)
    else:
        index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = settings.seed
    index.cp.niter = KMEANS_ITER
    if pq:  # the codebooks' k-means too (64 of them, 256 centroids each): most of an IVF-PQ build
        index.pq.cp.niter = KMEANS_ITER
    # k-means on a seeded sample of KMEANS_PER_LIST points a list, which bounds training time
    # (PQ's codebooks want at least 256·39 points).
    rng = np.random.default_rng(settings.seed)
    sample_n = min(n, max(nlist * KMEANS_PER_LIST, 10_000 if pq else 0))
    sample = vecs[np.sort(rng.choice(n, size=sample_n, replace=False))] if sample_n < n else vecs
    t0 = time.perf_counter()
    index.train(np.ascontiguousarray(sample, dtype=np.float32))
    drop_pages(vecs, 0, n)  # (the sample's rows were read from all over the file)
    if hnsw:
        quantizer.hnsw.efSearch = HNSW_EF_ADD
    t1 = time.perf_counter()
    _add(index, vecs)
    if timings is not None:
        timings["faiss_train"], timings["faiss_add"] = t1 - t0, time.perf_counter() - t1
    if direct_map:
        index.make_direct_map()
    index.nprobe = settings.nprobe
    if hnsw:
        quantizer.hnsw.efSearch = HNSW_EF_SEARCH
    return index


def exact_cuts(vecs: np.ndarray, rows: np.ndarray, k: int = CALIBRATION_K,
               live: np.ndarray | None = None) -> np.ndarray:
    """Each of ``rows``' k-th highest inner product with any other (live) row of ``vecs``, by
    exact search over ``vecs`` in blocks (a disk array is read once, ``ADD_BATCH`` rows at a
    time): the least similarity a right neighbour has. -inf where fewer than k others exist."""
    q = np.asarray(vecs[rows], dtype=np.float32)
    best = np.full((len(rows), k), -np.inf, dtype=np.float32)
    n = vecs.shape[0]
    for lo in range(0, n, ADD_BATCH):
        block = np.asarray(vecs[lo : lo + ADD_BATCH], dtype=np.float32)
        sims = q @ block.T
        mine = np.flatnonzero((rows >= lo) & (rows < lo + len(block)))
        sims[mine, rows[mine] - lo] = -np.inf  # not itself
        if live is not None:
            sims[:, ~live[lo : lo + len(block)]] = -np.inf
        above = sims > best[:, -1:]  # (each row of best is sorted, highest first)
        if int(above.sum()) > 4 * best.size:  # the first blocks: each query's k best of the block
            top = np.partition(sims, -k, axis=1)[:, -k:] if sims.shape[1] > k else sims
            best = -np.sort(-np.concatenate([best, top], axis=1), axis=1)[:, :k]
        else:  # then a few values a block beat the k-th: merged query by query
            qi, col = np.nonzero(above)  # (row-major: grouped by query)
            for grp, cols in zip(np.split(qi, np.flatnonzero(np.diff(qi)) + 1),
                                 np.split(col, np.flatnonzero(np.diff(qi)) + 1), strict=True):
                if grp.size:
                    i = int(grp[0])
                    best[i] = -np.sort(-np.concatenate([best[i], sims[i, cols]]))[:k]
        drop_pages(vecs, lo, lo + len(block))
    return best[:, -1]


def calibrate_nprobe(index: SemanticIndex, target: float, queries: int = CALIBRATION_QUERIES) -> None:
    """Set ``index``'s lists visited per query (``stats.nprobe``).

    From the settings' ``nprobe``, doubled (up to ``CALIBRATION_MAX_SHARE`` of the lists) until
    the Sem neighbours of ``queries`` seeded indexed entities reach recall@10 ``target`` against
    the exact search over the exact vectors (a neighbour at least as similar as the exact 10th
    counts: ties at the cut are as right), with 95 % confidence (the lower bound of the mean
    over the queries, ``CALIBRATION_Z``); or until a doubling gains less than ``CALIBRATION_MIN_GAIN``, when the
    last doubling is undone (it did not pay for its cost). Each count tried, its recall and the
    bound go to ``stats.recall_steps``. An exact index, or a target of 0, is left as it is.

    Why measured: the lists that hold a query's neighbours depend on the vectors, and so does
    what a fixed nprobe finds (32 lists: 0.84 on the synthetic benchmark graph, 0.9998 on the
    realistic dump's; docs/benchmarks.md, step 10)."""
    import faiss

    if target <= 0 or not isinstance(index.index, faiss.IndexIVF):
        return
    vecs = index.vecs
    if vecs is None:  # an in-memory index: its direct map gives the vectors back
        vecs = index.vectors(np.arange(index.qids.n_rows))
    live = index.qids.live_mask() if index.qids.n_rows > len(index.qids) else None
    pool = np.flatnonzero(live) if live is not None else np.arange(index.qids.n_rows)
    rng = np.random.default_rng([index.settings.seed, 44])
    rows = np.sort(rng.choice(pool, size=min(queries, len(pool)), replace=False))
    cuts = exact_cuts(vecs, rows, CALIBRATION_K, live)
    ask = [(index.qids[int(r)], float(c)) for r, c in zip(rows, cuts, strict=True) if np.isfinite(c)]
    nlist = int(index.index.nlist)
    nprobe = min(max(int(index.settings.nprobe), 1), nlist)
    most = max(nprobe, int(nlist * CALIBRATION_MAX_SHARE))
    steps = index.stats.recall_steps = []
    while True:
        index.stats.nprobe = nprobe
        each = np.array([sum(nb.similarity >= cut - 1e-5 for nb in index.neighbours(qid, CALIBRATION_K))
                         for qid, cut in ask], dtype=np.float64) / CALIBRATION_K
        recall = float(each.mean()) if len(each) else 1.0
        # what the recall of all queries is at least, at 95 % confidence (one-sided, normal)
        spread = float(each.std(ddof=1)) / float(np.sqrt(len(each))) if len(each) > 1 else 0.0
        low = recall - CALIBRATION_Z * spread
        steps.append((nprobe, round(recall, 4), round(low, 4)))
        if len(steps) > 1 and recall - steps[-2][1] < CALIBRATION_MIN_GAIN and low < target:
            nprobe = index.stats.nprobe = steps[-2][0]
            break
        if low >= target or nprobe >= most:
            break
        nprobe = min(most, 2 * nprobe)
    index.index.nprobe = nprobe


class IndexManifest(TypedDict):
    """What a saved index records of itself (``manifest.json``, written last by ``save``)."""

    format_version: int
    created_at: str
    n_entities: int
    n_rows: int
    dim: int
    index_kind: str
    graph_state: dict[str, object] | None  # asdict(GraphState)
    settings: dict[str, object]  # asdict(IndexSettings)
    versions: dict[str, str]
    build: dict[str, object]  # asdict(BuildStats)
    #: the fitted model's identity (:func:`model_digest`): an update keeps the model, so two
    #: indexes of the same graph and settings differ where their models were fitted apart
    model_digest: str | None


def _versions() -> dict[str, str]:
    import faiss
    import sklearn

    from kgprobe._version import __version__

    return {
        "kgprobe": __version__,
        "faiss": faiss.__version__,
        "scikit-learn": sklearn.__version__,
        "numpy": np.__version__,
    }


# --- the index ----------------------------------------------------------------------------------


class SemanticIndex:
    """Entity vectors in a FAISS inner-product index, addressed by QID."""

    def __init__(
        self,
        qids: Sequence[str] | QidTable,
        index: Any,
        settings: IndexSettings,
        state: GraphState | None = None,
        stats: BuildStats | None = None,
        vecs: np.ndarray | None = None,
    ) -> None:
        #: row → QID and back, as arrays (:mod:`kgprobe.probing.qidtable`); rows are FAISS ids
        self.qids = qids if isinstance(qids, QidTable) else QidTable.from_ids(qids)
        self.index = index
        self.settings = settings
        self.state = state
        self.stats = stats or BuildStats(n_entities=len(qids))
        #: the exact vectors (a disk array of a built index): queries and the re-ranking of a
        #: compressed index use them
        self.vecs = vecs
        #: the saved model's :func:`model_digest` (None before a save, or with no model on disk;
        #: an update, which keeps the model, sets the recorded one before its save)
        self.model_digest: str | None = None

    # construction ------------------------------------------------------------------------------

    @classmethod
    def from_matrix(
        cls,
        qids: list[str],
        counts: sp.csr_matrix,
        settings: IndexSettings | None = None,
        state: GraphState | None = None,
    ) -> SemanticIndex:
        """Build from a term-count matrix whose rows follow ``qids``."""
        settings = settings or IndexSettings()
        if len(qids) != counts.shape[0]:
            raise ConfigError(f"{len(qids)} ids for {counts.shape[0]} rows")
        table = QidTable.from_ids(qids)  # raises on duplicate ids
        stats = BuildStats(n_entities=len(qids))
        vecs = embed(counts, settings, stats)
        t0 = time.perf_counter()
        index = make_faiss_index(vecs, settings)
        stats.seconds["faiss"] = time.perf_counter() - t0
        stats.index_kind = type(index).__name__
        out = cls(table, index, settings, state, stats, vecs=None)
        calibrate_nprobe(out, settings.recall_target)
        return out

    @classmethod
    def from_bags(
        cls,
        bags: Iterable[tuple[str, Sequence[str]]],
        settings: IndexSettings | None = None,
        counts: dict[str, int] | None = None,
    ) -> SemanticIndex:
        """Build from ``(qid, tokens)`` bags; the state records their hash (and ``counts``)."""
        bag_list = list(bags)
        qids, m = bags_to_matrix(bag_list)
        state = GraphState(
            counts=dict(counts or {"entities": len(qids)}), bags_hash=bags_hash(bag_list)
        )
        return cls.from_matrix(qids, m, settings, state)

    @classmethod
    def from_graph(cls, graph: Graph, settings: IndexSettings | None = None) -> SemanticIndex:
        """Pull feature bags from the graph (one pass) and build."""
        counts = graph_counts(graph)
        return cls.from_bags(feature_bags(graph), settings, counts)

    # vectors and search ------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.qids)

    @property
    def nprobe(self) -> int:
        """The IVF lists a query visits: the build's calibrated count, else the settings'."""
        return int(self.stats.nprobe or self.settings.nprobe)

    def __contains__(self, qid: object) -> bool:
        return qid in self.qids

    def row(self, qid: str) -> int:
        """The index row (FAISS id) of ``qid``; -1 when it is not indexed."""
        return self.qids.row(qid)

    def vector(self, qid: str) -> np.ndarray:
        row = self.qids.row(qid)
        if row < 0:
            raise KeyError(qid)
        if self.vecs is not None:
            return np.asarray(self.vecs[row], dtype=np.float32)
        return np.asarray(self.index.reconstruct(row), dtype=np.float32)

    def vectors(self, rows: Sequence[int] | np.ndarray) -> np.ndarray:
        ids = np.asarray(rows, dtype=np.int64)
        if len(ids) == 0:
            return np.zeros((0, self.index.d), dtype=np.float32)
        if self.vecs is not None:
            return np.asarray(self.vecs[ids], dtype=np.float32)
        return np.asarray(self.index.reconstruct_batch(ids), dtype=np.float32)

    def rows(self, qids: Collection[str]) -> np.ndarray:
        """Sorted unique index rows of ``qids`` (unknown ids dropped)."""
        r = np.unique(self.qids.rows_of(qids if isinstance(qids, list) else list(qids)))
        return r[r >= 0]

    def search_vector(self, vec: np.ndarray, k: int) -> list[Neighbour]:
        """Plain k nearest neighbours of a vector (no filter)."""
        k = min(k, len(self.qids))
        if k <= 0:
            return []
        gone = self.qids.n_rows - len(self.qids)  # rows emptied by updates, still in a flat index
        sims, ids = self.index.search(np.asarray(vec, dtype=np.float32).reshape(1, -1), k + gone)
        if self.vecs is not None and _compressed(self.index):
            sims = _exact_sims(self.vecs, ids, np.asarray(vec, dtype=np.float32).ravel())
        live = self.qids.live_mask()
        return [
            Neighbour(self.qids[i], float(s))
            for s, i in zip(sims[0], ids[0], strict=True)
            if i >= 0 and live[i]
        ][:k]

    def neighbours(
        self,
        qid: str,
        n: int,
        *,
        allowed: Collection[str] | None = None,
        predicate: Callable[[list[str]], Collection[str]] | None = None,
        exclude_self: bool = True,
        max_checked: int | None = None,
        allowed_rows: np.ndarray | None = None,
    ) -> list[Neighbour]:
        """The ``n`` entities most similar to ``qid`` among those the caller allows.

        ``allowed`` is an explicit set (e.g. Ω(f) read from the graph): FAISS searches only its
        members (an ``IDSelectorBatch``, or a bitmap for large sets), exactly on the flat index; on the IVF index ``nprobe``
        is widened (×4, up to every list) whenever the probed lists hold fewer than ``k`` allowed
        entities, so a narrow filter is never starved. ``predicate`` takes a batch of candidate
        QIDs and returns the subset that qualifies (e.g. one Cypher round trip per batch):
        candidates are drawn in growing batches until ``n`` qualify or none are left. Both may be
        given. ``allowed_rows`` is ``allowed`` as index rows (:meth:`rows`), for a caller that
        reuses one large set: mapping QIDs to rows costs about 1-2 µs each at 1M entities
        (random access into a large dict), 100 ms for a 50k set. ``max_checked`` stops the search once that many candidates went through the
        filters (the caller then has a cheaper plan B). Ties are broken by index row, so the
        order is deterministic.
        """
        import faiss as _faiss

        faiss: Any = _faiss  # the stubs lack SearchParameters' keyword arguments
        row = self.qids.row(qid)
        if row < 0 or n <= 0:
            return []
        self_row = row if exclude_self else -1
        q = self.vector(qid).reshape(1, -1)
        sel = None
        pool = len(self.qids)
        n_rows = self.qids.n_rows
        ivf = isinstance(self.index, faiss.IndexIVF)
        scored_whole = predicate is None and max_checked is None and ivf
        if allowed is None and allowed_rows is None and n_rows > pool:
            scored_whole = False  # (the live rows are no caller's filter)
            allowed_rows = self.qids.live_rows()  # rows emptied by an update are never found
        if allowed is not None or allowed_rows is not None:
            if allowed_rows is not None:
                rows = np.unique(np.asarray(allowed_rows, dtype=np.int64))
                if allowed is not None:
                    rows = np.intersect1d(rows, self.rows(allowed))
            else:
                assert allowed is not None
                rows = self.rows(allowed)
            rows = rows[(rows >= 0) & (rows != self_row)]
            if rows.size == 0:
                return []
            if scored_whole and rows.size <= EXACT_FILTER_MAX:
                # every allowed entity scored on its vector: exact, where the lists a query
                # visits hold few of a small set's nearest (recall 0.70 at 1,000 allowed of 1M)
                sims = np.asarray(self.vectors(rows) @ q[0], dtype=np.float32)
                top = np.lexsort((rows, -sims))[:n]
                return [Neighbour(self.qids[int(rows[i])], float(sims[i])) for i in top]
            if rows.size > BITMAP_FROM:
                # a bitmap over all rows: O(1) membership and cheap to build for large sets
                bits = np.zeros(n_rows, dtype=bool)
                bits[rows] = True
                packed = np.packbits(bits, bitorder="little")  # must outlive the search
                sel = faiss.IDSelectorBitmap(n_rows, faiss.swig_ptr(packed))
            else:
                sel = faiss.IDSelectorBatch(rows)
            pool = int(rows.size)
        nlist = int(self.index.nlist) if ivf else 0
        nprobe = min(self.nprobe, nlist) if ivf else 0
        k = min(pool, (max(4 * n, 32) if predicate is not None else n) + (1 if sel is None else 0))
        vecs = self.vecs
        rerank = vecs is not None and _compressed(self.index)
        if rerank:  # compressed distances are approximate: fetch more, keep the best exact ones
            k = min(pool, max(k, RERANK_FACTOR * n + 1))
        found: dict[int, float] = {}
        checked: set[int] = set()
        while True:
            params: Any = None
            if ivf:
                params = (
                    faiss.SearchParametersIVF(sel=sel, nprobe=nprobe)
                    if sel
                    else faiss.SearchParametersIVF(nprobe=nprobe)
                )
            elif sel is not None:
                params = faiss.SearchParameters(sel=sel)
            sims, ids = self.index.search(q, k, params=params)
            if rerank and vecs is not None:  # re-rank on the exact vectors
                sims = _exact_sims(vecs, ids, q[0])
            got = int((ids[0] >= 0).sum())
            fresh = [
                (int(i), float(d))
                for d, i in zip(sims[0], ids[0], strict=True)
                if i >= 0 and i != self_row and int(i) not in checked
            ]
            checked.update(i for i, _ in fresh)
            if predicate is not None and fresh:
                ok = set(predicate([self.qids[i] for i, _ in fresh]))
                fresh = [(i, d) for i, d in fresh if self.qids[i] in ok]
            found.update(fresh)
            if len(found) >= n or (max_checked is not None and len(checked) >= max_checked):
                break
            exhaustive = not ivf or nprobe >= nlist
            if got < k and not exhaustive:
                nprobe = min(nlist, nprobe * 4)  # the probed lists ran out of allowed entities
            elif k >= pool:
                if exhaustive:
                    break
                nprobe = min(nlist, nprobe * 4)
            else:
                k = min(pool, k * 4)
        best = sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
        return [Neighbour(self.qids[i], d) for i, d in best]

    # persistence -------------------------------------------------------------------------------

    def manifest(self) -> IndexManifest:
        return {
            "format_version": FORMAT_VERSION,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "n_entities": len(self.qids),
            "n_rows": self.qids.n_rows,
            "dim": int(self.index.d),
            "index_kind": type(self.index).__name__,
            "graph_state": asdict(self.state) if self.state else None,
            "settings": asdict(self.settings),
            "versions": _versions(),
            "build": asdict(self.stats),
            "model_digest": self.model_digest,
        }

    def save(self, directory: str | Path) -> Path:
        """Write index, ids and manifest; the manifest is written last (a torn save is stale)."""
        import faiss

        d = Path(directory)
        private_dir(d)  # the index names the graph's entities: owner-only like KGPROBE_HOME
        (d / MANIFEST).unlink(missing_ok=True)
        if self.vecs is None:  # an in-memory build: no disk vectors, so nothing to update from
            for name in (VECTORS_FILE, HASHES_FILE, MODEL_FILE, VOCAB_FILE):
                (d / name).unlink(missing_ok=True)
        faiss.write_index(self.index, str(d / INDEX_FILE))
        os.chmod(d / INDEX_FILE, 0o600)
        self.qids.save(_owner_only(d / QIDS_FILE))
        if self.model_digest is None:
            self.model_digest = model_digest(d)
        write_private_text(d / MANIFEST, json.dumps(self.manifest(), indent=2, sort_keys=True))
        return d

    @classmethod
    def load(
        cls,
        directory: str | Path,
        *,
        expect_state: GraphState | None = None,
        expect_settings: IndexSettings | None = None,
    ) -> SemanticIndex:
        """Load; raise :class:`StaleIndexError` if it does not match what is expected."""
        import faiss

        d = Path(directory)
        manifest = read_manifest(d)
        problems = staleness(manifest, expect_state, expect_settings)
        if problems:
            raise StaleIndexError(f"semantic index in {d} is stale: " + "; ".join(problems))
        index = faiss.read_index(str(d / INDEX_FILE))
        qids = QidTable.load(d / QIDS_FILE)
        gs = manifest.get("graph_state")
        state = GraphState(counts=gs["counts"], bags_hash=gs["bags_hash"],
                           journal_rev=gs.get("journal_rev"),
                           journal_writes=gs.get("journal_writes"),
                           journal_epoch=gs.get("journal_epoch")) if gs else None
        stats = BuildStats(**manifest.get("build", {}))
        stats.recall_steps = [(int(a), float(b), float(c)) for a, b, c in stats.recall_steps]
        settings = settings_of(manifest.get("settings"))
        if settings is None:
            raise StaleIndexError(f"semantic index in {d}: settings this version does not read")
        out = cls(qids, index, settings, state, stats, _open_vectors(d, qids.n_rows, int(manifest["dim"])))
        digest = manifest.get("model_digest")
        out.model_digest = str(digest) if digest else model_digest(d)  # an older index: computed
        if isinstance(index, faiss.IndexIVF):
            index.nprobe = out.nprobe
        return out


def model_digest(directory: str | Path) -> str | None:
    """What identifies the fitted model (vocabulary, IDF, SVD components) of the index in
    ``directory``: a sha256 of their content, not of the files (an ``.npz`` records when it was
    written). None where the index keeps no model (an in-memory build)."""
    d = Path(directory)
    if not ((d / VOCAB_FILE).exists() and (d / MODEL_FILE).exists()):
        return None
    h = hashlib.sha256((d / VOCAB_FILE).read_bytes())
    with np.load(d / MODEL_FILE) as z:
        for name in sorted(z.files):
            h.update(name.encode())
            h.update(np.ascontiguousarray(z[name]).tobytes())
    return h.hexdigest()[:16]


def read_manifest(directory: str | Path) -> JSONObject:
    """The manifest as stored (by any kgprobe version: :func:`staleness` checks it)."""
    p = Path(directory) / MANIFEST
    if not p.exists():
        raise StaleIndexError(f"no semantic index in {directory} (missing {MANIFEST})")
    try:
        data: JSONObject = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise StaleIndexError(f"unreadable manifest {p}: {exc}") from exc
    return data


def recorded_settings(directory: str | Path) -> IndexSettings | None:
    """The settings the index in ``directory`` was built with: None where there is no index or
    its manifest holds settings this version does not read (a build then takes the defaults).
    What :func:`ensure_index` keeps when it is given none, so an index built with a sample or a
    dimension of the user's choosing is updated as the graph changes, never rebuilt with the
    defaults behind their back."""
    try:
        return settings_of(read_manifest(directory).get("settings"))
    except StaleIndexError:
        return None


def settings_of(recorded: object) -> IndexSettings | None:
    """A manifest's settings as :class:`IndexSettings`; None if this version does not read
    them. A manifest from before ``sample_min`` recorded a fixed sample of ``sample`` (the fit
    did not double then), which is what ``sample_min = sample`` says now; one from before
    ``recall_target`` visited ``nprobe`` lists, which ``recall_target = 0`` says: such an index is
    kept as it was built, not rebuilt because a setting was added."""
    if not isinstance(recorded, dict):
        return None
    if "sample_min" not in recorded and "sample" in recorded:
        recorded = {**recorded, "sample_min": recorded["sample"]}
    if "recall_target" not in recorded:  # built before calibration: its nprobe as it was set
        recorded = {**recorded, "recall_target": 0.0}
    try:
        return IndexSettings(**recorded)
    except TypeError:
        return None


def kept_settings(directory: str | Path) -> IndexSettings:
    """What :func:`ensure_index` given no settings works with in ``directory``: the index's own
    (:func:`recorded_settings`), the defaults where there is none."""
    return recorded_settings(directory) or IndexSettings()


def staleness(
    manifest: JSONObject,
    expect_state: GraphState | None = None,
    expect_settings: IndexSettings | None = None,
) -> list[str]:
    """Why the index described by ``manifest`` does not fit; empty when it fits.

    The bag hash is compared only when both sides have one, so a cheap counts-only check is
    possible; counts are compared key by key.
    """
    problems: list[str] = []
    if manifest.get("format_version") != FORMAT_VERSION:
        problems.append(f"format {manifest.get('format_version')} != {FORMAT_VERSION}")
    if expect_settings is not None and settings_of(manifest.get("settings")) != expect_settings:
        problems.append(f"settings {manifest.get('settings')} != {asdict(expect_settings)}")
    if expect_state is not None:
        got = manifest.get("graph_state") or {}
        for key, val in sorted(expect_state.counts.items()):
            have = (got.get("counts") or {}).get(key)
            if have != val:
                problems.append(f"{key}: index built with {have}, graph has {val}")
        if (
            expect_state.bags_hash
            and got.get("bags_hash")
            and got["bags_hash"] != expect_state.bags_hash
        ):
            problems.append("feature bags changed since the index was built (hash differs)")
        have_writes = got.get("journal_writes")
        if expect_state.journal_epoch is not None and got.get("journal_epoch") is not None \
                and got["journal_epoch"] != expect_state.journal_epoch:
            problems.append("the graph's change journal is not the one the index recorded "
                            "(the graph was wiped or loaded anew)")
        elif expect_state.journal_writes is not None and have_writes is not None \
                and have_writes != expect_state.journal_writes:
            problems.append(f"kgprobe wrote to the graph since the index was built (journaled "
                            f"writes {have_writes} -> {expect_state.journal_writes})")
    return problems


def _exact_sims(vecs: np.ndarray, ids: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The exact inner products of ``q`` with the rows ``ids[0]`` of ``vecs`` (-1 where FAISS
    found none), shaped as FAISS's distances: one matrix product, the rows read in file order
    (``vecs`` is a disk array)."""
    row = ids[0]
    out = np.full((1, len(row)), -1.0, dtype=np.float32)
    ok = np.flatnonzero(row >= 0)
    if ok.size:
        order = np.argsort(row[ok], kind="stable")
        out[0, ok[order]] = np.asarray(vecs[row[ok][order]], dtype=np.float32) @ q
    return out


def _compressed(index: Any) -> bool:
    import faiss

    return isinstance(index, faiss.IndexIVFPQ)


@runtime_checkable
class FactSource(Protocol):
    """Where a build reads the entities and their (relation, object) pairs: the graph
    (:class:`GraphFacts`), or another store of them (the build benchmark's synthetic graph,
    which needs no server). A source whose ``in_workers`` is true is sent to the worker
    processes, which then read their own batches (the graph's connection is not shared, so a
    graph's facts are read in the building process and handed to the workers)."""

    in_workers: bool

    def counts(self) -> dict[str, int]:
        """What ties the index to the source's state (:func:`graph_counts` for a graph)."""
        ...

    def ids(self, settings: IndexSettings) -> tuple[QidTable, QidTable]:
        """The entities to index and every entity (:func:`index_ids`)."""
        ...

    def facts(self, qids: Sequence[str], batch: int) -> Iterator[tuple[str, list[tuple[str, str]]]]:
        """Each of ``qids``' sorted (relation, object) pairs, in the order given."""
        ...


@dataclass
class GraphFacts:
    """The graph as a :class:`FactSource`. With ``in_workers`` the build's worker processes
    read their own batches: a worker forked from the building process opens its own
    connection (`Graph.reopened`) at its first read. The reads' decoding then runs in the
    workers, beside their embedding, instead of in the building process's reader threads under
    one GIL (docs/benchmarks.md, "Semantic index at scale, step 9")."""

    graph: Graph
    in_workers: bool = False
    _pid: int = field(default_factory=os.getpid, repr=False)
    _own: Graph | None = field(default=None, repr=False)

    def _graph(self) -> Graph:
        if os.getpid() == self._pid:
            return self.graph
        if self._own is None:  # a forked worker: the parent's driver is not ours to use
            self._own = self.graph.reopened()
        return self._own

    def counts(self) -> dict[str, int]:
        return graph_counts(self.graph)

    def ids(self, settings: IndexSettings) -> tuple[QidTable, QidTable]:
        return index_ids(self.graph, settings)

    def facts(self, qids: Sequence[str], batch: int) -> Iterator[tuple[str, list[tuple[str, str]]]]:
        return entity_facts(self._graph(), qids, batch)


#: whether worker processes are forked (Linux): a forked worker inherits the graph's connection
#: settings in memory and opens its own; a spawned one would need them pickled, which a driver
#: and its credentials are not, so there the building process reads for its workers
FORKED_WORKERS = "fork" in multiprocessing.get_all_start_methods()


def _source(graph: Graph | FactSource) -> FactSource:
    return graph if isinstance(graph, FactSource) else GraphFacts(graph, in_workers=FORKED_WORKERS)


def index_ids(graph: Graph, settings: IndexSettings) -> tuple[QidTable, QidTable]:
    """The entities the index holds (QID order) and every entity of the graph (the fit's
    sample is drawn from these), as id arrays.

    With ``candidates_only`` the first are the entities that can be in some Ω(f) of a relation
    with templates (:func:`~kgprobe.graph.distractors.candidate_ids`): Sem only ever returns
    members of Ω(f), and every object it is asked about is one; without templates, every
    entity."""
    every = QidTable.from_unordered(all_entity_ids(graph, ordered=False))
    cands = candidate_ids(graph, ordered=False) if settings.candidates_only else None
    return (every if cands is None else QidTable.from_unordered(cands)), every


def bag_digests(graph: Graph, qids: Sequence[str]) -> Iterator[tuple[str, int, list[str]]]:
    """(qid, :func:`bag_digest`, bag) of ``qids``, streamed from the graph batch by batch."""
    for qid, pairs in entity_facts(graph, qids, BUILD_BATCH):
        toks = bag_tokens(qid, pairs)
        yield qid, bag_digest(qid, toks), toks


def _table_bags(graph: Graph, table: QidTable, start: int = 0) -> Iterator[tuple[str, int, list[str]]]:
    """:func:`bag_digests` of the table's rows from ``start`` on: only one batch's ids are
    strings at a time."""
    for i in range(start, table.n_rows, BUILD_BATCH):
        yield from bag_digests(graph, table.slice_ids(i, min(i + BUILD_BATCH, table.n_rows)))


@dataclass
class Scan:
    """One pass over the indexed entities' facts: what a deep staleness check and an update's
    diff both need (the bags themselves are not kept)."""

    counts: dict[str, int]
    ids: QidTable
    digests: np.ndarray
    n_graph: int

    def state(self) -> GraphState:
        return GraphState(counts=self.counts, bags_hash=digests_hash(self.ids, self.digests))


def scan_graph(graph: Graph, settings: IndexSettings) -> Scan:
    """The graph's counts, the entities to index and each one's bag digest."""
    counts = graph_counts(graph)
    ids, every = index_ids(graph, settings)
    digests = np.zeros(ids.n_rows, dtype=np.uint64)
    for i, (_, dg, _) in enumerate(_table_bags(graph, ids)):
        digests[i] = dg
    return Scan(counts, ids, digests, every.n_rows)


def current_state(graph: Graph, *, deep: bool = True,
                  settings: IndexSettings | None = None) -> GraphState:
    """The graph's fingerprint: counts always; when ``deep`` (one pass over the indexed
    entities' facts) the hash of their bags."""
    if not deep:
        return GraphState(counts=graph_counts(graph))
    return scan_graph(graph, settings or IndexSettings()).state()


_POOL: tuple[Model | None, FactSource | None] | None = None


def _init_worker(model: Model | None, source: FactSource | None) -> None:
    """A worker's model and source, and the building process's rare collections (a spawned
    worker does not inherit them)."""
    global _POOL
    _POOL = (model, source)
    collect_rarely_here()


def _embed_items(model: Model | None, items: Sequence[tuple[str, list[tuple[str, str]]]]
                 ) -> tuple[list[str], np.ndarray, np.ndarray | None]:
    """One batch of (qid, pairs): its qids, bag digests and (with a model) vectors. All of an
    entity's per-entity Python (tokens, digest, vocabulary lookups) happens here, so it runs in
    the workers when there are some."""
    qs: list[str] = []
    ds = np.empty(len(items), dtype=np.uint64)
    bags: list[list[str]] = []
    for i, (q, pairs) in enumerate(items):
        toks = bag_tokens(q, pairs)
        ds[i] = bag_digest(q, toks)
        qs.append(q)
        bags.append(toks)
    return qs, ds, (model.transform(bags) if model is not None else None)


#: a worker's task: the batch's ids (the worker reads their facts from its own source) or the
#: batch's facts read by the building process
_Task = tuple[bool, list[Any]]


def _pool_task(task: _Task) -> tuple[list[str], np.ndarray, np.ndarray | None]:
    assert _POOL is not None
    model, source = _POOL
    by_id, part = task
    if by_id:
        assert source is not None
        part = list(source.facts(part, len(part)))
    return _embed_items(model, part)


def _embed_batches(tasks: Iterable[_Task], model: Model | None, source: FactSource,
                   workers: int) -> Iterator[tuple[list[str], np.ndarray, np.ndarray | None]]:
    """(qids, digests, vectors or None) per task, in order; ``workers`` > 1 runs the tasks in
    that many processes, at most ``2·workers`` of them in flight."""
    if workers <= 1:
        for by_id, part in tasks:
            yield _embed_items(model, list(source.facts(part, len(part))) if by_id else part)
        return
    ctx = multiprocessing.get_context("fork" if FORKED_WORKERS else "spawn")
    shared = source if source.in_workers else None
    with ctx.Pool(workers, initializer=_init_worker, initargs=(model, shared)) as pool:
        pending: deque[Any] = deque()
        for task in tasks:
            pending.append(pool.apply_async(_pool_task, (task,)))
            if len(pending) >= 2 * workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


#: batches of facts a build's reader thread holds ahead of the embedding. The reader starts
#: before the fit, so the fit's own work (the matrix, the SVD) overlaps the graph's reads; this
#: bounds what it holds meanwhile (5,000 entities a batch: about 10 MB each on the benchmark
#: graph), whatever the graph's size.
READ_AHEAD = 8
#: threads reading those batches at once. On 2 cores 2 readers were no faster than 1 (1M graph:
#: 9.2-9.7 s against 9.0-9.2 s; the server and the client fill both cores); a machine with
#: cores to spare may gain (`bench_semantic_build.py --readers N`, not measured there yet)
READERS = 1


class _ReadAhead:
    """The tasks of ``parts`` (``read`` of each), read in threads started at once, up to
    ``READ_AHEAD`` in advance and handed over in order: the graph's reads (the server's work,
    and the driver waiting on its socket without the GIL) overlap the fit and then the tokens,
    digests and vectors of the batch before; ``READERS`` > 1 reads that many batches at once (a
    server with cores to spare answers them side by side). An error in a read is raised to the
    consumer; :meth:`close` (a ``with`` block's end) stops the reading."""

    def __init__(self, parts: Iterator[list[str]], read: Callable[[list[str]], _Task]) -> None:
        import queue
        import threading

        self._q: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=READ_AHEAD)
        self._stop = threading.Event()
        self._parts, self._read, self._readers = parts, read, max(1, READERS)
        self._thread = threading.Thread(target=self._run, name="kgprobe-index-reader", daemon=True)
        self._thread.start()

    def _put(self, item: tuple[bool, Any]) -> bool:
        import queue

        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            with ThreadPoolExecutor(self._readers, thread_name_prefix="kgprobe-index-read") as pool:
                for part in self._parts:
                    if not self._put((True, pool.submit(self._read, part))):
                        return
            self._put((False, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            self._put((False, exc))

    def __iter__(self) -> Iterator[_Task]:
        while True:
            more, item = self._q.get()
            if not more:
                if item is not None:
                    raise item
                return
            yield item.result()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> _ReadAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _batched(it: Iterable[tuple[str, int, list[str]]], size: int
             ) -> Iterator[tuple[list[str], list[int], list[list[str]]]]:
    qs: list[str] = []
    ds: list[int] = []
    bs: list[list[str]] = []
    for q, d, b in it:
        qs.append(q)
        ds.append(d)
        bs.append(b)
        if len(qs) >= size:
            yield qs, ds, bs
            qs, ds, bs = [], [], []
    if qs:
        yield qs, ds, bs


def _sample_order(every: QidTable, settings: IndexSettings) -> np.ndarray:
    """Rows of ``every`` the fit may read, in the order it reads them: all of them when there
    are no more than ``settings.sample``; a fixed sample (``sample`` ≤ ``sample_min``) sorted;
    else a seeded random order whose every prefix is a uniform sample (:func:`_read_sample`)."""
    n = every.n_rows
    if n <= min(settings.sample, settings.sample_min):
        return np.arange(n)
    rng = np.random.default_rng(settings.seed)
    if settings.sample <= settings.sample_min:
        return np.sort(rng.choice(n, size=settings.sample, replace=False))
    return np.asarray(rng.choice(n, size=min(settings.sample, n), replace=False))


def half_coverage(counts: sp.csr_matrix, half: np.ndarray, sublinear_tf: bool = True) -> float:
    """The share of the pairwise TF-IDF cosines among ``counts``' rows that comes from the
    features at least two of the ``half`` rows (a boolean mask) have: the features a fit on
    those rows keeps (:func:`fit`), weighed by what they add to the rows' similarities. Feature
    f adds (Σᵢ xᵢf)² − Σᵢ xᵢf² to the sum of all pairs' cosines (x: the L2-normalized TF-IDF
    rows). Near 1, a sample twice the half's size knows hardly more of what makes entities
    similar than the half does."""
    from sklearn.feature_extraction.text import TfidfTransformer

    x = TfidfTransformer(sublinear_tf=sublinear_tf, norm="l2").fit_transform(counts).tocsc()
    mass = np.asarray(x.sum(axis=0)).ravel() ** 2 - np.asarray(x.multiply(x).sum(axis=0)).ravel()
    total = float(mass.sum())
    if total <= 0:
        return 1.0
    kept = np.bincount(counts[np.flatnonzero(half)].indices, minlength=counts.shape[1]) >= 2
    return float(mass[kept].sum()) / total


def _first_step(order: np.ndarray, settings: IndexSettings) -> int:
    """How many of :func:`_sample_order`'s entities the fit reads before it may double."""
    return len(order) if settings.sample <= settings.sample_min else min(settings.sample_min, len(order))


def _read_sample(src: FactSource, every: QidTable, order: np.ndarray, settings: IndexSettings,
                 stats: BuildStats, taken: set[str], progress: bool = False
                 ) -> tuple[list[tuple[str, list[str]]], sp.csr_matrix]:
    """The bags the model is fitted on, in ``every``'s row order, and their term counts: the
    first :func:`_first_step` entities of ``order`` (:func:`_sample_order`), then twice as
    many, and so on up to ``settings.sample``, while :func:`half_coverage` of the bags read so
    far (their half: the sample before the last doubling) is below ``sample_coverage``. A graph
    whose similarities come from features many entities share stops early; one of sparse, rare
    features reads more. Each step's ids are added to ``taken`` before they are read; each
    step shows its own progress (``progress``), saying why the sample doubled."""
    size = _first_step(order, settings)
    bags: list[tuple[str, list[str]]] = []
    rows: list[np.ndarray] = []

    def read(lo: int, hi: int, why: str) -> None:
        rows.append(np.sort(order[lo:hi]))  # row order within a step: the reads' locality
        ids = [every[int(i)] for i in rows[-1]]
        taken.update(ids)
        with Progress(f"semantic index: sample{why}", total=len(ids), unit="entities",
                      enabled=progress) as bar:
            for i in range(0, len(ids), BUILD_BATCH):
                part = ids[i : i + BUILD_BATCH]
                bags.extend((q, bag_tokens(q, pairs)) for q, pairs in src.facts(part, BUILD_BATCH))
                bar.advance(len(part))

    read(0, size, "")
    # the first step's half: the first size // 2 of the seeded order (a uniform sample, as every
    # prefix is), not of its rows read in QID order; later, the steps before the last
    half = np.isin(rows[0], order[: size // 2])
    counts: sp.csr_matrix | None = None
    while size < len(order):
        counts = bags_to_matrix(bags)[1]
        cover = half_coverage(counts, half, settings.sublinear_tf)
        stats.sample_steps.append((size, round(cover, 6)))
        if cover >= settings.sample_coverage:
            break
        grown = min(2 * size, len(order))
        # short enough for the bar on a 100-column terminal; the step's size is the bar's total
        read(size, grown, f" x2 ({cover:.3f} < {settings.sample_coverage})")
        half, size = np.arange(grown) < size, grown
    if len(rows) > 1:  # the fit sees the rows in ``every``'s order, however many steps
        bags = [bags[i] for i in np.argsort(np.concatenate(rows), kind="stable").tolist()]
        counts = None
    return bags, bags_to_matrix(bags)[1] if counts is None else counts


@dataclass
class _Sampled:
    """The fitted sample, kept for the embedding so its bags are not read twice: each sampled
    entity's row, its term counts over the model's columns and its bag digest."""

    row: dict[str, int]
    counts: sp.csr_matrix
    digests: np.ndarray


def _fit_sample(bags: list[tuple[str, list[str]]], counts: sp.csr_matrix, whole: bool,
                settings: IndexSettings, stats: BuildStats) -> tuple[Model, np.ndarray | None, _Sampled]:
    """The model fitted on ``bags`` and their ``counts`` (:func:`_read_sample`); with the whole
    graph, its vectors too (sklearn's ``fit_transform``, rows of the sample); and the sample
    (:class:`_Sampled`)."""
    qids = [q for q, _ in bags]
    order = shared_first(counts)
    counts = counts[:, order].tocsr()  # the model's column order
    vecs, idf, comp = fit(counts, settings, stats)
    vocab: dict[str, int] = {}
    for _, toks in bags:  # bags_to_matrix's column order: first occurrence
        for t in toks:
            vocab.setdefault(t, len(vocab))
    words = list(vocab)
    vocab = {words[j]: i for i, j in enumerate(order.tolist())}
    stats.n_sample = len(qids)
    model = Model(vocab, idf, comp, settings.sublinear_tf)
    digests = np.fromiter((bag_digest(q, toks) for q, toks in bags), dtype=np.uint64, count=len(bags))
    # with the whole graph read, its vectors and digests are all the build needs: no read again
    return model, vecs if whole else None, _Sampled({q: i for i, q in enumerate(qids)}, counts, digests)


def build_index(
    graph: Graph | FactSource,
    directory: str | Path,
    settings: IndexSettings | None = None,
    *,
    workers: int = 1,
    progress: bool = False,
    model: Model | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> SemanticIndex:
    """Build the index in ``directory`` out of core: fit on a sample, then read, embed and write
    the indexed entities batch by batch to a disk array, checkpointed after every batch — a
    killed build called again with the same settings on the same graph resumes where it
    stopped. ``model``: apply this fitted model instead of fitting one (an update's reference
    build). ``on_batch(rows done)`` is called after each checkpoint. ``graph``: the graph, or
    any :class:`FactSource`; ``workers`` > 1 builds the bags and vectors in that many processes
    (and reads the facts there too when the source allows it)."""
    settings = settings or IndexSettings()
    src = _source(graph)
    d = Path(directory)
    private_dir(d)
    work = d / WORK_DIR
    stats = BuildStats()
    t0 = time.perf_counter()
    # the journal first: a write committed after this point is journaled at ``mark.rev`` or later
    mark = journal.begin(src.graph) if isinstance(src, GraphFacts) else None
    # the server counts and lists while scikit-learn is imported (about a second of Python that
    # the fit would otherwise wait for), and the counts run beside the ids' reads
    with ThreadPoolExecutor(2, thread_name_prefix="kgprobe-index") as pool:
        if model is None:
            pool.submit(importlib.import_module, "sklearn.decomposition")
        counted = pool.submit(src.counts)
        ids, every = src.ids(settings)
        counts = counted.result()
    if not every.n_rows and model is None:
        raise InputError("nothing to index: the graph holds no entities (load facts first: "
                         "kgprobe ingest)")
    n = ids.n_rows
    stats.n_graph, stats.n_entities = every.n_rows, n
    plan = {"settings": asdict(settings), "counts": counts, "format": FORMAT_VERSION,
            "ids": hashlib.sha256(ids.codes.tobytes()).hexdigest() + str(ids.codes.dtype),
            "given_model": model is not None}
    done = 0
    whole: np.ndarray | None = None
    resume = (work / "plan.json").exists() and (work / "done.json").exists() \
        and json.loads((work / "plan.json").read_text()) == plan
    if resume:
        done = int(json.loads((work / "done.json").read_text())["rows"])
    by_id, start = workers > 1 and src.in_workers, done
    fitting = not resume and model is None
    order = _sample_order(every, settings) if fitting else np.zeros(0, dtype=np.int64)
    first = _first_step(order, settings)
    # the fit reads these (more if its sample doubles: _read_sample adds them); the embedding
    # takes them from it
    skip = {every[int(i)] for i in order[:first]}

    def parts() -> Iterator[list[str]]:
        for i in range(start, n, BUILD_BATCH):
            yield [q for q in ids.slice_ids(i, min(i + BUILD_BATCH, n)) if q not in skip]

    def read(part: list[str]) -> _Task:
        return (True, part) if by_id else (False, list(src.facts(part, BUILD_BATCH)))

    sampled: _Sampled | None = None
    with contextlib.ExitStack() as stack:
        # every entity's bag and vector row is Python objects made in bulk: the cyclic
        # collector runs rarely meanwhile (kgprobe.runtime; docs/benchmarks.md)
        stack.enter_context(rare_collections())
        # a fit on the whole graph reads every bag itself; otherwise the embedding's reads start
        # now, beside the sample's reads and the fit (an entity the sample takes after it
        # doubles may then be read twice: merged() keeps the fit's)
        fits_whole = fitting and first == every.n_rows
        reader = None if fits_whole else stack.enter_context(_ReadAhead(parts(), read))
        if resume:
            model = Model.load(work)
            stats.resumed_from = done
            # the rows written before the kill were read after the first attempt's mark: writes
            # since then must count as changes to this index, so it keeps that mark
            mark = _load_mark(work) if mark is not None else None
        else:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
            private_dir(work)
            if model is None:
                bags, sample_counts = _read_sample(src, every, order, settings, stats, skip,
                                                   progress)
                if len(bags) == every.n_rows and reader is not None:  # doubled up to every entity
                    fits_whole = True
                    reader.close()
                    reader = None
                model, whole, sampled = _fit_sample(bags, sample_counts, fits_whole, settings, stats)
                write_private_text(work / SAMPLE_FILE, json.dumps([q for q, _ in bags]))
                del bags, sample_counts
            model.save(work)
            if mark is not None:
                write_private_text(work / JOURNAL_FILE, json.dumps(asdict(mark)))
            write_private_text(work / "plan.json", json.dumps(plan))
        del every
        return _embed_all(d, work, ids, model, whole, sampled, reader, src, settings, counts,
                          stats, mark, done=done, workers=workers, progress=progress,
                          on_batch=on_batch, t0=t0)
    raise AssertionError("unreachable")  # pragma: no cover - the with block returns


def _embed_all(d: Path, work: Path, ids: QidTable, model: Model,
               whole: np.ndarray | None, sampled: _Sampled | None,
               reader: _ReadAhead | None, src: FactSource, settings: IndexSettings,
               counts: dict[str, int], stats: BuildStats, mark: journal.Mark | None, *,
               done: int, workers: int, progress: bool, on_batch: Callable[[int], None] | None,
               t0: float) -> SemanticIndex:
    """:func:`build_index` after the fit: every indexed entity's vector and digest, batch by
    batch from ``reader`` (or ``whole``, the whole-graph fit's), into the work directory, each
    batch checkpointed; then FAISS (:func:`_finish`). ``reader`` leaves out the ``sampled``
    entities: their counts and digests come from the fit."""
    n = ids.n_rows
    stats.seconds["fit"] = time.perf_counter() - t0
    dim = model.components.shape[0] if model.components is not None else len(model.vocab)
    if whole is not None:
        dim = whole.shape[1]
    vecs = np.memmap(_owner_only(work / VECTORS_FILE), dtype=np.float32, mode="r+" if done else "w+",
                     shape=(max(n, 1), dim))
    hashes_path = _owner_only(work / "hashes.u64")
    with open(hashes_path, "r+b") as fh:  # rows past the last checkpoint are written again
        fh.truncate(done * 8)
    t1 = time.perf_counter()
    label = f"building the semantic index of {n:,} entities in {d}"
    with Progress(label, total=n, unit="entities", enabled=progress) as bar, \
            open(hashes_path, "ab") as hfh:
        bar.advance(done)
        start = done

        def fitted() -> Iterator[tuple[list[str], np.ndarray, np.ndarray | None]]:
            assert whole is not None and sampled is not None
            for i in range(start, n, BUILD_BATCH):
                part = ids.slice_ids(i, min(i + BUILD_BATCH, n))
                rows = [sampled.row[q] for q in part]
                yield part, sampled.digests[rows], whole[rows]

        def merged() -> Iterator[tuple[list[str], np.ndarray, np.ndarray | None]]:
            """Each batch's read entities, embedded, with its sampled ones put back in place."""
            assert reader is not None and model is not None
            got = _embed_batches(iter(reader), model, src, workers)
            for i, (qs, dg, out) in zip(range(start, n, BUILD_BATCH), got, strict=True):
                if sampled is None:
                    yield qs, dg, out
                    continue
                part = ids.slice_ids(i, min(i + BUILD_BATCH, n))
                at = np.fromiter((sampled.row.get(q, -1) for q in part), dtype=np.int64, count=len(part))
                mine = at >= 0
                if len(qs) != len(part) - int(mine.sum()):  # read before the sample doubled
                    theirs = np.fromiter((q not in sampled.row for q in qs), dtype=bool, count=len(qs))
                    dg = dg[theirs]
                    out = out[theirs] if out is not None else None
                all_dg = np.empty(len(part), dtype=np.uint64)
                all_out = np.empty((len(part), dim), dtype=np.float32)
                all_dg[~mine], all_dg[mine] = dg, sampled.digests[at[mine]]
                if out is not None and len(qs):
                    all_out[~mine] = out
                if mine.any():
                    all_out[mine] = model.transform_counts(sampled.counts[at[mine]])
                yield part, all_dg, all_out

        batches = fitted() if whole is not None else merged()
        for qs, dg, out in batches:
            vecs[done : done + len(qs)] = out
            vecs.flush()
            drop_pages(vecs, done, done + len(qs))
            hfh.write(dg.tobytes())
            hfh.flush()
            done += len(qs)
            write_private_text(work / "done.json", json.dumps({"rows": done}))
            stats.n_embedded += len(qs)
            stats.n_bags_read += len(qs)
            bar.advance(len(qs))
            if on_batch is not None:
                on_batch(done)
    stats.seconds["embed"] = time.perf_counter() - t1
    return _finish(d, work, ids, vecs[:n], model, settings, counts,
                   np.fromfile(hashes_path, dtype=np.uint64), stats, mark)


def _load_mark(work: Path) -> journal.Mark | None:
    p = work / JOURNAL_FILE
    return journal.Mark(**json.loads(p.read_text())) if p.exists() else None


def _state(counts: dict[str, int], bags: str, mark: journal.Mark | None) -> GraphState:
    return GraphState(counts=counts, bags_hash=bags, journal_rev=mark.rev if mark else None,
                      journal_writes=mark.writes if mark else None,
                      journal_epoch=mark.epoch if mark else None)


def _record_mark(d: Path, mark: journal.Mark) -> GraphState:
    """Record ``mark`` in the manifest of the index in ``d``, which a deep check found current."""
    manifest = read_manifest(d)
    gs = manifest["graph_state"]
    gs.update(journal_rev=mark.rev, journal_writes=mark.writes, journal_epoch=mark.epoch)
    write_private_text(d / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True))
    return _state(gs["counts"], gs["bags_hash"], mark)


def _owner_only(path: Path) -> Path:
    """``path`` created 0600 (or tightened) before numpy or ``open`` writes it: they keep an
    existing file's mode, and the vectors name the graph's entities like the rest of the index."""
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    os.chmod(path, 0o600)
    return path


def _save_digests(path: Path, digests: np.ndarray) -> None:
    with open(_owner_only(path), "wb") as fh:
        np.save(fh, np.asarray(digests, dtype=np.uint64), allow_pickle=False)


def _finish(d: Path, work: Path, ids: QidTable, vecs: np.ndarray, model: Model,
            settings: IndexSettings, counts: dict[str, int], digests: np.ndarray,
            stats: BuildStats, mark: journal.Mark | None) -> SemanticIndex:
    """FAISS over the written vectors, then everything moved into ``d``, manifest last."""
    import shutil

    t = time.perf_counter()
    index = make_faiss_index(vecs, settings, direct_map=False, timings=stats.seconds)
    stats.seconds["faiss"] = time.perf_counter() - t
    stats.index_kind = type(index).__name__
    dim = stats.dim = int(vecs.shape[1])
    stats.n_features = len(model.vocab)
    state = _state(counts, digests_hash(ids, digests), mark)
    (d / MANIFEST).unlink(missing_ok=True)
    del vecs
    for name in (VECTORS_FILE, MODEL_FILE, VOCAB_FILE, SAMPLE_FILE):
        if (work / name).exists():
            os.replace(work / name, d / name)
    _save_digests(d / HASHES_FILE, digests)
    shutil.rmtree(work, ignore_errors=True)
    out = SemanticIndex(ids, index, settings, state, stats, _open_vectors(d, ids.n_rows, dim))
    t = time.perf_counter()
    calibrate_nprobe(out, settings.recall_target)
    stats.seconds["calibrate"] = time.perf_counter() - t
    out.save(d)
    return out


def _open_vectors(d: Path, n_rows: int, dim: int, mode: str = "r") -> np.ndarray | None:
    """The raw vectors file as an (n_rows, dim) disk array (the file holds at least one row)."""
    p = d / VECTORS_FILE
    if not p.exists():
        return None
    arr: np.ndarray = np.memmap(p, dtype=np.float32, mode=mode, shape=(max(n_rows, 1), dim))  # type: ignore[call-overload]
    return arr[:n_rows]


def update_index(graph: Graph, directory: str | Path, settings: IndexSettings, *,
                 scan: Scan | None = None, since: journal.Mark | None = None,
                 retrain: bool = False, workers: int = 1, progress: bool = False) -> SemanticIndex:
    """Bring a built index up to date with the graph in place, without refitting anything.

    Which entities are new, changed or gone: with ``since`` (the journal mark the index
    recorded, :mod:`kgprobe.graph.journal`), the entities kgprobe's writers marked since then,
    and the entities to index now against those indexed (no bag is read to tell); otherwise the
    digests of ``scan`` (one pass over the indexed entities' facts, :func:`scan_graph`; done
    here when not given). Only the new and changed ones' bags are read again and embedded with
    the stored model; a changed entity keeps its row, a new one gets a new row at the end of the
    vectors file, a removed one's row is emptied. FAISS ids are rows, so an IVF / IVF-PQ index
    has the old rows removed and the new vectors added (``remove_ids`` / ``add_with_ids``) with
    its trained quantizers as they are; an exact index is refilled from the vectors file. When
    the change exceeds ``RETRAIN_FRACTION`` of the indexed entities, or ``retrain`` is asked, it
    is a full :func:`build_index` instead (model and FAISS fitted again)."""
    import faiss

    d = Path(directory)
    manifest = read_manifest(d)
    stats = BuildStats()
    t0 = time.perf_counter()
    mark = journal.begin(graph)
    old = QidTable.load(d / QIDS_FILE)
    old_dig = np.load(d / HASHES_FILE, allow_pickle=False)
    if since is not None:
        counts = graph_counts(graph)
        new, every = index_ids(graph, settings)
        n_graph = every.n_rows
        del every
        touched = np.zeros(new.n_rows, dtype=bool)
        pos = new.rows_of(journal.changed_since(graph, since.rev))
        touched[pos[pos >= 0]] = True
    else:
        if scan is None:
            scan = scan_graph(graph, settings)
        counts, new, n_graph = scan.counts, scan.ids, scan.n_graph
        stats.n_bags_scanned = new.n_rows
    at = old.rows_of_codes(new.codes) if old.is_int == new.is_int else old.rows_of(new.tolist())
    known = at >= 0
    changed = known.copy()
    if since is not None:
        changed &= touched
    else:
        assert scan is not None
        changed[known] = old_dig[at[known]] != scan.digests[known]
    added = ~known
    kept = np.zeros(old.n_rows, dtype=bool)
    kept[at[known]] = True
    removed = np.flatnonzero(old.live_mask() & ~kept)
    n_change = int(changed.sum() + added.sum()) + len(removed)
    if retrain or n_change > RETRAIN_FRACTION * max(len(new), 1):
        out = build_index(graph, d, settings, workers=workers, progress=progress)
        out.stats.retrained = True
        out.stats.n_bags_scanned = stats.n_bags_scanned
        return out
    (d / MANIFEST).unlink(missing_ok=True)  # from here on a torn update is a stale index
    redo = np.flatnonzero(changed | added)  # positions in ``new`` (QID order)
    added_ids = new.slice_ids_at(np.flatnonzero(added))
    n_rows = old.n_rows + len(added_ids)
    target = np.empty(len(redo), dtype=np.int64)  # the row each re-embedded entity goes to
    is_added = added[redo]
    target[~is_added] = at[redo[~is_added]]
    target[is_added] = old.n_rows + np.arange(int(is_added.sum()))
    dim = int(manifest["dim"])
    with open(d / VECTORS_FILE, "r+b") as fh:
        fh.truncate(max(n_rows, 1) * dim * 4)
    vecs = _open_vectors(d, n_rows, dim, mode="r+")
    assert vecs is not None
    digests = np.zeros(n_rows, dtype=np.uint64)
    digests[: old.n_rows] = old_dig
    digests[removed] = 0
    vecs[removed] = 0.0
    index: Any = faiss.read_index(str(d / INDEX_FILE))
    ivf = isinstance(index, faiss.IndexIVF)
    if ivf:
        drop = np.concatenate([target[~is_added], removed]).astype(np.int64)
        if drop.size:
            index.remove_ids(faiss.IDSelectorBatch(drop))
    model = Model.load(d)
    done = 0
    with Progress(f"updating {len(redo):,} entities of the semantic index in {d}", total=len(redo),
                  unit="entities", enabled=progress) as bar:
        for qs, ds, bs in _batched(bag_digests(graph, new.slice_ids_at(redo)), BUILD_BATCH):
            rows = target[done : done + len(qs)]
            got = model.transform(bs)
            vecs[rows] = got
            digests[rows] = np.asarray(ds, dtype=np.uint64)
            if ivf:
                index.add_with_ids(got, rows)
            done += len(qs)
            bar.advance(len(qs))
    stats.n_bags_read = stats.n_embedded = done
    del vecs  # the memmap's writes reach the file
    stats.seconds["embed"] = time.perf_counter() - t0
    t = time.perf_counter()
    if not ivf:
        index.reset()
        refill = _open_vectors(d, n_rows, dim)
        assert refill is not None
        _add(index, refill)
    stats.seconds["faiss"] = time.perf_counter() - t
    table = old.with_changes(removed, added_ids)
    stats.n_graph, stats.n_entities = n_graph, len(table)
    stats.n_sample = int(manifest.get("build", {}).get("n_sample", 0))
    stats.sample_steps = [(int(a), float(b)) for a, b in manifest.get("build", {}).get("sample_steps", [])]
    # the trained lists are kept, and so is the count a query visits (at most RETRAIN_FRACTION
    # of the entities changed: a full build calibrates again)
    stats.nprobe = int(manifest.get("build", {}).get("nprobe", 0))
    stats.recall_steps = [(int(a), float(b), float(c))
                          for a, b, c in manifest.get("build", {}).get("recall_steps", [])]
    stats.index_kind, stats.dim, stats.n_features = type(index).__name__, dim, len(model.vocab)
    _save_digests(d / HASHES_FILE, digests)
    state = _state(counts, digests_hash(table, digests), mark)
    out = SemanticIndex(table, index, settings, state, stats, _open_vectors(d, n_rows, dim))
    digest = manifest.get("model_digest")  # the model is kept: its digest too, not hashed again
    out.model_digest = str(digest) if digest else None
    out.save(d)
    return out


def ensure_index(
    graph: Graph,
    directory: str | Path,
    settings: IndexSettings | None = None,
    *,
    rebuild: bool = True,
    deep: bool | None = None,
    progress: bool = False,
    workers: int = 1,
) -> SemanticIndex:
    """Load the index in ``directory`` if it matches the graph, else bring it up to date (or
    raise).

    What is compared, by ``deep``:

    - None (the default): the graph's change journal (:mod:`kgprobe.graph.journal`) and its
      counts against those the index recorded, reading no bag. Journaled writes since the build
      mean an update of the entities they marked. Counts that changed with no journaled write
      mean an edit outside kgprobe: then, and on a graph or index without a journal, the deep
      check below.
    - True: a hash of every indexed entity's feature bag (one pass over their facts; catches an
      edited object that leaves the counts unchanged, made by anyone).
    - False: the journal and the counts only, never a pass over the bags.

    With ``rebuild=False`` a missing or stale index raises :class:`StaleIndexError` with the
    reason, so a caller can report it instead of paying for a build. A stale index built with
    the same settings is updated (:func:`update_index`: only new and changed entities are
    embedded); other settings, another format or no index mean a full build
    (:func:`build_index`, which resumes a killed one).

    ``settings`` None means those the index in ``directory`` was built with
    (:func:`recorded_settings`), or the defaults where there is none: an index built with other
    settings (``build_index(graph, d, IndexSettings(sample=20_000), workers=16)``) is then what
    every probe with that directory uses and keeps up to date.
    """
    settings = settings or kept_settings(directory)
    d = Path(directory)
    try:
        manifest = read_manifest(d)
    except StaleIndexError:
        manifest = {}
    recorded = manifest.get("graph_state") or {}
    counts = graph_counts(graph)
    now = journal.read(graph) if deep is not True else None
    since: journal.Mark | None = None
    if now is not None and recorded.get("journal_epoch") == now.epoch:
        if now.writes != recorded["journal_writes"]:
            since = journal.Mark(int(recorded["journal_rev"]), int(recorded["journal_writes"]),
                                 now.epoch)
        elif recorded.get("counts") != counts and deep is None:
            now = None  # changed outside kgprobe: the journal cannot say where
    else:
        now = None  # no journal, or another one than the index recorded: the bags tell
    scan = mark = None
    if now is None and deep is not False:
        # the journal's mark before the pass: an index the pass finds current records it, so
        # the next check needs no pass (a write after this point is journaled at mark.rev on)
        mark = journal.begin(graph)
        scan = scan_graph(graph, settings)
        state = scan.state()
    else:
        state = GraphState(counts=counts, journal_writes=now.writes if now else None,
                           journal_epoch=now.epoch if now else None)
    try:
        index = SemanticIndex.load(d, expect_state=state, expect_settings=settings)
    except StaleIndexError:
        if not rebuild:
            raise
    else:
        if mark is not None:
            index.state = _record_mark(d, mark)
        return index
    if manifest and not staleness(manifest, None, settings) and all(
            (d / f).exists() for f in (VECTORS_FILE, HASHES_FILE, MODEL_FILE, VOCAB_FILE)):
        return update_index(graph, d, settings, scan=scan, since=since, workers=workers,
                            progress=progress)
    return build_index(graph, d, settings, workers=workers, progress=progress)
