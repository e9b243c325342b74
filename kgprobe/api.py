"""The Python API: one function per CLI command, so scripts and notebooks get the same behaviour.

The CLI parses arguments and calls these; these wire loaders, graph and probing together.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from kgprobe.config import Settings
from kgprobe.errors import InputError
from kgprobe.graph.client import connect
from kgprobe.graph.ingest import Ingestor, IngestSummary
from kgprobe.records import Record


def _records_for(
    sources: Sequence[str | Path],
    *,
    sparql: str | None,
    relations: Sequence[str] | None,
    subjects: Sequence[str] | None,
    language: str,
    ranks: Sequence[str] | None,
    limit: int | None,
) -> Iterator[Record]:
    from kgprobe.loaders import open_source, sparql_records
    from kgprobe.loaders.common import Filters

    filters = Filters.make(relations=relations or None, language=language, ranks=ranks or None, limit=limit)
    missing = [str(s) for s in sources if not Path(s).exists()]
    if missing:
        raise InputError(f"no such file: {', '.join(missing)}")
    for source in sources:
        yield from open_source(source, filters)
    if sparql:
        yield from sparql_records(sparql, filters, subjects=list(subjects or []))


def ingest_sources(
    sources: Sequence[str | Path],
    *,
    sparql: str | None = None,
    relations: Sequence[str] | None = None,
    subjects: Sequence[str] | None = None,
    language: str = "en",
    ranks: Sequence[str] | None = None,
    limit: int | None = None,
    batch_size: int = 5000,
    max_errors: int = 100,
    quiet: bool = False,
    settings: Settings | None = None,
) -> IngestSummary:
    """Load files and/or a SPARQL endpoint into the graph, with a progress display."""
    if not sources and not sparql:
        raise InputError("nothing to ingest: give files or --sparql URL")
    records = _records_for(
        sources, sparql=sparql, relations=relations, subjects=subjects, language=language,
        ranks=ranks, limit=limit,
    )
    with connect(settings) as graph:
        return write_records(graph, records, batch_size=batch_size, max_errors=max_errors, quiet=quiet)


def write_records(
    graph: Any, records: Iterable[Record], *, batch_size: int = 5000, max_errors: int = 100, quiet: bool = False
) -> IngestSummary:
    """Ingest records with a live progress line (records, facts, rate)."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    start = time.monotonic()
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), disable=quiet, transient=False
    ) as progress:
        task = progress.add_task("ingesting", total=None)

        def on_flush(s: IngestSummary) -> None:
            rate = s.records / max(time.monotonic() - start, 1e-9)
            progress.update(
                task,
                description=f"ingesting: {s.entities:,} entities, {s.facts:,} facts, "
                f"{sum(s.skipped.values()):,} skipped, {s.error_count} errors ({rate:,.0f} records/s)",
            )

        ingestor = Ingestor(graph, batch_size=batch_size, error_budget=max_errors, on_flush=on_flush)
        for record in records:
            ingestor.add(record)
        return ingestor.finish()


def demo(*, quiet: bool = False, settings: Settings | None = None) -> dict[str, Any]:
    """The main job on a fresh install: start the graph, ingest the bundled demo graph and
    kgprobe's own templates, and return what the graph holds."""
    from kgprobe.graph.stats import graph_stats
    from kgprobe.graph.templates import demo_paths, import_own_templates
    from kgprobe.loaders.wikidata_json import load_json

    graph_file, _ = demo_paths()
    started = time.monotonic()
    with connect(settings) as graph:
        summary = write_records(graph, load_json(graph_file), quiet=quiet)
        templates = import_own_templates(graph)
        stats = graph_stats(graph)
    return {
        "ingested": summary.to_dict(),
        "templates_imported": templates,
        "graph": stats,
        "seconds": round(time.monotonic() - started, 1),
    }
