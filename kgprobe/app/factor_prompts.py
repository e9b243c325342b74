"""FACTOR's contradiction prompts and the text around them (Muhlgay et al., §3.2.2 and
Appendices A.1 and D): one few-shot prompt per error type of the FRANK typology the paper
adopts, each asking for several numbered contradictions with the planned edit written first
("Change: ... Contradiction: ..."); which types suit a sentence (A.1's heuristics, here
without a tagger: word lists and patterns); reading the contradictions back out of a
generation. Pure functions: no model, no graph.

The instructions paraphrase the paper's Appendix D; the worked example is the paper's Table 1
(Donne), so every type is shown on the same sentence. The link prompt gets the completion only,
as in the paper (the model repeated the context otherwise).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: The five error types of the paper (§3.1), in the paper's Table 3 order.
ERROR_TYPES = ("predicate", "entity", "circumstance", "coreference", "link")

_EXAMPLE_CONTEXT = "In 1982, Donne was appointed as the first Queen's Representative to the Cook Islands."
_EXAMPLE_COMPLETION = "After completing his term, he became Chief Justice of Nauru and Tuvalu in 1985."

_INSTRUCTIONS = {
    "entity": ("Given a context and a completion, write diverse alternative completions that "
               "contradict the original completion meaning. First, identify an entity in the "
               "completion. Then write the contradiction by changing the entity or its property. "
               "Make minimal changes. Do not change dates or quantities."),
    "predicate": ("Given a context and a completion, write diverse alternative completions that "
                  "contradict the original completion meaning by changing verbs. First, identify a "
                  "verb in the completion, then write the contradiction by changing it. Keep the "
                  "contradiction grammatical, fluent and consistent."),
    "circumstance": ("Given a context and a completion, write diverse alternative completions "
                     "that contradict the original completion meaning. First, identify whether the "
                     "completion describes the circumstances of an event (location or time). If so, "
                     "change them to contradict the completion. Do not add a time or a location. "
                     "Make minimal changes."),
    "coreference": ("Given a context and a completion, write diverse alternative completions that "
                    "contradict the original completion meaning. First, find a pronoun in the "
                    "completion and write the entity it refers to. Write the contradiction by "
                    "changing the pronoun so that it refers to another entity."),
    "link": ("Given a sentence, write contradictory sentences by changing a temporal or causal "
             "link. First, identify a link between events, then change it. Keep the "
             "contradiction grammatical and fluent. If there is no such link, answer \"NA\"."),
}

_EXAMPLE_EDITS = {
    "entity": [('"Chief Justice of Nauru and Tuvalu" to "the Queen\'s Representative to the Cook Islands"',
                "After completing his term, he became the Queen's Representative to the Cook Islands in 1985."),
               ('"Nauru" to "Fiji"',
                "After completing his term, he became Chief Justice of Fiji and Tuvalu in 1985.")],
    "predicate": [('"became" to "declined the position of"',
                   "After completing his term, he declined the position of Chief Justice of Nauru and Tuvalu in 1985."),
                  ('"completing" to "abandoning"',
                   "After abandoning his term, he became Chief Justice of Nauru and Tuvalu in 1985.")],
    "circumstance": [('"1985" to "1987"',
                      "After completing his term, he became Chief Justice of Nauru and Tuvalu in 1987."),
                     ('"1985" to "1979"',
                      "After completing his term, he became Chief Justice of Nauru and Tuvalu in 1979.")],
    "coreference": [('Pronoun: he. "his" to "her", "he" to "she"',
                     "After completing her term, she became Chief Justice of Nauru and Tuvalu in 1985."),
                    ('Pronoun: he. "he" to "the Queen"',
                     "After completing his term, the Queen became Chief Justice of Nauru and Tuvalu in 1985.")],
    "link": [('"After" to "Before"',
              "Before completing his term, he became Chief Justice of Nauru and Tuvalu in 1985.")],
}

_PRONOUNS = frozenset(
    ["he", "she", "it", "they", "him", "her", "them", "his", "hers", "its", "their", "theirs", "himself", "herself", "itself", "themselves"])
_LINK_WORDS = frozenset(
    ["after", "before", "since", "until", "while", "during", "prior", "following", "then", "because", "therefore", "so", "thus", "hence", "consequently", "due", "caused", "causing", "led", "resulting", "once", "when", "whereas", "later", "earlier"])
_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december"]
_WORD = re.compile(r"[A-Za-z']+")
_CIRCUMSTANCE = re.compile(
    r"\b\d{1,4}(?:st|nd|rd|th|s)?\b|\b(?:" + "|".join(_MONTHS) + r")\b"
    r"|\b(?:in|at|near|from|to)\s+(?:the\s+)?[A-Z]",
    re.IGNORECASE)


def relevant_error_types(sentence: str, wanted: Sequence[str] = ERROR_TYPES) -> list[str]:
    """The error types the paper would prompt for on this sentence (Appendix A.1): entity and
    predicate for any sentence with words (a tagger would find a noun and a verb in every
    verbalized fact), circumstance when it names a time, number or a place after a preposition,
    coreference when it holds a pronoun, link when it holds a temporal or causal link word."""
    words = [w.lower() for w in _WORD.findall(sentence)]
    out = []
    for t in wanted:
        if t in ("entity", "predicate"):
            ok = bool(words)
        elif t == "circumstance":
            ok = _CIRCUMSTANCE.search(sentence) is not None
        elif t == "coreference":
            ok = any(w in _PRONOUNS for w in words)
        elif t == "link":
            ok = any(w in _LINK_WORDS for w in words)
        else:
            raise ValueError(f"unknown error type {t!r}")
        if ok:
            out.append(t)
    return out


def generation_prompt(error_type: str, context: str, completion: str) -> str:
    """The few-shot prompt for one error type; it ends where the model writes its first edit
    ("1. Change:"). The link prompt shows the completion alone, as the paper's does."""
    if error_type not in _INSTRUCTIONS:
        raise ValueError(f"unknown error type {error_type!r}")
    lines = [_INSTRUCTIONS[error_type], "##"]
    if error_type == "link":
        lines.append(f"Sentence: {_EXAMPLE_COMPLETION}")
    else:
        lines += [f"Context: {_EXAMPLE_CONTEXT}", f"Completion: {_EXAMPLE_COMPLETION}"]
    for i, (change, contra) in enumerate(_EXAMPLE_EDITS[error_type], 1):
        lines += [f"{i}. Change: {change}.", f"Contradiction: {contra}"]
    lines.append("##")
    if error_type == "link":
        lines.append(f"Sentence: {completion.strip()}")
    else:
        lines += [f"Context: {context.strip() or '(none)'}", f"Completion: {completion.strip()}"]
    lines.append("1. Change:")
    return "\n".join(lines)


_CONTRA = re.compile(r"^\s*Contradiction\s*:\s*(.*\S)\s*$", re.IGNORECASE | re.MULTILINE)
_EDIT = re.compile(r'"([^"\n]+)"\s+to\s+"([^"\n]*)"')
_NUMBERED = re.compile(r"\n\s*\d+\.\s+")


def _norm(text: str) -> str:
    return " ".join(text.lower().split()).rstrip(".")


def _apply_edit(block: str, completion: str) -> str | None:
    """c⁺ with a block's first planned edit ('"X" to "Y"') applied: X found regardless of
    case (the first occurrence), Y capitalized where X opened the sentence; None when X is
    not in c⁺ or the edit changes nothing."""
    e = _EDIT.search(block)
    if e is None:
        return None
    old, new = e.group(1), e.group(2)
    at = completion.lower().find(old.lower())
    if at < 0 or old.lower() == new.lower():
        return None
    if at == 0 and new[:1].islower():
        new = new[:1].upper() + new[1:]
    return completion[:at] + new + completion[at + len(old):]


def parse_contradictions(generation: str, completion: str, limit: int = 3) -> list[str]:
    """The contradictions of a generation, up to the first "##" (the next example), one per
    numbered edit, in order: its "Contradiction: ..." line, or else, when the model planned
    an edit ('Change: "X" to "Y"') but did not write the sentence, c⁺ with that edit applied
    (the first X regardless of case; small models often stop after the plan). Quotes and surrounding
    whitespace are stripped; "NA", the completion itself (up to case, spacing and the final
    period), repeats and runaway lines (over three times the completion's length) are
    dropped; at most ``limit``."""
    text = generation.split("##", 1)[0]
    out: list[str] = []
    seen = {_norm(completion)}
    for block in _NUMBERED.split("\n" + text):
        m = _CONTRA.search(block)
        if m:
            c = m.group(1).strip().strip('"“”').strip()
        else:
            applied = _apply_edit(block, completion)
            if applied is None:
                continue
            c = applied
        key = _norm(c)
        if not key or key in ("na", "n/a") or key in seen or len(c) > 3 * max(len(completion), 20):
            continue
        seen.add(key)
        out.append(c)
        if len(out) >= limit:
            break
    return out


def near_context(prefix: str) -> str:
    """t_near of the NLI filter (§3.2.3: the last tokens of the prefix): the prefix's last
    sentence (prefixes built from the graph are sentences, one per fact)."""
    parts = [p for p in re.split(r"(?<=[.!?])\s+", prefix.strip()) if p]
    return parts[-1] if parts else ""
