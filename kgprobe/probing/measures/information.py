"""Information-theoretic knowledge measures (Pezeshkpour, "Measuring and Modifying Factual
Knowledge in Large Language Models").

    H(prompt)  = − Σ_{k∈V} P_k log P_k                                                  (1)
    entropy score = H(prompt) − H(prompt | f instilled)                                 (2)
    KL(P‖Q)    = Σ_{k∈V} P_k log(P_k / Q_k)                                             (3)

P is the next-token distribution after the prompt, Q the same after instilling the fact f:
*explicitly* (the fact sentence stated before the prompt: "Barack Obama is married to
Michelle Obama. Barack Obama is married to") or *implicitly* (a few fine-tuning steps on the
fact, on a copy of the model: :func:`kgprobe.probing.instill.finetune_copy`). A model that
knows f barely changes: small entropy difference, small KL. Eq. 3 is printed with a leading
minus in the paper, which would make every value ≤ 0 while its tables report positive values
("bigger numbers indicate lower knowledge"); the non-negative KL is computed.

**Top-k approximation** (for APIs that return only top-k log-probabilities): V' = V_b ∪ V_a ∪
{oov}; in each distribution the tokens of V' outside its own top-k (oov included) share its
missing mass 1 − Σ top-k uniformly; entropy and KL are then taken over V'. Logs are natural
(nats) unless ``base`` says otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from kgprobe.errors import ConfigError
from kgprobe.probing.measures.common import Runner
from kgprobe.probing.requests import NextTokenRequest, NextTokenResult, Request

OOV = "<oov>"


def entropy(probs: np.ndarray, base: float = math.e) -> float:
    """Eq. 1 over a probability vector (zeros contribute nothing)."""
    p = np.asarray(probs, dtype=np.float64)
    nz = p > 0
    return float(-(p[nz] * np.log(p[nz])).sum() / math.log(base))


def kl(p: np.ndarray, q: np.ndarray, base: float = math.e) -> float:
    """KL(P‖Q) (eq. 3, non-negative form); +inf when Q is 0 where P is not."""
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if p.shape != q.shape:
        raise ConfigError("KL needs two distributions over the same vocabulary")
    nz = p > 0
    if np.any(q[nz] <= 0):
        return math.inf
    return float((p[nz] * (np.log(p[nz]) - np.log(q[nz]))).sum() / math.log(base))


def probs_from_logprobs(logprobs: np.ndarray) -> np.ndarray:
    """Float64 probabilities renormalized to sum to one (fp32 vectors are off by ~1e-7,
    enough to make the KL of two near-identical distributions negative)."""
    x = np.asarray(logprobs, dtype=np.float64)
    x = x - x.max()
    p = np.exp(x)
    return p / p.sum()


def topk_approximation(
    before: Mapping[str, float], after: Mapping[str, float]
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The top-k approximation: (V' tokens with ``<oov>`` last, P over V', Q over V').

    ``before``/``after`` map each top-k token to its *probability*."""
    for name, d in (("before", before), ("after", after)):
        if any(v < 0 for v in d.values()) or sum(d.values()) > 1 + 1e-6:
            raise ConfigError(f"top-k probabilities ({name}) must be >= 0 and sum to <= 1")
    vocab = list(dict.fromkeys([*before, *after]))
    if OOV in vocab:
        raise ConfigError(f"{OOV!r} is reserved for the out-of-vocabulary bucket")
    vocab.append(OOV)

    def spread(d: Mapping[str, float]) -> np.ndarray:
        missing = max(0.0, 1.0 - sum(d.values()))
        rest = [t for t in vocab if t not in d]
        share = missing / len(rest)  # rest always holds at least the oov bucket
        return np.array([d.get(t, share) for t in vocab], dtype=np.float64)

    return vocab, spread(before), spread(after)


def instilled_prompt(fact_sentence: str, prompt: str, separator: str = " ") -> str:
    """Explicit instillation: the fact stated before the prompt."""
    return f"{fact_sentence.strip()}{separator}{prompt}"


@dataclass(frozen=True)
class InfoScore:
    """Entropy before/after instillation, their difference (eq. 2) and KL(P‖Q)."""

    prompt: str
    entropy_before: float
    entropy_after: float
    kl: float

    @property
    def entropy_difference(self) -> float:
        return self.entropy_before - self.entropy_after


def _dist(r: object) -> np.ndarray:
    if not isinstance(r, NextTokenResult) or r.full_logprobs is None:
        raise ConfigError("expected a full next-token distribution")
    return probs_from_logprobs(r.full_logprobs)


def prompt_entropy(runner: Runner, prompts: Sequence[str], base: float = math.e) -> list[float]:
    """H(prompt) for each prompt (full vocabulary)."""
    reqs: list[Request] = [NextTokenRequest(p, None) for p in prompts]
    return [entropy(_dist(r), base) for r in runner.run(reqs)]


def _before_after(
    runner: Runner, prompts: Sequence[str], fact_sentences: Sequence[str], top_k: int | None,
    separator: str,
) -> tuple[list[object], list[object]]:
    """Next-token results without and with the fact stated, in one engine call."""
    if len(prompts) != len(fact_sentences):
        raise ConfigError("one fact sentence per prompt")
    before: list[Request] = [NextTokenRequest(p, top_k) for p in prompts]
    after: list[Request] = [NextTokenRequest(instilled_prompt(f, p, separator), top_k)
                            for p, f in zip(prompts, fact_sentences, strict=True)]
    res = runner.run(before + after)
    return list(res[: len(prompts)]), list(res[len(prompts):])


def explicit_instillation(
    runner: Runner,
    prompts: Sequence[str],
    fact_sentences: Sequence[str],
    *,
    separator: str = " ",
    base: float = math.e,
) -> list[InfoScore]:
    """Entropy and KL before/after stating the fact in the prompt (full vocabulary)."""
    before, after = _before_after(runner, prompts, fact_sentences, None, separator)
    out = []
    for p, rb, ra in zip(prompts, before, after, strict=True):
        pb, pa = _dist(rb), _dist(ra)
        out.append(InfoScore(p, entropy(pb, base), entropy(pa, base), kl(pb, pa, base)))
    return out


def explicit_instillation_topk(
    runner: Runner,
    prompts: Sequence[str],
    fact_sentences: Sequence[str],
    *,
    k: int = 5,
    separator: str = " ",
    base: float = math.e,
) -> list[InfoScore]:
    """The same with only the top-k tokens of each distribution (the approximation above)."""
    before, after = _before_after(runner, prompts, fact_sentences, k, separator)
    out = []
    for p, rb, ra in zip(prompts, before, after, strict=True):
        _, pb, pa = topk_approximation(_topk(rb), _topk(ra))
        out.append(InfoScore(p, entropy(pb, base), entropy(pa, base), kl(pb, pa, base)))
    return out


def _topk(r: object) -> dict[str, float]:
    if not isinstance(r, NextTokenResult):
        raise ConfigError("expected a next-token result")
    out: dict[str, float] = {}
    for tid, lp in zip(r.token_ids, r.logprobs, strict=True):
        out[f"#{tid}"] = out.get(f"#{tid}", 0.0) + math.exp(lp)
    return out


def implicit_instillation(
    before: Runner,
    after: Runner,
    prompts: Sequence[str],
    base: float = math.e,
) -> list[InfoScore]:
    """Entropy and KL between the original model (``before``) and a fine-tuned copy
    (``after``, e.g. an engine over :func:`kgprobe.probing.instill.finetune_copy`)."""
    reqs: list[Request] = [NextTokenRequest(p, None) for p in prompts]
    rb, ra = before.run(reqs), after.run(reqs)
    out = []
    for p, b, a in zip(prompts, rb, ra, strict=True):
        pb, pa = _dist(b), _dist(a)
        out.append(InfoScore(p, entropy(pb, base), entropy(pa, base), kl(pb, pa, base)))
    return out
