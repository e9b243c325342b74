"""A real Neo4j 5.26 Community server for the test suite, without Docker.

tools/neo4j-test-server is a small Maven project: one Java class that runs Neo4j embedded with its
Bolt server on 127.0.0.1 (a port the OS picks), authentication ON. Maven fetches Neo4j into its
local cache (~/.m2) on the first build; nothing of Neo4j is committed or shipped with kgprobe.

The password is generated here and handed to the launcher on its standard input, so it is in no
process's arguments or environment; the launcher stops when its standard input closes (or on
SIGTERM). ``KGPROBE_TEST_SERVER=neo4j`` makes tests/conftest.py run the suite against it.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ROOT / "tools" / "neo4j-test-server"
TARGET = PROJECT / "target"
JAR = TARGET / "neo4j-test-server-1.jar"
CLASSPATH_FILE = TARGET / "classpath.txt"
MAIN_CLASS = "kgprobe.testserver.Launcher"
#: a Neo4j runtime prepared on another machine (benchmarks/device/java_kit.py): DIR/jre/bin/java
#: and DIR/classpath.txt (entries relative to DIR, one a line). Where it is set neither Maven nor
#: a Java on PATH is used: the GPU machine has neither, and the device kit carries this instead.
ENV_RUNTIME = "KGPROBE_NEO4J_RUNTIME"
USER = "neo4j"
BUILD_TIMEOUT_S = 1800
START_TIMEOUT_S = 180


def is_neo4j_agent(agent: str) -> bool:
    """Neo4j 5's own Bolt agent ("Neo4j/5.26.30"); ArcadeDB's Bolt plugin says
    "Neo4j/5.26.0 compatible (ArcadeDB …)", which is not."""
    return re.fullmatch(r"Neo4j/5\.\d+\.\d+", agent) is not None


class Unavailable(RuntimeError):
    """Java 17+ or Maven (or the prepared runtime of ``KGPROBE_NEO4J_RUNTIME``) is missing: the
    Neo4j test server cannot be built here."""


def java_major(java: str) -> int | None:
    """The major version of a `java` executable (17 for "17.0.15"), None if it cannot tell."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def runtime() -> Path | None:
    """The prepared runtime of ``KGPROBE_NEO4J_RUNTIME``, or None (Maven and the PATH's Java)."""
    value = os.environ.get(ENV_RUNTIME)
    return Path(value) if value else None


def java_command() -> str:
    """The `java` that runs Neo4j: the prepared runtime's, else the one on PATH."""
    rt = runtime()
    return str(rt / "jre" / "bin" / "java") if rt is not None else "java"


def missing_prerequisite() -> str | None:
    """Why the Neo4j test server cannot be built here (one line), or None when it can."""
    rt = runtime()
    if rt is not None:
        prepared = java_command()
        if not (rt / "classpath.txt").is_file() or not os.access(prepared, os.X_OK):
            return f"{ENV_RUNTIME}={rt}: no jre/bin/java and classpath.txt there"
        major = java_major(prepared)
        return None if major is not None and major >= 17 else f"{prepared}: not Java 17+"
    java = shutil.which("java")
    if java is None:
        return "no `java` on PATH (the Neo4j test server needs Java 17+)"
    major = java_major(java)
    if major is None or major < 17:
        return f"`java` on PATH is Java {major or 'of unknown version'}; the Neo4j test server needs Java 17+"
    if shutil.which("mvn") is None:
        return "no `mvn` on PATH (the Neo4j test server is built with Maven)"
    return None


def _sources() -> list[Path]:
    return [PROJECT / "pom.xml", *sorted((PROJECT / "src").rglob("*.java"))]


def build(*, force: bool = False) -> list[str]:
    """Build the launcher when its sources are newer than the build; return its classpath."""
    why = missing_prerequisite()
    if why:
        raise Unavailable(why)
    rt = runtime()
    if rt is not None:
        return [str(rt / e) for e in (rt / "classpath.txt").read_text(encoding="utf-8").split("\n") if e]
    built = JAR.exists() and CLASSPATH_FILE.exists()
    if force or not built or max(p.stat().st_mtime for p in _sources()) > min(
        JAR.stat().st_mtime, CLASSPATH_FILE.stat().st_mtime
    ):
        r = subprocess.run(
            ["mvn", "-q", "-B", "package"], cwd=PROJECT, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
        )
        if r.returncode != 0:
            tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-30:])
            raise RuntimeError(f"building {PROJECT} failed (mvn -q -B package):\n{tail}")
    deps = [p for p in CLASSPATH_FILE.read_text(encoding="utf-8").strip().split(os.pathsep) if p]
    return [str(JAR), *deps]


def install_admin(home: Path, heap: str = "512m") -> Path:
    """``home/bin/neo4j-admin``: Neo4j's own admin tool (``org.neo4j.cli.AdminTool``, with the
    import tool ``org.neo4j:neo4j-import-tool`` that comes with the server's Maven dependencies)
    on the test server's classpath, so that ``kgprobe ingest --bulk --neo4j-home home`` imports
    into ``home`` as into an installed Neo4j; a `Neo4jTestServer` whose base holds ``home`` then
    starts on the imported database. Small memory for shared machines."""
    classpath = build()
    bindir = home / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    argfile = bindir / "classpath.args"
    argfile.write_text("-cp\n" + os.pathsep.join(classpath) + "\n", encoding="utf-8")
    admin = bindir / "neo4j-admin"
    # `database import full` takes its memory bound after the three command words
    admin.write_text(
        "#!/bin/sh\n"
        'if [ "$1 $2 $3" = "database import full" ]; then shift 3; '
        f'set -- database import full --max-off-heap-memory={heap} "$@"; fi\n'
        f'exec "{java_command()}" -Xmx{heap} -XX:+UseSerialGC "@{argfile}" org.neo4j.cli.AdminTool "$@"\n',
        encoding="utf-8")
    admin.chmod(0o755)
    return admin


class Neo4jTestServer:
    """One Neo4j 5 server in ``base`` (a fresh directory of its own).

    ``config``: extra Neo4j settings (name -> value), written to a neo4j.conf-style file that Neo4j
    loads itself under strict validation: an unknown or malformed setting makes `start` fail.
    """

    def __init__(self, base: Path, config: Mapping[str, str] | None = None, heap: str = "1g") -> None:
        self.base = Path(base)
        self.config = {
            # small defaults for shared machines; `config` overrides them
            "server.memory.pagecache.size": "256m",
            "db.memory.transaction.total.max": "512m",
            # Bolt waits 5 s for idle connections and 5 s for its threads at shutdown, after the
            # databases have stopped cleanly: a test server need not
            "internal.server.bolt.connection_shutdown_wait_time": "0s",
            "internal.server.bolt.thread_pool_shutdown_wait_time": "0s",
            **dict(config or {}),
        }
        self.heap = heap
        self.password = secrets.token_urlsafe(24)
        self.uri: str | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.base / "launcher.log"
        self._log: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = START_TIMEOUT_S) -> str:
        """Start the server; return its Bolt URI once it accepts connections."""
        classpath = build()
        self.base.mkdir(parents=True, exist_ok=True)
        ready = self.base / "ready"
        ready.unlink(missing_ok=True)  # a previous run's: wait for this one's
        conf = self.base / "neo4j.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in self.config.items()), encoding="utf-8")
        argfile = self.base / "classpath.args"  # `java @file`: a short argv for `ps`
        argfile.write_text("-cp\n" + os.pathsep.join(classpath) + "\n", encoding="utf-8")
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [java_command(), f"-Xmx{self.heap}", "-XX:+UseSerialGC", f"@{argfile}", MAIN_CLASS,
             str(self.base / "home"), str(ready), str(conf)],
            stdin=subprocess.PIPE, stdout=self._log, stderr=subprocess.STDOUT, cwd=self.base,
            start_new_session=True,
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(self.password.encode() + b"\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while not ready.exists():
            if self.proc.poll() is not None:
                self._close_pipes()
                raise RuntimeError(f"the Neo4j test server exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the Neo4j test server was not ready within {timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.2)
        self.uri = ready.read_text(encoding="utf-8").strip()
        return self.uri

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.strip().splitlines()[-lines:])

    def stop(self, timeout: float = 60) -> int | None:
        """Close the launcher's standard input (it shuts Neo4j down cleanly); SIGTERM, then SIGKILL,
        only if it does not exit in time. Returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        self._close_pipes()
        return self.proc.returncode

    def _close_pipes(self) -> None:
        for fh in (self.proc.stdin if self.proc else None, self._log):
            if fh is not None:
                with contextlib.suppress(OSError):
                    fh.close()

    def __enter__(self) -> Neo4jTestServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def running(base: Path, config: Mapping[str, str] | None = None) -> Iterator[Neo4jTestServer]:
    server = Neo4jTestServer(base, config)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def main(argv: list[str]) -> int:
    """``python tests/neo4j_server.py check``: exit 0 when Java 17+ and Maven are there, else print
    why not (one line) and exit 1. ``… build``: build the launcher (as the suite would)."""
    if argv == ["check"]:
        why = missing_prerequisite()
        if why:
            print(why)
            return 1
        return 0
    if argv == ["build"]:
        build(force=True)
        return 0
    print("usage: python tests/neo4j_server.py check|build")
    return 2


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
