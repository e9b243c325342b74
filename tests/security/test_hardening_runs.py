"""Issue 38: probe runs that cannot lie, and server settings checked up front, through the real
`kgprobe` command against the real graph server (docs/guarantees.md, "Runs and server settings
(third round)")."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from _kgprobe_process import start_kgprobe
from cli_support import clean_env, fresh_home_env, kgprobe
from probe_world import REF, load
from tiny_models import TinyModel

from kgprobe.graph import probe_runs as pr

torch.set_num_threads(1)

#: which run wrote each fact under one run property (the property name is a parameter)
RUN_OF = "MATCH ()-[f:FACT]->() WHERE f[$run] IS NOT NULL RETURN f.key AS key, f[$run] AS run"
SCORES = "MATCH ()-[f:FACT]->() WHERE f[$p] IS NOT NULL RETURN f.key AS key, f[$p] AS score"


def one_line(r: subprocess.CompletedProcess[str]) -> str:
    err = r.stderr.strip()
    assert "Traceback" not in err, err
    assert len(err.splitlines()) == 1, err
    return err


# --- 18. ports are 1..65535, refused at once, naming where they came from ----------------------
@pytest.mark.parametrize("value", ["99999", "-5", "0", "abc"])
@pytest.mark.parametrize("var", ["KGPROBE_BOLT_PORT", "KGPROBE_HTTP_PORT"])
def test_a_bad_port_in_the_environment_is_one_line_exit_2(tmp_path: Path, var: str, value: str) -> None:
    env = clean_env(KGPROBE_HOME=str(tmp_path / "home"), KGPROBE_CONFIG=str(tmp_path / "none.json"),
                    **{var: value})
    started = time.monotonic()
    r = kgprobe("db", "status", env=env, timeout=60)
    assert r.returncode == 2, (r.stdout, r.stderr)
    line = one_line(r)
    assert var in line and value in line and "1 to 65535" in line
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("value", [99999, -5, 0, "abc"])
@pytest.mark.parametrize("key", ["bolt_port", "http_port"])
def test_a_bad_port_in_the_settings_file_is_one_line_exit_2(tmp_path: Path, key: str, value: object) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({key: value}))
    cfg.chmod(0o600)
    env = clean_env(KGPROBE_HOME=str(tmp_path / "home"), KGPROBE_CONFIG=str(cfg))
    r = kgprobe("db", "status", env=env, timeout=60)
    assert r.returncode == 2, (r.stdout, r.stderr)
    line = one_line(r)
    assert repr(key) in line and str(cfg) in line and str(value) in line


def test_an_explicit_port_that_is_taken_is_refused_not_replaced(tmp_path: Path) -> None:
    """Minor: a configured port already in use is one line, not silently another port."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = fresh_home_env(tmp_path)
        env["KGPROBE_BOLT_PORT"] = str(port)
        try:
            r = kgprobe("db", "start", env=env, timeout=120)
            assert r.returncode == 3, (r.stdout, r.stderr)
            line = one_line(r)
            assert str(port) in line and "KGPROBE_BOLT_PORT" in line and "taken" in line
        finally:
            kgprobe("db", "stop", env=env)


# --- 19. a database that does not exist -------------------------------------------------------
def test_a_database_that_does_not_exist_is_one_line_exit_2(graph_settings: Any, tmp_path: Path) -> None:
    from kgprobe.graph.server import ManagedServer

    if graph_settings.uri:
        uri, user, password = graph_settings.uri, graph_settings.user, graph_settings.password
    else:
        server = ManagedServer(graph_settings)
        uri, (user, password) = server.info().uri, server.credentials()
    env = clean_env(NEO4J_URI=uri, NEO4J_USER=user, NEO4J_PASSWORD=password,
                    NEO4J_DATABASE="nosuchdb38", KGPROBE_CONFIG=str(tmp_path / "none.json"))
    r = kgprobe("stats", env=env)
    assert r.returncode == 2, (r.stdout, r.stderr)
    line = one_line(r)
    assert "nosuchdb38" in line and "NEO4J_DATABASE" in line


# --- minor: a concurrent run is not marked interrupted ----------------------------------------
def _start_ticks(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


def test_only_runs_whose_owner_is_gone_are_marked_interrupted(graph: Any) -> None:
    alive = subprocess.Popen(["sleep", "120"])
    dead = subprocess.Popen(["sleep", "0"])
    dead_start = _start_ticks(dead.pid)
    dead.wait()
    host = socket.gethostname()
    try:
        owners = {
            "alive": {"owner_host": host, "owner_pid": alive.pid, "owner_start": _start_ticks(alive.pid)},
            "dead": {"owner_host": host, "owner_pid": dead.pid, "owner_start": dead_start},
            "legacy": {},  # recorded by a kgprobe before owners were recorded
            "elsewhere": {"owner_host": host + "-another-machine", "owner_pid": 1, "owner_start": "1"},
        }
        for rid, owner in owners.items():
            graph.write("CREATE (r:ProbeRun {id: $id}) SET r += $props", id=rid,
                        props={"status": "running", "config_hash": "h38", **owner})
        marked = pr.create_run(graph, "new", {"status": "running", "config_hash": "h38"})
        assert sorted(marked) == ["dead", "legacy"]
        status = {r["id"]: r["status"] for r in pr.list_runs(graph)}
        assert status == {"alive": "running", "dead": "interrupted", "legacy": "interrupted",
                          "elsewhere": "running", "new": "running"}
        pr.release_run("new")
        # a run of this very process that it no longer probes is over: the next run marks it
        assert pr.create_run(graph, "newer", {"status": "running", "config_hash": "h38"}) == ["new"]
        pr.release_run("newer")
    finally:
        alive.kill()
        alive.wait()


# --- 5. two models with one directory name, probed at once -----------------------------------
def _other_weights(src: Path, dst: Path) -> Path:
    """A copy of the tiny model at ``src`` with different weights, saved under ``dst``."""
    from transformers import AutoModelForCausalLM

    shutil.copytree(src, dst)
    model = AutoModelForCausalLM.from_pretrained(dst)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5).add_(0.01)
    model.save_pretrained(dst)
    return dst


def test_same_named_models_probed_at_once_get_their_own_keys(
    graph: Any, kgprobe_env: dict[str, str], tmp_path: Path, tiny_model: TinyModel
) -> None:
    load(graph)
    first = tiny_model("gpt2", name="tiny")
    second = _other_weights(first, tmp_path / "b" / "tiny")
    common = ["probe", "--sample", "0", "-n", "2", "--strategy", "random", "--at", REF, "--no-cache",
              "--device", "cpu", "--batch-tokens", "64", "--json"]
    procs = {m: start_kgprobe([*common, "--model", str(m)], kgprobe_env) for m in (first, second)}
    out = {}
    for m, p in procs.items():
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, stderr
        out[m] = json.loads(stdout)
    keys = {m: o["model_key"] for m, o in out.items()}
    assert keys[first] != keys[second], keys
    assert sorted(keys.values())[0] == "tiny"  # one keeps the name, the other is suffixed
    prop = out[first]["score_properties"][0].split("__")[2]
    scores = {}
    for m, o in out.items():
        sp = pr.ScoreProps(keys[m], prop)
        writers = {r["run"] for r in graph.read(RUN_OF, run=sp.run)}
        assert writers == {o["run_id"]}  # every fact under this key written by this model's run
        scores[m] = {r["key"]: r["score"] for r in graph.read(SCORES, p=sp.score)}
        assert len(scores[m]) == o["scored"] > 0
    # each model's scores are its own: the same as that model probed alone on a fresh graph
    for m in (first, second):
        graph.write("MATCH (n) DETACH DELETE n")
        load(graph)
        r = kgprobe(*common, "--model", str(m), env=kgprobe_env, timeout=600)
        assert r.returncode == 0, r.stderr
        alone = json.loads(r.stdout)
        assert alone["model_key"] == "tiny"
        sp = pr.ScoreProps("tiny", prop)
        mine = {x["key"]: x["score"] for x in graph.read(SCORES, p=sp.score)}
        assert set(mine) == set(scores[m])
        assert all(abs(mine[k] - scores[m][k]) <= 1e-5 for k in mine), m
    assert scores[first] != scores[second]  # the two weights do score differently


# --- 6. the graph wiped or the server stopped under a probe ----------------------------------
PLACES = 2400


def _big_world(graph: Any) -> None:
    """Many facts of one relation (P17, country): enough that a tiny model probes for a while."""
    from kgprobe.graph.ingest import ingest
    from kgprobe.graph.templates import import_templates
    from kgprobe.records import (
        EntityRecord,
        FactRecord,
        RelationRecord,
        TemplateRecord,
        derive_style,
    )

    # typed countries: every fact has its random distractors, so the model scores each one
    # (untyped objects make every fact unscorable at once, and the probe could finish before
    # the server is stopped under it)
    countries = [EntityRecord(f"Q{900 + i}", f"Country {chr(65 + i)}", types=["Q6256"]) for i in range(12)]
    places = [EntityRecord(f"Q{10000 + i}", f"Town {i}") for i in range(PLACES)]
    facts = [FactRecord(f"Q{10000 + i}", "P17", f"Q{900 + i % 12}") for i in range(PLACES)]
    ingest(graph, [RelationRecord("P17", "country"), EntityRecord("Q6256", "country"), *countries, *places, *facts])
    text = "[X] is a town in [Y]."
    import_templates(graph, [TemplateRecord("P17", text, derive_style(text), "test")])


def _wait_for_scores(settings: Any, want: int, proc: Any, skip: str = "") -> str:
    """Poll until the probe's run record exists (not ``skip``) and it has written ``want``
    facts: its id."""
    from kgprobe.graph.client import connect

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        with connect(settings, ensure_schema=False) as g:
            runs = [r for r in pr.list_runs(g) if r.get("status") == "running" and r["id"] != skip]
        if runs and int(runs[-1].get("facts_scored") or 0) + int(runs[-1].get("facts_unscorable") or 0) >= want:
            return str(runs[-1]["id"])
        time.sleep(0.5)
    raise AssertionError("the probe wrote nothing in 300 s")


def test_a_probe_reports_the_server_stopped_and_the_graph_wiped_truly(tmp_path: Path, tiny_model: TinyModel) -> None:
    if os.environ.get("NEO4J_URI"):
        pytest.skip("needs the managed server, which the test stops and wipes")
    from kgprobe.config import Settings
    from kgprobe.graph.client import connect

    env = fresh_home_env(tmp_path)
    settings = Settings(home=Path(env["KGPROBE_HOME"]), bolt_port=int(env["KGPROBE_BOLT_PORT"]),
                        http_port=int(env["KGPROBE_HTTP_PORT"]), heap="512m")
    model = tiny_model("gpt2", name="tiny")
    cmd = ["probe", "--model", str(model), "--sample", "0", "-n", "2",
           "--strategy", "random", "--no-cache", "--device", "cpu", "--batch-tokens", "64",
           "--batch-facts", "4", "--write-batch", "4", "--json"]
    try:
        assert kgprobe("db", "start", env=env).returncode == 0
        with connect(settings) as g:
            _big_world(g)

        # the server stopped under the probe: the server went away, not the credentials
        proc = start_kgprobe(cmd, env)
        first = _wait_for_scores(settings, 8, proc)
        stopped = kgprobe("db", "stop", env=env)
        assert stopped.returncode == 0, stopped.stderr
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 3, (out, err)
        line = err.strip().splitlines()[-1]
        assert "Traceback" not in err and "credentials" not in err, err
        assert "lost the graph server" in line, err

        # the graph wiped under the probe: said so, never "finished, N scored". A new measure
        # (n=3), so that no fact is skipped as scored by the first run: the probe has the whole
        # graph still to score when the wipe comes, however far the first run got
        assert kgprobe("db", "start", env=env).returncode == 0
        again = [("3" if prev == "-n" else arg) for prev, arg in zip(["", *cmd[:-1]], cmd, strict=True)]
        proc = start_kgprobe(again, env)
        _wait_for_scores(settings, 8, proc, skip=first)
        wiped = kgprobe("db", "wipe", "--yes", env=env)
        assert wiped.returncode == 0, wiped.stderr
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 3, (out, err)
        assert '"finished"' not in out and '"scored"' not in out, out
        assert "Traceback" not in err and "credentials" not in err, err
        line = err.strip().splitlines()[-1]
        assert "graph was wiped" in line and "facts written;" not in line, err
        with connect(settings, ensure_schema=False) as g:
            assert pr.list_runs(g) == []  # nothing was written into the new, empty graph
            assert g.read("MATCH ()-[f:FACT]->() RETURN count(f) AS n")[0]["n"] == 0
    finally:
        kgprobe("db", "stop", env=env)
