"""An example managed graph server from outside kgprobe: the built-in ArcadeDB, kept in a home
of its own (the folder ``own-arcadedb`` inside ``KGPROBE_HOME``) on ports that are free when it
first starts. Selected by ``KGPROBE_SERVER=own-arcadedb``."""

from __future__ import annotations

import dataclasses

from kgprobe.config import Settings
from kgprobe.graph.server import ManagedServer, free_port


class OwnArcade(ManagedServer):
    """The managed ArcadeDB in KGPROBE_HOME/own-arcadedb, on free ports."""

    name = "own-arcadedb"
    summary = "the managed ArcadeDB in a home of its own (KGPROBE_HOME/own-arcadedb), on free ports"

    def __init__(self, settings: Settings) -> None:
        # the ports count at the first start only: server.json keeps them afterwards
        super().__init__(dataclasses.replace(
            settings, home=settings.home / "own-arcadedb", bolt_port=free_port(),
            http_port=free_port(), bolt_port_from=None, http_port_from=None))
