"""The suite's way of running `kgprobe` (tests/_kgprobe_process.py: a process forked from a
server that imported torch once) gives what a new ``python -m kgprobe.cli`` process gives:
the same stdout, stderr and exit code, the command's own environment and working directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import _kgprobe_process as kp
from cli_support import fresh_home_env


def real(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kgprobe.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_a_forked_command_equals_a_new_process(tmp_path: Path) -> None:
    env = fresh_home_env(tmp_path)  # a home of its own, never started: nothing is written
    work = tmp_path / "work"
    work.mkdir()
    (work / "bad.yaml").write_text("model: [unclosed\n", encoding="utf-8")
    commands = [
        ["--version"],
        ["db", "status", "--json"],  # reads KGPROBE_HOME and the ports from the command's environment
        ["ingest", "missing.json"],  # a path relative to the command's working directory: exit 4
        ["factor", "--config", "bad.yaml"],  # a config file relative to it, unreadable: one line
        ["probe", "--threshold", "nan", "--model", "x"],  # refused before the graph: exit 2
    ]
    before = kp.COUNTS.get("forked", 0)
    for args in commands:
        forked = kp.run_kgprobe(args, env, cwd=work, timeout=300)
        fresh = real(args, env, work)
        assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr), args
    assert kp.COUNTS.get("forked", 0) - before == len(commands)  # none fell back to a new process
    status = json.loads(kp.run_kgprobe(["db", "status", "--json"], env, cwd=work).stdout)
    assert status["uri"].endswith(f":{env['KGPROBE_BOLT_PORT']}") and status["running"] is False
    assert kp.run_kgprobe(["ingest", "missing.json"], env, cwd=work).returncode == 4
    assert "missing.json" in kp.run_kgprobe(["ingest", "missing.json"], env, cwd=work).stderr


def test_a_changed_start_up_environment_is_a_new_process(tmp_path: Path) -> None:
    env = {**fresh_home_env(tmp_path), "PYTHONWARNINGS": "error::UserWarning"}
    before = dict(kp.COUNTS)
    r = kp.run_kgprobe(["--version"], env)
    assert r.returncode == 0 and r.stdout.strip()
    grew = {k: v - before.get(k, 0) for k, v in kp.COUNTS.items() if v != before.get(k, 0)}
    assert list(grew) == ["new process: start-up environment differs (PYTHONWARNINGS)"], grew


def test_a_killed_command_reports_the_signal_as_popen_does(tmp_path: Path) -> None:
    env = fresh_home_env(tmp_path)
    fifo = tmp_path / "never-written"
    os.mkfifo(fifo)  # reading it blocks until a writer opens it: the command waits for ever
    proc = kp.start_kgprobe(["ingest", str(fifo)], env)
    time.sleep(1.0)
    assert proc.poll() is None
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL


def test_a_plugin_on_pythonpath_is_found_by_a_forked_command(tmp_path: Path) -> None:
    """``PYTHONPATH`` is the command's: a ``--plugin`` module found only there is imported (a
    new process's sys.path order: working directory, PYTHONPATH, the rest); a folder that would
    shadow a library the fork server has imported makes the command a new process."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "only_on_this_path.py").write_text("ANSWER = 42\n", encoding="utf-8")
    env = {**fresh_home_env(tmp_path), "PYTHONPATH": str(site)}
    before = kp.COUNTS.get("forked", 0)
    args = ["--plugin", "only_on_this_path", "measures", "--json"]
    forked = kp.run_kgprobe(args, env, cwd=tmp_path)
    fresh = real(args, env, tmp_path)
    assert forked.returncode == 0, forked.stderr
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert kp.COUNTS.get("forked", 0) - before == 1
    without = kp.run_kgprobe(args, fresh_home_env(tmp_path), cwd=tmp_path)
    assert without.returncode == 2 and "only_on_this_path" in without.stderr  # the path did it

    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "faiss.py").write_text("", encoding="utf-8")  # the fork server has imported faiss
    key = "new process: PYTHONPATH shadows faiss"
    had = kp.COUNTS.get(key, 0)
    assert kp.run_kgprobe(["--version"], {**env, "PYTHONPATH": str(shadow)}).returncode == 0
    assert kp.COUNTS.get(key, 0) == had + 1


def test_a_stopped_fork_server_leaves_no_socket_directory(tmp_path: Path) -> None:
    """Each test process starts a fork server whose socket lives in a directory of its own under
    the temporary directory; stopping the server removes it (they used to pile up in /tmp)."""
    server = kp._ForkServer()
    try:
        assert server.usable_for(kp.BASE_ENV, str(tmp_path))
        sock_dir = Path(server.sock_path).parent
        assert sock_dir.is_dir() and Path(server.sock_path).is_socket()
    finally:
        server.stop()
    assert server.proc is not None and server.proc.poll() is not None
    assert not sock_dir.exists()
