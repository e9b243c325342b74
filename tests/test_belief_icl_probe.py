"""BELIEF-ICL as an option of the ``belief`` measure (issue 11 §2): ``--measure
belief:icl=…,style=…`` through ``run_probe`` on the tiny GPT-2 and the probe world, checked
against prompts written out by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _scoring_models import build
from probe_world import REF, load

from kgprobe.errors import ConfigError
from kgprobe.graph import probe_runs as pr
from kgprobe.probing.requests import GenerateRequest
from kgprobe.probing.run import ProbeConfig, measure_key, run_probe


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 4-shot prompts need more than the default 64 positions
    return build("gpt2", tmp_path_factory.mktemp("icl-models") / "gpt2", positions=256)


@pytest.fixture(scope="module")
def engine(gpt2: Path) -> Any:
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.models import load_model

    return Engine(load_model(str(gpt2)))


def _cfg(model: Path, **kw: Any) -> ProbeConfig:
    base: dict[str, Any] = {"model": str(model), "sample": None, "n": 2, "at": REF,
                            "batch_facts": 2, "strategy": "random"}
    base.update(kw)
    return ProbeConfig(**base)


def test_icl_options_are_in_the_key() -> None:
    assert measure_key("belief", "random", 2) == "belief_random_n2"
    assert measure_key("belief:icl=relation", "random", 2) == "belief_random_n2_iclrelation"
    assert measure_key("belief:icl=zero,style=qa", "random", 2) == "belief_random_n2_iclzero_stqa"
    assert (measure_key("belief:icl=template,samples=5", "random", 2)
            == "belief_random_n2_icltemplate_smp5")
    with pytest.raises(ConfigError, match="BELIEF-ICL"):
        measure_key("belief:style=qa", "random", 2)
    with pytest.raises(ConfigError, match="choose from"):
        measure_key("belief:icl=8-shot", "random", 2)


def _rows(graph: Any, key: str) -> dict[str, dict[str, Any]]:
    sp = pr.ScoreProps("gpt2", key)
    rows = pr.measure_rows(graph, {"score": sp.score, "ranks": sp.extra("ranks"),
                                   "confidences": sp.extra("confidences")})
    return {r["key"]: r for r in rows}


def test_four_relation_mp_prompts_and_values(graph: Any, engine: Any, gpt2: Path) -> None:
    load(graph)
    seen: list[GenerateRequest] = []

    class Recording:
        def run(self, requests: Any) -> Any:
            seen.extend(r for r in requests if isinstance(r, GenerateRequest))
            return engine.run(requests)

    spec = "belief:icl=relation,samples=2,max_new_tokens=3"
    s = run_probe(graph, Recording(), _cfg(gpt2, measures=(spec,), relations=("P36",)),
                  fingerprint=engine.fingerprint, progress=False)
    key = "belief_random_n2_iclrelation_smp2_t3"
    assert s.score_properties == [f"score__gpt2__{key}"]
    assert s.scored == 3
    # France's prompt, by hand: the instruction, the two other capitals of P36 (in a seeded
    # order), then France
    france = [r.context for r in seen if r.temperature == 0.0
              and r.context.endswith("of France is [MASK].\nA:")]
    assert len(france) == 1
    lines = france[0].split("\n")
    assert lines[0] == "Predict the [MASK] in each sentence in one word."
    assert lines[-2:] == ["Q: The capital of France is [MASK].", "A:"]
    demos = {(lines[i], lines[i + 1]) for i in range(1, len(lines) - 2, 2)}
    assert len(lines) == 7 and demos == {
        ("Q: The capital of United States of America is [MASK].", "A: Washington, D.C.."),
        ("Q: The capital of Germany is [MASK].", "A: Berlin."),
    }
    # the stored rank: the greedy answer the model gives to that hand-checked prompt, run here
    # directly on the engine, contains "Paris" (rank 1) or not (rank 2)
    greedy = engine.run([GenerateRequest(france[0], 3, 0.0, 1.0, 0, ("\n",))])[0].text
    rows = _rows(graph, key)
    assert len(rows) == 3
    fr = next(r for k, r in rows.items() if k.startswith("Q142"))
    assert fr["ranks"] == [1 if "paris" in greedy.lower() else 2]
    assert fr["score"] == (1.0 if fr["ranks"] == [1] else 0.0)
    assert len(fr["confidences"]) == 1 and fr["confidences"][0] in (0.0, 0.5, 1.0)
    # the zero-shot rank-based default is a different property, untouched
    assert not _rows(graph, "belief_random_n2")
    # per relation: Acc@1 over the stored ranks (only K = 1 for ICL), no MRR
    from kgprobe.probing.measures.registry import relation_aggregates

    [agg] = [a for a in relation_aggregates(graph, "gpt2") if a["measure_key"] == key]
    ranks = [r["ranks"][0] for r in rows.values()]
    assert agg["pid"] == "P36" and "mrr" not in agg and "acc@10" not in agg
    assert agg["acc@1"]["mean"] == pytest.approx(sum(r == 1 for r in ranks) / 3)


def test_qa_style_zero_shot_prompt(graph: Any, engine: Any, gpt2: Path) -> None:
    load(graph)
    seen: list[GenerateRequest] = []

    class Recording:
        def run(self, requests: Any) -> Any:
            seen.extend(r for r in requests if isinstance(r, GenerateRequest))
            return engine.run(requests)

    s = run_probe(graph, Recording(),
                  _cfg(gpt2, measures=("belief:icl=zero,style=qa,samples=2,max_new_tokens=3",),
                       relations=("P35",)),
                  fingerprint=engine.fingerprint, progress=False)
    assert s.score_properties == ["score__gpt2__belief_random_n2_iclzero_stqa_smp2_t3"]
    prompts = {r.context for r in seen}
    # only the question template makes a QA prompt
    assert prompts == {"Answer each question in one word.\n"
                       "Q: Who is the head of state of United States of America?\nA:"}
    rows = _rows(graph, "belief_random_n2_iclzero_stqa_smp2_t3")
    assert rows and all(r["ranks"] in ([1], [2]) for r in rows.values())


def test_icl_values_do_not_depend_on_batch_size(graph: Any, engine: Any, gpt2: Path) -> None:
    """The demonstration pool comes from the graph, not the batch, and demonstrations are
    seeded by the probe itself."""
    load(graph)
    spec = "belief:icl=relation,samples=2,max_new_tokens=3"
    got, prompts = [], []
    for bs, force in ((1, False), (3, True)):
        seen: set[str] = set()

        class Recording:
            def run(self, requests: Any, seen: set[str] = seen) -> Any:
                seen.update(r.context for r in requests if isinstance(r, GenerateRequest))
                return engine.run(requests)

        run_probe(graph, Recording(), _cfg(gpt2, measures=(spec,), relations=("P36",),
                                           batch_facts=bs, force=force),
                  fingerprint=engine.fingerprint, progress=False)
        rows = _rows(graph, "belief_random_n2_iclrelation_smp2_t3")
        got.append({k: (r["ranks"], r["confidences"]) for k, r in rows.items()})
        prompts.append(seen)
    assert len(got[0]) == 3 and got[0] == got[1]
    assert len(prompts[0]) == 3 and prompts[0] == prompts[1]


class _CypherLog:
    """The real graph, with every Cypher text it is sent recorded (the queries still run on
    the test server: nothing is answered here)."""

    def __init__(self, graph: Any) -> None:
        self._graph = graph
        self.cypher: list[str] = []

    def read(self, cypher: str, **params: Any) -> Any:
        self.cypher.append(cypher)
        return self._graph.read(cypher, **params)

    def write(self, cypher: str, **params: Any) -> Any:
        self.cypher.append(cypher)
        return self._graph.write(cypher, **params)

    def write_many(self, statements: Any) -> Any:
        self.cypher.extend(c for c, _ in statements)
        return self._graph.write_many(statements)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._graph, name)


def test_icl_needs_follow_the_parameters() -> None:
    from kgprobe.probing.measures.registry import create

    assert create("belief").needs == {"templates", "distractors", "other_objects"}
    assert create("belief", {"mode": "vocab"}).needs == {"templates", "distractors", "other_objects"}
    assert create("belief", {"icl": "zero"}).needs == {"templates"}
    for icl in ("random", "relation", "template"):
        for style in ("mp", "qa"):
            assert create("belief", {"icl": icl, "style": style}).needs == {
                "templates", "demonstrations"}


def test_icl_fetches_no_distractor_and_keeps_its_values(graph: Any, engine: Any,
                                                        gpt2: Path) -> None:
    """BELIEF-ICL reads no distractor: no fact-context, typed-candidate or temporal query
    reaches the graph and the facts carry none; its values equal those of a run where the
    distractors are fetched (for kmin beside it)."""
    from kgprobe.graph import distractors as gd

    load(graph)
    distractor_cypher = {gd.FACT_CONTEXT, gd.TRUE_OBJECTS, gd.TYPED_CANDIDATES,
                         gd.TYPED_CANDIDATES_LIMITED, gd.OMEGA_CHECK, gd.TEMPORAL_CANDIDATES,
                         gd.TYPED_IDS}
    spec = "belief:icl=relation,samples=2,max_new_tokens=3"
    key = "belief_random_n2_iclrelation_smp2_t3"
    got = []
    for measures, force in (((spec,), False), (("kmin", spec), True)):
        log = _CypherLog(graph)
        plans: list[Any] = []
        run_probe(log, engine, _cfg(gpt2, measures=measures, relations=("P36",), force=force),
                  fingerprint=engine.fingerprint, progress=False,
                  on_fact=lambda p, _v, plans=plans: plans.append(p))
        assert len(plans) == 3
        fetched = [c for c in log.cypher if c in distractor_cypher]
        if measures == (spec,):
            assert fetched == []
            assert all(p.fact.distractors == () and p.fact.other_objects == ()
                       and p.fact.past == () for p in plans)
            assert all(p.fact.demonstrations for p in plans)
        else:  # kmin needs them: the same log sees them fetched, once per fact
            assert fetched.count(gd.FACT_CONTEXT) == 3
            assert all(len(p.fact.distractors) == 2 for p in plans)
        got.append({k: (r["score"], r["ranks"], r["confidences"])
                    for k, r in _rows(graph, key).items()})
    assert len(got[0]) == 3 and got[0] == got[1]
