"""Semantic index of entities for the Sem / Temp+Sem distractor strategies.

Each entity is a bag of features as in the distractors paper (§3.3): the entity itself, every
relation it is the subject of, every object it points to, and every (relation, object) pair.
Entities and objects share one vocabulary (an entity's own token is the token other entities
get when they point to it), so entities that point to the same things, or that are pointed to
by the same things' neighbours, end up close.

Bags → TF-IDF (scikit-learn) → truncated SVD (randomized, seeded) → L2 normalization → FAISS
inner product, which is then cosine similarity. Below ``exact_threshold`` entities the index is
exact (``IndexFlatIP``); above it it is an inverted file (``IndexIVFFlat``, k-means seeded,
``nprobe`` a setting) with a direct map so an entity's own vector can be read back.

The index lives in a directory with a JSON manifest that ties it to the graph state (counts and
a hash of the feature bags) and to its settings and library versions, so that a stale index is
detected instead of silently used. This module holds no Cypher: the entities' facts and the
graph counts come through :mod:`kgprobe.graph.distractors` (it sits beside the distractor
finder, :mod:`kgprobe.probing.distractors`, that uses it).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kgprobe.config import private_dir, write_private_text
from kgprobe.errors import ConfigError, KgprobeError
from kgprobe.graph.distractors import entity_facts, graph_counts
from kgprobe.progress import Progress

if TYPE_CHECKING:  # pragma: no cover
    import scipy.sparse as sp

    from kgprobe.graph.client import Graph

MANIFEST = "manifest.json"
INDEX_FILE = "index.faiss"
QIDS_FILE = "qids.json"
FORMAT_VERSION = 1
#: Filter sets larger than this become an IDSelectorBitmap, smaller ones an IDSelectorBatch.
BITMAP_FROM = 2048


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
    #: lists visited per query (recall/latency trade-off of the approximate index).
    nprobe: int = 32
    seed: int = 0
    #: randomized-SVD power iterations (sklearn's default is 5).
    svd_iter: int = 5
    sublinear_tf: bool = True

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


def bags_hash(bags: Iterable[tuple[str, Sequence[str]]]) -> str:
    """Order-independent digest of the bags (sorted by entity, tokens sorted)."""
    h = hashlib.sha256()
    for qid, toks in sorted(bags, key=lambda b: b[0]):
        h.update(qid.encode())
        h.update(b"\0")
        h.update("\x1f".join(sorted(toks)).encode())
        h.update(b"\n")
    return h.hexdigest()


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
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfTransformer

    t0 = time.perf_counter()
    tfidf = TfidfTransformer(sublinear_tf=settings.sublinear_tf, norm="l2").fit_transform(counts)
    t1 = time.perf_counter()
    n, f = tfidf.shape
    if f <= settings.dim or n <= settings.dim:
        vecs = np.asarray(tfidf.todense(), dtype=np.float32)
    else:
        svd = TruncatedSVD(
            n_components=settings.dim,
            algorithm="randomized",
            n_iter=settings.svd_iter,
            random_state=settings.seed,
        )
        vecs = svd.fit_transform(tfidf).astype(np.float32)
    t2 = time.perf_counter()
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    vecs /= np.maximum(norms, 1e-12)
    if stats is not None:
        stats.seconds["tfidf"] = t1 - t0
        stats.seconds["svd"] = t2 - t1
        stats.n_features = f
        stats.nnz = int(counts.nnz)
        stats.dim = vecs.shape[1]
    return np.ascontiguousarray(vecs)


def make_faiss_index(vecs: np.ndarray, settings: IndexSettings) -> Any:
    """Exact inner-product index for small N, seeded IVF-Flat (with direct map) above."""
    import faiss

    n, d = vecs.shape
    index: Any
    if n <= settings.exact_threshold:
        index = faiss.IndexFlatIP(d)
        index.add(vecs)
        return index
    nlist = settings.resolved_nlist(n)
    quantizer = faiss.IndexFlatIP(d)
    index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = settings.seed
    # k-means on a seeded sample: 64 points per list is plenty and bounds training time.
    rng = np.random.default_rng(settings.seed)
    sample_n = min(n, nlist * 64)
    sample = vecs[np.sort(rng.choice(n, size=sample_n, replace=False))] if sample_n < n else vecs
    index.train(sample)
    index.add(vecs)
    index.make_direct_map()
    index.nprobe = settings.nprobe
    return index


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
        qids: list[str],
        index: Any,
        settings: IndexSettings,
        state: GraphState | None = None,
        stats: BuildStats | None = None,
    ) -> None:
        self.qids = qids
        self.row = {q: i for i, q in enumerate(qids)}
        self.index = index
        self.settings = settings
        self.state = state
        self.stats = stats or BuildStats(n_entities=len(qids))

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
        if len(set(qids)) != len(qids):
            raise ConfigError("duplicate entity ids in the semantic index input")
        stats = BuildStats(n_entities=len(qids))
        vecs = embed(counts, settings, stats)
        t0 = time.perf_counter()
        index = make_faiss_index(vecs, settings)
        stats.seconds["faiss"] = time.perf_counter() - t0
        stats.index_kind = type(index).__name__
        return cls(qids, index, settings, state, stats)

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

    def __contains__(self, qid: object) -> bool:
        return qid in self.row

    def vector(self, qid: str) -> np.ndarray:
        if qid not in self.row:
            raise KeyError(qid)
        return np.asarray(self.index.reconstruct(self.row[qid]), dtype=np.float32)

    def vectors(self, rows: Sequence[int] | np.ndarray) -> np.ndarray:
        ids = np.asarray(rows, dtype=np.int64)
        if len(ids) == 0:
            return np.zeros((0, self.index.d), dtype=np.float32)
        return np.asarray(self.index.reconstruct_batch(ids), dtype=np.float32)

    def rows(self, qids: Collection[str]) -> np.ndarray:
        """Sorted unique index rows of ``qids`` (unknown ids dropped)."""
        get = self.row.get
        r = np.unique(np.fromiter((get(q, -1) for q in qids), dtype=np.int64, count=len(qids)))
        return r[r >= 0]

    def search_vector(self, vec: np.ndarray, k: int) -> list[Neighbour]:
        """Plain k nearest neighbours of a vector (no filter)."""
        k = min(k, len(self.qids))
        if k <= 0:
            return []
        sims, ids = self.index.search(np.asarray(vec, dtype=np.float32).reshape(1, -1), k)
        return [
            Neighbour(self.qids[i], float(s))
            for s, i in zip(sims[0], ids[0], strict=True)
            if i >= 0
        ]

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
        if qid not in self.row or n <= 0:
            return []
        self_row = self.row[qid] if exclude_self else -1
        q = self.vector(qid).reshape(1, -1)
        sel = None
        pool = len(self.qids)
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
            if rows.size > BITMAP_FROM:
                # a bitmap over all rows: O(1) membership and cheap to build for large sets
                bits = np.zeros(len(self.qids), dtype=bool)
                bits[rows] = True
                packed = np.packbits(bits, bitorder="little")  # must outlive the search
                sel = faiss.IDSelectorBitmap(len(self.qids), faiss.swig_ptr(packed))
            else:
                sel = faiss.IDSelectorBatch(rows)
            pool = int(rows.size)
        ivf = isinstance(self.index, faiss.IndexIVF)
        nlist = int(self.index.nlist) if ivf else 0
        nprobe = min(int(self.settings.nprobe), nlist) if ivf else 0
        k = min(pool, (max(4 * n, 32) if predicate is not None else n) + (1 if sel is None else 0))
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

    def manifest(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "n_entities": len(self.qids),
            "dim": int(self.index.d),
            "index_kind": type(self.index).__name__,
            "graph_state": asdict(self.state) if self.state else None,
            "settings": asdict(self.settings),
            "versions": _versions(),
            "build": asdict(self.stats),
        }

    def save(self, directory: str | Path) -> Path:
        """Write index, ids and manifest; the manifest is written last (a torn save is stale)."""
        import faiss

        d = Path(directory)
        private_dir(d)  # the index names the graph's entities: owner-only like KGPROBE_HOME
        (d / MANIFEST).unlink(missing_ok=True)
        faiss.write_index(self.index, str(d / INDEX_FILE))
        os.chmod(d / INDEX_FILE, 0o600)
        write_private_text(d / QIDS_FILE, json.dumps(self.qids))
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
        if isinstance(index, faiss.IndexIVF):
            index.nprobe = manifest["settings"]["nprobe"]
        qids = json.loads((d / QIDS_FILE).read_text())
        gs = manifest.get("graph_state")
        state = GraphState(counts=gs["counts"], bags_hash=gs["bags_hash"]) if gs else None
        stats = BuildStats(**manifest.get("build", {}))
        return cls(qids, index, IndexSettings(**manifest["settings"]), state, stats)


def read_manifest(directory: str | Path) -> dict[str, Any]:
    p = Path(directory) / MANIFEST
    if not p.exists():
        raise StaleIndexError(f"no semantic index in {directory} (missing {MANIFEST})")
    try:
        data: dict[str, Any] = json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise StaleIndexError(f"unreadable manifest {p}: {exc}") from exc
    return data


def staleness(
    manifest: dict[str, Any],
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
    if expect_settings is not None and manifest.get("settings") != asdict(expect_settings):
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
    return problems


def current_state(graph: Graph, *, deep: bool = True) -> GraphState:
    """The graph's fingerprint: counts always, the bag hash when ``deep`` (one full pass)."""
    counts = graph_counts(graph)
    return GraphState(counts=counts, bags_hash=bags_hash(feature_bags(graph)) if deep else "")


def ensure_index(
    graph: Graph,
    directory: str | Path,
    settings: IndexSettings | None = None,
    *,
    rebuild: bool = True,
    deep: bool = True,
    progress: bool = False,
) -> SemanticIndex:
    """Load the index in ``directory`` if it matches the graph, else rebuild it (or raise).

    ``deep`` compares a hash of every feature bag (one pass over the facts; catches an edited
    object that leaves the counts unchanged); otherwise only the counts are compared. With
    ``rebuild=False`` a missing or stale index raises :class:`StaleIndexError` with the reason,
    so a caller can report it instead of paying for a build.
    """
    settings = settings or IndexSettings()
    counts = graph_counts(graph)
    bags = list(feature_bags(graph)) if deep else None
    state = GraphState(counts=counts, bags_hash=bags_hash(bags) if bags is not None else "")
    try:
        return SemanticIndex.load(directory, expect_state=state, expect_settings=settings)
    except StaleIndexError:
        if not rebuild:
            raise
    # a spinner on a terminal, one line when done in a log (kgprobe.progress; text, never markup)
    with Progress(f"building the semantic index of {counts.get('entities', 0):,} entities in {directory}",
                  enabled=progress):
        if bags is None:
            bags = list(feature_bags(graph))
        idx = SemanticIndex.from_bags(bags, settings, counts)
        idx.save(directory)
    return idx
