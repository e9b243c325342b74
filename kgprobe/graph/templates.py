"""The template store: ``(:Relation {pid})-[:HAS_TEMPLATE]->(:Template {id, text, style, ...})``.

Every Cypher string about templates lives here. Writes are idempotent (MERGE on the stable
template id, ``kgprobe.records.template_id``), so importing a file twice adds nothing. Nodes
are written in their own passes before the edges (docs/design.md §2: ``ON CREATE SET`` after an
earlier MERGE of the same statement is unreliable on ArcadeDB).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict
from importlib import resources
from pathlib import Path
from typing import TypedDict, cast

from kgprobe.errors import InputError
from kgprobe.graph import journal
from kgprobe.graph.client import Graph
from kgprobe.records import TemplateRecord, is_pid, template_too_long

_MERGE_RELATIONS = """
UNWIND $rows AS row
MERGE (:Relation {pid: row.pid})
"""

_MERGE_TEMPLATES = """
UNWIND $rows AS row
MERGE (t:Template {id: row.id})
SET t.pid = row.pid, t.text = row.text, t.style = row.style, t.source = row.source,
    t.language = row.language
"""

_MERGE_EDGES = """
UNWIND $rows AS row
MATCH (r:Relation {pid: row.pid})
MATCH (t:Template {id: row.id})
MERGE (r)-[:HAS_TEMPLATE]->(t)
"""

_LIST_ALL = """
MATCH (r:Relation)-[:HAS_TEMPLATE]->(t:Template)
RETURN r.pid AS pid, t.id AS id, t.text AS text, t.style AS style, t.source AS source,
       t.language AS language
"""

_LIST_ONE = """
MATCH (r:Relation {pid: $pid})-[:HAS_TEMPLATE]->(t:Template)
RETURN r.pid AS pid, t.id AS id, t.text AS text, t.style AS style, t.source AS source,
       t.language AS language
"""


class _TemplateRow(TypedDict):
    """A template as :data:`_MERGE_TEMPLATES` writes it: a :class:`TemplateRecord`'s fields."""

    pid: str
    text: str
    style: str
    source: str
    language: str
    id: str | None


def _row(rec: TemplateRecord) -> _TemplateRow:
    if not is_pid(rec.pid):
        raise InputError(f"not a Wikidata property id: {rec.pid!r}")
    return cast(_TemplateRow, asdict(rec))


def import_templates(graph: Graph, records: Iterable[TemplateRecord], batch_size: int = 1000) -> int:
    """Store templates under their relations; returns how many distinct templates were given.

    Duplicates within the input (same id) are written once.
    """
    rows: dict[str | None, _TemplateRow] = {}
    for rec in records:
        too_long = template_too_long(rec.text)
        if too_long:  # records built in code bypass the file readers' check
            raise InputError(f"{rec.pid}: {too_long}")
        row = _row(rec)
        rows.setdefault(row["id"], row)
    if not rows:
        return 0
    values = list(rows.values())
    pids = [{"pid": pid} for pid in sorted({r["pid"] for r in values})]
    graph.write_batches(_MERGE_RELATIONS, pids, batch_size)
    graph.write_batches(_MERGE_TEMPLATES, values, batch_size)
    graph.write_batches(_MERGE_EDGES, values, batch_size)
    # the relations with templates decide which entities the semantic index holds
    graph.write_many(journal.bump_statements([]))
    return len(values)


def list_templates(graph: Graph, relation: str | None = None) -> list[TemplateRecord]:
    """Templates in the graph, all or of one relation, ordered by relation, source and text."""
    if relation is None:
        rows = graph.read(_LIST_ALL)
    else:
        if not is_pid(relation):
            raise InputError(f"not a Wikidata property id: {relation!r}")
        rows = graph.read(_LIST_ONE, pid=relation)
    out = [
        TemplateRecord(pid=r["pid"], text=r["text"], style=r["style"], source=r["source"],
                       language=r["language"] or "en", id=r["id"])
        for r in rows
    ]
    out.sort(key=lambda t: (int(t.pid[1:]), t.source, t.text))
    return out


def probe_templates(graph: Graph, relation: str | None = None) -> list[TemplateRecord]:
    """``list_templates`` for scoring: a template over ``MAX_TEMPLATE_CHARS`` (written by an
    older kgprobe or by hand) is refused with one line naming it, never probed (a 2 MB
    template once ran for 400 s on one fact, and a long context would be cut from the left)."""
    out = list_templates(graph, relation)
    for t in out:
        too_long = template_too_long(t.text)
        if too_long:
            raise InputError(
                f"template {t.id} of {t.pid} in the graph: {too_long}; delete it "
                f"(MATCH (t:Template {{id: '{t.id}'}}) DETACH DELETE t) and import a shorter one"
            )
    return out


def demo_paths() -> tuple[Path, Path]:
    """The packaged demo graph (Wikidata JSON dump layout, gzip) and kgprobe's own templates."""
    root = resources.files("kgprobe") / "data"
    graph_file = Path(str(root / "demo_graph.json.gz"))
    templates_file = Path(str(root / "templates.jsonl"))
    return graph_file, templates_file


def import_own_templates(graph: Graph) -> int:
    """Import kgprobe's own templates (``kgprobe/data/templates.jsonl``)."""
    from kgprobe.loaders.templates import read_templates

    return import_templates(graph, read_templates(demo_paths()[1], "kgprobe"))
