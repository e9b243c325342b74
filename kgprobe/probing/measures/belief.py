"""BELIEF and BELIEF-ICL (Zhao et al., "BELIEFs: Bias-resilient, Multifaceted Evaluation of
Language Models in Factual Knowledge Understanding", MyriadLAMA).

For each subject–relation pair t there are many prompts P_t (templates × subject aliases) and
a set of correct objects C_t. Per prompt the *golden object* a_t is the correct answer the
model ranks highest; its rank gives

    Acc@K = 1/|P| Σ_t 1[rank(a_t) ≤ K]            MRR = 1/|P| Σ_t 1/rank(a_t)      (1, 2)

over P = one randomly chosen prompt per pair, repeated N times with seeds: mean, range
(max − min) and population stdev of the N values (3, 4);

    Consist@1 = 1/|T| Σ_t Σ_{i≠j} 1[ŵ_i = ŵ_j] / (½|P_t|(|P_t|−1))                  (5)

(unordered pairs of prompts of t; pairs with a single prompt are left out); and

    Overconf@K = Σ_i (|P^(i)|/|P|) (mean conf^(i) − mean Acc@K^(i))                  (6)

with the prompts sorted by confidence into M equal-size bins (M = 10). The paper prints the
weight as |P^(i)|/M, which for equal-size bins only makes sense as 1/M = |P^(i)|/|P|; that
is what is computed.

**Ranks.** ``mode="vocab"``: over the whole vocabulary, for answers that are a single token
(the BELIEF setting): rank = 1 + #{tokens with a higher log-probability than the gold token in
the same next-token distribution, looked up by token id}, prediction ŵ the
arg-max token, confidence its probability. ``mode="candidates"``: over the candidate set
(all correct objects + distractors) for multi-token answers: each candidate scored by
log Pl (Σ over its labels of P(λ + EOS | c)); rank = 1 + #{candidates scored higher};
prediction the arg-max candidate; confidence its share of the candidate set's plausibility.
``mode="auto"`` takes ``vocab`` for a prompt whose correct labels include a single-token one,
else ``candidates``. The two are different scales (a rank among ≤ 6 candidates is a hit@10 by
construction) and are never pooled: each outcome records its ``scale``, and ``belief_report``
refuses a mix. The paper evaluates single-token objects only (§2, "our study focuses exclusively
on ... triples in which the object is represented as a single token"); the probe's measure
(``kgprobe.probing.measures.builtin.Belief``) reports the candidate-set facts as a separate
population with its own n.

**Trials.** N = 50,000 by default, the paper's §4.1 figure, with one template per relation in each
trial (:func:`draw_trials`, vectorized: no model call, a few array operations per block).
"""

from __future__ import annotations

import itertools
import math
import random
import re
import unicodedata
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from kgprobe.errors import ConfigError, InputError
from kgprobe.probing.measures.common import (
    EndMarker,
    Entity,
    Runner,
    logsumexp,
    make_cloze,
)
from kgprobe.probing.requests import (
    GenerateRequest,
    GenerateResult,
    LogProbRequest,
    LogProbResult,
    NextTokenRequest,
    NextTokenResult,
    Request,
)
from kgprobe.probing.verbalize import OBJECT, SUBJECT

RankMode = Literal["vocab", "candidates", "auto"]

# --- inputs and per-prompt outcomes --------------------------------------------------------------


@dataclass(frozen=True)
class BeliefPair:
    """A subject–relation pair t: its subject, its correct objects C_t, the templates its
    prompts P_t are built from (× subject labels), and distractors for candidate ranking."""

    subject: Entity
    relation: str
    objects: tuple[Entity, ...]
    templates: tuple[str, ...]
    distractors: tuple[Entity, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.subject.key}|{self.relation}"


@dataclass(frozen=True)
class PromptOutcome:
    """One prompt p_t^i: the rank of its golden object, its prediction and confidence."""

    pair: str
    relation: str
    template: str
    prompt: str
    rank: int
    prediction: str
    confidence: float
    correct_at_1: bool
    #: the rank's scale: "vocab" (over the vocabulary, the paper's single-token objects) or
    #: "candidates" (among the correct objects and the distractors); never pooled
    scale: str = "vocab"


def acc_at_k(ranks: Sequence[int], k: int) -> float:
    """Eq. 1."""
    if not ranks:
        raise ConfigError("Acc@K of no prompt")
    return sum(1 for r in ranks if r <= k) / len(ranks)


def mrr(ranks: Sequence[int]) -> float:
    """Eq. 2."""
    if not ranks:
        raise ConfigError("MRR of no prompt")
    return sum(1.0 / r for r in ranks) / len(ranks)


#: The paper's number of trials (Zhao et al. 2024, §4.1: "a large sample number (N = 50,000)").
PAPER_RUNS = 50_000
#: Trials drawn per block: fixed, so a seed reproduces the same trials whatever the data size.
TRIAL_BLOCK = 1024


@dataclass(frozen=True, eq=False)
class Fluctuation:
    """Mean, range (eq. 3) and population stdev (eq. 4) of N repeated values."""

    mean: float
    range: float
    stdev: float
    values: np.ndarray

    @classmethod
    def of(cls, values: Sequence[float] | np.ndarray) -> Fluctuation:
        v = np.asarray(values, dtype=np.float64)
        if v.size == 0:
            raise ConfigError("no values")
        return cls(float(v.mean()), float(v.max() - v.min()), float(v.std()), v)


def draw_trials(
    relations: Sequence[str], templates: Sequence[Sequence[Hashable]], runs: int, seed: int = 0,
    share_template: bool = True,
) -> Iterator[np.ndarray]:
    """The N trials of §3.2 as blocks of a (trials × units) matrix of prompt indices: unit j
    (a subject–relation pair, or a fact) has prompts whose templates are ``templates[j]``.

    With ``share_template`` (the paper's §4.1 setting: "in each of the N trials, we share the
    same template for facts with the same relation") each trial draws one template per relation,
    uniformly among the templates its units have, then for each unit one of its prompts of that
    template uniformly, or any of its prompts when it has none of it. Vectorized (numpy's
    ``default_rng(seed)``, blocks of ``TRIAL_BLOCK`` trials), so N = 50,000 costs no more than a
    few array operations per block; the same seed and N give the same trials."""
    if runs < 1:
        raise ConfigError("runs must be >= 1")
    if len(relations) != len(templates) or any(len(t) == 0 for t in templates):
        raise ConfigError("every unit needs a relation and at least one prompt")
    rng = np.random.default_rng(seed)
    groups = []
    for rel in sorted(set(relations)):
        units = np.array([j for j, r in enumerate(relations) if r == rel], dtype=np.int64)
        tids: list[Hashable] = list(dict.fromkeys(t for j in units for t in templates[j]))
        if not share_template:
            tids = [_ANY]
        width = max(len(templates[j]) for j in units)
        pool = np.zeros((len(units), len(tids), width), dtype=np.int64)
        count = np.zeros((len(units), len(tids)), dtype=np.int64)
        for a, j in enumerate(units):
            for b, t in enumerate(tids):
                idx = [i for i, ti in enumerate(templates[j]) if ti == t] or list(range(len(templates[j])))
                pool[a, b, : len(idx)] = idx
                count[a, b] = len(idx)
        groups.append((units, pool, count))
    done = 0
    while done < runs:
        c = min(TRIAL_BLOCK, runs - done)
        chosen = [rng.integers(0, pool.shape[1], size=c) for _, pool, _ in groups]
        u = rng.random((c, len(relations)))
        out = np.empty((c, len(relations)), dtype=np.int64)
        for (units, pool, count), drawn in zip(groups, chosen, strict=True):
            n = count[:, drawn].T  # c × units: prompts of the drawn template, per unit
            k = np.minimum((u[:, units] * n).astype(np.int64), n - 1)
            out[:, units] = pool[np.arange(len(units))[None, :], drawn[:, None], k]
        yield out
        done += c


_ANY = object()  # the one "template" of a draw that does not share templates


def trial_fluctuations(
    ranks: Sequence[Sequence[int]], relations: Sequence[str], templates: Sequence[Sequence[Hashable]],
    runs: int, seed: int = 0, ks: Sequence[int] = (1,), share_template: bool = True,
) -> tuple[dict[int, Fluctuation], Fluctuation]:
    """Acc@K (eq. 1) per K and MRR (eq. 2) over the trials of :func:`draw_trials`: unit j's
    prompt i has rank ``ranks[j][i]``."""
    width = max(len(r) for r in ranks)
    table = np.ones((len(ranks), width), dtype=np.float64)
    for j, r in enumerate(ranks):
        table[j, : len(r)] = r
    rows = np.arange(len(ranks))[None, :]
    accs: dict[int, list[np.ndarray]] = {k: [] for k in ks}
    rrs: list[np.ndarray] = []
    for idx in draw_trials(relations, templates, runs, seed, share_template):
        got = table[rows, idx]
        for k in ks:
            accs[k].append((got <= k).mean(axis=1))
        rrs.append((1.0 / got).mean(axis=1))
    return ({k: Fluctuation.of(np.concatenate(v)) for k, v in accs.items()},
            Fluctuation.of(np.concatenate(rrs)))


def sample_prompt_sets(
    outcomes: Sequence[PromptOutcome], runs: int, seed: int = 0, share_template: bool = True
) -> list[list[PromptOutcome]]:
    """The trials of :func:`draw_trials` as prompt sets P (one prompt per pair, pairs in key
    order): what :func:`belief_report` computes its fluctuation over."""
    by_pair = _by_pair(outcomes)
    keys = sorted(by_pair)
    blocks = draw_trials([by_pair[k][0].relation for k in keys],
                         [[o.template for o in by_pair[k]] for k in keys], runs, seed, share_template)
    return [[by_pair[k][i] for k, i in zip(keys, row, strict=True)] for block in blocks for row in block]


def _by_pair(outcomes: Sequence[PromptOutcome]) -> dict[str, list[PromptOutcome]]:
    by_pair: dict[str, list[PromptOutcome]] = {}
    for o in outcomes:
        by_pair.setdefault(o.pair, []).append(o)
    return by_pair


@dataclass
class BeliefReport:
    """BELIEF metrics of one model."""

    acc: dict[int, Fluctuation]
    mrr: Fluctuation
    consist_at_1: float | None
    overconf: dict[int, float]
    prompts: int
    pairs: int

    def as_dict(self) -> dict[str, object]:
        d: dict[str, object] = {"prompts": self.prompts, "pairs": self.pairs,
                                "consist@1": self.consist_at_1}
        for k, f in self.acc.items():
            d[f"acc@{k}"] = {"mean": f.mean, "range": f.range, "stdev": f.stdev}
        d["mrr"] = {"mean": self.mrr.mean, "range": self.mrr.range, "stdev": self.mrr.stdev}
        for k, v in self.overconf.items():
            d[f"overconf@{k}"] = v
        return d


def consist_at_1(outcomes: Sequence[PromptOutcome], same: object = None) -> float | None:
    """Eq. 5. ``same(a, b) -> bool`` compares predictions (exact equality by default)."""
    eq = same if callable(same) else (lambda a, b: a == b)
    by_pair: dict[str, list[str]] = {}
    for o in outcomes:
        by_pair.setdefault(o.pair, []).append(o.prediction)
    vals = []
    for preds in by_pair.values():
        if len(preds) < 2:
            continue
        agree = sum(1 for a, b in itertools.combinations(preds, 2) if eq(a, b))
        vals.append(agree / (len(preds) * (len(preds) - 1) / 2))
    return sum(vals) / len(vals) if vals else None


def overconfidence(confidences: Sequence[float], hits: Sequence[bool], bins: int = 10) -> float:
    """Eq. 6 with M = ``bins`` equal-size bins of the prompts sorted by descending confidence
    (``numpy.array_split``: sizes differ by at most one when M does not divide |P|)."""
    if len(confidences) != len(hits) or not confidences:
        raise ConfigError("overconfidence needs as many hits as confidences, at least one")
    if bins < 1:
        raise ConfigError("bins must be >= 1")
    order = np.argsort(-np.asarray(confidences, dtype=np.float64), kind="stable")
    conf = np.asarray(confidences, dtype=np.float64)[order]
    acc = np.asarray(hits, dtype=np.float64)[order]
    n = len(conf)
    total = 0.0
    for idx in np.array_split(np.arange(n), min(bins, n)):
        total += (len(idx) / n) * (conf[idx].mean() - acc[idx].mean())
    return float(total)


def belief_report(
    outcomes: Sequence[PromptOutcome],
    *,
    ks: Sequence[int] = (1, 10),
    runs: int = PAPER_RUNS,
    seed: int = 0,
    bins: int = 10,
    share_template: bool = True,
) -> BeliefReport:
    """All BELIEF metrics from per-prompt outcomes of ONE rank scale (report the vocabulary's
    and the candidate set's apart). Overconf@K uses every prompt."""
    if not outcomes:
        raise ConfigError("BELIEF needs at least one prompt outcome")
    scales = sorted({o.scale for o in outcomes})
    if len(scales) > 1:
        raise ConfigError(f"BELIEF ranks on different scales ({', '.join(scales)}) are never pooled: "
                          "report each scale's outcomes apart")
    by_pair = _by_pair(outcomes)
    keys = sorted(by_pair)
    acc, m = trial_fluctuations([[o.rank for o in by_pair[k]] for k in keys],
                                [by_pair[k][0].relation for k in keys],
                                [[o.template for o in by_pair[k]] for k in keys], runs, seed, ks,
                                share_template)
    over = {k: overconfidence([o.confidence for o in outcomes], [o.rank <= k for o in outcomes],
                              bins) for k in ks}
    return BeliefReport(acc, m, consist_at_1(outcomes), over, len(outcomes),
                        len({o.pair for o in outcomes}))


# --- ranking prompts with the engine -------------------------------------------------------------


@dataclass
class _PromptPlan:
    pair: BeliefPair
    template: str
    context: str
    mode: Literal["vocab", "candidates"]
    next_req: NextTokenRequest | None = None
    top_req: NextTokenRequest | None = None
    cand_reqs: list[tuple[Entity, bool, list[LogProbRequest]]] = field(default_factory=list)
    true_single: list[LogProbRequest] = field(default_factory=list)


def rank_prompts(
    runner: Runner,
    pairs: Sequence[BeliefPair],
    *,
    mode: RankMode = "auto",
    end: EndMarker | None = None,
    max_subject_labels: int | None = None,
) -> list[PromptOutcome]:
    """Per-prompt outcomes for every prompt of every pair (see the module doc for ranks)."""
    if mode not in ("vocab", "candidates", "auto"):
        raise ConfigError(f"unknown rank mode {mode!r}")
    end = end or EndMarker()
    # pass 1: which true labels are single tokens (the engine tokenizes, we only ask)
    probes: list[Request] = []
    plans: list[_PromptPlan] = []
    for pair in pairs:
        seen: set[str] = set()  # two subject names written alike make one prompt, counted once
        for t in pair.templates:
            for s in pair.subject.labels(max_subject_labels):
                try:
                    c = make_cloze(t, s)
                except InputError:  # object-inside templates have no cloze
                    break
                if c.context in seen:
                    continue
                seen.add(c.context)
                plan = _PromptPlan(pair, t, c.context, "vocab")
                plan.true_single = list(dict.fromkeys(
                    LogProbRequest(c.context, c.continuation(lab))
                    for o in pair.objects for lab in o.labels()))
                for o, is_true in [(o, True) for o in pair.objects] + [
                    (d, False) for d in pair.distractors
                ]:
                    reqs = [LogProbRequest(c.context, cont, eos)  # each distinct sentence once
                            for cont, eos in end.continuations(c, o)]
                    plan.cand_reqs.append((o, is_true, reqs))
                plans.append(plan)
    for p in plans:
        probes.extend(p.true_single)
    res = dict(zip(probes, runner.run(probes), strict=True)) if probes else {}
    second: list[Request] = []
    for p in plans:
        single = [r for r in p.true_single if _lp(res[r]).num_tokens == 1]
        p.mode = ("vocab" if single else "candidates") if mode == "auto" else mode
        if p.mode == "vocab":
            if not single:
                raise ConfigError(f"no correct label of {p.pair.key} is a single token; "
                                  "use mode='candidates'")
            p.true_single = single
            p.next_req = NextTokenRequest(p.context, None)
            p.top_req = NextTokenRequest(p.context, 1)  # the full vector comes without texts
            second.extend([p.next_req, p.top_req])
        else:
            for _, _, reqs in p.cand_reqs:
                second.extend(reqs)
    res.update(zip(second, runner.run(second), strict=True) if second else [])
    out = []
    for p in plans:
        if p.mode == "vocab":
            assert p.next_req is not None
            nt = res[p.next_req]
            if not isinstance(nt, NextTokenResult) or nt.full_logprobs is None:
                raise ConfigError("expected a full next-token distribution")
            full = nt.full_logprobs
            # the gold token's log-prob is read inside the SAME distribution, by token id: a
            # value from another engine batch can differ by an ulp and demote the argmax
            ids = [_lp(res[r]).token_ids for r in p.true_single]
            if all(len(i) == 1 for i in ids):
                gold = max(float(full[i[0]]) for i in ids)
            else:  # results cached before token ids were recorded
                gold = max(_lp(res[r]).logprob for r in p.true_single)
            rank = 1 + int((full > gold).sum())
            top = res[p.top_req] if p.top_req is not None else None
            pred = top.tokens[0] if isinstance(top, NextTokenResult) and top.tokens else ""
            conf = float(np.exp(full.max()))
            out.append(PromptOutcome(p.pair.key, p.pair.relation, p.template, p.context, rank,
                                     pred.strip(), conf, rank == 1, "vocab"))
        else:
            scores = [(o, is_true, logsumexp(_lp(res[r]).logprob for r in reqs))
                      for o, is_true, reqs in p.cand_reqs]
            gold = max(s for _, t, s in scores if t)
            rank = 1 + sum(1 for _, _, s in scores if s > gold)
            best = max(scores, key=lambda x: x[2])
            norm = logsumexp(s for _, _, s in scores)
            conf = math.exp(best[2] - norm) if norm != -math.inf else 0.0
            out.append(PromptOutcome(p.pair.key, p.pair.relation, p.template, p.context, rank,
                                     best[0].label, conf, rank == 1, "candidates"))
    return out


def _lp(r: object) -> LogProbResult:
    if not isinstance(r, LogProbResult):
        raise ConfigError("expected a log-prob result")
    return r


# --- BELIEF-ICL ----------------------------------------------------------------------------------

IclSetting = Literal["zero-shot", "4-random", "4-relation", "4-template"]
IclStyle = Literal["qa", "mp"]
ICL_SETTINGS: tuple[str, ...] = ("zero-shot", "4-random", "4-relation", "4-template")
INSTRUCTION = {
    "qa": "Answer each question in one word.",
    "mp": "Predict the [MASK] in each sentence in one word.",
}
MASK = "[MASK]"


@dataclass(frozen=True)
class IclFact:
    """A fact available as a probe or a demonstration, with its relation's templates."""

    subject: Entity
    relation: str
    object: Entity
    templates: tuple[str, ...]
    #: the subject's other correct objects for the relation: an answer naming any of them is
    #: correct (the paper: "contains any of the candidate object entities")
    others: tuple[Entity, ...] = ()

    @property
    def pair(self) -> tuple[str, str]:
        return (self.subject.key, self.relation)


def icl_query(template: str, subject: str, style: IclStyle) -> str:
    """The text after "Q: ". MP: the template with the object slot as [MASK] (any template).
    QA: a question template ("Who developed [X]?"), its [Y] part dropped."""
    if style == "mp":
        if OBJECT not in template:
            raise ConfigError(f"an MP prompt needs an object slot: {template!r}")
        return template.replace(SUBJECT, subject).replace(OBJECT, MASK).strip()
    if style == "qa":
        head = template.split(OBJECT)[0].strip()
        if not head.endswith("?"):
            raise ConfigError(f"a QA prompt needs a question template: {template!r}")
        return head.replace(SUBJECT, subject)
    raise ConfigError(f"unknown ICL style {style!r}; use qa or mp")


def usable_templates(templates: Sequence[str], style: IclStyle) -> list[str]:
    """Templates that can make an ICL query in ``style``."""
    out = []
    for t in templates:
        try:
            icl_query(t, "x", style)
        except ConfigError:
            continue
        out.append(t)
    return out


def select_demonstrations(
    target: IclFact,
    template: str,
    pool: Sequence[IclFact],
    setting: IclSetting,
    style: IclStyle,
    rng: random.Random,
    k: int = 4,
) -> list[tuple[IclFact, str]]:
    """Demonstrations (fact, template) for one probe; the probed subject–relation pair is never
    among them. zero-shot: none; 4-random: k facts of any relation, random templates;
    4-relation: k facts of the same relation, random templates; 4-template: k facts of the
    same relation with the probe's own template."""
    if setting == "zero-shot":
        return []
    if setting not in ICL_SETTINGS:
        raise ConfigError(f"unknown ICL setting {setting!r}")
    cands = [f for f in pool if f.pair != target.pair]
    if setting in ("4-relation", "4-template"):
        cands = [f for f in cands if f.relation == target.relation]
    cands = [f for f in cands if usable_templates(f.templates, style)]
    picked = rng.sample(cands, min(k, len(cands)))
    out = []
    for f in picked:
        if setting == "4-template" and template in f.templates:
            out.append((f, template))
        else:
            out.append((f, rng.choice(usable_templates(f.templates, style))))
    return out


def icl_prompt(
    target: IclFact, template: str, demos: Sequence[tuple[IclFact, str]], style: IclStyle
) -> str:
    """The instruction, the demonstrations ("Q: … / A: object.") and the probe ("Q: … / A:"),
    as in the paper's Appendix A.4."""
    lines = [INSTRUCTION[style]]
    for f, t in demos:
        lines.append(f"Q: {icl_query(t, f.subject.label, style)}")
        lines.append(f"A: {f.object.label}.")
    lines.append(f"Q: {icl_query(template, target.subject.label, style)}")
    lines.append("A:")
    return "\n".join(lines)


_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)
_ARTICLES = {"a", "an", "the"}


def normalize_answer(text: str, lang: str = "en") -> list[str]:
    """Tokenize and normalize for matching: NFKC, punctuation to spaces, each word lemmatized
    by simplemma (a real dictionary lemmatizer: ``species``, ``news`` and ``Athens`` stay what
    they are, ``cities`` → ``city``), case-folded, articles dropped (the paper lemmatizes
    before matching)."""
    import simplemma

    words = _PUNCT.sub(" ", unicodedata.normalize("NFKC", text)).split()
    out = []
    for w in words:
        lemma = simplemma.lemmatize(w, lang=lang).casefold()
        if lemma in _ARTICLES or w.casefold() in _ARTICLES:
            continue
        out.append(lemma)
    return out


def contains(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    """True when ``needle`` occurs as a contiguous run of ``haystack`` (and is not empty)."""
    n = len(needle)
    if n == 0:
        return False
    return any(list(haystack[i : i + n]) == list(needle) for i in range(len(haystack) - n + 1))


def answer_matches(generated: str, objects: Sequence[Entity]) -> bool:
    """Normalized containment: the generation contains a label of a correct object."""
    g = normalize_answer(generated)
    return any(contains(g, normalize_answer(lab)) for o in objects for lab in o.labels())


def same_answer(a: str, b: str) -> bool:
    """Bidirectional containment of two generations (consistency and sampling confidence)."""
    na, nb = normalize_answer(a), normalize_answer(b)
    return contains(na, nb) or contains(nb, na)


@dataclass(frozen=True)
class IclConfig:
    """Generation settings of BELIEF-ICL. Greedy answer up to ``max_new_tokens`` (cut at a
    newline); confidence = share of ``samples`` multinomial samples (temperature 1, seeds
    ``seed``…) that match the greedy answer (the paper uses 100 samples)."""

    max_new_tokens: int = 8
    samples: int = 100
    temperature: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ("\n",)


def belief_icl(
    runner: Runner,
    probes: Sequence[IclFact],
    pool: Sequence[IclFact],
    *,
    setting: IclSetting = "zero-shot",
    style: IclStyle = "mp",
    config: IclConfig | None = None,
    max_templates: int | None = None,
) -> list[PromptOutcome]:
    """BELIEF-ICL outcomes: for every probe fact and usable template of its relation, build
    the prompt, generate greedily, match by normalized containment, and estimate confidence
    by sampling. Rank is 1 for a correct greedy answer and 2 otherwise (only K = 1 metrics
    are meaningful here, as in the paper)."""
    cfg = config or IclConfig()
    plans = []
    reqs: list[Request] = []
    for f in probes:
        templates = usable_templates(f.templates, style)[:max_templates]
        for t in templates:
            # seeded by the probe itself, not its position: a fact gets the same demonstrations
            # whatever else is probed with it (probe runs batch facts)
            rng = random.Random(f"{cfg.seed}|{f.subject.key}|{f.relation}|{t}")
            demos = select_demonstrations(f, t, pool, setting, style, rng)
            prompt = icl_prompt(f, t, demos, style)
            greedy = GenerateRequest(prompt, cfg.max_new_tokens, 0.0, 1.0, cfg.seed, cfg.stop)
            samples = [GenerateRequest(prompt, cfg.max_new_tokens, cfg.temperature, 1.0,
                                       cfg.seed + s, cfg.stop) for s in range(cfg.samples)]
            reqs.append(greedy)
            reqs.extend(samples)
            plans.append((f, t, prompt, greedy, samples))
    res = dict(zip(reqs, runner.run(reqs), strict=True)) if reqs else {}
    out = []
    for f, t, prompt, greedy, samples in plans:
        g = _gen(res[greedy])
        ok = answer_matches(g, [f.object, *f.others])
        conf = (sum(1 for s in samples if same_answer(_gen(res[s]), g)) / len(samples)
                if samples else 1.0)
        out.append(PromptOutcome(f"{f.subject.key}|{f.relation}", f.relation, t, prompt,
                                 1 if ok else 2, g.strip(), conf, ok, "generation"))
    return out


def icl_report(outcomes: Sequence[PromptOutcome], *, runs: int = PAPER_RUNS, seed: int = 0,
               bins: int = 10) -> BeliefReport:
    """BELIEF metrics for ICL outcomes: Acc@1, MRR (of ranks 1/2: not meaningful), Consist@1
    by bidirectional containment, Overconf@1."""
    rep = belief_report(outcomes, ks=(1,), runs=runs, seed=seed, bins=bins)
    rep.consist_at_1 = consist_at_1(outcomes, same_answer)
    return rep


def _gen(r: object) -> str:
    if not isinstance(r, GenerateResult):
        raise ConfigError("expected a generation result")
    return r.text
