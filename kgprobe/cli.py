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
    sample: int = typer.Option(60, help="Facts to probe, spread across all demo relations."),
    model: str = typer.Option("smollm2-135m", "--model", "-m", help="Model to probe."),
    dtype: str = typer.Option("float32", help="float32 (reference) or bfloat16 (3-4x faster on CPU)."),
    out: str | None = typer.Option(None, help="Report directory (default: KGPROBE_HOME/demo-report)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Load the bundled demo graph and templates, probe the default model with temp+sem
    distractors, write the scores back, and print the per-relation knowledge-gap report."""
    import json

    from kgprobe.api import demo as run_demo
    from kgprobe.reporting import print_report

    result = run_demo(model=model, sample=sample, dtype=dtype, out=out, quiet=as_json)
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
        f"report: {result['report_files'].get('html')}  "
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
