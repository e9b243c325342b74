"""Issue 10's security and managed-server guarantees, on the real managed server, through the
real `kgprobe` command (docs/guarantees.md lists them)."""

from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from _kgprobe_process import start_kgprobe
from cli_support import clean_env, fresh_home_env, kgprobe

from kgprobe.graph.server import free_port

SERVER_CLASS = "com.arcadedb.server.ArcadeDBServer"


def jvms_of(home: Path) -> list[int]:
    """Live ArcadeDB servers whose argv names this home's data directory (read from /proc)."""
    want = f"-Darcadedb.server.rootPath={home / 'arcadedb'}"
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and SERVER_CLASS.encode() in argv and want.encode() in argv:
            pids.append(int(entry))
    return pids


def evil_entities(path: Path) -> Path:
    """A Wikidata entity-JSON file whose property label and item label are Rich markup."""
    snak = {"snaktype": "value", "property": "P9999", "datatype": "wikibase-item",
            "datavalue": {"type": "wikibase-entityid",
                          "value": {"entity-type": "item", "numeric-id": 2, "id": "Q2"}}}
    entities = {
        "P9999": {"type": "property", "id": "P9999", "datatype": "wikibase-item", "claims": {},
                  "labels": {"en": {"language": "en", "value": "evil [/] label"}}},
        "Q1": {"type": "item", "id": "Q1", "labels": {"en": {"language": "en", "value": "one [bold]"}},
               "claims": {"P9999": [{"mainsnak": snak, "type": "statement", "id": "Q1$x", "rank": "normal"}]}},
        "Q2": {"type": "item", "id": "Q2", "labels": {"en": {"language": "en", "value": "two"}}, "claims": {}},
    }
    path.write_text(json.dumps({"entities": entities}))
    return path


def managed_only() -> None:
    if os.environ.get("NEO4J_URI"):
        pytest.skip("needs the managed server (the suite runs against NEO4J_URI)")


# --- 1. no secret in argv; owner-only files --------------------------------------------------
def test_root_password_is_not_in_argv_and_the_data_is_owner_only(tmp_path: Path) -> None:
    managed_only()
    if os.geteuid() != 0:
        pytest.skip("needs root to run `ps` as another user (nobody); run the suite as root to check this")
    env = fresh_home_env(tmp_path)
    home = tmp_path / "home"
    try:
        started = kgprobe("db", "start", env=env)
        assert started.returncode == 0, started.stderr
        ingested = kgprobe("ingest", str(evil_entities(tmp_path / "e.json")), "--json", env=env)
        assert ingested.returncode == 0, ingested.stderr
        password = json.loads((home / "server.json").read_text())["password"]
        pid = int((home / "server.pid").read_text())
        ps = subprocess.run(["runuser", "-u", "nobody", "--", "ps", "-ww", "-o", "args=", "-p", str(pid)],
                            capture_output=True, text=True, timeout=30)
        assert SERVER_CLASS in ps.stdout, ps  # nobody does see the process and its arguments ...
        assert password not in ps.stdout  # ... but not the password
        environ = subprocess.run(["runuser", "-u", "nobody", "--", "cat", f"/proc/{pid}/environ"],
                                 capture_output=True, text=True, timeout=30)
        assert password not in environ.stdout
        # every directory 0700, every file 0600
        modes = {p: stat.S_IMODE(p.stat().st_mode) for p in [home, *home.rglob("*")] if not p.is_symlink()}
        assert any(p.parent.name == "kgprobe" and p.is_file() for p in modes)  # database files exist
        wide = {str(p): oct(m) for p, m in modes.items() if m != (0o700 if p.is_dir() else 0o600)}
        assert wide == {}
        assert not (home / "root-password").exists()  # read by ArcadeDB at start, then removed
    finally:
        kgprobe("db", "stop", env=env)


def test_server_json_is_private_despite_a_stale_world_writable_temp_file(tmp_path: Path) -> None:
    managed_only()
    env = fresh_home_env(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    stale = home / "server.json.tmp"  # left by an older kgprobe, or planted: anyone may have it open
    stale.write_text("{}")
    stale.chmod(0o666)
    try:
        started = kgprobe("db", "start", env=env)
        assert started.returncode == 0, started.stderr
        assert stat.S_IMODE((home / "server.json").stat().st_mode) == 0o600
        assert stale.read_text() == "{}"  # never opened for writing: the password is not in it
    finally:
        kgprobe("db", "stop", env=env)


# --- 2. credentials never printed -----------------------------------------------------------
def test_credentials_in_the_uri_are_never_printed(graph_settings: Any, tmp_path: Path) -> None:
    secret = "S3CRET-" + secrets.token_hex(8)
    port = free_port()
    env = clean_env(NEO4J_URI=f"bolt://root:{secret}@127.0.0.1:{port}", KGPROBE_CONFIG=str(tmp_path / "none.json"))
    for args in (["stats"], ["stats", "--json"], ["db", "status"], ["db", "status", "--json"], ["db", "start"],
                 ["templates", "list"], ["unknown", "--model", "m"]):
        r = kgprobe(*args, env=env)
        out = r.stdout + r.stderr
        assert secret not in out, (args, out)
        assert "Traceback" not in out, (args, out)
    status = json.loads(kgprobe("db", "status", "--json", env=env).stdout)
    assert status["uri"] == f"bolt://127.0.0.1:{port}" and status["user"] == "root"
    assert status["password"] == "the user info of NEO4J_URI"

    # On the real server, credentials given in the URI are used (and still never printed).
    if graph_settings.uri:
        return
    from kgprobe.graph.server import ManagedServer

    server = ManagedServer(graph_settings)
    uri = server.info().uri.replace("bolt://", f"bolt://root:{server.password}@")
    env = clean_env(NEO4J_URI=uri, KGPROBE_CONFIG=str(tmp_path / "none.json"))
    for args in (["stats", "--json"], ["db", "status"]):
        r = kgprobe(*args, env=env)
        assert r.returncode == 0, r.stderr
        assert server.password not in r.stdout + r.stderr
    assert "facts" in json.loads(kgprobe("stats", "--json", env=env).stdout)


@pytest.mark.parametrize("uri", ["http://127.0.0.1:7474", "https://example.org", "bolt://[::1", "localhost:7687",
                                 "bolt://host:notaport", "bolt://"])
def test_a_bad_uri_is_one_clear_line(uri: str, tmp_path: Path) -> None:
    env = clean_env(NEO4J_URI=uri, NEO4J_PASSWORD="x", KGPROBE_CONFIG=str(tmp_path / "none.json"))
    r = kgprobe("stats", env=env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: NEO4J_URI") and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


# --- 4. text from data or users is never markup ---------------------------------------------
def test_markup_in_data_files_and_arguments_prints_literally(graph: Any, kgprobe_env: dict[str, str],
                                                              tmp_path: Path) -> None:
    ingested = kgprobe("ingest", str(evil_entities(tmp_path / "e.json")), env=kgprobe_env)
    assert ingested.returncode == 0, ingested.stderr
    stats = kgprobe("stats", env=kgprobe_env)
    assert stats.returncode == 0, stats.stderr
    assert "evil [/] label" in stats.stdout

    templates = tmp_path / "t.jsonl"
    templates.write_text(json.dumps({"relation": "P9999", "template": "[X] is [/] of [Y] ."}) + "\n")
    imported = kgprobe("templates", "import", str(templates), "-f", "lama", env=kgprobe_env)
    assert imported.returncode == 0, imported.stderr
    listed = kgprobe("templates", "list", env=kgprobe_env)
    assert listed.returncode == 0, listed.stderr
    assert "[X] is [/] of [Y] ." in listed.stdout

    missing = tmp_path / "dir[/]x" / "t.jsonl"
    r = kgprobe("templates", "import", str(missing), "-f", "lama", env=kgprobe_env)
    assert r.returncode == 4 and "Traceback" not in r.stderr
    assert "no such file" in r.stderr and "dir[/]x" in r.stderr

    r = kgprobe("score", "--model", "[red]x[/red]", "The capital of France is", " Paris", env=kgprobe_env)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "'[red]x[/red]'" in r.stderr


# --- 5. one server per home, whatever runs at once ------------------------------------------
def test_five_concurrent_commands_on_a_stopped_home_share_one_server(tmp_path: Path) -> None:
    managed_only()
    env = fresh_home_env(tmp_path)
    home = tmp_path / "home"
    try:
        procs = [start_kgprobe(["stats", "--json"], env) for _ in range(5)]
        results = [(p.wait(timeout=300), *p.communicate()) for p in procs]
        for rc, out, err in results:
            assert rc == 0, err
            assert json.loads(out)["facts"] == 0
        jvms = jvms_of(home)
        assert len(jvms) == 1
        assert int((home / "server.pid").read_text()) == jvms[0]
        # and the next command still works with the one password kept
        again = kgprobe("stats", "--json", env=env)
        assert again.returncode == 0, again.stderr
        assert jvms_of(home) == jvms
    finally:
        kgprobe("db", "stop", env=env)
    deadline = time.monotonic() + 30
    while jvms_of(home) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert jvms_of(home) == []


def test_a_server_without_its_pid_file_is_adopted(tmp_path: Path) -> None:
    managed_only()
    env = fresh_home_env(tmp_path)
    home = tmp_path / "home"
    try:
        assert kgprobe("db", "start", env=env).returncode == 0
        first = jvms_of(home)
        (home / "server.pid").unlink()  # e.g. a command killed between starting and recording
        r = kgprobe("stats", "--json", env=env)
        assert r.returncode == 0, r.stderr
        assert jvms_of(home) == first and int((home / "server.pid").read_text()) == first[0]
    finally:
        kgprobe("db", "stop", env=env)
    assert jvms_of(home) == []


# --- 6. never signal a process that is not ours ---------------------------------------------
def test_a_stale_pid_naming_another_process_is_never_signalled(tmp_path: Path) -> None:
    managed_only()
    env = fresh_home_env(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    other = subprocess.Popen(["sleep", "100"], start_new_session=True)  # its own process group
    try:
        (home / "server.pid").write_text(str(other.pid))
        stopped = kgprobe("db", "stop", env=env)
        assert stopped.returncode == 0, stopped.stderr
        assert "was not running" in stopped.stdout
        assert other.poll() is None

        (home / "server.pid").write_text(str(other.pid))
        wiped = kgprobe("db", "wipe", "--yes", env=env)
        assert wiped.returncode == 0, wiped.stderr
        assert other.poll() is None
        assert not (home / "server.pid").exists()
    finally:
        other.kill()
        other.wait()
