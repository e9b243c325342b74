"""`kgprobe ingest` end to end: real files, the session's real graph server, summaries, errors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from _kgprobe_process import run_kgprobe
from conftest import FIXTURES

WD = FIXTURES / "wikidata"


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_kgprobe(args, env, timeout=300)


def test_ingest_entity_json_and_turtle_then_stats(graph: Any, kgprobe_env: dict[str, str]) -> None:
    result = run("ingest", str(WD / "entity-json" / "Q182397.json"), "--json", env=kgprobe_env)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["entities"] >= 1 and summary["facts"] > 20 and summary["temporal_facts"] > 10
    # non-item values are counted by reason, never dropped silently
    assert sum(summary["skipped"].values()) > 0
    assert all(reason for reason in summary["skipped"])

    stats = json.loads(run("stats", "--json", env=kgprobe_env).stdout)
    assert stats["facts"] == summary["facts"]
    assert stats["temporal_facts"] == summary["temporal_facts"]

    again = json.loads(run("ingest", str(WD / "entity-json" / "Q182397.json"), "--json", env=kgprobe_env).stdout)
    assert again["facts"] == summary["facts"]
    assert json.loads(run("stats", "--json", env=kgprobe_env).stdout)["facts"] == stats["facts"]


def test_relation_filter_and_rdf(graph: Any, kgprobe_env: dict[str, str]) -> None:
    ttl = WD / "wdqs-rdf" / "Q42.ttl"
    result = run("ingest", str(ttl), "--relation", "P69", "--json", env=kgprobe_env)
    assert result.returncode == 0, result.stderr
    rows = graph.read("MATCH (:Entity {qid: 'Q42'})-[f:FACT]->(o) RETURN DISTINCT f.pid AS pid")
    assert rows == [{"pid": "P69"}]
    label = graph.read("MATCH (e:Entity {qid: 'Q42'}) RETURN e.label AS label")
    assert label == [{"label": "Douglas Adams"}]


def test_unsupported_or_missing_file_is_one_line(tmp_path: Path, kgprobe_env: dict[str, str]) -> None:
    bad = tmp_path / "notes.bin"
    bad.write_bytes(b"\x00\x01\x02 binary")
    result = run("ingest", str(bad), env=kgprobe_env)
    assert result.returncode == 4
    assert "unsupported file" in result.stderr and "Traceback" not in result.stderr

    result = run("ingest", str(tmp_path / "missing.json"), env=kgprobe_env)
    assert result.returncode == 4 and "no such file" in result.stderr


def test_malformed_lines_reported_then_budget_stops(tmp_path: Path, kgprobe_env: dict[str, str], graph: Any) -> None:
    good = json.loads((WD / "entity-json" / "Q182397.json").read_text())["entities"]["Q182397"]
    lines = ["[", json.dumps(good) + ",", "{not json,", "{also not json,", "]"]
    dump = tmp_path / "dump.json"
    dump.write_text("\n".join(lines) + "\n")

    ok = run("ingest", str(dump), "--json", "--max-errors", "5", env=kgprobe_env)
    assert ok.returncode == 0, ok.stderr
    summary = json.loads(ok.stdout)
    assert summary["errors"] == 2 and summary["first_errors"][0].startswith(f"{dump}:3")
    assert summary["facts"] > 0

    stopped = run("ingest", str(dump), "--max-errors", "1", env=kgprobe_env)
    assert stopped.returncode == 4
    assert "error budget 1" in stopped.stderr and "Traceback" not in stopped.stderr
