"""docs/cli.md is the command tree's own table of options (issue 40): regenerated, it is the file
in the repository, so an option added, renamed or re-described without the page fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_docs_cli_md_is_up_to_date() -> None:
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_cli_doc.py"), "--check"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for command in ("probe", "cypher", "models", "db wipe", "templates import"):  # nested ones too
        assert f"| `kgprobe {command}` |" in text
    assert "| `--threshold` |" in text and "| `--quiet, -q` |" in text
