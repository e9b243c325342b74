"""Model backends: every forward pass of kgprobe happens in one of these classes."""

from __future__ import annotations

from kgprobe.probing.backends.base import Backend, EngineStats, ScoredTokens, TrieNode
from kgprobe.probing.backends.causal import CausalBackend
from kgprobe.probing.backends.masked import MaskedBackend
from kgprobe.probing.backends.seq2seq import Seq2SeqBackend

__all__ = [
    "Backend",
    "CausalBackend",
    "EngineStats",
    "MaskedBackend",
    "ScoredTokens",
    "Seq2SeqBackend",
    "TrieNode",
]
