"""Probe runs on a real graph server with tiny real models: write-back, idempotence, resuming
after a kill, the unknown/compare queries, and the CLI's one-line errors."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from distractor_world import BUSH, CLINTON, OBAMA, TRUMP
from probe_world import REF, load
from tiny_models import TinyModel

from kgprobe.errors import ConfigError
from kgprobe.graph import probe_runs as pr
from kgprobe.probing.config import ProbeConfig, measure_key, model_key
from kgprobe.probing.run import run_probe
from kgprobe.probing.scores import compare_in, resolve_scores, unknown_in

torch.set_num_threads(1)

KEY = "score__gpt2__kmin_temp_sem_n2"


@pytest.fixture(scope="module")
def tiny_models(tiny_model: TinyModel) -> dict[str, Path]:
    return {kind: tiny_model(kind) for kind in ("gpt2", "llama")}


@pytest.fixture(scope="module")
def engines(tiny_models: dict[str, Path]) -> dict[str, Any]:
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.models import load_model

    return {k: Engine(load_model(str(p))) for k, p in tiny_models.items()}


@pytest.fixture()
def world(graph: Any, tmp_path: Path) -> tuple[Any, Any]:
    from kgprobe.probing.semantic import IndexSettings, ensure_index

    load(graph)
    return graph, ensure_index(graph, tmp_path / "index", IndexSettings(dim=8, seed=0))


def _config(model: Path, **kw: Any) -> ProbeConfig:
    base: dict[str, Any] = {"model": str(model), "sample": None, "n": 2, "at": REF, "batch_facts": 4}
    base.update(kw)
    return ProbeConfig(**base)


def _scores(graph: Any, prop: str = KEY) -> dict[str, dict[str, Any]]:
    sp = pr.ScoreProps.parse(prop)
    return {r["key"]: r for r in pr.report_rows(graph, sp)}


def test_property_names_are_validated() -> None:
    assert model_key("smollm2-135m") == "smollm2_135m"
    assert model_key("/x/My Model.gguf") == "my_model"
    assert model_key("smollm2-135m", "bfloat16") == "smollm2_135m_bf16"
    assert measure_key("kmin", "temp+sem", 5) == "kmin_temp_sem_n5"
    sp = pr.ScoreProps("m1", "kmin_temp_sem_n5")
    assert (sp.score, sp.run) == ("score__m1__kmin_temp_sem_n5", "run__m1__kmin_temp_sem_n5")
    for bad in ("a__b", "A", "a-b", "a b", "", "x" * 65, "a}`"):
        with pytest.raises(ConfigError):
            pr.ScoreProps(bad, "k")


def test_stratified_seeded_sample() -> None:
    avail = {"P1": 10, "P2": 1, "P3": 5}
    share = pr.allocate(avail, 9, seed=0)
    assert sum(share.values()) == 9 and share["P2"] == 1 and share["P1"] + share["P3"] == 8
    assert all(share[p] <= avail[p] for p in avail)
    assert pr.allocate(avail, 100, seed=0) == avail
    keys = {p: [f"{p}-{i}" for i in range(n)] for p, n in avail.items()}
    a = pr.sample_keys(keys, 7, seed=3)
    assert a == pr.sample_keys(keys, 7, seed=3) and len(a) == len(set(a)) == 7
    assert {k.split("-")[0] for k in a} == {"P1", "P2", "P3"}
    # adding a relation leaves another relation's own draw as it was (same share)
    b = pr.sample_keys({**keys, "P4": ["P4-0"]}, 8, seed=3)
    assert [k for k in a if k.startswith("P2")] == [k for k in b if k.startswith("P2")]
    # preferred keys (facts with a history) come first within their relation's share
    c = pr.sample_keys(keys, 7, seed=3, first={"P1": ["P1-7", "P1-8"], "P3": ["P3-1"]})
    assert {"P1-7", "P1-8", "P3-1"} <= set(c) and len(c) == 7
    assert pr.sample_keys(keys, 7, seed=3, first={"P1": ["P1-7", "P1-8"], "P3": ["P3-1"]}) == c


def test_history_keys(graph: Any) -> None:
    load(graph)
    p35 = pr.candidate_keys(graph, "P35", 20240601)
    assert len(p35) == 1  # Biden's term; Trump's second term starts later
    assert pr.history_keys(graph, "P35", 20240601) == p35
    assert pr.history_keys(graph, "P36", 20240601) == {}
    assert pr.history_keys(graph, "P35", 19990101) == {}  # Clinton, with nothing before him


def _pl(engine: Any, context: str, labels: list[str]) -> float:
    """Eq. (1) of the distractors paper by hand: log Σ_λ P(" λ." | c) (the tail '.' ends it)."""
    vals = [r.logprob for r in engine.score(context, [f" {lab}." for lab in labels])]
    top = max(vals)
    return top + math.log(sum(math.exp(v - top) for v in vals))


def test_probe_writes_scores_then_skips_them(world: tuple[Any, Any], engines: dict[str, Any],
                                             tiny_models: dict[str, Path]) -> None:
    graph, index = world
    eng = engines["gpt2"]
    cfg = _config(tiny_models["gpt2"])
    first = run_probe(graph, eng, cfg, fingerprint=eng.fingerprint, index=index, progress=False)
    # USA->Biden (P35), 3 capitals, 7 labelled citizenships; not ended, not future, not deprecated
    assert (first.planned, first.scored, first.unscorable, first.skipped) == (11, 11, 0, 0)
    assert first.relations == ["P27", "P35", "P36"]
    scores = _scores(graph)
    assert len(scores) == 11 and all(0.0 <= r["score"] <= 1.0 for r in scores.values())

    # the head-of-state fact, recomputed by hand from the model's log-probabilities
    ctxs = ["The head of state of United States of America is",
            "Who is the head of state of United States of America?"]
    true = [_pl(eng, c, ["Joe Biden"]) for c in ctxs]
    labels = {TRUMP: ["Donald Trump"], OBAMA: ["Barack Obama", "Obama"], BUSH: ["George W. Bush"],
              CLINTON: ["Bill Clinton"]}
    pl = {q: [_pl(eng, c, labs) for c in ctxs] for q, labs in labels.items()}
    kmin = sum(1.0 if true[i] > max(pl[TRUMP][i], pl[OBAMA][i]) else 0.0 for i in range(2)) / 2
    stale = sum(1.0 if max(v[i] for v in pl.values()) > true[i] else 0.0 for i in range(2)) / 2
    biden = next(r for r in scores.values() if r["pid"] == "P35")
    assert biden["score"] == pytest.approx(kmin, abs=1e-12)
    assert biden["stale"] == pytest.approx(stale, abs=1e-12)
    assert sum(1 for r in scores.values() if r["stale"] is not None) == 1  # only P35 has a past

    run = pr.get_run(graph, first.run_id)
    assert run is not None and run["status"] == "finished" and run["facts_scored"] == 11
    assert run["model_fingerprint"] == eng.fingerprint and run["strategy"] == "temp+sem"
    assert json.loads(run["templates"])["P35"] and json.loads(run["graph_snapshot"])["facts"] > 0
    assert run["code_version"] and run["finished"] >= run["started"]

    again = run_probe(graph, eng, cfg, fingerprint=eng.fingerprint, index=index, progress=False)
    assert (again.scored, again.skipped) == (0, 11)
    assert _scores(graph) == scores  # nothing rewritten: same values, same run ids
    assert {r["key"]: r["score"] for r in pr.unknown_facts(graph, pr.ScoreProps.parse(KEY), 2.0)} == {
        k: v["score"] for k, v in scores.items()
    }

    # another measure of the same run configuration: written beside, the first untouched
    third = run_probe(graph, eng, _config(tiny_models["gpt2"], measures=("kavg",)),
                      fingerprint=eng.fingerprint, index=index, progress=False)
    assert third.scored == 11
    assert _scores(graph) == scores
    avg = _scores(graph, "score__gpt2__kavg_temp_sem_n2")
    assert all(avg[k]["score"] >= scores[k]["score"] for k in scores)  # Avg@n >= Min@n


@pytest.mark.parametrize("strategy", ["temp+sem", "random"])
def test_scores_do_not_depend_on_batching_or_the_pipeline(
    world: tuple[Any, Any], engines: dict[str, Any], tiny_models: dict[str, Path], strategy: str,
) -> None:
    """One fact per batch on one thread (the per-fact loop), and batches of 3 or 8 gathered
    ahead and written behind in transactions of 2 or 256 facts: the same values on every fact,
    for measures that need distractors, past objects, other objects, other subjects and the
    object's other relations."""
    graph, index = world
    eng = engines["gpt2"]
    measures = ("kmin", "karr", "belief")

    def values(**kw: Any) -> dict[str, dict[str, Any]]:
        cfg = _config(tiny_models["gpt2"], strategy=strategy, measures=measures, force=True, **kw)
        s = run_probe(graph, eng, cfg, fingerprint=eng.fingerprint, index=index, progress=False)
        assert s.scored + s.unscorable == 11
        rows = graph.read("MATCH (:Entity)-[f:FACT]->(:Entity) RETURN f.key AS key, f {.*} AS p")
        return {r["key"]: {k: v for k, v in r["p"].items()
                           if k.startswith(("score__", "known__", "stale__", "cfg__"))} for r in rows}

    ref = values(batch_facts=1, write_facts=1, pipeline=0)
    assert sum(1 for p in ref.values() if p) == 11 and len(next(p for p in ref.values() if p)) >= 9
    for kw in ({"batch_facts": 3, "write_facts": 2, "pipeline": 1},
               {"batch_facts": 8, "write_facts": 256, "pipeline": 2}):
        got = values(**kw)
        assert got.keys() == ref.keys()
        for key, props in ref.items():
            assert got[key].keys() == props.keys()
            for name, v in props.items():
                if isinstance(v, float) or (isinstance(v, list) and all(isinstance(x, float) for x in v)):
                    # the engine packs other batches: the same scores up to float rounding
                    assert got[key][name] == pytest.approx(v, abs=1e-6), (key, name)
                else:
                    assert got[key][name] == v, (key, name)


def test_probe_bad_choices_give_one_line(world: tuple[Any, Any], engines: dict[str, Any],
                                         tiny_models: dict[str, Path]) -> None:
    graph, index = world
    eng = engines["gpt2"]
    with pytest.raises(ConfigError, match=r"unknown relation 'P999'.*P27, P35, P36"):
        run_probe(graph, eng, _config(tiny_models["gpt2"], relations=("P999",)),
                  fingerprint="x", index=index, progress=False)
    with pytest.raises(ConfigError, match="unknown measure bogus; choose from: kmin, kavg"):
        run_probe(graph, eng, _config(tiny_models["gpt2"], measures=("bogus",)),
                  fingerprint="x", index=index, progress=False)
    with pytest.raises(ConfigError, match="no probe run"):
        unknown_in(graph, "gpt2")


def test_unknown_and_compare_on_known_scores(graph: Any) -> None:
    """Scores written by hand through the write-back path; the queries must return exactly the
    facts below the threshold, and the disagreements."""
    load(graph)
    subjects = {k: s for p in ("P27", "P35", "P36") for k, s in pr.candidate_keys(graph, p, 20240601).items()}
    keys = list(subjects)
    assert len(keys) == 11
    a_scores = {k: (i % 4) / 4 for i, k in enumerate(keys)}  # 0, .25, .5, .75, 0, ...
    b_scores = {k: 1.0 - v for k, v in a_scores.items()}
    for name, scores in (("alpha", a_scores), ("beta", b_scores)):
        sp = pr.ScoreProps(name, "kmin_random_n3")
        run_id = f"run-{name}"
        pr.create_run(graph, run_id, {"model": name, "model_key": name, "measure_keys": [sp.measure_key],
                                      "threshold": 0.5, "status": "finished", "started": "t"})
        rows = [{"key": k, "s": subjects[k], "props": {sp.score: v, sp.run: run_id}} for k, v in scores.items()]
        pr.write_scores(graph, run_id, rows, scored=len(rows), unscorable=0, now="t")

    sc, facts = unknown_in(graph, "alpha")
    assert sc.props.measure_key == "kmin_random_n3" and sc.threshold == 0.5
    assert sorted(f.key for f in facts) == sorted(k for k, v in a_scores.items() if v < 0.5)
    assert [f.score for f in facts] == sorted(f.score for f in facts)  # lowest first
    assert all(f.subject_label and f.object_label and f.run == "run-alpha" for f in facts)
    _, p36 = unknown_in(graph, "alpha", relation="P36", below=0.3)
    p36_keys = set(pr.candidate_keys(graph, "P36", 20240601))
    assert {f.key for f in p36} == {k for k in p36_keys if a_scores[k] < 0.3}

    cmp = compare_in(graph, "alpha", "beta")
    assert {f.key for f in cmp.a_not_b} == {k for k, v in a_scores.items() if v >= 0.5 and b_scores[k] < 0.5}
    assert {f.key for f in cmp.b_not_a} == {k for k, v in a_scores.items() if v < 0.5 and b_scores[k] >= 0.5}
    assert cmp.counts["both_probed"] == 11
    assert cmp.counts["a_known"] == sum(v >= 0.5 for v in a_scores.values())

    with pytest.raises(ConfigError, match="probed models: alpha, beta"):
        resolve_scores(graph, "gamma")
    with pytest.raises(ConfigError, match="unknown relation 'P1'; relations with facts: P27, P35, P36, P999"):
        unknown_in(graph, "alpha", relation="P1")


def test_killed_probe_resumes_and_matches_an_uninterrupted_run(
    world: tuple[Any, Any], graph_settings: Any, tiny_models: dict[str, Path], engines: dict[str, Any],
    tmp_path: Path,
) -> None:
    """A separate process probing is SIGKILLed after two batches (pipelined: gathered ahead,
    each written in its own transaction behind the scoring); the same configuration run again
    scores only the rest, and the result equals an uninterrupted run."""
    graph, index = world
    s = graph_settings
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        import torch
        torch.set_num_threads(1)
        from kgprobe.config import Settings
        from kgprobe.graph.client import connect
        from kgprobe.probing.semantic import IndexSettings, ensure_index
        from kgprobe.probing.engine import Engine
        from kgprobe.probing.models import load_model
        from kgprobe.probing.run import ProbeConfig, run_probe
        s = Settings(uri={s.uri!r}, user={s.user!r}, password={s.password!r}, database={s.database!r},
                     home=Path({str(s.home)!r}), bolt_port={s.bolt_port}, http_port={s.http_port})
        g = connect(s)
        engine = Engine(load_model({str(tiny_models["gpt2"])!r}))
        class Slow:
            def run(self, requests):
                print("batch", flush=True)
                out = engine.run(requests)
                time.sleep(0.4)
                return out
        cfg = ProbeConfig(model={str(tiny_models["gpt2"])!r}, sample=None, n=2, at={REF!r}, batch_facts=1,
                          write_facts=1, pipeline=2)
        index = ensure_index(g, {str(tmp_path / "index")!r}, IndexSettings(dim=8, seed=0))
        run_probe(g, Slow(), cfg, fingerprint=engine.fingerprint, index=index, progress=False)
        print("done", flush=True)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    seen, deadline = 0, time.monotonic() + 120
    while seen < 3 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line.startswith("batch")
    # the writes run behind the scoring: kill once the first has landed (a slow first write,
    # e.g. Neo4j planning it on a loaded machine, may come after the third batch's scoring)
    while not _scores(graph) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = _scores(graph)
    assert 0 < len(partial) < 11, "the process was killed midway"
    killed = pr.list_runs(graph)
    assert len(killed) == 1 and killed[0]["status"] == "running"
    assert killed[0]["facts_scored"] == len(partial)  # counters written with their batch

    eng = engines["gpt2"]
    cfg = _config(tiny_models["gpt2"])
    resumed = run_probe(graph, eng, cfg, fingerprint=eng.fingerprint, index=index, progress=False)
    assert (resumed.skipped, resumed.scored) == (len(partial), 11 - len(partial))
    assert resumed.interrupted_runs == [killed[0]["id"]]
    assert pr.get_run(graph, killed[0]["id"])["status"] == "interrupted"
    after = _scores(graph)
    assert {k: after[k] for k in partial} == partial  # what was written stayed as written

    graph.write("MATCH (n) DETACH DELETE n")
    load(graph)
    run_probe(graph, eng, cfg, fingerprint=eng.fingerprint, index=index, progress=False)
    clean = _scores(graph)
    assert {k: (r["score"], r["stale"]) for k, r in after.items()} == {
        k: (r["score"], r["stale"]) for k, r in clean.items()
    }


def test_ctrl_c_in_a_pipelined_run_stops_its_threads_and_the_rerun_finishes(
    world: tuple[Any, Any], engines: dict[str, Any], tiny_models: dict[str, Path],
) -> None:
    """KeyboardInterrupt during the third batch's scoring: the run is marked interrupted, the
    gather and write threads end, what was committed stays, and the same configuration then
    scores exactly the rest."""
    import threading

    graph, index = world
    eng = engines["gpt2"]
    cfg = _config(tiny_models["gpt2"], batch_facts=2, write_facts=2, pipeline=2)

    class CtrlC:
        calls = 0

        def run(self, requests: Any) -> Any:
            self.calls += 1
            if self.calls == 3:
                raise KeyboardInterrupt
            return eng.run(requests)

    with pytest.raises(KeyboardInterrupt):
        run_probe(graph, CtrlC(), cfg, fingerprint=eng.fingerprint, index=index, progress=False)
    deadline = time.monotonic() + 15
    while any(t.name.startswith("kgprobe-") for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("kgprobe-")]
    (run,) = pr.list_runs(graph)
    done = _scores(graph)
    assert run["status"] == "interrupted" and run["facts_scored"] == len(done) <= 4
    rest = run_probe(graph, eng, cfg, fingerprint=eng.fingerprint, index=index, progress=False)
    assert (rest.skipped, rest.scored) == (len(done), 11 - len(done))
    assert len(_scores(graph)) == 11


def test_two_models_compare_end_to_end(world: tuple[Any, Any], engines: dict[str, Any],
                                       tiny_models: dict[str, Path]) -> None:
    graph, index = world
    for kind in ("gpt2", "llama"):
        eng = engines[kind]
        run_probe(graph, eng, _config(tiny_models[kind], strategy="random"),
                  fingerprint=eng.fingerprint, index=index, progress=False)
    a = _scores(graph, "score__gpt2__kmin_random_n2")
    b = _scores(graph, "score__llama__kmin_random_n2")
    cmp = compare_in(graph, "gpt2", "llama")
    assert {f.key for f in cmp.a_not_b} == {k for k in a if a[k]["score"] >= 0.5 > b[k]["score"]}
    assert {f.key for f in cmp.b_not_a} == {k for k in a if b[k]["score"] >= 0.5 > a[k]["score"]}
    assert cmp.counts["both_probed"] == len(a) == len(b) == 11


def test_cli_errors_are_one_line(world: tuple[Any, Any], kgprobe_env: dict[str, str]) -> None:
    exe = str(Path(sys.executable).parent / "kgprobe")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([exe, *args], capture_output=True, text=True, env=kgprobe_env, timeout=120)

    r = run("probe", "--measure", "bogus")
    assert r.returncode == 2 and "unknown measure bogus; choose from: kmin, kavg" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = run("probe", "--model", "no-such-model", "--relations", "P35")
    assert r.returncode == 2 and "unknown model 'no-such-model'; choose from: smollm2-135m" in r.stderr
    r = run("probe", "--relations", "P4242")
    assert r.returncode == 2 and "relations with facts and templates: P27, P35, P36" in r.stderr
    r = run("unknown", "--model", "nobody")
    assert r.returncode == 2 and "no probe run in the graph yet" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_graph_lost_mid_run_stops_with_a_clear_message_and_resumes(
    tmp_path: Path, engines: dict[str, Any], tiny_models: dict[str, Path]
) -> None:
    """A server of its own, stopped for real between two batches: the run stops with one clear
    line, and after a restart the same configuration scores only what is missing."""
    if os.environ.get("NEO4J_URI"):
        pytest.skip("needs the managed server, which the test can stop and start")
    from kgprobe.config import Settings
    from kgprobe.errors import GraphUnavailable
    from kgprobe.graph.client import connect
    from kgprobe.graph.server import ManagedServer, free_port

    settings = Settings(home=tmp_path / "home", bolt_port=free_port(), http_port=free_port(), heap="512m")
    server = ManagedServer(settings)
    server.start()
    eng = engines["gpt2"]
    cfg = _config(tiny_models["gpt2"], strategy="random", batch_facts=3, write_facts=3)

    class StopsTheServer:
        calls = 0

        def run(self, requests: Any) -> Any:
            self.calls += 1
            if self.calls == 2:
                # the first batch is written behind the scoring: let it land, then pull the plug
                deadline = time.monotonic() + 60
                while len(_scores(g, "score__gpt2__kmin_random_n2")) < 3 and time.monotonic() < deadline:
                    time.sleep(0.05)
                server.stop()
            return eng.run(requests)

    try:
        g = connect(settings)
        load(g)
        with pytest.raises(GraphUnavailable, match="run the same command again to score the rest"):
            run_probe(g, StopsTheServer(), cfg, fingerprint=eng.fingerprint, progress=False)
        g.close()
        server.start()
        g = connect(settings)
        done = _scores(g, "score__gpt2__kmin_random_n2")
        assert len(done) == 3  # the first batch, written before the server went away
        rest = run_probe(g, eng, cfg, fingerprint=eng.fingerprint, progress=False)
        assert (rest.skipped, rest.scored) == (3, 8)
        assert len(rest.interrupted_runs) == 1
        g.close()
    finally:
        server.stop()
