"""Issue 39 #3, one floor for workflows: each workflow the CLI runs against the graph is one
function of ``kgprobe.app``, reached from Python through ``kgprobe.api`` under the command's
name with the CLI's option names; both refuse a bad value with the same one line and exit code
(the check lives in the app layer, not in the CLI), and both give the same result."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from probe_world import load
from test_cli_graph import kgprobe

from kgprobe import api
from kgprobe.errors import KgprobeError

NAN = float("nan")

#: (the command line, the same call through the API): each with one bad value
BAD: list[tuple[list[str], Callable[[Path], Any]]] = [
    (["unknown", "-m", "gpt2", "--threshold", "nan"], lambda _: api.unknown("gpt2", threshold=NAN)),
    (["unknown", "-m", "gpt2", "-r", "capital"], lambda _: api.unknown("gpt2", relation="capital")),
    (["templates", "list", "-r", "X36"], lambda _: api.templates_list(relation=["X36"])),
    (["templates", "import", "t.jsonl", "--format", "yaml"],
     lambda d: api.templates_import(d / "t.jsonl", format="yaml")),
    (["templates", "import", "missing.jsonl", "--format", "lama"],
     lambda d: api.templates_import(d / "missing.jsonl", format="lama")),
    (["evaluate", "-m", "gpt2"], lambda _: api.evaluate("gpt2")),
    (["evaluate", "-m", "gpt2", "--vs-model", "b", "--folds", "1"],
     lambda _: api.evaluate("gpt2", vs_model="b", folds=1)),
    (["export", "-o", "set.parquet", "--seed", "-1"], lambda d: api.export(d / "set.parquet", seed=-1)),
    (["export", "-o", "set.parquet", "--at", "2024-13-01"],
     lambda d: api.export(d / "set.parquet", at="2024-13-01")),
    (["cypher", "missing.cypher"], lambda d: api.cypher(str(d / "missing.cypher"))),
    (["cypher", "RETURN $x AS x", "-p", "1x=2"], lambda _: api.cypher("RETURN $x AS x", param=["1x=2"])),
    (["probe", "-m", "gpt2", "--shard", "3/2", "--dry-run"], lambda _: api.probe("gpt2", shard="3/2", dry_run=True)),
]


@pytest.mark.parametrize(("argv", "call"), BAD, ids=[" ".join(a[:3]) for a, _ in BAD])
def test_the_api_and_the_cli_refuse_a_bad_value_with_the_same_line(
        argv: list[str], call: Callable[[Path], Any], kgprobe_env: dict[str, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # relative paths of the command line: the same files
    with pytest.raises(KgprobeError) as caught:
        call(tmp_path)
    r = kgprobe(*argv, env=kgprobe_env)
    message = str(caught.value).replace(str(tmp_path) + "/", "")
    assert (r.returncode, r.stderr.strip()) == (caught.value.exit_code, f"error: {message}")
    assert r.stdout == ""


def test_the_api_gives_what_the_cli_prints(graph: Any, kgprobe_env: dict[str, str]) -> None:
    """``stats``, ``templates list`` and ``db status`` under their command's names, with the
    command's ``--json`` as their result."""
    load(graph)

    def cli(*argv: str) -> Any:
        r = kgprobe(*argv, "--json", env=kgprobe_env)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    stats = api.stats().to_dict()
    assert stats == cli("stats")
    assert stats["templates"] == 5 and {r["pid"] for r in stats["per_relation"]} >= {"P35", "P36"}
    listed = [asdict(t) for t in api.templates_list(relation="P35")]
    assert listed == cli("templates", "list", "-r", "P35")
    assert sorted(t["text"] for t in listed) == ["The head of state of [X] is [Y].",
                                                 "Who is the head of state of [X]?"]
    assert api.db_status().to_dict() == cli("db", "status")
