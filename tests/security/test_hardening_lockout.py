"""Issue 22, item 1: no local user can lock kgprobe out of its managed graph server.

ArcadeDB locks a user name for 30 s after 5 failed logins, over HTTP or Bolt, and anyone on the
machine can send those (no credentials needed). The reproducer: a second local user (`nobody`,
through `runuser`) sends bad passwords for `root` while kgprobe runs. Every test here runs the
real `kgprobe` command against a real managed server of its own (a fresh home, free ports).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from cli_support import fresh_home_env, kgprobe
from test_hardening import managed_only

LOCKED = "Too many failed authentication attempts"  # ArcadeDB's own answer while a name is locked


def needs_root() -> None:
    managed_only()
    if os.geteuid() != 0:
        pytest.skip("needs root to act as a second local user (nobody, through runuser)")


def http_as(port: int, user: str, password: str) -> str:
    """What ArcadeDB's HTTP API answers to a login (status and body), as this process."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/databases",
                                 headers={"Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - loopback
            return f"{resp.status} {resp.read().decode()}"
    except urllib.error.HTTPError as exc:
        return f"{exc.code} {exc.read().decode()}"


def attack_http(port: int, user: str, times: int = 6) -> None:
    """`nobody` sends bad logins for ``user`` to the HTTP API, as in the issue's reproducer."""
    for _ in range(times):
        subprocess.run(["runuser", "-u", "nobody", "--", "curl", "-s", "-o", "/dev/null", "-u", f"{user}:x",
                        f"http://127.0.0.1:{port}/api/v1/databases"], check=True, timeout=30)


def attack_bolt(port: int, user: str, times: int = 6) -> None:
    """`nobody` sends bad logins for ``user`` over Bolt, with the official driver — when nobody can
    run this interpreter (a checkout inside a 0700 directory cannot); the HTTP attack always runs."""
    probe = subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-c", "import neo4j"],
                           capture_output=True, timeout=60)
    if probe.returncode != 0:
        return
    code = ("import sys, neo4j\n"
            "for _ in range(int(sys.argv[3])):\n"
            "    d = neo4j.GraphDatabase.driver(f'bolt://127.0.0.1:{sys.argv[1]}', auth=(sys.argv[2], 'x'))\n"
            "    try: d.verify_connectivity()\n"
            "    except Exception: pass\n"
            "    d.close()\n")
    subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-c", code, str(port), user, str(times)],
                   check=True, timeout=120, capture_output=True)


def state(home: Path) -> dict[str, object]:
    return dict(json.loads((home / "server.json").read_text()))


def test_another_local_user_cannot_lock_kgprobe_out(tmp_path: Path) -> None:
    needs_root()
    env = fresh_home_env(tmp_path)
    home, http, bolt = tmp_path / "home", int(env["KGPROBE_HTTP_PORT"]), int(env["KGPROBE_BOLT_PORT"])
    try:
        assert kgprobe("db", "start", env=env).returncode == 0
        # nobody tries every name it could know: ArcadeDB's administrator and the obvious ones
        for name in ("root", "kgprobe", "neo4j"):
            attack_http(http, name)
            attack_bolt(bolt, name)
        assert LOCKED in http_as(http, "root", str(state(home)["password"]))  # the attack did lock root
        start = time.monotonic()
        stats = kgprobe("stats", "--json", env=env)
        assert stats.returncode == 0, stats.stderr
        assert json.loads(stats.stdout)["facts"] == 0
        # root is still locked while kgprobe worked, so kgprobe did not wait the lock out
        assert time.monotonic() - start < 25 and LOCKED in http_as(http, "root", str(state(home)["password"]))
        # the Bolt user kgprobe logs in as is in no process's arguments (nobody can read them all)
        pid = int((home / "server.pid").read_text())
        ps = subprocess.run(["runuser", "-u", "nobody", "--", "ps", "-ww", "-o", "args=", "-p", str(pid)],
                            capture_output=True, text=True, timeout=30)
        assert "ArcadeDBServer" in ps.stdout and str(state(home)["user"]) not in ps.stdout
        status = kgprobe("db", "status", "--json", env=env)
        assert str(state(home)["user"]) not in status.stdout and str(state(home)["user_password"]) not in status.stdout
    finally:
        kgprobe("db", "stop", env=env)


def test_a_lock_out_is_named_as_such_and_waited_out_for_a_bounded_time(tmp_path: Path) -> None:
    """Should kgprobe's own user name leak, a lock-out is reported as a lock-out (not as a wrong
    password), and waited out with backoff for KGPROBE_LOCKOUT_WAIT seconds."""
    needs_root()
    env = fresh_home_env(tmp_path)
    home, http = tmp_path / "home", int(env["KGPROBE_HTTP_PORT"])
    try:
        assert kgprobe("db", "start", env=env).returncode == 0
        user = str(state(home)["user"])
        attack_http(http, user)
        short = kgprobe("stats", env={**env, "KGPROBE_LOCKOUT_WAIT": "2"})
        assert short.returncode == 3, short.stderr
        assert "locked that user after repeated failed logins" in short.stderr
        assert "refused the user name or password" not in short.stderr and "Traceback" not in short.stderr
        assert user not in short.stderr  # the name stays a secret in messages
        # ArcadeDB's lock lasts 30 s: the default wait (120 s) rides it out and the command works
        attack_http(http, user)
        start = time.monotonic()
        waited = kgprobe("stats", "--json", env=env)
        assert waited.returncode == 0, waited.stderr
        assert time.monotonic() - start >= 20  # it really waited for the lock to end
        bad = kgprobe("stats", env={**env, "KGPROBE_LOCKOUT_WAIT": "nan"})
        assert bad.returncode == 2 and "KGPROBE_LOCKOUT_WAIT" in bad.stderr
    finally:
        kgprobe("db", "stop", env=env)


def test_a_home_made_before_the_bolt_user_gets_one_even_with_root_locked(tmp_path: Path) -> None:
    """A home whose server.json has only root's password (kgprobe before this change): the next
    command creates kgprobe's own user over HTTP as root, waiting out a lock-out of root."""
    needs_root()
    env = fresh_home_env(tmp_path)
    home, http = tmp_path / "home", int(env["KGPROBE_HTTP_PORT"])
    try:
        assert kgprobe("db", "start", env=env).returncode == 0
        old = {k: v for k, v in state(home).items() if k not in ("user", "user_password")}
        fd = os.open(home / "server.json.new", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(old, fh)
        os.replace(home / "server.json.new", home / "server.json")
        attack_http(http, "root")
        assert LOCKED in http_as(http, "root", str(old["password"]))
        stats = kgprobe("stats", "--json", env=env)
        assert stats.returncode == 0, stats.stderr
        user = str(state(home)["user"])
        assert user.startswith("kgprobe_") and len(user) == len("kgprobe_") + 32
        names = [json.loads(line)["name"] for line in
                 (home / "arcadedb" / "config" / "server-users.jsonl").read_text().splitlines() if line]
        assert user in names and "root" in names
    finally:
        kgprobe("db", "stop", env=env)
