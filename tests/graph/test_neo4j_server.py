"""The Neo4j 5 test server (tests/neo4j_server.py, tools/neo4j-test-server) and the production
settings of docker-compose.yml, checked on a real Neo4j 5.26: auth on, loopback only, no password
in argv or environment, clean stops, and the compose file's settings accepted under strict
validation.

Without Java 17+ or Maven these tests skip (with CI=true they fail: CI must run them)."""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path

import neo4j_server
import pytest
import yaml
from neo4j import GraphDatabase
from neo4j.exceptions import AuthError
from neo4j_server import ENV_RUNTIME, ROOT, USER, Neo4jTestServer, missing_prerequisite

COMPOSE = ROOT / "docker-compose.yml"


@pytest.fixture(autouse=True, scope="module")
def _needs_java_and_maven() -> None:
    why = missing_prerequisite()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the Neo4j test server cannot be built: {why}")
        pytest.skip(why)


def listening_sockets(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state that process ``pid`` holds (/proc).
    An IPv4-mapped IPv6 address (Java's dual-stack sockets) is given as the IPv4 address."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if m := re.fullmatch(r"socket:\[(\d+)\]", target):
            inodes.add(m.group(1))
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            hex_addr, hex_port = local.split(":")
            assert len(hex_addr) == width
            # the kernel prints each 32-bit word in host (little-endian) order
            raw = b"".join(bytes.fromhex(hex_addr[i:i + 8])[::-1] for i in range(0, width, 8))
            addr = ipaddress.ip_address(raw)
            if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
                addr = addr.ipv4_mapped  # a dual-stack socket bound to ::ffff:127.0.0.1 is 127.0.0.1
            found.add((str(addr), int(hex_port, 16)))
    return found


def agent_and_count(uri: str, password: str) -> tuple[str, int]:
    with GraphDatabase.driver(uri, auth=(USER, password)) as driver:
        driver.verify_connectivity()
        agent = driver.get_server_info().agent
        records, _, _ = driver.execute_query("MATCH (n:Probe) RETURN count(n) AS n")
        return agent, records[0]["n"]


def test_auth_is_on_bolt_is_loopback_only_and_the_password_is_in_no_argv_or_environment(tmp_path: Path) -> None:
    with Neo4jTestServer(tmp_path / "s") as server:
        assert server.uri is not None and server.uri.startswith("bolt://127.0.0.1:")
        port = int(server.uri.rsplit(":", 1)[1])
        agent, _ = agent_and_count(server.uri, server.password)
        assert re.fullmatch(r"Neo4j/5\.26\.\d+", agent), agent  # ArcadeDB says "Neo4j/5.26.0 compatible (…)"

        with GraphDatabase.driver(server.uri, auth=(USER, "not-" + server.password)) as wrong, \
                pytest.raises(AuthError):
            wrong.verify_connectivity()
        with GraphDatabase.driver(server.uri, auth=(USER, "neo4j")) as default_password, \
                pytest.raises(AuthError):
            default_password.verify_connectivity()

        # Bolt is the one listening socket (HTTP is off), and it is bound to 127.0.0.1.
        assert listening_sockets(server.pid) == {("127.0.0.1", port)}
        secret = server.password.encode()
        assert secret not in Path(f"/proc/{server.pid}/cmdline").read_bytes()
        assert secret not in Path(f"/proc/{server.pid}/environ").read_bytes()
        for path in (tmp_path / "s").rglob("*"):
            if path.is_file() and path.stat().st_size < 50_000_000:
                assert secret not in path.read_bytes(), path  # not in a log, config or store file


def test_stops_cleanly_on_stdin_close_and_on_sigterm_and_keeps_its_data(tmp_path: Path) -> None:
    base = tmp_path / "s"
    debug_log = base / "home" / "logs" / "debug.log"
    clean_stop = re.compile(r"Stopped 'DatabaseId\{\w+\[neo4j\]\}' successfully")

    first = Neo4jTestServer(base)
    uri = first.start()
    with GraphDatabase.driver(uri, auth=(USER, first.password)) as driver:
        driver.execute_query("CREATE (:Probe {n: 1})")
    assert first.stop(timeout=60) == 0  # standard input closed: Neo4j shut down, exit status 0
    assert len(clean_stop.findall(debug_log.read_text())) == 1

    second = Neo4jTestServer(base)  # same data directory, a new password: the old one is gone
    uri = second.start()
    assert agent_and_count(uri, second.password)[1] == 1
    with GraphDatabase.driver(uri, auth=(USER, first.password)) as old, pytest.raises(AuthError):
        old.verify_connectivity()
    assert second.proc is not None
    second.proc.send_signal(signal.SIGTERM)
    assert second.proc.wait(60) == 128 + signal.SIGTERM  # the JVM's status after its shutdown hook ran
    second.stop()
    assert len(clean_stop.findall(debug_log.read_text())) == 2

    third = Neo4jTestServer(base)
    with third:
        assert third.uri is not None
        assert agent_and_count(third.uri, third.password)[1] == 1


def test_a_prepared_runtime_runs_the_server_and_the_import_tool_with_no_java_on_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``KGPROBE_NEO4J_RUNTIME`` (the device kit's Java, benchmarks/device/java_kit.py): its
    `java` starts the server and runs neo4j-admin, Maven is not asked, PATH has no java."""
    classpath = neo4j_server.build()  # Maven's, before the runtime is named
    real_java = Path(shutil.which("java") or "java").resolve()
    rt = tmp_path / "rt"
    (rt / "jre" / "bin").mkdir(parents=True)
    calls = tmp_path / "java-calls"
    java = rt / "jre" / "bin" / "java"  # the real java, behind a wrapper that counts its calls
    java.write_text(f'#!/bin/sh\necho "$1" >> "{calls}"\nexec "{real_java}" "$@"\n', encoding="utf-8")
    java.chmod(0o755)
    monkeypatch.setenv(ENV_RUNTIME, str(rt))
    assert "classpath.txt" in (missing_prerequisite() or "")  # named, and why it is refused
    (rt / "classpath.txt").write_text("\n".join(classpath) + "\n", encoding="utf-8")
    monkeypatch.setenv("PATH", str(tmp_path / "no-java-here"))
    assert missing_prerequisite() is None
    assert neo4j_server.build() == classpath

    with Neo4jTestServer(tmp_path / "s") as server:
        assert server.uri is not None
        assert calls.read_text().count("-Xmx") == 1  # the wrapper started it (heap: its first argument)
        assert agent_and_count(server.uri, server.password)[1] == 0
    admin = neo4j_server.install_admin(tmp_path / "home")
    out = subprocess.run([str(admin), "--version"], capture_output=True, text=True,
                         env={**os.environ, "NEO4J_HOME": str(tmp_path / "home")}, timeout=120)
    assert out.returncode == 0 and "5.26." in out.stdout + out.stderr, out.stdout + out.stderr
    assert calls.read_text().count("-Xmx") == 2  # the server's start, then neo4j-admin's


def test_an_unknown_setting_stops_the_start_with_its_name(tmp_path: Path) -> None:
    server = Neo4jTestServer(tmp_path / "s", {"db.tx_timeout": "10m"})  # the Neo4j 4 name
    with pytest.raises(RuntimeError, match=r"db\.tx_timeout"):
        server.start()
    assert server.proc is not None and server.proc.returncode == 1


# --- docker-compose.yml ----------------------------------------------------------------------
_VAR = re.compile(r"\$\{(\w+)(?::([-?])([^}]*))?\}")


def compose_value(value: str, variables: Mapping[str, str]) -> str:
    """Compose's interpolation of ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?message}``."""

    def sub(m: re.Match[str]) -> str:
        name, op, arg = m.groups()
        if variables.get(name):
            return variables[name]
        if op == "-":
            return arg
        raise KeyError(f"{name} is required: {arg}")

    return _VAR.sub(sub, value)


def image_setting_name(env_name: str) -> str:
    """The official image's rule: NEO4J_ dropped, ``__`` -> ``_``, ``_`` -> ``.``."""
    rest = env_name.removeprefix("NEO4J_")
    return ".".join(part.replace("\0", "_") for part in rest.replace("__", "\0").split("_"))


def compose_neo4j_settings(variables: Mapping[str, str]) -> dict[str, str]:
    service = yaml.safe_load(COMPOSE.read_text())["services"]["neo4j"]
    environment = service["environment"]
    assert isinstance(environment, dict)
    return {
        image_setting_name(name): compose_value(str(value), variables)
        for name, value in environment.items()
        if name.startswith("NEO4J_") and name != "NEO4J_AUTH"  # NEO4J_AUTH: the image's, not a setting
    }


def test_image_setting_names() -> None:
    assert image_setting_name("NEO4J_server_memory_heap_initial__size") == "server.memory.heap.initial_size"
    assert image_setting_name("NEO4J_db_transaction_timeout") == "db.transaction.timeout"
    assert image_setting_name("NEO4J_db_tx__timeout") == "db.tx_timeout"


def test_compose_settings_are_accepted_by_neo4j_5_under_strict_validation(tmp_path: Path) -> None:
    settings = compose_neo4j_settings({"NEO4J_PASSWORD": "unused-here"})
    assert settings["db.transaction.timeout"] == "10m"
    assert "server.memory.pagecache.size" in settings and "server.memory.heap.max_size" in settings
    config = {**settings, "server.config.strict_validation.enabled": "true"}
    with Neo4jTestServer(tmp_path / "s", config) as server:
        assert server.uri is not None
        with GraphDatabase.driver(server.uri, auth=(USER, server.password)) as driver:
            records, _, _ = driver.execute_query(
                "SHOW SETTINGS YIELD name, value WHERE name IN $names RETURN name, value",
                names=sorted(settings),
            )
        shown = {r["name"]: r["value"] for r in records}
    assert set(shown) == set(settings)  # every compose setting is a Neo4j 5 setting, in force
    assert shown["db.transaction.timeout"] in ("10m", "600s", "10 minutes", "PT10M"), shown
