"""The change journal: what kgprobe's writers changed since a semantic index was built, so the
index can be checked and brought up to date without reading every entity's facts.

Two numbers live on one node, ``(:Journal {name: 'semantic'})``:

- ``writes`` goes up by one with every write that can change the index: an ingest batch that
  writes facts or type edges, a redirect resolution, a template import. An index records the
  number it saw; the same number later means kgprobe wrote nothing the index depends on.
- ``rev`` goes up by one when an index build or update starts (:func:`begin`). Every entity
  whose feature bag (its own FACT, INSTANCE_OF and SUBCLASS_OF edges) a write may have changed
  gets ``bag_rev`` = the ``rev`` of that moment, so the entities changed since a build that
  began at ``rev`` = R are those with ``bag_rev >= R`` (:func:`changed_since`).

A writer's batch raises ``writes`` (a write lock on the node, held to its commit) and marks its
entities in its own transaction, and :func:`begin` raises ``rev`` under the same lock: a batch
committed before a build began is in what the build reads, one committed after carries the
build's ``rev`` or a later one. Edits made outside kgprobe (raw Cypher) are not journaled: a deep
check (every bag's digest) finds those (docs/distractors.md).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kgprobe.types import CypherParams

if TYPE_CHECKING:  # pragma: no cover
    from kgprobe.graph.client import Graph

#: the journal node's name (its label ``Journal`` has a unique ``name``: graph/schema.py)
NAME = "semantic"

#: raise ``writes``: the first statement of a journaled write's transaction
BUMP_WRITES = """
MERGE (j:Journal {name: $journal})
SET j.writes = coalesce(j.writes, 0) + 1, j.epoch = coalesce(j.epoch, $epoch)
"""
#: mark entities (``$qids``) whose feature bag the same transaction changes
MARK_BAGS = """
MATCH (j:Journal {name: $journal})
WITH coalesce(j.rev, 0) AS rev
UNWIND $qids AS q
MATCH (e:Entity {qid: q})
SET e.bag_rev = rev
"""
#: the same for the entities that point at redirected entities ($rows[].source) by a FACT or a
#: type edge: resolving the redirect moves those edges to the target, changing their bags
MARK_POINTERS = """
MATCH (j:Journal {name: $journal})
WITH coalesce(j.rev, 0) AS rev
UNWIND $rows AS row
MATCH (s:Entity)-[:FACT|INSTANCE_OF|SUBCLASS_OF]->(:Entity {qid: row.source})
SET s.bag_rev = rev
"""
BEGIN = """
MERGE (j:Journal {name: $journal})
SET j.rev = coalesce(j.rev, 0) + 1, j.epoch = coalesce(j.epoch, $epoch)
RETURN j.rev AS rev, coalesce(j.writes, 0) AS writes, j.epoch AS epoch
"""
READ = """
MATCH (j:Journal {name: $journal})
RETURN coalesce(j.rev, 0) AS rev, coalesce(j.writes, 0) AS writes, j.epoch AS epoch
"""
CHANGED_SINCE = """
MATCH (e:Entity) WHERE e.bag_rev >= $rev
RETURN collect(e.qid) AS qids
"""


@dataclass(frozen=True)
class Mark:
    """Where the journal stood: ``rev`` when a build began, ``writes`` journaled by then, and
    the journal's ``epoch``: a random id given when its node is made, so a journal made again
    (the graph wiped and loaded anew) never passes for the one an index recorded."""

    rev: int
    writes: int
    epoch: str


def bump_statements(qids: list[str]) -> list[tuple[str, CypherParams]]:
    """A writer's journal statements, to run first in its own transaction: ``writes`` up by
    one, then ``qids`` (entities whose bags it changes; may be empty) marked."""
    return [(BUMP_WRITES, {"journal": NAME, "epoch": _new_epoch()}), *mark_statements(qids)]


def mark_statements(qids: list[str]) -> list[tuple[str, CypherParams]]:
    """Mark ``qids`` (none: no statement) in a transaction that raised ``writes`` already."""
    return [(MARK_BAGS, {"journal": NAME, "qids": qids})] if qids else []


def begin(graph: Graph) -> Mark:
    """Start a build or update: ``rev`` up by one; what the index records."""
    row = graph.write(BEGIN, journal=NAME, epoch=_new_epoch())[0]
    return Mark(int(row["rev"]), int(row["writes"]), str(row["epoch"]))


def read(graph: Graph) -> Mark | None:
    """Where the journal stands, or None on a graph no journaled write or build has touched
    (a bulk load, an older kgprobe's graph, a wiped one)."""
    rows = graph.read(READ, journal=NAME)
    if not rows or rows[0]["epoch"] is None:
        return None
    return Mark(int(rows[0]["rev"]), int(rows[0]["writes"]), str(rows[0]["epoch"]))


def _new_epoch() -> str:
    return secrets.token_hex(8)


def changed_since(graph: Graph, rev: int) -> list[str]:
    """The entities whose bags journaled writes may have changed since ``rev`` began."""
    rows = graph.read_plain(CHANGED_SINCE, rev=rev)
    return list(rows[0]["qids"] or []) if rows else []
