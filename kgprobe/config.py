"""Settings: where the graph is and how to reach it.

Precedence: environment variables, then the user's config file, then defaults. Passwords never
live in code; the config file must be private (mode 0600) or it is refused, as ssh does.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from kgprobe.errors import ConfigError

ENV_URI = "NEO4J_URI"
ENV_USER = "NEO4J_USER"
ENV_PASSWORD = "NEO4J_PASSWORD"
ENV_DATABASE = "NEO4J_DATABASE"
ENV_HOME = "KGPROBE_HOME"
ENV_CONFIG = "KGPROBE_CONFIG"

CONFIG_KEYS = ("uri", "user", "password", "database", "home", "bolt_port", "http_port", "heap")


def default_home() -> Path:
    """Data directory of the managed server and caches (``KGPROBE_HOME`` overrides)."""
    env = os.environ.get(ENV_HOME)
    return Path(env).expanduser() if env else Path(platformdirs.user_data_dir("kgprobe"))


def config_path() -> Path:
    env = os.environ.get(ENV_CONFIG)
    return Path(env).expanduser() if env else Path(platformdirs.user_config_dir("kgprobe")) / "config.json"


def read_private_json(path: Path) -> dict[str, object]:
    """Read a JSON file that may hold a password; refuse it unless only its owner can read it."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
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


def write_private_json(path: Path, data: dict[str, object]) -> None:
    """Write JSON created with mode 0600 from the start (no window where it is world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2)
    os.replace(tmp, path)


@dataclass
class Settings:
    """How to reach the graph. ``uri`` None means: use (and start) the managed ArcadeDB server."""

    uri: str | None = None
    user: str = "neo4j"
    password: str | None = None
    database: str | None = None
    home: Path = Path()
    bolt_port: int = 7687
    http_port: int = 2480
    heap: str = "2g"

    @property
    def managed(self) -> bool:
        return self.uri is None

    @classmethod
    def load(cls) -> Settings:
        """Environment first, then the config file, then defaults."""
        file_values: dict[str, object] = {}
        path = config_path()
        if path.exists():
            file_values = read_private_json(path)
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
        home = pick(ENV_HOME, "home")
        try:
            bolt_port = int(str(pick("KGPROBE_BOLT_PORT", "bolt_port") or 7687))
            http_port = int(str(pick("KGPROBE_HTTP_PORT", "http_port") or 2480))
        except ValueError as exc:
            raise ConfigError(f"ports must be integers: {exc}") from exc
        return cls(
            uri=str(uri) if uri else None,
            user=str(pick(ENV_USER, "user") or "neo4j"),
            password=str(p) if (p := pick(ENV_PASSWORD, "password")) else None,
            database=str(d) if (d := pick(ENV_DATABASE, "database")) else None,
            home=Path(str(home)).expanduser() if home else default_home(),
            bolt_port=bolt_port,
            http_port=http_port,
            heap=str(pick("KGPROBE_DB_HEAP", "heap") or "2g"),
        )
