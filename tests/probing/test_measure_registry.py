"""The measure plug-in contract: registry, property keys, one probe → FACT edge → report round
trip for every registered measure, batch-size independence, and model-key fingerprints."""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from _kgprobe_process import run_kgprobe
from probe_world import REF, load
from tiny_models import TinyModel

from kgprobe.errors import ConfigError
from kgprobe.graph import probe_runs as pr
from kgprobe.probing.config import ProbeConfig, measure_key
from kgprobe.probing.measures.catalog import describe, load_all
from kgprobe.probing.measures.registry import REGISTRY, parse_measure
from kgprobe.probing.run import run_probe


@pytest.fixture(scope="module")
def gpt2(tiny_model: TinyModel) -> Path:
    return tiny_model("gpt2")


@pytest.fixture(scope="module")
def engine(gpt2: Path) -> Any:
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.models import load_model

    return Engine(load_model(str(gpt2)))


@pytest.fixture()
def world(graph: Any, tmp_path: Path) -> tuple[Any, Any]:
    from kgprobe.probing.semantic import IndexSettings, ensure_index

    load(graph)
    return graph, ensure_index(graph, tmp_path / "index", IndexSettings(dim=8, seed=0))


class _Judge(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint on localhost that answers "Correctness: correct"
    when the prediction repeats a reference word, else "incorrect"."""

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][0]["content"]
        last = prompt.rsplit("Query:", 1)[1]
        refs = json.loads(last.split("Ground truth:", 1)[1].split("\n", 1)[0])
        pred = last.split("Prediction:", 1)[1].split("\n", 1)[0]
        ok = any(w and w.lower() in pred.lower() for r in refs for w in r.split())
        data = json.dumps({"choices": [{"message": {"content": "correct" if ok else "incorrect"}}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data.encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def judge_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    srv = HTTPServer(("127.0.0.1", 0), _Judge)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
    monkeypatch.setenv("KGPROBE_JUDGE_URL", url)
    monkeypatch.setenv("KGPROBE_JUDGE_MODEL", "local")
    yield url
    srv.shutdown()


def test_registry_lists_every_measure_with_section_and_parameters() -> None:
    reg = load_all()
    assert {"kmin", "kavg", "probability", "precision_at_n", "rouge_l", "bertscore", "judge",
            "karr", "belief", "info", "factor"} <= set(reg)
    rows = {r["name"]: r for r in describe()}
    assert rows["belief"]["section"].startswith("Zhao")
    assert {p["name"] for p in rows["belief"]["parameters"]} >= {"k", "mode", "runs", "bins"}
    assert "distractors" in rows["kmin"]["needs"] and "past" in rows["kmin"]["needs"]
    assert parse_measure("belief:k=5,mode=vocab") == ("belief", {"k": "5", "mode": "vocab"})
    with pytest.raises(ConfigError, match="unknown parameter"):
        REGISTRY["kmin"]({"bogus": 1})


def test_keys_carry_every_score_changing_setting() -> None:
    # the default configuration keeps its historical key
    assert measure_key("kmin", "temp+sem", 5) == "kmin_temp_sem_n5"
    # demo (1 object label) and probe (3) never share a property (issue 11 §1)
    assert measure_key("kmin", "temp+sem", 5, max_object_labels=1) == "kmin_temp_sem_n5_o1"
    assert measure_key("kmin", "temp+sem", 5, end="eos") == "kmin_temp_sem_n5_eeos"
    assert measure_key("kmin", "temp+sem", 5, label_rule="all") == "kmin_temp_sem_n5_lrall"
    assert measure_key("kmin", "temp+sem", 5, verbalizer="raw") == "kmin_temp_sem_n5_vraw"
    assert measure_key("kmin", "temp+sem", 5, verbalizer="careful") == "kmin_temp_sem_n5"
    assert measure_key("kmin", "temp+sem", 5, max_subject_labels=2) == "kmin_temp_sem_n5_s2"
    assert measure_key("belief:k=5", "random", 3) == "belief_random_n3_k5"
    # report-only parameters change no stored value and no key
    assert measure_key("belief:runs=7", "random", 3) == "belief_random_n3"
    assert measure_key("probability", "random", 3) == "probability"


def test_cli_measures_json_is_one_document() -> None:
    out = run_kgprobe(["measures", "--json"], os.environ)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert {m["name"] for m in doc["measures"]} >= {"kmin", "belief", "factor"}
    assert {p["name"] for p in doc["shared_parameters"]} == {
        "max_subject_labels", "max_object_labels", "end", "label_rule", "verbalizer"}


def _cfg(model: Path, **kw: Any) -> ProbeConfig:
    base: dict[str, Any] = {"model": str(model), "sample": None, "n": 2, "at": REF,
                            "batch_facts": 4, "strategy": "random"}
    base.update(kw)
    return ProbeConfig(**base)


def test_judge_without_endpoint_is_one_line(world: tuple[Any, Any], engine: Any, gpt2: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    graph, index = world
    monkeypatch.delenv("KGPROBE_JUDGE_URL", raising=False)
    with pytest.raises(ConfigError, match="KGPROBE_JUDGE_URL"):
        run_probe(graph, engine, _cfg(gpt2, measures=("judge",)), fingerprint=engine.fingerprint,
                  index=index, progress=False)


def test_every_measure_round_trips_probe_edge_report(world: tuple[Any, Any], engine: Any,
                                                     gpt2: Path, judge_url: str) -> None:
    from distractor_world import BIDEN, FRANCE, HUMAN, USA

    from kgprobe.graph.ingest import ingest
    from kgprobe.graph.templates import import_templates
    from kgprobe.records import EntityRecord, FactRecord, TemplateRecord, derive_style
    from kgprobe.reports.build import build_report

    graph, index = world
    # more subjects of a relation and more relations of an object for KaRR's samples
    ingest(graph, [EntityRecord("Q3052772", "Emmanuel Macron", types=[HUMAN]),
                   FactRecord(FRANCE, "P35", "Q3052772", statement_id="Q142$P35"),
                   FactRecord(USA, "P6", BIDEN, statement_id="Q30$P6")])
    t6 = "The head of government of [X] is [Y]."
    import_templates(graph, [TemplateRecord("P6", t6, derive_style(t6), "test")])
    names = tuple(load_all())
    cfg = _cfg(gpt2, measures=names, relations=("P35", "P36"))
    s = run_probe(graph, engine, cfg, fingerprint=engine.fingerprint, index=index, progress=False)
    assert s.scored == s.planned == 5  # USA->Biden, France->Macron and three capitals
    keys = {m: measure_key(m, "random", 2) for m in names}
    for m, k in keys.items():
        rows = pr.measure_rows(graph, {"score": pr.ScoreProps("gpt2", k).score})
        assert rows, f"{m} wrote nothing"
        for r in rows:
            assert isinstance(r["score"], float), (m, r)
    # a second run recomputes nothing stored: only what a measure could not score is tried
    # again (KaRR where a one-token subject leaves no scorable denominator; since KaRR
    # version 2 the fact's own relation is in R_k, so the capitals have a KaRR too)
    again = run_probe(graph, engine, cfg, fingerprint=engine.fingerprint, index=index, progress=False)
    assert again.scored == 0 and again.skipped + again.unscorable == 5
    assert all(r.startswith("karr:") for r in again.unscorable_reasons)

    rep = build_report(graph, "gpt2", measure="kmin")
    d = rep.to_dict()
    got = {(r["measure"], r["pid"]) for r in d["measures"]}
    assert got == {(m, p) for m in names for p in ("P35", "P36")}
    belief = next(r for r in d["measures"] if r["measure"] == "belief" and r["pid"] == "P36")
    assert belief["facts"] == 3 and set(belief["acc@1"]) >= {"mean", "range", "sd"}
    assert 0.0 <= belief["acc@1"]["mean"] <= belief["acc@10"]["mean"] <= 1.0
    assert belief["calibration@10"] and "overconf@10" in belief
    for r in d["measures"]:
        assert r["facts"] >= 1
        if r["measure"] != "belief":
            assert r["score"]["n"] == r["facts"]
            continue
        # BELIEF: one population per rank scale (issue 21 §2), whose sizes add up to the facts
        others = sum(v for k, v in r.items() if k.endswith(" facts") and k != "scale facts")
        assert r["score"]["n"] == r["scale facts"] and r["scale facts"] + others == r["facts"]
    from rich.console import Console

    from kgprobe.reports.console import print_report

    con = Console(record=True, width=200)
    print_report(rep, con)
    text = con.export_text()
    assert "other measures probed for gpt2" in text and "belief_random_n2" in text
    judge = {r["pid"]: r["score"]["mean"] for r in d["measures"] if r["measure"] == "judge"}
    assert all(0.0 <= v <= 1.0 for v in judge.values())

    # the HTML report shows every measure and BELIEF's reliability diagram: one (confidence,
    # rank == 1) pair per prompt ranked over the vocabulary (mode=auto's primary scale; the
    # candidate set's prompts are another scale), read here straight off the FACT edges
    from kgprobe.reports.html import render_html

    bp = pr.ScoreProps("gpt2", keys["belief"])
    edges = graph.read(f"MATCH ()-[f:FACT]->() WHERE f.`{bp.score}` IS NOT NULL "
                       f"RETURN f.`{bp.extra('ranks')}` AS ranks, f.`{bp.extra('confidences')}` AS confs, "
                       f"f.`{bp.extra('scale')}` AS scale")
    assert {e["scale"] for e in edges} <= {"vocab", "candidates"}
    want = sorted((float(c), int(k) == 1) for e in edges if e["scale"] == "vocab"
                  for k, c in zip(e["ranks"], e["confs"], strict=True))
    assert len(want) >= 1 and sorted(rep.calibration or []) == want
    page = render_html(rep)
    assert 'id="measures"' in page and "belief_random_n2" in page and "range" in page
    # the report's own measure is not repeated there with other intervals
    table = page.split('id="measures"', 1)[1].split("</table>", 1)[0]
    assert keys["kmin"] not in table and keys["kavg"] in table
    assert "reliability" in page and f"over {len(want)} prompts" in page


def test_values_do_not_depend_on_batch_size(world: tuple[Any, Any], engine: Any, gpt2: Path) -> None:
    graph, index = world
    names = ("kmin", "kavg", "probability", "precision_at_n", "belief", "info", "factor")
    out = []
    for bs, force in ((1, False), (16, True)):
        run_probe(graph, engine, _cfg(gpt2, measures=names, batch_facts=bs, force=force),
                  fingerprint=engine.fingerprint, index=index, progress=False)
        vals = {}
        for m in names:
            sp = pr.ScoreProps("gpt2", measure_key(m, "random", 2))
            vals[m] = {r["key"]: r["score"] for r in pr.measure_rows(graph, {"score": sp.score})}
        out.append(vals)
    # fp32 packing moves continuous values by ulps (the engine's own invariance tolerance);
    # the decisions (wins, hits, ranks) are identical
    for m in ("kmin", "kavg", "precision_at_n", "belief", "factor"):
        assert out[0][m] == out[1][m], m
    for m in ("probability", "info"):
        assert out[0][m].keys() == out[1][m].keys()
        for k, v in out[0][m].items():
            assert out[1][m][k] == pytest.approx(v, rel=1e-5, abs=1e-9), (m, k)
    assert all(len(v) == 11 for m, v in out[0].items() if m != "karr")


def test_a_different_model_under_the_same_name_never_overwrites(
    world: tuple[Any, Any], engine: Any, gpt2: Path, tmp_path: Path, tiny_model: TinyModel
) -> None:
    """Issue 10 #11: a different model file with the same name gets its own key."""
    import shutil

    from kgprobe.probing.engine import Engine
    from kgprobe.probing.models import load_model

    graph, index = world
    cfg = _cfg(gpt2, relations=("P36",))
    first = run_probe(graph, engine, cfg, fingerprint=engine.fingerprint, index=index, progress=False)
    assert first.model_key == "gpt2"
    before = {r["key"]: r["score"] for r in pr.measure_rows(
        graph, {"score": pr.ScoreProps("gpt2", "kmin_random_n2").score})}
    # the llama test model copied into a directory that is also named gpt2
    other_dir = tmp_path / "elsewhere" / "gpt2"
    shutil.copytree(tiny_model("llama"), other_dir)
    other = Engine(load_model(str(other_dir)))
    assert other.fingerprint != engine.fingerprint
    with pytest.raises(ConfigError, match="other weights"):
        run_probe(graph, other, _cfg(other_dir, relations=("P36",), on_model_mismatch="refuse"),
                  fingerprint=other.fingerprint, index=index, progress=False)
    second = run_probe(graph, other, _cfg(other_dir, relations=("P36",)),
                       fingerprint=other.fingerprint, index=index, progress=False)
    assert second.model_key == f"gpt2_{other.fingerprint[:8]}" and second.scored == 3
    after = {r["key"]: r["score"] for r in pr.measure_rows(
        graph, {"score": pr.ScoreProps("gpt2", "kmin_random_n2").score})}
    assert after == before  # the first model's scores untouched
    # the same weights again: the same suffixed key, nothing rescored
    third = run_probe(graph, other, _cfg(other_dir, relations=("P36",)),
                      fingerprint=other.fingerprint, index=index, progress=False)
    assert (third.model_key, third.scored, third.skipped) == (second.model_key, 0, 3)
    assert not math.isnan(sum(before.values()))


def _demo_aliases(qid: str) -> tuple[str, list[str]]:
    """An entity's English label and aliases from the packaged demo dump (real Wikidata)."""
    import gzip
    from importlib.resources import files

    with gzip.open(str(files("kgprobe") / "data" / "demo_graph.json.gz"), "rt") as fh:
        for e in json.load(fh):
            if e.get("id") == qid:
                return (e["labels"]["en"]["value"],
                        [a["value"] for a in e.get("aliases", {}).get("en", [])])
    raise AssertionError(f"{qid} not in the demo dump")


def test_label_rule_on_real_demo_aliases() -> None:
    """Issue 11 §3: flag emoji, two-letter codes and identifiers are not names."""
    from kgprobe.probing.measures.common import LabelRule

    label, aliases = _demo_aliases("Q986")
    assert label == "Eritrea" and {"er", "🇪🇷", "State of Eritrea"} <= set(aliases)
    e = LabelRule().entity(label, aliases, "Q986")
    assert e.labels() == ("Eritrea", "State of Eritrea", "Ertrā", "Iritriyā", "ERI", "IRI")
    label, aliases = _demo_aliases("Q20")  # Norway
    kept = LabelRule().entity(label, aliases).labels()
    assert kept == ("Norway", "Kingdom of Norway", "Norge", "Norvège\u200f", "NOR", "Noreg",
                    "Norwegen\u200f")
    assert set(LabelRule("all").entity(label, aliases).labels()) - set(kept) == {"NO", "no", "🇳🇴"}
    rule = LabelRule()
    assert not rule.keeps("Q42") and not rule.keeps("ISO3166-2:UA") and not rule.keeps("UA")
    assert rule.keeps("U.S.") and rule.keeps("Marie Curie") and rule.keeps("Saint-Étienne")
    with pytest.raises(ConfigError):
        LabelRule("bogus")  # type: ignore[arg-type]


def test_label_rule_keeps_codes_out_of_probe_requests(world: tuple[Any, Any], engine: Any,
                                                      gpt2: Path) -> None:
    """A subject alias that is a code never becomes a cloze sentence in a probe run; with
    --label-rule all it does, under its own key."""
    from distractor_world import FRANCE

    from kgprobe.graph.ingest import ingest
    from kgprobe.records import EntityRecord

    graph, index = world
    ingest(graph, [EntityRecord(FRANCE, "France", aliases=["FR", "🇫🇷", "French Republic"],
                                types=["Q6256"])])
    seen: list[str] = []

    class Recording:
        def run(self, requests: Any) -> Any:
            seen.extend(getattr(r, "context", "") for r in requests)
            return engine.run(requests)

    for rule in ("names", "all"):
        seen.clear()
        s = run_probe(graph, Recording(), _cfg(gpt2, relations=("P36",), label_rule=rule,
                                               max_subject_labels=5),
                      fingerprint=engine.fingerprint, index=index, progress=False)
        assert s.scored == 3
        ctxs = set(seen)
        assert "The capital of the French Republic is" in ctxs  # the careful verbalizer
        assert ("The capital of FR is" in ctxs) == (rule == "all")
        assert ("The capital of 🇫🇷 is" in ctxs) == (rule == "all")
    assert {r["measure_keys"][0] for r in pr.list_runs(graph)} == {
        "kmin_random_n2_s5", "kmin_random_n2_s5_lrall"}


def test_verbalizer_types_come_with_the_labels(world: tuple[Any, Any]) -> None:
    """FACT_DETAILS and ENTITY_LABELS return each entity's types (declared P31) in the same
    read as its labels: the verbalizer needs no query of its own."""
    from distractor_world import FRANCE, OBAMA, USA

    graph, _ = world
    [row] = pr.fact_details(graph, ["Q76$P27"], {"Q76$P27": OBAMA}, [])
    assert (row["s_label"], row["s_types"]) == ("Barack Obama", ["Q5"])
    assert (row["o_label"], row["o_types"]) == ("United States of America", ["Q6256"])
    rows = pr.entity_labels(graph, [USA, FRANCE, "Q90000010"])
    assert {q: r["types"] for q, r in rows.items()} == {USA: ["Q6256"], FRANCE: ["Q6256"],
                                                       "Q90000010": []}


def test_verbalizer_careful_and_raw_in_a_probe_run(world: tuple[Any, Any], engine: Any,
                                                   gpt2: Path) -> None:
    """Careful: "the" is in the continuation of the object that needs it and of no other
    candidate; raw: the labels as they are, under their own key."""
    from kgprobe.probing.requests import LogProbRequest

    graph, index = world
    seen: list[tuple[str, str]] = []

    class Recording:
        def run(self, requests: Any) -> Any:
            seen.extend((r.context, r.continuation) for r in requests if isinstance(r, LogProbRequest))
            return engine.run(requests)

    for verbalizer in ("careful", "raw"):
        seen.clear()
        s = run_probe(graph, Recording(), _cfg(gpt2, relations=("P27",), verbalizer=verbalizer),
                      fingerprint=engine.fingerprint, index=index, progress=False)
        assert s.scored >= 5
        obama = {cont for ctx, cont in seen if ctx == "Barack Obama is a citizen of"}
        if verbalizer == "careful":
            # careful rules v2: the initialism's own periods dropped before the sentence's
            # (docs/measures.md, "Sentence ends"): "the US.", as "Washington, DC."
            assert {" the United States of America.", " the USA.", " the US."} <= obama
            assert not any(c.startswith(" United") for c in obama)
            assert not any(c.startswith(" the") for c in obama - {
                " the United States of America.", " the USA.", " the US."})
        else:
            assert {" United States of America.", " USA.", " U.S.."} <= obama
            assert not any(c.startswith(" the") for c in obama)
    assert {r["measure_keys"][0] for r in pr.list_runs(graph)} == {
        "kmin_random_n2", "kmin_random_n2_vraw"}


def test_end_marker_is_selectable_and_recorded(world: tuple[Any, Any], engine: Any,
                                               gpt2: Path) -> None:
    """Issue 11 §3: Eq. 1's end marker is a run setting (auto/eos/tail/none), in the key and
    recorded on the ProbeRun; eos scores λ + the tokenizer's EOS."""
    from kgprobe.probing.requests import LogProbRequest

    graph, index = world
    seen: list[Any] = []

    class Recording:
        def run(self, requests: Any) -> Any:
            seen.extend(requests)
            return engine.run(requests)

    s = run_probe(graph, Recording(), _cfg(gpt2, relations=("P36",), end="eos"),
                  fingerprint=engine.fingerprint, index=index, progress=False)
    assert s.score_properties == ["score__gpt2__kmin_random_n2_eeos"]
    lps = [r for r in seen if isinstance(r, LogProbRequest)]
    assert lps and all(r.add_eos for r in lps)
    assert any(r.context == "The capital of France is" and r.continuation == " Paris" for r in lps)
    run = pr.get_run(graph, s.run_id)
    assert run is not None and json.loads(run["end_marker"]) == {"choice": "eos", "kind": "eos", "text": "."}
    default = run_probe(graph, engine, _cfg(gpt2, relations=("P36",)),
                        fingerprint=engine.fingerprint, index=index, progress=False)
    run = pr.get_run(graph, default.run_id)
    assert run is not None and json.loads(run["end_marker"])["kind"] == "tail"
    with pytest.raises(ConfigError, match="end"):
        _cfg(gpt2, end="bogus").validate()


def test_the_worked_example_of_the_docs_runs(world: tuple[Any, Any], engine: Any, gpt2: Path) -> None:
    """docs/measures.md's "adding a measure" example (the module of examples/kgprobe-top1, which
    the docs show as it is: tests/plugins/test_plugins.py), executed in-process: registered, probed,
    written onto the edges, in the report. tests/plugins/test_plugins.py installs it as a package."""
    from kgprobe.reports.build import build_report

    module = Path(__file__).resolve().parents[2] / "examples" / "kgprobe-top1" / "kgprobe_top1" / "__init__.py"
    graph, index = world
    try:
        exec(compile(module.read_text(encoding="utf-8"), str(module), "exec"), {"__name__": "kgprobe_top1"})  # noqa: S102
        assert "top1" in REGISTRY
        s = run_probe(graph, engine, _cfg(gpt2, measures=("top1",), relations=("P36",)),
                      fingerprint=engine.fingerprint, index=index, progress=False)
        assert s.score_properties == ["score__gpt2__top1"] and s.scored == 3
        rows = pr.measure_rows(graph, {"score": "score__gpt2__top1"})
        assert len(rows) == 3 and all(r["score"] in (0.0, 0.5, 1.0) for r in rows)  # 2 templates
        rep = build_report(graph, "gpt2").to_dict()
        assert any(r["measure"] == "top1" and r["score"]["n"] == 3 for r in rep["measures"])
    finally:
        REGISTRY.pop("top1", None)
