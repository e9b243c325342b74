"""BELIEF metrics on a constructed case with known answers, rank computation on a tiny random
GPT-2 against direct engine scores, and BELIEF-ICL prompts, matching and generation."""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import numpy as np
import pytest
import torch
from tiny_models import TinyModel

from kgprobe.errors import ConfigError
from kgprobe.probing.engine import Engine
from kgprobe.probing.measures.belief import (
    BeliefPair,
    IclConfig,
    IclFact,
    PromptOutcome,
    acc_at_k,
    answer_matches,
    belief_icl,
    belief_report,
    consist_at_1,
    icl_prompt,
    icl_report,
    mrr,
    normalize_answer,
    overconfidence,
    rank_prompts,
    same_answer,
    sample_prompt_sets,
    select_demonstrations,
)
from kgprobe.probing.measures.common import Entity
from kgprobe.probing.models import LoadedModel, load_model
from kgprobe.probing.requests import LogProbRequest, NextTokenRequest, NextTokenResult

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def gpt2(tiny_model: TinyModel) -> LoadedModel:
    return load_model(str(tiny_model("gpt2")), device="cpu")


def _o(pair: str, template: str, rank: int, pred: str, conf: float, rel: str = "P1") -> PromptOutcome:
    return PromptOutcome(pair, rel, template, f"{pair}/{template}", rank, pred, conf, rank == 1)


def test_acc_and_mrr_by_hand() -> None:
    ranks = [1, 3, 2, 10, 1]
    assert acc_at_k(ranks, 1) == pytest.approx(2 / 5)
    assert acc_at_k(ranks, 3) == pytest.approx(4 / 5)
    assert mrr(ranks) == pytest.approx((1 + 1 / 3 + 1 / 2 + 1 / 10 + 1) / 5)


def test_consistency_by_hand() -> None:
    outs = [
        # pair a: predictions x, x, y -> agreeing pairs 1 of 3
        _o("a", "t1", 1, "x", 0.9), _o("a", "t2", 1, "x", 0.8), _o("a", "t3", 2, "y", 0.7),
        # pair b: z, z -> 1 of 1
        _o("b", "t1", 1, "z", 0.6), _o("b", "t2", 1, "z", 0.5),
        # pair c: a single prompt: left out
        _o("c", "t1", 1, "q", 0.4),
    ]
    assert consist_at_1(outs) == pytest.approx((1 / 3 + 1) / 2)


def test_overconfidence_by_hand() -> None:
    conf = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    hits = [True, False, True, False, False, False]
    # 3 bins of 2 after sorting by confidence: (0.85 - 0.5), (0.65 - 0.5), (0.45 - 0)
    expected = (1 / 3) * (0.35 + 0.15 + 0.45)
    assert overconfidence(conf, hits, bins=3) == pytest.approx(expected)
    # order of input does not matter
    idx = [5, 2, 0, 4, 1, 3]
    assert overconfidence([conf[i] for i in idx], [hits[i] for i in idx], 3) == pytest.approx(expected)
    # more bins than prompts: one prompt per bin
    assert overconfidence([0.5], [True], 10) == pytest.approx(-0.5)
    with pytest.raises(ConfigError):
        overconfidence([0.5], [True, False])


def test_sampling_one_prompt_per_pair_and_fluctuation() -> None:
    outs = []
    for p in range(6):
        for t, rank in (("t1", 1), ("t2", 2)):
            outs.append(_o(f"p{p}", t, rank, "x", 0.5))
    runs = sample_prompt_sets(outs, runs=20, seed=3)
    assert all(len(r) == 6 and len({o.pair for o in r}) == 6 for r in runs)
    # shared template per relation: within a run every pair uses the same template
    assert all(len({o.template for o in r}) == 1 for r in runs)
    accs = [acc_at_k([o.rank for o in r], 1) for r in runs]
    assert set(accs) <= {0.0, 1.0}
    rep = belief_report(outs, ks=(1,), runs=20, seed=3, bins=2)
    assert rep.acc[1].mean == pytest.approx(statistics.fmean(accs))
    assert rep.acc[1].range == max(accs) - min(accs)
    assert rep.acc[1].stdev == pytest.approx(statistics.pstdev(accs))
    assert rep.pairs == 6 and rep.prompts == 12
    assert rep.consist_at_1 == 1.0
    # reproducible with the same seed, different with another
    again = sample_prompt_sets(outs, runs=20, seed=3)
    assert [[o.prompt for o in r] for r in again] == [[o.prompt for o in r] for r in runs]
    free = sample_prompt_sets(outs, runs=20, seed=3, share_template=False)
    assert any(len({o.template for o in r}) == 2 for r in free)


def test_rank_prompts_vocab_and_candidates(gpt2: LoadedModel) -> None:
    engine = Engine(gpt2)
    pair = BeliefPair(Entity("France"), "P36", (Entity("Paris"),), ("The capital of [X] is [Y].",),
                      distractors=(Entity("London"), Entity("Rome")))
    ctx = "The capital of France is"
    [single] = engine.run([LogProbRequest(ctx, " Paris")])
    assert single.num_tokens == 1  # type: ignore[union-attr]
    [v] = rank_prompts(engine, [pair], mode="vocab")
    [dist] = engine.run([NextTokenRequest(ctx, None)])
    assert isinstance(dist, NextTokenResult) and dist.full_logprobs is not None
    gold = single.logprob  # type: ignore[union-attr]
    assert v.rank == 1 + int((dist.full_logprobs > gold).sum())
    assert v.confidence == pytest.approx(math.exp(float(dist.full_logprobs.max())), rel=1e-4)
    [top] = engine.run([NextTokenRequest(ctx, 1)])
    assert v.prediction == top.tokens[0].strip()  # type: ignore[union-attr]

    [c] = rank_prompts(engine, [pair], mode="candidates")
    scores = {lab: engine.run([LogProbRequest(ctx, f" {lab}.")])[0].logprob  # type: ignore[union-attr]
              for lab in ("Paris", "London", "Rome")}
    assert c.rank == 1 + sum(1 for k, s in scores.items() if k != "Paris" and s > scores["Paris"])
    best = max(scores, key=scores.__getitem__)
    assert c.prediction == best
    z = sum(math.exp(s) for s in scores.values())
    assert c.confidence == pytest.approx(math.exp(scores[best]) / z, rel=1e-4)



def test_names_written_alike_make_one_prompt_and_one_candidate_sentence(gpt2: LoadedModel) -> None:
    """Careful wording writes the label "United Kingdom" (with its article) and the alias "The
    United Kingdom" alike: one prompt per distinct context (the pair's mean is not weighted
    towards it), and a candidate's score sums each distinct sentence once."""
    from kgprobe.probing.measures.common import logsumexp
    from kgprobe.probing.verbalize import entity_facts

    def careful(label: str, aliases: tuple[str, ...], types: tuple[str, ...]) -> Entity:
        return Entity(label, aliases, None, entity_facts(label, aliases, types))

    engine = Engine(gpt2)
    uk = careful("United Kingdom", ("The United Kingdom",), ("Q6256",))
    pair = BeliefPair(uk, "P36", (careful("London", (), ("Q515",)),), ("[X] has its capital in [Y].",),
                      distractors=(careful("Netherlands", ("The Netherlands",), ("Q6256",)),))
    class Recording:  # the real engine, with the requests it is asked written down
        asked: list[Any] = []

        def run(self, requests: Any) -> Any:
            self.asked.extend(requests)
            return engine.run(requests)

    rec = Recording()
    outs = rank_prompts(rec, [pair], mode="candidates")
    assert [o.prompt for o in outs] == ["The United Kingdom has its capital in"]
    # each candidate's distinct sentences, once each (a duplicate would be summed twice)
    assert sorted(r.continuation for r in rec.asked if isinstance(r, LogProbRequest) and r.add_eos is False
                  and r.continuation.endswith(".")) == [" London.", " the Netherlands."]
    ctx = outs[0].prompt
    lp = {x: engine.run([LogProbRequest(ctx, x)])[0].logprob  # type: ignore[union-attr]
          for x in (" London.", " the Netherlands.")}  # "Netherlands" and "The Netherlands": one
    assert outs[0].rank == (2 if lp[" the Netherlands."] > lp[" London."] else 1)
    z = logsumexp(lp.values())
    assert outs[0].confidence == pytest.approx(math.exp(max(lp.values()) - z), rel=1e-4)


ICL_POOL = [
    IclFact(Entity("France"), "P36", Entity("Paris"),
            ("The capital of [X] is [Y].", "What is the capital of [X]? [Y].")),
    IclFact(Entity("England"), "P36", Entity("London"),
            ("The capital of [X] is [Y].", "What is the capital of [X]? [Y].")),
    IclFact(Entity("Italy"), "P36", Entity("Rome"),
            ("The capital of [X] is [Y].", "What is the capital of [X]? [Y].")),
    IclFact(Entity("Lyon"), "P17", Entity("France"), ("[X] is a city in [Y].",)),
]


def test_icl_prompts_match_the_paper_format() -> None:
    target = ICL_POOL[0]
    assert icl_prompt(target, "The capital of [X] is [Y].", [], "mp") == (
        "Predict the [MASK] in each sentence in one word.\n"
        "Q: The capital of France is [MASK].\nA:")
    demos = [(ICL_POOL[1], "What is the capital of [X]? [Y].")]
    assert icl_prompt(target, "What is the capital of [X]? [Y].", demos, "qa") == (
        "Answer each question in one word.\n"
        "Q: What is the capital of England?\nA: London.\n"
        "Q: What is the capital of France?\nA:")


@pytest.mark.parametrize("setting", ["4-random", "4-relation", "4-template"])
def test_demonstrations_never_hold_the_probed_fact(setting: str) -> None:
    for seed in range(20):
        t = "The capital of [X] is [Y]."
        demos = select_demonstrations(ICL_POOL[0], t, ICL_POOL, setting, "mp",  # type: ignore[arg-type]
                                      random.Random(seed))
        assert demos and all(f.pair != ICL_POOL[0].pair for f, _ in demos)
        if setting != "4-random":
            assert all(f.relation == "P36" for f, _ in demos)
        if setting == "4-template":
            assert all(tt == t for _, tt in demos)
    assert select_demonstrations(ICL_POOL[0], "t", ICL_POOL, "zero-shot", "mp", random.Random(0)) == []


def test_normalized_containment() -> None:
    # simplemma's dictionary: "States" of a name stays, real plurals become their lemma
    assert normalize_answer("The United States!") == ["united", "states"]
    assert normalize_answer("the cities of Greece") == ["city", "of", "greece"]
    # the suffix stripping it replaces turned these into specy / new / athen (issue 11 §3)
    assert normalize_answer("species") == ["species"]
    assert normalize_answer("News") == ["news"]
    assert normalize_answer("Athens") == ["athens"]
    assert not answer_matches("a new car", [Entity("news")])
    assert answer_matches(" paris, of course", [Entity("Paris")])
    assert answer_matches("It is the United States.", [Entity("USA", ("United States",))])
    assert not answer_matches("Parisian", [Entity("Paris")])
    assert same_answer("London.", "london city") and same_answer("london city", "London")
    assert not same_answer("Rome", "London")


def test_belief_icl_on_tiny_model(gpt2: LoadedModel) -> None:
    engine = Engine(gpt2)
    cfg = IclConfig(max_new_tokens=3, samples=4, seed=1)
    # zero-shot: the tiny model has 64 positions, too few for demonstrations + generation
    outs = belief_icl(engine, ICL_POOL[:2], ICL_POOL, setting="zero-shot", style="mp", config=cfg,
                      max_templates=1)
    assert len(outs) == 2
    for o in outs:
        assert o.rank in (1, 2) and 0.0 <= o.confidence <= 1.0
        assert "Predict the [MASK]" in o.prompt and o.prompt.endswith("A:")
    again = belief_icl(engine, ICL_POOL[:2], ICL_POOL, setting="zero-shot", style="mp", config=cfg,
                      max_templates=1)
    assert [(o.prediction, o.confidence) for o in again] == [(o.prediction, o.confidence) for o in outs]
    rep = icl_report(outs, runs=3)
    assert 0.0 <= rep.acc[1].mean <= 1.0 and rep.overconf[1] == pytest.approx(
        overconfidence([o.confidence for o in outs], [o.correct_at_1 for o in outs]))
    assert np.isfinite(rep.mrr.mean)


def test_icl_answer_naming_another_correct_object_is_correct(gpt2: LoadedModel) -> None:
    """The paper counts an answer correct when it contains any correct object of (s, r), not
    only the probed one. The tiny model's greedy answer, made another correct object of the
    probed pair, turns a miss into a hit; the prompt and generation are unchanged."""
    import dataclasses

    engine = Engine(gpt2)
    cfg = IclConfig(max_new_tokens=3, samples=1, seed=1)
    probe = dataclasses.replace(ICL_POOL[0], object=Entity("Zzyzx Qwvb"))  # never generated
    [miss] = belief_icl(engine, [probe], ICL_POOL, setting="zero-shot", config=cfg, max_templates=1)
    assert miss.prediction.strip() and miss.rank == 2 and not miss.correct_at_1
    other = Entity(miss.prediction.strip())
    [hit] = belief_icl(engine, [dataclasses.replace(probe, others=(other,))], ICL_POOL,
                       setting="zero-shot", config=cfg, max_templates=1)
    assert hit.prompt == miss.prompt and hit.prediction == miss.prediction
    assert hit.rank == 1 and hit.correct_at_1


def test_vocab_rank_of_the_argmax_is_one(gpt2: LoadedModel) -> None:
    """Issue 11 §3: the gold token's rank is read inside one distribution by token id. The
    argmax token of each prompt's next-token distribution, made the gold answer, must rank 1
    (the old code compared a log-prob from another engine batch and, an ulp apart, gave 2)."""
    from kgprobe.probing.requests import NextTokenRequest

    engine = Engine(gpt2)
    templates = ("[X] is a city in [Y].", "[X] was born in [Y].", "The capital of [X] is [Y].",
                 "[X] is located in [Y].", "[X] works for [Y].", "[X] speaks [Y].")
    subjects = ("England", "France", "Paris", "Berlin", "Marie Curie", "London", "Bach")
    pairs = []
    for t in templates:
        for s in subjects:
            ctx = t.split(" [Y]")[0].replace("[X]", s)
            [top] = engine.run([NextTokenRequest(ctx, 1)])
            tok = top.tokens[0]  # type: ignore[union-attr]
            if not (tok.startswith(" ") and tok.strip().isalpha()):
                continue  # a label is a word after a space
            pairs.append(BeliefPair(Entity(s), "P1", (Entity(tok.strip()),), (t,)))
    assert len(pairs) >= 5
    outcomes = rank_prompts(engine, pairs, mode="vocab")
    assert [o.rank for o in outcomes] == [1] * len(pairs)
    assert all(o.correct_at_1 for o in outcomes)


def test_vocab_rank_does_not_depend_on_another_batchs_rounding(gpt2: LoadedModel) -> None:
    """The old rank compared the gold token's log-prob from one engine batch with the
    distribution of another; fp32 packing can move a value by an ulp between batches (the
    audit saw 5 of 14 argmax answers ranked 2). The engine here hands out log-prob results
    one ulp lower than the distribution's value, as another batch may: the rank must not move."""
    import dataclasses

    from kgprobe.probing.requests import LogProbResult, NextTokenRequest

    engine = Engine(gpt2)

    class UlpApart:
        def run(self, requests: list[Any]) -> list[Any]:
            out = engine.run(requests)
            return [dataclasses.replace(r, logprob=math.nextafter(r.logprob, -math.inf))
                    if isinstance(r, LogProbResult) else r for r in out]

    ctx = "England is a city in"
    [top] = engine.run([NextTokenRequest(ctx, 1)])
    tok = top.tokens[0]  # type: ignore[union-attr]
    assert tok.startswith(" ") and tok.strip().isalpha()
    pair = BeliefPair(Entity("England"), "P1", (Entity(tok.strip()),), ("[X] is a city in [Y].",))
    [o] = rank_prompts(UlpApart(), [pair], mode="vocab")
    assert o.rank == 1 and o.prediction == tok.strip()


# --- issue 21 §2–3: no pooled rank scales; the paper's N with one template per relation ------------


def _row(ranks: list[int], templates: list[int], scale: str | None, conf: float = 0.5) -> dict[str, Any]:
    row: dict[str, Any] = {"score": sum(r == 1 for r in ranks) / len(ranks), "ranks": ranks,
                           "confidences": [conf] * len(ranks), "templates": templates}
    if scale is not None:
        row["scale"] = scale
    return row


def test_report_never_pools_the_vocabulary_and_the_candidate_set() -> None:
    """Two facts ranked over the vocabulary (ranks 1,1 and 3,3: Acc@1 = 1/2 in every trial, by
    hand) and one among candidates (rank 1: a hit whatever the scale). Pooled, Acc@1 would be
    2/3; the candidate fact is reported apart, with its n."""
    from kgprobe.probing.measures.builtin import Belief

    rows = [_row([1, 1], [0, 1], "vocab"), _row([3, 3], [0, 1], "vocab"), _row([1], [0], "candidates")]
    agg = Belief({"runs": 2000}).aggregate(rows, seed=0)
    assert agg["scale"] == "vocab" and agg["scale facts"] == 2
    assert agg["acc@1"]["mean"] == 0.5 and agg["acc@1"]["range"] == 0.0
    assert agg["acc@10"]["mean"] == 1.0
    assert agg["mrr"]["mean"] == pytest.approx((1 + 1 / 3) / 2)
    assert agg["score"]["n"] == 2 and agg["score"]["mean"] == 0.5
    assert agg["candidates facts"] == 1 and agg["candidates acc@1"]["mean"] == 1.0
    assert agg["candidates score"]["n"] == 1
    # mode=candidates: the candidate set is the population, the vocabulary facts apart
    cand = Belief({"runs": 100, "mode": "candidates"}).aggregate(rows, seed=0)
    assert cand["scale"] == "candidates" and cand["acc@1"]["mean"] == 1.0 and cand["vocab facts"] == 2


def test_report_trials_share_one_template_per_relation_at_the_papers_n() -> None:
    """Two facts whose template 0 ranks the gold first and template 1 fifth. Sharing a template
    per trial (§4.1), a trial's Acc@1 is 0 or 1, each half the time: mean 1/2, range 1, sd 1/2
    (a Bernoulli(1/2)); drawn per fact independently it would be 1/2 in half the trials
    (sd 0.354). N is the paper's 50,000 by default."""
    from kgprobe.probing.measures.builtin import Belief

    rows = [_row([1, 5], [0, 1], "vocab"), _row([1, 5], [0, 1], "vocab")]
    agg = Belief().aggregate(rows, seed=0)
    acc = agg["acc@1"]
    assert acc["runs"] == 50_000
    assert acc["range"] == 1.0 and acc["sd"] == pytest.approx(0.5, abs=0.005)
    assert acc["mean"] == pytest.approx(0.5, abs=0.01)  # 4.5 standard errors
    assert Belief().aggregate(rows, seed=0) == agg  # the same trials for the same seed
    assert Belief().aggregate(rows, seed=1)["acc@1"]["mean"] != acc["mean"]


def test_rows_stored_before_scales_form_their_own_population() -> None:
    from kgprobe.probing.measures.builtin import Belief

    rows = [_row([1, 1], [0, 1], "vocab"), _row([2, 2], [0, 1], None)]
    agg = Belief({"runs": 100}).aggregate(rows, seed=0)
    assert agg["scale facts"] == 1 and agg["acc@1"]["mean"] == 1.0
    assert agg["unseparated facts"] == 1 and agg["unseparated acc@1"]["mean"] == 0.0


def test_draw_trials_by_hand_and_in_blocks() -> None:
    """Units of one relation share the drawn template; a unit without it draws among all its
    prompts; every prompt of a unit is drawn about equally often; blocks do not change a draw."""
    from kgprobe.probing.measures.belief import TRIAL_BLOCK, draw_trials

    rel = ["r", "r", "r"]
    tpl = [["a", "b"], ["a", "b", "b"], ["c"]]
    idx = np.concatenate(list(draw_trials(rel, tpl, 3000, seed=5)))
    assert idx.shape == (3000, 3)
    first = np.array(tpl[0])[idx[:, 0]]
    second = np.array(tpl[1])[idx[:, 1]]
    shared = first == second
    assert (idx[:, 2] == 0).all()
    # templates a, b, c are drawn 1/3 each. Under a or b both units take it (they agree); under
    # c (which only the third unit has) they draw among all their prompts and agree with
    # P = 1/2·1/3 + 1/2·2/3 = 1/2. So P(agree) = 2/3 + 1/3·1/2 = 5/6.
    assert shared.mean() == pytest.approx(5 / 6, abs=0.03)
    # the second unit: prompt 0 (a) under a, or 1/3 of c; prompts 1, 2 (b) half of b, 1/3 of c
    counts = np.bincount(idx[:, 1], minlength=3) / 3000
    assert np.allclose(counts, [4 / 9, 5 / 18, 5 / 18], atol=0.03)
    blocks = list(draw_trials(rel, tpl, TRIAL_BLOCK + 5, seed=5))
    assert [len(b) for b in blocks] == [TRIAL_BLOCK, 5]
    again = np.concatenate(list(draw_trials(rel, tpl, TRIAL_BLOCK + 5, seed=5)))
    assert (np.concatenate(blocks) == again).all()


def test_belief_report_refuses_mixed_scales() -> None:
    outs = [_o("a", "t1", 1, "x", 0.5), _o("b", "t1", 1, "x", 0.5)]
    mixed = [outs[0], PromptOutcome(**{**outs[1].__dict__, "scale": "candidates"})]
    with pytest.raises(ConfigError, match="never pooled"):
        belief_report(mixed, runs=10)
    assert belief_report(outs, ks=(1,), runs=10).acc[1].mean == 1.0
