"""Issue 40 item 4: a report of a BELIEF measure never pools the vocabulary's and the candidate
set's rank scales — its figures are the primary scale's with their own n, the other scale apart
(table, JSON, text notes, HTML, samples.jsonl)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from probe_world import REF, load
from tiny_models import TinyModel

from kgprobe.graph import probe_runs as pr
from kgprobe.probing.config import measure_key
from kgprobe.probing.run import ProbeConfig, run_probe


@pytest.fixture(scope="module")
def gpt2(tiny_model: TinyModel) -> Path:
    return tiny_model("gpt2")


def test_a_belief_report_keeps_the_two_rank_scales_apart(graph: Any, gpt2: Path) -> None:
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.models import load_model
    from kgprobe.reports.build import build_report
    from kgprobe.reports.html import render_html
    from kgprobe.reports.results import sample_records
    from kgprobe.reports.text import notes

    load(graph)
    eng = Engine(load_model(str(gpt2)))
    run_probe(graph, eng, ProbeConfig(model=str(gpt2), sample=None, n=2, at=REF, strategy="random",
                                      measures=("belief",), relations=("P35", "P36")),
              fingerprint=eng.fingerprint, progress=False)
    props = pr.ScoreProps("gpt2", measure_key("belief", "random", 2))
    keys = sorted(r["key"] for r in pr.measure_rows(graph, {"score": props.score}))
    p36 = [k for k in keys if "P36" in k]
    p35 = [k for k in keys if k not in p36]
    assert len(p36) == 3 and len(p35) == 1
    # the scales and scores of the case, set on the edges: on P36 one fact ranked over
    # the vocabulary (hit@1 share 0.0) and two among the candidates (1.0); P35's one fact on
    # the vocabulary at 0.5. Pooled, P36 would read 2/3 over 3 facts.
    setting = {p36[0]: ("vocab", 0.0), p36[1]: ("candidates", 1.0), p36[2]: ("candidates", 1.0),
               p35[0]: ("vocab", 0.5)}
    for key, (scale, score) in setting.items():
        graph.write(f"MATCH ()-[f:FACT {{key: $key}}]->() SET f.`{props.score}` = $score, "
                    f"f.`{props.extra('scale')}` = $scale", key=key, score=score, scale=scale)

    rep = build_report(graph, "gpt2", measure="belief")
    a = rep.primary
    assert a.scale == "vocab" and "vocab-scale" in a.measure_label
    by = {g.key: g for g in a.relations}
    assert (by["P36"].facts, by["P36"].mean) == (1, 0.0)
    assert (by["P35"].facts, by["P35"].mean) == (1, 0.5)
    assert (a.overall.facts, a.overall.mean) == (2, pytest.approx(0.25))
    apart = {g.key: g for g in a.apart["candidates"]}
    assert (apart["P36"].facts, apart["P36"].mean) == (2, 1.0)
    assert (apart["all"].facts, apart["all"].mean) == (2, 1.0)
    d = rep.to_dict()["primary"]
    assert d["scale"] == "vocab" and d["overall"]["facts"] == 2
    assert d["apart"]["candidates"][-1]["facts"] == 2 and "apart_facts" not in d

    note = " ".join(notes(rep))
    assert "2 facts ranked on the vocab scale" in note and "2 facts ranked on the candidates scale apart" in note
    assert 'id="scales"' in render_html(rep)
    samples = {s["key"]: s["scale"] for s in sample_records(rep)}
    assert samples == {k: scale for k, (scale, _) in setting.items()}


def test_a_measure_without_scales_reports_every_fact(graph: Any, gpt2: Path) -> None:
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.models import load_model
    from kgprobe.reports.build import build_report

    load(graph)
    eng = Engine(load_model(str(gpt2)))
    run_probe(graph, eng, ProbeConfig(model=str(gpt2), sample=None, n=2, at=REF, strategy="random",
                                      relations=("P35", "P36")),
              fingerprint=eng.fingerprint, progress=False)
    a = build_report(graph, "gpt2").primary
    assert a.scale is None and a.apart == {} and a.overall.facts == 4
