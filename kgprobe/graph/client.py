"""The one way kgprobe talks to the graph: the official `neo4j` driver over Bolt.

`connect()` returns a `Graph` for the configured server (``NEO4J_URI``) or for the managed local
ArcadeDB server, started on demand. Driver failures become `GraphUnavailable` with one clear line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import islice
from typing import Any, TypeVar

import neo4j
from neo4j import GraphDatabase
from neo4j.exceptions import (
    AuthError,
    ClientError,
    ConfigurationError,
    DatabaseError,
    Neo4jError,
    ServiceUnavailable,
    SessionExpired,
)

from kgprobe.config import Settings, redact
from kgprobe.errors import ConfigError, GraphUnavailable, LockedOut, lockout_waits
from kgprobe.graph.servers import graph_server, transient_error
from kgprobe.types import CypherParams, GraphRow

# Neo4j 5 answers a read of a property no node has yet ("pit_precision", a qualifier this
# graph lacks) with a warning notification, which the driver logs to stderr on every call:
# kgprobe reads optional properties by design (coalesce, IS NULL), so these are noise to a
# user. Errors still show; set this logger's level lower to see the server's hints.
logging.getLogger("neo4j.notifications").setLevel(logging.ERROR)

T = TypeVar("T")


def chunks(rows: Iterable[T], size: int) -> Iterator[list[T]]:
    it = iter(rows)
    while batch := list(islice(it, size)):
        yield batch


class Graph:
    """A connection to one database: read, write, and batched UNWIND writes.

    Each call runs in its own managed transaction, so a failure rolls back that whole call
    and never leaves half a batch written.

    A server that locks a user after failed logins (by anyone: Neo4j's AuthenticationRateLimit,
    or ArcadeDB, whose Bolt answer looks like a wrong password, told apart by ``locked_out``) is
    waited out with backoff for ``lockout_wait`` seconds, then reported as `LockedOut`: at
    connection and at every later call, since the driver logs in again for each new connection.
    """

    def __init__(
        self, uri: str, user: str, password: str, database: str | None, *,
        lockout_wait: float = 0.0, locked_out: Callable[[], bool] | None = None, shown_user: str | None = None,
        transient: Callable[[BaseException], bool] = transient_error,
    ) -> None:
        self.uri = redact(uri)  # for messages; Settings already strips user info, be sure
        self.database = database
        # ``shown_user``: how messages name the user, when its name is a secret itself
        self._user, self._lockout_wait, self._locked_out = shown_user or user, lockout_wait, locked_out
        #: the server's rule: which refusals of a write a retry of the whole batch can cure
        #: (``GraphServer.transient``; ingest's ``write_retrying`` asks it)
        self.transient = transient
        # how to open the same connection again, in a forked process (`reopened`): a driver's
        # sockets and threads are the parent's and must not be used there
        self._reopen: Callable[[], Graph] = lambda: Graph(
            uri, user, password, database, lockout_wait=lockout_wait, locked_out=locked_out,
            shown_user=shown_user, transient=transient)
        try:
            self._driver = GraphDatabase.driver(
                uri, auth=(user, password), connection_timeout=10, max_transaction_retry_time=15
            )
            self._waiting_out_lockouts(self._driver.verify_connectivity)
            if database:
                self._waiting_out_lockouts(self._use_database)
        except AuthError as exc:
            raise GraphUnavailable(
                f"the graph server at {self.uri} refused the user name or password "
                "(check NEO4J_USER / NEO4J_PASSWORD)"
            ) from exc
        except ClientError as exc:
            if not _missing_database(exc):
                raise GraphUnavailable(f"graph server at {self.uri}: {_first_line(exc)}") from exc
            raise ConfigError(
                f"the graph server at {self.uri} has no database {database!r} that user "
                f"{self._user} may use (NEO4J_DATABASE or key 'database' of the config file); "
                "name an existing database, or unset it for the server's default"
            ) from exc
        except (ConfigurationError, ValueError) as exc:
            raise ConfigError(f"cannot use NEO4J_URI {self.uri!r}: {_first_line(exc)}") from exc
        except (ServiceUnavailable, SessionExpired, OSError) as exc:
            raise GraphUnavailable(f"no graph server reachable at {self.uri}: {_first_line(exc)}") from exc
        except Neo4jError as exc:
            raise GraphUnavailable(f"graph server at {self.uri}: {_first_line(exc)}") from exc

    def _use_database(self) -> None:
        """Run a trivial query in the configured database: the driver's connectivity check
        does not open it, so a database that does not exist would fail on the first query."""
        with self._session() as session:
            session.run("RETURN 1 AS one").consume()

    # --- context management ----------------------------------------------------------------
    def close(self) -> None:
        self._driver.close()

    def reopened(self) -> Graph:
        """A new connection to the same server, database and user, with a driver of its own:
        what a process forked from this one reads through (kgprobe/probing/semantic.py's
        workers), since the inherited driver's connections belong to the parent. The
        credentials stay in memory: nothing is passed through a pipe or an argument."""
        return self._reopen()

    def __enter__(self) -> Graph:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def server_agent(self) -> str:
        """The server's own name and version, as its Bolt handshake gives it (e.g.
        ``Neo4j/5.26.30`` or ``Neo4j/5.26.0 compatible (ArcadeDB 26.10.2)``)."""
        return str(self._call(lambda: self._driver.get_server_info().agent))

    # --- queries ---------------------------------------------------------------------------
    def _session(self) -> neo4j.Session:
        return self._driver.session(database=self.database) if self.database else self._driver.session()

    def _is_lockout(self, exc: Neo4jError) -> bool:
        if (exc.code or "").endswith("Security.AuthenticationRateLimit"):
            return True
        return isinstance(exc, AuthError) and self._locked_out is not None and self._locked_out()

    def _waiting_out_lockouts(self, fn: Callable[[], T]) -> T:
        """``fn()``, retried with backoff while the user is locked out (nothing was done then:
        a call is one transaction, and the failure came at login)."""
        waits, waited = lockout_waits(self._lockout_wait), 0.0
        while True:
            try:
                return fn()
            except Neo4jError as exc:
                if not self._is_lockout(exc):
                    raise
                step = next(waits, None)
                if step is None:
                    raise LockedOut(self._user, waited) from exc
                time.sleep(step)
                waited += step

    def _call(self, fn: Callable[[], T]) -> T:
        try:
            return self._waiting_out_lockouts(fn)
        except ClientError as exc:
            # The credentials were accepted at connect: a refusal now (AuthError), or a protocol
            # error like ArcadeDB's "BEGIN not expected in state: AUTHENTICATION", comes from a
            # server shutting down under the call (`db stop`, `db wipe`) unless the server still
            # answers; only then is it the credentials, or the statement's own error.
            if _missing_database(exc):
                raise GraphUnavailable(
                    f"the database {self.database or '(default)'} is gone from the graph server at "
                    f"{self.uri} (dropped while this command ran); nothing of the failed batch "
                    "was written"
                ) from exc
            if not self._answers():
                raise GraphUnavailable(
                    f"lost the graph server at {self.uri}: it stopped or went away while this "
                    "command ran; nothing of the failed batch was written — start the server and "
                    "run the command again to resume"
                ) from exc
            if isinstance(exc, AuthError):
                raise GraphUnavailable(f"the graph server at {self.uri} refused the credentials") from exc
            raise
        except (ServiceUnavailable, SessionExpired) as exc:
            raise GraphUnavailable(
                f"lost the graph server at {self.uri}: {_first_line(exc)}; nothing of the failed "
                "batch was written — start the server and run the command again to resume"
            ) from exc
        except DatabaseError as exc:
            # A server-side error is either the statement's (Neo4j refuses a property too large
            # to index: the caller reports that record) or the server's (ArcadeDB closing the
            # database under a query while it shuts down: a probe's gather thread may be reading
            # just then). Which one is asked, not guessed: a server that still answers had a
            # statement error.
            if self._answers():
                raise
            # the same report as a connection lost: which of the two a shutdown gives is a race
            raise GraphUnavailable(
                f"lost the graph server at {self.uri}: it stopped or went away while this command "
                f"ran ({_first_line(exc)}); nothing of the failed batch was written — start the "
                "server and run the command again to resume"
            ) from exc

    def _answers(self) -> bool:
        """Whether the server still runs a trivial query."""
        try:
            with self._session() as session:
                session.run("RETURN 1 AS one").consume()
            return True
        except Exception:  # noqa: BLE001 - any failure means it does not answer
            return False

    def read(self, cypher: str, **params: Any) -> list[GraphRow]:
        """Run a read query; records as plain dicts."""

        def work(tx: neo4j.ManagedTransaction) -> list[GraphRow]:
            return tx.run(cypher, params).data()

        def go() -> list[GraphRow]:
            with self._session() as session:
                return session.execute_read(work)

        return self._call(go)

    def read_plain(self, cypher: str, **params: Any) -> list[GraphRow]:
        """:meth:`read` for a query that returns only plain values (strings, numbers, lists of
        them; no nodes, relationships or paths): the records as they arrive, without the
        driver's ``data()``, which visits every element of every list to convert graph types
        (15 s of a 150 s semantic-index build at 100k entities went there)."""

        def work(tx: neo4j.ManagedTransaction) -> list[GraphRow]:
            return [dict(zip(r.keys(), r.values(), strict=True)) for r in tx.run(cypher, params)]

        def go() -> list[GraphRow]:
            with self._session() as session:
                return session.execute_read(work)

        return self._call(go)

    def write(self, cypher: str, **params: Any) -> list[GraphRow]:
        """Run a write query in one transaction."""
        return self.write_many([(cypher, params)])[-1]

    def write_many(
        self, statements: list[tuple[str, CypherParams]],
        check: Callable[[list[list[GraphRow]]], None] | None = None,
    ) -> list[list[GraphRow]]:
        """Run several statements in ONE transaction: all of them are written or none.

        ``check(results)`` runs before the commit; an exception from it rolls the whole
        transaction back (a write that found less than it must, e.g. its run record gone)."""

        def work(tx: neo4j.ManagedTransaction) -> list[list[GraphRow]]:
            results = [tx.run(cypher, params).data() for cypher, params in statements]
            if check is not None:
                check(results)
            return results

        def go() -> list[list[GraphRow]]:
            with self._session() as session:
                return session.execute_write(work)

        return self._call(go)

    def write_batches(self, cypher: str, rows: Iterable[Mapping[str, object]], batch_size: int = 1000) -> int:
        """Run ``cypher`` (which reads ``UNWIND $rows AS row``) once per batch, one transaction each."""
        n = 0
        for batch in chunks(rows, batch_size):
            self.write(cypher, rows=batch)
            n += len(batch)
        return n

    def schema_statement(self, cypher: str) -> None:
        """Run a schema statement (constraint/index) in an auto-commit transaction."""

        def go() -> None:
            with self._session() as session:
                session.run(cypher).consume()

        try:
            self._call(go)
        except ClientError as exc:
            # Neo4j reports an equivalent constraint under another name as a conflict: benign.
            if "EquivalentSchemaRule" not in (exc.code or "") and "already exists" not in str(exc):
                raise


def _missing_database(exc: Neo4jError) -> bool:
    """A refusal that names the database: Neo4j's DatabaseNotFound, or ArcadeDB's Forbidden
    (its answer for a database that does not exist or that the user may not open)."""
    code = exc.code or ""
    return code.endswith(("Database.DatabaseNotFound", "Security.Forbidden"))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or "no detail given"
    return redact(text.splitlines()[0])


def connect(settings: Settings | None = None, *, ensure_schema: bool = True, autostart: bool = True) -> Graph:
    """Connect to the configured graph; start the managed server (``settings.server``,
    :func:`~kgprobe.graph.servers.graph_server`) when none is configured."""
    settings = settings or Settings.load()
    if settings.uri:
        if settings.password is None:
            raise GraphUnavailable(
                f"NEO4J_URI is set to {settings.uri} but no password is configured: set NEO4J_PASSWORD "
                "or put it in the 0600 config file (kgprobe db status shows where)"
            )
        graph = Graph(settings.uri, settings.user, settings.password, settings.database,
                      lockout_wait=settings.lockout_wait)
    else:
        server = graph_server(settings)
        info = server.start() if autostart else server.info()
        if not info.running:
            raise GraphUnavailable("the managed graph server is not running; run `kgprobe db start`")
        user, password = server.credentials()
        kept = server.credentials_kept()[0].removesuffix(" (mode 0600)")
        graph = Graph(info.uri, user, password, info.database, lockout_wait=settings.lockout_wait,
                      locked_out=lambda: server.locked_out(user, password),
                      shown_user=f"kgprobe's own ({kept})", transient=server.transient)
    if ensure_schema:
        from kgprobe.graph.schema import ensure_schema as _ensure

        try:
            _ensure(graph)
        except BaseException:
            graph.close()  # the caller gets no graph to close
            raise
    return graph
