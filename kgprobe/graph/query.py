"""A user's own Cypher (``kgprobe cypher``): the queries of docs/data-model.md ("which facts does
model X not know") without another client.

Read-only unless asked: the query runs in a read transaction (Neo4j refuses a write there) and,
since ArcadeDB's Bolt does not enforce the access mode, a query whose text has a writing clause
is refused before it is sent. Values reach the query as parameters only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from neo4j.exceptions import Neo4jError

from kgprobe.errors import ConfigError
from kgprobe.graph.client import Graph
from kgprobe.types import GraphRow

#: Clauses that change the graph (Cypher 5), anywhere but as a property, label, parameter or
#: map key (``f.start``, ``{set: 1}`` read); administration commands, which start a statement.
CLAUSES = ("CREATE", "MERGE", "SET", "DELETE", "DETACH", "REMOVE", "DROP", "LOAD", "FOREACH")
COMMANDS = ("ALTER", "GRANT", "DENY", "REVOKE", "START", "STOP", "TERMINATE", "RENAME", "ENABLE",
            "DEALLOCATE", "REALLOCATE")
_WORD = re.compile(r"(?<![.:$\w])(" + "|".join(CLAUSES) + r")\b(?!\s*:)", re.IGNORECASE)
_COMMAND = re.compile(r"(?:^|;)\s*(" + "|".join(COMMANDS) + r")\b", re.IGNORECASE)
#: a procedure call (``CALL db.labels()``): only these namespaces, which read
_CALL = re.compile(r"\bCALL\s+(?!\{)([A-Za-z_][\w.]*)", re.IGNORECASE)
READ_PROCEDURES = ("db.labels", "db.relationshiptypes", "db.propertykeys", "db.schema.",
                   "db.indexes", "db.constraints", "dbms.components")
#: string literals, quoted names and comments: what the clause search must not look into
_NOT_CODE = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`[^`]*`|//[^\n]*|/\*.*?\*/", re.DOTALL)
MAX_QUERY_CHARS = 100_000


def writing_clause(query: str) -> str | None:
    """The first clause of ``query`` that could write (None: the query only reads). Strings,
    quoted names and comments are skipped, so ``WHERE e.label = 'Create'`` reads."""
    code = _NOT_CODE.sub(" ", query)
    m = _WORD.search(code) or _COMMAND.search(code)
    if m:
        return m.group(1).upper()
    for call in _CALL.finditer(code):
        name = call.group(1).lower()
        if not name.startswith(READ_PROCEDURES):
            return f"CALL {call.group(1)}"
    return None


def run_query(graph: Graph, query: str, params: Mapping[str, object] | None = None, *,
              write: bool = False) -> list[GraphRow]:
    """Rows of ``query`` as plain values (nodes and relationships as their property maps).
    A writing query without ``write`` and a query the server refuses are one line each."""
    if not query.strip():
        raise ConfigError("the query is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise ConfigError(f"the query has {len(query):,} characters (limit {MAX_QUERY_CHARS:,})")
    if not write:
        clause = writing_clause(query)
        if clause is not None:
            raise ConfigError(f"the query may write ({clause}); kgprobe cypher only reads unless "
                              "given --write")
    try:
        if write:
            return graph.write(query, **(params or {}))
        return graph.read(query, **(params or {}))
    except Neo4jError as exc:
        text = (exc.message or str(exc)).strip().splitlines()
        raise ConfigError(f"the graph server refused the query: {text[0] if text else exc.code}") from None
