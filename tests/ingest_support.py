"""What `kgprobe ingest --bulk` tests compare, shared by tests/graph/test_ingest_bulk.py and
tests/loaders/test_ingest_compressed_workers.py: the environment that only writes the import
files, a graph's whole content, and the import files' rows."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

#: a Neo4j server named (never reached): ``--bulk DIR`` only writes the import files, where with no
#: NEO4J_URI it would load the managed ArcadeDB of the default home
FILES_ONLY = {**os.environ, "NEO4J_URI": "bolt://127.0.0.1:9", "NEO4J_PASSWORD": "unused"}


#: the change journal's bookkeeping (kgprobe/graph/journal.py): how many batches wrote and when,
#: which differs between loads of the same data (a bulk load, other batch sizes or workers)
JOURNAL_LABEL, JOURNAL_PROPERTY = "Journal", "bag_rev"


def graph_dump(graph: Any) -> tuple[list[str], list[str]]:
    """Every node (labels, properties) and every edge (type, end QIDs, properties), sorted; the
    change journal's node and marks left out (its history of writes is not the graph's data)."""
    nodes = sorted(json.dumps([sorted(r["labels"]), {k: v for k, v in r["props"].items()
                                                     if k != JOURNAL_PROPERTY}],
                              sort_keys=True, ensure_ascii=False)
                   for r in graph.read("MATCH (n) RETURN labels(n) AS labels, properties(n) AS props")
                   if JOURNAL_LABEL not in r["labels"])
    edges = sorted(json.dumps([r["t"], r["a"], r["b"], r["props"]], sort_keys=True, ensure_ascii=False)
                   for r in graph.read("MATCH (a)-[e]->(b) RETURN type(e) AS t, a.qid AS a, b.qid AS b, "
                                       "properties(e) AS props"))
    return nodes, edges


def import_rows(directory: Path) -> dict[tuple[str, str, str], list[str]]:
    """The import files' rows per node label or edge type and header, sorted (the graph they
    make, whatever file or order each row is in); a multiline file's text whole."""
    rows: dict[tuple[str, str, str], list[str]] = {}
    for arg in (directory / "import.args").read_text(encoding="utf-8").splitlines():
        if arg.startswith(("--nodes=", "--relationships=")):
            flag, label, name = arg.split("=", 2)
            header, _, body = (directory / name).read_text(encoding="utf-8").partition("\n")
            kept = rows.setdefault((flag, label, header), [])
            kept += [body] if name.endswith("-ml.csv") else body.splitlines()
    return {k: sorted(v) for k, v in rows.items()}
