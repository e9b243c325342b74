"""Top-1 accuracy: a kgprobe measure that lives in its own package (docs/measures.md)."""

from __future__ import annotations

from collections.abc import Sequence

from kgprobe.probing.measures.common import Runner, cloze_sentences
from kgprobe.probing.measures.registry import FactInput, Measure, RunContext, Values, register
from kgprobe.probing.requests import NextTokenRequest, NextTokenResult


@register
class Top1(Measure):
    name = "top1"
    section = "example (not from a paper)"
    summary = "share of cloze sentences whose argmax next token starts the object's label"
    has_known = False

    def score(self, runner: Runner, facts: Sequence[FactInput], ctx: RunContext) -> list[Values]:
        plans = [[NextTokenRequest(c.context, 1) for c in cloze_sentences(
                     f.templates, f.subject, max_subject_labels=ctx.max_subject_labels)]
                 for f in facts]
        res = runner.run([r for rs in plans for r in rs])
        out: list[Values] = []
        i = 0
        for f, rs in zip(facts, plans, strict=True):
            hits = []
            for r in res[i:i + len(rs)]:
                assert isinstance(r, NextTokenResult)
                hits.append(r.tokens[0].strip() == f.object.label.split()[0])
            i += len(rs)
            out.append({"score": sum(hits) / len(hits)} if hits else {"score": None, "_reason": "no cloze"})
        return out
