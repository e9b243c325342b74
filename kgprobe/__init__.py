"""kgprobe: measure what language models know, fact by fact, against a knowledge graph."""

from __future__ import annotations

from typing import Any

from kgprobe._version import __version__

#: Functions of the Python API, imported on first use so that ``import kgprobe`` stays light.
_API = ("probe", "score", "unknown", "compare", "report", "ladder", "ingest_sources", "demo",
        "load_results", "cypher", "export_set", "probe_set", "import_scores")

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        from kgprobe import api

        return getattr(api, name)
    raise AttributeError(f"module 'kgprobe' has no attribute {name!r}")
