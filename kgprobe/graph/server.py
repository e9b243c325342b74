"""The managed local graph server: ArcadeDB from the `arcadedb-embedded` wheel, spoken to over Bolt.

kgprobe starts it by itself when no ``NEO4J_URI`` is configured, bound to 127.0.0.1 only. Its
password is generated on first start and kept, with the ports, in ``HOME/server.json`` (0600).
The JVM runs detached from the calling process, so it outlives one CLI command; ``stop`` ends it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from kgprobe.config import Settings, read_private_json, write_private_json
from kgprobe.errors import ConfigError, GraphUnavailable

DATABASE = "kgprobe"
USER = "root"  # ArcadeDB's server user; the password is generated per installation


def _package_dir() -> Path:
    try:
        import arcadedb_embedded
    except ImportError as exc:  # pragma: no cover - a broken install
        raise ConfigError("the package arcadedb-embedded is not installed; run `make install`") from exc
    return Path(arcadedb_embedded.__file__).parent


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        return sock.connect_ex((host, port)) == 0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


@dataclass
class ServerInfo:
    running: bool
    pid: int | None
    uri: str
    http_port: int
    bolt_port: int
    home: Path
    database: str = DATABASE


class ManagedServer:
    """One ArcadeDB server per data directory."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.home = settings.home
        self.state_file = self.home / "server.json"
        self.pid_file = self.home / "server.pid"
        self.log_file = self.home / "server.log"
        self.root = self.home / "arcadedb"

    # --- persisted state -------------------------------------------------------------------
    def _state(self) -> dict[str, object]:
        if self.state_file.exists():
            return read_private_json(self.state_file)
        return {}

    def _ensure_state(self) -> dict[str, object]:
        state = self._state()
        if not state.get("password"):
            state = {
                "password": secrets.token_urlsafe(24),
                "bolt_port": self._choose_port(self.settings.bolt_port),
                "http_port": self._choose_port(self.settings.http_port),
                "database": DATABASE,
            }
            write_private_json(self.state_file, state)
        return state

    @staticmethod
    def _choose_port(preferred: int) -> int:
        """The preferred port if free, else any free loopback port (recorded in server.json)."""
        return preferred if not port_open(preferred) else free_port()

    @property
    def password(self) -> str:
        return str(self._ensure_state()["password"])

    def info(self) -> ServerInfo:
        state = self._state()
        bolt = int(str(state.get("bolt_port", self.settings.bolt_port)))
        http = int(str(state.get("http_port", self.settings.http_port)))
        pid = self._pid()
        running = pid is not None and _pid_alive(pid) and port_open(bolt)
        return ServerInfo(running, pid if running else None, f"bolt://127.0.0.1:{bolt}", http, bolt, self.home)

    def _pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    # --- lifecycle -------------------------------------------------------------------------
    def start(self, timeout: float = 90.0) -> ServerInfo:
        """Start the server if it is not running; create the database; return how to reach it."""
        info = self.info()
        if info.running:
            return info
        state = self._ensure_state()
        bolt, http = int(str(state["bolt_port"])), int(str(state["http_port"]))
        for port in (bolt, http):
            if port_open(port):
                raise GraphUnavailable(
                    f"port {port} on 127.0.0.1 is taken by another program; set KGPROBE_BOLT_PORT/"
                    f"KGPROBE_HTTP_PORT and remove {self.state_file}, or stop that program"
                )
        pkg = _package_dir()
        java = pkg / "jre" / "bin" / "java"
        self.root.mkdir(parents=True, exist_ok=True)
        cmd = [
            str(java),
            f"-Xmx{self.settings.heap}",
            f"-Darcadedb.server.rootPath={self.root}",
            f"-Darcadedb.server.rootPassword={state['password']}",
            "-Darcadedb.server.httpIncomingHost=127.0.0.1",
            f"-Darcadedb.server.httpIncomingPort={http}",
            "-Darcadedb.server.plugins=Bolt:com.arcadedb.bolt.BoltProtocolPlugin",
            "-Darcadedb.bolt.host=127.0.0.1",
            f"-Darcadedb.bolt.port={bolt}",
            f"-Darcadedb.bolt.defaultDatabase={DATABASE}",
            "-cp",
            f"{pkg / 'jars'}/*",
            "com.arcadedb.server.ArcadeDBServer",
        ]
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
                cmd,
                cwd=self.root,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid_file.write_text(str(proc.pid))
        deadline = time.monotonic() + timeout
        while not port_open(http):
            if proc.poll() is not None:
                raise GraphUnavailable(
                    f"the graph server exited with code {proc.returncode}; see {self.log_file}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise GraphUnavailable(f"the graph server did not start in {timeout:.0f} s; see {self.log_file}")
            time.sleep(0.2)
        self._ensure_database(http, str(state["password"]))
        while not port_open(bolt):
            if time.monotonic() > deadline:
                raise GraphUnavailable(f"Bolt port {bolt} did not open; see {self.log_file}")
            time.sleep(0.2)
        return self.info()

    def _http(self, http_port: int, password: str, command: str) -> dict[str, object]:
        token = base64.b64encode(f"{USER}:{password}".encode()).decode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{http_port}/api/v1/server",
            data=json.dumps({"command": command}).encode(),
            headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310 - loopback only
                return dict(json.loads(resp.read() or b"{}"))
        except urllib.error.HTTPError as exc:
            body = exc.read().decode(errors="replace")
            return {"error": body, "status": exc.code}

    def _ensure_database(self, http_port: int, password: str) -> None:
        if (self.root / "databases" / DATABASE).exists():
            return
        result = self._http(http_port, password, f"create database {DATABASE}")
        if "error" in result and "exist" not in str(result["error"]).lower():
            raise GraphUnavailable(f"could not create the database: {result['error']}")

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``). True if one was running."""
        pid = self._pid()
        if pid is None or not _pid_alive(pid):
            self.pid_file.unlink(missing_ok=True)
            return False
        os.killpg(pid, signal.SIGTERM) if _is_group_leader(pid) else os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _pid_alive(pid) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.2)
        if _pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
        _reap(pid)
        self.pid_file.unlink(missing_ok=True)
        return True

    def wipe(self) -> None:
        """Delete every node and edge: drop and recreate the database (schema comes back on use)."""
        was_running = self.info().running
        self.stop()
        shutil.rmtree(self.root / "databases" / DATABASE, ignore_errors=True)
        if was_running:
            self.start()


def _is_group_leader(pid: int) -> bool:
    try:
        return os.getpgid(pid) == pid
    except ProcessLookupError:
        return False


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
