"""Plain inputs shared by the measures: entities with labels, facts, cloze sentences, and the
per-model setting of what stands for the end of sentence (EOS) after a cloze.

Measures work on these small dataclasses so they run with or without the graph: a caller
that holds a graph converts its rows into :class:`Entity` / :class:`Fact` first. Every
model call goes through a :class:`Runner` (``Engine.run`` is one); no measure touches a model.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from kgprobe.errors import ConfigError, InputError
from kgprobe.probing.requests import Request, Result
from kgprobe.probing.verbalize import OBJECT, SUBJECT, Cloze, Facts, cloze, fill, name
from kgprobe.records import STYLE_OBJECT_LAST, STYLE_QUESTION, derive_style


class Runner(Protocol):
    """Anything that turns requests into results, in order (``Engine`` does)."""

    def run(self, requests: Sequence[Request]) -> list[Result]: ...


@dataclass(frozen=True)
class Entity:
    """An entity as the measures see it: a label, its aliases, optionally its QID, and, for
    the careful verbalizer, the :class:`Facts` that decide how its names are written (None:
    written raw)."""

    label: str
    aliases: tuple[str, ...] = ()
    qid: str | None = None
    facts: Facts | None = None

    @classmethod
    def of(cls, value: Entity | str) -> Entity:
        return value if isinstance(value, Entity) else cls(value)

    def labels(self, max_labels: int | None = None) -> tuple[str, ...]:
        """Λ(e): the label first, then the aliases; blanks and duplicates dropped."""
        return self._names[:max_labels] if max_labels else self._names

    @functools.cached_property
    def _names(self) -> tuple[str, ...]:
        """Λ(e) whole, written once per entity (a measure asks for it per cloze sentence)."""
        out: list[str] = []
        for x in (self.label, *self.aliases):
            x = (x or "").strip()
            if x and x not in out:
                out.append(x)
        facts = self.facts
        return tuple(out) if facts is None else tuple(name(x, facts) for x in out)

    @property
    def name(self) -> str:
        """The label as templates write it (a :class:`~kgprobe.probing.verbalize.Name` when
        the entity has verbalizer facts)."""
        return self.label if self.facts is None else name(self.label, self.facts)

    @property
    def key(self) -> str:
        return self.qid or self.label


_LETTER = re.compile(r"[^\W\d_]", re.UNICODE)
_IDENTIFIER = re.compile(r"^(?=\S*\d)[A-Za-z0-9_.:/#-]+$")


@dataclass(frozen=True)
class LabelRule:
    """Which aliases of an entity are names, and so may become cloze subjects or Pl terms.

    Wikidata aliases hold flag emoji (``🇪🇷``), ISO codes (``er``, ``UA``) and identifiers
    (``Q42``, ``ISO3166-2:UA``) beside names; as cloze sentences or plausibility terms they
    measure the model on strings nobody writes in a sentence (with every alias of Eritrea as a
    subject, its Min@5 drops from 1.0 to 0.41). The primary label is always kept.

    - ``names`` (default): an alias is kept when it has a letter, is at least ``min_length``
      characters long, and is not an identifier (one word containing a digit).
    - ``all``: every alias (the library's plain Λ(e)).
    """

    name: Literal["names", "all"] = "names"
    min_length: int = 3

    def __post_init__(self) -> None:
        if self.name not in ("names", "all"):
            raise ConfigError(f"unknown label rule {self.name!r}; use names or all")

    def keeps(self, alias: str) -> bool:
        a = alias.strip()
        if self.name == "all":
            return bool(a)
        return (bool(_LETTER.search(a)) and len(a) >= self.min_length
                and not _IDENTIFIER.fullmatch(a))

    def entity(self, label: str | None, aliases: Iterable[str] | None, qid: str | None = None,
               facts: Facts | None = None) -> Entity:
        """An :class:`Entity` with the aliases this rule keeps (the label is always kept)."""
        kept = tuple(a for a in (aliases or ()) if a and self.keeps(a))
        return Entity(label or qid or "", kept, qid, facts)


@dataclass(frozen=True)
class Fact:
    """A fact (s, r, o). ``relation`` is a PID or a name; ``key`` identifies it in reports."""

    subject: Entity
    relation: str
    object: Entity
    fact_id: str | None = None

    @property
    def key(self) -> str:
        return self.fact_id or f"{self.subject.key}|{self.relation}|{self.object.key}"


EndKind = Literal["eos", "tail", "text", "none"]


@dataclass(frozen=True)
class EndMarker:
    """What stands for EOS after a label in Pl(o|c) = Σ_λ P(λ + EOS | c).

    - ``eos``: the tokenizer's end-of-sequence token (``LogProbRequest.add_eos``). Right for
      models trained on one fact per sequence; a base LM rarely ends a document mid-text.
    - ``tail``: the template's own text after the object slot (usually ``"."``), falling back
      to ``text`` when the template has none (questions). The default: a causal base model
      ends a declarative sentence with its period, which is what stops " Paris" from getting
      credit for " Parisian" or " Paris Saint-Germain".
    - ``text``: always ``text`` (e.g. ``"."`` or ``"\\n"``).
    - ``none``: the bare label (what the Probability baseline of the paper's Table 2 scores).
    """

    kind: EndKind = "tail"
    text: str = "."

    def __post_init__(self) -> None:
        if self.kind not in ("eos", "tail", "text", "none"):
            raise ConfigError(f"unknown end marker {self.kind!r}; use eos, tail, text or none")

    def continuation(self, c: Cloze, label: str) -> tuple[str, bool]:
        """(continuation text, add_eos) for ``label`` after cloze ``c``."""
        if self.kind == "eos":
            return c.continuation(label), True
        if self.kind == "none":
            return c.continuation(label), False
        text = (c.tail.rstrip() or self.text) if self.kind == "tail" else self.text
        # every candidate pays for the sentence's end: a careful name that ends in an
        # abbreviation's period is written without it before this period ("Washington, DC.")
        return c.continuation(label, text) + text, False

    def continuations(self, c: Cloze, entity: Entity,
                      max_labels: int | None = None) -> tuple[tuple[str, bool], ...]:
        """The distinct (continuation, add_eos) of ``entity``'s names after ``c``, in name
        order: two names a careful writer renders alike (the label "United Kingdom" with its
        article and the alias "The United Kingdom") are ONE sentence, so a sum over names
        (Pl(o|c) = Σ_λ P(λ + EOS | c)) counts it once, not log 2 nats higher."""
        return tuple(dict.fromkeys(self.continuation(c, lab) for lab in entity.labels(max_labels)))


#: Per-model end markers (documented in docs/measures.md). Models not listed use ``tail``.
MODEL_END_MARKERS: dict[str, EndMarker] = {
    "smollm2-135m": EndMarker("tail", "."),
    "gemma3-270m": EndMarker("tail", "."),
    "qwen2.5-coder-1.5b": EndMarker("tail", "."),
}


def end_marker_for(model_name: str | None) -> EndMarker:
    """The documented end marker of a model (``tail`` when the model is not listed)."""
    return MODEL_END_MARKERS.get(model_name or "", EndMarker())


@dataclass(frozen=True)
class ClozeSentence:
    """One element of C(s, r): which template and subject label built it, and the cloze."""

    template: str
    subject_label: str
    cloze: Cloze

    @property
    def context(self) -> str:
        return self.cloze.context


def make_cloze(template: str, subject_label: str) -> Cloze:
    """A cloze for an object-last statement or a question (whose answer follows it).

    Raises ``InputError`` for templates with the object inside the sentence."""
    style = derive_style(template)
    if style == STYLE_QUESTION:
        head = template.split(OBJECT)[0] if OBJECT in template else template
        return Cloze(context=fill(head, subject_label).strip(), separator=" ", tail="")
    if style != STYLE_OBJECT_LAST:
        raise InputError(f"template is neither object-last nor a question: {template!r}")
    return cloze(template, subject_label)


def cloze_sentences(
    templates: Iterable[str],
    subject: Entity,
    *,
    max_subject_labels: int | None = None,
    skipped: list[str] | None = None,
) -> list[ClozeSentence]:
    """C(s, r) = templates × subject labels (Λ(s)), object-last statements and questions only.

    Templates with the object inside are skipped (and appended to ``skipped`` when given):
    P(λ + EOS | c) needs the label to end the text."""
    out: list[ClozeSentence] = []
    seen: set[str] = set()
    for t in templates:
        if SUBJECT not in t:
            raise InputError(f"template has no subject slot {SUBJECT}: {t!r}")
        for s in subject.labels(max_subject_labels):
            try:
                c = make_cloze(t, s)
            except InputError:
                if skipped is not None and t not in skipped:
                    skipped.append(t)
                break
            if c.context in seen:
                continue
            seen.add(c.context)
            out.append(ClozeSentence(t, s, c))
    return out


def logsumexp(values: Iterable[float]) -> float:
    """log Σ exp(v), stable; -inf for no values."""
    vals = [v for v in values if v != -math.inf]
    if not vals:
        return -math.inf
    top = max(vals)
    return top + math.log(sum(math.exp(v - top) for v in vals))


@dataclass
class Skipped:
    """Why some inputs produced no score (reported, never silently dropped)."""

    templates: list[str] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)
