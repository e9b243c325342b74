"""Loaders into the real graph: one entity from Turtle, N-Triples and JSON is one set of facts.

Statement ids are normalized identically on every path, so the second and third ingest of
Douglas Adams (other formats) add no node and no edge.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loaders_support import WD, facts

from kgprobe.graph.ingest import ingest
from kgprobe.graph.stats import graph_stats
from kgprobe.loaders import open_source
from kgprobe.records import FactRecord

KEYS = ("entities", "relations", "facts", "temporal_facts", "instance_of")


def _counts(graph: Any) -> dict[str, int]:
    s = graph_stats(graph)
    return {k: s[k] for k in KEYS}


def _as_json(fs: list[FactRecord], path: Path) -> Path:
    """The Turtle's item statements written back as Wikidata JSON (lower-case ids, as old JSON)."""
    claims: dict[str, list[dict[str, Any]]] = {}
    for f in fs:
        quals: dict[str, list[dict[str, Any]]] = {}
        for pid, tv in (("P580", f.start), ("P582", f.end), ("P585", f.point_in_time)):
            if tv is not None:
                value = {"time": tv.time, "precision": tv.precision, "calendarmodel": tv.calendar}
                quals[pid] = [{"snaktype": "value", "datavalue": {"type": "time", "value": value}}]
        head, tail = (f.statement_id or "").split("$")
        item = {"entity-type": "item", "id": f.object}
        claims.setdefault(f.pid, []).append(
            {
                "id": f"{head.lower()}${tail.lower()}",
                "rank": f.rank,
                "mainsnak": {
                    "snaktype": "value",
                    "datavalue": {"type": "wikibase-entityid", "value": item},
                },
                "qualifiers": quals,
            }
        )
    types = [
        {
            "rank": "normal",
            "mainsnak": {
                "snaktype": "value",
                "datavalue": {
                    "type": "wikibase-entityid",
                    "value": {"entity-type": "item", "id": "Q5"},
                },
            },
        }
    ]
    claims["P31"] = types
    doc = {"entities": {"Q42": {"id": "Q42", "type": "item", "claims": claims}}}
    path.write_text(json.dumps(doc))
    return path


def test_one_entity_from_three_formats_is_one_set_of_facts(graph: Any, tmp_path: Path) -> None:
    ttl = WD / "wdqs-rdf" / "Q42.ttl"
    from_ttl = facts(open_source(ttl))
    first = ingest(graph, open_source(ttl))
    after_ttl = _counts(graph)
    assert first.facts == len(from_ttl) and after_ttl["facts"] == len(from_ttl)
    assert after_ttl["temporal_facts"] == sum(1 for f in from_ttl if f.is_temporal) > 0
    assert first.skipped["truthy-covered-by-statement"] > 0  # counted in the summary

    ingest(graph, open_source(WD / "derived" / "Q42_statements_with_qualifiers.nt"))
    assert _counts(graph) == after_ttl
    ingest(graph, open_source(_as_json(from_ttl, tmp_path / "q42.json")))
    assert _counts(graph) == after_ttl
