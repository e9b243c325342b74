"""``kgprobe score``: rank candidate continuations of one context (the CLI's one call)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

from kgprobe.errors import ConfigError
from kgprobe.probing.cache import ENV_SCORE_CACHE, ScoreCache
from kgprobe.probing.engine import Engine, resolve_model, select_model
from kgprobe.probing.models import DEFAULT_MODEL, load_model
from kgprobe.probing.requests import LogProbRequest, LogProbResult


def default_score_cache() -> Path:
    """The persistent score cache (``KGPROBE_SCORE_CACHE`` overrides)."""
    env = os.environ.get(ENV_SCORE_CACHE)
    return Path(env).expanduser() if env else Path(platformdirs.user_cache_dir("kgprobe")) / "scores.sqlite"


@dataclass(frozen=True)
class CandidateScore:
    """One candidate's score and its rank (1 = most probable) among the candidates."""

    candidate: str
    logprob: float
    mean_logprob: float
    token_logprobs: tuple[float, ...]
    tokens: tuple[str, ...]
    rank: int
    is_greedy: bool


def score_candidates(
    context: str,
    candidates: Sequence[str],
    *,
    model: str | Any = DEFAULT_MODEL,
    tokenizer: Any = None,
    dtype: str = "float32",
    threads: int = 1,
    add_eos: bool = False,
    cache_path: Path | None = None,
) -> list[CandidateScore]:
    """log P(candidate | context) for each candidate, in the order given, with ranks.

    ``model``: a name or path, a server's URL, a transformers model object with its
    ``tokenizer``, or a scoring backend (docs/backends.md)."""
    if not candidates:
        raise ConfigError("give at least one candidate")
    model = select_model(model)  # a served model (--backend, a URL) becomes its backend object
    lm = (load_model(model, dtype=dtype, threads=threads) if isinstance(model, str)
          else resolve_model(model, tokenizer)[0])
    cache = ScoreCache(cache_path) if cache_path is not None else None
    try:
        results = Engine(lm, cache=cache).run(
            [LogProbRequest(context, c, add_eos) for c in candidates]
        )
    finally:
        if cache is not None:
            cache.close()
    scored = [r for r in results if isinstance(r, LogProbResult)]
    order = sorted(range(len(scored)), key=lambda i: -scored[i].logprob)
    rank = {i: k + 1 for k, i in enumerate(order)}
    return [
        CandidateScore(c, r.logprob, r.mean_logprob, r.token_logprobs, r.tokens, rank[i],
                       r.is_greedy)
        for i, (c, r) in enumerate(zip(candidates, scored, strict=True))
    ]
