"""The command line: thin wrappers that parse, call one library function and print.

Expected failures (`KgprobeError`) become one clear line on stderr and a non-zero exit code.
"""

from __future__ import annotations

import sys

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


def main() -> None:
    """Entry point: run the app, turning expected errors into one line and an exit code."""
    try:
        app()
    except KgprobeError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
