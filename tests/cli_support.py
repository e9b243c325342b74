"""Running `kgprobe` as a user does, shared by every test folder: a process of its own
(tests/_kgprobe_process.py), an environment without the caller's server settings, or a managed
server of its own."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from _kgprobe_process import run_kgprobe

from kgprobe.graph.server import free_port


def kgprobe(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """`kgprobe ARGS` in a process of its own (tests/_kgprobe_process.py: forked from a server
    that has imported torch and transformers once)."""
    return run_kgprobe(args, env, timeout=timeout)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEO4J_", "KGPROBE_"))}
    env.update(extra)
    return env


def fresh_home_env(tmp_path: Path) -> dict[str, str]:
    """A managed server of its own: a fresh data directory and free ports."""
    return clean_env(
        KGPROBE_HOME=str(tmp_path / "home"),
        KGPROBE_BOLT_PORT=str(free_port()),
        KGPROBE_HTTP_PORT=str(free_port()),
        KGPROBE_CONFIG=str(tmp_path / "none.json"),
        KGPROBE_DB_HEAP="512m",
    )
