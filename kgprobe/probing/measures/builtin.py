"""The built-in measures, registered for ``kgprobe probe --measure``: each is a thin adapter
from the loop's :class:`~kgprobe.probing.measures.registry.FactInput` to the library function
of its paper (the arithmetic stays in :mod:`.distractors`, :mod:`.baselines`, :mod:`.belief`,
:mod:`.information`, :mod:`.factor`). Property names and formulas: docs/measures.md.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypedDict

from kgprobe.probing.measures.common import Entity, Fact, Runner
from kgprobe.probing.measures.registry import (
    Aggregate,
    FactInput,
    Measure,
    MeasureValue,
    Param,
    RunContext,
    _is_num,
    register,
    verbalizer_config,
)


def _cap(e: Entity, n: int | None) -> Entity:
    """``e`` with at most ``n`` labels (label + aliases), so library functions that read every
    label honour the run's --max-labels."""
    labels = e.labels(n)
    return Entity(labels[0] if labels else e.label, tuple(labels[1:]), e.qid, e.facts)


def _fact(f: FactInput, ctx: RunContext) -> Fact:
    return Fact(f.subject, f.pid, _cap(f.object, ctx.max_object_labels), f.key)


def _subject_capped(f: FactInput, ctx: RunContext) -> Fact:
    return Fact(_cap(f.subject, ctx.max_subject_labels), f.pid,
                _cap(f.object, ctx.max_object_labels), f.key)


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _none(reason: str, **stored: Any) -> MeasureValue:
    """Not scored, and why (``stored``: values kept even so)."""
    return MeasureValue(None, reason=reason, stored=stored)


def _values(score: float | None, **stored: Any) -> MeasureValue:
    return MeasureValue(score, stored=stored)


# --- distractor paper §3.2: Min@n / Avg@n ---------------------------------------------------------


class _DistractorK(Measure):
    agg: ClassVar[str] = "min"
    section = "Ammar Khodja et al. 2025, §3.2 eq. 1–3"
    needs = frozenset({"templates", "distractors", "past"})
    uses_distractors = True
    extras = ()
    later_rounds = False  # one engine run (distractor_measure)

    def score(self, runner: Runner, facts: Sequence[FactInput], ctx: RunContext) -> list[MeasureValue]:
        from kgprobe.probing.measures.distractors import (
            DistractorItem,
            distractor_measure,
            knowledge_given_cloze,
        )

        ok = [f for f in facts if f.distractors]
        items = [DistractorItem(Fact(f.subject, f.pid, f.object, f.key), f.templates,
                                tuple(dict.fromkeys([*f.distractors, *f.past])))
                 for f in ok]
        scored = distractor_measure(
            runner, items, end=ctx.end, max_subject_labels=ctx.max_subject_labels,
            max_object_labels=ctx.max_object_labels,
        ) if items else []
        by_key = {fp.fact.key: fp for fp in scored}
        out: list[MeasureValue] = []
        for f in facts:
            fp = by_key.get(f.key)
            if fp is None:
                out.append(_none(f.distractor_reason or "no distractor found"))
                continue
            if not fp.clozes:
                out.append(_none("no usable cloze sentence"))
                continue
            order = list(dict.fromkeys([*f.distractors, *f.past]))
            n_ds = len(f.distractors)
            past_pos = [order.index(p) for p in f.past]
            per = [knowledge_given_cloze(c.log_pl_true, c.log_pl_distractors[:n_ds], None,
                                         "min" if self.agg == "min" else "avg")
                   for c in fp.clozes]
            got = [v for v in per if v is not None]
            stale = None
            if past_pos:
                flags = [1.0 if max(c.log_pl_distractors[i] for i in past_pos) > c.log_pl_true
                         else 0.0 for c in fp.clozes]
                stale = sum(flags) / len(flags)
            out.append(MeasureValue(_mean(got), stored={"stale": stale},
                                    details=_distractor_details(fp, n_ds, f.past, f.object, ctx.end)))
        return out


class ClozeDetail(TypedDict):
    """One cloze sentence of a fact as scored (:func:`_distractor_details`)."""

    template: str
    subject_label: str
    context: str
    sentence: str
    scored: str
    log_pl_object: float


class CandidateDetail(TypedDict):
    """One distractor (or past value) of a fact: its log-plausibility and text per cloze."""

    qid: str | None
    label: str
    role: str  # "distractor" or "past value"
    also_past_value: bool
    log_pl: list[float]
    scored: list[str]


class DistractorDetails(TypedDict):
    """A distractor measure's per-fact record (``MeasureValue.details``; results files)."""

    templates: list[str]
    clozes: list[ClozeDetail]
    distractors: list[CandidateDetail]


def _distractor_details(fp: Any, n_ds: int, past: Sequence[Entity], obj: Entity,
                        end: Any) -> DistractorDetails:
    """What the per-fact records (kgprobe.reports.results) show of one scored fact: its cloze
    sentences (with the true object, as the run's verbalizer writes it), the label's text as
    scored (context + continuation with the end marker: what the careful-vs-raw section
    compares), and every distractor's (and past value's) log-plausibility and scored text on
    each. Keys starting with ``_`` never reach the graph."""
    past_qids = {e.qid for e in past}

    def scored(c: Any, e: Entity) -> str:
        return c.sentence.context + end.continuation(c.sentence.cloze, e.name)[0]

    return {
        "templates": list(dict.fromkeys(c.sentence.template for c in fp.clozes)),
        "clozes": [{"template": c.sentence.template, "subject_label": c.sentence.subject_label,
                    "context": c.sentence.context,
                    "sentence": c.sentence.cloze.sentence(obj.name),
                    "scored": scored(c, obj),
                    "log_pl_object": float(c.log_pl_true)}
                   for c in fp.clozes],
        "distractors": [
            {"qid": e.qid, "label": e.label,
             "role": "distractor" if i < n_ds else "past value",
             "also_past_value": i < n_ds and e.qid in past_qids,
             "log_pl": [float(c.log_pl_distractors[i]) for c in fp.clozes],
             "scored": [scored(c, e) for c in fp.clozes]}
            for i, e in enumerate(fp.distractors)
        ],
    }


@register
class KMin(_DistractorK):
    name = "kmin"
    agg = "min"
    summary = ("Min@n: 1 for a cloze sentence only if the object beats all n distractors; "
               "mean over the fact's cloze sentences")

    @classmethod
    def chance(cls, n: int | None) -> tuple[float, str] | None:
        """A model whose plausibilities of the object and its n distractors are exchangeable
        (no knowledge, no ties) ranks the object first on a cloze with probability 1/(n+1), so
        E[Min@n] = 1/(n+1) (eq. 2-3 with Agg = min; not a number the paper states). A fact with
        fewer than n distractors has a higher chance level; a tie counts as a loss."""
        if not n:
            return None
        return 1.0 / (n + 1), f"1/(n+1) for n = {n} distractors"


@register
class KAvg(_DistractorK):
    name = "kavg"
    agg = "avg"
    summary = "Avg@n: share of the n distractors the object beats; mean over cloze sentences"

    @classmethod
    def chance(cls, n: int | None) -> tuple[float, str] | None:
        """With exchangeable plausibilities (no knowledge, no ties) the object beats each
        distractor with probability 1/2, so E[Avg@n] = 1/2 for any n."""
        return 0.5, "1/2 (each distractor beaten with probability 1/2)"


# --- distractor paper Table 2 baselines ------------------------------------------------------------


@register
class Probability(Measure):
    name = "probability"
    section = "Ammar Khodja et al. 2025, Table 2 (Probability)"
    summary = "mean over cloze sentences of Σ_λ Pr(λ | c), the bare label (no end marker)"
    has_known = False
    later_rounds = False  # one engine run

    def score(self, runner: Runner, facts: Sequence[FactInput], ctx: RunContext) -> list[MeasureValue]:
        from kgprobe.probing.measures.baselines import ProbeItem, probability

        items = [ProbeItem(_fact(f, ctx), f.templates) for f in facts]
        res = probability(runner, items, max_subject_labels=ctx.max_subject_labels)
        return [_values(r.score) if r.score is not None else _none("no usable cloze sentence")
                for r in res]


@register
class PrecisionAtN(Measure):
    name = "precision_at_n"
    section = "Ammar Khodja et al. 2025, Table 2 (Precision@n)"
    summary = ("share of cloze sentences whose top-k next tokens contain a label of the object "
               "(single-token labels only, the paper's stated limitation)")
    params = (Param("k", 1, "top-k next tokens", "k"),
              Param("strip", "yes", "strip a token's surrounding whitespace before comparing it "
                    "with the labels (the paper's text); no: compare the decoded token as it is "
                    "(the authors' code, where ' Paris' never equals 'Paris')", "st",
                    ("yes", "no"), str))
    has_known = False
    later_rounds = False  # one engine run

    def score(self, runner: Runner, facts: Sequence[FactInput], ctx: RunContext) -> list[MeasureValue]:
        from kgprobe.probing.measures.baselines import ProbeItem, precision_at_n

        k = max(1, int(self.settings["k"]))
        items = [ProbeItem(_fact(f, ctx), f.templates) for f in facts]
        res = precision_at_n(runner, items, [k], max_subject_labels=ctx.max_subject_labels,
                             strip=self.settings["strip"] == "yes")[k]
        return [_values(r.score) if r.score is not None else _none("no usable cloze sentence")
                for r in res]


class _BeamMeasure(Measure):
    params: ClassVar[tuple[Param, ...]] = (Param("beam", 5, "beam width (and outputs kept)", "b"),
              Param("max_new_tokens", 10, "tokens generated per beam", "t"))
    has_known = False

    def _beams(self, runner: Runner, facts: Sequence[FactInput], ctx: RunContext) -> Any:
        from kgprobe.probing.measures.baselines import ProbeItem, beam_outputs

        items = [ProbeItem(_fact(f, ctx), f.templates) for f in facts]
        return items, beam_outputs(runner, items, beam_width=int(self.settings["beam"]),
                                   max_new_tokens=int(self.settings["max_new_tokens"]),
                                   max_subject_labels=ctx.max_subject_labels)


@register
class RougeL(_BeamMeasure):
    name = "rouge_l"
    section = "Ammar Khodja et al. 2025, Table 2 (ROUGE-L)"
    summary = "mean over cloze sentences of the best ROUGE-L F1 between a label and a beam output"
    params = (*_BeamMeasure.params,
              Param("unit", "word", "LCS over case-folded words (ROUGE-L as Lin 2004 defines it) "
                    "or over raw characters (the distractor paper's code)", "u",
                    ("word", "char"), str))

    def score(self, runner: Runner, facts: Sequence[FactInput], ctx: RunContext) -> list[MeasureValue]:
        from kgprobe.probing.measures.baselines import rouge_measure

        items, beams = self._beams(runner, facts, ctx)
        return [_values(r.score) if r.score is not None else _none("no usable cloze sentence")
                for r in rouge_measure(items, beams, unit="char" if self.settings["unit"] == "char"
                                       else "word")]


@register
class BertScore(_BeamMeasure):
    name = "bertscore"
    section = "Ammar Khodja et al. 2025, Table 2 (BERT-score)"
    summary = ("mean over cloze sentences of the best BERTScore F1 between a label and a beam "
               "output (packaged MiniLM encoder, last layer, no idf, no rescaling)")

    def score(self, runner: Runner, facts: Sequence[FactInput], ctx: RunContext) -> list[MeasureValue]:
        from kgprobe.probing.measures.baselines import embedding_measure

        items, beams = self._beams(runner, facts, ctx)
        return [_values(r.score) if r.score is not None else _none("no usable cloze sentence")
                for r in embedding_measure(items, beams)]


@register
class Judge(_BeamMeasure):
    name = "judge"
    # 2: negated, hedged and question-echo verdicts ("not correct", "Correct? No, incorrect.")
    # read as 0 (parse_verdict); values stored under version 1 are recomputed
    version = 2
    section = "Ammar Khodja et al. 2025, Table 2 and Appendix D (LLM-as-a-judge)"
    summary = ("mean over cloze sentences of the best judge verdict over the beam outputs "
               "(an OpenAI-compatible endpoint: KGPROBE_JUDGE_URL, KGPROBE_JUDGE_MODEL)")

    def available(self) -> str | None:
        from kgprobe.probing.judge import ENV_MODEL, ENV_URL

        if not os.environ.get(ENV_URL, "").strip():
            return (f"measure judge needs an OpenAI-compatible endpoint: set {ENV_URL} "
                    f"(and {ENV_MODEL}); leave --measure judge out otherwise")
        return None

    def config(self, ctx: RunContext) -> dict[str, object]:
        from kgprobe.probing.judge import ENV_MODEL, ENV_URL

        return {**super().config(ctx), "judge_url": os.environ.get(ENV_URL, ""),
                "judge_model": os.environ.get(ENV_MODEL, "")}

    def score(self, runner: Runner, facts: Sequence[FactInput], ctx: RunContext) -> list[MeasureValue]:
        from kgprobe.probing.measures.baselines import judge_measure

        items, beams = self._beams(runner, facts, ctx)
        return [_values(r.score) if r.score is not None else _none("no usable cloze sentence")
                for r in judge_measure(items, beams)]


@register
class Karr(Measure):
    name = "karr"
    # 2: computed as the authors' code does (DistFactAssessLM karr.py @94c7c8c, equal within
    # 1e-4 on the 24 audit facts): sentences scored alone with the first token unscored,
    # last-n-token targets, substring pairing in N, the fact's own subject and relation in the
    # samples, object-last templates only; values stored under version 1 are recomputed
    version = 2
    section = "Dong et al. 2023 (KaRR), as a baseline in Ammar Khodja et al. 2025 Table 2"
    summary = ("KaRR = sqrt(KaRR_s · KaRR_r), subject- and relation-replacement ratios, as the "
               "authors' code computes them; known when KaRR > threshold (22)")
    params = (Param("sample_k", 4, "other subjects / relations sampled", "k"),
              Param("max_aliases", 4, "aliases per entity", "a"),
              Param("threshold", 22.0, "KaRR above this = knows", "th", kind=float),
              Param("sampling", "random", "draw subjects, relations, templates and aliases at "
                    "random (seeded; the authors' code) or take the first ones", "smp",
                    ("random", "first"), str),
              Param("own", "yes", "the fact's own subject and relation are in the samples "
                    "(the authors' code; Dong et al.'s marginals) or only the others", "own",
                    ("yes", "no"), str))
    needs = frozenset({"templates", "other_subjects", "object_relations"})
    extras = ("karr_s", "karr_r")
    has_known = False
    uses_labels = False  # KaRR has its own alias cap and its own probability (no end marker)

    def config(self, ctx: RunContext) -> dict[str, object]:
        return {**super().config(ctx), "seed": ctx.seed, "label_rule": ctx.label_rule.name,
                **verbalizer_config(ctx)}

    def score(self, runner: Runner, facts: Sequence[FactInput], ctx: RunContext) -> list[MeasureValue]:
        from kgprobe.probing.measures.baselines import KarrItem, karr

        items = [KarrItem(Fact(f.subject, f.pid, f.object, f.key), f.templates,
                          f.other_subjects, f.object_relation_templates) for f in facts]
        res = karr(runner, items, sample_k=int(self.settings["sample_k"]),
                   max_aliases=int(self.settings["max_aliases"]),
                   threshold=float(self.settings["threshold"]), seed=ctx.seed,
                   sampling="first" if self.settings["sampling"] == "first" else "random",
                   include_own=self.settings["own"] == "yes")
        out: list[MeasureValue] = []
        for r in res:
            if r.karr is None:
                out.append(_none("KaRR needs an object-last template and a scorable denominator",
                                 karr_s=r.karr_subject, karr_r=r.karr_relation))
            else:
                out.append(_values(r.karr, karr_s=r.karr_subject, karr_r=r.karr_relation,
                                   known=bool(r.knows)))
        return out


# --- BELIEF -----------------------------------------------------------------------------------------


@register
class Belief(Measure):
    name = "belief"
    section = "Zhao et al. 2024 (BELIEF), eq. 1–6; BELIEF-ICL §5.1 with icl=…"
    summary = ("per fact over its prompts (templates × subject labels): hit@1 share (score), "
               "mean rank of the gold object, hit@K, reciprocal rank, consistency, confidence; "
               "per relation Acc@1/Acc@K/MRR with range and sd over N seeded prompt sets, "
               "Consist@1 and Overconf@K with its calibration bins")
    params = (Param("k", 10, "K of hit@K / Acc@K / Overconf@K", "k"),
              Param("mode", "auto", "rank over the vocabulary (single-token gold) or the "
                    "candidate set (gold objects + distractors)", "m",
                    ("auto", "vocab", "candidates"), str),
              Param("runs", 50_000, "N seeded trials (one prompt per fact, one template per "
                    "relation) for the fluctuation (report); the paper's N", "r", stored=False),
              Param("bins", 10, "calibration bins of Overconf (report)", "bins", stored=False),
              Param("icl", "none", "BELIEF-ICL: none (rank the gold object after the cloze, "
                    "no instruction), zero (zero-shot), random / relation / template "
                    "(4 demonstrations: any relation, same relation, same template)", "icl",
                    ("none", "zero", "random", "relation", "template"), str),
              Param("style", "mp", "BELIEF-ICL prompt style: mp (mask prediction) or qa "
                    "(question templates)", "st", ("mp", "qa"), str),
              Param("samples", 100, "BELIEF-ICL: sampled generations for confidence", "smp"),
              Param("max_new_tokens", 8, "BELIEF-ICL: tokens of the greedy answer", "t"))
    needs = frozenset({"templates", "distractors", "other_objects"})
    uses_distractors = True
    extras = ("rank", "hit_k", "rr", "consistency", "confidence", "ranks", "confidences", "scale",
              "templates")
    has_known = False
    # 2: one rank scale per fact ("scale": the vocabulary where the fact has single-token prompts,
    # else the candidate set), its prompts' template indices ("templates") for the report's
    # template-sharing trials; values stored under version 1 mixed scales and are recomputed
    version = 2

    ICL_SETTING: ClassVar[dict[str, str]] = {"zero": "zero-shot", "random": "4-random",
                                               "relation": "4-relation", "template": "4-template"}

    def __init__(self, settings: Mapping[str, Any] | None = None) -> None:
        from kgprobe.errors import ConfigError

        super().__init__(settings)
        icl = self.settings["icl"]
        if icl == "none" and any(self.settings[p] != d for p, d in
                                 (("style", "mp"), ("samples", 100), ("max_new_tokens", 8))):
            raise ConfigError("measure belief: style, samples and max_new_tokens are BELIEF-ICL "
                              "parameters; set icl=zero|random|relation|template")
        if icl != "none":
            # the needs follow the parameters: a BELIEF-ICL prompt is the instruction, the
            # demonstrations and the query, matched against every correct object of (s, r) —
            # no distractor (no strategy query, no semantic index)
            self.needs = frozenset(
                {"templates", "other_objects"} | ({"demonstrations"} if icl != "zero" else set()))

    def config(self, ctx: RunContext) -> dict[str, object]:
        out = super().config(ctx)
        if self.settings["icl"] != "none":
            # answers are matched against every correct object of (s, r) since this version:
            # ICL values stored before are recomputed, not kept under the same configuration
            out["answer_match"] = "any_correct_object"
        return out

    def _icl(self, runner: Runner, facts: Sequence[FactInput], ctx: RunContext) -> list[MeasureValue]:
        """BELIEF-ICL (the paper's §ICL): the library's prompts, demonstrations and matching;
        rank 1 for a correct greedy answer, else 2 (only K = 1 is meaningful)."""
        from kgprobe.probing.measures.belief import (
            IclConfig,
            IclFact,
            belief_icl,
            consist_at_1,
            same_answer,
        )

        def icl_fact(f: FactInput) -> IclFact:
            return IclFact(f.subject, f.pid, _cap(f.object, ctx.max_object_labels), f.templates,
                           tuple(_cap(o, ctx.max_object_labels) for o in f.other_objects))

        pool = [icl_fact(d) for d in dict.fromkeys(d for f in facts for d in f.demonstrations)]
        cfg = IclConfig(max_new_tokens=int(self.settings["max_new_tokens"]),
                        samples=int(self.settings["samples"]), seed=ctx.seed)
        outcomes = belief_icl(runner, [icl_fact(f) for f in facts], pool,
                              setting=self.ICL_SETTING[self.settings["icl"]],  # type: ignore[arg-type]
                              style=self.settings["style"], config=cfg)
        by_pair: dict[str, list[Any]] = {}
        for o in outcomes:
            by_pair.setdefault(o.pair, []).append(o)
        out: list[MeasureValue] = []
        for f in facts:
            os_ = by_pair.get(f"{f.subject.key}|{f.pid}", [])
            if not os_:
                out.append(_none(f"no {self.settings['style']} template for BELIEF-ICL"))
                continue
            ranks = [o.rank for o in os_]
            out.append(_values(
                sum(1 for r in ranks if r == 1) / len(ranks),
                rank=statistics.fmean(ranks), hit_k=None, rr=None,
                consistency=consist_at_1(os_, same_answer),
                confidence=statistics.fmean(o.confidence for o in os_),
                ranks=ranks, confidences=[o.confidence for o in os_],
                scale="generation", templates=_template_ids(f, os_),
            ))
        return out

    def score(self, runner: Runner, facts: Sequence[FactInput], ctx: RunContext) -> list[MeasureValue]:
        from kgprobe.probing.measures.belief import BeliefPair, consist_at_1, rank_prompts

        if self.settings["icl"] != "none":
            return self._icl(runner, facts, ctx)
        k = int(self.settings["k"])
        pairs = [BeliefPair(_cap(f.subject, ctx.max_subject_labels), f.pid,
                            tuple(_cap(o, ctx.max_object_labels) for o in (f.object, *f.other_objects)),
                            f.templates, tuple(_cap(d, ctx.max_object_labels) for d in f.distractors))
                 for f in facts]
        outcomes = rank_prompts(runner, pairs, mode=self.settings["mode"], end=ctx.end) if pairs else []
        by_pair: dict[str, list[Any]] = {}
        for o in outcomes:
            by_pair.setdefault(o.pair, []).append(o)
        out: list[MeasureValue] = []
        for f, pair in zip(facts, pairs, strict=True):
            os_ = by_pair.get(pair.key, [])
            # one scale per fact, never two pooled: the vocabulary's (the paper's single-token
            # population) wherever the fact has such prompts, else the candidate set's
            os_ = [o for o in os_ if o.scale == "vocab"] or os_
            if not os_:
                out.append(_none("no usable prompt"))
                continue
            ranks = [o.rank for o in os_]
            out.append(_values(
                sum(1 for r in ranks if r == 1) / len(ranks),
                rank=statistics.fmean(ranks),
                hit_k=sum(1 for r in ranks if r <= k) / len(ranks),
                rr=statistics.fmean(1.0 / r for r in ranks),
                consistency=consist_at_1(os_),
                confidence=statistics.fmean(o.confidence for o in os_),
                ranks=ranks,
                confidences=[o.confidence for o in os_],
                scale=os_[0].scale, templates=_template_ids(f, os_),
            ))
        return out

    def primary_scale(self) -> str:
        """The rank scale the paper's metrics are about, for these settings."""
        if self.settings["icl"] != "none":
            return "generation"
        return "candidates" if self.settings["mode"] == "candidates" else "vocab"

    def aggregate(self, rows: Sequence[Mapping[str, Any]], seed: int = 0) -> Aggregate:
        """The paper's metrics over the facts ranked on the primary scale (the vocabulary, the
        paper's single-token objects, unless mode=candidates or BELIEF-ICL); the facts of any
        other scale as a separate population, every key prefixed with its scale (e.g.
        ``candidates acc@1``) and its own n — never pooled (rows stored before scales were
        recorded form the population ``unseparated``)."""
        groups: dict[str, list[Mapping[str, Any]]] = {}
        for r in rows:
            groups.setdefault(str(r.get("scale") or "unseparated"), []).append(r)
        primary = self.primary_scale()
        out = self._population(groups.pop(primary, []), seed)
        out["scale facts"] = sum(1 for r in rows if r.get("scale") == primary)
        out["scale"] = primary
        for scale, rs in sorted(groups.items()):
            out[f"{scale} facts"] = len(rs)
            for name, v in self._population(rs, seed).items():
                out[f"{scale} {name}"] = v
        return out

    def _population(self, rows: Sequence[Mapping[str, Any]], seed: int) -> Aggregate:
        """Acc@1, Acc@K and MRR over N trials of one prompt per fact with one template per
        relation (mean, range, sd), Consist@1 (mean over facts with two or more prompts),
        Overconf@K with its bins — of facts ranked on one scale."""
        import numpy as np

        from kgprobe.probing.measures.belief import overconfidence, trial_fluctuations

        drop = ("ranks", "confidences", "scale", "templates")
        out = super().aggregate([{k: v for k, v in r.items() if k not in drop} for r in rows], seed)
        for name in drop:
            out.pop(name, None)
        per = [(list(r["ranks"]), list(r["confidences"]), list(r.get("templates") or [])) for r in rows
               if r.get("ranks") and r.get("confidences")]
        if not per:
            return out
        k, runs, nbins = int(self.settings["k"]), int(self.settings["runs"]), int(self.settings["bins"])
        if self.settings["icl"] != "none":
            k = 1  # ICL ranks are 1 (correct) or 2: only K = 1 means anything
        # rows are one relation's facts; a fact without template ids (stored before they were
        # recorded) draws among all its prompts
        tids = [t if len(t) == len(rr) else [0] * len(rr) for rr, _, t in per]
        accs, m = trial_fluctuations([rr for rr, _, _ in per], ["r"] * len(per), tids, runs, seed,
                                     ks=sorted({1, k}))
        flu = {"acc@1": accs[1], f"acc@{k}": accs[k], "mrr": m}
        if self.settings["icl"] != "none":
            del flu["mrr"]
        for name, f in flu.items():
            out[name] = {"mean": f.mean, "range": f.range, "sd": f.stdev, "runs": runs}
        cons = [float(r["consistency"]) for r in rows if _is_num(r.get("consistency"))]
        out["consist@1"] = statistics.fmean(cons) if cons else None
        confs = [c for _, cs, _ in per for c in cs]
        hits = [rank <= k for rr, _, _ in per for rank in rr]
        out[f"overconf@{k}"] = overconfidence(confs, hits, nbins)
        order = np.argsort(-np.asarray(confs), kind="stable")
        bins = []
        for idx in np.array_split(order, min(nbins, len(order))):
            bins.append({"n": len(idx), "confidence": float(np.mean([confs[i] for i in idx])),
                         "accuracy": float(np.mean([hits[i] for i in idx]))})
        out[f"calibration@{k}"] = bins
        return out


def _template_ids(f: FactInput, outcomes: Sequence[Any]) -> list[int]:
    """Each outcome's template as its index in the fact's relation templates (the same list for
    every fact of the relation, so the report can share one template across facts per trial)."""
    ids = {t: i for i, t in enumerate(f.templates)}
    return [ids.get(o.template, -1) for o in outcomes]


# --- information-theoretic ----------------------------------------------------------------------------


@register
class InfoKL(Measure):
    name = "info"
    section = "Pezeshkpour 2023, eq. 1–3 (explicit instillation; implicit, §3, with instill=implicit)"
    summary = ("KL(before‖after) of the next-token distribution after the cloze, without and with "
               "the fact stated first (score; small = known), the prompt's entropy before and after "
               "and their difference; mean over cloze sentences")
    params = (Param("top_k", 0, "0 = full distribution; k = the paper's top-k approximation", "k"),
              Param("instill", "explicit", "explicit (the fact stated before the prompt) or "
                    "implicit (a few fine-tuning steps on the fact's sentences, one model copy "
                    "per fact: slow, opt-in)", "in", ("explicit", "implicit"), str),
              Param("steps", 5, "implicit: fine-tuning steps", "ft"),
              Param("lr", 1e-3, "implicit: Adam learning rate", "lr", kind=float))
    extras = ("entropy", "entropy_after", "entropy_diff")
    has_known = False

    def __init__(self, settings: Mapping[str, Any] | None = None) -> None:
        from kgprobe.errors import ConfigError

        super().__init__(settings)
        if self.settings["instill"] == "explicit" and (self.settings["steps"] != 5
                                                       or self.settings["lr"] != 1e-3):
            raise ConfigError("measure info: steps and lr are parameters of instill=implicit")
        if self.settings["instill"] == "implicit" and self.settings["top_k"]:
            raise ConfigError("measure info: instill=implicit compares full distributions; "
                              "leave top_k at 0")

    def config(self, ctx: RunContext) -> dict[str, object]:
        # implicit: the fine-tuning is seeded with the run's seed (explicit needs no seed, so
        # its configuration hash stays what it was)
        out = super().config(ctx)
        return {**out, "seed": ctx.seed} if self.settings["instill"] == "implicit" else out

    def _implicit(self, runner: Runner, prompts: Sequence[str], stated: Sequence[str],
                  owners: Sequence[int], seed: int) -> list[Any]:
        """Pezeshkpour's implicit instillation: per fact, a copy of the model fine-tuned on the
        fact's sentences; before = the run's engine, after = the copy, same prompts."""
        from kgprobe.errors import ConfigError
        from kgprobe.probing.measures.information import implicit_instillation
        from kgprobe.probing.requests import NextTokenRequest

        runner.run([NextTokenRequest(p, None) for p in prompts])  # the "before" round, batched
        engine = getattr(runner, "engine", runner)
        if not hasattr(engine, "instilled"):
            raise ConfigError("instill=implicit needs the run's scoring engine (a loaded model)")
        res: list[Any] = [None] * len(prompts)
        for i in dict.fromkeys(owners):
            idx = [j for j, o in enumerate(owners) if o == i]
            after = engine.instilled(list(dict.fromkeys(stated[j] for j in idx)),
                                     steps=int(self.settings["steps"]),
                                     lr=float(self.settings["lr"]), seed=seed)
            for j, r in zip(idx, implicit_instillation(runner, after, [prompts[j] for j in idx]),
                            strict=True):
                res[j] = r
        return res

    def score(self, runner: Runner, facts: Sequence[FactInput], ctx: RunContext) -> list[MeasureValue]:
        from kgprobe.probing.measures.common import cloze_sentences
        from kgprobe.probing.measures.information import (
            explicit_instillation,
            explicit_instillation_topk,
        )
        from kgprobe.probing.verbalize import fill

        prompts: list[str] = []
        stated: list[str] = []
        owners: list[int] = []
        for i, f in enumerate(facts):
            for c in cloze_sentences(f.templates, f.subject, max_subject_labels=ctx.max_subject_labels):
                prompts.append(c.context)
                stated.append(fill(c.template, c.subject_label, f.object.name))
                owners.append(i)
        k = int(self.settings["top_k"])
        res: list[Any] = []
        if prompts and self.settings["instill"] == "implicit":
            res = self._implicit(runner, prompts, stated, owners, ctx.seed)
        elif prompts:
            res = list(explicit_instillation_topk(runner, prompts, stated, k=k) if k else
                       explicit_instillation(runner, prompts, stated))
        per: dict[int, list[Any]] = {}
        for i, r in zip(owners, res, strict=True):
            per.setdefault(i, []).append(r)
        out: list[MeasureValue] = []
        for i in range(len(facts)):
            rs = per.get(i)
            if not rs:
                out.append(_none("no usable cloze sentence"))
                continue
            kls = [r.kl for r in rs]
            out.append(_values(
                statistics.fmean(kls) if all(math.isfinite(x) for x in kls) else None,
                entropy=statistics.fmean(r.entropy_before for r in rs),
                entropy_after=statistics.fmean(r.entropy_after for r in rs),
                entropy_diff=statistics.fmean(r.entropy_difference for r in rs),
            ))
        return out


# --- FACTOR from the graph ----------------------------------------------------------------------------


@register
class Factor(Measure):
    name = "factor"
    section = "Muhlgay et al. 2024 (FACTOR), eq. 1, items generated from the graph"
    summary = ("share of the fact's object-last templates on which the true sentence beats every "
               "typed-distractor variant by mean per-token log-probability; per relation: "
               "FACTOR accuracy")
    needs = frozenset({"templates", "distractors"})
    uses_distractors = True
    has_known = False
    later_rounds = False  # one engine run

    def score(self, runner: Runner, facts: Sequence[FactInput], ctx: RunContext) -> list[MeasureValue]:
        from kgprobe.errors import InputError
        from kgprobe.probing.measures.factor import factor_items_from_fact, factor_scores
        from kgprobe.probing.verbalize import OBJECT

        items, owners = [], []
        for i, f in enumerate(facts):
            if not f.distractors:
                continue
            for t in f.templates:
                if OBJECT not in t:  # questions have no sentence with the object
                    continue
                try:
                    items.append(factor_items_from_fact(Fact(f.subject, f.pid, f.object, f.key), t,
                                                        f.distractors, n_false=ctx.n))
                except InputError:
                    continue
                owners.append(i)
        res = factor_scores(runner, items) if items else []
        per: dict[int, list[bool]] = {}
        for i, r in zip(owners, res, strict=True):
            per.setdefault(i, []).append(r.correct)
        out: list[MeasureValue] = []
        for i, f in enumerate(facts):
            got = per.get(i)
            if not got:
                out.append(_none(f.distractor_reason or "no distractor or no object-last template"))
            else:
                out.append(_values(sum(got) / len(got)))
        return out
