"""What every backend shares: batch settings, padding ids and the call counter."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class EngineStats:
    """Counters a caller (or a test) can read: how often the model really ran."""

    forward_calls: int = 0
    cache_hits: int = 0
    computed: int = 0
    #: tokens fed through packed rows (unique tokens: contexts once, trie nodes once)
    tokens_fed: int = 0
    #: process CPU seconds spent inside forward calls (the rest of a run is overhead)
    forward_cpu_seconds: float = 0.0
    #: process CPU seconds in the LM head + log_softmax on the read positions (packed path)
    head_cpu_seconds: float = 0.0
    #: process CPU seconds and request counts per request kind (class name), so a run's
    #: cost can be split by what measures asked for (benchmarks/bench_probe.py --per-measure)
    kind_cpu_seconds: dict[str, float] = field(default_factory=dict)
    kind_requests: dict[str, int] = field(default_factory=dict)


@dataclass
class ScoredTokens:
    """Per-token log-probabilities of a scored sequence and whether it is the greedy one."""

    logprobs: list[float]
    is_greedy: bool


@dataclass
class TrieNode:
    """A token trie: constrained beam search expands only ``children``."""

    children: dict[int, TrieNode] = field(default_factory=dict)
    terminal: bool = False

    @classmethod
    def build(cls, sequences: Sequence[Sequence[int]]) -> TrieNode:
        root = cls()
        for seq in sequences:
            node = root
            for tok in seq:
                node = node.children.setdefault(tok, cls())
            node.terminal = True
        return root

    def contains(self, seq: Sequence[int]) -> bool:
        """True when ``seq`` is a complete entry of the trie."""
        node: TrieNode | None = self
        for tok in seq:
            node = node.children.get(tok) if node is not None else None
        return node is not None and node.terminal


class Backend:
    """Holds the model and the batching settings; subclasses make the calls."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        batch_size: int,
        padding_side: Literal["left", "right"] = "right",
        batch_tokens: int | None = None,
        stats: EngineStats,
    ) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.batch_size = max(1, batch_size)
        self.padding_side = padding_side
        self.batch_tokens = batch_tokens
        self.stats = stats
        self.eos_id: int | None = tokenizer.eos_token_id
        pad = tokenizer.pad_token_id
        self.pad_id: int = pad if pad is not None else (self.eos_id or 0)

    def rows_per_batch(self, width: int) -> int:
        """``batch_size`` rows, or more when rows are short and a token budget is set (many
        small rows per forward: a distractor's continuation is only a few tokens)."""
        if self.batch_tokens is None:
            return self.batch_size
        return max(self.batch_size, self.batch_tokens // max(1, width))
