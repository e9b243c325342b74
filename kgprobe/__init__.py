"""kgprobe: measure what language models know, fact by fact, against a knowledge graph."""

from __future__ import annotations

from typing import Any

from kgprobe._version import __version__

#: Functions of the Python API, imported on first use so that ``import kgprobe`` stays light.
_API = ("probe", "score", "unknown", "compare", "report", "ladder", "ingest_sources", "demo",
        "load_results", "cypher", "export_set", "probe_set", "import_scores",
        # the workflows of the other commands (``kgprobe.api`` also has ``stats``, named as the
        # command, but ``kgprobe.stats`` is the statistics module)
        "ingest", "export", "evaluate", "distractors", "factor", "unknown_facts",
        "templates_import", "templates_list", "db_start", "db_stop", "db_status", "db_wipe")

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        from kgprobe import api

        return getattr(api, name)
    raise AttributeError(f"module 'kgprobe' has no attribute {name!r}")
