"""What the graph holds: counts for `kgprobe stats`."""

from __future__ import annotations

from typing import Any

from kgprobe.graph.client import Graph

_COUNTS: dict[str, str] = {
    "entities": "MATCH (n:Entity) RETURN count(n) AS n",
    "labelled_entities": "MATCH (n:Entity) WHERE n.label IS NOT NULL RETURN count(n) AS n",
    "relations": "MATCH (n:Relation) RETURN count(n) AS n",
    "facts": "MATCH ()-[f:FACT]->() RETURN count(f) AS n",
    "temporal_facts": (
        "MATCH ()-[f:FACT]->() WHERE f.start_time IS NOT NULL OR f.end_time IS NOT NULL "
        "OR f.pit_time IS NOT NULL RETURN count(f) AS n"
    ),
    "facts_with_qualifiers": "MATCH ()-[f:FACT]->() WHERE f.qualifiers IS NOT NULL RETURN count(f) AS n",
    "instance_of": "MATCH ()-[t:INSTANCE_OF]->() RETURN count(t) AS n",
    "inferred_types": "MATCH ()-[t:INFERRED_TYPE]->() RETURN count(t) AS n",
    "subclass_of": "MATCH ()-[t:SUBCLASS_OF]->() RETURN count(t) AS n",
    "redirects": "MATCH (r:Redirect) RETURN count(r) AS n",
    "templates": "MATCH (t:Template) RETURN count(t) AS n",
    "probe_runs": "MATCH (r:ProbeRun) RETURN count(r) AS n",
}
_PER_RELATION = """
MATCH ()-[f:FACT]->()
WITH f.pid AS pid, count(f) AS facts
OPTIONAL MATCH (r:Relation {pid: pid})
RETURN pid, r.label AS label, facts
ORDER BY facts DESC, pid
"""


def graph_stats(graph: Graph) -> dict[str, Any]:
    """Totals plus a per-relation fact count."""
    out: dict[str, Any] = {name: graph.read(q)[0]["n"] for name, q in _COUNTS.items()}
    out["per_relation"] = graph.read(_PER_RELATION)
    return out
