"""Why a fact's score moved between two wordings of the same probe (the demo's careful vs raw
labels): per moved fact, the cloze sentences whose verdict changed, the true object's label
as scored in both wordings (context + continuation with the end marker) and how much its
plausibility moved, and each distractor whose comparison flipped with its own scored texts
and change. A reader tells a wording effect (a capital, an article, a period) from a defect by
reading the two sentences; a change of exactly log 2 nats, the mark of a sentence counted
twice, is flagged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from kgprobe.types import PID, FactKey

#: |Δ log Pl − log 2| below this is flagged as "a sentence counted twice?"
_LOG2_SLACK = 0.005


class ClozeFlip(TypedDict):
    """A distractor whose contest with the object flipped between two wordings."""

    label: str | None
    object_wins_a: bool
    object_wins_b: bool
    sentence_a: str | None
    sentence_b: str | None
    delta: float
    counted_twice: bool


class ClozeMove(TypedDict):
    """One cloze sentence whose verdict changed between two wordings."""

    template: str
    subject_label: str
    sentence_a: str | None
    sentence_b: str | None
    delta_object: float
    counted_twice: bool
    flips: list[ClozeFlip]


class WordingMove(TypedDict):
    """A fact whose score moved between two wordings (kgprobe.reports.wording.fact_move)."""

    key: FactKey
    relation: PID | None
    subject_label: str | None
    object_label: str | None
    score_a: float
    score_b: float
    clozes: list[ClozeMove]


def _by_cloze(details: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    return {(c["template"], c["subject_label"]): i for i, c in enumerate(details.get("clozes") or [])}


def _doubled(delta: float) -> bool:
    return abs(abs(delta) - math.log(2)) < _LOG2_SLACK


def fact_move(row_a: Mapping[str, Any], row_b: Mapping[str, Any], det_a: Mapping[str, Any],
              det_b: Mapping[str, Any]) -> WordingMove:
    """One moved fact: its scores under wording A and B and the cloze sentences whose
    verdict (the true object beats every distractor) differs, each with the object's and the
    flipped distractors' sentences and their Δ log Pl = A − B (nats)."""
    ia, ib = _by_cloze(det_a), _by_cloze(det_b)
    dist_b = {d.get("qid") or d.get("label"): d for d in det_b.get("distractors") or []}
    clozes: list[ClozeMove] = []
    for key, i in ia.items():
        j = ib.get(key)
        if j is None:
            continue
        ca, cb = det_a["clozes"][i], det_b["clozes"][j]
        oa, ob = float(ca["log_pl_object"]), float(cb["log_pl_object"])
        flips: list[ClozeFlip] = []
        for da in det_a.get("distractors") or []:
            db = dist_b.get(da.get("qid") or da.get("label"))
            if db is None or da.get("role") != "distractor":
                continue
            xa, xb = float(da["log_pl"][i]), float(db["log_pl"][j])
            wins_a, wins_b = oa > xa, ob > xb
            if wins_a == wins_b:
                continue
            sents_a, sents_b = da.get("scored") or [], db.get("scored") or []
            flips.append({
                "label": da.get("label"), "object_wins_a": wins_a, "object_wins_b": wins_b,
                "sentence_a": sents_a[i] if i < len(sents_a) else None,
                "sentence_b": sents_b[j] if j < len(sents_b) else None,
                "delta": xa - xb, "counted_twice": _doubled(xa - xb),
            })
        if flips:
            clozes.append({"template": key[0], "subject_label": key[1],
                           "sentence_a": ca.get("scored") or ca.get("sentence"),
                           "sentence_b": cb.get("scored") or cb.get("sentence"),
                           "delta_object": oa - ob, "counted_twice": _doubled(oa - ob),
                           "flips": flips})
    return {"key": row_a["key"], "relation": row_a.get("pid"),
            "subject_label": row_a.get("subject_label"), "object_label": row_a.get("object_label"),
            "score_a": float(row_a["score"]), "score_b": float(row_b["score"]), "clozes": clozes}


def wording_moves(facts_a: Sequence[Mapping[str, Any]], facts_b: Sequence[Mapping[str, Any]],
                  details_a: Mapping[str, Mapping[str, Any]],
                  details_b: Mapping[str, Mapping[str, Any]]) -> list[WordingMove]:
    """Every fact scored under both wordings whose score differs, largest move first (then by
    key), explained by :func:`fact_move` where both runs' per-fact details are at hand."""
    b_rows = {r["key"]: r for r in facts_b}
    out = []
    for ra in facts_a:
        rb = b_rows.get(ra["key"])
        if rb is None or float(ra["score"]) == float(rb["score"]):
            continue
        da, db = details_a.get(ra["key"]) or {}, details_b.get(ra["key"]) or {}
        out.append(fact_move(ra, rb, da, db))
    return sorted(out, key=lambda m: (-abs(m["score_a"] - m["score_b"]), str(m["key"])))


def move_lines(move: WordingMove, names: tuple[str, str]) -> list[str]:
    """A moved fact as plain lines (console, Markdown): the scores, then per changed cloze
    the two sentences of the object and of each flipped distractor, with the Δ in nats."""
    na, nb = names
    head = (f"{move.get('subject_label')} → {move.get('object_label')} ({move.get('relation')}): "
            f"{nb} {move['score_b']:.2f} → {na} {move['score_a']:.2f}")
    lines = [head]
    if not move["clozes"]:
        lines.append("  (no per-cloze details for both wordings)")
    for c in move["clozes"]:
        mark = " [≈ log 2: a sentence counted twice?]" if c["counted_twice"] else ""
        if c["sentence_a"] == c["sentence_b"] and abs(c["delta_object"]) >= 0.005:
            mark += " (the label reads the same: the change is in its other names' sentences)"
        lines.append(f"  object: {nb} “{c['sentence_b']}” → {na} “{c['sentence_a']}”: "
                     f"Δ log Pl {c['delta_object']:+.2f}{mark}")
        for f in c["flips"]:
            who = "the object now beats it" if f["object_wins_a"] else "the object now loses to it"
            fmark = " [≈ log 2: a sentence counted twice?]" if f["counted_twice"] else ""
            if f["sentence_a"] == f["sentence_b"] and abs(f["delta"]) >= 0.005:
                fmark += " (the label reads the same: the change is in its other names' sentences)"
            lines.append(f"    distractor {f['label']} ({who}): {nb} “{f['sentence_b']}” → "
                         f"{na} “{f['sentence_a']}”: Δ log Pl {f['delta']:+.2f}{fmark}")
    return lines
