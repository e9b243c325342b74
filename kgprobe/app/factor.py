"""FACTOR workflows: score a model on a FACTOR CSV file, or on items built from the graph's
facts (``kgprobe factor``). They drive the graph, the model and the measure; the measure itself
(items, scoring, accuracy) is :mod:`kgprobe.probing.measures.factor`, which imports none of this.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kgprobe.errors import ConfigError, InputError
from kgprobe.graph import distractors as gd
from kgprobe.graph import probe_runs as pr
from kgprobe.graph.client import connect
from kgprobe.probing.distractors import default_index_dir, default_template, find_distractors
from kgprobe.probing.engine import Engine
from kgprobe.probing.measures.common import Entity, Fact
from kgprobe.probing.measures.factor import (
    FactorItem,
    factor_accuracy,
    factor_items_from_fact,
    factor_scores,
    read_factor_csv,
)
from kgprobe.probing.models import load_model
from kgprobe.probing.run import choose_relations, probe_relations
from kgprobe.probing.semantic import ensure_index
from kgprobe.probing.tokenization import ContextTooLong


def run_factor_file(
    path: str | Path,
    model: str,
    *,
    limit: int | None = None,
    prefix_column: str = "turncated_prefixes",
    batch_size: int = 16,
    dtype: str = "float32",
    threads: int = 1,
    progress: bool = True,
    max_length: int | None = None,
) -> dict[str, Any]:
    """FACTOR accuracy of a model on a CSV file (what ``kgprobe factor`` prints)."""
    items = read_factor_csv(path, prefix_column, limit)
    if not items:
        raise InputError(f"{path}: no FACTOR item")
    out = _score_items(items, model, batch_size=batch_size, dtype=dtype, threads=threads,
                       progress=progress, max_length=max_length)
    return {"file": str(path), "prefix_column": prefix_column, **out}


def _score_items(items: Sequence[FactorItem], model: str, *, batch_size: int, dtype: str,
                 threads: int, progress: bool, max_length: int | None) -> dict[str, Any]:
    """Load the model, cap its context at ``max_length`` tokens (the prefix is cut from the
    left, BOS kept, as the paper truncates at 1024), score, summarize. No score cache: a
    truncated request must never be served as an untruncated one."""
    if max_length is not None and max_length < 2:
        raise ConfigError("--max-length must be at least 2 tokens")
    lm = load_model(model, dtype=dtype, threads=threads)
    if max_length is not None:
        cur = lm.tokenization.max_length
        lm.tokenization.max_length = max_length if cur is None else min(cur, max_length)
        lm.tokenization.truncate_left = True  # asked for: the paper's left-cut prefixes
    engine = Engine(lm, batch_size=batch_size, progress=progress, chunk_size=64)
    try:
        outcomes = factor_scores(engine, items)
    except ContextTooLong as exc:
        if max_length is not None:
            raise
        raise ContextTooLong(f"{exc}; or pass --max-length N to cut FACTOR prefixes from the "
                             "left as the paper does (1024)") from None
    return {
        "model": model,
        "items": len(items),
        "max_length": lm.tokenization.max_length,
        "accuracy": factor_accuracy(outcomes),
        "correct": sum(o.correct for o in outcomes),
        "per_item": [{"id": o.item_id, "correct": o.correct, "scores": list(o.scores)}
                     for o in outcomes],
    }


def run_factor_graph(
    model: str,
    *,
    relations: Sequence[str] = (),
    sample: int | None = 60,
    strategy: str = "random",
    n: int = 3,
    seed: int = 0,
    at: str | None = None,
    batch_size: int = 16,
    dtype: str = "float32",
    threads: int = 1,
    progress: bool = True,
    max_length: int | None = None,
    graph: Any = None,
) -> dict[str, Any]:
    """FACTOR accuracy on items generated from the graph: a stratified, seeded sample of
    facts (as ``kgprobe probe`` draws them), each relation's first object-last template, the
    true sentence against ``n`` typed distractors of ``strategy`` (what ``kgprobe factor
    --from-graph`` prints, with accuracy per relation)."""
    g = graph if graph is not None else connect()
    try:
        available = probe_relations(g)
        chosen = choose_relations(available, relations)
        ref = gd.date_sort_key(at)
        by_pid = {p: pr.candidate_keys(g, p, ref) for p in chosen}
        keys = pr.sample_keys({p: list(k) for p, k in by_pid.items()}, sample, seed)
        subjects = {k: s for by_key in by_pid.values() for k, s in by_key.items()}
        facts = [(d["s"], d["pid"], d["o"]) for d in pr.fact_details(g, keys, subjects, [])]
        kw: dict[str, Any] = {}
        if strategy in ("sem", "temp+sem"):
            kw["index"] = ensure_index(g, default_index_dir())
        if strategy == "appropt":
            raise ConfigError("factor --from-graph takes random, sem or temp+sem distractors")
        items, skipped = factor_items_from_graph(g, facts, strategy=strategy, n_false=n, seed=seed,
                                                 at=ref, **kw)
    finally:
        if graph is None:
            g.close()
    if not items:
        raise InputError("no FACTOR item could be built from the sampled facts "
                         f"({len(skipped)} skipped: {next(iter(skipped.values()), '')})")
    out = _score_items(items, model, batch_size=batch_size, dtype=dtype, threads=threads,
                       progress=progress, max_length=max_length)
    per_rel: dict[str, list[bool]] = {}
    for it, o in zip(items, out["per_item"], strict=True):
        per_rel.setdefault(it.item_id.split("|")[1], []).append(bool(o["correct"]))
    return {"source": "graph", "strategy": strategy, "n": n, "seed": seed,
            "relations": {p: {"items": len(v), "accuracy": sum(v) / len(v)}
                          for p, v in sorted(per_rel.items(), key=lambda kv: int(kv[0][1:]))},
            "skipped": len(skipped), **out}


def factor_items_from_graph(
    graph: Any,
    facts: Sequence[tuple[str, str, str]],
    *,
    strategy: str = "random",
    n_false: int = 3,
    seed: int = 0,
    template: str | None = None,
    **distractor_kw: Any,
) -> tuple[list[FactorItem], dict[str, str]]:
    """FACTOR items for (subject QID, PID, object QID) facts of the graph: typed distractors
    from :func:`kgprobe.probing.distractors.find_distractors` (``strategy``, ``seed``, further
    keywords passed on), the relation's first object-last template from the template store
    unless ``template`` is given. Returns the items and, per fact key, why one was skipped."""
    items: list[FactorItem] = []
    skipped: dict[str, str] = {}
    templates: dict[str, str] = {}
    for s, pid, o in facts:
        key = f"{s}|{pid}|{o}"
        dl = find_distractors(graph, s, pid, o, strategy=strategy, n=n_false, seed=seed,
                              **distractor_kw)
        ds = [Entity(d.label, (), d.qid) for d in dl.distractors if d.label]
        terms = gd.entity_terms(graph, [s, o])
        if not ds or s not in terms or o not in terms:
            skipped[key] = dl.reason or "subject or object has no label"
            continue
        if pid not in templates:
            templates[pid] = template or default_template(graph, pid)
        subj = Entity(terms[s]["label"], tuple(terms[s].get("aliases") or ()), s)
        obj = Entity(terms[o]["label"], tuple(terms[o].get("aliases") or ()), o)
        items.append(factor_items_from_fact(Fact(subj, pid, obj, key), templates[pid], ds,
                                            n_false=n_false))
    return items, skipped
