"""Wikidata JSON: the entity dump (``[`` / one entity per line / ``]``) and entity documents.

Dumps (``.json``, ``.json.gz``, ``.json.bz2``, ``.json.zst``) are read line by line, so memory does not grow
with the file. Entity documents — ``Special:EntityData`` (``{"entities": {...}}``),
``wbgetentities`` responses (also the older flavour whose item values carry only a
``numeric-id``), and a bare entity object — are small by nature and parsed whole.
"""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import orjson

try:  # the fast path's decoder (pyproject.toml); without it every entity takes the general path
    import msgspec
except ImportError:  # pragma: no cover - installed with kgprobe
    msgspec = None  # type: ignore[assignment]

from kgprobe.errors import ConfigError, InputError
from kgprobe.loaders.build import (
    EntityData,
    Statement,
    Value,
    entity_records,
    fact_record,
    skip_reason,
)
from kgprobe.loaders.common import (
    TYPE_RELATIONS,
    Filters,
    SkipCounter,
    compression_of,
    guarded,
    json_too_large,
    max_json_chars,
    open_binary,
    skip_entity,
    skip_to,
    skip_value,
    stored_tell,
    time_from_json,
)
from kgprobe.loaders.parallel import chunk_bytes, ordered_map, plain_chunks, read_ahead, read_chunks
from kgprobe.loaders.streams import (
    PROBE_BYTES,
    Run,
    is_stream_start,
    run_text,
    stream_runs,
    unit_name,
)
from kgprobe.loaders.validate import (
    MAX_VALUE_CHARS,
    Invalid,
    check_fact_values,
    check_statement_id,
    check_terms,
    validated,
)
from kgprobe.records import (
    INSTANCE_OF,
    PID_RE,
    QID_RE,
    SUBCLASS_OF,
    EntityRecord,
    ErrorRecord,
    Position,
    Record,
    RedirectRecord,
    SkipRecord,
    is_pid,
    is_qid,
)
from kgprobe.types import JSONObject

SOURCE = "wikidata-json"


# --------------------------------------------------------------------------- snaks → values


def _entity_value(v: JSONObject) -> Value:
    etype = str(v.get("entity-type", "item"))
    eid = v.get("id")
    if eid is None:  # older flavour: only the numeric id
        prefix = {"item": "Q", "property": "P", "lexeme": "L"}.get(etype)
        if prefix is None or "numeric-id" not in v:
            return Value(kind=etype)
        eid = f"{prefix}{int(v['numeric-id'])}"
    eid = str(eid)
    if etype == "item" and is_qid(eid):
        return Value(kind="item", text=eid)
    return Value(kind=etype, text=eid)


def snak_value(snak: JSONObject) -> Value:
    """One JSON snak → :class:`Value`; raises KeyError/TypeError/ValueError on malformed input."""
    snaktype = snak.get("snaktype", "value")
    if snaktype in ("somevalue", "novalue"):
        return Value(kind=snaktype)
    dv = snak["datavalue"]
    return datavalue(dv["type"], dv["value"])


def datavalue(dtype: Any, val: Any) -> Value:
    """A snak's ``datavalue`` (its ``type`` and ``value``) → :class:`Value`."""
    if dtype == "wikibase-entityid":
        eid = val.get("id")
        if eid is not None and val.get("entity-type", "item") == "item" and is_qid(eid):
            return Value("item", eid)  # the common case, without the general path
        return _entity_value(val)
    if dtype == "string":
        return Value(kind="string", text=str(val))
    if dtype == "time":
        tv = time_from_json(val)
        return Value(kind="time", text=tv.time, time=tv)
    if dtype == "quantity":
        return Value(kind="quantity", text=str(val["amount"]))
    if dtype == "globecoordinate":
        return Value(kind="globecoordinate", text=f"Point({val['longitude']} {val['latitude']})")
    if dtype == "monolingualtext":
        return Value(kind="monolingualtext", text=str(val["text"]))
    return Value(kind=str(dtype), text=json.dumps(val, sort_keys=True))


def main_value(snak: JSONObject) -> Value:
    """A statement's main snak, read only as far as its fate needs: an entity id in full (an
    item may become a fact), any other value by its type alone (it is skipped as
    ``value:<type>``, so its value is never built). Raises as `snak_value` on a snak without a
    type."""
    snaktype = snak.get("snaktype", "value")
    if snaktype in ("somevalue", "novalue"):
        return Value(kind=snaktype)
    dtype = snak["datavalue"]["type"]
    if dtype == "wikibase-entityid":
        return snak_value(snak)
    return Value(kind=_KINDS.get(dtype) or str(dtype))


#: datavalue types whose kind is their name (`snak_value`): the common ones, without a str()
_KINDS = {k: k for k in ("string", "time", "quantity", "globecoordinate", "monolingualtext")}
#: their skip reasons, made once
_VALUE_SKIPS = {k: skip_value(k) for k in _KINDS}


def _qualifiers(qualifiers: Any) -> list[tuple[str, Value]]:
    """A statement's ``qualifiers`` object read in full (only a fact's are read)."""
    return [(qpid, snak_value(snak)) for qpid, snaks in (qualifiers or {}).items() for snak in snaks]


def _term(terms: Any, language: str) -> str | None:
    if not isinstance(terms, dict):
        return None  # empty terms serialise as [] in the dump
    t = terms.get(language)
    return str(t["value"]) if isinstance(t, dict) and "value" in t else None


def _aliases(terms: Any, language: str) -> list[str]:
    if not isinstance(terms, dict):
        return []
    return [str(a["value"]) for a in terms.get(language, []) or []]


def entity_from_json(
    obj: JSONObject, language: str = "en", filters: Filters | None = None
) -> EntityData:
    """Parse one entity object (any flavour) into the format-neutral :class:`EntityData`.

    With ``filters``, a statement is read only as far as its fate needs (the least work for
    what is kept): one that the rank or relation filter skips keeps a placeholder value, one
    whose value is not an entity id keeps the value's type alone (`main_value`), and only a
    statement that becomes a fact has its qualifiers read. Without, every snak is read."""
    raw_id = obj["id"]
    # a non-text id (null, 42) keeps its JSON spelling, so that validation names it exactly
    eid = raw_id if isinstance(raw_id, str) else json.dumps(raw_id)
    kind = str(obj.get("type", "item"))
    ent = EntityData(
        id=eid,
        kind=kind,
        label=_term(obj.get("labels"), language),
        aliases=_aliases(obj.get("aliases"), language),
        description=_term(obj.get("descriptions"), language),
    )
    if kind not in ("item", "property"):
        return ent
    claims = obj.get("claims", obj.get("statements")) or {}
    if not isinstance(claims, dict):
        raise TypeError("claims is not an object")
    for pid, statements in claims.items():
        if not is_pid(pid):
            raise ValueError(f"bad property id in claims: {pid!r}")
        for st in statements:
            rank = str(st.get("rank", "normal"))
            qualifiers: list[tuple[str, Value]] = []
            if filters is None:
                value = snak_value(st["mainsnak"])
                qualifiers = _qualifiers(st.get("qualifiers"))
            elif skip_reason(pid, rank, "item", filters) is not None:
                value = _UNREAD  # skipped for its rank or relation: the value does not matter
            else:
                value = main_value(st["mainsnak"])
                if value.kind == "item" and pid not in TYPE_RELATIONS:
                    qualifiers = _qualifiers(st.get("qualifiers"))
            ent.statements.append(
                Statement(
                    pid=pid,
                    value=value,
                    rank=rank,
                    statement_id=st.get("id"),
                    qualifiers=qualifiers,
                    source=str(st["kgprobe_source"]) if st.get("kgprobe_source") else None,
                )
            )
    return ent


#: the value of a statement the filters skip before its value is read
_UNREAD = Value(kind="unread")


def records_from_entity(
    obj: JSONObject, filters: Filters, location: str, source: str = SOURCE
) -> Iterator[Record]:
    """Records for one entity object; non-items/properties become a counted skip."""
    kind = str(obj.get("type", "item"))
    if "missing" in obj:
        yield SkipRecord(reason=skip_entity("missing"), location=location)
        return
    if kind not in ("item", "property"):
        yield SkipRecord(reason=skip_entity(kind), location=location)
        return
    ent = entity_from_json(obj, filters.language, filters)
    for rec in entity_records(ent, filters, location, source):
        if isinstance(rec, EntityRecord):
            yield _with_kgprobe_fields(rec, obj)
        else:
            yield rec


def _with_kgprobe_fields(rec: EntityRecord, obj: JSONObject) -> EntityRecord:
    """kgprobe's own entity keys (the bundled demo graph writes them; Wikidata never does).

    ``kgprobe_popularity`` becomes a node property; each ``kgprobe_inferred_types`` entry
    ``{"type": QID, "basis": text}`` joins ``inferred_types``, kept apart from the P31 types.
    """
    popularity = obj.get("kgprobe_popularity")
    if isinstance(popularity, (int, float)) and not isinstance(popularity, bool):
        rec.extra["popularity"] = float(popularity)
    for entry in obj.get("kgprobe_inferred_types") or []:
        qid, basis = entry.get("type"), entry.get("basis")
        if not (isinstance(qid, str) and is_qid(qid) and isinstance(basis, str) and basis):
            raise ValueError(f"bad kgprobe_inferred_types entry: {entry!r}")
        rec.inferred_types.append((qid, basis))
    return rec


# --------------------------------------------------------------------------- the fast path

if msgspec is not None:

    #: a field the line does not have (msgspec reads no union of Raw and None)
    _ABSENT = msgspec.Raw()

    class _DataValue(msgspec.Struct):
        type: str
        value: msgspec.Raw  # read (by `_loads`) only where the statement is kept

    class _Snak(msgspec.Struct):
        snaktype: str = "value"
        datavalue: _DataValue | None = None

    class _Statement(msgspec.Struct):
        mainsnak: _Snak
        rank: str = "normal"
        id: str | None = None
        qualifiers: dict[str, list[_Snak]] | None = None
        kgprobe_source: msgspec.Raw = _ABSENT

    class _Entity(msgspec.Struct):
        """The parts of an entity line the records are made of; the rest (sitelinks,
        references, the other languages' terms, …) is skipped unread."""

        id: str
        type: str = "item"
        labels: dict[str, msgspec.Raw] | list[msgspec.Raw] | None = None
        descriptions: dict[str, msgspec.Raw] | list[msgspec.Raw] | None = None
        aliases: dict[str, msgspec.Raw] | list[msgspec.Raw] | None = None
        claims: dict[str, list[_Statement]] | None = None
        statements: msgspec.Raw = _ABSENT
        missing: msgspec.Raw = _ABSENT
        kgprobe_popularity: msgspec.Raw = _ABSENT
        kgprobe_inferred_types: msgspec.Raw = _ABSENT

    class _EntityId(msgspec.Struct):
        id: str | None = None
        entity_type: str = msgspec.field(default="item", name="entity-type")

    _DECODE = msgspec.json.Decoder(_Entity).decode
    _DECODE_ENTITY_ID = msgspec.json.Decoder(_EntityId).decode
    _REFUSED: tuple[type[BaseException], ...] = (msgspec.DecodeError, RecursionError)


def typed_entity(data: bytes) -> Any:
    """One entity line decoded into the typed structures of the fast path, or None where
    msgspec refuses it (broken JSON, NaN, a lone surrogate, a field of an unexpected type, …:
    the general path then reads it) or is not installed.

    msgspec skips what is not asked for without checking that its text is UTF-8, so the line
    is checked here: bytes that are not UTF-8 stay the error they were (`guarded`)."""
    if msgspec is None:
        return None
    try:
        ent = _DECODE(data)
    except _REFUSED:
        return None
    if not data.isascii():
        data.decode("utf-8")
    return ent


def _term_of(terms: Any, language: str) -> Any:
    """A typed entity's terms as `_term`/`_aliases` read them: only ``language``'s decoded."""
    if not isinstance(terms, dict):
        return terms
    raw = terms.get(language)
    return {} if raw is None else {language: _loads(bytes(raw))}


def _typed_value(snak: Any) -> Value:
    """`snak_value` of a typed snak."""
    if snak.snaktype in ("somevalue", "novalue"):
        return Value(kind=snak.snaktype)
    dv = snak.datavalue
    if dv is None:
        raise KeyError("datavalue")
    return _raw_value(dv.type, dv.value)


def _raw_value(dtype: str, raw: Any) -> Value:
    """`datavalue` of a value still in JSON: an item id (the common case) read by msgspec
    into its two fields, anything else decoded as ``json.loads`` would (`_loads`)."""
    if dtype == "wikibase-entityid":
        try:
            ref = _DECODE_ENTITY_ID(raw)
        except msgspec.DecodeError:
            ref = None
        if ref is not None and ref.id is not None and ref.entity_type == "item" and QID_RE.match(ref.id):
            return Value("item", ref.id)
    return datavalue(dtype, _loads(bytes(raw)))


def fast_records(
    obj: JSONObject, filters: Filters, location: str, source: str = SOURCE
) -> list[Record] | None:
    """`typed_records` of an entity object already decoded (an entity document's): written
    back to JSON and decoded into the typed structures. None where the general path must
    read it. Written by the standard library, which writes back exactly what it read (orjson
    would write NaN as null); NaN and Infinity, which JSON has no words for, are refused."""
    try:
        data = json.dumps(obj, allow_nan=False, separators=(",", ":")).encode()
    except ValueError:
        return None
    ent = typed_entity(data)
    return None if ent is None else typed_records(ent, filters, location, source)


def typed_records(ent: Any, filters: Filters, location: str, source: str = SOURCE) -> list[Record] | None:
    """The records of a plain dump item, already validated; None when the entity needs the
    general path.

    Why it exists: the general path (`entity_from_json` → `entity_records` → `validated`)
    needs every part of a line as Python objects, builds an intermediate object per
    statement and re-checks every id it has just parsed; parsing a realistic dump that way
    cost 2.6 times decoding it (docs/benchmarks.md, issue 37). Here msgspec decodes only the
    parts records are made of (`typed_entity`), a statement is read as far as its fate needs
    (rank and relation first, then the main snak's type: most statements end there; the
    qualifiers only of a fact), and the same helpers make the same decisions (`datavalue`,
    `skip_reason`, `fact_record`, the checks of kgprobe.loaders.validate). Only what the
    general path would write unchanged is accepted: anything else (a bad id, an over-long
    term, kgprobe's own keys, a record that breaks a rule) returns None, and the general path
    gives the precise records and errors. tests/loaders/test_loader_fast_path.py checks that both give
    the same records.
    """
    if ent.missing or ent.type != "item":  # (a Raw field is empty where the line has none)
        return None
    if ent.kgprobe_popularity or ent.kgprobe_inferred_types:
        return None
    if ent.claims is None and ent.statements:
        return None
    eid = ent.id
    if not QID_RE.match(eid):
        return None
    lang = filters.language
    label = _term(_term_of(ent.labels, lang), lang)
    description = _term(_term_of(ent.descriptions, lang), lang)
    aliases = _aliases(_term_of(ent.aliases, lang), lang)
    try:
        check_terms(label, description, aliases)
    except Invalid:
        return None
    skips = SkipCounter()
    counts = skips.counts
    types: list[str] = []
    supers: list[str] = []
    facts: list[Record] = []
    ranks, relations = filters.ranks, filters.relations
    for pid, statements in (ent.claims or {}).items():
        if not PID_RE.match(pid):
            return None
        wanted = relations is None or pid in relations or pid in TYPE_RELATIONS
        for st in statements:
            # read as the general path reads it with filters (`entity_from_json`): rank and
            # relation first, then the main snak's type (`main_value`); a snak it reads and
            # cannot read makes the entity an error there, so it raises here too (the caller
            # then takes the general path)
            rank = st.rank
            if not (wanted and rank in ranks):
                counts[skip_reason(pid, rank, "item", filters) or ""] += 1
                continue
            snak = st.mainsnak
            snaktype = snak.snaktype
            if snaktype == "somevalue" or snaktype == "novalue":
                counts[skip_value(snaktype)] += 1
                continue
            dv = snak.datavalue
            if dv is None:
                return None
            dtype = dv.type
            if dtype != "wikibase-entityid":
                counts[_VALUE_SKIPS.get(dtype) or skip_value(dtype)] += 1
                continue
            value = _raw_value(dtype, dv.value)
            if value.kind != "item":
                counts[skip_value(value.kind)] += 1
                continue
            obj_id = value.text
            if not QID_RE.match(obj_id):
                return None
            if pid == INSTANCE_OF:
                types.append(obj_id)
                continue
            if pid == SUBCLASS_OF:
                supers.append(obj_id)
                continue
            own = _loads(bytes(st.kgprobe_source)) if st.kgprobe_source else None
            qualifiers = [(qpid, _typed_value(q)) for qpid, snaks in st.qualifiers.items()
                          for q in snaks] if st.qualifiers else []
            fact = fact_record(eid, pid, obj_id, rank, st.id, qualifiers,
                               str(own) if own else source, skips, location)
            try:  # subject, property and object were checked above
                if fact.qualifiers or fact.is_temporal or len(fact.source) > MAX_VALUE_CHARS:
                    check_fact_values(fact)
                elif fact.statement_id is not None:
                    check_statement_id(fact.statement_id)
            except Invalid:
                return None
            facts.append(fact)
    entity = EntityRecord(qid=eid, label=label, aliases=aliases, description=description,
                          types=list(dict.fromkeys(types)), superclasses=list(dict.fromkeys(supers)),
                          location=location)
    return [entity, *facts, *skips.flush(location)]


# --------------------------------------------------------------------------- files

#: What reading an entity object of an unexpected shape raises (either path).
_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, RecursionError)


def _brief(exc: BaseException) -> str:
    """``KeyError('id')`` style, cut to 300 characters (a value in a message can be huge)."""
    text = repr(exc)
    return text if len(text) <= 300 else text[:300] + "…"


def _entity_stream(
    entities: Iterator[tuple[str, Any]], filters: Filters, source: str
) -> Iterator[Record]:
    """Apply the entity limit and turn per-entity parse failures into ErrorRecords."""
    items = 0
    for location, obj in entities:
        if filters.limit is not None and items >= filters.limit:
            return
        recs, counted = entity_group(location, obj, filters, source)
        items += counted
        yield from recs


def entity_group(location: str, obj: Any, filters: Filters, source: str) -> tuple[list[Record], bool]:
    """The records of one entity (a dump line, an entity object or a redirect), and whether it
    counts towards the entity limit. One function for every reader: the sequential stream and
    the worker processes (kgprobe/loaders/parallel.py) give the same records for the same line.
    An error on a dump line names the line's byte offset too."""
    if obj.__class__ is not _Line:
        return _entity_group(location, obj, filters, source)
    recs, counted = _entity_group(location, obj, filters, source)
    if any(r.__class__ is ErrorRecord for r in recs):
        at = f" (line at byte offset {obj.offset:,})"
        recs = [ErrorRecord(r.location, r.message + at) if isinstance(r, ErrorRecord) else r
                for r in recs]
    return recs, counted


def _entity_group(location: str, obj: Any, filters: Filters, source: str) -> tuple[list[Record], bool]:
    fast = True
    if obj.__class__ is _Line:  # a dump line: msgspec first, the general reading else
        ent = typed_entity(obj.data)
        if ent is not None:
            try:
                recs = typed_records(ent, filters, location, source)
            except _MALFORMED:
                recs = None
            if recs is not None:  # the entity first, always
                return recs, True
        fast = False
        obj = _line_object(obj, location)
        if obj is None:
            return [], False
    if isinstance(obj, (ErrorRecord, SkipRecord)):
        return [obj], False
    if isinstance(obj, RedirectRecord):
        return list(validated(iter([obj]))), False
    if not isinstance(obj, dict) or "id" not in obj and "missing" not in obj:
        return [ErrorRecord(location=location, message="not a Wikidata entity object")], False
    try:  # (a line the typed path has read already goes to the general path at once)
        recs = fast_records(obj, filters, location, source) if fast else None
    except _MALFORMED:
        recs = None  # the general path names what is wrong
    if recs is not None:  # the entity first, always
        return recs, True
    try:
        recs = list(validated(records_from_entity(obj, filters, location, source)))
    except _MALFORMED as exc:
        return [ErrorRecord(location=location, message=f"malformed entity: {_brief(exc)}")], False
    return recs, any(isinstance(r, EntityRecord) for r in recs)


#: digits → "0", so that one search finds a run of 19 digits (see `_orjson`)
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGIT_RUN = b"0" * 19
#: what may stand before a JSON number (its sign and blanks aside): nothing, ``[``, ``:`` or ``,``
_BEFORE_NUMBER = frozenset(b"[:,")
_BLANKS = frozenset(b" \t\r\n")


def _big_integer(raw: bytes) -> bool:
    """Whether a run of 19 digits or more starts a number in ``raw`` (not inside a string,
    where a number never follows one of ``[:,``); a string that holds ``: 1234…`` merely errs
    on the safe side. One pass of C over the line; the loop runs only where digits are long."""
    zeros = raw.translate(_DIGITS_TO_ZERO)
    at = zeros.find(_LONG_DIGIT_RUN)
    while at >= 0:  # ``at`` starts a run (or lies inside one, where a digit precedes it)
        i = at - 1
        if i >= 0 and raw[i] == 0x2D:  # "-"
            i -= 1
        while i >= 0 and raw[i] in _BLANKS:
            i -= 1
        if i < 0 or raw[i] in _BEFORE_NUMBER:
            return True
        at = zeros.find(_LONG_DIGIT_RUN, at + len(_LONG_DIGIT_RUN))
    return False


#: what `_orjson` returns for a line it leaves to the standard library
_UNDECIDED = object()


def _orjson(raw: bytes) -> Any:
    """orjson's reading of one line of UTF-8, or ``_UNDECIDED`` where the standard library
    might read it otherwise; it costs half of the standard library's CPU, and far less than
    decoding the line to ``str`` first.

    Where they differ: orjson reads an integer beyond 64 bits as a float (so a line with 19
    digits in a row *where a number starts* is left to the standard library; the long external
    ids of real entities are strings and stay here), and refuses NaN, Infinity, lone
    surrogates, nesting deeper than 1,024, bytes that are not UTF-8 and broken JSON, where the
    standard library parses or gives its own error. Duplicate keys: both keep the last. On the
    real entities of tests/fixtures/wikidata/entity-json no line is left to the standard
    library (tests/loaders/test_loader_fast_path.py)."""
    if _big_integer(raw):
        return _UNDECIDED
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _UNDECIDED


def _loads(data: str | bytes) -> Any:
    """One JSON value exactly as ``json.loads`` reads it (same value, same errors; bytes must
    be UTF-8), by orjson wherever that gives the same (`_orjson`)."""
    obj = _orjson(data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data)
    if obj is _UNDECIDED:
        return json.loads(data if isinstance(data, str) else data.decode("utf-8"))
    return obj


class _Line(NamedTuple):
    """One line of a dump: its entity's JSON (blanks and the trailing comma cut) and the
    line as read."""

    data: bytes
    line: bytes
    offset: int  # of the line's first byte in the file's (decompressed) text


def dump_lines(
    path: Path | str, fh: Iterable[bytes], first_lineno: int, offset: int = 0
) -> Iterator[tuple[str, Any]]:
    """Entity lines of a dump file, as bytes (`entity_group` decodes them), from line
    ``first_lineno`` at byte ``offset``; blank lines, the brackets and trailing commas are
    handled here."""
    for lineno, line in enumerate(fh, start=first_lineno):
        entity = _entity_line(line, offset)
        if entity is not None:
            yield f"{path}:{lineno}", entity
        offset += len(line)


def _entity_line(line: bytes, offset: int) -> _Line | None:
    """A dump line at byte ``offset`` as an entity's JSON, or None for a blank line or a
    bracket."""
    data = line.strip()
    if data in _NOT_ENTITIES:
        return None
    return _Line(data[:-1] if data.endswith(b",") else data, line, offset)


def _line_object(line: _Line, location: str) -> Any:
    """A dump line's JSON value as ``json.loads`` reads it, an ErrorRecord where it is not
    JSON, or None for a line of blanks. A line orjson leaves undecided is decoded and read as
    before this path took bytes (``str`` strip, the standard library): a line that is not
    UTF-8 raises UnicodeDecodeError, which ends the stream with one line (`guarded`), every
    line before it handed on."""
    obj = _orjson(line.data)
    if obj is not _UNDECIDED:
        return obj
    text = line.line.decode("utf-8").strip()
    if not text or text in ("[", "]"):
        return None
    if text.endswith(","):
        text = text[:-1]
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        return ErrorRecord(location=location, message=f"invalid JSON: {exc.msg} at column {exc.colno}")
    except RecursionError:
        return ErrorRecord(location=location, message="invalid JSON: nested too deeply")


_NOT_ENTITIES = frozenset((b"", b"[", b"]"))


def _document_entities(path: Path, doc: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(doc, dict) and "error" in doc and "entities" not in doc:
        err = doc["error"]
        info = err.get("info", err) if isinstance(err, dict) else err
        raise InputError(f"{path}: API error response: {info}")
    if isinstance(doc, dict) and isinstance(doc.get("entities"), dict):
        for key, obj in doc["entities"].items():
            loc = f"{path}#{key}"
            if isinstance(obj, dict):
                target = obj.get("id")
                redirect = obj.get("redirects")
                if isinstance(redirect, dict) and "from" in redirect and "to" in redirect:
                    yield (
                        loc,
                        RedirectRecord(
                            source=str(redirect["from"]), target=str(redirect["to"]), location=loc
                        ),
                    )
                elif target and key != target and is_qid(key) and is_qid(str(target)):
                    yield loc, RedirectRecord(source=key, target=str(target), location=loc)
            yield loc, obj
        return
    if isinstance(doc, dict) and "id" in doc:
        yield f"{path}#{doc['id']}", doc
        return
    if isinstance(doc, list):
        for i, obj in enumerate(doc):
            yield f"{path}#{i}", obj
        return
    raise InputError(f"{path}: JSON but not Wikidata entity JSON (no 'entities' or 'id')")


def load_json(
    path: str | Path,
    filters: Filters | None = None,
    *,
    source: str = SOURCE,
    workers: int = 1,
    positions: bool = False,
    start: Position | None = None,
    post: Callable[[list[Record]], list[Record]] | None = None,
) -> Iterator[Record]:
    """Stream records from a Wikidata JSON dump or entity document (plain, .gz, .bz2 or .zst).

    The layout is detected from the first line: ``[`` alone (the dump), a complete entity
    object (JSON lines), or anything else (one document, parsed whole, so refused beyond
    ``MAX_JSON_MB``, see kgprobe.loaders.common). A truncated or corrupt file ends the stream
    with an InputError naming the file.

    A dump or JSON lines file is read in chunks of whole lines, parsed in ``workers``
    processes (kgprobe/loaders/parallel.py): the records are the same, in the same order, for
    any number. ``positions`` adds a :class:`~kgprobe.records.Position` after each chunk (the
    ingest's checkpoints); ``start`` (such a position) resumes there, skipping the text
    before it unparsed. Both are ignored for a document parsed whole.
    """
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    read = _Reading(workers, positions, start, post if filters is None or filters.limit is None else None)
    return guarded(Path(path), _load_json(Path(path), filters or Filters(), source, read))


class _Reading(NamedTuple):
    """How a dump is read: worker processes, positions yielded, where to resume."""

    workers: int = 1
    positions: bool = False
    start: Position | None = None
    #: applied to each chunk's records where the chunk is parsed (issue 37: the bulk load's
    #: import rows built in the workers); never with an entity limit, which counts lines here
    post: Callable[[list[Record]], list[Record]] | None = None


def _load_json(p: Path, f: Filters, source: str, read: _Reading) -> Iterator[Record]:
    cap = max_json_chars()  # one document parsed whole: at most this many characters
    most = 4 * cap + 4  # bytes that hold more than ``cap`` characters whatever they are
    with open_binary(p) as fh:
        raw = fh.readline(most)
        lineno = 1
        offset = len(raw)  # bytes read so far
        try:
            while raw and not raw.decode("utf-8").strip() and len(raw) < most:
                raw = fh.readline(most)
                lineno += 1
                offset += len(raw)
            if len(raw) >= most:  # one line longer than a whole document may be
                raise json_too_large(p)
            first = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{p}: not UTF-8 text ({exc.reason})") from exc
        if len(first) > cap:
            raise json_too_large(p)
        head = first.strip()
        if head == "[":
            yield from _chunked(p, fh, lineno + 1, offset, f, source, read, None)
            return
        if head.startswith("{"):
            try:
                obj = json.loads(head.rstrip(","))
            except (json.JSONDecodeError, RecursionError):
                obj = None
            if isinstance(obj, dict) and "id" in obj and "type" in obj and "entities" not in obj:
                # JSON lines: one entity per line, no enclosing brackets
                yield from _chunked(p, fh, lineno + 1, offset, f, source, read, (f"{p}:{lineno}", obj))
                return
        try:
            rest = fh.read(most - len(raw))
            if len(raw) + len(rest) >= most:
                raise json_too_large(p)
            text = first + rest.decode("utf-8")
            if len(text) > cap:
                raise json_too_large(p)
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{p}:{exc.lineno + lineno - 1}: not valid JSON ({exc.msg})") from exc
        except RecursionError as exc:
            raise InputError(f"{p}: not valid JSON (nested too deeply)") from exc
        except UnicodeDecodeError as exc:
            raise InputError(f"{p}: not UTF-8 text ({exc.reason})") from exc
    yield from _entity_stream(_document_entities(p, doc), f, source)


def _chunked(
    p: Path, fh: BinaryIO, lineno: int, offset: int, f: Filters, source: str, read: _Reading,
    head: tuple[str, Any] | None,
) -> Iterator[Record]:
    """The entity lines of a dump (from line ``lineno`` at byte ``offset``; ``head``: the
    first line of JSON lines, already decoded), chunk by chunk: parsed by `_parse_chunk` here
    or in worker processes, the entity limit applied here, line by line, as `_entity_stream`
    applies it."""
    limit, items = f.limit, 0
    start = read.start
    kind = compression_of(p)
    resume_at: int | None = None  # a multi-stream file's checkpoint: the stream to start at
    if start is not None and start.offset >= offset:  # resume: the text before it unparsed
        if read.workers > 1 and kind in ("bz2", "zst") and is_stream_start(p, str(kind), start.stream):
            resume_at = start.stream  # nothing before it decompressed
        else:
            skip_to(fh, offset, start.offset)
        lineno, offset, items, head = start.line, start.offset, start.entities, None
    if head is not None:
        if limit is not None and items >= limit:
            return
        recs, counted = entity_group(head[0], head[1], f, source)
        items += counted
        yield from recs
    size = p.stat().st_size if read.positions else 0
    plain = compression_of(p) is None

    def position(offset: int, lineno: int) -> Position:
        return Position(source=str(p), offset=offset, line=lineno, entities=items,
                        read=offset if plain else stored_tell(fh), size=size)

    if read.workers == 1:  # line by line: memory bounded by one entity
        every, last = chunk_bytes(), offset
        for line in fh:
            entity = _entity_line(line, offset)
            if entity is not None:
                if limit is not None and items >= limit:
                    return
                recs, counted = entity_group(f"{p}:{lineno}", entity, f, source)
                items += counted
                yield from recs
            offset += len(line)
            lineno += 1
            if read.positions and offset - last >= every:  # where a chunk of `read_chunks` ends
                yield position(offset, lineno)
                last = offset
        if read.positions and offset > last:
            yield position(offset, lineno)
        return
    runs = None
    if resume_at is not None:
        runs = stream_runs(p, str(kind), _run_bytes(), resume_at)
    elif kind in ("bz2", "zst") and start is None:
        runs = _stream_runs(p, kind, read)
    jobs: Iterator[_Chunk | _StreamRun]
    if runs is not None:  # a multi-stream file: each worker decompresses its own streams
        first = None if resume_at is not None else offset  # text the main process read already
        jobs = (_StreamRun(str(p), str(kind), r, first if i == 0 else None, f, source, read.post)
                for i, r in enumerate(runs))
    else:
        # a plain file's chunk is read again by its worker (from the page cache): only where it
        # lies crosses the process boundary, not its megabytes (they cost the main process as
        # much CPU as unpickling the records); a compressed file's text can only be sent, and
        # is decompressed in a thread of its own, beside this one's work
        chunks = (plain_chunks(fh, lineno, offset, chunk_bytes()) if plain
                  else read_ahead(read_chunks(fh, lineno, offset, chunk_bytes()), name="kgprobe-decompress"))
        jobs = (_Chunk(str(p), c.data, c.lineno, c.offset, f, source, c.next_lineno, c.size,
                       read.post)
                for c in chunks)
    for job, parsed in ordered_map(_parse_job, jobs, read.workers):
        if job.__class__ is _StreamRun:  # its lines were numbered from its own start: renumber
            _relocate(parsed.records, f"{p}:", lineno, offset)
            lineno, offset = lineno + parsed.lines, offset + parsed.size
            if read.positions:  # the compressed bytes read: those of the streams parsed
                here = Position(source=str(p), offset=offset, line=lineno, entities=items,
                                read=job.run.end, size=size, stream=job.run.end)  # type: ignore[union-attr]
        elif read.positions:
            here = position(job.offset + job.size, job.next_lineno)  # type: ignore[union-attr]
        if read.post is not None:  # no limit: the chunk's records, as ``post`` made them
            yield from parsed.records
            if parsed.error is not None:
                raise parsed.error
            if read.positions:
                yield here
            continue
        at = 0
        for group in parsed.groups:
            if limit is not None and items >= limit:
                return
            n = group >> 1
            yield from parsed.records[at:at + n]
            at += n
            items += group & 1
        if parsed.error is not None:
            raise parsed.error
        if read.positions:
            yield Position(source=here.source, offset=here.offset, line=here.line,
                           entities=items, read=here.read, size=here.size, stream=here.stream)


def _stream_runs(p: Path, kind: str, read: _Reading) -> Iterator[Run] | None:
    """The runs of streams of a multi-stream .bz2 or multi-frame .zst for ``read.workers``
    workers, or None (one line on stderr saying why, where workers were asked for) where the
    file is one stream."""
    if read.workers == 1:
        return None
    runs = stream_runs(p, kind, _run_bytes())
    if runs is None:
        writer = "a parallel bzip2 (lbzip2, pbzip2)" if kind == "bz2" else "pzstd"
        print(f"{p}: one {unit_name(kind)} (no second in its first {PROBE_BYTES >> 20} MiB), so "
              f"it is decompressed here and only parsed in the workers; compressed by {writer}, "
              "the workers would decompress it too", file=sys.stderr)
    return runs


def _run_bytes() -> int:
    """Compressed bytes per run of streams: a quarter of a chunk (dump text compresses 5-20
    times, so a run's text is a few chunks)."""
    return max(1, chunk_bytes() // 4)


def _relocate(records: list[Any], prefix: str, lineno: int, offset: int) -> None:
    """Number the lines of a stream run's records from the file's start: ``prefix`` + the
    line within the run becomes ``prefix`` + ``lineno`` + it, in a location and in an error's
    message (``… already used … at FILE:LINE``), and an error's byte offset within the run
    gains ``offset``. The errors a worker's ``post`` kept inside what it returns (the bulk
    load's ``ChunkRows.refused``) are renumbered too."""
    n = len(prefix)
    line = re.compile(re.escape(prefix) + r"([0-9]+)\b")

    def renumber(m: re.Match[str]) -> str:
        return f"{prefix}{lineno + int(m.group(1))}"

    for rec in records:
        inner = getattr(rec, "refused", None)
        if isinstance(inner, list):
            _relocate(inner, prefix, lineno, offset)
        loc = getattr(rec, "location", None)
        if loc and loc.startswith(prefix) and loc[n:].isdigit():
            rec.location = f"{prefix}{lineno + int(loc[n:])}"
        if rec.__class__ is ErrorRecord:
            message = line.sub(renumber, rec.message)
            m = _AT_OFFSET.search(message)
            if m is not None:
                at = offset + int(m.group(1).replace(",", ""))
                message = message[:m.start()] + f" (line at byte offset {at:,})"
            rec.message = message


_AT_OFFSET = re.compile(r" \(line at byte offset ([0-9,]+)\)\Z")


class _StreamRun(NamedTuple):
    """What a worker needs to parse a run of whole streams of a multi-stream .bz2 or .zst
    (``kind``; kgprobe/loaders/streams.py): ``first``, for the first run only, is the bytes of its text
    the main process read already (the dump's ``[`` line)."""

    path: str
    kind: str
    run: Run
    first: int | None
    filters: Filters
    source: str
    post: Callable[[list[Record]], list[Record]] | None = None


def _parse_job(job: _Chunk | _StreamRun) -> _Parsed:
    """`_parse_chunk` or `_parse_run`, in a worker process or here."""
    return _parse_run(job) if job.__class__ is _StreamRun else _parse_chunk(job)  # type: ignore[arg-type]


def _parse_run(job: _StreamRun) -> _Parsed:
    """Decompress and parse the lines a run of streams owns, numbered from line 0 at byte 0 of
    what it owns (`_relocate` numbers them from the file's start)."""
    text, error = run_text(job.path, job.kind, job.run, job.first)
    parsed = _parse_chunk(_Chunk(job.path, text, 0, 0, job.filters, job.source,
                                 0, len(text), job.post))
    return parsed._replace(error=parsed.error or error, lines=text.count(b"\n"), size=len(text))


class _Chunk(NamedTuple):
    """What a worker needs to parse a chunk of lines (kgprobe/loaders/parallel.py)."""

    path: str
    data: bytes
    lineno: int
    offset: int
    filters: Filters
    source: str
    next_lineno: int
    size: int  # bytes of text; ``data`` is empty where the worker reads them from the file
    post: Callable[[list[Record]], list[Record]] | None = None  # see `_Reading.post`


class _Parsed(NamedTuple):
    """A chunk's records, and per entity line ``2 * its records + counted`` (it counts towards
    the entity limit); ``error``: what stopped the chunk (bytes that are not UTF-8), raised by
    the reader after the records before it."""

    records: list[Record]
    groups: list[int]
    error: BaseException | None
    lines: int = 0  # of a stream run: the lines it owns, and their bytes
    size: int = 0


def _parse_chunk(job: _Chunk) -> _Parsed:
    """Parse one chunk of dump lines, in a worker process or here: `entity_group` per line."""
    records: list[Record] = []
    groups: list[int] = []
    data = job.data
    if len(data) != job.size:  # a plain file's chunk: read here
        with open(job.path, "rb") as fh:
            fh.seek(job.offset)
            data = fh.read(job.size)
        if len(data) != job.size:  # (`guarded` makes it one line)
            raise OSError(f"{job.path} changed while it was read")
    try:
        for location, line in dump_lines(job.path, io.BytesIO(data), job.lineno, job.offset):
            recs, counted = entity_group(location, line, job.filters, job.source)
            records += recs
            groups.append(2 * len(recs) + counted)
    except UnicodeDecodeError as exc:
        return _Parsed(job.post(records) if job.post else records, groups, exc)
    return _Parsed(job.post(records) if job.post else records, groups, None)


__all__ = [
    "SOURCE",
    "entity_from_json",
    "fast_records",
    "load_json",
    "records_from_entity",
    "snak_value",
]
