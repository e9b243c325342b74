"""-q/--quiet and -v/--verbose after the command, as before it (issue 40: `kgprobe probe … -q`
was "no such option")."""

from __future__ import annotations

import json
from pathlib import Path

from cli_support import kgprobe

from kgprobe.cli import _hoisted


def test_the_flags_are_moved_before_the_command() -> None:
    assert _hoisted(["ingest", "f.json", "-q"]) == ["-q", "ingest", "f.json"]
    assert _hoisted(["-v", "stats", "--json"]) == ["-v", "stats", "--json"]
    assert _hoisted(["cypher", "--", "-q"]) == ["cypher", "--", "-q"]  # after --: data


def test_quiet_after_the_command_silences_progress(graph: object, kgprobe_env: dict[str, str],
                                                   tmp_path: Path) -> None:
    src = tmp_path / "one.jsonl"
    src.write_text(json.dumps({"type": "item", "id": "Q1", "labels": {"en": {"language": "en", "value": "x"}},
                               "claims": {}}) + "\n")
    loud = kgprobe("ingest", str(src), env=kgprobe_env)
    assert loud.returncode == 0 and "ingesting" in loud.stderr
    quiet = kgprobe("ingest", str(src), "-q", env=kgprobe_env)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert "records" in quiet.stdout
    both = kgprobe("stats", "--quiet", "--verbose", env=kgprobe_env)
    assert both.returncode == 2 and "exclude each other" in both.stderr
