"""FACTOR workflows: score a model on FACTOR items (a CSV file, or the items that
:mod:`kgprobe.app.factor_pipeline` builds from the graph: ``kgprobe factor``). They drive the
model and the measure; the measure itself (items, scoring, accuracy) is
:mod:`kgprobe.probing.measures.factor`, which imports none of this.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from kgprobe.errors import ConfigError, InputError
from kgprobe.probing.engine import Engine, select_model
from kgprobe.probing.measures.factor import (
    FactorItem,
    accuracy_interval,
    factor_accuracy,
    factor_scores,
    read_factor_csv,
)
from kgprobe.probing.models import LoadedModel, load_model
from kgprobe.probing.tokenization import ContextTooLong


class FactorItemResult(TypedDict):
    """One FACTOR item's outcome: whether c⁺ scored above every contradiction, and the scores
    (c⁺ first); for an item built from the graph also its contradictions' error types and its
    prefix's facts."""

    id: str
    correct: bool
    scores: list[float]
    error_types: NotRequired[list[str]]
    prefix_facts: NotRequired[int]


class RelationAccuracy(TypedDict):
    """FACTOR accuracy on one relation's items built from the graph."""

    items: int
    accuracy: float
    ci_low: float | None
    ci_high: float | None


class FactorResult(TypedDict):
    """``kgprobe factor`` (its ``--json`` document): the model's accuracy with its interval
    (only for n >= 10) and every item's outcome; from a CSV also the file and its prefix
    column, from the graph the pipeline's record (steps, thresholds, per-relation accuracy,
    skipped facts, candidates; :func:`kgprobe.app.factor_pipeline.run_factor_pipeline`)."""

    model: str
    items: int
    max_length: int | None
    accuracy: float
    ci_low: float | None
    ci_high: float | None
    correct: int
    per_item: list[FactorItemResult]
    file: NotRequired[str]
    prefix_column: NotRequired[str]
    source: NotRequired[str]
    mode: NotRequired[str]
    steps: NotRequired[dict[str, object]]
    steps_line: NotRequired[str]
    comparable_with_published_factor: NotRequired[bool]
    strategy: NotRequired[str]
    n: NotRequired[int]
    seed: NotRequired[int]
    thresholds: NotRequired[dict[str, float]]
    error_types: NotRequired[dict[str, dict[str, int]]]
    relations: NotRequired[dict[str, RelationAccuracy]]
    skipped: NotRequired[int]
    skipped_reasons: NotRequired[dict[str, str]]
    csv: NotRequired[str | None]
    candidates: NotRequired[dict[str, list[dict[str, object]]]]


def run_factor_file(
    path: str | Path,
    model: str | Any | None,
    *,
    limit: int | None = None,
    prefix_column: str = "turncated_prefixes",
    batch_size: int = 16,
    dtype: str = "float32",
    threads: int = 1,
    progress: bool = True,
    max_length: int | None = None,
) -> FactorResult:
    """FACTOR accuracy of a model on a CSV file (what ``kgprobe factor`` prints). ``model``:
    a name, path or server URL (None: the default model), or a model object or backend."""
    items = read_factor_csv(path, prefix_column, limit)
    if not items:
        raise InputError(f"{path}: no FACTOR item")
    out = score_items(items, model, batch_size=batch_size, dtype=dtype, threads=threads,
                       progress=progress, max_length=max_length)
    return {"file": str(path), "prefix_column": prefix_column, **out}


def score_items(items: Sequence[FactorItem], model: str | Any | None, *, batch_size: int, dtype: str,
                 threads: int, progress: bool, max_length: int | None) -> FactorResult:
    """Load the model, cap its context at ``max_length`` tokens (the prefix is cut from the
    left, BOS kept, as the paper truncates at 1024), score, summarize. No score cache: a
    truncated request must never be served as an untruncated one."""
    if max_length is not None and max_length < 2:
        raise ConfigError("--max-length must be at least 2 tokens")
    chosen = select_model(model)  # a served model (--backend, a URL) becomes its backend object
    lm = load_model(chosen, dtype=dtype, threads=threads) if isinstance(chosen, str) else chosen
    if max_length is not None:
        if not isinstance(lm, LoadedModel):
            raise ConfigError(f"--max-length cuts prefixes with the model's own tokenizer; backend "
                              f"{lm.name!r} has none here: leave --max-length out")
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
    ci_low, ci_high = accuracy_interval([o.correct for o in outcomes])
    return {
        "model": chosen if isinstance(chosen, str) else engine.backend.label,
        "items": len(items),
        "max_length": lm.tokenization.max_length if isinstance(lm, LoadedModel) else None,
        "accuracy": factor_accuracy(outcomes),
        "ci_low": ci_low, "ci_high": ci_high,
        "correct": sum(o.correct for o in outcomes),
        "per_item": [{"id": o.item_id, "correct": o.correct, "scores": list(o.scores)}
                     for o in outcomes],
    }
