"""Constraints and indexes, created idempotently on first use (portable to ArcadeDB and Neo4j 5).

The data model is documented in docs/data-model.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover  (client.connect calls ensure_schema: no runtime import back)
    from kgprobe.graph.client import Graph

#: (label, property) pairs that identify a node: each gets a uniqueness constraint.
UNIQUE_KEYS: tuple[tuple[str, str], ...] = (
    ("Entity", "qid"),
    ("Relation", "pid"),
    ("Redirect", "qid"),
    ("Template", "id"),
    ("ProbeRun", "id"),
    # the model key a probe writes under, claimed for one model's weights (probe_runs.py)
    ("ModelKey", "key"),
    # the sampling index (graph/sample_index.py): one slot node per fact and per typed entity,
    # found by its ordinal id ("P19:17", "Q5:3") or by what it stands for
    ("FactSlot", "id"),
    ("FactSlot", "key"),
    ("TypeSlot", "id"),
    ("TypeSlot", "member"),
    # the change journal the semantic index is checked against (graph/journal.py)
    ("Journal", "name"),
)
#: FACT edge properties looked up by value.
FACT_INDEXES: tuple[str, ...] = ("key", "pid")
NODE_INDEXES: tuple[tuple[str, str], ...] = (("Entity", "label"),)


def schema_name(label: str, prop: str) -> str:
    """The name of the constraint or index on ``label``'s ``prop`` (a node label or the FACT
    type): one spelling for the Cypher below and the ArcadeDB bulk load's own builds of the
    same indexes (graph/bulk_arcadedb.py)."""
    return f"{label.lower()}_{prop}"


def schema_statements() -> list[str]:
    stmts = [
        f"CREATE CONSTRAINT {schema_name(label, prop)} IF NOT EXISTS FOR (n:{label}) REQUIRE n.{prop} IS UNIQUE"
        for label, prop in UNIQUE_KEYS
    ]
    stmts += [
        f"CREATE INDEX {schema_name('FACT', prop)} IF NOT EXISTS FOR ()-[f:FACT]-() ON (f.{prop})"
        for prop in FACT_INDEXES
    ]
    stmts += [
        f"CREATE INDEX {schema_name(label, prop)} IF NOT EXISTS FOR (n:{label}) ON (n.{prop})"
        for label, prop in NODE_INDEXES
    ]
    return stmts


def ensure_schema(graph: Graph) -> None:
    """Create what is missing; a no-op when the schema is already there."""
    for stmt in schema_statements():
        graph.schema_statement(stmt)


def missing_unique_constraints(graph: Graph) -> list[tuple[str, str]]:
    """The ``UNIQUE_KEYS`` whose constraint the server does not list (by its name). After a bulk
    import a constraint the data breaks may be missing without a word: ArcadeDB's sorted build
    of a unique index over keys that repeat is skipped, and ``IF NOT EXISTS`` says nothing."""
    names = {str(r["name"]) for r in graph.read("SHOW CONSTRAINTS YIELD name RETURN name")}
    return [(label, prop) for label, prop in UNIQUE_KEYS if schema_name(label, prop) not in names]


def repeated_values(graph: Graph, label: str, prop: str, limit: int = 3) -> list[str]:
    """Up to ``limit`` values of ``label``'s ``prop`` held by more than one node. ``label`` and
    ``prop`` must be one of ``UNIQUE_KEYS`` (they are written into the query)."""
    if (label, prop) not in UNIQUE_KEYS:
        raise ValueError(f"not a unique key: {label}.{prop}")
    rows = graph.read(f"MATCH (n:{label}) WITH n.{prop} AS v, count(*) AS c WHERE c > 1 "
                      "RETURN v ORDER BY v LIMIT $limit", limit=limit)
    return [str(r["v"]) for r in rows]
