"""What the graph holds and what a user asks of it directly (``kgprobe stats``, ``templates
import|list``, ``cypher``): one function each, the same from the CLI and :mod:`kgprobe.api`,
options checked here before the graph is contacted."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgprobe.app.options import check_pids, relations, require_file
from kgprobe.config import Settings
from kgprobe.errors import ConfigError
from kgprobe.graph.client import Graph, connect
from kgprobe.graph.query import run_query
from kgprobe.graph.stats import graph_stats
from kgprobe.graph.templates import import_templates, list_templates
from kgprobe.loaders.templates import format_names, read_templates
from kgprobe.records import TemplateRecord
from kgprobe.types import CypherParams, GraphRow


@dataclass(frozen=True)
class RelationFacts:
    """One relation's number of facts."""

    pid: str
    label: str | None
    facts: int


@dataclass(frozen=True)
class GraphStats:
    """``kgprobe stats``: the totals (entities, facts, templates, probe runs, ... in the order
    printed) and the facts per relation, most first."""

    counts: dict[str, int]
    per_relation: list[RelationFacts]

    def to_dict(self) -> dict[str, object]:
        return {**self.counts, "per_relation": [
            {"pid": r.pid, "label": r.label, "facts": r.facts} for r in self.per_relation]}


def stats(*, settings: Settings | None = None) -> GraphStats:
    """What the graph holds."""
    with connect(settings) as graph:
        return stats_of(graph)


def stats_of(graph: Graph) -> GraphStats:
    """What ``graph`` holds (``kgprobe stats``, and the demo's graph once loaded)."""
    data = graph_stats(graph)
    per_relation = data.pop("per_relation")
    return GraphStats({k: int(v) for k, v in data.items()},
                      [RelationFacts(str(r["pid"]), r["label"], int(r["facts"])) for r in per_relation])


def templates_import(file: str | Path, *, format: str, relation: str | Iterable[str] | None = None,
                     settings: Settings | None = None) -> int:
    """Import the relation templates of ``file`` (a folder for pararel, lpaqa) written in
    ``format`` into the graph; returns how many were new (re-importing adds nothing). One
    ``relation`` names the relation of a single file; several keep only theirs."""
    names = format_names()  # the registry's, plug-ins loaded; checked before the graph is contacted
    if format not in names:
        raise ConfigError(f"unknown template format {format!r}; one of {', '.join(names)}")
    require_file(file, "file or folder")
    wanted = relations(relation)
    check_pids(wanted)
    records: Iterable[TemplateRecord] = read_templates(str(file), format, wanted[0] if len(wanted) == 1 else None)
    if len(wanted) > 1:
        records = (t for t in records if t.pid in wanted)
    with connect(settings) as graph:
        return import_templates(graph, records)


def templates_list(*, relation: str | Iterable[str] | None = None,
                   settings: Settings | None = None) -> list[TemplateRecord]:
    """The templates stored in the graph, all or those of ``relation`` (PIDs)."""
    wanted = relations(relation)
    check_pids(wanted)
    with connect(settings) as graph:
        if not wanted:
            return list_templates(graph, None)
        return [t for pid in wanted for t in list_templates(graph, pid)]


#: What ``cypher --format`` prints.
CYPHER_FORMATS = ("table", "json", "csv")
#: Suffixes of a query kept in a file (``kgprobe cypher queries/top.cypher``).
QUERY_SUFFIXES = (".cypher", ".cql", ".txt")


def query_text(query: str) -> str:
    """The query itself, or the text of the file it names (a one-line argument ending in
    .cypher, .cql or .txt)."""
    path = Path(query)
    if "\n" in query or len(query) >= 4096 or path.suffix.lower() not in QUERY_SUFFIXES:
        return query
    require_file(query, "query file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def query_params(param: Iterable[str]) -> CypherParams:
    """``--param NAME=VALUE`` options as parameters: VALUE as JSON if it parses, else text."""
    params: CypherParams = {}
    for item in param:
        name, eq, value = item.partition("=")
        if not eq or not name.isidentifier():
            raise ConfigError(f"--param {item!r}: want NAME=VALUE with NAME a plain identifier")
        try:
            params[name] = json.loads(value)
        except ValueError:
            params[name] = value
    return params


def cypher(query: str, params: Mapping[str, Any] | None = None, *, param: Iterable[str] = (),
           write: bool = False, settings: Settings | None = None) -> list[GraphRow]:
    """Rows of a Cypher query of your own (or of the file ``query`` names), read-only unless
    ``write`` (:func:`kgprobe.graph.query.run_query`; docs/data-model.md has queries to start
    from). ``params``: the parameters as values; ``param``: as the CLI's ``NAME=VALUE``."""
    text = query_text(query)
    values = {**(params or {}), **query_params(param)}
    with connect(settings) as graph:
        return run_query(graph, text, values, write=write)
