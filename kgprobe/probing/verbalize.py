"""Fill relation templates with labels: full sentences and cloze prompts (pure functions).

Whitespace convention shared with the scoring engine (DESIGN.md §3): a cloze *context* never
ends in whitespace; the space that separated it from the object slot moves to the front of the
*continuation* (``"Paris was born in"`` + ``" France"``).
"""

from __future__ import annotations

from dataclasses import dataclass

from kgprobe.errors import InputError
from kgprobe.records import STYLE_OBJECT_LAST, derive_style

SUBJECT = "[X]"
OBJECT = "[Y]"


@dataclass(frozen=True)
class Cloze:
    """An object-last prompt cut before the object: score ``continuation(obj)`` after ``context``.

    ``tail`` is what followed the object slot in the template (usually ``"."``); continuation
    scoring leaves it out so that only the object's tokens are scored.
    """

    context: str
    separator: str
    tail: str

    def continuation(self, obj: str) -> str:
        return f"{self.separator}{obj}"

    def sentence(self, obj: str) -> str:
        return f"{self.context}{self.separator}{obj}{self.tail}"


def fill(template: str, subject: str, obj: str | None = None) -> str:
    """The template with the subject (and the object, if the template has a slot for it)."""
    if SUBJECT not in template:
        raise InputError(f"template has no subject slot {SUBJECT}: {template!r}")
    text = template.replace(SUBJECT, subject)
    if OBJECT in template:
        if obj is None:
            raise InputError(f"template needs an object label: {template!r}")
        text = text.replace(OBJECT, obj)
    return text


def cloze(template: str, subject: str, style: str | None = None) -> Cloze:
    """Cut an object-last template before its object slot.

    Raises ``InputError`` for a template whose object is not last: continuation scoring of such
    a template would silently ignore the words after the object.
    """
    actual = derive_style(template)
    if (style is not None and style != STYLE_OBJECT_LAST) or actual != STYLE_OBJECT_LAST:
        raise InputError(f"not an object-last template (style {style or actual}): {template!r}")
    head, _, tail = template.partition(OBJECT)
    filled = fill(head, subject)
    context = filled.rstrip()
    separator = filled[len(context) :]
    # Collapse any run of whitespace to the single space the scoring engine expects.
    separator = " " if separator else ""
    return Cloze(context=context, separator=separator, tail=tail)
