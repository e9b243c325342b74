"""FACTOR (Muhlgay et al., "Generating Benchmarks for Factuality Evaluation of Language
Models"): a prefix t, one factual completion c⁺ and non-factual ones C⁻; the model is right on
an item when

    c⁺ = argmax_{c ∈ {c⁺} ∪ C⁻}  log p(c | t) / |c|                                     (1)

(|c| in tokens); FACTOR accuracy is the share of items it is right on.

CSV files follow the official release (AI21Labs/factor): columns ``turncated_prefixes`` (sic,
what the official script scores with; ``full_prefix`` on request), ``completion``,
``contradiction_0..2``, ``doc_id``. Joining follows the official ``format_data``: completions
are left-stripped; a prefix ending in a space loses it and the completion gets one; otherwise
(a newline) prefix and completion are concatenated. The official script then scores exactly
the tokens of that completion text c (it counts them by tokenizing c alone and takes that
many tokens off the end of prefix + c). The engine moves all of the context's trailing
whitespace into the continuation (a newline, or the spaces left after the one the joining
takes: a prefix ending in two spaces keeps one); the tokens that lie wholly in that moved
whitespace are the same for every candidate and not part of c, so they are left out of
log p(c|t) and |c| — what is averaged is exactly the official script's span. Ties go to c⁺
(the official ``argmin`` takes the first, c⁺ is first).

Items can also be generated from facts: the verbalized fact is c⁺ and the same sentence with
the object replaced by typed distractors are C⁻, so any relation becomes a multiple-choice
benchmark.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgprobe.errors import ConfigError, InputError
from kgprobe.loaders.common import read_text_file
from kgprobe.probing.measures.common import Entity, Fact, Runner
from kgprobe.probing.requests import LogProbRequest, LogProbResult, Request
from kgprobe.probing.verbalize import fill

PREFIX_COLUMNS = ("turncated_prefixes", "full_prefix")


@dataclass(frozen=True)
class FactorItem:
    """One FACTOR example; ``completions[0]`` is the factual one."""

    prefix: str
    completions: tuple[str, ...]
    item_id: str = ""
    doc_id: str = ""

    def __post_init__(self) -> None:
        if len(self.completions) < 2:
            raise InputError(f"FACTOR item {self.item_id!r} needs a completion and >= 1 contradiction")


def read_factor_csv(path: str | Path, prefix_column: str = "turncated_prefixes",
                    limit: int | None = None) -> list[FactorItem]:
    """Read a FACTOR CSV (header row, multi-line quoted fields)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"FACTOR file {p} does not exist")
    if prefix_column not in PREFIX_COLUMNS:
        raise ConfigError(f"prefix column must be one of {', '.join(PREFIX_COLUMNS)}")
    csv.field_size_limit(min(sys.maxsize, 1 << 30))
    out = []
    # UTF-8 (with or without BOM) or UTF-16/32 with BOM; else one line with the byte offset
    with io.StringIO(read_text_file(p, "FACTOR file"), newline="") as fh:
        reader = csv.DictReader(fh)
        cols = reader.fieldnames or []
        contra = sorted(c for c in cols if c.startswith("contradiction_"))
        need = [prefix_column, "completion"]
        missing = [c for c in need if c not in cols]
        if missing or not contra:
            raise InputError(
                f"{p.name} is not a FACTOR CSV: missing column(s) "
                f"{', '.join(missing + ([] if contra else ['contradiction_0']))}"
            )
        for i, row in enumerate(reader):
            if limit is not None and i >= limit:
                break
            comps = [row["completion"] or ""] + [row[c] or "" for c in contra]
            if any(not c.strip() for c in comps):
                raise InputError(f"{p.name} row {i + 2}: an empty completion")
            rid = row.get("") or str(i)
            out.append(FactorItem(row[prefix_column] or "", tuple(comps), rid,
                                  row.get("doc_id", "") or ""))
    return out


def factor_pair(prefix: str, completion: str) -> tuple[str, str]:
    """(context, continuation) as the official script joins them."""
    completion = completion.lstrip(" ")
    if prefix.endswith(" "):
        return prefix[:-1], " " + completion
    return prefix, completion


@dataclass(frozen=True)
class FactorOutcome:
    item_id: str
    scores: tuple[float, ...]  # mean log-prob per token of each completion (c⁺ first)
    correct: bool


def mean_logprob(result: object, moved: str = "") -> float:
    """Mean per-token log-prob of the completion c: the leading tokens that lie wholly in
    ``moved`` (the context's trailing whitespace the engine moved in front of c) are left
    out, as the official script scores only c's own tokens. A token that also covers a
    character of c (or of the context: ``boundary_merged``) is kept; at least one is."""
    if not isinstance(result, LogProbResult):
        raise ConfigError("expected a log-prob result")
    lps = list(result.token_logprobs)
    toks = list(result.tokens)
    if moved and not result.boundary_merged and len(toks) == len(lps):
        used = 0
        while len(lps) > 1 and toks[0] and not toks[0].strip() and used + len(toks[0]) <= len(moved):
            used += len(toks.pop(0))
            lps.pop(0)
    return sum(lps) / len(lps)


def moved_whitespace(context: str) -> str:
    """The trailing whitespace the engine moves from ``context`` into the continuation."""
    return context[len(context.rstrip()):]


def factor_scores(runner: Runner, items: Sequence[FactorItem]) -> list[FactorOutcome]:
    """Eq. 1 for each item, each completion scored over the span the official script scores."""
    reqs: list[Request] = []
    moved: list[str] = []
    for it in items:
        for c in it.completions:
            ctx, cont = factor_pair(it.prefix, c)
            reqs.append(LogProbRequest(ctx, cont))
            moved.append(moved_whitespace(ctx))
    res = runner.run(reqs)
    out = []
    i = 0
    for it in items:
        n = len(it.completions)
        scores = tuple(mean_logprob(res[i + j], moved[i + j]) for j in range(n))
        i += n
        out.append(FactorOutcome(it.item_id, scores, scores[0] >= max(scores[1:])))
    return out


def accuracy_interval(correct: Sequence[bool], seed: int = 0) -> tuple[float | None, float | None]:
    """The 95% percentile-bootstrap interval of an accuracy (kgprobe.stats.bootstrap_ci over the
    items' 0/1 outcomes), only where n >= MIN_N_CI, as everywhere in kgprobe's reports."""
    from kgprobe.stats import MIN_N_CI, bootstrap_ci

    if len(correct) < MIN_N_CI:
        return None, None
    return bootstrap_ci([1.0 if c else 0.0 for c in correct], seed)


def factor_accuracy(outcomes: Sequence[FactorOutcome]) -> float:
    if not outcomes:
        raise ConfigError("FACTOR accuracy of no item")
    return sum(o.correct for o in outcomes) / len(outcomes)


def factor_items_from_fact(
    fact: Fact,
    template: str,
    distractors: Sequence[Entity | str],
    *,
    prefix: str = "",
    n_false: int = 3,
) -> FactorItem:
    """A FACTOR item from a fact: c⁺ = the template filled with s and o, C⁻ = the same with
    o replaced by the first ``n_false`` distractors (typed distractors from any strategy)."""
    ds = [Entity.of(d).label for d in distractors][:n_false]
    if not ds:
        raise InputError(f"fact {fact.key}: no distractor to build a FACTOR item")
    subj = fact.subject.label
    true = fill(template, subj, fact.object.label)
    false = [fill(template, subj, d) for d in ds]
    return FactorItem(prefix, (true, *false), fact.key)


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
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.models import load_model
    from kgprobe.probing.tokenization import ContextTooLong

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
        **dict(zip(("ci_low", "ci_high"), accuracy_interval([o.correct for o in outcomes]), strict=True)),
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
    from kgprobe.graph import distractors as gd
    from kgprobe.graph import probe_runs as pr
    from kgprobe.graph.client import connect
    from kgprobe.probing.run import choose_relations, probe_relations

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
            from kgprobe.graph.semantic import ensure_index
            from kgprobe.probing.distractors import default_index_dir

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
            "relations": {p: {"items": len(v), "accuracy": sum(v) / len(v),
                              **dict(zip(("ci_low", "ci_high"), accuracy_interval(v), strict=True))}
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
    from kgprobe.graph import distractors as gd
    from kgprobe.probing.distractors import default_template, find_distractors

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
