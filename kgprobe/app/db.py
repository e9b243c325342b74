"""The local graph server's workflows (``kgprobe db start|stop|status|wipe``): typed results,
the same from the CLI and from :mod:`kgprobe.api`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kgprobe.config import Settings, config_path, redact
from kgprobe.errors import KgprobeError
from kgprobe.graph.client import connect
from kgprobe.graph.servers import GraphServer, ServerInfo, graph_server


def managed_server(settings: Settings | None = None, *, secrets: bool = True) -> GraphServer:
    """The managed server that the setting ``server`` names (``KGPROBE_SERVER``; the built-in
    ArcadeDB by default), looked up in ``GRAPH_SERVERS``; ``secrets=False`` for a workflow that
    uses no password from the config file (``db stop``), so it works whatever that file's mode.
    Refused when ``NEO4J_URI`` names a server kgprobe does not manage."""
    return graph_server(settings or Settings.load(secrets=secrets))


@dataclass(frozen=True)
class DbStarted:
    """``db start``: the server that runs now."""

    running: bool
    pid: int | None
    uri: str
    home: str

    def to_dict(self) -> dict[str, object]:
        return {"running": self.running, "pid": self.pid, "uri": self.uri, "home": self.home}


def db_start(*, settings: Settings | None = None) -> DbStarted:
    """Start the managed graph server (nothing happens when it runs)."""
    info: ServerInfo = managed_server(settings).start()
    return DbStarted(info.running, info.pid, info.uri, str(info.home))


def db_stop(*, settings: Settings | None = None) -> bool:
    """Stop the managed graph server; False when it was not running."""
    return managed_server(settings, secrets=False).stop()


def db_home(*, settings: Settings | None = None) -> Path:
    """The data directory of the managed server (what ``db wipe`` asks about)."""
    return managed_server(settings).home


def db_wipe(*, settings: Settings | None = None) -> None:
    """Delete every node and edge of the managed graph."""
    managed_server(settings).wipe()


@dataclass(frozen=True)
class DbStatus:
    """``db status``: whether the server runs, which it is, where, and how to connect to it —
    where the user name and password are kept, never them (docs/guarantees.md). A server not
    managed by kgprobe (``NEO4J_URI``) has no pid, HTTP port or home."""

    managed: bool
    uri: str
    user: str
    database: str
    password: str
    config: str
    server: str
    running: bool = True
    pid: int | None = None
    http_port: int | None = None
    home: str | None = None

    def to_dict(self) -> dict[str, object]:
        """The status in the order it is printed (the managed server's own keys included only
        for it)."""
        managed = ("running", "pid") if self.managed else ()
        tail = ("http_port", "home") if self.managed else ()
        keys = ("managed", *managed, "uri", "user", "database", "password", *tail, "config", "server")
        return {k: getattr(self, k) for k in keys}


def db_status(*, settings: Settings | None = None) -> DbStatus:
    """Which graph server answers and how to connect to it, never starting one."""
    settings = settings or Settings.load()
    if settings.uri:
        return DbStatus(
            managed=False, uri=redact(settings.uri), user=settings.user,
            database=settings.database or "(the server's default)",
            password=settings.password_from or "not configured (set NEO4J_PASSWORD)",
            config=str(config_path()), server=server_agent(settings, running=True))
    server = managed_server(settings)
    info = server.info()
    user, password = server.credentials_kept()  # where they are kept, never them
    return DbStatus(
        managed=True, running=info.running, pid=info.pid, uri=info.uri,
        user=user, database=info.database, password=password,
        http_port=info.http_port, home=str(info.home), config=str(config_path()),
        server=server_agent(settings, running=info.running))


def server_agent(settings: Settings, running: bool) -> str:
    """Which server answers, and its version — never starting one, never failing the status."""
    if not running:
        return "not running"
    try:
        with connect(settings, ensure_schema=False, autostart=False) as graph:
            return graph.server_agent()
    except KgprobeError as exc:
        return f"not reachable: {exc}"
