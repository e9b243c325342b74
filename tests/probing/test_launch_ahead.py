"""Two-phase scoring (issue 43): on a GPU the engine launches a chunk, and the probe loop its next
batch, before it reads the one before, so the host tokenizes, plans and writes while the device
computes. On the CPU a launch computes, so it is off there by default; these tests turn it on
(``Engine.ahead``) and check, with a real tiny model, what it must keep: the same engine runs in
the same order with the same cache contents (hence the same values, bit for bit), and the order
that gives the overlap (launch k+1, then read or write k)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from probe_world import REF, load
from tiny_models import TinyModel

from kgprobe.probing import loop
from kgprobe.probing.cache import ScoreCache
from kgprobe.probing.config import ProbeConfig
from kgprobe.probing.engine import Engine, Submitted
from kgprobe.probing.measures.common import Runner
from kgprobe.probing.measures.registry import (
    REGISTRY,
    FactInput,
    Measure,
    RunContext,
    Values,
    register,
)
from kgprobe.probing.models import LoadedModel, load_model
from kgprobe.probing.requests import LogProbRequest, NextTokenRequest, NextTokenResult, Request
from kgprobe.probing.run import run_probe

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def gpt2(tiny_model: TinyModel) -> LoadedModel:
    return load_model(str(tiny_model("gpt2")), device="cpu")


def _requests() -> list[Request]:
    words = ["Paris", "London", "Rome", "Berlin", "Madrid", "Lyon", "city", "world"]
    out: list[Request] = [LogProbRequest(f"The capital of {a} is", f" {b}")
                          for a in words for b in words]
    out += [NextTokenRequest(f"{a} is the", None) for a in words[:4]]
    return out


def _same(a: Sequence[Any], b: Sequence[Any]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        if isinstance(x, NextTokenResult):
            assert isinstance(y, NextTokenResult) and x.full_logprobs is not None
            assert (x.full_logprobs == y.full_logprobs).all() and x.token_ids == y.token_ids
        else:
            assert x == y


class _Trace(ScoreCache):
    """A real SQLite cache that also notes each chunk it stores, beside the forwards."""

    def __init__(self, path: Path, trace: list[str]) -> None:
        super().__init__(path)
        self.trace = trace

    def put_many(self, fingerprint: str, items: Any) -> None:
        items = list(items)
        self.trace.append(f"store {len(items)}")
        super().put_many(fingerprint, items)


def test_chunks_launched_ahead_give_the_values_and_cache_of_one_after_the_other(
    gpt2: LoadedModel, tmp_path: Path
) -> None:
    """A run of four chunks: launched ahead, chunk c+1's rows run before chunk c is read and
    stored; every value (fp32: ==), every counter and what the cache holds are those of the
    chunks run one after the other."""
    reqs = _requests()
    seen: dict[bool, tuple[list[int], list[int], Any, Engine]] = {}
    for ahead in (False, True):
        trace: list[str] = []
        engine = Engine(gpt2, chunk_size=20, batch_tokens=48,
                        cache=_Trace(tmp_path / f"c{ahead}.sqlite", trace))
        engine.ahead = ahead
        assert engine.launches_ahead is ahead
        assert engine.causal is not None
        engine.causal.packing_works()  # its own check forwards stay out of the trace
        # the rows' forwards run the base model (the head runs on the read positions alone)
        hook = gpt2.model.base_model.register_forward_hook(
            lambda *a, t=trace: t.append("forward"))  # type: ignore[misc]
        try:
            trace.clear()
            got = engine.run(reqs)
        finally:
            hook.remove()
        stores = [i for i, t in enumerate(trace) if t.startswith("store")]
        sizes = [int(trace[i].split()[1]) for i in stores]
        # forwards before the first store, then between each store and the next
        rows = [trace[a + 1 if k else 0 : b].count("forward")
                for k, (a, b) in enumerate(zip([0, *stores], stores, strict=False))]
        seen[ahead] = (sizes, rows, got, engine)
    (sizes0, rows0, got0, seq), (sizes1, rows1, got1, fast) = seen[False], seen[True]
    assert sizes0 == sizes1 == [20, 20, 20, 8]
    assert all(r > 0 for r in rows0)  # one after the other: each chunk's rows, then its store
    # ahead: chunk 0's and chunk 1's rows before chunk 0's store, then one chunk's per store
    assert rows1 == [rows0[0] + rows0[1], rows0[2], rows0[3], 0]
    _same(got1, got0)
    assert (fast.stats.computed, fast.stats.forward_calls) == (seq.stats.computed, seq.stats.forward_calls)
    again = Engine(gpt2, chunk_size=20, cache=fast.cache)
    _same(again.run(reqs), got0)  # what was stored is what was returned
    # every log-prob from the cache (whole next-token distributions are never cached)
    assert again.stats.cache_hits == sum(isinstance(r, LogProbRequest) for r in set(reqs)) == 64


def test_a_second_submit_does_not_wait_for_the_first_and_computes_what_one_after_the_other_would(
    gpt2: LoadedModel, tmp_path: Path
) -> None:
    """``submit`` then ``result``: the values of ``run``. A second ``submit`` before the first
    is read does not read it (the device takes the second run right after the first). With a
    cache, the 10 requests both share are not launched again but taken from the first run, and
    counted as the cache hits one run after the other gives; without one, both compute them,
    as one after the other does. ``result`` gives the same list every time."""
    reqs = _requests()
    a, b = reqs[:40], reqs[30:]  # 10 requests in both
    for cached in (True, False):
        caches = [ScoreCache(tmp_path / f"{n}{cached}.sqlite") if cached else None for n in ("seq", "two")]
        seq = Engine(gpt2, cache=caches[0])
        want_a, want_b = seq.run(a), seq.run(b)
        engine = Engine(gpt2, cache=caches[1])
        engine.ahead = True
        first = engine.submit(a)
        assert isinstance(first, Submitted) and not first.done
        second = engine.submit(b)
        assert not first.done  # not waited for by the second submit
        assert len(second.computes) == (len(set(b)) - 10 if cached else len(set(b)))
        _same(second.result(), want_b)
        assert first.done == cached  # read by the second's result, for the requests it took
        _same(first.result(), want_a)
        assert first.result() is first.result()
        assert (engine.stats.cache_hits, engine.stats.computed) == (seq.stats.cache_hits,
                                                                    seq.stats.computed)
        assert engine.stats.cache_hits == (10 if cached else 0)
        third = engine.submit(a[:5])
        engine.run(b[:2])  # a run reads every run in flight first, oldest first
        assert third.done and engine._in_flight == []


def test_errors_of_a_submitted_run_reach_the_caller(gpt2: LoadedModel) -> None:
    """An error at the launch (too long a context) is raised by ``submit`` and the engine goes
    on; an error while reading is raised by every ``result()``, not only the first."""
    from kgprobe.errors import ConfigError
    from kgprobe.probing.tokenization import ContextTooLong

    engine = Engine(gpt2)
    engine.ahead = True
    with pytest.raises(ContextTooLong):
        engine.submit([LogProbRequest(" ".join(["Paris"] * 200), " London")])
    ok = engine.submit(_requests()[:3])
    assert len(ok.result()) == 3
    calls = []

    def failing() -> list[Any]:
        calls.append(1)
        raise ConfigError("the device went away")

    bad = Submitted(failing)
    for _ in range(2):
        with pytest.raises(ConfigError, match="went away"):
            bad.result()
    assert calls == [1] and bad.done


class OneRound(Measure):
    """TwoRounds's first round alone, said to be one (``later_rounds`` False, as kmin): a
    request every batch shares, so that a batch launched ahead takes it from the one before."""

    name = "oneround"
    section = "test"
    summary = "one round of log-probs"
    later_rounds = False

    def score(self, runner: Runner, facts: Sequence[FactInput], ctx: RunContext) -> list[Values]:
        got = runner.run([LogProbRequest(f"{f.subject.label} is", f" {f.object.label}")
                          for f in facts] + [LogProbRequest("The city", " is")])
        return [{"score": float(x.logprob - got[-1].logprob)}  # type: ignore[attr-defined]
                for x in got[:-1]]


class TwoRounds(Measure):
    """A measure with a later round, as BELIEF has one: the first round scores each fact's
    object after its subject, and one request every batch shares; the later round scores the
    object after a phrase of its own (shared between facts with the same object, so between
    batches: the cache answers it)."""

    name = "tworounds"
    section = "test"
    summary = "two rounds of log-probs"

    def score(self, runner: Runner, facts: Sequence[FactInput], ctx: RunContext) -> list[Values]:
        first = runner.run([LogProbRequest(f"{f.subject.label} is", f" {f.object.label}")
                            for f in facts] + [LogProbRequest("The city", " is")])
        later = runner.run([LogProbRequest("It is", f" {f.object.label}") for f in facts])
        return [{"score": float(x.logprob - y.logprob)}  # type: ignore[attr-defined]
                for x, y in zip(first, later, strict=False)]


def _fact_scores(graph: Any, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    rows = graph.read("MATCH ()-[f:FACT]->() WHERE f.key IN $keys RETURN f.key AS key, "
                      "properties(f) AS p", keys=list(keys))
    return {r["key"]: {k: v for k, v in r["p"].items()
                       if k.startswith(("score__", "known__"))} for r in rows}


def test_a_probe_launched_ahead_runs_the_engine_as_one_batch_after_the_other(
    graph: Any, gpt2: LoadedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe of 4-fact batches with a measure that has a later round and a distractor
    measure, engines with a cache: launched ahead, the engine sees the same runs, in the same
    order, as batch after batch (so every value is the same, ==), and batch k+1 is launched
    before batch k's values are written (the host writes while the device scores)."""
    load(graph)
    calls: list[tuple[str, tuple[Request, ...]]] = []
    trace: list[str] = []
    run, submit = Engine.run, Engine.submit

    def spy_run(self: Engine, requests: Sequence[Request]) -> Any:
        calls.append(("run", tuple(requests)))
        trace.append("run")
        return run(self, requests)

    def spy_submit(self: Engine, requests: Sequence[Request]) -> Any:
        calls.append(("run", tuple(requests)))  # the same run, launched in two phases
        trace.append("submit")
        return submit(self, requests)

    props = loop._fact_props

    def spy_props(*a: Any) -> Any:
        trace.append("write")
        return props(*a)

    monkeypatch.setattr(Engine, "run", spy_run)
    monkeypatch.setattr(Engine, "submit", spy_submit)
    monkeypatch.setattr(loop, "_fact_props", spy_props)
    register(TwoRounds)
    seen: dict[bool, Any] = {}
    try:
        for ahead in (False, True):
            calls.clear()
            trace.clear()
            engine = Engine(gpt2, cache=ScoreCache(tmp_path / f"cache{ahead}.sqlite"))
            engine.ahead = ahead
            cfg = ProbeConfig(model="gpt2", sample=None, n=2, at=REF, batch_facts=4,
                              strategy="random", measures=("tworounds", "kmin"), force=True)
            s = run_probe(graph, engine, cfg, fingerprint=engine.fingerprint, progress=False)
            seen[ahead] = (list(calls), list(trace), _fact_scores(graph, s.fact_keys), s.scored)
    finally:
        REGISTRY.pop("tworounds", None)
    (calls0, trace0, scores0, n0), (calls1, trace1, scores1, n1) = seen[False], seen[True]
    assert n0 == n1 >= 8 and scores0 == scores1
    assert any(v is not None for p in scores1.values() for v in p.values())
    later = [c for c in calls1 if c[1] and all(isinstance(r, LogProbRequest) and r.context == "It is"
                                                for r in c[1])]
    assert len(later) >= 2  # the later rounds ran, in more than one batch
    assert calls1 == calls0  # the same engine runs, in the same order
    # one after the other: each batch's first round run, its later round, its writes; ahead:
    # batch k+1 submitted after batch k's later round and before batch k's writes (a batch's
    # writes are squeezed into one "write")
    def squeezed(trace: list[str]) -> list[str]:
        return [t for i, t in enumerate(trace) if t != "write" or trace[i - 1] != "write"]

    batches = trace1.count("submit")
    assert batches >= 3 and "submit" not in trace0
    assert squeezed(trace0) == ["run", "run", "write"] * batches
    assert squeezed(trace1) == ["submit"] + ["run", "submit", "write"] * (batches - 1) + ["run", "write"]
    assert trace1.count("write") == trace0.count("write")


def _probe_traced(graph: Any, engine: Engine, measures: tuple[str, ...],
                  monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[Request, ...]], list[str], Any]:
    """A probe of 3-fact batches, with the engine runs it makes (``submit`` noted as the run it
    is) and the order of runs, submits and batch value reads."""
    calls: list[tuple[Request, ...]] = []
    trace: list[str] = []
    run, submit, values = Engine.run, Engine.submit, loop.BatchScoring.values

    def spy_run(self: Engine, requests: Sequence[Request]) -> Any:
        calls.append(tuple(requests))
        trace.append("run")
        return run(self, requests)

    def spy_submit(self: Engine, requests: Sequence[Request]) -> Any:
        calls.append(tuple(requests))
        trace.append("submit")
        return submit(self, requests)

    def spy_values(self: Any, runner: Any) -> Any:
        trace.append("values")
        return values(self, runner)

    with monkeypatch.context() as m:
        m.setattr(Engine, "run", spy_run)
        m.setattr(Engine, "submit", spy_submit)
        m.setattr(loop.BatchScoring, "values", spy_values)
        cfg = ProbeConfig(model="gpt2", sample=None, n=2, at=REF, batch_facts=3,
                          strategy="random", measures=measures, force=True)
        s = run_probe(graph, engine, cfg, fingerprint=engine.fingerprint, progress=False)
    return calls, trace, s


def test_without_a_later_round_batch_k_plus_1_is_launched_before_batch_k_is_read(
    graph: Any, gpt2: LoadedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With measures of one engine run each (kmin, and a test measure whose batches share a
    request: ``later_rounds`` False), launched ahead, batch k+1 is submitted before batch k's
    values are read, so the device takes it right after batch k while the host reads and
    writes batch k. The engine still computes what batch after batch computes: the same runs
    in the same order, the same counters, the same values (==) and, with a cache, the same
    values stored (the request every batch shares is taken from the batch in flight)."""
    load(graph)
    register(OneRound)
    try:
        for cached in (True, False):
            seen = {}
            for ahead in (False, True):
                cache = ScoreCache(tmp_path / f"c{cached}{ahead}.sqlite") if cached else None
                engine = Engine(gpt2, cache=cache)
                engine.ahead = ahead
                calls, trace, s = _probe_traced(graph, engine, ("oneround", "kmin"), monkeypatch)
                held = Engine(gpt2, cache=cache).run([r for c in calls for r in c]) if cache else []
                seen[ahead] = (calls, trace, _fact_scores(graph, s.fact_keys), s.scored,
                               (engine.stats.cache_hits, engine.stats.computed), held)
            (calls0, trace0, scores0, n0, stats0, held0) = seen[False]
            (calls1, trace1, scores1, n1, stats1, held1) = seen[True]
            assert n0 == n1 >= 8 and scores0 == scores1 and stats0 == stats1
            assert any(v is not None for p in scores1.values() for v in p.values())
            assert calls1 == calls0  # the same engine runs, in the same order
            _same(held1, held0)  # the same values stored
            assert (stats1[0] >= len(calls1) - 1) == cached  # the shared request: a hit per batch
            batches = trace1.count("submit")
            assert batches >= 3 and trace0 == ["run", "values"] * batches
            assert trace1 == ["submit"] + ["submit", "values"] * (batches - 1) + ["values"]
    finally:
        REGISTRY.pop("oneround", None)


def test_measures_that_say_they_have_no_later_round_run_the_engine_once(tiny_model: TinyModel) -> None:
    """What a built-in measure says of itself (``later_rounds`` False) holds: on the shipped
    demo set's facts its ``score`` calls the runner once; TwoRounds, which has a later round,
    calls it twice (so the count can see one)."""
    import json

    from kgprobe.probing.config import run_context
    from kgprobe.probing.probe_set import fact_input, read_set

    pset = read_set("demo")
    facts = [fact_input(json.loads(r["fact"])) for r in pset.rows[:8]]
    ctx = run_context(pset.config("gpt2", "float32", None), "gpt2")
    # FACTOR's whole sentences need more than the 64 positions of the module's tiny model
    engine = Engine(load_model(str(tiny_model("gpt2", positions=256)), device="cpu"))

    class Counting:
        def __init__(self) -> None:
            self.calls = 0

        def run(self, requests: Sequence[Request]) -> list[Any]:
            self.calls += 1
            return engine.run(requests)

    single = sorted(n for n, cls in REGISTRY.items() if not cls.later_rounds)
    assert {"kmin", "kavg", "probability", "precision_at_n", "factor"} <= set(single)
    for name in [*single, "tworounds"]:
        if name == "tworounds":
            register(TwoRounds)
        try:
            counting = Counting()
            REGISTRY[name]().score(counting, facts, ctx)
        finally:
            if name == "tworounds":
                REGISTRY.pop("tworounds", None)
        assert counting.calls == (2 if name == "tworounds" else 1), name


def test_a_wrapper_that_forwards_is_called_through_its_own_run(gpt2: LoadedModel) -> None:
    """A runner that wraps the engine, defines ``run`` and forwards the rest (as a user's
    recording wrapper does) is not launched ahead: ``submit`` would pass its ``run`` by."""

    class Wrapper:
        def __init__(self, engine: Engine) -> None:
            self.engine = engine

        def __getattr__(self, name: str) -> Any:
            return getattr(self.engine, name)

        def run(self, requests: Sequence[Request]) -> list[Any]:
            return self.engine.run(requests)

    class Own(Wrapper):
        def submit(self, requests: Sequence[Request]) -> Submitted:
            return self.engine.submit(requests)

    engine = Engine(gpt2)
    engine.ahead = True
    assert loop.launches_ahead(engine) and not loop.launches_ahead(Wrapper(engine))
    assert loop.launches_ahead(Own(engine))
    engine.ahead = False
    assert not loop.launches_ahead(engine) and not loop.launches_ahead(Own(engine))


def test_a_chunk_that_fails_to_launch_leaves_the_chunks_before_it_stored(
    gpt2: LoadedModel, tmp_path: Path
) -> None:
    """Launched ahead, chunk 1 is still unread when chunk 2 fails to launch (too long a
    context): the run raises that error and both earlier chunks are in the cache, as one after
    the other leaves them (a killed run resumes from there)."""
    from kgprobe.probing.tokenization import ContextTooLong

    good = [r for r in _requests() if isinstance(r, LogProbRequest)][:40]
    bad = LogProbRequest(" ".join(["Paris"] * 200), " London")
    engine = Engine(gpt2, chunk_size=20, cache=ScoreCache(tmp_path / "c.sqlite"))
    engine.ahead = True
    with pytest.raises(ContextTooLong):
        engine.run([*good, bad])
    again = Engine(gpt2, chunk_size=20, cache=engine.cache)
    again.run(good)
    assert again.stats.cache_hits == 40 and again.stats.computed == 0
