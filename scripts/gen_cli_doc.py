"""Write docs/cli.md: every option of every command, from the command tree itself, so the table
cannot drift from the code (tests/cli/test_cli_doc.py checks that the file is what this writes).

    python scripts/gen_cli_doc.py            # rewrite docs/cli.md
    python scripts/gen_cli_doc.py --check    # exit 1 if docs/cli.md is out of date
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def _commands(cmd: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if hasattr(cmd, "commands"):
        out = []
        for name in sorted(cmd.commands):
            out += _commands(cmd.commands[name], f"{prefix}{name} ")
        return out
    return [(prefix.strip(), cmd)]


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render() -> str:
    import typer

    from kgprobe.cli import app

    root = typer.main.get_command(app)
    commands = _commands(root)
    # option spelling -> {help text -> [commands]}
    by_option: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    defaults: dict[tuple[str, str], str] = {}
    for name, cmd in commands:
        for p in cmd.params:
            if not getattr(p, "opts", None) or not p.opts[0].startswith("-") or getattr(p, "hidden", False):
                continue
            spelling = ", ".join(sorted([*p.opts, *getattr(p, "secondary_opts", [])], key=len, reverse=True))
            by_option[spelling][_cell(p.help or "")].append(name)
            if p.default not in (None, False, [], ()) and not p.is_flag:
                defaults[(spelling, name)] = str(p.default)
    lines = [
        "# Command-line options",
        "",
        "Every option of every command, generated from the commands themselves by",
        "`python scripts/gen_cli_doc.py` (a test fails when this page is out of date). One option",
        "name means one thing everywhere; where its help differs between commands, each wording is",
        "listed with the commands that use it. `-q`/`--quiet` and `-v`/`--verbose` go before or",
        "after the command; `-h`/`--help` works everywhere.",
        "",
        "## Global options",
        "",
        "| option | meaning |",
        "|---|---|",
    ]
    for p in root.params:
        if getattr(p, "opts", None):
            lines.append(f"| `{', '.join([*p.opts])}` | {_cell(p.help or '')} |")
    lines += ["", "## Options by name", "", "| option | meaning | commands (default) |", "|---|---|---|"]
    for spelling in sorted(by_option, key=lambda s: s.lstrip("-").lower()):
        for meaning, names in sorted(by_option[spelling].items()):
            cmds = ", ".join(
                f"`{n}`" + (f" ({defaults[(spelling, n)]})" if (spelling, n) in defaults else "")
                for n in sorted(names))
            lines.append(f"| `{spelling}` | {meaning} | {cmds} |")
    lines += ["", "## Commands", "", "| command | what it does |", "|---|---|"]
    for name, cmd in commands:
        first = (cmd.help or "").strip().split("\n\n")[0]
        lines.append(f"| `kgprobe {name}` | {_cell(first)} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if not DOC.exists() or DOC.read_text(encoding="utf-8") != text:
            print(f"{DOC} is out of date: run python scripts/gen_cli_doc.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
