"""Typed scoring requests and their results.

Measures never call a model: they build these requests, hand a list of them to
:meth:`kgprobe.probing.engine.Engine.run`, and get one result per request back, in order.
Requests are frozen (hashable) so the engine can dedupe them and the cache can key on them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from kgprobe.errors import ConfigError


@dataclass(frozen=True)
class LogProbRequest:
    """log P(continuation | context). Trailing whitespace of the context moves into the
    continuation (DESIGN §3); ``add_eos`` also scores the end-of-sequence token after it
    (so that " Paris" does not get credit for " Parisian")."""

    context: str
    continuation: str
    add_eos: bool = False

    def __post_init__(self) -> None:
        if not self.continuation.strip() and not self.add_eos:
            raise ConfigError("LogProbRequest: the continuation is empty; nothing to score")


@dataclass(frozen=True)
class SpanScoreRequest:
    """Score a whole sentence and, inside it, the characters ``text[start:end]``.

    For templates whose object is not last ("Paris is the capital of France") and for masked
    LMs. Causal models score every token from the start of the sequence; the span score sums
    the tokens that overlap the span.
    """

    text: str
    start: int
    end: int

    def __post_init__(self) -> None:
        if not (0 <= self.start < self.end <= len(self.text)):
            raise ConfigError(
                f"SpanScoreRequest: span [{self.start}, {self.end}) is not inside a text of "
                f"{len(self.text)} characters"
            )

    @classmethod
    def marked(cls, text: str, span: str) -> SpanScoreRequest:
        """The request that scores the first occurrence of ``span`` in ``text``."""
        i = text.find(span)
        if i < 0 or not span:
            raise ConfigError(f"SpanScoreRequest: {span!r} does not occur in {text!r}")
        return cls(text, i, i + len(span))


@dataclass(frozen=True)
class NextTokenRequest:
    """The distribution of the token after ``context``: top-k entries, or the full vector
    when ``top_k`` is None (entropy, KL and Precision@n need it)."""

    context: str
    top_k: int | None = 10

    def __post_init__(self) -> None:
        if self.top_k is not None and self.top_k < 1:
            raise ConfigError("NextTokenRequest: top_k must be >= 1 or None")


@dataclass(frozen=True)
class BeamSearchRequest:
    """Beam search after ``context`` for ``max_new_tokens`` tokens.

    With ``allowed`` set, the search is constrained to a trie of those strings' tokens (each
    tokenized exactly as a :class:`LogProbRequest` continuation would be, ``add_eos``
    included), so every hypothesis is one of them or a prefix of one; only complete strings
    are returned, and ``max_new_tokens`` is replaced by the trie's depth.
    """

    context: str
    num_beams: int = 5
    max_new_tokens: int = 16
    allowed: tuple[str, ...] | None = None
    add_eos: bool = False

    def __post_init__(self) -> None:
        if self.num_beams < 1 or self.max_new_tokens < 1:
            raise ConfigError("BeamSearchRequest: num_beams and max_new_tokens must be >= 1")
        if self.allowed is not None and not self.allowed:
            raise ConfigError("BeamSearchRequest: allowed is empty")


@dataclass(frozen=True)
class GenerateRequest:
    """Greedy (``temperature`` 0) or sampled generation; sampling is seeded per request so a
    run is reproducible. Generation stops at EOS, at ``max_new_tokens`` or after any of
    ``stop`` (the stop string is cut off)."""

    context: str
    max_new_tokens: int = 32
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1 or self.temperature < 0 or not (0 < self.top_p <= 1):
            raise ConfigError(
                "GenerateRequest: need max_new_tokens >= 1, temperature >= 0, 0 < top_p <= 1"
            )


@dataclass(frozen=True)
class TokenScoresRequest:
    """Every token's log-prob in ``text`` encoded on its own, exactly as a plain causal-LM call
    ``model(ids, labels=ids)`` on ``tokenizer(text)`` scores it: the tokenizer's default special
    tokens and no prefix token, so the first token is never scored. KaRR's reference code
    scores sentences this way; the result also gives the token count of ``text``."""

    text: str

    def __post_init__(self) -> None:
        if not self.text:
            raise ConfigError("TokenScoresRequest: the text is empty")


Request = (LogProbRequest | SpanScoreRequest | NextTokenRequest | BeamSearchRequest
           | GenerateRequest | TokenScoresRequest)


@dataclass(frozen=True)
class LogProbResult:
    """Summed log-probability (natural log) of the scored tokens, and per token.

    ``boundary_merged`` says a token spanned the context/continuation boundary, so the first
    scored token also covers the end of the context (harness #1053/#1297)."""

    logprob: float
    token_logprobs: tuple[float, ...]
    tokens: tuple[str, ...]
    is_greedy: bool
    boundary_merged: bool = False
    #: ids of the scored tokens (empty in results cached before they were recorded)
    token_ids: tuple[int, ...] = ()

    @property
    def mean_logprob(self) -> float:
        return self.logprob / max(1, len(self.token_logprobs))

    @property
    def num_tokens(self) -> int:
        return len(self.token_logprobs)


@dataclass(frozen=True)
class SpanScoreResult:
    """Span score (sum over the tokens overlapping the span) and the whole sentence's score.

    For masked LMs both are pseudo-log-likelihoods (within-word left-to-right)."""

    logprob: float
    token_logprobs: tuple[float, ...]
    tokens: tuple[str, ...]
    sentence_logprob: float

    @property
    def mean_logprob(self) -> float:
        return self.logprob / max(1, len(self.token_logprobs))


@dataclass(frozen=True)
class NextTokenResult:
    """Top-k next tokens with log-probabilities (descending), the entropy (nats) of the full
    distribution, and the full log-probability vector when the request asked for it."""

    token_ids: tuple[int, ...]
    tokens: tuple[str, ...]
    logprobs: tuple[float, ...]
    entropy: float
    full_logprobs: np.ndarray | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Hypothesis:
    """One finished sequence of a beam search or a generation."""

    text: str
    token_ids: tuple[int, ...]
    logprob: float


@dataclass(frozen=True)
class BeamSearchResult:
    """Finished hypotheses, best first (at most ``num_beams``)."""

    hypotheses: tuple[Hypothesis, ...]


@dataclass(frozen=True)
class GenerateResult:
    """The generated text (stop string cut off), its tokens and their summed log-probability
    under the untempered model."""

    text: str
    token_ids: tuple[int, ...]
    logprob: float


@dataclass(frozen=True)
class TokenScoresResult:
    """The ids of every token of the text and the log-probs of all but the first (one fewer:
    nothing before the first token conditions it)."""

    token_ids: tuple[int, ...]
    token_logprobs: tuple[float, ...]

    @property
    def mean_logprob(self) -> float:
        """Mean over the scored tokens; NaN when there is none (a one-token text), as the
        mean loss of ``model(ids, labels=ids)`` is."""
        return sum(self.token_logprobs) / len(self.token_logprobs) if self.token_logprobs else math.nan


Result = (LogProbResult | SpanScoreResult | NextTokenResult | BeamSearchResult | GenerateResult
          | TokenScoresResult)


def entropy_of(logprobs: np.ndarray) -> float:
    """Entropy in nats of a log-probability vector."""
    p = np.exp(logprobs.astype(np.float64))
    finite = np.isfinite(logprobs)
    return float(-(p[finite] * logprobs[finite]).sum())


def kl_divergence(p_logprobs: np.ndarray, q_logprobs: np.ndarray) -> float:
    """KL(P || Q) in nats of two full next-token log-probability vectors (same vocabulary)."""
    lp = _renormalized(p_logprobs)
    lq = _renormalized(q_logprobs)
    p = np.exp(lp)
    mask = p > 0
    return float((p[mask] * (lp[mask] - lq[mask])).sum())


def _renormalized(logprobs: np.ndarray) -> np.ndarray:
    """Float64 copy that sums to one again (fp32 vectors are off by ~1e-7, enough to make a
    KL of near-identical distributions come out negative)."""
    x = logprobs.astype(np.float64)
    top = float(np.max(x))
    return x - (top + math.log(float(np.exp(x - top).sum())))
