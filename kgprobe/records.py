"""Plain records that loaders yield and `graph.ingest` writes.

They are the only contract between the format-aware loaders and the graph: loaders know nothing
of Cypher, the graph package knows nothing of file formats (docs/design.md §1).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from functools import cached_property

#: Item and property ids: upper case, no leading zero, at most 18 digits (the number fits a
#: 64-bit integer, and an id stays far below any index key limit of the graph server).
#: ``\Z``, never ``$``: ``$`` also matches before a final newline, so ``"Q42\n"`` would pass
QID_RE = re.compile(r"^Q[1-9][0-9]{0,17}\Z")
PID_RE = re.compile(r"^P[1-9][0-9]{0,17}\Z")

#: Relations that become type edges instead of FACT edges.
INSTANCE_OF = "P31"
SUBCLASS_OF = "P279"
#: Qualifiers that carry temporal validity.
START_TIME = "P580"
END_TIME = "P582"
POINT_IN_TIME = "P585"

RANKS = ("preferred", "normal", "deprecated")

#: The longest template text kgprobe imports or probes with, in characters after the slots
#: are normalized (docs/templates.md). The longest template of LAMA, ParaRel, LPAQA, BEAR,
#: KAMEL and TempLAMA is well under 200 characters; a longer text is a mistake (a whole file
#: in one field) and would cost time and memory per fact and exceed small models' context.
MAX_TEMPLATE_CHARS = 1000


def template_too_long(text: str) -> str | None:
    """Why ``text`` is refused as a template (None when its length is fine)."""
    if len(text) <= MAX_TEMPLATE_CHARS:
        return None
    return (f"template of {len(text):,} characters is longer than the limit of "
            f"{MAX_TEMPLATE_CHARS:,} (docs/templates.md): {text[:60]!r}...")


def is_qid(value: str) -> bool:
    """True for a Wikidata item id such as ``Q42``."""
    return isinstance(value, str) and QID_RE.fullmatch(value) is not None


def is_pid(value: str) -> bool:
    """True for a Wikidata property id such as ``P31``."""
    return isinstance(value, str) and PID_RE.fullmatch(value) is not None


@dataclass(frozen=True)
class TimeValue:
    """A Wikidata time kept without loss.

    ``time`` is Wikidata's own string (``+1952-03-11T00:00:00Z``, ``-0199-01-01T00:00:00Z``,
    ``+20000-01-01T00:00:00Z``): Python's ``datetime`` and the Bolt driver cannot hold BCE years
    or years above 9999, so the string is the truth and ``year`` a sortable integer for queries.
    ``precision`` follows Wikidata (9 = year, 10 = month, 11 = day).
    """

    time: str
    precision: int = 11
    calendar: str = "Q1985727"  # proleptic Gregorian

    @classmethod
    def parsed(cls, time: str, precision: int, calendar: str, *, year: int, sort_key: int) -> TimeValue:
        """A TimeValue whose year and sort key its caller has just parsed from ``time`` (the
        JSON loader splits every time string anyway): they are stored, not parsed twice more."""
        tv = object.__new__(cls)  # the fields set at once: a frozen __init__ sets them one by one
        # year and sort_key: what the cached properties below would compute
        tv.__dict__.update(time=time, precision=precision, calendar=calendar, year=year,
                           sort_key=sort_key)
        return tv

    @cached_property
    def year(self) -> int:
        return parse_year(self.time)

    @cached_property
    def sort_key(self) -> int:
        """``year * 10000 + month * 100 + day``: orders times inside one year too (kept: the
        loaders sort qualifiers by it and the writer stores it, once per statement each)."""
        return time_sort_key(self.time)


_TIME_RE = re.compile(r"^([+-]?)(\d+)-(\d{2})-(\d{2})")


def parse_year(time: str) -> int:
    m = _TIME_RE.match(time.strip())
    if not m:
        raise ValueError(f"not a Wikidata time value: {time!r}")
    sign = -1 if m.group(1) == "-" else 1
    return sign * int(m.group(2))


def time_sort_key(time: str) -> int:
    m = _TIME_RE.match(time.strip())
    if not m:
        raise ValueError(f"not a Wikidata time value: {time!r}")
    sign = -1 if m.group(1) == "-" else 1
    return sign * int(m.group(2)) * 10000 + int(m.group(3)) * 100 + int(m.group(4))


def normalize_time(lexical: str) -> str:
    """Bring an xsd:dateTime lexical form (``1952-03-11T00:00:00Z``) to Wikidata's signed form."""
    s = lexical.strip()
    if not s.startswith(("+", "-")):
        s = "+" + s
    if not s.endswith("Z") and "T" in s and "+" not in s[1:]:
        s += "Z"
    return s


@dataclass
class EntityRecord:
    """An item with its English (or chosen-language) terms and its declared types."""

    qid: str
    label: str | None = None
    aliases: list[str] = field(default_factory=list)
    description: str | None = None
    types: list[str] = field(default_factory=list)  # P31 objects (declared)
    superclasses: list[str] = field(default_factory=list)  # P279 objects
    #: fallback types where the source declares none, as (type QID, basis) pairs, e.g.
    #: ("Q6256", "range of P19"): stored as INFERRED_TYPE edges, never as a P31 fact.
    inferred_types: list[tuple[str, str]] = field(default_factory=list)
    #: extra scalar properties stored on the node (e.g. ``popularity``); keys must be
    #: identifiers ([a-z_][a-z0-9_]*), values str/int/float/bool.
    extra: dict[str, str | int | float | bool] = field(default_factory=dict)
    #: where the record was read (``file:line``); reported with errors, never compared
    location: str = field(default="", compare=False, repr=False)


@dataclass
class RelationRecord:
    """A Wikidata property used as a relation."""

    pid: str
    label: str | None = None
    description: str | None = None
    aliases: list[str] = field(default_factory=list)
    location: str = field(default="", compare=False, repr=False)


@dataclass
class FactRecord:
    """One item-valued statement (subject, relation, object) with rank and qualifiers.

    ``statement_id`` is normalized to ``Q42$UUID`` (upper-case) so that the JSON and RDF paths
    produce the same key; truthy RDF has no statement ids, so the key falls back to s|p|o.
    """

    subject: str
    pid: str
    object: str
    statement_id: str | None = None
    rank: str = "normal"
    start: TimeValue | None = None
    end: TimeValue | None = None
    point_in_time: TimeValue | None = None
    #: other qualifiers: PID -> list of values rendered as strings (QIDs for items).
    qualifiers: dict[str, list[str]] = field(default_factory=dict)
    source: str = ""
    location: str = field(default="", compare=False, repr=False)

    @property
    def key(self) -> str:
        if self.statement_id:
            return self.statement_id
        return f"{self.subject}|{self.pid}|{self.object}"

    @property
    def is_temporal(self) -> bool:
        return self.start is not None or self.end is not None or self.point_in_time is not None


#: Template styles: how the object slot sits in the text (docs/templates.md).
STYLE_OBJECT_LAST = "statement-object-last"  # usable for continuation scoring
STYLE_QUESTION = "question"
STYLE_OBJECT_INSIDE = "object-inside"  # full-sentence or masked scoring only
TEMPLATE_STYLES = (STYLE_OBJECT_LAST, STYLE_QUESTION, STYLE_OBJECT_INSIDE)
#: After the object slot, an object-last statement may only have closing punctuation.
_TEMPLATE_TAIL_RE = re.compile(r"^[\s.!;:,\"')\]]*$")


def derive_style(text: str) -> str:
    """Classify a ``[X]``/``[Y]`` template by where its object slot is.

    A question ends with ``?``; a statement whose single object slot is followed only by
    closing punctuation is object-last (a cloze context can be cut before the slot); anything
    else keeps the object inside the sentence.
    """
    stripped = text.strip()
    if stripped.endswith("?"):
        return STYLE_QUESTION
    pos = stripped.find("[Y]")
    if pos >= 0 and stripped.count("[Y]") == 1 and _TEMPLATE_TAIL_RE.match(stripped[pos + 3 :]):
        return STYLE_OBJECT_LAST
    return STYLE_OBJECT_INSIDE


def template_id(pid: str, text: str, source: str) -> str:
    """Stable id of a template: the same text imported twice from one source is one node."""
    digest = hashlib.sha1(f"{pid}\x1f{text}\x1f{source}".encode()).hexdigest()
    return f"T{digest[:16]}"


@dataclass
class TemplateRecord:
    """A verbalization pattern of a relation: ``[X]`` = subject slot, ``[Y]`` = object slot.

    ``style`` is derived from the text by the template loader (never trusted from a file);
    ``id`` defaults to :func:`template_id` so re-imports merge instead of duplicating.
    """

    pid: str
    text: str
    style: str
    source: str
    language: str = "en"
    id: str | None = None

    def __post_init__(self) -> None:
        if self.id is None:
            self.id = template_id(self.pid, self.text, self.source)


@dataclass
class RedirectRecord:
    """``source`` was merged into ``target`` (owl:sameAs in RDF, ``redirects`` in JSON)."""

    source: str
    target: str
    location: str = field(default="", compare=False, repr=False)


@dataclass
class SkipRecord:
    """A statement or record not stored, with the reason (counted, never silent)."""

    reason: str
    location: str = ""
    count: int = 1


@dataclass
class ErrorRecord:
    """A malformed line or record: reported with its location and counted against the budget."""

    location: str
    message: str


@dataclass(frozen=True)
class Position:
    """A point in a source file: every line before byte ``offset`` (of the file's text,
    decompressed) has been handed over, its records before this one. The JSON dump loader
    yields one after each chunk when asked (``positions=True``); the ingest writes nothing for
    it but saves it as the resume checkpoint once every record before it is committed
    (kgprobe/loaders/resume.py). ``line`` is the line number at ``offset``, ``entities`` the
    entities counted towards ``--limit`` so far, ``read`` the bytes of the file as stored
    (compressed, for .gz/.bz2) read so far and ``size`` its size: progress and ETA (``read``
    runs ahead by the chunks in flight, so it is not compared). ``stream``, where the workers
    decompress a multi-stream file (kgprobe/loaders/streams.py), is the compressed offset of the
    stream whose text, after its first newline, starts at ``offset``: a resume starts there,
    with nothing decompressed before it; -1 elsewhere."""

    source: str
    offset: int
    line: int
    entities: int = 0
    read: int = field(default=0, compare=False)
    size: int = 0
    stream: int = field(default=-1, compare=False)


Record = EntityRecord | RelationRecord | FactRecord | RedirectRecord | SkipRecord | ErrorRecord | Position


def normalize_statement_id(raw: str) -> str:
    """``Q42$8e3…`` / ``q42-8E3…`` / RDF ``wds:Q42-8e3…`` → ``Q42$8E3…``.

    Only a full IRI is cut at its last ``/``: a plain id keeps every character, so that two ids
    that differ only after a ``/`` (``Q1$a/`` and ``Q1$b/``) cannot collapse into one key; the
    loaders' validation then rejects such ids (``kgprobe.loaders.validate``).
    """
    s = raw.rsplit("/", 1)[-1] if "://" in raw else raw
    if "$" in s:
        head, tail = s.split("$", 1)
    else:
        head, _, tail = s.partition("-")
    return f"{head.upper()}${tail.upper()}"
