"""BELIEF-ICL as an option of the ``belief`` measure (issue 11 §2): ``--measure
belief:icl=…,style=…`` through ``run_probe`` on the tiny GPT-2 and the probe world, checked
against prompts written out by hand."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from probe_world import REF, load
from tiny_models import TinyModel

from kgprobe.errors import ConfigError
from kgprobe.graph import probe_runs as pr
from kgprobe.probing.config import ProbeConfig, measure_key
from kgprobe.probing.requests import GenerateRequest
from kgprobe.probing.run import run_probe


@pytest.fixture(scope="module")
def gpt2(tiny_model: TinyModel) -> Path:
    # 4-shot prompts need more than the default 64 positions
    return tiny_model("gpt2", positions=256)


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
    from kgprobe.probing.measures.catalog import relation_aggregates

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

    def write_many(self, statements: Any, check: Any = None) -> Any:
        self.cypher.extend(c for c, _ in statements)
        return self._graph.write_many(statements, check=check)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._graph, name)


def test_icl_needs_follow_the_parameters() -> None:
    from kgprobe.probing.measures.catalog import create

    assert create("belief").needs == {"templates", "distractors", "other_objects"}
    assert create("belief", {"mode": "vocab"}).needs == {"templates", "distractors", "other_objects"}
    assert create("belief", {"icl": "zero"}).needs == {"templates", "other_objects"}
    for icl in ("random", "relation", "template"):
        for style in ("mp", "qa"):
            assert create("belief", {"icl": icl, "style": style}).needs == {
                "templates", "other_objects", "demonstrations"}


def test_icl_fetches_no_distractor_and_keeps_its_values(graph: Any, engine: Any,
                                                        gpt2: Path) -> None:
    """BELIEF-ICL reads no distractor: no typed-candidate or temporal query reaches the graph
    and the facts carry none — only the fact contexts, one batched read per batch of facts
    (3 facts, batches of 2: two reads), for the other correct objects an answer may name; its
    values equal those of a run where the distractors are fetched (for kmin beside it)."""
    from kgprobe.graph import distractors as gd

    load(graph)
    distractor_cypher = {gd.FACT_CONTEXT, gd.TRUE_OBJECTS, gd.TYPED_CANDIDATES,
                         gd.TYPED_CANDIDATES_LIMITED, gd.TEMPORAL_CANDIDATES,
                         gd.TYPED_IDS, gd.FACT_CONTEXTS, gd.TYPED_CANDIDATES_BATCH,
                         gd.TEMPORAL_CANDIDATES_BATCH, gd.DRAWN_MEMBERS_BATCH}
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
            assert fetched == [gd.FACT_CONTEXTS] * 2
            assert all(p.fact.distractors == () and p.fact.past == () for p in plans)
            assert all(p.fact.demonstrations for p in plans)
        else:  # kmin needs them: the same log sees them fetched, once per fact
            assert fetched.count(gd.FACT_CONTEXTS) == 2
            assert set(fetched) - {gd.FACT_CONTEXTS}  # and the random strategy's own reads
            assert all(len(p.fact.distractors) == 2 for p in plans)
        got.append({k: (r["score"], r["ranks"], r["confidences"])
                    for k, r in _rows(graph, key).items()})
    assert len(got[0]) == 3 and got[0] == got[1]


# --- random, template and QA-with-demonstrations through run_probe ------------------------------

_VALUES = ("rank", "hit_k", "rr", "consistency", "confidence", "ranks", "confidences")


def _stored(graph: Any, key: str) -> dict[str, dict[str, Any]]:
    """Every value of ``key`` under its documented property name, ``score__<model>__<key>``
    and ``score__<model>__<key>_<value>`` (written out here, not taken from ScoreProps)."""
    names = {"score": f"score__gpt2__{key}", **{v: f"score__gpt2__{key}_{v}" for v in _VALUES}}
    return {r["key"]: r for r in pr.measure_rows(graph, names)}


def _greedy_prompts(engine: Any, seen: list[GenerateRequest]) -> Any:
    class Recording:
        def run(self, requests: Any) -> Any:
            seen.extend(r for r in requests if isinstance(r, GenerateRequest)
                        and r.temperature == 0.0)
            return engine.run(requests)

    return Recording()


def _split(prompt: str) -> tuple[str, list[tuple[str, str]], str]:
    """(instruction, [(demonstration question, answer)], probe question) of an ICL prompt."""
    lines = prompt.split("\n")
    assert lines[-1] == "A:" and len(lines) % 2 == 1
    return lines[0], [(lines[i], lines[i + 1]) for i in range(1, len(lines) - 2, 2)], lines[-2]


def _add_templates(graph: Any, *texts: tuple[str, str]) -> None:
    from kgprobe.graph.templates import import_templates
    from kgprobe.records import TemplateRecord, derive_style

    import_templates(graph, [TemplateRecord(p, t, derive_style(t), "test") for p, t in texts])


#: P36 of the probe world, by hand: subject label -> object labels
_CAPITALS = {"United States of America": ("Washington, D.C.", "Washington"),
             "France": ("Paris",), "Germany": ("Berlin",)}


def _check_values(engine: Any, rows: dict[str, dict[str, Any]],
                  prompts_by_subject: dict[str, list[str]]) -> None:
    """Stored values against greedy answers generated here for the recorded prompts: a
    prompt is rank 1 when the answer names the object (case-insensitive substring)."""
    assert len(rows) == 3
    for r in rows.values():
        subject = next(s for s, q in (("United States of America", "Q30"), ("France", "Q142"),
                                      ("Germany", "Q183")) if r["key"].startswith(q + "$")
                       or r["key"].split("|")[0] == q)
        ranks = []
        for p in prompts_by_subject[subject]:
            greedy = engine.run([GenerateRequest(p, 3, 0.0, 1.0, 0, ("\n",))])[0].text.lower()
            ranks.append(1 if any(lab.lower() in greedy for lab in _CAPITALS[subject]) else 2)
        assert sorted(r["ranks"]) == sorted(ranks)
        assert r["score"] == pytest.approx(ranks.count(1) / len(ranks))
        assert r["rank"] == pytest.approx(sum(ranks) / len(ranks))
        assert r["hit_k"] is None and r["rr"] is None  # only K = 1 means anything for ICL
        assert len(r["confidences"]) == len(ranks)
        assert all(c in (0.0, 0.5, 1.0) for c in r["confidences"])  # samples=2
        assert r["confidence"] == pytest.approx(sum(r["confidences"]) / len(ranks))
        assert r["consistency"] in ((None,) if len(ranks) == 1 else (0.0, 1.0))


def _by_subject(prompts: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in prompts:
        probe = _split(p)[2]
        subject = next(s for s in _CAPITALS if re.search(rf"\b{re.escape(s)}\b", probe))
        out.setdefault(subject, []).append(p)
    return out


def test_four_template_demonstrations_share_the_probe_template(graph: Any, engine: Any,
                                                               gpt2: Path) -> None:
    """icl=template: with two object-last templates for P36, every demonstration of a prompt
    is another capital written with the prompt's own template (icl=relation would mix them)."""
    load(graph)
    _add_templates(graph, ("P36", "[X]'s capital city is [Y]."))
    seen: list[GenerateRequest] = []
    key = "belief_random_n2_icltemplate_smp2_t3"
    s = run_probe(graph, _greedy_prompts(engine, seen),
                  _cfg(gpt2, measures=("belief:icl=template,samples=2,max_new_tokens=3",),
                       relations=("P36",)),
                  fingerprint=engine.fingerprint, progress=False)
    assert s.score_properties == [f"score__gpt2__{key}"] and s.scored == 3
    forms = {"The capital of {} is [MASK].", "{}'s capital city is [MASK]."}
    prompts = [r.context for r in seen]
    assert len(prompts) == 6  # 3 facts x 2 templates
    for p in prompts:
        instruction, demos, probe = _split(p)
        assert instruction == "Predict the [MASK] in each sentence in one word."
        [(form, subject)] = [(f, s) for f in forms for s in _CAPITALS if probe == f"Q: {f.format(s)}"]
        # the other two capitals of P36 (only two exist), each in the probe's template
        assert sorted(demos) == sorted(
            (f"Q: {form.format(o)}", f"A: {_CAPITALS[o][0]}.") for o in _CAPITALS if o != subject)
    by_subject = _by_subject(prompts)
    assert {s: len(v) for s, v in by_subject.items()} == dict.fromkeys(_CAPITALS, 2)
    _check_values(engine, _stored(graph, key), by_subject)


def test_four_random_demonstrations_are_seeded_and_batch_free(graph: Any, engine: Any,
                                                              gpt2: Path) -> None:
    """icl=random: four demonstrations per prompt drawn from the facts of every relation
    with templates (the probe world's P35, P36, P27), never the probed pair; the draw is the
    same in a second run and with another batch size."""
    load(graph)
    # every (question, answer) a demonstration can be, written out from the probe world
    presidents = ["Bill Clinton", "George W. Bush", "Barack Obama", "Donald Trump", "Joe Biden"]
    citizens = {"Marie Curie": "France", "Johann Sebastian Bach": "Germany",
                **dict.fromkeys(presidents, "United States of America")}
    possible = {("Q: The head of state of United States of America is [MASK].", f"A: {p}.")
                for p in presidents}
    possible |= {(f"Q: {s} is a citizen of [MASK].", f"A: {o}.") for s, o in citizens.items()}
    possible |= {(f"Q: The capital of {s} is [MASK].", f"A: {o[0]}.") for s, o in _CAPITALS.items()}
    key = "belief_random_n2_iclrandom_smp2_t3"
    runs = []
    for bs, force in ((3, False), (3, True), (1, True)):
        seen: list[GenerateRequest] = []
        run_probe(graph, _greedy_prompts(engine, seen),
                  _cfg(gpt2, measures=("belief:icl=random,samples=2,max_new_tokens=3",),
                       relations=("P36",), batch_facts=bs, force=force),
                  fingerprint=engine.fingerprint, progress=False)
        prompts = sorted(r.context for r in seen)
        runs.append((prompts, {k: (r["ranks"], r["confidences"])
                               for k, r in _stored(graph, key).items()}))
        assert len(prompts) == 3
        other_relations = 0
        for p in prompts:
            instruction, demos, probe = _split(p)
            assert instruction == "Predict the [MASK] in each sentence in one word."
            assert len(demos) == 4 and len(set(demos)) == 4
            assert set(demos) <= possible
            subject = probe.removeprefix("Q: The capital of ").removesuffix(" is [MASK].")
            assert subject in _CAPITALS
            assert f"Q: The capital of {subject} is [MASK]." not in {q for q, _ in demos}
            other_relations += sum(not q.startswith("Q: The capital of ") for q, _ in demos)
        # only two other capitals exist: at least two demonstrations per prompt come from
        # another relation (icl=relation would give two demonstrations)
        assert other_relations >= 6
    assert runs[0] == runs[1] == runs[2]
    _check_values(engine, _stored(graph, key), _by_subject(runs[0][0]))


def test_qa_style_with_demonstrations(graph: Any, engine: Any, gpt2: Path) -> None:
    """style=qa, icl=relation: question templates only (the object-last one of P36 makes no
    question), demonstrations answered with the object's label, as in the paper's App. A.4."""
    load(graph)
    _add_templates(graph, ("P36", "What is the capital of [X]?"))
    seen: list[GenerateRequest] = []
    key = "belief_random_n2_iclrelation_stqa_smp2_t3"
    s = run_probe(graph, _greedy_prompts(engine, seen),
                  _cfg(gpt2, measures=("belief:icl=relation,style=qa,samples=2,max_new_tokens=3",),
                       relations=("P36",)),
                  fingerprint=engine.fingerprint, progress=False)
    assert s.score_properties == [f"score__gpt2__{key}"] and s.scored == 3
    prompts = [r.context for r in seen]
    assert len(prompts) == 3
    for subject in _CAPITALS:
        [p] = [p for p in prompts if p.endswith(f"Q: What is the capital of {subject}?\nA:")]
        instruction, demos, _ = _split(p)
        assert instruction == "Answer each question in one word."
        assert sorted(demos) == sorted((f"Q: What is the capital of {o}?", f"A: {lab[0]}.")
                                       for o, lab in _CAPITALS.items() if o != subject)
    _check_values(engine, _stored(graph, key), _by_subject(prompts))


def test_generation_longer_than_the_model_is_cut_from_the_left(engine: Any, gpt2: Path) -> None:
    """A prompt whose tokens and new tokens do not fit the model's positions (256 here; a
    4-random ICL prompt of the probe world is such a prompt) is cut from the left, leaving
    room for every new token, as a log-prob context is. It crashed with an IndexError in the
    position embedding. Expected: greedy decoding by the model itself on the last
    256 - 3 ids of the prompt."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    prompt = "Q: The capital of Germany is [MASK].\nA: Berlin.\n" * 30 + "Q: The capital of France is"
    tok = AutoTokenizer.from_pretrained(gpt2)
    ids = tok(prompt, add_special_tokens=False)["input_ids"]
    assert len(ids) > 256
    kept = ids[-(256 - 3):]
    model = AutoModelForCausalLM.from_pretrained(gpt2).eval()
    want: list[int] = []
    with torch.no_grad():
        for _ in range(3):
            want.append(int(model(torch.tensor([kept + want])).logits[0, -1].argmax()))
    [got] = engine.run([GenerateRequest(prompt, 3, 0.0, 1.0, 0, ())])
    assert list(got.token_ids) == want


def test_beam_search_longer_than_the_model_is_cut_from_the_left(engine: Any, gpt2: Path) -> None:
    """The same for an unconstrained beam search: a width-1 search is greedy decoding, so the
    expected tokens are the model's own greedy choice on the last 256 - 3 ids of the prompt."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kgprobe.probing.requests import BeamSearchRequest

    prompt = "Q: The capital of Germany is [MASK].\nA: Berlin.\n" * 30 + "Q: The capital of France is"
    tok = AutoTokenizer.from_pretrained(gpt2)
    kept = tok(prompt, add_special_tokens=False)["input_ids"][-(256 - 3):]
    model = AutoModelForCausalLM.from_pretrained(gpt2).eval()
    want: list[int] = []
    with torch.no_grad():
        for _ in range(3):
            want.append(int(model(torch.tensor([kept + want])).logits[0, -1].argmax()))
    [got] = engine.run([BeamSearchRequest(prompt, num_beams=1, max_new_tokens=3)])
    assert list(got.hypotheses[0].token_ids) == want
