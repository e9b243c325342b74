"""Distractor-based measure: Pl, K(f|c), Min@n / Avg@n, K(f) — hand-computed on fixed values
and checked against direct engine scores on a tiny random GPT-2."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_models import TinyModel

from kgprobe.errors import ConfigError
from kgprobe.probing.engine import Engine
from kgprobe.probing.measures.common import (
    EndMarker,
    Entity,
    Fact,
    cloze_sentences,
    end_marker_for,
    logsumexp,
)
from kgprobe.probing.measures.distractors import (
    DistractorItem,
    distractor_measure,
    knowledge_given_cloze,
    plausibility_requests,
)
from kgprobe.probing.models import LoadedModel, load_model
from kgprobe.probing.requests import LogProbRequest, LogProbResult

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def gpt2(tiny_model: TinyModel) -> LoadedModel:
    return load_model(str(tiny_model("gpt2")), device="cpu")


def test_k_given_cloze_by_hand() -> None:
    t = math.log(0.3)
    ds = [math.log(0.2), math.log(0.5), math.log(0.1)]
    assert knowledge_given_cloze(t, ds, 1, "min") == 1.0
    assert knowledge_given_cloze(t, ds, 2, "min") == 0.0
    assert knowledge_given_cloze(t, ds, 2, "avg") == 0.5
    assert knowledge_given_cloze(t, ds, None, "avg") == pytest.approx(2 / 3)
    assert knowledge_given_cloze(t, ds, 10, "avg") == pytest.approx(2 / 3)  # n > |list|: all
    assert knowledge_given_cloze(t, [t], 1, "min") == 0.0  # a tie is not a preference
    assert knowledge_given_cloze(t, [], 5, "min") is None
    with pytest.raises(ConfigError):
        knowledge_given_cloze(t, ds, 0, "min")
    with pytest.raises(ConfigError):
        knowledge_given_cloze(t, ds, 1, "max")  # type: ignore[arg-type]


def test_plausibility_sums_label_probabilities() -> None:
    # Pl = 0.1 + 0.25 = 0.35 for two labels; a distractor with one label at 0.3 loses
    assert math.exp(logsumexp([math.log(0.1), math.log(0.25)])) == pytest.approx(0.35)
    assert logsumexp([]) == -math.inf


def test_end_markers() -> None:
    c = cloze_sentences(["The capital of [X] is [Y]."], Entity("France"))[0].cloze
    assert EndMarker("tail").continuation(c, "Paris") == (" Paris.", False)
    assert EndMarker("eos").continuation(c, "Paris") == (" Paris", True)
    assert EndMarker("none").continuation(c, "Paris") == (" Paris", False)
    assert EndMarker("text", "\n").continuation(c, "Paris") == (" Paris\n", False)
    q = cloze_sentences(["What is the capital of [X]?"], Entity("France"))[0].cloze
    assert q.context == "What is the capital of France?"
    assert EndMarker("tail", ".").continuation(q, "Paris") == (" Paris.", False)
    assert end_marker_for("smollm2-135m").kind == "tail"
    with pytest.raises(ConfigError):
        EndMarker("period")  # type: ignore[arg-type]


def test_cloze_set_is_templates_times_subject_labels() -> None:
    skipped: list[str] = []
    cs = cloze_sentences(
        ["The capital of [X] is [Y].", "[Y] is the capital of [X].", "[X] has its capital in [Y]."],
        Entity("France", ("the French Republic",)), skipped=skipped)
    assert [c.context for c in cs] == [
        "The capital of France is", "The capital of the French Republic is",
        "France has its capital in", "the French Republic has its capital in"]
    assert skipped == ["[Y] is the capital of [X]."]


def test_measure_matches_direct_engine_scores(gpt2: LoadedModel) -> None:
    engine = Engine(gpt2, batch_size=4)
    fact = Fact(Entity("France", ("the French Republic",)), "P36", Entity("Paris", ("Paris city",)))
    templates = ("The capital of [X] is [Y].", "[X] has its capital in [Y].")
    distractors = (Entity("London"), "Rome", Entity("Berlin", ("Berlin city",)))
    for end in (EndMarker("tail"), EndMarker("eos")):
        [fp] = distractor_measure(engine, [DistractorItem(fact, templates, distractors)], end=end)
        assert len(fp.clozes) == 4
        expected_min, expected_avg = [], []
        for c in fp.clozes:
            def pl(labels: list[str], ctx: str = c.sentence.context,
                   eos: bool = end.kind == "eos") -> float:
                tail = "" if eos else "."
                rs = engine.run([LogProbRequest(ctx, f" {lab}{tail}", eos) for lab in labels])
                return sum(math.exp(r.logprob) for r in rs if isinstance(r, LogProbResult))
            p_true = pl(["Paris", "Paris city"])
            p_ds = [pl(["London"]), pl(["Rome"]), pl(["Berlin", "Berlin city"])]
            # fp32 scores move by ~1e-6 relative with the batch they are packed in
            assert math.exp(c.log_pl_true) == pytest.approx(p_true, rel=1e-4)
            assert [math.exp(x) for x in c.log_pl_distractors] == pytest.approx(p_ds, rel=1e-4)
            wins = [1.0 if c.log_pl_true > d else 0.0 for d in c.log_pl_distractors[:2]]
            expected_min.append(min(wins))
            expected_avg.append(sum(wins) / 2)
        assert fp.k(2, "min") == pytest.approx(sum(expected_min) / 4)
        assert fp.k(2, "avg") == pytest.approx(sum(expected_avg) / 4)


def test_no_distractor_gives_none(gpt2: LoadedModel) -> None:
    fact = Fact(Entity("France"), "P36", Entity("Paris"))
    [fp] = distractor_measure(Engine(gpt2), [DistractorItem(fact, ("The capital of [X] is [Y].",), ())])
    assert fp.k(5, "min") is None
    assert fp.plausibility() is not None


def test_grid_search_over_n_and_aggregation_reuses_plausibilities(gpt2: LoadedModel) -> None:
    from kgprobe.probing.measures.distractors import k_scores
    from kgprobe.probing.measures.evaluation import kfold_grid_search

    engine = Engine(gpt2)
    subjects = ["France", "England", "Italy", "Germany", "Spain", "Lyon"]
    objects = ["Paris", "London", "Rome", "Berlin", "Madrid", "France"]
    items = [DistractorItem(Fact(Entity(s), "P36", Entity(o)), ("The capital of [X] is [Y].",),
                            tuple(x for x in objects if x != o)) for s, o in zip(subjects, objects, strict=True)]
    fps = distractor_measure(engine, items)
    calls = engine.stats.forward_calls
    human = {fp.fact.key: float(i % 3) for i, fp in enumerate(fps)}
    res = kfold_grid_search(human, lambda cfg: k_scores(fps, cfg["n"], cfg["agg"]),
                            {"n": [1, 3, 5], "agg": ["min", "avg"]}, k=2, seed=0)
    assert engine.stats.forward_calls == calls  # the grid search made no model call
    assert len(res.folds) == 2 and all(f.best["n"] in (1, 3, 5) for f in res.folds)
    assert k_scores(fps, 5, "avg") == {fp.fact.key: fp.k(5, "avg") for fp in fps}


class _Recording:
    """A runner that records what it is asked and answers log p = -len(continuation)."""

    def __init__(self) -> None:
        self.asked: list[LogProbRequest] = []

    def run(self, requests: list[LogProbRequest]) -> list[LogProbResult]:
        self.asked.extend(requests)
        return [LogProbResult(-float(len(r.continuation)), (), (), False, False, ()) for r in requests]


def test_planned_items_keep_each_entitys_written_form() -> None:
    """The measure caches each item's requests by value (the loop plans a batch twice). Two
    objects with the same label but different verbalizer facts ("the Danube", a river; a bare
    "Danube" otherwise) are different items and must keep their own sentences, each as
    plausibility_requests writes it without any cache, however often and in whatever order
    they are planned."""
    from kgprobe.probing.verbalize import Facts

    end = EndMarker("tail", ".")
    river = Entity("Danube", ("Donau",), facts=Facts(types=frozenset({"Q4022"})))
    plain = Entity("Danube", ("Donau",), facts=Facts())
    vienna = Entity("Vienna", facts=Facts())
    items = [DistractorItem(Fact(vienna, "P206", o), ("[X] lies on [Y].", "[X] is by [Y]."),
                            (Entity("Rhine", facts=Facts(types=frozenset({"Q4022"}))),))
             for o in (river, plain)]

    def expected(item: DistractorItem) -> list[LogProbRequest]:
        out: list[LogProbRequest] = []
        for c in cloze_sentences(item.templates, item.fact.subject):
            for e in (item.fact.object, *item.distractors):
                out.extend(plausibility_requests(c, e, end, 3))
        return out

    conts = {r.continuation for r in expected(items[0])} ^ {r.continuation for r in expected(items[1])}
    assert conts == {" the Danube.", " the Donau.", " Danube.", " Donau."}
    for order in (items, items[::-1], items + items):
        rec = _Recording()
        scored = distractor_measure(rec, order, end=end, max_object_labels=3)
        assert rec.asked == [r for item in order for r in expected(item)]
        for item, fp in zip(order, scored, strict=True):
            # Pl(o|c) read off the answers to the item's own sentences
            want = [logsumexp(-float(len(r.continuation))
                              for r in plausibility_requests(c, item.fact.object, end, 3))
                    for c in cloze_sentences(item.templates, item.fact.subject)]
            assert [c.log_pl_true for c in fp.clozes] == pytest.approx(want)


def test_an_item_built_with_lists_is_planned_without_the_cache() -> None:
    """DistractorItem is public: an item with lists for tuples cannot be a cache key, and is
    planned as before, with the same requests as its tuple twin."""
    end = EndMarker("tail", ".")
    fact = Fact(Entity("France"), "P36", Entity("Paris"))
    twin = DistractorItem(fact, ("The capital of [X] is [Y].",), (Entity("Lyon"), "Nice"))
    listy = DistractorItem(fact, ["The capital of [X] is [Y]."], [Entity("Lyon"), "Nice"])  # type: ignore[arg-type]
    asked = []
    for item in (listy, twin):
        rec = _Recording()
        distractor_measure(rec, [item], end=end)
        asked.append(rec.asked)
    assert asked[0] == asked[1] and len(asked[0]) == 3


def test_names_written_alike_are_one_sentence(gpt2: LoadedModel) -> None:
    """The careful writer gives "United Kingdom" its article, and the alias "The United Kingdom"
    reads the same mid-sentence: Pl(o|c) sums each distinct sentence once (counted twice, it
    was log 2 nats higher whenever that sentence dominated). The Probability baseline sums the
    same way."""
    from kgprobe.probing.measures.baselines import ProbeItem, probability
    from kgprobe.probing.verbalize import entity_facts

    def careful(label: str, aliases: tuple[str, ...], types: tuple[str, ...]) -> Entity:
        return Entity(label, aliases, None, entity_facts(label, aliases, types))

    engine = Engine(gpt2)
    uk = careful("United Kingdom", ("The United Kingdom", "UK"), ("Q6256",))
    ireland = careful("Ireland", ("The Republic of Ireland",), ("Q6256",))
    fact = Fact(careful("Belfast", (), ("Q515",)), "P17", uk)
    end = EndMarker("tail", ".")
    [fp] = distractor_measure(engine, [DistractorItem(fact, ("[X] is in [Y].",), (ireland,))], end=end)
    [c] = fp.clozes
    assert c.sentence.context == "Belfast is in"

    def log_pl(conts: list[str]) -> float:  # the distinct sentences, written out by hand
        rs = engine.run([LogProbRequest("Belfast is in", x) for x in conts])
        return logsumexp(r.logprob for r in rs if isinstance(r, LogProbResult))

    # log-values: the random model's probabilities (~1e-43) are below approx's absolute slack
    assert c.log_pl_true == pytest.approx(log_pl([" the United Kingdom.", " the UK."]), abs=1e-3)
    assert c.log_pl_distractors[0] == pytest.approx(
        log_pl([" Ireland.", " the Republic of Ireland."]), abs=1e-3)
    [got] = probability(engine, [ProbeItem(fact, ("[X] is in [Y].",))], end=end)
    assert math.log(got.score) == pytest.approx(log_pl([" the United Kingdom.", " the UK."]), abs=1e-3)
    # the label and its alias alone: one sentence, so Pl is that sentence's probability
    only = careful("United Kingdom", ("The United Kingdom",), ("Q6256",))
    [fp1] = distractor_measure(engine, [DistractorItem(Fact(fact.subject, "P17", only),
                                                       ("[X] is in [Y].",), (ireland,))], end=end)
    assert fp1.clozes[0].log_pl_true == pytest.approx(log_pl([" the United Kingdom."]), abs=1e-3)
