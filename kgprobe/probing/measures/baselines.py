"""The baseline measures of the distractor paper (its Table 2 and §4.2), on the same inputs.

    Probability   1/|C| Σ_c Σ_{λ∈Λ(o)} Pr(λ | c)
    Precision@n   1/|C| Σ_c 1[ top-n_{γ∈V} Pr(γ|c) ∩ Λ(o) ≠ ∅ ]        (single-token labels)
    ROUGE-L       1/|C| Σ_c max_{λ∈Λ(o), b∈B(c)} ROUGE_L(λ, b)          (B(c): beam outputs)
    BERT-score    1/|C| Σ_c max_{λ∈Λ(o), b∈B(c)} BERTScore(λ, b)
    LLM-as-judge  1/|C| Σ_c max_{b∈B(c)} LLMJudge(Λ(o), b)
    KaRR          Dong et al. 2023 (see :func:`karr`)

Every model call is a request to the engine (or the embedding / judge functions of
:mod:`kgprobe.probing`); this module only builds requests and does the arithmetic.
"""

from __future__ import annotations

import math
import random
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kgprobe.errors import ConfigError, InputError
from kgprobe.probing.measures.common import (
    ClozeSentence,
    EndMarker,
    Entity,
    Fact,
    Runner,
    cloze_sentences,
    make_cloze,
)
from kgprobe.probing.requests import (
    BeamSearchRequest,
    BeamSearchResult,
    LogProbRequest,
    LogProbResult,
    NextTokenRequest,
    NextTokenResult,
    Request,
    SpanScoreRequest,
    SpanScoreResult,
)
from kgprobe.probing.verbalize import OBJECT, SUBJECT


@dataclass(frozen=True)
class ProbeItem:
    """A fact and the templates its cloze sentences C(s, r) are built from."""

    fact: Fact
    templates: tuple[str, ...]


@dataclass
class FactScore:
    """A measure's value for one fact, with the per-cloze values it averages."""

    fact: Fact
    score: float | None
    per_cloze: list[float]


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _clozes(item: ProbeItem, max_subject_labels: int | None) -> list[ClozeSentence]:
    return cloze_sentences(item.templates, item.fact.subject, max_subject_labels=max_subject_labels)


# --- Probability ---------------------------------------------------------------------------------


def probability(
    runner: Runner,
    items: Sequence[ProbeItem],
    *,
    end: EndMarker | None = None,
    max_subject_labels: int | None = None,
) -> list[FactScore]:
    """Probability: the mean over clozes of Σ_λ Pr(λ|c). Table 2 scores the bare label
    (``end`` defaults to ``none``); pass an end marker to score λ + EOS instead."""
    end = end or EndMarker("none")
    plans = []
    reqs: list[Request] = []
    for item in items:
        per = []
        for c in _clozes(item, max_subject_labels):
            rs = []
            for lab in item.fact.object.labels():
                cont, eos = end.continuation(c.cloze, lab)
                rs.append(LogProbRequest(c.context, cont, eos))
            reqs.extend(rs)
            per.append(rs)
        plans.append((item, per))
    res = dict(zip(reqs, runner.run(reqs), strict=True))
    out = []
    for item, per in plans:
        vals = [sum(math.exp(_logprob(res[r])) for r in rs) for rs in per]
        out.append(FactScore(item.fact, _mean(vals), vals))
    return out


# --- Precision@n ---------------------------------------------------------------------------------


def precision_at_n(
    runner: Runner,
    items: Sequence[ProbeItem],
    ns: Sequence[int],
    *,
    casefold: bool = False,
    max_subject_labels: int | None = None,
) -> dict[int, list[FactScore]]:
    """Precision@n for every n in ``ns`` from one next-token request per cloze.

    A top-n token hits when its text, stripped of surrounding whitespace, equals a label of o
    (case-folded with ``casefold``). Labels that are more than one token can never hit: the
    limitation the paper notes."""
    if not ns or min(ns) < 1:
        raise ConfigError("Precision@n needs n >= 1")
    top = max(ns)
    plans = []
    reqs: list[Request] = []
    for item in items:
        per = [NextTokenRequest(c.context, top) for c in _clozes(item, max_subject_labels)]
        reqs.extend(per)
        plans.append((item, per))
    res = dict(zip(reqs, runner.run(reqs), strict=True))

    def norm(s: str) -> str:
        s = s.strip()
        return s.casefold() if casefold else s

    out: dict[int, list[FactScore]] = {n: [] for n in ns}
    for item, per in plans:
        labels = {norm(x) for x in item.fact.object.labels()}
        for n in ns:
            vals = []
            for r in per:
                nt = res[r]
                if not isinstance(nt, NextTokenResult):
                    raise ConfigError("expected a next-token result")
                vals.append(1.0 if any(norm(t) in labels for t in nt.tokens[:n]) else 0.0)
            out[n].append(FactScore(item.fact, _mean(vals), vals))
    return out


# --- beam outputs, ROUGE-L, BERTScore-style, LLM judge -------------------------------------------


def beam_outputs(
    runner: Runner,
    items: Sequence[ProbeItem],
    *,
    beam_width: int = 5,
    max_new_tokens: int = 10,
    max_subject_labels: int | None = None,
) -> list[list[tuple[ClozeSentence, list[str]]]]:
    """B(c) for every cloze of every item: the finished beam hypotheses (stripped text)."""
    plans = []
    reqs: list[Request] = []
    for item in items:
        per = [(c, BeamSearchRequest(c.context, beam_width, max_new_tokens))
               for c in _clozes(item, max_subject_labels)]
        reqs.extend(r for _, r in per)
        plans.append(per)
    res = dict(zip(reqs, runner.run(reqs), strict=True))
    out = []
    for per in plans:
        row = []
        for c, r in per:
            b = res[r]
            if not isinstance(b, BeamSearchResult):
                raise ConfigError("expected a beam-search result")
            row.append((c, [h.text.strip() for h in b.hypotheses]))
        out.append(row)
    return out


_WORD = re.compile(r"\w+", re.UNICODE)


def _words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def _lcs(a: Sequence[str], b: Sequence[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge_l(reference: str, candidate: str, beta: float = 1.0) -> float:
    """ROUGE-L F-measure (Lin 2004) over case-folded word tokens:
    F = (1+β²)·R·P / (R + β²·P) with R = LCS/|ref|, P = LCS/|cand|. β=1 (F1) by default."""
    ref, cand = _words(reference), _words(candidate)
    if not ref or not cand:
        return 0.0
    lcs = _lcs(ref, cand)
    if lcs == 0:
        return 0.0
    r, p = lcs / len(ref), lcs / len(cand)
    return (1 + beta**2) * r * p / (r + beta**2 * p)


def bertscore_f1(ref_vecs: np.ndarray, cand_vecs: np.ndarray,
                 ref_weights: np.ndarray | None = None,
                 cand_weights: np.ndarray | None = None) -> float:
    """BERTScore F1 (Zhang et al. 2020) from L2-normalized token vectors, greedy matching, no
    idf and no baseline rescaling: R = Σ_i w_i max_j cos(r_i, c_j) / Σ_i w_i over the
    reference, P likewise over the candidate, F = 2PR/(P+R). Weights default to 1; the
    ``bert-score`` package matches against every token, [CLS]/[SEP] included, and weights
    those 0 (:func:`kgprobe.probing.embeddings.bertscore_embeddings` gives both)."""
    if ref_vecs.shape[0] == 0 or cand_vecs.shape[0] == 0:
        return 0.0
    wr = np.ones(ref_vecs.shape[0]) if ref_weights is None else np.asarray(ref_weights, float)
    wc = np.ones(cand_vecs.shape[0]) if cand_weights is None else np.asarray(cand_weights, float)
    if wr.sum() <= 0 or wc.sum() <= 0:
        return 0.0
    sim = ref_vecs @ cand_vecs.T
    r = float((sim.max(axis=1) * wr).sum() / wr.sum())
    p = float((sim.max(axis=0) * wc).sum() / wc.sum())
    return 0.0 if p + r <= 0 else 2 * p * r / (p + r)


def rouge_measure(
    items: Sequence[ProbeItem], beams: Sequence[Sequence[tuple[ClozeSentence, list[str]]]],
    beta: float = 1.0,
) -> list[FactScore]:
    """ROUGE-L measure: mean over clozes of max_{λ, b} ROUGE_L(λ, b) (0 for an empty beam)."""
    out = []
    for item, per in zip(items, beams, strict=True):
        labels = item.fact.object.labels()
        vals = [max((rouge_l(lab, b, beta) for lab in labels for b in hyps), default=0.0)
                for _, hyps in per]
        out.append(FactScore(item.fact, _mean(vals), vals))
    return out


def embedding_measure(
    items: Sequence[ProbeItem],
    beams: Sequence[Sequence[tuple[ClozeSentence, list[str]]]],
    *,
    model_dir: str | Path | None = None,
    encode: Callable[[Sequence[str]], list[tuple[np.ndarray, np.ndarray]]] | None = None,
) -> list[FactScore]:
    """BERTScore measure: mean over clozes of max_{λ, b} BERTScore-F1(λ, b).

    Token vectors and weights come from
    :func:`kgprobe.probing.embeddings.bertscore_embeddings` (the packaged MiniLM by default,
    or ``model_dir``; equal to the ``bert-score`` package on the same encoder and layer);
    ``encode`` replaces that function if given."""
    if encode is None:
        from kgprobe.probing.embeddings import bertscore_embeddings

        def encode(texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
            return bertscore_embeddings(texts, model_dir)

    texts: list[str] = []
    for item, per in zip(items, beams, strict=True):
        texts.extend(item.fact.object.labels())
        for _, hyps in per:
            texts.extend(hyps)
    uniq = list(dict.fromkeys(texts))
    vecs = dict(zip(uniq, encode(uniq), strict=True)) if uniq else {}
    out = []
    for item, per in zip(items, beams, strict=True):
        labels = item.fact.object.labels()
        vals = [max((bertscore_f1(vecs[lab][0], vecs[b][0], vecs[lab][1], vecs[b][1])
                     for lab in labels for b in hyps), default=0.0) for _, hyps in per]
        out.append(FactScore(item.fact, _mean(vals), vals))
    return out


#: The judge prompt of the distractor paper (its Appendix D, adapted from Sun et al. 2024),
#: with the examples it lists; [QUERY], [REFERENCES] and [PREDICTION] are filled in.
JUDGE_PROMPT = """You need to check whether the prediction of a question-answering system to a query is correct. You should make the judgment based on a list of ground truth answers provided to you in a form of a list of aliases of the gold answer. Your response should be "correct" if the prediction is correct or "incorrect" if the prediction is wrong.
Query: The author of The Taming of the Shrew (published in 2002) is
Ground truth: ["William Shakespeare", "Roma Gill"]
Prediction: W Shakespeare
Correctness: correct
Query: The author of The Taming of the Shrew (published in 2002)
Ground truth: ["William Shakespeare", "Roma Gill"]
Prediction: Roma Gill and W Shakespeare
Correctness: correct
Query: The author of The Taming of the Shrew (published in 2002)
Ground truth: ["William Shakespeare", "Roma Gill"]
Prediction: Roma Shakespeare
Correctness: incorrect
Query: The country where Maharashtra Metro Rail Corporation Limited is located is
Ground truth: ["India"]
Prediction: Maharashtra
Correctness: incorrect
Query: The job of Song Kang-ho in Parasite (2019) is _
Ground truth: ["actor"]
Prediction: He plays the role of Kim Ki-taek, the patriarch of the Kim family.
Correctness: correct
Query: The era to which Michael Oakeshott belongs is
Ground truth: ["20th-century philosophy"]
Prediction: 20th century,
Correctness: correct
Query: The department where Edward Tise (known for Full Metal Jacket (1987)) was is
Ground truth: ["sound department"]
Prediction: 2nd Infantry Division, United States Army
Correctness: incorrect
Query: The wine region to which Finger Lakes AVA belongs is
Ground truth: ["New York wine"]
Prediction: Finger Lakes AVA
Correctness: incorrect
Query: [QUERY]
Ground truth: [REFERENCES]
Prediction: [PREDICTION]
Correctness:"""


def judge_prompt(query: str, references: Sequence[str], prediction: str) -> str:
    """The Appendix D prompt for one (cloze, Λ(o), beam output)."""
    import json

    refs = json.dumps(list(references), ensure_ascii=False)
    return (JUDGE_PROMPT.replace("[QUERY]", query).replace("[REFERENCES]", refs)
            .replace("[PREDICTION]", prediction))


#: Words that make a verdict sentence anything but a plain "correct": negations, the opposite
#: verdicts and hedges ("partially correct" is not the binary verdict the prompt asks for).
_NOT_CORRECT = frozenset({
    "incorrect", "not", "no", "n't", "never", "wrong", "false", "untrue", "partially", "partly",
    "somewhat", "mostly", "neither", "nor", "hardly", "barely", "in-correct", "unsure",
})
_VERDICT_WORDS = frozenset({"correct", "incorrect", "wrong", "right", "yes", "no", "true", "false"})
_WORD = re.compile(r"n't|[a-z]+(?:-[a-z]+)*")


def parse_verdict(text: str) -> float:
    """1.0 for a plain "correct" verdict, 0.0 for anything else.

    The verdict is the first sentence of the answer that holds a verdict word (correct,
    incorrect, wrong, right, yes, no, true, false), after an optional echoed ``Correctness:``
    and leaving out sentences that end in ``?`` (an echo of the question, as in "Correct? No,
    incorrect."). It is correct only when it says ``correct`` and holds no negation, opposite or
    hedge (``not``, ``n't``, ``no``, ``incorrect``, ``wrong``, ``partially`` …): "not correct",
    "isn't correct" and "partially correct" are 0, as are answers with no verdict. Case, quotes,
    markdown and punctuation are ignored."""
    t = unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'").strip()
    t = re.sub(r"^\W*correctness\W*", "", t)
    for sentence in re.findall(r"[^.!;:\n?]*[.!;:\n?]?", t):
        if sentence.rstrip().endswith("?"):
            continue
        words = _WORD.findall(sentence.replace("n't", " n't"))
        if not _VERDICT_WORDS.intersection(words):
            continue
        return 1.0 if "correct" in words and not _NOT_CORRECT.intersection(words) else 0.0
    return 0.0


def judge_measure(
    items: Sequence[ProbeItem],
    beams: Sequence[Sequence[tuple[ClozeSentence, list[str]]]],
    complete: Callable[[str], str] | None = None,
) -> list[FactScore]:
    """LLM-as-a-judge: mean over clozes of max_b LLMJudge(Λ(o), b).

    ``complete(prompt) -> text`` defaults to :class:`kgprobe.probing.judge.ChatJudge` from the
    environment, which raises a one-line ``ConfigError`` when no endpoint is configured."""
    if complete is None:
        from kgprobe.probing.judge import ChatJudge

        complete = ChatJudge.from_env().complete
    out = []
    for item, per in zip(items, beams, strict=True):
        labels = item.fact.object.labels()
        vals = []
        for c, hyps in per:
            verdicts = [parse_verdict(complete(judge_prompt(c.context, labels, b)))
                        for b in hyps if b]
            vals.append(max(verdicts, default=0.0))
        out.append(FactScore(item.fact, _mean(vals), vals))
    return out


# --- KaRR ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KarrItem:
    """Inputs of KaRR for one fact: its relation's templates, other subjects of the same
    relation (the subject-replacement baseline) and templates of other relations the object
    is an object of (the relation-replacement baseline)."""

    fact: Fact
    templates: tuple[str, ...]
    other_subjects: tuple[Entity, ...] = ()
    other_relation_templates: tuple[tuple[str, ...], ...] = ()


@dataclass
class KarrScore:
    fact: Fact
    karr: float | None
    karr_subject: float | None
    karr_relation: float | None
    knows: bool | None


def _mean_prob(r: object) -> float:
    """exp(mean token log-prob) = 1/perplexity, the probability KaRR's code uses."""
    if isinstance(r, LogProbResult | SpanScoreResult):
        return math.exp(r.mean_logprob)
    raise ConfigError("expected a log-prob or span result")


def karr(
    runner: Runner,
    items: Sequence[KarrItem],
    *,
    sample_k: int = 4,
    max_aliases: int = 4,
    threshold: float = 22.0,
    floor: float = 1e-6,
    seed: int = 0,
) -> list[KarrScore]:
    """KaRR (Dong et al. 2023, as implemented by its authors and used by the distractor paper):

        N    = Σ_{β∈B(s,r)} P(β) Σ_{λ∈Λ(o)} P(λ|β)
        KaRR_s = N / (1/k Σ_{s'∈S_k} Σ_{β'∈B(s',r)} P(β') Σ_λ P(λ|β'))
        KaRR_r = N / (1/k Σ_{α∈Λ(s)} P(α) Σ_{r'∈R_k} Σ_λ P(γ(α, r', λ) | α))
        KaRR = sqrt(KaRR_s · KaRR_r);  knows = KaRR > threshold (22)

    β = a template of r filled with a subject alias and cut before the object; P(x) and
    P(x|y) are per-token geometric means (exp of the mean token log-probability, i.e.
    1/perplexity, as in the reference code); S_k = k other subjects of r and R_k = k other
    relations of o, sampled with ``seed`` (one random template each); aliases are capped at
    ``max_aliases``; a zero ratio is floored at ``floor``. A component without any sampled
    subject/relation makes KaRR None; then nothing is scored for the fact and both ratios are
    None too (on the demo sample 45 of 60 facts have no other relation of their object; their
    subject ratios used to be computed for nothing).
    """
    rng = random.Random(seed)
    plans = []
    reqs: list[Request] = []

    def sent(text: str) -> SpanScoreRequest:
        return SpanScoreRequest(text, 0, len(text))

    def beta_terms(
        subject: Entity, templates: Sequence[str], obj: Entity
    ) -> list[tuple[Request, list[Request]]]:
        terms: list[tuple[Request, list[Request]]] = []
        for t in templates:
            for a in subject.labels(max_aliases):
                try:
                    c = make_cloze(t.strip(), a)
                except InputError:  # object-inside templates give no cloze: skipped
                    break
                conts: list[Request] = [LogProbRequest(c.context, c.continuation(lab))
                                        for lab in obj.labels(max_aliases)]
                terms.append((sent(c.context), conts))
        return terms

    for item in items:
        f = item.fact
        num = beta_terms(f.subject, item.templates, f.object)
        subs = list(item.other_subjects)
        s_k = rng.sample(subs, min(sample_k, len(subs)))
        den_s = [beta_terms(s2, item.templates, f.object) for s2 in s_k]
        rels = [list(ts) for ts in item.other_relation_templates if ts]
        r_k = rng.sample(rels, min(sample_k, len(rels)))
        r_templates = [rng.choice(ts) for ts in r_k]
        den_r = []
        for a in f.subject.labels(max_aliases):
            conds = []
            for t in r_templates:
                if SUBJECT not in t or OBJECT not in t:
                    continue
                for lab in f.object.labels(max_aliases):
                    conds.append(_given_subject(t, a, lab))
            den_r.append((sent(a), conds))
        den_r = [(b, cs) for b, cs in den_r if cs]  # an alias without a sentence adds 0
        if s_k and den_r:  # else KaRR is None whatever the model says: score nothing
            for beta, conts in num + [x for d in den_s for x in d] + den_r:
                reqs.append(beta)
                reqs.extend(conts)
        plans.append((item, num, den_s, den_r, len(s_k), len(r_templates)))
    res = dict(zip(reqs, runner.run(reqs), strict=True))

    def total(terms: Sequence[tuple[Request, Sequence[Request]]]) -> float:
        return sum(_mean_prob(res[b]) * sum(_mean_prob(res[c]) for c in cs) for b, cs in terms)

    out = []
    for item, num, den_s, den_r, ks, kr in plans:
        if not ks or not den_r:
            out.append(KarrScore(item.fact, None, None, None, None))
            continue
        n = total(num)
        ds = sum(total(d) for d in den_s) / ks
        dr = total(den_r) / kr  # den_r is not empty, so neither is the relation sample
        k_s = None if not ds else max(n / ds, floor)
        k_r = None if not dr else max(n / dr, floor)
        if k_s is None or k_r is None:
            out.append(KarrScore(item.fact, None, k_s, k_r, None))
            continue
        value = math.sqrt(k_s * k_r)
        out.append(KarrScore(item.fact, value, k_s, k_r, value > threshold))
    return out


def _given_subject(template: str, subject: str, obj: str) -> Request:
    """P(γ | α): the filled sentence's tokens after the subject, given the text up to it."""
    text = template.strip().replace(SUBJECT, subject).replace(OBJECT, obj)
    before = template.strip().split(SUBJECT)[0].replace(OBJECT, obj)
    end = len(before) + len(subject)
    if not before:
        return LogProbRequest(subject, text[end:])
    return SpanScoreRequest(text, end, len(text)) if end < len(text) else SpanScoreRequest(text, 0, len(text))


def _logprob(r: object) -> float:
    if not isinstance(r, LogProbResult):
        raise ConfigError("expected a log-prob result")
    return r.logprob
