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
from typing import Any, Literal

import numpy as np

from kgprobe.errors import ConfigError
from kgprobe.probing.measures.common import (
    ClozeSentence,
    EndMarker,
    Entity,
    Fact,
    Runner,
    cloze_sentences,
)
from kgprobe.probing.requests import (
    BeamSearchRequest,
    BeamSearchResult,
    LogProbRequest,
    LogProbResult,
    NextTokenRequest,
    NextTokenResult,
    Request,
    TokenScoresRequest,
    TokenScoresResult,
)
from kgprobe.probing.verbalize import OBJECT, SUBJECT
from kgprobe.records import STYLE_OBJECT_LAST, derive_style


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
            rs = [LogProbRequest(c.context, cont, eos)  # each distinct sentence once
                  for cont, eos in end.continuations(c.cloze, item.fact.object)]
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
    strip: bool = True,
) -> dict[int, list[FactScore]]:
    """Precision@n for every n in ``ns`` from one next-token request per cloze.

    A top-n token hits when its text, stripped of surrounding whitespace, equals a label of o
    (case-folded with ``casefold``). Labels that are more than one token can never hit: the
    limitation the paper notes. ``strip=False`` compares the decoded token as it is, as the
    distractor paper's code does (``decode(x) in all_labels``): a word-start token such as
    " Paris" then never equals a label."""
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
        s = s.strip() if strip else s
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


RougeUnit = Literal["word", "char"]


def rouge_l(reference: str, candidate: str, beta: float = 1.0, unit: RougeUnit = "word") -> float:
    """ROUGE-L F-measure (Lin 2004) over case-folded word tokens:
    F = (1+β²)·R·P / (R + β²·P) with R = LCS/|ref|, P = LCS/|cand|. β=1 (F1) by default.

    ``unit="char"``: the LCS of the raw strings, character by character, case and spaces kept,
    as the distractor paper's code computes it (``know/generation.py``: ``lcs(candidate,
    reference)`` on ``str``); "Paris" and "Parisian" then share 5 of 8 characters."""
    if unit == "char":
        ref, cand = list(reference), list(candidate)
    elif unit == "word":
        ref, cand = _words(reference), _words(candidate)
    else:
        raise ConfigError(f"unknown ROUGE-L unit {unit!r}; use word or char")
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
    beta: float = 1.0, unit: RougeUnit = "word",
) -> list[FactScore]:
    """ROUGE-L measure: mean over clozes of max_{λ, b} ROUGE_L(λ, b) (0 for an empty beam);
    ``unit`` as in :func:`rouge_l`."""
    out = []
    for item, per in zip(items, beams, strict=True):
        labels = item.fact.object.labels()
        vals = [max((rouge_l(lab, b, beta, unit) for lab in labels for b in hyps), default=0.0)
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


KarrSampling = Literal["random", "first"]


def _strip_template(t: str) -> str:
    """The reference code's ``r_alias.strip('.').strip()``."""
    return t.strip(".").strip()


def karr_templates(templates: Sequence[str]) -> list[str]:
    """The templates KaRR scores: object-last statements only, as the distractor paper's code
    passes them to KaRR (``ends_with == OBJECT``); questions and object-inside ones are left out."""
    return [t for t in templates if SUBJECT in t and derive_style(t) == STYLE_OBJECT_LAST]


def karr(
    runner: Runner,
    items: Sequence[KarrItem],
    *,
    sample_k: int = 4,
    max_aliases: int = 4,
    max_templates: int = 4,
    threshold: float = 22.0,
    floor: float = 1e-6,
    seed: int = 0,
    sampling: KarrSampling = "random",
    include_own: bool = True,
) -> list[KarrScore]:
    """KaRR (Dong et al. 2023) as its authors' code computes it, the version the distractor
    paper ran (DistFactAssessLM ``src/know/MinKAssess/karr.py`` @94c7c8c: ``rr_bs_sub_replace``,
    ``rr_bs_rel_replace``, ``get_karr``); equal to it within 1e-4 on the 24 audit facts
    (``tests/fixtures/karr_reference``):

        N      = Σ_{β∈B(s,r)} P(β) Σ_{γ∈G, β⊂γ} P(γ|β)
        KaRR_s = N / (1/k Σ_{t∈T(r)} Σ_{s'∈S_k} Σ_{α'∈Λ(s')} P(β') Σ_λ P(γ(t, α', λ)|β'))
        KaRR_r = N / (1/k Σ_{α∈Λ(s)} P(α) Σ_{r'∈R_k} Σ_λ P(γ(t_{α,r'}, α, λ)|α))
        KaRR   = sqrt(KaRR_s · KaRR_r)   (a ratio of exactly 0 becomes ``floor``); knows = KaRR > 22

    What the reference code does, and so this function (docs/measures.md lists them):

    - P(x) is 1/perplexity of x encoded alone, its first token unscored
      (:class:`TokenScoresRequest`); a one-token x has no probability (NaN), so a one-token
      subject alias drops out of N and KaRR_r;
    - P(γ|y) is 1/perplexity of γ's last n tokens, n = the token count of
      ``' ' + γ.replace(y, '').strip()`` (wherever y stands in γ);
    - N pairs each β with every γ (all templates × subject aliases × object aliases) that
      contains β as a substring: "Armenia has its capital in" also takes
      "Republic of Armenia has its capital in Yerevan";
    - S_k is drawn from all subjects of r and R_k from all relations of o, the fact's own
      subject and relation included (``include_own=False``: only the others); each (α, r')
      draws one template t_{α,r'} of r';
    - aliases (``max_aliases``, label included) and templates (``max_templates``) are capped by
      a random draw (``sampling="first"``: the first ones, label first);
    - templates: object-last statements only (:func:`karr_templates`), stripped of a final
      period for N and KaRR_s, not for KaRR_r.

    A NaN or an empty denominator gives None for that ratio, and then for KaRR.

    Random draws are seeded per fact (``seed`` and the fact's key), so a fact's value does not
    depend on the other facts of its batch."""
    rng = random.Random(seed)

    def take(pool: Sequence[Any], k: int) -> list[Any]:
        k = min(k, len(pool))
        return list(pool[:k]) if sampling == "first" else rng.sample(list(pool), k)

    def aliases(e: Entity) -> list[str]:
        return take(e.labels(), max_aliases)

    texts: dict[str, None] = {}

    def cond(gamma: str, given: str) -> tuple[str, str]:
        count = " " + gamma.replace(given, "").strip()
        texts[gamma] = texts[count] = None
        return gamma, count

    def sent(text: str) -> str:
        texts[text] = None
        return text

    Terms = list[tuple[str, list[tuple[str, str]]]]
    plans: list[tuple[KarrItem, Terms, Terms, int, Terms, int]] = []
    for item in items:
        f = item.fact
        rng = random.Random(f"{seed}|{f.key}")  # `take` draws from this fact's own generator
        own_t = take(karr_templates(item.templates), max_templates)
        obj, subj = aliases(f.object), aliases(f.subject)
        stripped = [t2 for t2 in (_strip_template(t) for t in own_t) if t2]
        subs = ([f.subject] if include_own else []) + [
            e for e in item.other_subjects if e.key != f.subject.key]
        rels = [ts for ts in ([own_t] if include_own else []) + [
            take(karr_templates(ts), max_templates) for ts in item.other_relation_templates] if ts]
        if not (stripped and subs and rels and sample_k):
            plans.append((item, [], [], 0, [], 0))  # no KaRR whatever the model says: score nothing
            continue
        raw_betas = [t.replace(SUBJECT, a) for t in stripped for a in subj]
        gammas = [b.replace(OBJECT, o) for o in obj for b in raw_betas]
        betas = [b.replace(OBJECT, "").strip() for b in raw_betas]
        num = [(sent(b), [cond(g, b) for g in gammas if b in g]) for b in betas]

        s_k = take(subs, sample_k)
        den_s: Terms = []
        for t in stripped:
            for s2 in s_k:
                for a in aliases(s2):
                    beta = t.replace(SUBJECT, a).replace(OBJECT, "").strip()
                    den_s.append((sent(beta), [cond(t.replace(SUBJECT, a).replace(OBJECT, o), beta)
                                               for o in obj]))

        r_k = take(rels, sample_k)
        den_r: Terms = []
        for a in subj:
            conds: list[tuple[str, str]] = []
            for ts in r_k:
                t = take(ts, 1)[0]
                conds.extend(cond(t.replace(SUBJECT, a).replace(OBJECT, o), a) for o in obj)
            den_r.append((sent(a), conds))
        plans.append((item, num, den_s, len(subs), den_r, len(rels)))

    reqs: list[Request] = [TokenScoresRequest(t) for t in texts]
    res: dict[str, TokenScoresResult] = {}
    for text, got in zip(texts, runner.run(reqs) if reqs else [], strict=True):
        if not isinstance(got, TokenScoresResult):
            raise ConfigError("expected a token-scores result")
        res[text] = got

    def p_sent(text: str) -> float:
        return math.exp(res[text].mean_logprob)

    def p_cond(pair: tuple[str, str]) -> float:
        """The reference ``condition_prob``: labels of all but the last n tokens set to -100."""
        gamma, count = pair
        lps = res[gamma].token_logprobs
        n = len(res[count].token_ids)
        tail = lps[max(0, len(lps) - n):] if n else lps
        return math.exp(sum(tail) / len(tail)) if tail else math.nan

    def ratio(n: float, d: float) -> float | None:
        if not d or math.isnan(d) or math.isnan(n):
            return None
        return n / d or floor

    out = []
    for item, num, den_s, n_subs, den_r, n_rels in plans:
        n = 0.0
        for b, cs in num:
            pb, pg = p_sent(b), sum(p_cond(c) for c in cs)
            if not (math.isnan(pb) or math.isnan(pg)):  # the reference skips NaN terms in N
                n += pb * pg
        ds = sum(p_sent(b) * sum(p_cond(c) for c in cs) for b, cs in den_s)  # but not here
        dr = 0.0
        for a, cs in den_r:
            pa, pg = p_sent(a), sum(p_cond(c) for c in cs)
            if not (math.isnan(pa) or math.isnan(pg)):
                dr += pa * pg
        k_s = ratio(n, ds / min(sample_k, n_subs)) if n_subs else None
        k_r = ratio(n, dr / min(sample_k, n_rels)) if n_rels else None
        if k_s is None or k_r is None:
            out.append(KarrScore(item.fact, None, k_s, k_r, None))
            continue
        value = math.sqrt(k_s * k_r)
        out.append(KarrScore(item.fact, value, k_s, k_r, value > threshold))
    return out


def _logprob(r: object) -> float:
    if not isinstance(r, LogProbResult):
        raise ConfigError("expected a log-prob result")
    return r.logprob
