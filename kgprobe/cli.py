"""The command line: thin wrappers that parse, call one library function and print.

Expected failures (`KgprobeError`) become one clear line on stderr and a non-zero exit code.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from rich.console import Console

from kgprobe.errors import KgprobeError

app = typer.Typer(
    name="kgprobe",
    help="Measure what language models know, fact by fact, against a knowledge graph.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console()
err_console = Console(stderr=True)


@app.callback()
def _root() -> None:
    """Measure what language models know, fact by fact, against a knowledge graph."""


@app.command()
def version() -> None:
    """Print kgprobe's version."""
    from kgprobe import __version__

    console.print(__version__)


# --- commands are added below this line, one function each; keep them thin -----------------

db_app = typer.Typer(help="Manage the local graph server (ArcadeDB over Bolt, 127.0.0.1 only).", no_args_is_help=True)
app.add_typer(db_app, name="db")


def _server() -> Any:
    from kgprobe.config import Settings
    from kgprobe.errors import ConfigError
    from kgprobe.graph.server import ManagedServer

    settings = Settings.load()
    if settings.uri:
        raise ConfigError(f"NEO4J_URI is set ({settings.uri}): that server is not managed by kgprobe")
    return ManagedServer(settings)


@db_app.command("start")
def db_start() -> None:
    """Start the managed graph server (no-op when it runs)."""
    info = _server().start()
    console.print(f"graph server running: {info.uri} (pid {info.pid}, data in {info.home})")


@db_app.command("stop")
def db_stop() -> None:
    """Stop the managed graph server."""
    stopped = _server().stop()
    console.print("graph server stopped" if stopped else "graph server was not running")


@db_app.command("status")
def db_status(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Say whether the graph server runs, where, and where its files are."""
    import json

    from kgprobe.config import Settings, config_path

    settings = Settings.load()
    if settings.uri:
        status = {"managed": False, "uri": settings.uri, "user": settings.user, "config": str(config_path())}
    else:
        info = _server().info()
        status = {
            "managed": True,
            "running": info.running,
            "pid": info.pid,
            "uri": info.uri,
            "http_port": info.http_port,
            "home": str(info.home),
            "config": str(config_path()),
        }
    if as_json:
        print(json.dumps(status))
    else:
        for key, value in status.items():
            console.print(f"{key:10} {value}")


@db_app.command("wipe")
def db_wipe(yes: bool = typer.Option(False, "--yes", help="Do not ask for confirmation.")) -> None:
    """Delete every node and edge of the managed graph."""
    server = _server()
    if not yes and not typer.confirm(f"delete the whole graph in {server.home}?"):
        raise typer.Exit(1)
    server.wipe()
    console.print("graph wiped")


@app.command()
def ingest(
    sources: list[str] = typer.Argument(None, help="Files: Wikidata JSON dump (.json/.gz/.bz2), entity JSON, N-Triples, Turtle."),
    sparql: str | None = typer.Option(None, "--sparql", help="A SPARQL endpoint URL (Wikidata-shaped)."),
    relation: list[str] = typer.Option(None, "--relation", "-r", help="Only these relations (PIDs); repeatable."),
    subject: list[str] = typer.Option(None, "--subject", "-s", help="SPARQL only: only these subjects (QIDs)."),
    language: str = typer.Option("en", help="Language of labels, aliases and descriptions."),
    rank: list[str] = typer.Option(None, "--rank", help="Ranks to keep (default: preferred, normal)."),
    limit: int | None = typer.Option(None, help="Stop after this many entities per source."),
    batch_size: int = typer.Option(5000, help="Records per transaction."),
    max_errors: int = typer.Option(100, help="Malformed records tolerated before stopping."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Load Wikidata facts into the graph (idempotent: re-running creates no duplicates)."""
    from kgprobe.api import ingest_sources

    summary = ingest_sources(
        sources or [], sparql=sparql, relations=relation, subjects=subject, language=language,
        ranks=rank, limit=limit, batch_size=batch_size, max_errors=max_errors, quiet=as_json,
    )
    _print_summary(summary.to_dict(), as_json)


def _print_summary(data: dict[str, Any], as_json: bool) -> None:
    import json

    if as_json:
        print(json.dumps(data, ensure_ascii=False))
        return
    from rich.table import Table

    table = Table(show_header=False, box=None)
    for key, value in data.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}: {v}" for k, v in value.items()) or "-"
        elif isinstance(value, list):
            if not value:
                continue
            value = "\n".join(str(v) for v in value)
        table.add_row(key.replace("_", " "), str(value))
    console.print(table)


@app.command()
def stats(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Report what the graph holds."""
    import json

    from kgprobe.graph.client import connect
    from kgprobe.graph.stats import graph_stats

    with connect() as graph:
        data = graph_stats(graph)
    if as_json:
        print(json.dumps(data, ensure_ascii=False))
        return
    per_relation = data.pop("per_relation")
    _print_summary(data, False)
    from rich.table import Table

    table = Table("relation", "label", "facts", title="facts per relation")
    for row in per_relation[:30]:
        table.add_row(row["pid"], row["label"] or "", str(row["facts"]))
    if per_relation:
        console.print(table)


templates_app = typer.Typer(help="Relation templates: import them into the graph, list them.", no_args_is_help=True)
app.add_typer(templates_app, name="templates")


@templates_app.command("import")
def templates_import(
    file: str = typer.Argument(..., help="Template file (or a folder of P*.jsonl / P*.txt for pararel, lpaqa)."),
    fmt: str = typer.Option(..., "--format", "-f", help="lama, pararel, lpaqa, wikifactdiff, bear, kamel, templama or kgprobe."),
    relation: str | None = typer.Option(None, "--relation", "-r", help="Only this relation (PID); names the relation of a single file."),
) -> None:
    """Import relation templates into the graph (idempotent: re-importing adds nothing)."""
    from kgprobe.graph.client import connect
    from kgprobe.graph.templates import import_templates
    from kgprobe.loaders.templates import read_templates

    with connect() as graph:
        n = import_templates(graph, read_templates(file, fmt, relation))
    console.print(f"{n} templates imported")


@templates_app.command("list")
def templates_list(
    relation: str | None = typer.Option(None, "--relation", "-r", help="Only this relation (PID)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON lines."),
) -> None:
    """List the templates stored in the graph."""
    import json
    from dataclasses import asdict

    from kgprobe.graph.client import connect
    from kgprobe.graph.templates import list_templates

    with connect() as graph:
        rows = list_templates(graph, relation)
    if as_json:
        for t in rows:
            print(json.dumps(asdict(t), ensure_ascii=False))
        return
    from rich.table import Table

    table = Table("relation", "style", "source", "text", title=f"{len(rows)} templates")
    for t in rows:
        table.add_row(t.pid, t.style, t.source, t.text)
    console.print(table)


@app.command()
def demo(
    per_relation: int = typer.Option(10, "--per-relation", help="Facts per demo relation (intervals need >= 10)."),
    model: str = typer.Option("smollm2-135m", "--model", "-m", help="Model to probe."),
    dtype: str = typer.Option("float32", help="float32 (reference) or bfloat16 (3-4x faster on CPU)."),
    out: str | None = typer.Option(None, help="Report directory (default: KGPROBE_HOME/demo-report)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Load the bundled demo graph and templates, probe the default model on 10 facts of each of
    six demo relations with `kgprobe probe`'s defaults, write the scores back, and print the
    per-relation report (HTML report, results.json and samples.jsonl in the report directory)."""
    import json

    from kgprobe.api import demo as run_demo
    from kgprobe.reporting import print_report

    result = run_demo(model=model, per_relation=per_relation, dtype=dtype, out=out, quiet=as_json)
    rep = result.pop("report")
    if as_json:
        result["report"] = rep.to_dict()
        print(json.dumps(result, ensure_ascii=False, default=str))
        return
    graph = result["graph"]
    console.rule("demo graph")
    console.print(
        f"{graph['entities']:,} entities, {graph['facts']:,} facts ({graph['temporal_facts']:,} dated) "
        f"over {len(graph['per_relation'])} relations; {graph['templates']} templates"
    )
    console.rule("knowledge gaps per relation")
    print_report(rep, console)
    secs = result["seconds"]
    console.print(
        f"report: {result['report_files'].get('html')}; results: {result['report_files'].get('results')}  "
        f"(load {secs['load']} s, probe {secs['probe']} s, total {secs['total']} s)"
    )


@app.command()
def distractors(
    subject: str = typer.Argument(..., help="Subject: QID or exact label/alias."),
    relation: str = typer.Argument(..., help="Relation: PID or label/alias."),
    obj: str | None = typer.Option(None, "--object", "-o", help="Object (QID or label); default: the one valid at --at."),
    strategy: str = typer.Option("temp+sem", "--strategy", "-s", help="random, sem, temp+sem or appropt."),
    n: int = typer.Option(10, "-n", help="How many distractors."),
    seed: int = typer.Option(0, help="Seed of the random strategy."),
    at: str | None = typer.Option(None, "--at", help="Reference date YYYY-MM-DD for temporal distractors (default today)."),
    model: str | None = typer.Option(None, "--model", help="appropt: model name, GGUF or HF directory."),
    template: str | None = typer.Option(None, "--template", help="appropt: object-last template with [X] and [Y]."),
    index_dir: str | None = typer.Option(None, "--index-dir", help="Semantic index directory (built or rebuilt when stale)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Distractors of a fact (subject, relation, object): ranked, each with why it qualified."""
    import json

    from kgprobe.probing.distractors import distractors_command

    res = distractors_command(
        subject, relation, obj, strategy=strategy, n=n, seed=seed, at=at, model=model,
        template=template, index_dir=index_dir,
    )
    if as_json:
        print(json.dumps(res.to_dict(), ensure_ascii=False))
        return
    from rich.table import Table

    title = f"{res.strategy} distractors of ({res.subject}, {res.relation}, {res.object} {res.object_label or ''})"
    table = Table("#", "qid", "label", "reason", "score", "shared types", title=title)
    for d in res.distractors:
        table.add_row(str(d.rank), d.qid, d.label or "", d.reason,
                      "" if d.score is None else f"{d.score:.4f}", ", ".join(d.shared_types))
    console.print(table)
    if res.reason:
        console.print(f"[yellow]{res.reason}[/]", highlight=False)


@app.command()
def score(
    context: str = typer.Argument(..., help="The context, e.g. \"The capital of France is\"."),
    candidates: list[str] = typer.Argument(..., help="Continuations to score, e.g. \" Paris\"."),
    model: str = typer.Option("smollm2-135m", "--model", "-m",
                              help="Registry name, GGUF file, local HF directory or hub id."),
    dtype: str = typer.Option("float32", help="float32 (reference) or bfloat16 (faster on CPU)."),
    threads: int = typer.Option(1, help="CPU threads for torch."),
    add_eos: bool = typer.Option(False, "--eos", help="Also score end-of-sequence after each candidate."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the score cache."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Log-probability of each candidate after CONTEXT, per token, and its rank."""
    import dataclasses
    import json

    from kgprobe.probing.score import default_score_cache, score_candidates

    rows = score_candidates(context, candidates, model=model, dtype=dtype, threads=threads,
                            add_eos=add_eos, cache_path=None if no_cache else default_score_cache())
    if as_json:
        print(json.dumps([dataclasses.asdict(r) for r in rows], ensure_ascii=False))
        return
    for r in rows:
        per_token = " ".join(f"{t!r}:{v:.3f}" for t, v in zip(r.tokens, r.token_logprobs, strict=True))
        console.print(f"{r.rank:>3}  {r.logprob:9.4f}  {r.candidate!r}  [{per_token}]", highlight=False)


@app.command()
def factor(
    file: str = typer.Argument(..., help="A FACTOR CSV (news_factor.csv, expert_factor.csv, ...)."),
    model: str = typer.Option("smollm2-135m", "--model", "-m",
                              help="Registry name, GGUF file, local HF directory or hub id."),
    limit: int | None = typer.Option(None, help="Score only the first N rows."),
    prefix_column: str = typer.Option("turncated_prefixes",
                                      help="turncated_prefixes (official) or full_prefix."),
    dtype: str = typer.Option("float32", help="float32 (reference) or bfloat16 (faster on CPU)."),
    threads: int = typer.Option(1, help="CPU threads for torch."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """FACTOR accuracy: the share of rows whose true completion has the highest mean
    per-token log-probability given the prefix."""
    import json

    from kgprobe.probing.measures.factor import run_factor_file

    result = run_factor_file(file, model, limit=limit, prefix_column=prefix_column, dtype=dtype,
                             threads=threads, progress=not as_json)
    if as_json:
        print(json.dumps(result, ensure_ascii=False))
        return
    console.print(f"FACTOR accuracy {result['accuracy']:.4f} ({result['correct']}/{result['items']}) "
                  f"— {result['model']} on {result['file']}", highlight=False)


@app.command()
def probe(
    model: str = typer.Option("smollm2-135m", "--model", "-m", help="Registry name, GGUF file or local HF directory."),
    relations: list[str] = typer.Option(None, "--relations", "-r", help="Only these relations (PIDs); repeatable."),
    sample: int | None = typer.Option(60, "--sample", help="Facts in all, split evenly over the relations (0 = every fact)."),
    measure: list[str] = typer.Option(None, "--measure", help="kmin (Min@n, default) or kavg (Avg@n); repeatable."),
    strategy: str = typer.Option("temp+sem", "--strategy", "-s", help="Distractors: random, sem, temp+sem or appropt."),
    n: int = typer.Option(5, "-n", help="Distractors per fact."),
    seed: int = typer.Option(0, help="Seed of the fact sample and the random strategy."),
    threshold: float = typer.Option(0.5, help="A fact is known when its score is at least this."),
    at: str | None = typer.Option(None, "--at", help="Reference date YYYY-MM-DD (default today)."),
    max_labels: int = typer.Option(3, "--max-labels", help="Labels per object/distractor (label + aliases)."),
    max_templates: int | None = typer.Option(None, "--max-templates", help="Templates per relation (default all)."),
    dtype: str = typer.Option("float32", help="float32 (reference) or bfloat16 (faster on CPU)."),
    threads: int = typer.Option(1, help="CPU threads for torch."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Do not read or write the score cache."),
    force: bool = typer.Option(False, "--force", help="Rescore facts already scored with this configuration."),
    history_first: bool = typer.Option(False, "--history-first", help="Sample facts with a past value (staleness) first."),
    output_path: str | None = typer.Option(None, "--output-path", help="Write results.json, samples.jsonl and the report here."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Probe a model on facts of the graph and write each fact's scores onto its FACT edge
    (idempotent: facts already scored with the same configuration are skipped)."""
    from kgprobe.api import probe as run

    summary = run(
        model, relations=relations or (), sample=sample or None, measures=measure or ("kmin",),
        strategy=strategy, n=n, seed=seed, threshold=threshold, at=at, max_object_labels=max_labels,
        max_templates=max_templates, dtype=dtype, threads=threads, cache=not no_cache,
        force=force, history_first=history_first, progress=not as_json, output_path=output_path,
    )
    data = summary.to_dict()
    data["relations"] = len(data["relations"])
    if output_path is not None:
        data["output_files"] = getattr(summary, "output_files", {})
    _print_summary(data, as_json)


@app.command()
def unknown(
    model: str = typer.Option(..., "--model", "-m", help="A probed model (its name or model key)."),
    relation: str | None = typer.Option(None, "--relation", "-r", help="Only this relation (PID)."),
    below: float | None = typer.Option(None, "--below", help="Score threshold (default: the run's, 0.5)."),
    measure: str | None = typer.Option(None, "--measure", help="Measure key or name (default: the latest probed)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON lines."),
) -> None:
    """List the facts a model does not know, read from the scores on the FACT edges."""
    import json
    from dataclasses import asdict

    from kgprobe.api import unknown as find

    facts = find(model, relation=relation, below=below, measure=measure)
    if as_json:
        for f in facts:
            print(json.dumps(asdict(f), ensure_ascii=False))
        return
    from rich.table import Table

    table = Table("relation", "subject", "object", "score", title=f"{len(facts)} facts {model} does not know")
    for f in facts:
        table.add_row(f"{f.pid} {f.relation or ''}", f"{f.subject_label} ({f.subject})",
                      f"{f.object_label} ({f.object})", f"{f.score:.3f}")
    console.print(table)


@app.command()
def compare(
    a: str = typer.Argument(..., help="First probed model."),
    b: str = typer.Argument(..., help="Second probed model."),
    measure: str | None = typer.Option(None, "--measure", help="Measure key or name."),
    threshold: float | None = typer.Option(None, help="Known threshold (default: the run's)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """What one model knows and the other does not (facts probed for both)."""
    import json

    from kgprobe.api import compare as run

    res = run(a, b, measure=measure, threshold=threshold)
    if as_json:
        print(json.dumps(res.to_dict(), ensure_ascii=False))
        return
    from rich.table import Table

    for title, rows in ((f"{res.a} knows, {res.b} does not", res.a_not_b),
                        (f"{res.b} knows, {res.a} does not", res.b_not_a)):
        table = Table("relation", "subject", "object", res.a, res.b, title=f"{title}: {len(rows)}")
        for f in rows:
            table.add_row(f"{f.pid} {f.relation or ''}", f"{f.subject_label} ({f.subject})",
                          f"{f.object_label} ({f.object})", f"{f.score_a:.3f}", f"{f.score_b:.3f}")
        console.print(table)
    c = res.counts
    console.print(f"{c['both_probed']} facts probed for both; {res.a} knows {c['a_known']}, "
                  f"{res.b} knows {c['b_known']}, both {c['both_known']} ({res.measure}, known >= {res.threshold:g})",
                  highlight=False)


@app.command()
def report(
    model: str = typer.Option(..., "--model", "-m", help="A probed model."),
    vs: str | None = typer.Option(None, "--vs", help="A second probed model to compare with."),
    out: str | None = typer.Option(None, "--out", "--output-path", help="Write report.html, results.json, samples.jsonl and CSVs here."),
    measure: str | None = typer.Option(None, "--measure", help="Measure key or name."),
    seed: int = typer.Option(0, help="Seed of the bootstrap."),
    by: str = typer.Option("relation", "--by", help="Group facts by relation, type (P31 closed over P279) or popularity."),
    type_of: str = typer.Option("subject", "--type-of", help="With --by type: the subject's or the object's types."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Knowledge gaps per relation (or type, or popularity bucket): n, mean score with a
    bootstrap CI where n >= 10, share known, popularity buckets and temporal staleness."""
    import json

    from kgprobe.api import report as build
    from kgprobe.reporting import print_report

    rep, paths = build(model, vs=vs, out=out, measure=measure, seed=seed, by=by, type_of=type_of)
    if as_json:
        doc = rep.to_dict()
        doc["files"] = {k: str(v) for k, v in paths.items()}
        print(json.dumps(doc, ensure_ascii=False, default=str))
        return
    print_report(rep, console)
    for kind, path in paths.items():
        console.print(f"{kind}: {path}", highlight=False)


def main() -> None:
    """Entry point: run the app, turning expected errors into one line and an exit code."""
    import logging

    # The driver logs each retry as a warning; kgprobe reports a lost server in one line itself.
    logging.getLogger("neo4j").setLevel(logging.ERROR)
    try:
        app()
    except KgprobeError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
