"""Settings: where the graph is and how to reach it.

Precedence: environment variables, then the user's config file, then defaults. Passwords never
live in code; the config file must be private (mode 0600) or it is refused, as ssh does.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from kgprobe.errors import ConfigError

ENV_URI = "NEO4J_URI"
ENV_USER = "NEO4J_USER"
ENV_USERNAME = "NEO4J_USERNAME"  # the name Neo4j's own tools (cypher-shell, the drivers' docs) use
ENV_PASSWORD = "NEO4J_PASSWORD"
ENV_DATABASE = "NEO4J_DATABASE"
ENV_HOME = "KGPROBE_HOME"
ENV_CONFIG = "KGPROBE_CONFIG"
ENV_BOLT_PORT = "KGPROBE_BOLT_PORT"
ENV_HTTP_PORT = "KGPROBE_HTTP_PORT"
ENV_SERVER = "KGPROBE_SERVER"
#: the managed graph server used when ``KGPROBE_SERVER`` / key ``server`` names none
#: (kgprobe.graph.servers.GRAPH_SERVERS)
DEFAULT_SERVER = "arcadedb"

CONFIG_KEYS = ("uri", "user", "password", "database", "home", "bolt_port", "http_port", "heap", "lockout_wait",
               "server")
ENV_LOCKOUT_WAIT = "KGPROBE_LOCKOUT_WAIT"
DEFAULT_LOCKOUT_WAIT = 120.0  # seconds; ArcadeDB locks a user for 30 s, Neo4j 5 for 5 s
BOLT_SCHEMES = ("bolt", "bolt+s", "bolt+ssc", "neo4j", "neo4j+s", "neo4j+ssc")

# scheme://user:password@  — the user info of any URI in a piece of text
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s]*)@")


def redact(text: str) -> str:
    """``text`` with the user info of every URI in it replaced by ``***`` (never print a password)."""
    return _USERINFO.sub(lambda m: f"{m['scheme']}***@", text)


def split_uri(uri: str) -> tuple[str, str | None, str | None]:
    """Validate a Bolt URI; return it without user info, and the user and password it carried.

    Raises ConfigError with one line (the URI redacted) for a scheme the driver cannot use over
    Bolt (http://, https://, none) or a malformed URI.
    """
    from urllib.parse import unquote, urlsplit

    shown = redact(uri)
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"NEO4J_URI {shown!r} is malformed ({exc}); expected bolt://host:7687") from exc
    scheme = parts.scheme.lower()
    if scheme not in BOLT_SCHEMES:
        hint = " (that is the HTTP API; kgprobe speaks Bolt)" if scheme in ("http", "https") else ""
        raise ConfigError(
            f"NEO4J_URI {shown!r} has an unsupported scheme {scheme or 'none'!r}{hint}; "
            f"use one of {', '.join(s + '://' for s in BOLT_SCHEMES)}, e.g. bolt://localhost:7687"
        )
    if not parts.hostname:
        raise ConfigError(f"NEO4J_URI {shown!r} names no host; expected e.g. bolt://localhost:7687")
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = host + (f":{port}" if port is not None else "")
    clean = parts._replace(netloc=netloc).geturl()
    return clean, user, password


def default_home() -> Path:
    """Data directory of the managed server and caches (``KGPROBE_HOME`` overrides)."""
    env = os.environ.get(ENV_HOME)
    return Path(env).expanduser() if env else Path(platformdirs.user_data_dir("kgprobe"))


def config_path() -> Path:
    env = os.environ.get(ENV_CONFIG)
    return Path(env).expanduser() if env else Path(platformdirs.user_config_dir("kgprobe")) / "config.json"


def read_private_json(path: Path, *, private: bool = True) -> dict[str, object]:
    """Read a JSON file that may hold a password; refuse it unless only its owner can read it.

    ``private=False`` skips the mode check for a caller that uses no secret from the file (the
    caller must drop the password; see ``Settings.load(secrets=False)``)."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if private and mode & 0o077:
        raise ConfigError(
            f"{path} is readable by others (mode {mode:o}); run: chmod 600 {path}"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object")
    return data


def write_private_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` created 0600 from the start: a fresh name made with O_EXCL
    (mkstemp), so a stale or planted temp file, whatever its mode, is never reused; then renamed
    into place (no window where the file is world-readable or half written)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_private_json(path: Path, data: dict[str, object]) -> None:
    """Write JSON created with mode 0600 from the start (``write_private_text``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private_text(path, json.dumps(data, indent=2))


def private_dir(path: Path) -> None:
    """Create ``path`` and its missing parents owner-only (``mkdir(parents=True)`` would give
    the parents the umask's mode); tighten ``path`` if it exists with a wider mode."""
    for q in reversed([q for q in (path, *path.parents) if not q.exists()]):
        q.mkdir(mode=0o700, exist_ok=True)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)


def tighten_tree(root: Path) -> None:
    """Make an existing tree owner-only: directories 0700, files 0600, links left alone (data
    directories made by older kgprobe versions were 0755/0644)."""
    if not root.is_dir() or root.is_symlink():
        return
    if root.stat().st_mode & 0o077:
        root.chmod(0o700)
    for dirpath, dirnames, filenames in os.walk(root):
        for name, mode in [(n, 0o700) for n in dirnames] + [(n, 0o600) for n in filenames]:
            p = Path(dirpath, name)
            if not p.is_symlink() and p.stat().st_mode & 0o077:
                p.chmod(mode)


@dataclass
class Settings:
    """How to reach the graph. ``uri`` None means: use (and start) the managed graph server that
    ``server`` names (the built-in ArcadeDB by default)."""

    uri: str | None = None
    user: str = "neo4j"
    password: str | None = None
    database: str | None = None
    home: Path = Path()
    bolt_port: int = 7687
    http_port: int = 2480
    heap: str = "2g"
    # How long to keep retrying while the server refuses logins after failed attempts by others
    # (a lock-out, not a wrong password): bounded, so a persistent attacker ends in one clear line.
    lockout_wait: float = DEFAULT_LOCKOUT_WAIT
    password_from: str | None = None  # where the password came from, for `kgprobe db status`
    # Where an explicitly configured port came from (None: the default): a port the user asked
    # for is used or refused in one line, never silently swapped for a free one.
    bolt_port_from: str | None = None
    http_port_from: str | None = None
    #: which managed graph server runs when ``uri`` is None (a name of
    #: kgprobe.graph.servers.GRAPH_SERVERS), and where that name came from (None: the default)
    server: str = DEFAULT_SERVER
    server_from: str | None = None

    @property
    def managed(self) -> bool:
        return self.uri is None

    @classmethod
    def load(cls, *, secrets: bool = True) -> Settings:
        """Environment first, then the config file, then defaults.

        ``secrets=False`` is for commands that need no password (``kgprobe db stop`` signals
        the managed server by its home): the config file is read whatever its mode, and its
        password is ignored."""
        file_values: dict[str, object] = {}
        path = config_path()
        if path.exists():
            file_values = read_private_json(path, private=secrets)
            if not secrets:
                file_values.pop("password", None)
            unknown = set(file_values) - set(CONFIG_KEYS)
            if unknown:
                raise ConfigError(
                    f"{path}: unknown keys {sorted(unknown)}; valid keys: {', '.join(CONFIG_KEYS)}"
                )

        def pick(env: str | None, key: str) -> object | None:
            if env and os.environ.get(env):
                return os.environ[env]
            return file_values.get(key)

        uri = pick(ENV_URI, "uri")
        user = os.environ.get(ENV_USER) or os.environ.get(ENV_USERNAME) or file_values.get("user")
        password = pick(ENV_PASSWORD, "password")
        password_from = (
            f"environment variable {ENV_PASSWORD}" if os.environ.get(ENV_PASSWORD)
            else f"config file {path}" if password else None
        )
        if uri:
            # Credentials in the URI (bolt://user:pw@host) are used when none are configured
            # otherwise; the URI kept (and ever printed) has no user info.
            uri, uri_user, uri_password = split_uri(str(uri))
            user = user or uri_user
            if not password and uri_password:
                password, password_from = uri_password, f"the user info of {ENV_URI}"
        home = pick(ENV_HOME, "home")
        ports: dict[str, tuple[int, str | None]] = {}
        for env, key, default in ((ENV_BOLT_PORT, "bolt_port", 7687), (ENV_HTTP_PORT, "http_port", 2480)):
            raw = pick(env, key)
            origin = (f"environment variable {env}" if os.environ.get(env)
                      else f"key {key!r} of {path}" if raw not in (None, "") else None)
            ports[key] = (_port(raw, origin), origin) if origin else (default, None)
        server = pick(ENV_SERVER, "server")
        server_from = (f"environment variable {ENV_SERVER}" if os.environ.get(ENV_SERVER)
                       else f"key 'server' of {path}" if server not in (None, "") else None)
        lockout_wait = seconds_setting(pick(ENV_LOCKOUT_WAIT, "lockout_wait"), ENV_LOCKOUT_WAIT, DEFAULT_LOCKOUT_WAIT)
        return cls(
            uri=str(uri) if uri else None,
            user=str(user or "neo4j"),
            password=str(password) if password else None,
            database=str(d) if (d := pick(ENV_DATABASE, "database")) else None,
            home=Path(str(home)).expanduser() if home else default_home(),
            bolt_port=ports["bolt_port"][0],
            http_port=ports["http_port"][0],
            bolt_port_from=ports["bolt_port"][1],
            http_port_from=ports["http_port"][1],
            heap=str(pick("KGPROBE_DB_HEAP", "heap") or "2g"),
            lockout_wait=lockout_wait,
            password_from=password_from,
            server=str(server).strip() if server_from else DEFAULT_SERVER,
            server_from=server_from,
        )


def _port(value: object, origin: str) -> int:
    """A TCP port setting: an integer in 1..65535 (0 would mean "any port" to the OS, and a
    value past 65535 crashes the socket layer), refused in one line naming where it came from."""
    text = str(value).strip()
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 1 <= port <= 65535:
        raise ConfigError(f"{origin} must be a port number from 1 to 65535, not {value!r}")
    return port


def seconds_setting(value: object | None, name: str, default: float) -> float:
    """A duration setting: a finite number of seconds in [0, 3600] (NaN and negatives refused)."""
    if value is None or value == "":
        return default
    try:
        seconds = float(str(value))
    except ValueError:
        seconds = float("nan")
    if not 0 <= seconds <= 3600:  # False for NaN
        raise ConfigError(f"{name} must be a number of seconds between 0 and 3600, not {value!r}")
    return seconds
