"""Model backends: every model call of kgprobe happens in one of these modules.

``base`` holds the contract the engine dispatches through (:class:`ScoringBackend`) and the
registry; ``hf`` the transformers backends over the model-call classes in ``causal``,
``masked`` and ``seq2seq``; ``served`` an OpenAI-compatible completions server."""

from __future__ import annotations

from kgprobe.probing.backends.base import (
    BACKENDS,
    Backend,
    EngineStats,
    ScoredTokens,
    ScoringBackend,
    TrieNode,
    UnsupportedRequest,
    backend_catalog,
    get_backend,
    register_backend,
)
from kgprobe.probing.backends.causal import CausalBackend
from kgprobe.probing.backends.hf import HFCausal, HFMasked, HFSeq2Seq
from kgprobe.probing.backends.masked import MaskedBackend
from kgprobe.probing.backends.seq2seq import Seq2SeqBackend
from kgprobe.probing.backends.served import OpenAICompletions

__all__ = [
    "BACKENDS",
    "Backend",
    "CausalBackend",
    "EngineStats",
    "HFCausal",
    "HFMasked",
    "HFSeq2Seq",
    "MaskedBackend",
    "OpenAICompletions",
    "ScoredTokens",
    "ScoringBackend",
    "Seq2SeqBackend",
    "TrieNode",
    "UnsupportedRequest",
    "backend_catalog",
    "get_backend",
    "register_backend",
]
