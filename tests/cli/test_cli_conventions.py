"""Issue 12 item 6: one set of CLI conventions, checked on every command with a real server and
tiny real models: `--json` is one JSON document, `--jsonl` a stream, `--relation/-r` repeatable,
`-s` one meaning, `--threshold` one name, `--version`, inputs checked before the graph."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import torch
from cli_support import clean_env, fresh_home_env, kgprobe
from probe_world import REF, load
from tiny_models import TinyModel

from kgprobe.graph.server import free_port

torch.set_num_threads(1)
FIXTURES = Path(__file__).parents[1] / "fixtures"


def one_document(args: list[str], env: dict[str, str]) -> Any:
    r = kgprobe(*args, env=env, timeout=600)
    assert r.returncode == 0, (args, r.stderr)
    return json.loads(r.stdout)  # the whole stdout: exactly one JSON document


def test_option_names_mean_one_thing_across_commands() -> None:
    import typer.main

    from kgprobe.cli import app

    root = typer.main.get_command(app)
    seen: dict[str, set[str]] = {}
    relation_options = 0
    without_json: list[str] = []

    def walk(cmd: Any, path: str) -> None:  # click's Group/Command (typer may bundle its own click)
        nonlocal relation_options
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, f"{path} {name}")
            return
        if not any("--json" in getattr(p, "opts", ()) for p in cmd.params):
            without_json.append(path)
        for p in cmd.params:
            if p.param_type_name != "option" or p.hidden:
                continue
            for short in (o for o in p.opts if len(o) == 2):
                seen.setdefault(short, set()).add(max(p.opts, key=len))
            assert "--below" not in p.opts and "--relations" not in p.opts, path  # old names only hidden
            if "--relation" in p.opts:
                relation_options += 1
                assert p.multiple and "-r" in p.opts, f"{path}: --relation/-r must be repeatable"
    walk(root, "kgprobe")
    assert without_json == []  # every command offers --json
    # every command that loads a model or writes a report reads its options from --config too
    no_config = [name for name, cmd in root.commands.items()  # type: ignore[attr-defined]
                 if any({"--model", "--out"} & set(getattr(p, "opts", ()))
                        for p in getattr(cmd, "params", []))
                 and not any("--config" in getattr(p, "opts", ()) for p in cmd.params)]
    assert no_config == []
    assert relation_options >= 5
    assert seen["-s"] == {"--strategy"} and seen["-r"] == {"--relation"} and seen["-m"] == {"--model"}
    assert all(len(longs) == 1 for longs in seen.values()), seen


def test_version_flag(tmp_path: Path) -> None:
    from kgprobe import __version__

    env = clean_env(KGPROBE_CONFIG=str(tmp_path / "none.json"))
    r = kgprobe("--version", env=env)
    assert r.returncode == 0 and r.stdout.strip() == __version__


def test_inputs_are_checked_before_the_graph_is_contacted(tmp_path: Path) -> None:
    env = fresh_home_env(tmp_path)  # a stopped home: any graph access would start a server
    for args, code, text in (
        (["templates", "import", "none.jsonl", "-f", "foo"], 2, "unknown template format 'foo'"),
        (["templates", "import", str(tmp_path / "none.jsonl"), "-f", "lama"], 4, "no such file"),
        (["ingest", str(tmp_path / "none.json")], 4, "no such file"),
    ):
        r = kgprobe(*args, env=env)
        assert r.returncode == code and text in r.stderr, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "home" / "arcadedb").exists() and not (tmp_path / "home" / "server.json").exists()


def test_neo4j_username_and_db_status_say_how_to_connect(graph_settings: Any, tmp_path: Path) -> None:
    from kgprobe.graph.server import ManagedServer

    if graph_settings.uri:  # the suite's server is a configured one (Neo4j): its user and password
        server = None
        uri, user, password = graph_settings.uri, graph_settings.user, graph_settings.password
    else:  # the managed ArcadeDB server's root user
        server = ManagedServer(graph_settings)
        uri, user, password = server.info().uri, "root", server.password
    env = clean_env(NEO4J_URI=uri, NEO4J_USERNAME=user, NEO4J_PASSWORD=password,
                    KGPROBE_CONFIG=str(tmp_path / "none.json"))
    if graph_settings.database:
        env["NEO4J_DATABASE"] = graph_settings.database
    stats = kgprobe("stats", "--json", env=env)
    assert stats.returncode == 0, stats.stderr  # the user came from NEO4J_USERNAME
    wrong = kgprobe("stats", env={**env, "NEO4J_USERNAME": "nobody-here"})
    assert wrong.returncode == 3 and "refused the user name or password" in wrong.stderr

    status = kgprobe("db", "status", env=env)
    assert status.returncode == 0
    lines = dict(line.split(None, 1) for line in status.stdout.splitlines())
    assert lines["uri"] == uri and lines["user"] == user
    assert lines["password"] == "environment variable NEO4J_PASSWORD"
    assert password not in status.stdout
    # which server answers, with its version (issue 19 §6): Neo4j's own agent, or ArcadeDB's
    if server is None:
        assert re.fullmatch(r"Neo4j/5\.\d+\.\d+", lines["server"]), lines["server"]
    else:
        assert re.fullmatch(r"Neo4j/5\.\d+\.\d+ compatible \(ArcadeDB \d+\.\d+\.\d+\)", lines["server"])
    down = kgprobe("db", "status", env={**env, "NEO4J_URI": f"bolt://127.0.0.1:{free_port()}"})
    assert down.returncode == 0 and "server     not reachable: no graph server reachable" in down.stdout

    if server is None:
        return  # what follows is the managed server's own status
    managed = one_document(["db", "status", "--json"], clean_env(
        KGPROBE_HOME=str(graph_settings.home), KGPROBE_BOLT_PORT=str(graph_settings.bolt_port),
        KGPROBE_HTTP_PORT=str(graph_settings.http_port), KGPROBE_CONFIG=str(tmp_path / "none.json")))
    assert managed["uri"] == uri and managed["database"] == "kgprobe" and "ArcadeDB" in managed["server"]
    # kgprobe's Bolt user: its name is a secret like its password (no one else can lock it out)
    user, password = server.credentials()
    assert str(server.state_file) in managed["user"] and str(server.state_file) in managed["password"]
    for secret in (user, password, server.password):
        assert secret not in json.dumps(managed)


def test_every_json_is_one_document(graph: Any, kgprobe_env: dict[str, str], tmp_path: Path, tiny_model: TinyModel) -> None:
    """Every command with --json, on a real graph with two tiny models probed through the CLI."""
    load(graph)
    models = {kind: tiny_model(kind) for kind in ("gpt2", "llama")}
    env = kgprobe_env
    gpt2, llama = str(models["gpt2"]), str(models["llama"])

    status = one_document(["db", "status", "--json"], env)
    assert status["uri"].startswith(("bolt://", "neo4j://"))
    if status["managed"]:
        assert status["running"] is not False
    else:  # a configured server (the Neo4j test server, NEO4J_URI): where its password comes from
        assert status["uri"] == env["NEO4J_URI"] and status["password"] == "environment variable NEO4J_PASSWORD"
        assert env["NEO4J_PASSWORD"] not in json.dumps(status)
    assert one_document(["stats", "--json"], env)["facts"] > 0
    tfile = tmp_path / "t.jsonl"
    tfile.write_text(json.dumps({"relation": "P36", "template": "[X]'s capital city is [Y] ."}) + "\n")
    assert one_document(["templates", "import", str(tfile), "-f", "lama", "--json"], env) == {"imported": 1}
    listed = one_document(["templates", "list", "-r", "P36", "-r", "P35", "--json"], env)
    assert isinstance(listed, list) and {t["pid"] for t in listed} == {"P35", "P36"}
    stream = kgprobe("templates", "list", "-r", "P36", "--jsonl", env=env)
    assert [json.loads(line)["pid"] for line in stream.stdout.splitlines()] == ["P36"] * 2

    common = ["--strategy", "random", "-n", "2", "--at", REF, "--sample", "0", "--no-cache", "--json"]
    a = one_document(["probe", "--model", gpt2, "-r", "P35", "-r", "P36", *common], env)
    b = one_document(["probe", "--model", llama, "--relations", "P35", "--relation", "P36", *common], env)
    assert a["scored"] == b["scored"] == 4  # USA->Biden and three capitals, through old and new names

    unknown = one_document(["unknown", "--model", "gpt2", "--threshold", "2", "--json"], env)
    assert isinstance(unknown, list) and len(unknown) == 4  # every score is below 2
    old = one_document(["unknown", "--model", "gpt2", "--below", "2", "-r", "P36", "--json"], env)
    assert len(old) == 3 and {f["pid"] for f in old} == {"P36"}
    lines = kgprobe("unknown", "--model", "gpt2", "--threshold", "2", "--jsonl", env=env).stdout.splitlines()
    assert sorted(json.loads(x)["key"] for x in lines) == sorted(f["key"] for f in unknown)
    assert "counts" in one_document(["compare", "gpt2", "llama", "--json"], env)
    assert one_document(["report", "--model", "gpt2", "--json"], env)
    assert one_document(["distractors", "Q30", "P35", "-s", "random", "-n", "2", "--at", REF, "--json"], env)
    scored = one_document(["score", "--model", gpt2, "The capital of France is", " Paris", " Rome", "--json"], env)
    assert [r["candidate"] for r in sorted(scored, key=lambda r: r["rank"])] and len(scored) == 2
    short = tmp_path / "factor.csv"  # the FACTOR columns, rows short enough for a 64-position model
    short.write_text(",full_prefix,doc_id,completion,contradiction_0,contradiction_1,contradiction_2,"
                     "longest_completions,turncated_prefixes\n"
                     "0,Paris is,1,the capital of France.,a city in Spain.,a river.,a song.,x,Paris is\n"
                     "1,Water is,2,wet.,dry.,solid iron.,a planet.,x,Water is\n")
    factor = one_document(["factor", str(short), "--model", gpt2, "--json"], env)
    assert factor["items"] == 2
    cfg = tmp_path / "factor.yaml"  # the same run from a config file (the file argument too)
    cfg.write_text(f"file: {short}\nmodel: {gpt2}\nlimit: 1\n", encoding="utf-8")
    one = one_document(["factor", "--config", str(cfg), "--json"], env)
    assert one["items"] == 1 and one["per_item"][0] == factor["per_item"][0]
    assert one_document(["factor", "--config", str(cfg), "--limit", "2", "--json"], env) == factor
    assert one_document(["ingest", str(FIXTURES / "wikidata" / "entity-json" / "Q182397.json"), "--json"],
                        env)["entities"] > 0
    if not os.environ.get("NEO4J_URI"):
        assert one_document(["db", "start", "--json"], env)["running"] is True

    text = kgprobe("score", "--model", gpt2, "The capital of France is", " Paris", env=env)
    assert text.returncode == 0 and text.stdout.splitlines()[0].startswith("rank  log P (nats)")
