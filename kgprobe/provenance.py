"""Provenance of a run: kgprobe's code version, the libraries that compute scores, a stable
hash of a configuration and the time, recorded on every ProbeRun node and results file; and
the ProbeRun's record itself (:class:`RunProvenance`, :func:`read_run`).

At the bottom of the house: it imports nothing of kgprobe but its version and vocabulary.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypedDict

from kgprobe._version import __version__
from kgprobe.types import (
    PID,
    ConfigHash,
    JSONObject,
    MeasureKey,
    MeasureName,
    ModelKey,
    Properties,
    RunId,
)


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


class MeasureSpec(TypedDict):
    """One measure of a run as its ProbeRun records it: the name it is registered under, the
    property key it writes, its parameters, extra value names and report section."""

    name: MeasureName
    key: MeasureKey
    params: JSONObject  # the measure's own settings (a plug-in's too), stored as JSON
    extras: list[str]
    section: str


class EndMarkerRecord(TypedDict):
    """The end marker a run asked for (``choice``) and what it stood for (``kind``, ``text``)."""

    choice: str
    kind: str
    text: str | None


#: RunProvenance fields stored as JSON text on the ProbeRun (a graph property holds no map),
#: with the ``default`` their encoder used (``str``: settings may hold a Path or a date)
_JSON_FIELDS: dict[str, Callable[[Any], str] | None] = {
    "measure_specs": str, "measure_params": str, "end_marker": None, "templates": None,
    "relation_config_hashes": None, "graph_snapshot": None, "library_versions": None,
    "environment": str, "unscorable_reasons": None,
}


@dataclass(frozen=True)
class RunProvenance:
    """A ProbeRun's record (its provenance; docs/probing.md, "The ProbeRun"): written once as
    the run starts (:meth:`props`), read back by :func:`read_run`. The fields keep the order of
    the stored properties; JSON-encoded ones are held decoded. Fields a run sets later (id,
    finished, seconds, unscorable reasons, contexts cut) or an older run lacks are None."""

    status: str | None = None
    started: str | None = None
    model: str | None = None
    model_key: ModelKey | None = None
    model_fingerprint: str | None = None
    model_kind: str | None = None
    model_base_url: str | None = None
    dtype: str | None = None
    device: str | None = None
    measures: list[MeasureName] | None = None
    measure_keys: list[MeasureKey] | None = None
    measure_specs: list[MeasureSpec] | None = None
    score_properties: list[str] | None = None
    measure_params: JSONObject | None = None  # stored as JSON, read with the keys checked
    end_marker: EndMarkerRecord | None = None
    label_rule: str | None = None
    verbalizer: str | None = None
    strategy: str | None = None
    n: int | None = None
    seed: int | None = None
    threshold: float | None = None
    sample: int | None = None
    relations: list[PID] | None = None
    per_relation: int | None = None
    history_first: bool | None = None
    shard: str | None = None  # "K/N"
    reference_date: int | None = None
    templates: dict[PID, list[str]] | None = None  # template ids
    config_hash: ConfigHash | None = None
    relation_config_hashes: dict[MeasureName, dict[PID, ConfigHash]] | None = None
    graph_snapshot: dict[str, int] | None = None
    facts_hash: str | None = None
    code_version: str | None = None
    git_hash: str | None = None
    library_versions: dict[str, str] | None = None
    facts_planned: int | None = None
    facts_skipped: int | None = None
    facts_scored: int | None = None
    facts_unscorable: int | None = None
    batch_facts: int | None = None
    max_templates: int | None = None
    environment: JSONObject | None = None  # stored as JSON, read with the keys checked
    #: the content hash of the probe set a ``probe --set`` run scored
    probe_set: str | None = None
    # --- set by the graph or as the run ends ---
    id: RunId | None = None
    finished: str | None = None
    seconds: float | None = None
    unscorable_reasons: dict[str, int] | None = None
    contexts_cut: int | None = None

    def props(self) -> Properties:
        """The ProbeRun's properties as the run starts: every field up to ``environment``, then
        ``probe_set`` where set, JSON fields encoded (the one writer of the record)."""
        out: Properties = {}
        for f in fields(self):
            if f.name == "probe_set":
                if self.probe_set is not None:
                    out["probe_set"] = self.probe_set
                break
            v = getattr(self, f.name)
            out[f.name] = json.dumps(v, default=_JSON_FIELDS[f.name]) if f.name in _JSON_FIELDS else v
        return out


_NAMES = frozenset(f.name for f in fields(RunProvenance))


def read_run(props: Mapping[str, Any]) -> RunProvenance:
    """A ProbeRun's properties as a :class:`RunProvenance`: the one reader of the record. JSON
    fields are decoded (text that does not decode is kept as it was stored); properties the
    record does not know (the run's owner) are left out, missing ones are None."""
    out: Properties = {}
    for k in _NAMES & set(props):
        v = props[k]
        if k in _JSON_FIELDS and isinstance(v, str):
            with contextlib.suppress(ValueError):
                v = json.loads(v)
        out[k] = v
    return RunProvenance(**out)
