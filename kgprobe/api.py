"""The Python API: one function per CLI command, so scripts and notebooks get the same behaviour.

The CLI parses arguments and calls these; these wire loaders, graph and probing together.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from kgprobe.config import Settings
from kgprobe.errors import InputError
from kgprobe.graph.client import connect
from kgprobe.graph.ingest import IngestSummary, check_ingest_options, ingest
from kgprobe.outputs import check_output_dir, check_owner
from kgprobe.progress import Progress
from kgprobe.records import ErrorRecord, Record, SkipRecord


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
    for source in sources:
        yield from _loaded_something(source, open_source(source, filters), expect=limit != 0)
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


def _check_sources(sources: Sequence[str | Path], sparql: str | None, batch_size: int, max_errors: int) -> None:
    """Impossible options, no input, or a file of no known format: one line, before anything
    is read or written."""
    from kgprobe.loaders import detect_format

    check_ingest_options(batch_size, max_errors)
    if not sources and not sparql:
        raise InputError("nothing to ingest: give files or --sparql URL")
    for source in sources:
        detect_format(source)


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
    _check_sources(sources, sparql, batch_size, max_errors)
    records = _records_for(
        sources, sparql=sparql, relations=relations, subjects=subjects, language=language,
        ranks=ranks, limit=limit,
    )
    with connect(settings) as graph:
        return write_records(graph, records, batch_size=batch_size, max_errors=max_errors, quiet=quiet)


@contextlib.contextmanager
def _ingest_progress(quiet: bool) -> Iterator[Callable[[IngestSummary], None]]:
    """The progress line of an ingest (records, facts, rate): redrawn on a terminal, periodic
    plain lines in a log (:mod:`kgprobe.progress`); yields the ingest's ``on_flush``."""
    start = time.monotonic()
    with Progress("ingesting", enabled=not quiet) as progress:

        def on_flush(s: IngestSummary) -> None:
            rate = s.records / max(time.monotonic() - start, 1e-9)
            progress.describe(f"{s.entities:,} entities, {s.facts:,} facts, {sum(s.skipped.values()):,} "
                              f"skipped, {s.error_count} errors ({rate:,.0f} records/s)")

        yield on_flush


def write_records(
    graph: Any, records: Iterable[Record], *, batch_size: int = 5000, max_errors: int = 100, quiet: bool = False
) -> IngestSummary:
    """Ingest records with a progress line."""
    with _ingest_progress(quiet) as on_flush:
        return ingest(graph, records, batch_size=batch_size, error_budget=max_errors, on_flush=on_flush)


def bulk_ingest(
    sources: Sequence[str | Path],
    directory: str | Path,
    *,
    neo4j_home: str | Path | None = None,
    sparql: str | None = None,
    relations: Sequence[str] | None = None,
    subjects: Sequence[str] | None = None,
    language: str = "en",
    ranks: Sequence[str] | None = None,
    limit: int | None = None,
    batch_size: int = 5000,
    max_errors: int = 100,
    quiet: bool = False,
) -> tuple[IngestSummary, str]:
    """The bulk first load of an empty Neo4j database (graph/bulk.py): the import files in
    ``directory``, imported into ``neo4j_home``'s database when given (the server stopped).
    Returns the summary and what is left to do, in one line."""
    from kgprobe.graph.bulk import DATABASE, check_neo4j_home, run_import, write_import_files

    _check_sources(sources, sparql, batch_size, max_errors)
    if neo4j_home is not None:
        check_neo4j_home(Path(neo4j_home))  # refused before any file is read
    records = _records_for(
        sources, sparql=sparql, relations=relations, subjects=subjects, language=language,
        ranks=ranks, limit=limit,
    )
    with _ingest_progress(quiet) as on_flush:
        files = write_import_files(records, Path(directory), batch_size=batch_size,
                                   error_budget=max_errors, on_flush=on_flush)
    if neo4j_home is None:
        return files.summary, (
            f"import files written to {files.directory}; import them with Neo4j stopped: "
            f"cd {files.directory} && neo4j-admin database import full {DATABASE} @import.args")
    run_import(files, Path(neo4j_home))
    return files.summary, (
        f"imported into {neo4j_home} (database {DATABASE}); start Neo4j: kgprobe's first "
        "connection creates the constraints and indexes")


#: The demo's relations (docs/reports.md explains the choice): contrasts the report can show —
#: relations the default model knows well (country of citizenship, country) and badly (position
#: held, member of sports team), subjects with a popularity (every P17 and P39 subject, most P27
#: and P26 ones: DistFactAssessLM subjects), and facts with a past value (member of sports team;
#: drawn first) for staleness.
DEMO_RELATIONS = ("P27", "P17", "P36", "P26", "P39", "P54")
#: Facts per relation: the report's interval rule needs n >= 10 (kgprobe.stats.MIN_N_CI).
DEMO_FACTS_PER_RELATION = 10


def demo(
    *,
    model: str = "smollm2-135m",
    relations: Sequence[str] = DEMO_RELATIONS,
    per_relation: int = DEMO_FACTS_PER_RELATION,
    dtype: str = "float32",
    out: str | Path | None = None,
    quiet: bool = False,
    overwrite: bool = False,
    compare_raw: bool = True,
    settings: Settings | None = None,
) -> dict[str, Any]:
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

    Everything is idempotent: a second demo re-ingests nothing new and re-scores nothing.
    """
    from kgprobe.graph.stats import graph_stats
    from kgprobe.graph.templates import demo_paths, import_own_templates
    from kgprobe.loaders.wikidata_json import load_json
    from kgprobe.probing.config import DEFAULT_MEASURES, DEFAULT_STRATEGY, measure_key
    from kgprobe.probing.run import probe as run_probe
    from kgprobe.reports.results import FactDetails
    from kgprobe.reports.write import report as build_report

    if out:
        check_output_dir(out)  # before anything is ingested or probed
        check_owner(out, _owner_of(model, dtype), overwrite)
    settings = settings or Settings.load()
    graph_file, _ = demo_paths()
    started = time.monotonic()
    details, raw_details = FactDetails(), FactDetails()
    with connect(settings) as graph:
        summary = write_records(graph, load_json(graph_file), quiet=quiet)
        templates = import_own_templates(graph)
        stats = graph_stats(graph)
        loaded = time.monotonic()
        probe_summary = run_probe(
            model, relations=tuple(relations), sample=None, per_relation=per_relation, dtype=dtype,
            seed=0, history_first=True, progress=not quiet, graph=graph, on_fact=details,
        )
        raw_summary = None
        if compare_raw:  # the same sample (same seed and settings), labels written raw
            raw_summary = run_probe(
                model, relations=tuple(relations), sample=None, per_relation=per_relation,
                dtype=dtype, seed=0, history_first=True, progress=not quiet, graph=graph,
                verbalizer="raw", on_fact=raw_details,
            )
        probed = time.monotonic()
        careful = measure_key(DEFAULT_MEASURES[0], DEFAULT_STRATEGY, 5)
        raw = measure_key(DEFAULT_MEASURES[0], DEFAULT_STRATEGY, 5, verbalizer="raw")
        out_dir = Path(out) if out else settings.home / "demo-report" / probe_summary.model_key
        rep, paths = build_report(probe_summary.model_key, out=out_dir, graph=graph,
                                  details=details.records, facts=probe_summary.fact_keys,
                                  measure=careful, vs_measure=raw if compare_raw else None,
                                  vs_details=raw_details.records if compare_raw else None,
                                  overwrite=overwrite, command_seconds=time.monotonic() - started)
    return {
        "ingested": summary.to_dict(),
        "templates_imported": templates,
        "graph": stats,
        "probe": probe_summary.to_dict(),
        "probe_raw": raw_summary.to_dict() if raw_summary is not None else None,
        "report": rep,
        "report_files": {k: str(v) for k, v in paths.items()},
        "seconds": {
            "load": round(loaded - started, 1),
            "probe": round(probed - loaded, 1),
            "total": round(time.monotonic() - started, 1),
        },
    }


# --- probe runs (issue 7): thin wrappers over kgprobe.probing.run and kgprobe.reports ---


def _owner_of(model: str | Any, dtype: str, name: str | None = None) -> dict[str, Any] | None:
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


def probe(model: str | Any = "smollm2-135m", *, output_path: str | Path | None = None,
          overwrite: bool = False, **kwargs: Any) -> Any:
    """Probe ``model`` on a stratified, seeded sample of facts and write the scores onto the
    FACT edges; returns a ``kgprobe.probing.run.ProbeSummary``. ``model`` is a name or path,
    a transformers model object (with ``tokenizer=``, and ``model_name=`` for its score keys)
    or a scoring backend (docs/backends.md). Keyword arguments: see
    :func:`kgprobe.probing.run.probe` (tokenizer, model_name, relations, sample, measures,
    strategy, n, seed, threshold, at, max_object_labels, max_templates, dtype, threads, cache,
    index_dir, progress, settings, graph).

    With ``output_path``, the report and results files of THIS run's facts (its sample,
    including facts skipped as already scored) under the run's first measure are written there
    (``results.json``, ``samples.jsonl`` with the distractor scores of the facts this call
    scored; docs/results.md); a directory holding another model's report is refused before the
    model is loaded, unless ``overwrite``."""
    from kgprobe.probing.run import probe as run

    if output_path is None:
        return run(model, **kwargs)
    # before the model is loaded or a fact scored
    check_output_dir(output_path, "--output-path")
    check_owner(output_path, _owner_of(model, str(kwargs.get("dtype", "float32")), kwargs.get("model_name")),
                overwrite, "--output-path")
    from kgprobe.graph import probe_runs as pr
    from kgprobe.reports.results import FactDetails
    from kgprobe.reports.write import report as build

    started = time.monotonic()
    details = FactDetails()
    summary = run(model, on_fact=details, **kwargs)
    measure = pr.ScoreProps.parse(summary.score_properties[0]).measure_key
    _, paths = build(summary.model_key, out=output_path, measure=measure, settings=kwargs.get("settings"),
                     graph=kwargs.get("graph"), details=details.records, facts=summary.fact_keys,
                     overwrite=overwrite, command_seconds=time.monotonic() - started)
    summary.output_files = {k: str(v) for k, v in paths.items()}  # type: ignore[attr-defined]
    return summary


def export_set(path: str | Path, *, settings: Settings | None = None, progress: bool = True,
               **options: Any) -> dict[str, Any]:
    """``kgprobe export``: write a probe set of the graph's facts to ``path``; returns its
    header (content hash, facts, snapshot). ``options``: ``probe``'s sampling and measure
    options (relations, sample, per_relation, measures, strategy, n, seed, threshold, at, ...;
    docs/probe-sets.md)."""
    from kgprobe.probing import probe_set as ps

    config = ps.set_config(**options)
    with connect(settings) as graph:
        return ps.export_set(graph, config, path, progress=progress)


def probe_set(path: str | Path, model: str | Any, output_path: str | Path, **kwargs: Any) -> Any:
    """``kgprobe probe --set``: score the probe set at ``path`` with ``model`` (a name, path,
    or a transformers model object with ``tokenizer=``) with no graph; writes
    ``output_path/scores.parquet`` and returns the ``ProbeSummary``. Keyword arguments: see
    :func:`kgprobe.probing.probe_set.probe_with_set` (tokenizer, model_name, dtype, threads,
    shard, cache, progress)."""
    from kgprobe.probing.probe_set import probe_with_set

    return probe_with_set(path, model, output_path, **kwargs)


def import_scores(*paths: str | Path, settings: Settings | None = None) -> list[dict[str, Any]]:
    """``kgprobe import-scores``: write scores files of probe sets onto the FACT edges and
    record their probe runs; one dict per file (its run id and status)."""
    from kgprobe.probing import probe_set as ps

    with connect(settings) as graph:
        return ps.import_scores(graph, paths)


def score(context: str, candidates: Sequence[str], *, model: str | Any = "smollm2-135m",
          tokenizer: Any = None, **kwargs: Any) -> Any:
    """log P(candidate | context) for each candidate with its rank, as ``kgprobe score``;
    ``model`` as in :func:`probe`. Keyword arguments: see
    :func:`kgprobe.probing.score.score_candidates` (dtype, threads, add_eos, cache_path)."""
    from kgprobe.probing.score import score_candidates

    return score_candidates(context, candidates, model=model, tokenizer=tokenizer, **kwargs)


def unknown(
    model: str, *, relation: str | None = None, below: float | None = None, measure: str | None = None,
    settings: Settings | None = None,
) -> list[Any]:
    """The facts ``model`` does not know (score below ``below``), as ``ScoredFact`` dataclasses."""
    from kgprobe.probing.scores import unknown_in

    with connect(settings) as graph:
        return unknown_in(graph, model, relation=relation, below=below, measure=measure)[1]


def cypher(query: str, params: dict[str, Any] | None = None, *, write: bool = False,
           settings: Settings | None = None) -> list[dict[str, Any]]:
    """Rows of a Cypher query of your own, read-only unless ``write``
    (:func:`kgprobe.graph.query.run_query`; docs/data-model.md has queries to start from)."""
    from kgprobe.graph.query import run_query

    with connect(settings) as graph:
        return run_query(graph, query, params, write=write)


def compare(
    a: str, b: str, *, measure: str | None = None, threshold: float | None = None,
    settings: Settings | None = None,
) -> Any:
    """What ``a`` knows and ``b`` does not, and the reverse (a ``kgprobe.probing.scores.Comparison``)."""
    from kgprobe.probing.scores import compare_in

    with connect(settings) as graph:
        return compare_in(graph, a, b, measure=measure, threshold=threshold)


def report(
    model: str, *, vs: str | None = None, out: str | Path | None = None, measure: str | None = None,
    threshold: float | None = None, seed: int = 0, by: str = "relation", type_of: str = "subject",
    overwrite: bool = False, vs_measure: str | None = None, settings: Settings | None = None,
) -> tuple[Any, dict[str, Path]]:
    """The knowledge-gap report (``kgprobe.reports.data.Report``) by relation, subject/object type
    or popularity and, with ``out``, the paths of the report and results files written there
    (a directory holding the report of other models is refused unless ``overwrite``).
    ``vs``: paired against another model; ``vs_measure``: against the same model under another
    measure key (e.g. ``kmin_temp_sem_n5_vraw``, the raw wording)."""
    from kgprobe.reports.write import report as build

    return build(model, vs=vs, out=out, measure=measure, threshold=threshold, seed=seed, by=by,
                 type_of=type_of, settings=settings, overwrite=overwrite, vs_measure=vs_measure)


def ladder(
    models: Sequence[str], *, out: str | Path | None = None, measure: str | None = None,
    threshold: float | None = None, seed: int = 0, overwrite: bool = False,
    settings: Settings | None = None,
) -> tuple[Any, dict[str, Path]]:
    """Three or more models on the facts all were probed on (``kgprobe.reports.ladder.Ladder``): each
    model's mean with its interval, and each consecutive pair compared fact by fact; with
    ``out``, ladder.json/.csv/.md/.svg written there (a directory holding a report, or another
    ladder, is refused unless ``overwrite``)."""
    from kgprobe.reports.ladder import build_ladder, write_ladder

    if out:
        from kgprobe.outputs import check_output_dir

        check_output_dir(out)
    with connect(settings) as graph:
        lad = build_ladder(graph, list(models), measure=measure, threshold=threshold, seed=seed)
    return lad, (write_ladder(lad, out, overwrite=overwrite) if out else {})


def load_results(path: str | Path) -> Any:
    """A report directory's results (results.json, samples) as pandas DataFrames
    (``kgprobe.reports.results.Results``: ``.document``, ``.relations``, ``.samples``); needs
    the ``results`` extra."""
    from kgprobe.reports.results import load

    return load(path)
