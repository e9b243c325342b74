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
benchmark. The paper's generation pipeline over the graph (prefixes, generated contradictions
of five error types, NLI and fluency filters, diversity selection) is in
:mod:`kgprobe.app.factor_pipeline`; this module only reads, writes and scores items.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kgprobe.errors import ConfigError, InputError
from kgprobe.loaders.common import read_text_file
from kgprobe.probing.measures.common import Entity, Fact, Runner
from kgprobe.probing.requests import LogProbRequest, LogProbResult, Request
from kgprobe.probing.verbalize import fill
from kgprobe.stats import MIN_N_CI, bootstrap_ci

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


def write_factor_csv(path: str | Path, items: Sequence[FactorItem],
                     extra: Sequence[Mapping[str, object]] | None = None) -> Path:
    """Write items in the official CSV layout (an unnamed index column holding the item id,
    ``turncated_prefixes``, ``full_prefix`` (the same text: nothing is truncated),
    ``completion``, ``contradiction_0..``, ``doc_id``) that :func:`read_factor_csv` reads back;
    ``extra`` adds per-item columns after those (their names must not start with
    ``contradiction_``, which the reader takes as completions). Every item needs the same
    number of contradictions."""
    if not items:
        raise InputError("no FACTOR item to write")
    n = len(items[0].completions) - 1
    if any(len(it.completions) - 1 != n for it in items):
        raise InputError("FACTOR CSV rows need the same number of contradictions")
    extra = list(extra) if extra is not None else [{} for _ in items]
    if len(extra) != len(items):
        raise InputError("one extra row per FACTOR item")
    names: list[str] = []
    for row in extra:
        names += [k for k in row if k not in names]
    base = ["", "turncated_prefixes", "full_prefix", "completion",
            *[f"contradiction_{i}" for i in range(n)], "doc_id"]
    clash = [k for k in names if k.startswith("contradiction_") or k in base]
    if clash:
        raise InputError(f"extra FACTOR column(s) clash with the format: {', '.join(clash)}")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(base + names)
        for it, row in zip(items, extra, strict=True):
            w.writerow([it.item_id, it.prefix, it.prefix, *it.completions, it.doc_id,
                        *["" if row.get(k) is None else row[k] for k in names]])
    return p


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
    ds = [Entity.of(d).name for d in distractors][:n_false]
    if not ds:
        raise InputError(f"fact {fact.key}: no distractor to build a FACTOR item")
    subj = fact.subject.name
    true = fill(template, subj, fact.object.name)
    false = [fill(template, subj, d) for d in ds]
    return FactorItem(prefix, (true, *false), fact.key)
