"""Issue 40 item 7, the consistent interface, through the real CLI on a real graph with a tiny
real model: ``probe --dry-run`` previews and touches nothing, ``probe`` ends with the mean score
per relation of what it scored, the same option has the same default everywhere, the Python
API takes the CLI's option names, and ``--help`` has an example and plain metavars."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_support import kgprobe
from probe_world import REF, load
from tiny_models import TinyModel

torch.set_num_threads(1)
COMMON = ["--strategy", "random", "-n", "2", "--at", REF, "--sample", "0", "--no-cache"]


def _ok(args: list[str], env: dict[str, str]) -> Any:
    r = kgprobe(*args, env=env, timeout=600)
    assert r.returncode == 0, (args, r.stderr)
    return r


def _written(graph: Any) -> dict[str, int]:
    """What a probe leaves in the graph: run records, model keys, scored facts."""
    runs = graph.read("MATCH (r:ProbeRun) RETURN count(r) AS n")[0]["n"]
    keys = graph.read("MATCH (k:ModelKey) RETURN count(k) AS n")[0]["n"]
    return {"runs": int(runs), "keys": int(keys)}


def test_dry_run_previews_and_touches_nothing_then_probe_summarizes(
        graph: Any, kgprobe_env: dict[str, str], graph_settings: Any, tmp_path: Path, tiny_model: TinyModel) -> None:
    load(graph)
    env = kgprobe_env
    gpt2 = str(tiny_model("gpt2"))
    args = ["probe", "--model", gpt2, "-r", "P35", "-r", "P36", *COMMON]
    before = _written(graph)
    dry = json.loads(_ok([*args, "--dry-run", "--json"], env).stdout)
    text = _ok([*args, "--dry-run"], env).stdout
    assert _written(graph) == before  # no ProbeRun, no ModelKey
    assert not graph.read("MATCH ()-[f:FACT]->() WHERE f.score__gpt2__kmin_random_n2 IS NOT NULL "
                          "RETURN f.key AS k")
    assert dry["status"] == "dry run" and dry["scored"] == 0
    # one rendered prompt per relation for the measure: the template with the subject's label,
    # and the object's label as the continuation
    prompts = dry["prompts"]["kmin_random_n2"]
    assert len(prompts) == 2
    assert prompts[0].startswith('P35: "The head of state of') or prompts[0].startswith('P35: "Who is')
    assert prompts[1].startswith('P36: "The capital of ')
    assert f"dry run: {dry['planned']} facts would be probed" in " ".join(text.split())
    assert "nothing was scored or written (dry run)" in text

    # the real probe samples what the dry run said, relation by relation
    out = _ok(args, env).stdout
    done = json.loads(_ok([*args, "--force", "--json"], env).stdout)
    assert done["planned"] == dry["planned"]
    assert {r["relation"]: r["n"] + r["unscorable"] for r in done["by_relation"]} == \
        {p: n for p, n in dry["planned_by_relation"].items() if n}
    assert done["summary_measure"] == "kmin_random_n2"
    # the means printed are those of the scores stored on the graph (read back independently)
    facts = json.loads(_ok(["unknown", "--model", "gpt2", "--threshold", "1e9", "--json"], env).stdout)
    by: dict[str, list[float]] = {}
    for f in facts:
        by.setdefault(f["pid"], []).append(f["score"])
    flat = " ".join(out.split())
    assert "scored by this run (kmin_random_n2)" in flat
    for pid, scores in by.items():
        mean = sum(scores) / len(scores)
        assert re.search(rf"{pid} +[│|]? *{len(scores)} +[│|]? *{mean:.3f}", flat), (pid, mean, out)
        row = next(r for r in done["by_relation"] if r["relation"] == pid)
        assert row["n"] == len(scores) and row["mean"] == pytest.approx(mean, abs=1e-9)
    # nothing new to score: said so, not an empty table
    again = _ok(args, env).stdout
    assert "nothing newly scored under kmin_random_n2" in again

    # report -r: only that relation's facts, in every part of the report
    rep = json.loads(_ok(["report", "-m", "gpt2", "-r", "P36", "--json"], env).stdout)
    assert [g["key"] for g in rep["primary"]["relations"]] == ["P36"]
    assert rep["primary"]["overall"]["facts"] == len(by["P36"])
    assert rep["scope"] == "all, relations P36"
    r = kgprobe("report", "-m", "gpt2", "-r", "P27", env=env)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "P27" in r.stderr, r.stderr

    # the Python API: the CLI's names (--threshold, --relation); the old one warns, same facts
    import kgprobe as api

    new = api.unknown("gpt2", threshold=1e9, relation=["P35", "P36"], settings=graph_settings)
    with pytest.warns(DeprecationWarning, match="below"):
        old = api.unknown("gpt2", below=1e9, settings=graph_settings)
    assert sorted(f.key for f in new) == sorted(f.key for f in old) == sorted(f["key"] for f in facts)


def test_dry_run_beside_a_probe_set_is_one_line(kgprobe_env: dict[str, str], tmp_path: Path) -> None:
    r = kgprobe("probe", "--set", str(tmp_path / "x.parquet"), "--output-path", str(tmp_path / "o"),
                "--dry-run", env=kgprobe_env)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "--dry-run" in r.stderr


def test_python_api_takes_the_cli_option_names(graph: Any, tmp_path: Path, tiny_model: TinyModel) -> None:
    """kgprobe.probe's keywords are the CLI's option names; the old names still work and warn."""
    import inspect

    import typer.main

    import kgprobe
    from kgprobe.cli import app
    from kgprobe.errors import ConfigError

    cmd = typer.main.get_command(app).commands["probe"]  # type: ignore[attr-defined]
    # (``backend``: from Python a served model is its URL or a backend object, given as model)
    cli_only = {"model", "config", "as_json", "relations_alias", "device", "batch_tokens", "model_arg",
                "backend", "probe_set", "output_path", "overwrite"}
    accepted = set(inspect.signature(kgprobe.probe).parameters)
    assert {p.name for p in cmd.params} - cli_only - accepted == set()

    load(graph)
    gpt2 = str(tiny_model("gpt2"))
    common = {"strategy": "random", "n": 2, "at": REF, "sample": None, "dry_run": True,
              "graph": graph, "progress": False}
    new = kgprobe.probe(gpt2, relation="P36", measure="kmin", max_labels=2, no_cache=True, **common)
    with pytest.warns(DeprecationWarning) as record:
        old = kgprobe.probe(gpt2, relations=["P36"], measures=["kmin"], max_object_labels=2,
                            cache=False, **common)
    said = " ".join(str(w.message) for w in record)
    for old_name, name in (("relations", "relation"), ("measures", "measure"),
                           ("max_object_labels", "max_labels"), ("cache", "no_cache")):
        assert f"kgprobe.probe({old_name}=...) is deprecated; use {name}=..." in said
    assert new.planned_by_relation == old.planned_by_relation and new.planned_by_relation["P36"] > 0
    assert new.summary_measure == old.summary_measure == "kmin_random_n2_o2"
    with pytest.raises(ConfigError, match="both given"), pytest.warns(DeprecationWarning):
        kgprobe.probe(gpt2, relation="P36", relations=["P36"], **common)


def _commands() -> list[tuple[list[str], Any]]:
    import typer.main

    from kgprobe.cli import app

    out = []

    def walk(cmd: Any, path: list[str]) -> None:
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, [*path, name])
            return
        out.append((path, cmd))

    walk(typer.main.get_command(app), [])
    return out


def test_the_same_option_has_the_same_default_everywhere() -> None:
    from kgprobe.cli import DEFAULT_MODEL
    from kgprobe.probing.distractors import DEFAULT_N
    from kgprobe.probing.models import DEFAULT_MODEL as REGISTRY_DEFAULT

    assert DEFAULT_MODEL == REGISTRY_DEFAULT
    commands = {" ".join(path): cmd for path, cmd in _commands()}
    # -m: the model a command scores with defaults to the default model; a model whose stored
    # scores a command reads is required (there is nothing to assume)
    scoring = {"probe", "score", "factor", "demo", "distractors"}
    with_m = {name: next(p for p in cmd.params if "-m" in p.opts)
              for name, cmd in commands.items() if any("-m" in p.opts for p in cmd.params)}
    assert scoring <= set(with_m)
    for name, p in with_m.items():
        assert "--model" in p.opts, name
        if name in scoring:
            assert not p.required, name
            if any("--backend" in q.opts for q in commands[name].params):
                # a served model's id is the server's: no default is sent; without --backend
                # the default model is used, and the help says which
                assert p.default is None and f"Default: {DEFAULT_MODEL}" in (p.help or ""), name
            else:
                assert p.default == DEFAULT_MODEL, name
        else:
            assert p.required, name
    # every command that scores with a model picks it the same way: --backend and --model-arg,
    # the same options (help and default) on each (a served model anywhere a model scores)
    for opt in ("--backend", "--model-arg"):
        found = {name: next((p for p in commands[name].params if opt in p.opts), None) for name in scoring}
        assert all(found.values()), (opt, sorted(n for n, p in found.items() if p is None))
        assert len({(p.help, p.default) for p in found.values() if p is not None}) == 1, opt
    # -n: distractors per fact, the same default where it is a default (probe: from the measure)
    n_dist = next(p for p in commands["distractors"].params if "-n" in p.opts)
    assert n_dist.default == DEFAULT_N == 5
    # --no-cache on every command that reads or writes the score cache
    for name in ("probe", "score", "demo"):
        assert any("--no-cache" in p.opts for p in commands[name].params), name
    # report filters by relation as every other command does
    assert any({"--relation", "-r"} <= set(p.opts) and p.multiple for p in commands["report"].params)


def test_help_has_an_example_and_plain_metavars() -> None:
    import shlex

    from typer.testing import CliRunner

    from kgprobe.cli import app

    runner = CliRunner()
    for path, cmd in _commands():
        r = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert r.exit_code == 0, (path, r.output)
        assert not re.search(r"<(str|int|float|bool|list\[)", r.output), (path, r.output)
        example = re.search(r"Example: (kgprobe .*)", r.output)
        assert example, (path, r.output)
        words = shlex.split(example.group(1).strip())
        assert words[1:1 + len(path)] == path, (path, words)
        cmd.make_context(" ".join(path), words[1 + len(path):])  # the example parses
