"""The report's statistics, at the bottom of the package (imports nothing of kgprobe but errors,
so ``reporting``, ``results`` and the measures can all use it without importing each other).

* :func:`bootstrap_ci` — 95% percentile bootstrap of one mean (``scipy.stats.bootstrap``).
* :func:`paired_bootstrap_ci` — 95% percentile bootstrap of the mean *difference* of two models
  on the same facts: facts are resampled, the same indices for both models, so what the two
  models share (easy facts, hard facts) cancels. Two marginal intervals that overlap say little
  about a paired difference whose interval excludes zero.
* :func:`mcnemar` — McNemar's exact test on known/unknown pairs: two-sided exact binomial test
  (``scipy.stats.binomtest``, p = 1/2) on the discordant counts b (only A knows) and c (only B
  knows); the concordant facts carry no information on which model knows more.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Resamples of every bootstrap in the report.
BOOTSTRAP = 1000
#: Fewest facts for which an interval is reported (below: "n too small").
MIN_N_CI = 10
CONFIDENCE = 0.95


def bootstrap_ci(values: Sequence[float], seed: int, n_boot: int = BOOTSTRAP) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the mean (``scipy.stats.bootstrap``, ``n_boot``
    resamples drawn by ``numpy.random.default_rng(seed)``)."""
    from scipy.stats import bootstrap

    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        raise ValueError("no values")
    if np.ptp(arr) == 0:  # every resample has the same mean; scipy would warn "degenerate"
        return float(arr[0]), float(arr[0])
    res = bootstrap((arr,), np.mean, n_resamples=n_boot, confidence_level=CONFIDENCE,
                    method="percentile", vectorized=True, rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def paired_bootstrap_ci(
    a: Sequence[float], b: Sequence[float], seed: int, n_boot: int = BOOTSTRAP
) -> tuple[float, float]:
    """95% percentile-bootstrap interval of mean(b) − mean(a) over paired values (a[i], b[i]
    are two models' scores on fact i): each resample draws fact indices with replacement from
    ``numpy.random.default_rng(seed)`` and uses the same indices for both models, which is the
    bootstrap of the per-fact differences b[i] − a[i]."""
    xa = np.asarray(a, dtype=np.float64)
    xb = np.asarray(b, dtype=np.float64)
    if xa.shape != xb.shape:
        raise ValueError(f"paired values of different lengths: {xa.size} and {xb.size}")
    return bootstrap_ci((xb - xa).tolist(), seed, n_boot)


@dataclass(frozen=True)
class McNemar:
    """McNemar's exact test: ``b`` facts only A knows, ``c`` only B knows, two-sided ``p``."""

    b: int
    c: int
    p: float


def mcnemar(a_known: Sequence[bool], b_known: Sequence[bool]) -> McNemar:
    """Exact McNemar test on paired known/unknown outcomes: under "both models know as much",
    each discordant fact is A's or B's with probability 1/2, so b ~ Binomial(b + c, 1/2);
    p is ``scipy.stats.binomtest``'s two-sided p (1.0 when no fact is discordant)."""
    from scipy.stats import binomtest

    if len(a_known) != len(b_known):
        raise ValueError(f"paired outcomes of different lengths: {len(a_known)} and {len(b_known)}")
    b = sum(1 for x, y in zip(a_known, b_known, strict=True) if x and not y)
    c = sum(1 for x, y in zip(a_known, b_known, strict=True) if y and not x)
    p = 1.0 if b + c == 0 else float(binomtest(b, b + c, 0.5).pvalue)
    return McNemar(b, c, p)


def group_seed(seed: int, key: str) -> int:
    """The bootstrap seed of one group (a relation ``P17``, a bucket ``P17:high``): derived from
    the report's seed and the group's key, stable across runs (adding a group does not move
    another's interval) and the same wherever the group's values are bootstrapped — the report's
    table and a measure's own per-relation aggregate give one interval for one number."""
    digits = int(re.sub(r"\D", "", key) or 0)
    return (seed * 1_000_003 + digits * 31 + sum(map(ord, key))) % 2**32
