"""A fresh graph server for a benchmark: the managed ArcadeDB, or a real Neo4j 5 (the test server of
tools/neo4j-test-server: Java 17+ and Maven, see README "Tests on Neo4j 5"), each in a directory
of its own with an empty database. Both benchmarks that write (ingest, FACT lookups) take
``--server arcadedb|neo4j`` through this one helper, so the two servers are measured the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kgprobe.config import Settings  # noqa: E402
from kgprobe.graph.client import Graph, connect  # noqa: E402
from kgprobe.graph.server import ManagedServer, free_port  # noqa: E402

SERVERS = ("arcadedb", "neo4j")


def add_server_option(ap: argparse.ArgumentParser) -> None:
    """``--server``: which fresh server a benchmark writes to (the same option everywhere)."""
    ap.add_argument("--server", choices=SERVERS, default="arcadedb",
                    help="a fresh managed ArcadeDB, or a real Neo4j 5 (Java 17+ and Maven)")


def server_cpu_s(pid: int | None) -> float | None:
    """utime + stime of a process (the graph server), in seconds; None when it cannot be read."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def fresh_graph(kind: str, root: Path, heap: str) -> Iterator[tuple[Graph, int | None]]:
    """A connected Graph on a new, empty server in ``root``, and the server's pid (for its memory)."""
    if kind == "arcadedb":
        settings = Settings(home=root, bolt_port=free_port(), http_port=free_port(), heap=heap)
        server = ManagedServer(settings)
        server.start()
        try:
            with connect(settings) as graph:
                yield graph, server.info().pid
        finally:
            server.stop()
        return
    if kind != "neo4j":
        raise SystemExit(f"--server must be one of {', '.join(SERVERS)}")
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from neo4j_server import USER, Neo4jTestServer, missing_prerequisite

    why = missing_prerequisite()
    if why:
        raise SystemExit(f"--server neo4j: {why}")
    neo = Neo4jTestServer(root, heap=heap, config={"server.memory.pagecache.size": "1g"})
    uri = neo.start()
    try:
        with connect(Settings(uri=uri, user=USER, password=neo.password, home=root)) as graph:
            yield graph, neo.pid
    finally:
        neo.stop()
