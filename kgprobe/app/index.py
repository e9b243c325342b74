"""``kgprobe index``: the semantic index built, or brought up to date, with the settings a user
chooses (the fit's sample, the dimension, worker processes) before any probe needs it; the same
function from the CLI and :mod:`kgprobe.api`, options checked before the graph is contacted.

A probe, ``kgprobe distractors`` and a probe set's export then keep those settings for that
directory (:func:`kgprobe.probing.semantic.ensure_index` given none keeps the recorded ones), so a
large graph's index is built once, on every core, and only updated after ingests."""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from kgprobe.checks import check_number
from kgprobe.graph.client import connect
from kgprobe.probing.distractors import default_index_dir
from kgprobe.probing.semantic import (
    StaleIndexError,
    build_index,
    ensure_index,
    kept_settings,
    read_manifest,
)

#: ``--workers`` at most: processes beyond the machine's cores only wait
MAX_WORKERS = 1024


@dataclass
class IndexReport:
    """What ``kgprobe index`` did: ``action`` is "current" (nothing to do), "updated" (only the
    entities the graph's changes touched were embedded) or "built" (every entity embedded: a
    first build, other settings, ``rebuild``, or an update large enough to refit)."""

    directory: str
    action: str
    entities_indexed: int
    entities_in_graph: int
    entities_embedded: int
    #: entities the model was fitted on (its sample: ``settings["sample"]`` is only the most)
    entities_fitted: int
    index_kind: str
    settings: dict[str, object]
    seconds: float
    #: IVF lists a query visits (0: an exact index), and the recall@10 against exact search the
    #: build measured there (None: not measured; the index is exact or was built before)
    nprobe: int = 0
    recall_at_10: float | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _build_record(d: Path) -> object:
    """The manifest's record of the last build or update (None without an index): a check that
    finds the index current leaves it as it was (it may record the journal's mark beside it)."""
    try:
        return read_manifest(d).get("build")
    except StaleIndexError:
        return None


def index(index_dir: str | Path | None = None, *, sample: int | None = None, dim: int | None = None,
          workers: int = 1, rebuild: bool = False, progress: bool = True) -> IndexReport:
    """Bring the semantic index in ``index_dir`` (default: the one every probe uses) up to date
    with the graph. Its settings are those it was built with (the defaults for a new one), with
    ``sample`` and ``dim`` replaced where given; other settings than the recorded ones, or
    ``rebuild``, mean a full build. ``workers`` processes embed the entities (the fit itself is
    one process)."""
    check_number("--sample", sample, 1)
    check_number("--dim", dim, 1)
    check_number("--workers", workers, 1, MAX_WORKERS)
    d = Path(index_dir) if index_dir is not None else default_index_dir()
    base = kept_settings(d)
    settings = replace(base, sample=base.sample if sample is None else sample,
                       dim=base.dim if dim is None else dim)
    before = _build_record(d)
    started = time.monotonic()
    with connect() as graph:
        if rebuild:
            idx = build_index(graph, d, settings, workers=workers, progress=progress)
        else:
            idx = ensure_index(graph, d, settings, workers=workers, progress=progress)
    seconds = time.monotonic() - started
    st = idx.stats
    if before is not None and _build_record(d) == before:
        action, embedded = "current", 0
    else:
        embedded = st.n_embedded
        action = "built" if embedded + st.resumed_from >= len(idx) or st.retrained else "updated"
    record = _build_record(d)
    fitted = int(record.get("n_sample", 0)) if isinstance(record, dict) else 0
    ivf = st.index_kind.startswith("IndexIVF")
    return IndexReport(os.fspath(d), action, len(idx), st.n_graph or len(idx), embedded,
                       fitted, st.index_kind, asdict(idx.settings), round(seconds, 3),
                       idx.nprobe if ivf else 0,
                       next((r for p, r, _ in reversed(st.recall_steps) if p == idx.nprobe), None))
