"""Semantic index: exactness against brute force, seeds, and manifest staleness (no graph)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfTransformer

from kgprobe.probing.semantic import (
    GraphState,
    IndexSettings,
    SemanticIndex,
    StaleIndexError,
    bag_tokens,
    bags_hash,
    bags_to_matrix,
    embed,
    staleness,
)


def random_bags(n: int, seed: int) -> list[tuple[str, list[str]]]:
    """Bags with the paper's features over a small world: shared relations, popular objects."""
    rng = random.Random(seed)
    qids = [f"Q{i + 1}" for i in range(n)]
    bags = []
    for q in qids:
        facts = [
            (
                f"P{rng.randint(1, 12)}",
                rng.choice(qids[: max(3, n // 5)]) if rng.random() < 0.6 else rng.choice(qids),
            )
            for _ in range(rng.randint(0, 6))
        ]
        bags.append((q, bag_tokens(q, facts)))
    return bags


def brute_force(
    vecs: np.ndarray, row: int, k: int, rows: list[int] | None = None
) -> list[tuple[int, float]]:
    """Top-k cosine neighbours by numpy alone (self excluded), ties by row id via qid order;
    a zero row (an entity none of whose features another entity has) is at cosine 0 to all."""
    unit = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    sims = unit @ unit[row]
    cand = [r for r in (rows if rows is not None else range(len(vecs))) if r != row]
    cand.sort(key=lambda r: (-sims[r], f"Q{r + 1}"))
    return [(r, float(sims[r])) for r in cand[:k]]


def test_bag_has_the_four_kinds_of_features() -> None:
    toks = bag_tokens("Q1", [("P19", "Q90"), ("P27", "Q142")])
    assert toks[0] == "Q1"
    assert {"P19", "P27", "Q90", "Q142", "P19=Q90", "P27=Q142"} <= set(toks)


@pytest.mark.parametrize("dim", [16, 1000])  # with SVD, and without (vocabulary < dim)
def test_exact_index_matches_brute_force_cosine(dim: int) -> None:
    bags = random_bags(300, seed=1)
    settings = IndexSettings(dim=dim, seed=3)
    idx = SemanticIndex.from_bags(bags, settings)
    assert idx.stats.index_kind == "IndexFlatIP"
    qids, counts = bags_to_matrix(bags)
    vecs = embed(counts, settings)
    for row in (0, 7, 150, 299):
        got = idx.neighbours(qids[row], 10)
        want = brute_force(vecs, row, 10)
        assert [g.similarity for g in got] == pytest.approx([w[1] for w in want], abs=1e-5)
        # identities agree wherever similarities are not tied
        for g, (r, s) in zip(got, want, strict=True):
            if sum(abs(s - w[1]) < 1e-6 for w in want) == 1:
                assert g.qid == qids[r]


def test_without_svd_similarity_is_tfidf_cosine() -> None:
    bags = random_bags(60, seed=2)
    qids, counts = bags_to_matrix(bags)
    idx = SemanticIndex.from_bags(bags, IndexSettings(dim=10_000))
    tfidf = TfidfTransformer(sublinear_tf=True).fit_transform(counts).toarray()
    for nb in idx.neighbours(qids[5], 5):
        j = qids.index(nb.qid)
        assert nb.similarity == pytest.approx(float(tfidf[5] @ tfidf[j]), abs=1e-5)


def test_filtered_query_is_brute_force_over_the_allowed_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bags = random_bags(400, seed=4)
    idx = SemanticIndex.from_bags(bags, IndexSettings(dim=24))
    qids, counts = bags_to_matrix(bags)
    vecs = embed(counts, IndexSettings(dim=24))
    allowed_rows = list(range(0, 400, 3))
    allowed = [qids[r] for r in allowed_rows]
    want = brute_force(vecs, 10, 8, allowed_rows)
    got = idx.neighbours(qids[10], 8, allowed=allowed)
    assert [g.similarity for g in got] == pytest.approx([w[1] for w in want], abs=1e-5)
    assert {g.qid for g in got} <= set(allowed)
    assert idx.neighbours(qids[10], 8, allowed_rows=idx.rows(allowed)) == got
    monkeypatch.setattr("kgprobe.probing.semantic.BITMAP_FROM", 10)  # the bitmap selector agrees
    assert idx.neighbours(qids[10], 8, allowed=allowed) == got
    # IVF, a filter small enough to score whole (EXACT_FILTER_MAX): the exact top 8 of the
    # allowed set, whatever the lists a query visits
    unit = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    for nprobe in (1, 32):
        s = IndexSettings(dim=24, exact_threshold=10, nlist=32, nprobe=nprobe, recall_target=0)
        ivf = SemanticIndex.from_bags(bags, s)
        got = ivf.neighbours(qids[10], 8, allowed=allowed)
        assert [g.similarity for g in got] == pytest.approx([w[1] for w in want], abs=1e-5)
        assert [g.qid for g in got] == [qids[w[0]] for w in want]
        assert ivf.neighbours(qids[10], 8, allowed_rows=ivf.rows(allowed)) == got
    # the same through the lists (a filter above EXACT_FILTER_MAX): where the one probed list
    # holds fewer than 8 allowed entities nprobe is widened, so the filter never starves it;
    # similarities are exact for what it returns
    monkeypatch.setattr("kgprobe.probing.semantic.EXACT_FILTER_MAX", 10)
    for nprobe in (1, 32):
        s = IndexSettings(dim=24, exact_threshold=10, nlist=32, nprobe=nprobe, recall_target=0)
        got = SemanticIndex.from_bags(bags, s).neighbours(qids[10], 8, allowed=allowed)
        assert len(got) == 8 and {g.qid for g in got} <= set(allowed)
        for g in got:
            assert g.similarity == pytest.approx(
                float(unit[10] @ unit[qids.index(g.qid)]), abs=1e-5
            )
        if nprobe == 32:  # every list probed: exact
            assert [g.similarity for g in got] == pytest.approx([w[1] for w in want], abs=1e-5)
    # a predicate (one "round trip" per batch) keeps only what it returns
    odd = idx.neighbours(qids[10], 8, predicate=lambda batch: [q for q in batch if int(q[1:]) % 2])
    assert len(odd) == 8 and all(int(g.qid[1:]) % 2 for g in odd)
    assert qids[10] not in {g.qid for g in odd}


def test_same_seed_same_vectors_and_neighbours_exact_and_ivf() -> None:
    bags = random_bags(500, seed=5)
    for threshold in (10_000, 100):  # exact, then IVF (500 > 100)
        s = IndexSettings(dim=16, seed=7, exact_threshold=threshold, nlist=16, nprobe=4)
        a = SemanticIndex.from_bags(bags, s)
        b = SemanticIndex.from_bags(bags, s)
        assert a.stats.index_kind == ("IndexFlatIP" if threshold > 500 else "IndexIVFFlat")
        assert np.array_equal(a.vectors(range(500)), b.vectors(range(500)))
        for q in ("Q1", "Q42", "Q300"):
            assert [(n.qid, n.similarity) for n in a.neighbours(q, 10)] == [
                (n.qid, n.similarity) for n in b.neighbours(q, 10)
            ]


def test_ivf_with_all_lists_probed_equals_exact() -> None:
    bags = random_bags(500, seed=6)
    exact = SemanticIndex.from_bags(bags, IndexSettings(dim=16, seed=1))
    ivf = SemanticIndex.from_bags(
        bags, IndexSettings(dim=16, seed=1, exact_threshold=10, nlist=8, nprobe=8)
    )
    for q in ("Q3", "Q77", "Q499"):
        e = exact.neighbours(q, 10)
        i = ivf.neighbours(q, 10)
        assert [x.similarity for x in i] == pytest.approx([x.similarity for x in e], abs=1e-5)


def test_save_load_roundtrip_and_staleness(tmp_path) -> None:
    bags = random_bags(200, seed=8)
    counts = {"entities": 200, "facts": 555}
    s = IndexSettings(dim=12, seed=2)
    idx = SemanticIndex.from_bags(bags, s, counts)
    idx.save(tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["n_entities"] == 200 and manifest["settings"]["dim"] == 12
    assert {"faiss", "scikit-learn", "numpy", "kgprobe"} <= set(manifest["versions"])

    fresh = GraphState(counts=counts, bags_hash=bags_hash(bags))
    loaded = SemanticIndex.load(tmp_path, expect_state=fresh, expect_settings=s)
    assert [n.qid for n in loaded.neighbours("Q9", 5)] == [n.qid for n in idx.neighbours("Q9", 5)]

    # a count changed → stale, with the reason
    with pytest.raises(StaleIndexError, match="facts"):
        SemanticIndex.load(tmp_path, expect_state=GraphState(counts={**counts, "facts": 556}))
    # same counts, one object edited → only the bag hash tells
    edited = [(q, t) if q != "Q5" else (q, [*t, "P1", "Q2", "P1=Q2"]) for q, t in bags]
    with pytest.raises(StaleIndexError, match="hash"):
        SemanticIndex.load(
            tmp_path, expect_state=GraphState(counts=counts, bags_hash=bags_hash(edited))
        )
    # counts-only (cheap) check passes when counts agree
    assert staleness(manifest, GraphState(counts=counts)) == []
    # other settings → stale
    with pytest.raises(StaleIndexError, match="settings"):
        SemanticIndex.load(tmp_path, expect_settings=IndexSettings(dim=13, seed=2))
    # a torn save (no manifest) → stale, not a crash
    (tmp_path / "manifest.json").unlink()
    with pytest.raises(StaleIndexError, match="missing"):
        SemanticIndex.load(tmp_path)
