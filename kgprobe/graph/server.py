"""The managed local graph server: ArcadeDB from the `arcadedb-embedded` wheel, spoken to over Bolt.

kgprobe starts it by itself when no ``NEO4J_URI`` is configured, bound to 127.0.0.1 only. Its
password is generated on first start and kept, with the ports, in ``HOME/server.json`` (0600).
The JVM runs detached from the calling process, so it outlives one CLI command; ``stop`` ends it.

Security and concurrency (docs/guarantees.md):
- the root password never appears in the JVM's arguments: ArcadeDB reads it at first start from
  a 0600 file named by ``arcadedb.server.rootPasswordPath`` (removed once the server is up; it
  keeps a salted hash in ``arcadedb/config/server-users.jsonl``);
- the server runs under umask 077, so its directories are 0700 and its files 0600;
- start, stop and wipe hold an exclusive lock on ``HOME/server.lock``: one server per home;
- a process is signalled only when its command line names ArcadeDB's server class and this
  home's root path (and its start time matches the one recorded at start).

Lock-out (docs/guarantees.md): ArcadeDB locks a user name for 30 s after 5 failed logins, counted
per name and reachable without credentials by every local user over HTTP and Bolt (the numbers
are hard-coded; HTTP cannot be turned off). kgprobe therefore never logs in over Bolt as ``root``:
each home gets its own Bolt user with a random, secret name and password (kept in server.json,
0600), created over HTTP at first start. Nobody else can name that user, so nobody can lock it.
``root`` is used only over HTTP, at first start and when adopting a server; if someone has locked
it, kgprobe says so and retries with backoff for ``Settings.lockout_wait`` seconds.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from kgprobe.config import (
    Settings,
    private_dir,
    read_private_json,
    tighten_tree,
    write_private_json,
    write_private_text,
)
from kgprobe.errors import ConfigError, GraphUnavailable, LockedOut, lockout_waits
from kgprobe.graph.servers import DATABASE, GraphServer, ServerInfo

__all__ = ["DATABASE", "ManagedServer", "ServerInfo", "free_port", "port_open", "process_start_time"]
ADMIN = "root"  # ArcadeDB's administrator: HTTP set-up only, never Bolt (see the module docstring)
SERVER_CLASS = "com.arcadedb.server.ArcadeDBServer"
# What ArcadeDB answers, before it checks the password, while a user name is locked.
LOCKED_OUT = "Too many failed authentication attempts"
T = TypeVar("T")


def _new_user_name() -> str:
    """A Bolt user name nobody can guess (128 random bits), so nobody can lock it out."""
    return "kgprobe_" + secrets.token_hex(16)




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


def _cmdline(pid: int) -> list[str] | None:
    """The process's argv, or None when it is gone (Linux /proc, else `ps`)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
        return [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    except FileNotFoundError:
        if Path("/proc/self").exists():
            return None
    except OSError:
        return None
    try:  # no /proc (macOS): ps prints the arguments joined by spaces
        out = subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(pid)],  # noqa: S603,S607
                             capture_output=True, text=True, timeout=10, check=False).stdout.strip()
    except OSError:
        return None
    return out.split(" ") if out else None


def process_start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), if known."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class ManagedServer(GraphServer):
    """One ArcadeDB server per data directory: the built-in entry ``arcadedb`` of
    :data:`~kgprobe.graph.servers.GRAPH_SERVERS` (the default of ``KGPROBE_SERVER``)."""

    name = "arcadedb"
    summary = "ArcadeDB from the arcadedb-embedded wheel, over Bolt on 127.0.0.1"

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)  # home absolute: the JVM runs in another cwd; identity checks compare argv
        self.state_file = self.home / "server.json"
        self.pid_file = self.home / "server.pid"
        self.log_file = self.home / "server.log"
        self.lock_file = self.home / "server.lock"
        self.root = self.home / "arcadedb"
        self.password_file = self.home / "root-password"
        self.users_file = self.root / "config" / "server-users.jsonl"

    # --- persisted state -------------------------------------------------------------------
    def _state(self) -> dict[str, object]:
        if self.state_file.exists():
            return read_private_json(self.state_file)
        return {}

    def _ensure_state(self) -> dict[str, object]:
        """server.json, created with a fresh password on first use (call under the lock)."""
        state = self._state()
        if not state.get("password"):
            if self._server_pids():
                raise GraphUnavailable(
                    f"a graph server for {self.home} runs but {self.state_file} has no password; "
                    "run `kgprobe db stop`, then start again"
                )
            # The users file holds a hash of a password nobody knows any more: ArcadeDB must
            # create root again with the new one.
            self.users_file.unlink(missing_ok=True)
            state = {
                "password": secrets.token_urlsafe(24),
                "bolt_port": self._choose_port(self.settings.bolt_port, self.settings.bolt_port_from),
                "http_port": self._choose_port(self.settings.http_port, self.settings.http_port_from),
                "database": DATABASE,
            }
            write_private_json(self.state_file, state)
        if not state.get("user") or not state.get("user_password"):
            # A new home, or one made by a kgprobe that logged in as root: give it its own user
            # (created in ArcadeDB by _ensure_user once the server answers).
            state.update(user=_new_user_name(), user_password=secrets.token_urlsafe(24))
            write_private_json(self.state_file, state)
        return state

    @staticmethod
    def _choose_port(preferred: int, asked_by: str | None = None) -> int:
        """The default port if free, else any free loopback port (recorded in server.json). A
        port the user configured (``asked_by`` names where) is used as given: taken, it is
        refused in one line rather than silently swapped for another."""
        if not port_open(preferred):
            return preferred
        if asked_by:
            raise GraphUnavailable(
                f"port {preferred} on 127.0.0.1, set by {asked_by}, is taken by another program; "
                "choose a free port there, or stop that program"
            )
        return free_port()

    @property
    def password(self) -> str:
        """The administrator's (root's) password: HTTP set-up only."""
        state = self._state()
        if state.get("password"):
            return str(state["password"])
        with self._locked():
            return str(self._ensure_state()["password"])

    def credentials(self) -> tuple[str, str]:
        """The Bolt user and password of this home (start the server first: ``start``)."""
        state = self._state()
        if not self._user_ready(state):
            raise GraphUnavailable(
                f"the graph server of {self.home} has no kgprobe user yet; run `kgprobe db start`"
            )
        return str(state["user"]), str(state["user_password"])

    def credentials_kept(self) -> tuple[str, str]:
        """The user's name is a secret like its password: knowing it is what it takes to lock
        it out (docs/guarantees.md); both are keys of server.json, 0600."""
        return (f'key "user" of {self.state_file} (mode 0600)',
                f'key "user_password" of {self.state_file} (mode 0600)')

    def _user_ready(self, state: dict[str, object] | None = None) -> bool:
        """True when server.json names a Bolt user and ArcadeDB's users file holds it."""
        state = self._state() if state is None else state
        name = state.get("user")
        if not name or not state.get("user_password"):
            return False
        try:
            lines = self.users_file.read_text(encoding="utf-8").splitlines()
        except OSError:
            return False
        for line in lines:
            with contextlib.suppress(ValueError):
                if isinstance(entry := json.loads(line), dict) and entry.get("name") == name:
                    return True
        return False

    def info(self) -> ServerInfo:
        state = self._state()
        bolt = int(str(state.get("bolt_port", self.settings.bolt_port)))
        http = int(str(state.get("http_port", self.settings.http_port)))
        pid = self._pid()
        running = pid is not None and self._is_ours(pid) and port_open(bolt)
        return ServerInfo(running, pid if running else None, f"bolt://127.0.0.1:{bolt}", http, bolt, self.home)

    def _pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    # --- identity: never signal a process that is not this home's server -------------------
    def _is_ours(self, pid: int) -> bool:
        """True when ``pid`` is alive and is the ArcadeDB server of this home."""
        if pid <= 0 or not _pid_alive(pid):
            return False
        argv = _cmdline(pid)
        if not argv or SERVER_CLASS not in argv or f"-Darcadedb.server.rootPath={self.root}" not in argv:
            return False
        recorded = self._state().get("pid_start") if self.state_file.exists() else None
        if recorded and str(self._state().get("pid")) == str(pid):
            return process_start_time(pid) in (None, str(recorded))
        return True

    def _server_pids(self) -> list[int]:
        """Every live ArcadeDB server of this home (normally none or one), found in /proc."""
        pids = []
        with contextlib.suppress(OSError):
            for entry in os.listdir("/proc"):
                if entry.isdigit() and self._is_ours(int(entry)):
                    pids.append(int(entry))
        pid = self._pid()
        if pid is not None and pid not in pids and self._is_ours(pid):
            pids.append(pid)
        return pids

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold HOME/server.lock: start, stop and wipe of one home never run at once."""
        private_dir(self.home)
        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    # --- lifecycle -------------------------------------------------------------------------
    def start(self, timeout: float = 90.0) -> ServerInfo:
        """Start the server if it is not running; create the database and kgprobe's user."""
        info = self.info()
        if info.running and self._user_ready():
            return info
        with self._locked():
            return self._start_locked(timeout)

    def _start_locked(self, timeout: float) -> ServerInfo:
        info = self.info()
        state = self._ensure_state()
        if info.running:  # another process started it while we waited, or a home made by an older kgprobe
            self._ensure_user(info.http_port, state)
            return info
        bolt, http = int(str(state["bolt_port"])), int(str(state["http_port"]))
        password = str(state["password"])
        adopted = self._adopt(state)
        if adopted is not None:
            return adopted
        for port in (bolt, http):
            if port_open(port):
                raise GraphUnavailable(
                    f"port {port} on 127.0.0.1 is taken by another program; set KGPROBE_BOLT_PORT/"
                    f"KGPROBE_HTTP_PORT and remove {self.state_file}, or stop that program"
                )
        pkg = _package_dir()
        java = pkg / "jre" / "bin" / "java"
        private_dir(self.root)
        tighten_tree(self.root)
        # ArcadeDB reads the root password from this file at its first start only (afterwards
        # from its users file): never from argv, where every local user could read it.
        write_private_text(self.password_file, password)
        cmd = [
            str(java),
            f"-Xmx{self.settings.heap}",
            f"-Darcadedb.server.rootPath={self.root}",
            f"-Darcadedb.server.rootPasswordPath={self.password_file}",
            "-Darcadedb.server.httpIncomingHost=127.0.0.1",
            f"-Darcadedb.server.httpIncomingPort={http}",
            "-Darcadedb.server.plugins=Bolt:com.arcadedb.bolt.BoltProtocolPlugin",
            "-Darcadedb.bolt.host=127.0.0.1",
            f"-Darcadedb.bolt.port={bolt}",
            f"-Darcadedb.bolt.defaultDatabase={DATABASE}",
            "-cp",
            f"{pkg / 'jars'}/*",
            SERVER_CLASS,
        ]
        try:
            log_fd = os.open(self.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(log_fd, "ab") as log:
                proc = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
                    cmd,
                    cwd=self.root,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    umask=0o077,
                )
            self._record_pid(proc.pid)
            deadline = time.monotonic() + timeout
            while not port_open(http):
                if proc.poll() is not None:
                    raise GraphUnavailable(
                        f"the graph server exited with code {proc.returncode}; see {self.log_file}"
                    )
                if time.monotonic() > deadline:
                    self._stop_locked()
                    raise GraphUnavailable(f"the graph server did not start in {timeout:.0f} s; see {self.log_file}")
                time.sleep(0.2)
        finally:
            self.password_file.unlink(missing_ok=True)
        self._ensure_database(http, password)
        self._ensure_user(http, state)
        while not port_open(bolt):
            if time.monotonic() > deadline:
                raise GraphUnavailable(f"Bolt port {bolt} did not open; see {self.log_file}")
            time.sleep(0.2)
        return self.info()

    def _record_pid(self, pid: int) -> None:
        state = self._state()
        state.update(pid=pid, pid_start=process_start_time(pid))
        write_private_json(self.state_file, state)
        write_private_text(self.pid_file, str(pid))

    def _adopt(self, state: dict[str, object]) -> ServerInfo | None:
        """A server of this home that runs without a valid server.pid (e.g. an earlier command
        was killed mid-start): use it when it answers with this home's credentials."""
        pids = self._server_pids()
        if not pids:
            return None
        http, bolt = int(str(state["http_port"])), int(str(state["bolt_port"]))
        deadline = time.monotonic() + 60
        while not (port_open(http) and port_open(bolt)) and time.monotonic() < deadline:
            if not any(_pid_alive(p) for p in pids):
                return None
            time.sleep(0.2)
        if len(pids) == 1 and port_open(bolt) and self._answers(http, bolt, state):
            write_private_text(self.pid_file, str(pids[0]))
            self._ensure_database(http, str(state["password"]))
            self._ensure_user(http, state)
            return self.info()
        raise GraphUnavailable(
            f"a graph server for {self.home} runs (pid {', '.join(map(str, pids))}) but does not answer "
            "with this home's credentials; run `kgprobe db stop`, then start again"
        )

    def _answers(self, http: int, bolt: int, state: dict[str, object]) -> bool:
        """Does the server answer with this home's credentials? Over Bolt as kgprobe's user
        when it exists (nobody can lock it), else over HTTP as root (waiting out a lock-out)."""
        if self._user_ready(state):
            from neo4j import GraphDatabase
            from neo4j.exceptions import Neo4jError, ServiceUnavailable

            auth = (str(state["user"]), str(state["user_password"]))
            try:
                with GraphDatabase.driver(f"bolt://127.0.0.1:{bolt}", auth=auth, connection_timeout=10) as d:
                    d.verify_connectivity()
                return True
            except (Neo4jError, ServiceUnavailable, OSError):
                return False
        if not port_open(http):
            return False
        answer = self._admin(http, str(state["password"]), "list databases")
        return bool(answer) and "error" not in answer

    def _admin(self, http_port: int, password: str, command: str) -> dict[str, object]:
        """A server command as root over HTTP; while root is locked out (by bad logins from
        anyone on this machine), retry with backoff for ``lockout_wait`` seconds, then say so."""
        waits, waited = lockout_waits(self.settings.lockout_wait), 0.0
        while True:
            answer = self._http(http_port, password, command)
            if LOCKED_OUT not in str(answer.get("error", "")):
                return answer
            step = next(waits, None)
            if step is None:
                raise LockedOut(repr(ADMIN), waited)
            time.sleep(step)
            waited += step

    def _ensure_user(self, http_port: int, state: dict[str, object]) -> None:
        """Create this home's Bolt user (admin of the kgprobe database only) if ArcadeDB lacks it."""
        if self._user_ready(state):
            return
        spec = {"name": state["user"], "password": state["user_password"], "databases": {DATABASE: ["admin"]}}
        result = self._admin(http_port, str(state["password"]), "create user " + json.dumps(spec))
        if "error" in result or not self._user_ready(state):
            raise GraphUnavailable(
                f"could not create kgprobe's user in the graph server: {result.get('error', 'not saved')}; "
                f"see {self.log_file}"
            )

    def locked_out(self, user: str, password: str) -> bool:
        """Is ``user`` locked by failed logins right now? ArcadeDB's Bolt answer does not tell a
        lock-out from a wrong password; its HTTP answer does (checked before the password, so
        asking never extends the lock)."""
        http = int(str(self._state().get("http_port", self.settings.http_port)))
        return LOCKED_OUT in str(self._http(http, password, "list databases", user=user).get("error", ""))

    def _http(self, http_port: int, password: str, command: str, user: str = ADMIN) -> dict[str, object]:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
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
        except (OSError, ValueError) as exc:
            return {"error": str(exc)}

    def _ensure_database(self, http_port: int, password: str) -> None:
        if (self.root / "databases" / DATABASE).exists():
            return
        result = self._admin(http_port, password, f"create database {DATABASE}")
        if "error" in result and "exist" not in str(result["error"]).lower():
            raise GraphUnavailable(f"could not create the database: {result['error']}")

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``). True if one was running.

        Only processes whose command line names ArcadeDB's server and this home are signalled;
        a stale server.pid naming any other process is removed, the process left alone.
        """
        with self._locked():
            return self._stop_locked(timeout)

    def _stop_locked(self, timeout: float = 30.0) -> bool:
        pids = self._server_pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):  # it may have exited meanwhile
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while any(_pid_alive(p) for p in pids) and time.monotonic() < deadline:
            for pid in pids:
                _reap(pid)
            time.sleep(0.2)
        for pid in pids:
            if self._is_ours(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            _reap(pid)
        self.pid_file.unlink(missing_ok=True)
        return bool(pids)

    def while_stopped(self, work: Callable[[Path, str, Path], T]) -> T:
        """Run ``work(java, classpath, database directory)`` with the server stopped (under the
        lock: nobody starts it meanwhile), then start it again: an offline tool on the
        database (the bulk import), with the server's own JRE and jars."""
        pkg = _package_dir()
        with self._locked():
            self._stop_locked()
            try:
                return work(pkg / "jre" / "bin" / "java", f"{pkg / 'jars'}/*", self.root / "databases" / DATABASE)
            finally:
                self._start_locked(90.0)

    def wipe(self) -> None:
        """Delete every node and edge: drop and recreate the database (schema comes back on use)."""
        with self._locked():
            was_running = self.info().running
            self._stop_locked()
            shutil.rmtree(self.root / "databases" / DATABASE, ignore_errors=True)
            if was_running:
                self._start_locked(90.0)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
