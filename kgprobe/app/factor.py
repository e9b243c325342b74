"""FACTOR workflows: score a model on FACTOR items (a CSV file, or the items that
:mod:`kgprobe.app.factor_pipeline` builds from the graph: ``kgprobe factor``). They drive the
model and the measure; the measure itself (items, scoring, accuracy) is
:mod:`kgprobe.probing.measures.factor`, which imports none of this.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
) -> dict[str, Any]:
    """FACTOR accuracy of a model on a CSV file (what ``kgprobe factor`` prints). ``model``:
    a name, path or server URL (None: the default model), or a model object or backend."""
    items = read_factor_csv(path, prefix_column, limit)
    if not items:
        raise InputError(f"{path}: no FACTOR item")
    out = score_items(items, model, batch_size=batch_size, dtype=dtype, threads=threads,
                       progress=progress, max_length=max_length)
    return {"file": str(path), "prefix_column": prefix_column, **out}


def score_items(items: Sequence[FactorItem], model: str | Any | None, *, batch_size: int, dtype: str,
                 threads: int, progress: bool, max_length: int | None) -> dict[str, Any]:
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
    return {
        "model": chosen if isinstance(chosen, str) else engine.backend.label,
        "items": len(items),
        "max_length": lm.tokenization.max_length if isinstance(lm, LoadedModel) else None,
        "accuracy": factor_accuracy(outcomes),
        **dict(zip(("ci_low", "ci_high"), accuracy_interval([o.correct for o in outcomes]), strict=True)),
        "correct": sum(o.correct for o in outcomes),
        "per_item": [{"id": o.item_id, "correct": o.correct, "scores": list(o.scores)}
                     for o in outcomes],
    }
