"""Constraints and indexes, created idempotently on first use (portable to ArcadeDB and Neo4j 5).

The data model is documented in docs/data-model.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from neo4j.exceptions import Neo4jError

from kgprobe.errors import InputError

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


#: What to do about a key twice, where the first connection meets it (a Neo4j import).
LOAD_WITHOUT_BULK = "Load the input without --bulk (the online ingest merges them) into an empty database"


def ensure_schema(graph: Graph) -> None:
    """Create what is missing; a no-op when the schema is already there. A unique constraint the
    data breaks (Neo4j refuses it after an import of a key twice) is one line naming the key."""
    keys = list(UNIQUE_KEYS)
    for i, stmt in enumerate(schema_statements()):
        try:
            graph.schema_statement(stmt)
        except Neo4jError as exc:
            values = (repeated_values(graph, *keys[i])
                      if i < len(keys) and "ConstraintCreationFailed" in (exc.code or "") else [])
            if not values:
                raise
            raise repeated_key_error(*keys[i], values, LOAD_WITHOUT_BULK) from exc


def repeated_key_error(label: str, prop: str, values: list[str], remedy: str) -> InputError:
    """The one line for ``label`` nodes whose ``prop`` repeats (``values``): its unique
    constraint cannot be built, which a bulk load of an input that holds a key twice does
    (one statement id under two entities, in batches the writer checks one at a time)."""
    shown = ", ".join(repr(v) for v in values)
    return InputError(f"the graph has {label} nodes whose {prop} repeats ({shown}), so the unique "
                      f"constraint {schema_name(label, prop)} cannot be built: a bulk load of an "
                      f"input that holds such a key twice does this. {remedy}")


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
