"""Graph servers kgprobe manages itself: the contract (:class:`GraphServer`) and the registry of
them (:data:`GRAPH_SERVERS`, entry-point group ``kgprobe.graph_servers``; issue 39).

A managed graph server is one that kgprobe starts, stops and wipes on this machine when no
``NEO4J_URI`` names a server of the user's own. The setting ``server`` (``KGPROBE_SERVER``, or key
``server`` of the config file; default ``arcadedb``, the built-in
:class:`~kgprobe.graph.server.ManagedServer`) names the entry: ``kgprobe db start|stop|status|wipe``
and every command that connects (:func:`kgprobe.graph.client.connect`) go through
:func:`graph_server`, so a new server is one class in one module (or one installed package).

The contract is what kgprobe needs of such a server: its lifecycle (:meth:`~GraphServer.start`,
:meth:`~GraphServer.stop`, :meth:`~GraphServer.info`, :meth:`~GraphServer.wipe`), the Bolt
credentials it hands the client (:meth:`~GraphServer.credentials`, and where they are kept, never
them: :meth:`~GraphServer.credentials_kept`), its lock-out rule (:meth:`~GraphServer.locked_out`:
is a refused login a lock-out, to wait out, or a wrong password) and its transient-error rule
(:meth:`~GraphServer.transient`: which refusals of a write a retry can cure).

Imports only the configuration, the errors, the registry and the driver's exception types."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from neo4j.exceptions import ConstraintError, TransientError

from kgprobe.config import DEFAULT_SERVER, Settings
from kgprobe.errors import ConfigError
from kgprobe.plugins import GRAPH_SERVERS as SERVER_GROUP
from kgprobe.plugins import Registry

DATABASE = "kgprobe"


@dataclass
class ServerInfo:
    """Where a managed server is and whether it runs (``db start``, ``db status``)."""

    running: bool
    pid: int | None
    uri: str
    http_port: int
    bolt_port: int
    home: Path
    database: str = DATABASE


def transient_error(exc: BaseException) -> bool:
    """The rule for a server kgprobe does not manage (``NEO4J_URI``): a refusal a retry can cure.
    Neo4j classifies its own (``TransientError``); ArcadeDB raises a duplicate-key
    ConstraintError where two writers MERGE the same new node at once (Neo4j would lock), or a
    concurrent-modification error. MERGE is idempotent, so the whole batch can run again."""
    if isinstance(exc, (TransientError, ConstraintError)):
        return True
    text = str(exc)
    return "oncurrent" in text or "Duplicated key" in text


class GraphServer(ABC):
    """A graph server kgprobe runs on this machine, one per data directory (``settings.home``),
    spoken to over Bolt on 127.0.0.1. A plug-in subclasses it, sets ``name`` and ``summary``
    and registers it (``@GRAPH_SERVERS.register`` or an entry point of the group
    ``kgprobe.graph_servers``); ``KGPROBE_SERVER=NAME`` selects it."""

    #: the value of ``KGPROBE_SERVER`` / key ``server`` that selects it
    name: ClassVar[str] = ""
    #: one line: what it is (``kgprobe plugins``)
    summary: ClassVar[str] = ""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        #: the data directory; start, stop and wipe of one home never run at once
        self.home = settings.home.absolute()

    @abstractmethod
    def start(self, timeout: float = 90.0) -> ServerInfo:
        """Start the server if it is not running (nothing happens when it runs) and make sure
        the database and the user of :meth:`credentials` exist; a failure is one
        ``GraphUnavailable`` line."""

    @abstractmethod
    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the server; True if one was running. Only this home's server is signalled."""

    @abstractmethod
    def info(self) -> ServerInfo:
        """Whether it runs, and where (never starting it)."""

    @abstractmethod
    def wipe(self) -> None:
        """Delete every node and edge (the schema comes back on the next connection)."""

    @abstractmethod
    def credentials(self) -> tuple[str, str]:
        """The Bolt user and password the client logs in with (after :meth:`start`)."""

    @abstractmethod
    def credentials_kept(self) -> tuple[str, str]:
        """Where the user name and the password are kept, in words (``db status`` prints
        these, never the secrets)."""

    def locked_out(self, user: str, password: str) -> bool:
        """Is ``user`` locked by failed logins right now (a refusal to wait out, not a wrong
        password)? By default no server locks anyone out."""
        return False

    def transient(self, exc: BaseException) -> bool:
        """Is this refusal of a write one that a retry of the whole batch can cure? By default
        the rule of :func:`transient_error`."""
        return transient_error(exc)


#: every managed graph server by name: the built-in ArcadeDB (imported on first use), then the
#: plug-ins of ``kgprobe.graph_servers``
GRAPH_SERVERS: Registry[type[GraphServer]] = Registry(
    "graph server", SERVER_GROUP, GraphServer, requires=("name", "summary"),
    describe=lambda cls: cls.summary)
GRAPH_SERVERS.add_lazy(DEFAULT_SERVER, "kgprobe.graph.server:ManagedServer",
                       "ArcadeDB from the arcadedb-embedded wheel, over Bolt on 127.0.0.1")


def graph_server(settings: Settings) -> GraphServer:
    """The managed server that ``settings.server`` names, for ``settings.home``; an unknown
    name is one line that lists the known ones. Refused when ``NEO4J_URI`` names a server
    kgprobe does not manage."""
    if settings.uri:
        raise ConfigError(f"NEO4J_URI is set ({settings.uri}): that server is not managed by kgprobe")
    hint = f"set by {settings.server_from}" if settings.server_from else ""
    return GRAPH_SERVERS.lookup(settings.server, hint)(settings)
