"""The graph commands as a user runs them: a real `kgprobe` process, real servers, exit codes."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

from cli_support import clean_env, fresh_home_env, kgprobe

from kgprobe.graph.server import free_port


def test_db_lifecycle_on_a_fresh_home(tmp_path: Path) -> None:
    env = fresh_home_env(tmp_path)
    try:
        status = json.loads(kgprobe("db", "status", "--json", env=env).stdout)
        assert status["managed"] is True and status["running"] is False

        started = kgprobe("db", "start", env=env)
        assert started.returncode == 0, started.stderr
        state = tmp_path / "home" / "server.json"
        assert stat.S_IMODE(state.stat().st_mode) == 0o600  # the password file is private
        assert len(json.loads(state.read_text())["password"]) >= 24

        status = json.loads(kgprobe("db", "status", "--json", env=env).stdout)
        assert status["running"] is True and status["uri"].startswith("bolt://127.0.0.1:")

        # `stats` reaches the running server; the graph is empty
        stats = json.loads(kgprobe("stats", "--json", env=env).stdout)
        assert stats["entities"] == 0 and stats["facts"] == 0

        wiped = kgprobe("db", "wipe", "--yes", "--json", env=env)
        assert wiped.returncode == 0, wiped.stderr
        assert json.loads(wiped.stdout) == {"wiped": True}
    finally:
        stopped = kgprobe("db", "stop", env=env)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert json.loads(kgprobe("db", "status", "--json", env=env).stdout)["running"] is False


def test_commands_start_the_server_when_needed(tmp_path: Path) -> None:
    env = fresh_home_env(tmp_path)
    try:
        result = kgprobe("stats", "--json", env=env)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["facts"] == 0
    finally:
        kgprobe("db", "stop", env=env)


def test_unreachable_server_is_one_clear_line(tmp_path: Path) -> None:
    env = clean_env(NEO4J_URI=f"bolt://127.0.0.1:{free_port()}", NEO4J_PASSWORD="x",
                    KGPROBE_CONFIG=str(tmp_path / "none.json"))
    result = kgprobe("stats", env=env)
    assert result.returncode == 3
    assert "no graph server reachable" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_wrong_password_is_one_clear_line(graph_settings: Any, tmp_path: Path) -> None:
    from kgprobe.graph.server import ManagedServer

    uri = graph_settings.uri or ManagedServer(graph_settings).info().uri
    env = clean_env(NEO4J_URI=uri, NEO4J_USER="root", NEO4J_PASSWORD="definitely-wrong",
                    KGPROBE_CONFIG=str(tmp_path / "none.json"))
    result = kgprobe("stats", env=env)
    assert result.returncode == 3, result.stderr
    assert "refused the user name or password" in result.stderr
    assert "Traceback" not in result.stderr


def test_world_readable_config_file_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"uri": "bolt://127.0.0.1:1", "password": "secret"}))
    cfg.chmod(0o644)
    result = kgprobe("stats", env=clean_env(KGPROBE_CONFIG=str(cfg)))
    assert result.returncode == 2
    assert "chmod 600" in result.stderr and "Traceback" not in result.stderr
