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


def main() -> None:
    """Entry point: run the app, turning expected errors into one line and an exit code."""
    try:
        app()
    except KgprobeError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
