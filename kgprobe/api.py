"""The Python API: one function per CLI command, so scripts and notebooks get the same behaviour.

The CLI parses arguments and calls these; these wire loaders, graph and probing together.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, Unpack, overload
from urllib.parse import urlsplit

from kgprobe.app.contents import GraphStats as GraphStats
from kgprobe.app.contents import stats as stats
from kgprobe.app.contents import stats_of
from kgprobe.app.contents import templates_import as templates_import
from kgprobe.app.contents import templates_list as templates_list
from kgprobe.app.db import db_home as db_home
from kgprobe.app.db import db_start as db_start
from kgprobe.app.db import db_status as db_status
from kgprobe.app.db import db_stop as db_stop
from kgprobe.app.db import db_wipe as db_wipe
from kgprobe.app.distractors import distractors as distractors
from kgprobe.app.evaluation import evaluate as evaluate
from kgprobe.app.index import IndexReport as IndexReport
from kgprobe.app.index import index as index
from kgprobe.app.options import (
    check_date,
    check_number,
    check_pids,
    check_seed,
    check_threads,
    check_threshold,
    shard_of,
)
from kgprobe.app.options import relations as relations_of
from kgprobe.app.probe_sets import export as export
from kgprobe.app.scores import UnknownFacts as UnknownFacts
from kgprobe.app.scores import unknown_facts as unknown_facts
from kgprobe.checks import DEFAULT_THRESHOLD
from kgprobe.config import Settings
from kgprobe.errors import ConfigError, InputError
from kgprobe.graph.client import Graph, connect
from kgprobe.graph.ingest import IngestSummary, check_ingest_options
from kgprobe.graph.ingest import ingest as ingest_records
from kgprobe.outputs import Owner, check_output_dir, check_owner
from kgprobe.progress import Progress
from kgprobe.records import ErrorRecord, Position, Record, SkipRecord
from kgprobe.types import GraphRow

if TYPE_CHECKING:
    from kgprobe.app.factor_pipeline import factor as factor
    from kgprobe.app.probe_sets import SetResults
    from kgprobe.graph.server import ManagedServer
    from kgprobe.probing.config import ProbeSummary
    from kgprobe.probing.measures.registry import MeasureValue, OnFact
    from kgprobe.probing.probe_set import Imported, SetHeader
    from kgprobe.probing.score import CandidateScore
    from kgprobe.probing.scores import Comparison, ScoredFact
    from kgprobe.reports.data import Report
    from kgprobe.reports.ladder import Ladder
    from kgprobe.reports.results import Results


def __getattr__(name: str) -> Any:
    """``factor`` is imported when first asked for: FACTOR's pipeline imports the scoring
    engine and with it torch (1.3 of the 1.9 CPU-s this module took to import), which an
    ``ingest``, ``db`` or ``stats`` call never needs (a bulk load's main process paid it too)."""
    if name == "factor":
        from kgprobe.app.factor_pipeline import factor

        return factor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- old keyword names (issue 40 #7) ----------------------------------------------------------


def _deprecated(where: str, old: str, new: str) -> None:
    import warnings

    warnings.warn(f"kgprobe.{where}({old}=...) is deprecated; use {new}=..., as the CLI's option",
                  DeprecationWarning, stacklevel=4)


def _records_for(
    sources: Sequence[str | Path],
    *,
    sparql: str | None,
    relations: Sequence[str] | None,
    subjects: Sequence[str] | None,
    language: str,
    ranks: Sequence[str] | None,
    limit: int | None,
    workers: int = 1,
    starts: dict[str, Position] | None = None,
    post: Callable[[list[Record]], list[Record]] | None = None,
) -> Iterator[Record]:
    """The records of ``sources`` and ``sparql``; ``post``: what the workers that parse a JSON
    dump apply to each chunk's records (kgprobe/loaders/wikidata_json.py `load_json`)."""
    from kgprobe.loaders import LOADERS, detect_format, open_source, sparql_records
    from kgprobe.loaders.common import Filters

    filters = Filters.make(relations=relations or None, language=language, ranks=ranks or None, limit=limit)
    for source in sources:
        start = (starts or {}).get(str(source))
        # a JSON dump or JSON lines (a resumable format): parsed in ``workers`` processes,
        # with checkpoints
        records = (open_source(source, filters, workers=workers, positions=True, start=start, post=post)
                   if LOADERS[detect_format(source)].resumable else open_source(source, filters))
        yield from _loaded_something(source, records, expect=limit != 0 and start is None)
    if sparql:
        yield from sparql_records(sparql, filters, subjects=list(subjects or []))


def _loaded_something(source: str | Path, records: Iterable[Record], *, expect: bool) -> Iterator[Record]:
    """Pass a file's records on; fail (after them) when the file gave nothing to write.

    A file whose every block was malformed — or that holds no Wikidata entity at all — must not
    end in a quiet exit 0 that looks like success; skips alone (e.g. only lexemes) are fine.
    """
    from kgprobe.loaders.validate import SKIP_REJECTED_ENTITY

    data = errors = skips = 0
    first: ErrorRecord | None = None
    for rec in records:
        if isinstance(rec, ErrorRecord):
            errors += 1
            first = first or rec
        elif isinstance(rec, Position):
            pass
        elif isinstance(rec, SkipRecord):
            skips += rec.reason != SKIP_REJECTED_ENTITY
        else:
            data += 1
        yield rec
    if data or skips or not expect:
        return
    if first is not None:
        raise InputError(
            f"{source}: nothing was loaded — all {errors} records malformed, first at "
            f"{first.location}: {first.message}"
        )
    raise InputError(f"{source}: nothing was loaded — no Wikidata entity in the file")


def _check_sources(sources: Sequence[str | Path], sparql: str | None, batch_size: int,
                   max_errors: int, workers: int = 1, relation: Sequence[str] | None = None,
                   limit: int | None = None) -> None:
    """Impossible options, no input, or a file of no known format: one line, before anything
    is read or written."""
    from kgprobe.loaders import detect_format

    check_pids(relation or ())
    check_number("--limit", limit, 0)
    check_number("--workers", workers, 1)
    check_ingest_options(batch_size, max_errors)
    if not sources and not sparql:
        raise InputError("nothing to ingest: give files or --sparql URL")
    for source in sources:
        detect_format(source)


def ingest_sources(
    sources: Sequence[str | Path],
    *,
    sparql: str | None = None,
    relation: Sequence[str] | None = None,
    subject: Sequence[str] | None = None,
    language: str = "en",
    rank: Sequence[str] | None = None,
    limit: int | None = None,
    batch_size: int = 5000,
    max_errors: int = 100,
    quiet: bool = False,
    settings: Settings | None = None,
    workers: int = 1,
    resume: bool = False,
    relations: Sequence[str] | None = None,
    subjects: Sequence[str] | None = None,
    ranks: Sequence[str] | None = None,
) -> IngestSummary:
    """Load files and/or a SPARQL endpoint into the graph, with a progress display.
    ``relation``, ``subject``, ``rank``: as ``--relation``, ``--subject``, ``--rank`` (lists;
    the old plural keywords still work and warn).

    A JSON dump or JSON lines file is parsed in ``workers`` processes (the same records for
    any number), and its checkpoints are saved under ``KGPROBE_HOME`` as batches commit
    (kgprobe/loaders/resume.py); ``resume`` starts each file at its checkpoint, with one line
    on stderr saying where. A file whose load completed has no checkpoint left."""
    import sys

    from kgprobe.loaders import LOADERS, detect_format
    from kgprobe.loaders.resume import (
        checkpoint_file,
        clear_checkpoint,
        load_checkpoint,
        save_checkpoint,
    )

    for old, value in (("relations", relations), ("subjects", subjects), ("ranks", ranks)):
        if value is not None:
            _deprecated("ingest_sources", old, old[:-1])
    relation, subject, rank = relation or relations, subject or subjects, rank or ranks

    _check_sources(sources, sparql, batch_size, max_errors, workers, relation, limit)
    settings = settings or Settings.load()
    home = settings.home
    starts: dict[str, Position] = {}
    for source in sources:  # fail on a bad file before touching the graph
        resumable = LOADERS[detect_format(source)].resumable
        if resume and resumable:
            start = load_checkpoint(home, source)
            if start is None:
                print(f"{source}: no checkpoint, reading from the start", file=sys.stderr)
            else:
                starts[str(source)] = start
                print(f"{source}: resuming at byte {start.offset:,} (line {start.line:,}), after "
                      "the last committed batch", file=sys.stderr)
        elif resumable and checkpoint_file(home, source).exists():
            print(f"{source}: a load of it was stopped; reading from the start (--resume would "
                  "continue after its last committed batch)", file=sys.stderr)
    records = _records_for(
        sources, sparql=sparql, relations=relation, subjects=subject, language=language,
        ranks=rank, limit=limit, workers=workers, starts=starts,
    )
    saving = True

    def checkpoint(position: Position) -> None:
        """Save a checkpoint; one that cannot be saved (a full disk under KGPROBE_HOME) is one
        warning line and no further checkpoints: the load itself goes on, and its own writes
        say whether the disk holds them."""
        nonlocal saving
        if not saving:
            return
        try:
            save_checkpoint(home, position)
        except OSError as exc:
            saving = False
            print(f"{position.source}: checkpoint not saved ({exc.strerror or exc}); the load goes "
                  "on, but --resume would start at an earlier checkpoint", file=sys.stderr)

    with connect(settings) as graph:
        summary = write_records(graph, records, batch_size=batch_size, max_errors=max_errors,
                                quiet=quiet, on_checkpoint=checkpoint)
    for source in sources:  # complete: nothing to resume
        clear_checkpoint(home, source)
    return summary


@contextlib.contextmanager
def _ingest_progress(
    quiet: bool,
) -> Iterator[tuple[Callable[[Iterable[Record]], Iterator[Record]], Callable[[IngestSummary], None]]]:
    """The progress line of an ingest (records, facts, rate; for a file read with positions
    also its bytes read, MB/s and ETA): redrawn on a terminal, periodic plain lines in a log
    (:mod:`kgprobe.progress`). Yields what watches the records for their positions and the
    ingest's ``on_flush``; the online ingest and the bulk load share it."""
    start = time.monotonic()
    seen: dict[str, Position] = {}  # the last position read, and the first of each source

    def watched(records: Iterable[Record]) -> Iterator[Record]:
        for rec in records:
            if rec.__class__ is Position:
                seen.setdefault(rec.source, rec)  # type: ignore[union-attr]
                seen[""] = rec  # type: ignore[assignment]
            yield rec

    with Progress("ingesting", enabled=not quiet) as progress:

        def on_flush(s: IngestSummary) -> None:
            now = time.monotonic()
            rate = s.records / max(now - start, 1e-9)
            text = (f"{s.entities:,} entities, {s.facts:,} facts, {sum(s.skipped.values()):,} "
                    f"skipped, {s.error_count} errors ({rate:,.0f} records/s)")
            last = seen.get("")
            if last is not None:
                text += "; " + _bytes_progress(last, seen[last.source], now - start)
            progress.describe(text)

        yield watched, on_flush


def write_records(
    graph: Any, records: Iterable[Record], *, batch_size: int = 5000, max_errors: int = 100,
    quiet: bool = False, on_checkpoint: Callable[[Position], None] | None = None,
) -> IngestSummary:
    """Ingest records with a progress line (`_ingest_progress`)."""
    with _ingest_progress(quiet) as (watched, on_flush):
        return ingest_records(graph, watched(records), batch_size=batch_size, error_budget=max_errors,
                      on_flush=on_flush, on_checkpoint=on_checkpoint)


def _bytes_progress(last: Position, first: Position, seconds: float) -> str:
    """``120.5/286.0 MB read (12.3 MB/s, ETA 0:00:14)``: bytes of the file as stored (the
    compressed ones for .gz/.bz2) read so far, the rate since this run's first chunk, and the
    time left at that rate."""
    from kgprobe.progress import clock_text

    done = last.read - first.read
    rate = done / max(seconds, 1e-9)
    text = f"{last.read / 1e6:,.1f}/{last.size / 1e6:,.1f} MB read ({rate / 1e6:,.1f} MB/s"
    if rate > 0 and last.size > last.read:
        text += f", ETA {clock_text((last.size - last.read) / rate)}"
    return text + ")"


def bulk_ingest(
    sources: Sequence[str | Path],
    directory: str | Path,
    *,
    neo4j_home: str | Path | None = None,
    sparql: str | None = None,
    relation: Sequence[str] | None = None,
    subject: Sequence[str] | None = None,
    language: str = "en",
    rank: Sequence[str] | None = None,
    limit: int | None = None,
    batch_size: int = 5000,
    max_errors: int = 100,
    quiet: bool = False,
    workers: int = 1,
    resume: bool = False,
) -> tuple[IngestSummary, str]:
    """The bulk first load of an empty database: the import files in ``directory``
    (graph/bulk.py), imported into ``neo4j_home``'s Neo4j database when given (the server
    stopped), or, when no ``NEO4J_URI`` is configured, into the managed ArcadeDB through its
    own GraphImporter (graph/bulk_arcadedb.py). Returns the summary and what is left to do, in
    one line.

    The files of a JSON dump are written with checkpoints in ``directory`` (at most one a
    minute, ``KGPROBE_BULK_CHECKPOINT_S``); ``resume`` continues a load that was stopped from
    its last one (the same sources and options), or, when its files were complete, goes
    straight to the import."""
    import sys

    from kgprobe.graph.bulk import (
        CHECKPOINT_FILE,
        DATABASE,
        BulkCheckpoints,
        ImportFiles,
        build_chunk,
        check_bulk_dir,
        check_neo4j_home,
        read_checkpoint,
        run_import,
        summary_of,
        write_import_files,
    )
    from kgprobe.loaders import LOADERS, detect_format
    from kgprobe.loaders.resume import position_of, position_record

    _check_sources(sources, sparql, batch_size, max_errors, workers, relation, limit)
    resumable = not sparql and all(LOADERS[detect_format(s)].resumable for s in sources)
    if resume and not resumable:
        raise ConfigError("--bulk --resume continues a load of JSON dumps or JSON lines files only "
                          "(--sparql and RDF files have no checkpoints): start again with an empty "
                          "--bulk directory")
    resolved = [str(Path(s).resolve()) for s in sources]
    context: dict[str, Any] = {"sources": resolved, "relation": sorted(relation or []),
               "subject": sorted(subject or []), "language": language, "rank": sorted(rank or []),
               "limit": limit}
    state = None
    if resume:
        check_bulk_dir(Path(directory), resume=True)
        state = read_checkpoint(Path(directory))
        if state.get("context") != context:
            raise ConfigError(f"--bulk {directory} --resume: the stopped load read other sources or "
                              f"options ({_context_text(state.get('context'))}); run it with those, "
                              "or start again with an empty --bulk directory")
    settings = Settings.load() if neo4j_home is None else None
    managed = settings is not None and settings.uri is None
    if neo4j_home is not None:
        check_neo4j_home(Path(neo4j_home))  # refused before any file is read
    if settings is not None and managed:
        from kgprobe.graph.bulk_arcadedb import refuse_non_empty

        check_bulk_dir(Path(directory), resume=resume)  # before the server is started
        _bulk_arcadedb(settings)
        with connect(settings) as graph:  # refused before any file is read
            refuse_non_empty(graph, str(settings.home))
    if state is not None and state.get("finished"):
        print(f"--bulk {directory}: its import files are complete; importing them", file=sys.stderr)
        files = ImportFiles(Path(directory), [str(a) for a in state["args"]],
                            summary_of(state["summary"]), [str(m) for m in state["multiline"]])
    else:
        starts: dict[str, Position] = {}
        todo = list(sources)
        if state is not None:
            saved = state.get("position")
            path = saved.get("path") if isinstance(saved, dict) else None
            where = Path(directory) / CHECKPOINT_FILE
            if not isinstance(path, str) or path not in resolved:
                raise ConfigError(f"--resume: {where} names no position in the sources; start again "
                                  "with an empty --bulk directory")
            at = resolved.index(path)
            source = todo[at]
            start = position_of(saved, source, where, "start again with an empty --bulk directory")
            todo, starts = todo[at:], {str(source): start}
            print(f"{source}: resuming the bulk load at byte {start.offset:,} (line {start.line:,}), "
                  "its last checkpoint", file=sys.stderr)
        records = _records_for(
            todo, sparql=sparql, relations=relation, subjects=subject, language=language,
            ranks=rank, limit=limit, workers=workers, starts=starts,
            post=build_chunk if workers > 1 else None,  # each worker formats its chunk's import rows
        )
        checkpoints = BulkCheckpoints(position_record, context, _checkpoint_seconds()) if resumable else None
        with _ingest_progress(quiet) as (watched, on_flush):
            files = write_import_files(watched(records), Path(directory), batch_size=batch_size,
                                       error_budget=max_errors, on_flush=on_flush,
                                       checkpoints=checkpoints, resume=state)
    if managed:
        return files.summary, _arcadedb_import(files, settings, batch_size, workers)
    if neo4j_home is None:
        return files.summary, (
            f"import files written to {files.directory}; import them with Neo4j stopped: "
            f"cd {files.directory} && neo4j-admin database import full {DATABASE} @import.args")
    run_import(files, Path(neo4j_home))
    return files.summary, (
        f"imported into {neo4j_home} (database {DATABASE}); start Neo4j: kgprobe's first "
        "connection creates the constraints and indexes")


#: Seconds between a bulk load's checkpoints (graph/bulk.py ``CHECKPOINT_SECONDS`` by default).
ENV_BULK_CHECKPOINT_S = "KGPROBE_BULK_CHECKPOINT_S"


def _checkpoint_seconds() -> float:
    """``KGPROBE_BULK_CHECKPOINT_S`` (0 to 3600 seconds), or graph/bulk.py's default."""
    import os

    from kgprobe.config import seconds_setting
    from kgprobe.graph.bulk import CHECKPOINT_SECONDS

    return seconds_setting(os.environ.get(ENV_BULK_CHECKPOINT_S), ENV_BULK_CHECKPOINT_S, CHECKPOINT_SECONDS)


def _context_text(context: Any) -> str:
    """A stopped bulk load's sources and options, as one line names them."""
    if not isinstance(context, dict):
        return "unknown"
    parts = [", ".join(map(str, context.get("sources") or [])) or "no files"]
    for k in ("relation", "subject", "rank"):
        if context.get(k):
            parts.append(f"--{k} " + ",".join(map(str, context[k])))
    if context.get("language") not in (None, "en"):
        parts.append(f"--language {context['language']}")
    if context.get("limit") is not None:
        parts.append(f"--limit {context['limit']}")
    return "; ".join(parts)


@dataclass(frozen=True)
class Ingested:
    """``kgprobe ingest``: what was loaded, and for a bulk load what is left to do (one line)."""

    summary: IngestSummary
    note: str | None = None


def ingest(
    sources: Sequence[str | Path] = (),
    *,
    sparql: str | None = None,
    relation: Sequence[str] | None = None,
    subject: Sequence[str] | None = None,
    language: str = "en",
    rank: Sequence[str] | None = None,
    limit: int | None = None,
    batch_size: int = 5000,
    max_errors: int = 100,
    workers: int | None = None,
    resume: bool = False,
    bulk: str | Path | None = None,
    neo4j_home: str | Path | None = None,
    quiet: bool = False,
) -> Ingested:
    """``kgprobe ingest``: load files and/or a SPARQL endpoint into the graph, online
    (:func:`ingest_sources`) or, with ``bulk`` (a new directory for the import files), as the
    first load of an empty database (:func:`bulk_ingest`). ``workers``: processes that parse a
    JSON dump (default: the machine's cores, less one for a graph server on this machine
    during an online ingest: `kgprobe.loaders.parallel.default_workers`)."""
    from kgprobe.loaders.parallel import default_workers

    if bulk is None and neo4j_home is not None:
        raise ConfigError("--neo4j-home goes with --bulk DIR (the directory of the import files)")
    check_number("--workers", workers, 1)
    if workers is None:
        workers = default_workers(server_here=bulk is None and _server_here(Settings.load()))
    if bulk is not None:
        summary, note = bulk_ingest(
            sources, bulk, neo4j_home=neo4j_home, sparql=sparql, relation=relation, subject=subject,
            language=language, rank=rank, limit=limit, batch_size=batch_size, max_errors=max_errors,
            quiet=quiet, workers=workers, resume=resume)
        return Ingested(summary, note)
    return Ingested(ingest_sources(
        sources, resume=resume, sparql=sparql, relation=relation, subject=subject, language=language,
        rank=rank, limit=limit, batch_size=batch_size, max_errors=max_errors, quiet=quiet,
        workers=workers))


def _server_here(settings: Settings) -> bool:
    """Whether the graph server runs on this machine: the managed one, or a ``NEO4J_URI`` whose
    host is this machine's loopback (the compose file's Neo4j)."""
    if settings.uri is None:
        return True
    try:
        host = urlsplit(settings.uri).hostname
    except ValueError:
        return False
    return host in ("localhost", "127.0.0.1", "::1")


def _bulk_arcadedb(settings: Settings) -> ManagedServer:
    """The managed server a bulk load imports into: ArcadeDB (its GraphImporter is ArcadeDB's
    own offline tool), or one line saying that the configured managed server is not it."""
    from kgprobe.graph.server import ManagedServer
    from kgprobe.graph.servers import graph_server

    server = graph_server(settings)
    if not isinstance(server, ManagedServer):
        raise ConfigError(f"--bulk loads the managed ArcadeDB only; the managed graph server is "
                          f"{settings.server!r} (set by {settings.server_from}): unset it, or "
                          "ingest without --bulk")
    return server


def _arcadedb_import(files: Any, settings: Any, batch_size: int, workers: int = 1) -> str:
    """Import ``files`` into the managed ArcadeDB (stopped for it), then the schema and what
    the importer cannot write (graph/bulk_arcadedb.py: its JSON lines written in ``workers``
    processes); returns the importer's closing line."""
    from kgprobe.graph.bulk_arcadedb import (
        run_graph_importer,
        write_after_import,
        write_arcadedb_files,
    )
    server = _bulk_arcadedb(settings)
    arcade = write_arcadedb_files(files, workers)
    closing = server.while_stopped(
        lambda java, classpath, database: run_graph_importer(arcade, java, classpath, database, settings.heap))
    with connect(settings) as graph:  # the first connection creates the constraints and indexes
        write_after_import(graph, arcade, batch_size)
        _check_unique(graph)
    return f"imported into the managed ArcadeDB ({settings.home}) by its GraphImporter: " + " ".join(
        closing.split())


def _check_unique(graph: Any) -> None:
    """One line, exit 4, where the imported data breaks a unique constraint (a key twice in the
    input: a statement id under two entities, say), which ArcadeDB then leaves out silently."""
    from kgprobe.graph.schema import missing_unique_constraints, repeated_key_error, repeated_values

    for label, prop in missing_unique_constraints(graph):
        values = repeated_values(graph, label, prop)
        if values:
            raise repeated_key_error(label, prop, values, "Load the input without --bulk (the online "
                                     "ingest merges them) after `kgprobe db wipe --yes`")


#: The demo's relations (docs/reports.md explains the choice): contrasts the report can show —
#: relations the default model knows well (country of citizenship, country) and badly (position
#: held, member of sports team), subjects with a popularity (every P17 and P39 subject, most P27
#: and P26 ones: DistFactAssessLM subjects), and facts with a past value (member of sports team;
#: drawn first) for staleness.
DEMO_RELATIONS = ("P27", "P17", "P36", "P26", "P39", "P54")
#: Facts per relation: the report's interval rule needs n >= 10 (kgprobe.stats.MIN_N_CI).
DEMO_FACTS_PER_RELATION = 10
#: Rounds of replacing the demo's unscorable facts by the next ones drawn (a relation whose
#: facts run out shows fewer).
DEMO_TOP_UPS = 3


def _demo_facts(graph: Any, summaries: Sequence[Any], per_relation: int) -> dict[str, list[str]]:
    """Per relation, the first ``per_relation`` facts of the demo's samples (in draw order) that
    carry a score of the demo's measure: the facts the demo shows."""
    from kgprobe.graph import probe_runs as pr
    from kgprobe.graph.results import fact_rows

    scored = {r["key"]: str(r["pid"]) for r in fact_rows(graph, pr.ScoreProps.parse(
        summaries[0].score_properties[0]))}
    shown: dict[str, list[str]] = {}
    for key in dict.fromkeys(k for s in summaries for k in s.fact_keys):
        pid = scored.get(key)
        if pid is not None and len(shown.setdefault(pid, [])) < per_relation:
            shown[pid].append(key)
    return shown


#: The shipped probe set's reference date (``kgprobe probe --set demo``): fixed, so that the set
#: is rebuilt with the same facts, past values and distractors whenever it is regenerated.
DEMO_SET_AT = "2025-01-01"
#: Where the shipped set lives in the package (kgprobe.probing.probe_set.SHIPPED names it).
DEMO_SET_FILE = Path(__file__).resolve().parent / "data" / "demo-set.parquet"


class DemoSetOptions(TypedDict):
    """:func:`demo_set_options`: the keywords of ``probe_set.set_config`` the demo set is
    exported with."""

    relations: tuple[str, ...]
    sample: int | None
    per_relation: int
    seed: int
    history_first: bool
    at: str


def demo_set_options() -> DemoSetOptions:
    """The options the shipped demo set is exported with: the demo's sample (its relations,
    facts per relation, seed 0, facts with a past value first) and ``probe``'s default
    measure, at :data:`DEMO_SET_AT`."""
    return {"relations": DEMO_RELATIONS, "sample": None, "per_relation": DEMO_FACTS_PER_RELATION,
            "seed": 0, "history_first": True, "at": DEMO_SET_AT}


def export_demo_set(path: str | Path = DEMO_SET_FILE, *, settings: Settings | None = None,
                    progress: bool = False) -> SetHeader:
    """Load the bundled demo graph and kgprobe's templates into the graph of ``settings`` and
    export the demo probe set to ``path`` (scripts/build_demo_set.py runs it on a fresh
    managed server); returns the set's header."""
    from kgprobe.graph.templates import demo_paths, import_own_templates
    from kgprobe.loaders.wikidata_json import load_json
    from kgprobe.probing import probe_set as ps

    graph_file, _ = demo_paths()
    with connect(settings) as graph:
        write_records(graph, load_json(graph_file), quiet=True)
        import_own_templates(graph)
        index_dir = Path(settings.home) / "indexes" / "semantic" if settings is not None else None
        return ps.export_set(graph, ps.set_config(**demo_set_options()), path, index_dir=index_dir,
                             progress=progress)


@dataclass(frozen=True)
class DemoResult:
    """``kgprobe demo``: what was loaded, the two probes' summaries (``probe_raw``: the raw
    wording's, None without ``compare_raw``), the report and its files, and the seconds of the
    load, the probes and the whole demo (``load``, ``probe``, ``total``)."""

    ingested: IngestSummary
    templates_imported: int
    graph: GraphStats
    probe: ProbeSummary
    probe_raw: ProbeSummary | None
    report: Report
    report_files: dict[str, str]
    seconds: dict[str, float]

    def to_dict(self) -> dict[str, object]:
        """The ``--json`` document (the report last)."""
        return {"ingested": self.ingested.to_dict(), "templates_imported": self.templates_imported,
                "graph": self.graph.to_dict(), "probe": self.probe.to_dict(),
                "probe_raw": None if self.probe_raw is None else self.probe_raw.to_dict(),
                "report_files": self.report_files, "seconds": self.seconds,
                "report": self.report.to_dict()}


def demo(
    *,
    model: str | Any | None = None,
    relations: Sequence[str] = DEMO_RELATIONS,
    per_relation: int = DEMO_FACTS_PER_RELATION,
    dtype: str = "float32",
    out: str | Path | None = None,
    quiet: bool = False,
    overwrite: bool = False,
    compare_raw: bool = True,
    no_cache: bool = False,
    settings: Settings | None = None,
) -> DemoResult:
    """The main job on a fresh install: start the graph, ingest the bundled demo graph and
    kgprobe's own templates, probe the default model on a seeded sample (seed 0, facts with a
    past value first) of ``per_relation`` facts of each demo relation with exactly ``kgprobe
    probe``'s defaults, write the scores back onto the FACT edges and write the report and the
    results files (with per-fact distractor scores) into ``out`` (default
    ``KGPROBE_HOME/demo-report/<model key>``: one directory per model, so a demo of another
    model never replaces this one's report; an ``out`` holding another model's report is
    refused unless ``overwrite``).

    With ``compare_raw`` (the default) the same facts are probed a second time with the labels
    written raw (``verbalizer="raw"``, the DFA paper's wording, under its own ``_vraw`` key) and
    the report compares the two wordings fact by fact (``report --vs-measure``): what the
    careful verbalizer changed (docs/measures.md), and lists every fact whose score moved with
    the sentences that changed and by how much (kgprobe.reports.wording). Sentences that read the same in both are not
    scored twice: the score cache answers them.

    ``model``: as :func:`probe` takes it (None: the default model; a served model by its URL
    or the CLI's ``--backend``, its backend opened once for all the demo's probes).

    Everything is idempotent: a second demo re-ingests nothing new and re-scores nothing.
    """
    from kgprobe.graph.templates import demo_paths, import_own_templates
    from kgprobe.loaders.wikidata_json import load_json
    from kgprobe.probing.config import (
        DEFAULT_MEASURES,
        DEFAULT_STRATEGY,
        check_model_name,
        measure_key,
    )
    from kgprobe.probing.engine import select_model
    from kgprobe.probing.run import probe as run_probe
    from kgprobe.reports.results import FactDetails
    from kgprobe.reports.write import report as build_report

    check_number("--per-relation", per_relation, 1)
    model = select_model(model)  # a served model (--backend, a URL): its backend, opened once
    if isinstance(model, str):
        check_model_name(model)  # a model not installed: one line, before anything is ingested
    if out:
        check_output_dir(out)  # before anything is ingested or probed
        check_owner(out, _owner_of(model, dtype, getattr(model, "label", None)), overwrite)
    settings = settings or Settings.load()
    graph_file, _ = demo_paths()
    started = time.monotonic()
    details, raw_details = FactDetails(), FactDetails()
    with connect(settings) as graph:
        summary = write_records(graph, load_json(graph_file), quiet=quiet)
        templates = import_own_templates(graph)
        stats = stats_of(graph)
        loaded = time.monotonic()

        def probe_demo(quota: dict[str, int], verbalizer: str, on_fact: Any) -> list[Any]:
            """One probe per quota (facts per relation): each relation's seeded sample."""
            by_quota: dict[int, list[str]] = {}
            for pid, q in quota.items():
                by_quota.setdefault(q, []).append(pid)
            return [run_probe(model, relations=tuple(pids), sample=None, per_relation=q, dtype=dtype,
                              seed=0, history_first=True, progress=not quiet, graph=graph,
                              verbalizer=verbalizer, on_fact=on_fact, cache=not no_cache)
                    for q, pids in sorted(by_quota.items())]

        quota = dict.fromkeys(relations, per_relation)
        summaries = probe_demo(quota, "careful", details)
        shown = _demo_facts(graph, summaries, per_relation)
        for _ in range(DEMO_TOP_UPS):  # an unscorable fact: the relation's next drawn one instead
            short = {p: per_relation - len(shown.get(p, [])) for p in relations
                     if len(shown.get(p, [])) < per_relation}
            if not short:
                break
            quota.update({p: quota[p] + k for p, k in short.items()})
            summaries += probe_demo({p: quota[p] for p in short}, "careful", details)
            shown = _demo_facts(graph, summaries, per_relation)
        probe_summary = summaries[0]
        fact_keys = [k for p in relations for k in shown.get(p, [])]
        raw_summary = None
        if compare_raw:  # the same facts (same seed, settings and quotas), labels written raw
            raw_summary = probe_demo(quota, "raw", raw_details)[0]
        probed = time.monotonic()
        careful = measure_key(DEFAULT_MEASURES[0], DEFAULT_STRATEGY, 5)
        raw = measure_key(DEFAULT_MEASURES[0], DEFAULT_STRATEGY, 5, verbalizer="raw")
        out_dir = Path(out) if out else settings.home / "demo-report" / probe_summary.model_key
        rep, paths = build_report(probe_summary.model_key, out=out_dir, graph=graph,
                                  details=details.records, facts=fact_keys,
                                  measure=careful, vs_measure=raw if compare_raw else None,
                                  vs_details=raw_details.records if compare_raw else None,
                                  overwrite=overwrite, command_seconds=time.monotonic() - started)
    return DemoResult(summary, templates, stats, probe_summary, raw_summary, rep,
                      {k: str(v) for k, v in paths.items()},
                      {"load": round(loaded - started, 1), "probe": round(probed - loaded, 1),
                       "total": round(time.monotonic() - started, 1)})


# --- probe runs (issue 7): thin wrappers over kgprobe.probing.run and kgprobe.reports ---


def _owner_of(model: str | Any, dtype: str, name: str | None = None) -> Owner | None:
    """The owner (kgprobe.outputs.check_owner) a probe of ``model`` will write, for the check
    before any work; None when the name is not a model name (the probe refuses it itself). A
    model object is named by ``model_name`` (or not at all: checked after the run's key)."""
    from kgprobe.errors import ConfigError
    from kgprobe.probing.run import model_key

    if not isinstance(model, str):
        model = name
        if model is None:
            return None
    try:
        return {"models": [model_key(model, dtype)]}
    except ConfigError:
        return None


class ProbeOptions(TypedDict, total=False):
    """:func:`probe`'s keywords besides ``model``, ``set``, ``output_path`` and ``overwrite``,
    for its overloads (a misspelled keyword is a mypy error, and a ``TypeError`` when run);
    ``test_api_probe_has_a_real_signature`` holds them equal to :func:`probe`'s parameters."""

    relation: str | Sequence[str] | None
    sample: int | None
    per_relation: int | None
    measure: str | Sequence[str] | None
    strategy: str | None
    n: int | None
    seed: int
    threshold: float
    at: str | None
    max_labels: int
    max_subject_labels: int
    max_templates: int | None
    end: str
    label_rule: str
    verbalizer: str
    on_model_mismatch: str
    dtype: str
    threads: int
    batch_facts: int
    write_batch: int
    pipeline: int
    force: bool
    history_first: bool
    shard: str | tuple[int, int] | None
    no_cache: bool
    dry_run: bool
    tokenizer: Any
    model_name: str | None
    index_dir: str | Path | None
    progress: bool
    settings: Settings | None
    graph: Graph | None
    on_fact: OnFact | None
    relations: Sequence[str] | None
    measures: Sequence[str] | None
    max_object_labels: int | None
    write_facts: int | None
    cache: bool | None


def _renamed(where: str, new: str, value: Any, default: Any, old: str, old_value: Any) -> Any:
    """The value of keyword ``new``, or of its old name ``old`` (which warns); a value under
    both names is a ``ConfigError``."""
    if old_value is None:
        return value
    _deprecated(where, old, new)
    if value != default:
        raise ConfigError(f"kgprobe.{where}: {new}= and its old name {old}= both given")
    return old_value


@overload
def probe(model: str | Any = ..., *, output_path: str | Path | None = ..., overwrite: bool = ...,
          set: None = None, **options: Unpack[ProbeOptions]) -> ProbeSummary: ...


@overload
def probe(model: str | Any = ..., *, output_path: str | Path | None = ..., overwrite: bool = ...,
          set: str | Path, **options: Unpack[ProbeOptions]) -> SetResults: ...


def probe(
    model: str | Any = "smollm2-135m",
    *,
    output_path: str | Path | None = None,
    overwrite: bool = False,
    set: str | Path | None = None,
    relation: str | Sequence[str] | None = None,
    sample: int | None = 60,
    per_relation: int | None = None,
    measure: str | Sequence[str] | None = None,
    strategy: str | None = None,
    n: int | None = None,
    seed: int = 0,
    threshold: float = DEFAULT_THRESHOLD,
    at: str | None = None,
    max_labels: int = 3,
    max_subject_labels: int = 1,
    max_templates: int | None = None,
    end: str = "auto",
    label_rule: str = "names",
    verbalizer: str = "careful",
    on_model_mismatch: str = "suffix",
    dtype: str = "float32",
    threads: int = 1,
    batch_facts: int = 16,
    write_batch: int = 256,
    pipeline: int = 2,
    force: bool = False,
    history_first: bool = False,
    shard: str | tuple[int, int] | None = None,
    no_cache: bool = False,
    dry_run: bool = False,
    tokenizer: Any = None,
    model_name: str | None = None,
    index_dir: str | Path | None = None,
    progress: bool = True,
    settings: Settings | None = None,
    graph: Graph | None = None,
    on_fact: OnFact | None = None,
    relations: Sequence[str] | None = None,
    measures: Sequence[str] | None = None,
    max_object_labels: int | None = None,
    write_facts: int | None = None,
    cache: bool | None = None,
) -> ProbeSummary | SetResults:
    """Probe ``model`` on a stratified, seeded sample of facts and write the scores onto the
    FACT edges; returns the run's ``kgprobe.probing.config.ProbeSummary``. ``model`` is a name
    or path, the URL of an OpenAI-compatible server (``http://host:port/v1``), a transformers
    model object (with ``tokenizer=``, and ``model_name=`` for its score keys) or a scoring
    backend (docs/backends.md). The keywords are the CLI's options (``measure``: default kmin;
    ``sample`` 0: every fact; ``shard``: ``"K/N"`` or (K, N)); see
    :func:`kgprobe.probing.run.probe`. The old names ``relations``, ``measures``,
    ``max_object_labels``, ``write_facts`` and ``cache`` still work and warn
    (:data:`PROBE_KEYWORDS`).

    With ``set`` (a probe set's path, or ``"demo"``: the set shipped with kgprobe), score that
    set with no graph instead and return its scores as data: a
    ``kgprobe.app.probe_sets.SetResults`` (``.facts`` and ``.relations`` DataFrames, the
    report's figures, the summary); see :func:`probe_set`. What the set fixes (relation,
    per_relation, measure, strategy, n, at) and ``dry_run`` are refused with it.

    With ``output_path``, the report and results files of THIS run's facts (its sample,
    including facts skipped as already scored) under the run's first measure are written there
    (``results.json``, ``samples.jsonl`` with the distractor scores of the facts this call
    scored; docs/results.md; their paths in the summary's ``output_files``); a directory holding
    another model's report is refused before the model is loaded, unless ``overwrite``."""
    from kgprobe.probing.config import DEFAULT_MEASURES
    from kgprobe.probing.engine import select_model
    from kgprobe.probing.run import probe as run

    relation = _renamed("probe", "relation", relation, None, "relations", relations)
    measure = _renamed("probe", "measure", measure, None, "measures", measures)
    max_labels = _renamed("probe", "max_labels", max_labels, 3, "max_object_labels", max_object_labels)
    write_batch = _renamed("probe", "write_batch", write_batch, 256, "write_facts", write_facts)
    no_cache = _renamed("probe", "no_cache", no_cache, False, "cache", None if cache is None else not cache)
    if set is not None:
        if dry_run:
            raise ConfigError("--dry-run previews a probe of the graph; a probe set's facts and "
                              "prompts are in its file (drop --set or --dry-run)")
        given = [option for option, value in (("--relation", relation), ("--per-relation", per_relation),
                                              ("--measure", measure), ("--strategy", strategy), ("-n", n),
                                              ("--at", at)) if value]
        if given:
            raise ConfigError(f"--set: the probe set fixes what is sampled and measured; drop "
                              f"{', '.join(given)} (or export another set)")
        return probe_set(set, model, output_path, tokenizer=tokenizer, model_name=model_name,
                         dtype=dtype, threads=threads, shard=shard, cache=not no_cache,
                         progress=progress, overwrite=overwrite)
    wanted = relations_of(relation)
    check_pids(wanted)
    for option, value, low in (("--sample", sample, 0), ("--per-relation", per_relation, 1), ("-n", n, 1)):
        check_number(option, value, low)
    check_seed(seed)
    check_threshold(threshold)
    check_date(at)
    for option, value, low in (("--max-labels", max_labels, 1), ("--max-subject-labels", max_subject_labels, 1),
                               ("--max-templates", max_templates, 1), ("--batch-facts", batch_facts, 1),
                               ("--write-batch", write_batch, 1)):
        check_number(option, value, low)
    check_threads(threads)
    model = select_model(model)  # a served model (--backend, a URL): its backend, opened once
    go = functools.partial(
        run, model, tokenizer=tokenizer, model_name=model_name, relations=wanted,
        sample=sample or None,  # --sample 0: every fact
        per_relation=per_relation,
        measures=(measure,) if isinstance(measure, str) else tuple(measure or DEFAULT_MEASURES),
        strategy=strategy, n=n, seed=seed, threshold=threshold, at=at, max_object_labels=max_labels,
        max_templates=max_templates, dtype=dtype, threads=threads, batch_facts=batch_facts,
        write_facts=write_batch, pipeline=pipeline, force=force, history_first=history_first, end=end,
        label_rule=label_rule, verbalizer=verbalizer, max_subject_labels=max_subject_labels,
        on_model_mismatch=on_model_mismatch, shard=shard_of(shard), cache=not no_cache,
        index_dir=index_dir, progress=progress, settings=settings, graph=graph, dry_run=dry_run)
    if output_path is None or dry_run:
        return go(on_fact=on_fact)
    # before the model is loaded or a fact scored
    check_output_dir(output_path, "--output-path")
    check_owner(output_path, _owner_of(model, dtype, model_name), overwrite, "--output-path")
    from kgprobe.graph import probe_runs as pr
    from kgprobe.reports.results import FactDetails
    from kgprobe.reports.write import report as build

    started = time.monotonic()
    details = FactDetails()

    def both(fact: Any, values: dict[str, MeasureValue]) -> None:
        details(fact, values)
        if on_fact is not None:
            on_fact(fact, values)

    summary = go(on_fact=both)
    key = pr.ScoreProps.parse(summary.score_properties[0]).measure_key
    _, paths = build(summary.model_key, out=output_path, measure=key, settings=settings, graph=graph,
                     details=details.records, facts=summary.fact_keys, overwrite=overwrite,
                     command_seconds=time.monotonic() - started)
    summary.output_files = {k: str(v) for k, v in paths.items()}
    return summary


def export_set(
    path: str | Path, *, relation: str | Sequence[str] | None = None, sample: int | None = 60,
    per_relation: int | None = None, measure: str | Sequence[str] | None = None,
    strategy: str | None = None, n: int | None = None, seed: int = 0,
    threshold: float = DEFAULT_THRESHOLD, at: str | None = None, max_labels: int = 3,
    max_subject_labels: int = 1, end: str = "auto", label_rule: str = "names",
    verbalizer: str = "careful", max_templates: int | None = None, batch_facts: int = 16,
    history_first: bool = False, progress: bool = True, settings: Settings | None = None,
    relations: Sequence[str] | None = None, measures: Sequence[str] | None = None,
    max_object_labels: int | None = None,
) -> SetHeader:
    """``kgprobe export``: write a probe set of the graph's facts to ``path``; returns its
    header (content hash, facts, snapshot). The keywords are ``kgprobe export``'s options
    (:func:`kgprobe.app.probe_sets.export`; docs/probe-sets.md; ``sample`` 0: every fact); the
    old names ``relations``, ``measures`` and ``max_object_labels`` still work and warn."""
    relation = _renamed("export_set", "relation", relation, None, "relations", relations)
    measure = _renamed("export_set", "measure", measure, None, "measures", measures)
    max_labels = _renamed("export_set", "max_labels", max_labels, 3, "max_object_labels", max_object_labels)
    return export(path, relation=relation, sample=sample, per_relation=per_relation, measure=measure,
                  strategy=strategy, n=n, seed=seed, threshold=threshold, at=at, max_labels=max_labels,
                  max_subject_labels=max_subject_labels, end=end, label_rule=label_rule,
                  verbalizer=verbalizer, max_templates=max_templates, batch_facts=batch_facts,
                  history_first=history_first, progress=progress, settings=settings).header


def probe_set(path: str | Path, model: str | Any, output_path: str | Path | None = None, *,
              tokenizer: Any = None, model_name: str | None = None, dtype: str = "float32",
              threads: int = 1, shard: str | tuple[int, int] | None = None, cache: bool = True,
              progress: bool = True, overwrite: bool = False, measure: str | None = None) -> SetResults:
    """``kgprobe probe --set``: score the probe set at ``path`` (or ``"demo"``, the shipped
    set) with ``model`` (a name, path, or a transformers model object with ``tokenizer=``)
    with no graph. Returns a ``kgprobe.app.probe_sets.SetResults``: ``.facts`` (per fact) and
    ``.relations`` (per relation) as DataFrames, ``.figures()``, ``.report``, ``.document``
    (results.json), ``.summary``. With ``output_path``, ``scores.parquet`` and the usual report
    files are written there. ``shard``: ``"K/N"`` as ``--shard``, or (K, N); the rest: see
    :func:`kgprobe.app.probe_sets.score_probe_set`."""
    from kgprobe.app.probe_sets import score_probe_set

    check_threads(threads)
    return score_probe_set(path, model, output_path, tokenizer=tokenizer, model_name=model_name,
                           dtype=dtype, threads=threads, shard=shard_of(shard), cache=cache,
                           progress=progress, overwrite=overwrite, measure=measure)


def import_scores(*paths: str | Path, settings: Settings | None = None) -> list[Imported]:
    """``kgprobe import-scores``: write scores files of probe sets onto the FACT edges and
    record their probe runs; one dict per file (its run id and status)."""
    from kgprobe.probing import probe_set as ps

    with connect(settings) as graph:
        return ps.import_scores(graph, paths)


def score(context: str, candidates: Sequence[str], *, model: str | Any = "smollm2-135m",
          tokenizer: Any = None, dtype: str = "float32", threads: int = 1, eos: bool = False,
          no_cache: bool | None = None, cache_path: Path | None = None,
          add_eos: bool | None = None) -> list[CandidateScore]:
    """log P(candidate | context) for each candidate with its rank, as ``kgprobe score``;
    ``model`` as in :func:`probe`; see :func:`kgprobe.probing.score.score_candidates`.
    ``eos``: as ``--eos`` (its old name ``add_eos`` warns). ``no_cache``: as ``--no-cache``
    (False: the score cache the CLI uses; by default none, or ``cache_path``)."""
    from kgprobe.probing.score import default_score_cache, score_candidates

    check_threads(threads)
    eos = _renamed("score", "eos", eos, False, "add_eos", add_eos)
    if no_cache is not None and cache_path is None:  # as --no-cache: the user's cache
        cache_path = None if no_cache else default_score_cache()
    return score_candidates(context, candidates, model=model, tokenizer=tokenizer, dtype=dtype,
                            threads=threads, add_eos=eos, cache_path=cache_path)


def unknown(
    model: str, *, relation: str | Sequence[str] | None = None, threshold: float | None = None,
    measure: str | None = None, settings: Settings | None = None, below: float | None = None,
) -> list[ScoredFact]:
    """The facts ``model`` does not know (score below ``threshold``; default the run's), as
    ``ScoredFact`` dataclasses; ``relation``: one PID or several (``below``: the old name of
    ``threshold``, warns). :func:`unknown_facts` also names the measure and threshold."""
    if below is not None:
        _deprecated("unknown", "below", "threshold")
    return unknown_facts(model, relation=relation, threshold=threshold, measure=measure,
                         below=below, settings=settings).facts


def cypher(query: str, params: Mapping[str, object] | None = None, *, param: Sequence[str] = (),
           write: bool = False, settings: Settings | None = None) -> list[GraphRow]:
    """Rows of a Cypher query of your own (or of the .cypher/.cql/.txt file it names),
    read-only unless ``write``; ``params`` as values, ``param`` as the CLI's ``NAME=VALUE``
    (:func:`kgprobe.app.contents.cypher`; docs/data-model.md has queries to start from)."""
    from kgprobe.app.contents import cypher as run

    return run(query, params, param=param, write=write, settings=settings)


def compare(
    a: str, b: str, *, measure: str | None = None, threshold: float | None = None,
    settings: Settings | None = None,
) -> Comparison:
    """What ``a`` knows and ``b`` does not, and the reverse (a ``kgprobe.probing.scores.Comparison``)."""
    from kgprobe.probing.scores import compare_in

    check_threshold(threshold)
    with connect(settings) as graph:
        return compare_in(graph, a, b, measure=measure, threshold=threshold)


def report(
    model: str, *, vs: str | None = None, out: str | Path | None = None, measure: str | None = None,
    threshold: float | None = None, seed: int = 0, by: str = "relation", type_of: str = "subject",
    overwrite: bool = False, vs_measure: str | None = None, relation: Sequence[str] = (),
    settings: Settings | None = None,
) -> tuple[Report, dict[str, Path]]:
    """The knowledge-gap report (``kgprobe.reports.data.Report``) by relation, subject/object type
    or popularity and, with ``out``, the paths of the report and results files written there
    (a directory holding the report of other models is refused unless ``overwrite``).
    ``vs``: paired against another model; ``vs_measure``: against the same model under another
    measure key (e.g. ``kmin_temp_sem_n5_vraw``, the raw wording); ``relation``: only these
    relations' facts (PIDs)."""
    from kgprobe.reports.write import report as build

    check_seed(seed)
    check_threshold(threshold)
    check_pids(relations_of(relation))
    return build(model, vs=vs, out=out, measure=measure, threshold=threshold, seed=seed, by=by,
                 type_of=type_of, settings=settings, overwrite=overwrite, vs_measure=vs_measure,
                 relations=relation)


def ladder(
    models: Sequence[str], *, out: str | Path | None = None, measure: str | None = None,
    threshold: float | None = None, seed: int = 0, overwrite: bool = False,
    settings: Settings | None = None,
) -> tuple[Ladder, dict[str, Path]]:
    """Three or more models on the facts all were probed on (``kgprobe.reports.ladder.Ladder``): each
    model's mean with its interval, and each consecutive pair compared fact by fact; with
    ``out``, ladder.json/.csv/.md/.svg written there (a directory holding a report, or another
    ladder, is refused unless ``overwrite``)."""
    from kgprobe.reports.ladder import build_ladder, write_ladder

    check_seed(seed)
    check_threshold(threshold)
    if out:
        from kgprobe.outputs import check_output_dir

        check_output_dir(out)
    with connect(settings) as graph:
        lad = build_ladder(graph, list(models), measure=measure, threshold=threshold, seed=seed)
    return lad, (write_ladder(lad, out, overwrite=overwrite) if out else {})


def load_results(path: str | Path) -> Results:
    """A report directory's results (results.json, samples) as pandas DataFrames
    (``kgprobe.reports.results.Results``: ``.document``, ``.relations``, ``.samples``); needs
    the ``results`` extra."""
    from kgprobe.reports.results import load

    return load(path)
