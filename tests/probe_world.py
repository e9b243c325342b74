"""The probe tests' world: the distractor tests' hand-made facts (real QIDs, the US head-of-state
history) plus subject popularity and templates, written through the real ingest and template
store into the real test server."""

from __future__ import annotations

import dataclasses
from typing import Any

from distractor_world import (
    ADAMS,
    BACH,
    BIDEN,
    BUSH,
    CLINTON,
    CURIE,
    FRANCE,
    GERMANY,
    OBAMA,
    TRUMP,
    USA,
    world,
)

from kgprobe.records import EntityRecord, Record, TemplateRecord, derive_style

#: A reference date at which Biden is the current head of state and four presidents are past.
REF = "2024-06-01"

#: Subject popularity (DistFactAssessLM-like scale): spread so that tertiles are clear.
POPULARITY = {USA: 9.0, FRANCE: 8.0, GERMANY: 7.0, OBAMA: 6.0, TRUMP: 5.5, BIDEN: 5.0,
              BUSH: 4.0, CLINTON: 3.0, ADAMS: 2.0, CURIE: 1.5, BACH: 1.0}

TEMPLATE_TEXTS = [
    ("P35", "The head of state of [X] is [Y]."),
    ("P35", "Who is the head of state of [X]?"),
    ("P36", "The capital of [X] is [Y]."),
    ("P27", "[X] is a citizen of [Y]."),
    # object inside: never used by the distractor measure
    ("P27", "[Y] is the country of [X]."),
]
TEMPLATES = [TemplateRecord(p, t, derive_style(t), "test") for p, t in TEMPLATE_TEXTS]


def records() -> list[Record]:
    out: list[Record] = []
    for r in world():
        if isinstance(r, EntityRecord) and r.qid in POPULARITY:
            r = dataclasses.replace(r, extra={"popularity": POPULARITY[r.qid]})
        out.append(r)
    return out


def load(graph: object) -> None:
    from kgprobe.graph.ingest import ingest
    from kgprobe.graph.templates import import_templates

    ingest(graph, records())  # type: ignore[arg-type]
    import_templates(graph, TEMPLATES)  # type: ignore[arg-type]


def score_props(graph: Any) -> dict[str, dict[str, Any]]:
    """Per fact with any: its score__/known__/stale__/cfg__/run__ properties."""
    out = {r["key"]: {k: v for k, v in r["p"].items()
                      if k.split("__")[0] in ("score", "known", "stale", "cfg", "run")}
           for r in graph.read("MATCH ()-[f:FACT]->() RETURN f.key AS key, properties(f) AS p")}
    return {k: v for k, v in out.items() if v}


def same_props(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> None:
    """Equal FACT properties: scores within 1e-6, everything else equal, run ids aside."""
    assert set(a) == set(b)
    for key in a:
        pa_, pb_ = a[key], b[key]
        assert set(pa_) == set(pb_), key
        for name, va in pa_.items():
            vb = pb_[name]
            if name.startswith("run__"):
                assert (va is None) == (vb is None), (key, name)
            elif isinstance(va, float) or isinstance(vb, float):
                assert abs(float(va) - float(vb)) <= 1e-6, (key, name, va, vb)
            else:
                assert va == vb, (key, name, va, vb)
