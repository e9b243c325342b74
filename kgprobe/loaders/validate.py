"""The one check every loader's records pass before they leave the loader (JSON, RDF, SPARQL).

Why here and not only in the graph package: the graph keys nodes and edges by these ids and
indexes labels, so an id such as ``Q42'; MATCH (n) …``, a year the Bolt protocol cannot carry
or a 400 KB label must never reach it. Each rule is a precompiled regex or a comparison, so the
check costs little per record (see docs/benchmarks.md). A record that breaks a rule becomes an
:class:`ErrorRecord` with its ``file:line`` — counted against the ingest's error budget — and
the stream goes on. The limits are documented in docs/loaders.md (#guarantees).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

from kgprobe.records import (
    PID_RE,
    QID_RE,
    RANKS,
    EntityRecord,
    ErrorRecord,
    FactRecord,
    Record,
    RedirectRecord,
    RelationRecord,
    SkipRecord,
    TimeValue,
)

#: label, description, each alias, a type's basis: Wikidata allows 250 characters.
MAX_TERM_CHARS = 1_000
#: aliases of one entity in the chosen language.
MAX_ALIASES = 1_000
#: a statement id (Wikidata's are about 45 characters: ``Q42$`` + a UUID).
MAX_STATEMENT_ID_CHARS = 200
#: all qualifier values of one statement together (characters).
MAX_QUALIFIER_CHARS = 100_000
#: a string property on a node (``EntityRecord.extra``) and a fact's ``source`` tag.
MAX_VALUE_CHARS = 1_000
#: years must satisfy ``|year| <= MAX_YEAR``, so ``year * 10000 + month * 100 + day`` (the sort
#: key) fits a 64-bit integer; the age of the universe (1.38e10 years) is far inside.
MAX_YEAR = 99_999_999_999_999
#: 64-bit integers (what Bolt carries).
INT64 = (-(2**63), 2**63 - 1)

#: ``Q42$F078E5B3-…`` after normalization (Wikibase test data also writes ``TEST$DATES-8-1``).
STATEMENT_ID_RE = re.compile(r"^[A-Z0-9_]+\$[A-Z0-9_-]+\Z")
_PROP_KEY = re.compile(r"^[a-z_][a-z0-9_]*\Z")
_TIME_RE = re.compile(r"^[+-](\d+)-(\d{2})-(\d{2})T")
_RESERVED_KEYS = frozenset({"qid", "label", "aliases", "description"})

#: skip reason for the statements of an entity that was rejected (the entity is the one error).
SKIP_REJECTED_ENTITY = "entity-rejected"


class Invalid(ValueError):
    """One broken rule; the message names the value (shortened) and the rule."""


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}…{text[-10:]} ({len(text):,} characters)"


def _qid(value: object, what: str) -> None:
    if not (isinstance(value, str) and QID_RE.fullmatch(value)):
        raise Invalid(f"{what} {_show(value)} is not an item id (Q followed by digits)")


def _pid(value: object, what: str) -> None:
    if not (isinstance(value, str) and PID_RE.fullmatch(value)):
        raise Invalid(f"{what} {_show(value)} is not a property id (P followed by digits)")


def _text(value: object, what: str, limit: int = MAX_TERM_CHARS) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise Invalid(f"{what} {_show(value)} is not text")
    if len(value) > limit:
        raise Invalid(f"{what} has {len(value):,} characters (limit {limit:,})")


def check_terms(label: object, description: object, aliases: object) -> None:
    _text(label, "label")
    _text(description, "description")
    if not isinstance(aliases, list):
        raise Invalid(f"aliases {_show(aliases)} is not a list")
    if len(aliases) > MAX_ALIASES:
        raise Invalid(f"{len(aliases):,} aliases (limit {MAX_ALIASES:,})")
    for alias in aliases:
        _text(alias, "alias")


def check_time(tv: TimeValue, what: str) -> None:
    """Year within ±MAX_YEAR, month 0-12, day 0-31 (0 = unknown), precision 0-14."""
    if not isinstance(tv.precision, int) or not 0 <= tv.precision <= 14:
        raise Invalid(f"{what}: precision {_show(tv.precision)} is not 0-14")
    m = _TIME_RE.match(tv.time) if isinstance(tv.time, str) else None
    if not m:
        raise Invalid(f"{what}: {_show(tv.time)} is not a time value")
    digits = m.group(1).lstrip("0")
    if len(digits) > len(str(MAX_YEAR)) or int(digits or "0") > MAX_YEAR:
        raise Invalid(f"{what}: year {_show(m.group(1))} is out of range (|year| <= {MAX_YEAR:,})")
    month, day = int(m.group(2)), int(m.group(3))
    if month > 12:
        raise Invalid(f"{what}: month {month} in {tv.time}")
    if day > 31:
        raise Invalid(f"{what}: day {day} in {tv.time}")


def check_statement_id(sid: object) -> None:
    if not isinstance(sid, str):
        raise Invalid(f"statement id {_show(sid)} is not text")
    if len(sid) > MAX_STATEMENT_ID_CHARS:
        raise Invalid(f"statement id has {len(sid):,} characters (limit {MAX_STATEMENT_ID_CHARS})")
    if not STATEMENT_ID_RE.fullmatch(sid):
        raise Invalid(f"statement id {_show(sid)} is not ENTITY$ID (letters, digits, '-')")


def check_fact(fact: FactRecord) -> None:
    _qid(fact.subject, "subject")
    _pid(fact.pid, "property")
    _qid(fact.object, "object")
    check_fact_values(fact)


def check_fact_values(fact: FactRecord) -> None:
    """`check_fact` but the three ids (a loader that has just matched them calls this)."""
    if fact.statement_id is not None:
        check_statement_id(fact.statement_id)
    if fact.rank not in RANKS:
        raise Invalid(f"rank {_show(fact.rank)} is not one of {', '.join(RANKS)}")
    for tv, what in ((fact.start, "start time"), (fact.end, "end time"), (fact.point_in_time, "point in time")):
        if tv is not None:
            check_time(tv, what)
    if fact.qualifiers:
        size = 0
        for qpid, values in fact.qualifiers.items():
            _pid(qpid, "qualifier property")
            for v in values:
                if not isinstance(v, str):
                    raise Invalid(f"qualifier {qpid} value {_show(v)} is not text")
                size += len(v)
        if size > MAX_QUALIFIER_CHARS:
            raise Invalid(f"qualifiers have {size:,} characters (limit {MAX_QUALIFIER_CHARS:,})")
    _text(fact.source, "source", MAX_VALUE_CHARS)


def check_entity(rec: EntityRecord) -> None:
    _qid(rec.qid, "entity id")
    check_terms(rec.label, rec.description, rec.aliases)
    for t in rec.types:
        _qid(t, "type (P31)")
    for t in rec.superclasses:
        _qid(t, "superclass (P279)")
    for t, basis in rec.inferred_types:
        _qid(t, "inferred type")
        _text(basis, "inferred type basis")
    for key, value in rec.extra.items():
        if not (isinstance(key, str) and _PROP_KEY.fullmatch(key)) or key in _RESERVED_KEYS:
            raise Invalid(f"property name {_show(key)} is not allowed")
        if isinstance(value, bool):
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                raise Invalid(f"{key} is {value} (not a finite number)")
        elif isinstance(value, int):
            if not INT64[0] <= value <= INT64[1]:
                raise Invalid(f"{key} {value} does not fit a 64-bit integer")
        elif isinstance(value, str):
            _text(value, key, MAX_VALUE_CHARS)
        else:
            raise Invalid(f"{key} {_show(value)} is not text, a number or a boolean")


def check_relation(rec: RelationRecord) -> None:
    _pid(rec.pid, "property id")
    check_terms(rec.label, rec.description, rec.aliases)


def check_redirect(rec: RedirectRecord) -> None:
    _qid(rec.source, "redirect source")
    _qid(rec.target, "redirect target")


def problem(record: Record) -> str | None:
    """Why ``record`` must not be written, or None."""
    try:
        if isinstance(record, FactRecord):
            check_fact(record)
        elif isinstance(record, EntityRecord):
            check_entity(record)
        elif isinstance(record, RelationRecord):
            check_relation(record)
        elif isinstance(record, RedirectRecord):
            check_redirect(record)
    except Invalid as exc:
        return str(exc)
    return None


def validated(records: Iterator[Record], where: str = "") -> Iterator[Record]:
    """Pass good records through; each bad one becomes an ErrorRecord at its location.

    When an entity is rejected, its statements (which follow it) are counted as skipped
    (``entity-rejected``): one bad entity costs one error, not one per statement.
    """
    rejected: str | None = None
    for rec in records:
        if isinstance(rec, (SkipRecord, ErrorRecord)):
            yield rec
            continue
        if rejected is not None and isinstance(rec, FactRecord) and rec.subject == rejected:
            yield SkipRecord(reason=SKIP_REJECTED_ENTITY, location=rec.location)
            continue
        why = problem(rec)
        if why is None:
            rejected = None
            yield rec
            continue
        location = getattr(rec, "location", "") or where
        if isinstance(rec, EntityRecord):
            rejected = rec.qid
            yield ErrorRecord(location=location, message=f"entity not loaded: {why}")
        elif isinstance(rec, RelationRecord):
            yield ErrorRecord(location=location, message=f"property not loaded: {why}")
        elif isinstance(rec, FactRecord):
            ok = (isinstance(rec.statement_id, str) and len(rec.statement_id) <= 80
                  and STATEMENT_ID_RE.match(rec.statement_id))
            sid = f" {rec.statement_id}" if ok else ""  # a broken id is shown by ``why``, quoted
            yield ErrorRecord(location=location, message=f"statement{sid} not loaded: {why}")
        else:
            yield ErrorRecord(location=location, message=f"redirect not loaded: {why}")


__all__ = [
    "MAX_ALIASES",
    "MAX_QUALIFIER_CHARS",
    "MAX_STATEMENT_ID_CHARS",
    "MAX_TERM_CHARS",
    "MAX_VALUE_CHARS",
    "MAX_YEAR",
    "SKIP_REJECTED_ENTITY",
    "check_fact",
    "check_fact_values",
    "check_statement_id",
    "check_terms",
    "check_time",
    "problem",
    "validated",
]
