"""kgprobe-letters: a scoring backend from outside kgprobe (docs/backends.md)."""

from __future__ import annotations

import hashlib
import math
import string
from collections import Counter

from kgprobe.probing.backends import EngineStats, ScoringBackend, register_backend
from kgprobe.probing.requests import LogProbRequest, LogProbResult

OTHER = "#"  # every character that is not a letter a-z (digits, accents, punctuation)
SYMBOLS = len(string.ascii_lowercase) + 1


def symbol(char: str) -> str:
    char = char.lower()
    return char if char in string.ascii_lowercase else OTHER


@register_backend("letters")
class Letters(ScoringBackend):
    """A letter-frequency baseline: a continuation's log-probability is the sum, over its
    characters that are not whitespace, of log (n(c) + 1) / (N + 27), where n(c) counts the
    letter (case-folded; any other character is one symbol) in the corpus and N is the corpus's
    non-whitespace length. The context is ignored: what a model knowing only spelling scores."""

    batching = "one request per call (no model to batch)"

    def __init__(self, corpus: str = "The quick brown fox jumps over the lazy dog.") -> None:
        chars = [symbol(c) for c in corpus if not c.isspace()]
        counts, total = Counter(chars), len(chars)
        self.logp = {s: math.log((counts[s] + 1) / (total + SYMBOLS))
                     for s in (*string.ascii_lowercase, OTHER)}
        self.fingerprint = "letters:" + hashlib.sha256(corpus.encode()).hexdigest()
        self.stats = EngineStats()

    def handlers(self):
        return {LogProbRequest: self.logprobs}

    def logprobs(self, reqs: list[LogProbRequest]) -> list[LogProbResult]:
        out = []
        for r in reqs:
            chars = tuple(c for c in r.continuation if not c.isspace())
            per = tuple(self.logp[symbol(c)] for c in chars)
            out.append(LogProbResult(sum(per), per, chars, False))
        return out
