"""kgprobe: measure what language models know, fact by fact, against a knowledge graph."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
