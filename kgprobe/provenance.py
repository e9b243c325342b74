"""Provenance of a run: kgprobe's code version, the libraries that compute scores, a stable
hash of a configuration and the time, recorded on every ProbeRun node and results file.

At the bottom of the house: it imports nothing of kgprobe but its version.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from kgprobe._version import __version__


def code_version() -> dict[str, str | None]:
    """kgprobe's version and, in a git checkout, the commit (``-dirty`` with local changes)."""
    git: str | None = None
    root = Path(__file__).resolve().parents[1]  # the checkout, not kgprobe/
    if (root / ".git").exists():
        try:
            out = subprocess.run(
                ["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=12"],
                capture_output=True, text=True, timeout=5, check=False,
            )
            git = out.stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            git = None
    return {"kgprobe": __version__, "git": git}


def library_versions() -> dict[str, str]:
    """Versions of the libraries whose behaviour changes scores or their storage."""
    import importlib.metadata as md

    out = {}
    for dist in ("torch", "transformers", "neo4j", "faiss-cpu"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            continue
    return out


def config_hash(obj: Any) -> str:
    """16 hex digits of the SHA-256 of ``obj`` as canonical JSON (same settings, same hash)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def now() -> str:
    """UTC now, ISO 8601 to the second."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
