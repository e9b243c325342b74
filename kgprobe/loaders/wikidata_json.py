"""Wikidata JSON: the entity dump (``[`` / one entity per line / ``]``) and entity documents.

Dumps (``.json``, ``.json.gz``, ``.json.bz2``) are read line by line, so memory does not grow
with the file. Entity documents — ``Special:EntityData`` (``{"entities": {...}}``),
``wbgetentities`` responses (also the older flavour whose item values carry only a
``numeric-id``), and a bare entity object — are small by nature and parsed whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from kgprobe.errors import InputError
from kgprobe.loaders.build import (
    EntityData,
    Statement,
    Value,
    entity_records,
    fact_record,
    skip_reason,
)
from kgprobe.loaders.common import (
    Filters,
    SkipCounter,
    guarded,
    json_too_large,
    max_json_chars,
    open_text,
    skip_entity,
    time_from_json,
)
from kgprobe.loaders.validate import (
    MAX_VALUE_CHARS,
    Invalid,
    check_fact,
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
    Record,
    RedirectRecord,
    SkipRecord,
    is_pid,
    is_qid,
)

SOURCE = "wikidata-json"


# --------------------------------------------------------------------------- snaks → values


def _entity_value(v: dict[str, Any]) -> Value:
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


def snak_value(snak: dict[str, Any]) -> Value:
    """One JSON snak → :class:`Value`; raises KeyError/TypeError/ValueError on malformed input."""
    snaktype = snak.get("snaktype", "value")
    if snaktype in ("somevalue", "novalue"):
        return Value(kind=snaktype)
    dv = snak["datavalue"]
    dtype = dv["type"]
    val = dv["value"]
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


def _term(terms: Any, language: str) -> str | None:
    if not isinstance(terms, dict):
        return None  # empty terms serialise as [] in the dump
    t = terms.get(language)
    return str(t["value"]) if isinstance(t, dict) and "value" in t else None


def _aliases(terms: Any, language: str) -> list[str]:
    if not isinstance(terms, dict):
        return []
    return [str(a["value"]) for a in terms.get(language, []) or []]


def entity_from_json(obj: dict[str, Any], language: str = "en") -> EntityData:
    """Parse one entity object (any flavour) into the format-neutral :class:`EntityData`."""
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
            qualifiers: list[tuple[str, Value]] = []
            for qpid, snaks in (st.get("qualifiers") or {}).items():
                for snak in snaks:
                    qualifiers.append((qpid, snak_value(snak)))
            ent.statements.append(
                Statement(
                    pid=pid,
                    value=snak_value(st["mainsnak"]),
                    rank=str(st.get("rank", "normal")),
                    statement_id=st.get("id"),
                    qualifiers=qualifiers,
                    source=str(st["kgprobe_source"]) if st.get("kgprobe_source") else None,
                )
            )
    return ent


def records_from_entity(
    obj: dict[str, Any], filters: Filters, location: str, source: str = SOURCE
) -> Iterator[Record]:
    """Records for one entity object; non-items/properties become a counted skip."""
    kind = str(obj.get("type", "item"))
    if "missing" in obj:
        yield SkipRecord(reason=skip_entity("missing"), location=location)
        return
    if kind not in ("item", "property"):
        yield SkipRecord(reason=skip_entity(kind), location=location)
        return
    ent = entity_from_json(obj, filters.language)
    for rec in entity_records(ent, filters, location, source):
        if isinstance(rec, EntityRecord):
            yield _with_kgprobe_fields(rec, obj)
        else:
            yield rec


def _with_kgprobe_fields(rec: EntityRecord, obj: dict[str, Any]) -> EntityRecord:
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


def fast_records(
    obj: dict[str, Any], filters: Filters, location: str, source: str = SOURCE
) -> list[Record] | None:
    """The records of a plain dump item, already validated; None when the entity needs the
    general path.

    Why it exists: the general path (`entity_from_json` → `entity_records` → `validated`) builds
    an intermediate object per statement and re-checks every id it has just parsed, and that
    CPU is what kgprobe's ingest costs beyond the database's own (docs/benchmarks.md). This
    path makes the same decisions with the same helpers (`snak_value`, `skip_reason`,
    `fact_record`, `check_fact`) and accepts only what the general path would write unchanged:
    anything else (a bad id, an over-long term, kgprobe's own keys, a record that breaks a rule)
    returns None, and the general path then gives the precise records and errors.
    tests/test_loader_fast_path.py checks that both give the same records.
    """
    if "missing" in obj or obj.get("type", "item") != "item":
        return None
    if "kgprobe_popularity" in obj or "kgprobe_inferred_types" in obj:
        return None
    eid = obj["id"]
    if not (isinstance(eid, str) and QID_RE.match(eid)):
        return None
    lang = filters.language
    label = _term(obj.get("labels"), lang)
    description = _term(obj.get("descriptions"), lang)
    aliases = _aliases(obj.get("aliases"), lang)
    try:
        check_terms(label, description, aliases)
    except Invalid:
        return None
    claims = obj.get("claims", obj.get("statements")) or {}
    if not isinstance(claims, dict):
        return None
    skips = SkipCounter()
    types: list[str] = []
    supers: list[str] = []
    facts: list[Record] = []
    for pid, statements in claims.items():
        if not (isinstance(pid, str) and PID_RE.match(pid)):
            return None
        for st in statements:
            # every snak is read, as the general path reads them: one it cannot read makes
            # the whole entity an error there, so it raises here too (and the caller falls back)
            qualifiers = [(qpid, snak_value(snak))
                          for qpid, snaks in (st.get("qualifiers") or {}).items() for snak in snaks]
            value = snak_value(st["mainsnak"])
            kind, obj_id = value.kind, value.text
            rank = str(st.get("rank", "normal"))
            sid = st.get("id")
            if sid is not None and not isinstance(sid, str):
                return None
            reason = skip_reason(pid, rank, kind, filters)
            if reason is not None:
                skips.add(reason)
                continue
            if not QID_RE.match(obj_id):
                return None
            if pid == INSTANCE_OF:
                types.append(obj_id)
                continue
            if pid == SUBCLASS_OF:
                supers.append(obj_id)
                continue
            own = st.get("kgprobe_source")
            fact = fact_record(eid, pid, obj_id, rank, sid, qualifiers,
                               str(own) if own else source, skips, location)
            try:  # subject, property and object were checked above
                if fact.qualifiers or fact.is_temporal or len(fact.source) > MAX_VALUE_CHARS:
                    check_fact(fact)
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
        if isinstance(obj, (ErrorRecord, SkipRecord)):
            yield obj
            continue
        if isinstance(obj, RedirectRecord):
            yield from validated(iter([obj]))
            continue
        if not isinstance(obj, dict) or "id" not in obj and "missing" not in obj:
            yield ErrorRecord(location=location, message="not a Wikidata entity object")
            continue
        try:
            recs = fast_records(obj, filters, location, source)
        except _MALFORMED:
            recs = None  # the general path names what is wrong
        if recs is None:
            try:
                recs = list(validated(records_from_entity(obj, filters, location, source)))
            except _MALFORMED as exc:
                yield ErrorRecord(location=location, message=f"malformed entity: {_brief(exc)}")
                continue
        if any(isinstance(r, EntityRecord) for r in recs):
            items += 1
        yield from recs


#: digits → "0", so that one search finds a run of 19 digits (see `_loads`)
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGIT_RUN = b"0" * 19


def _loads(text: str) -> Any:
    """orjson (half the CPU of the standard library's decoder), where it gives what the
    standard library gives; else the standard library decides, so that what is accepted and
    every error message stay the same. orjson refuses NaN, Infinity, lone surrogates, deep
    nesting and broken JSON (then the standard library parses or raises), and reads an
    integer beyond 64 bits as a float, so a line with 19 digits in a row (in a number or a
    string alike) goes to the standard library directly."""
    if _LONG_DIGIT_RUN in text.encode("utf-8", "surrogatepass").translate(_DIGITS_TO_ZERO):
        return json.loads(text)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _dump_lines(path: Path, fh: Any, first_lineno: int) -> Iterator[tuple[str, Any]]:
    """Entities of a dump file, one per line; trailing commas and the closing ``]`` handled."""
    for lineno, line in enumerate(fh, start=first_lineno):
        s = line.strip()
        if not s or s in ("[", "]"):
            continue
        if s.endswith(","):
            s = s[:-1]
        loc = f"{path}:{lineno}"
        try:
            yield loc, _loads(s)
        except json.JSONDecodeError as exc:
            yield (
                loc,
                ErrorRecord(location=loc, message=f"invalid JSON: {exc.msg} at column {exc.colno}"),
            )
        except RecursionError:
            yield loc, ErrorRecord(location=loc, message="invalid JSON: nested too deeply")


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
    path: str | Path, filters: Filters | None = None, *, source: str = SOURCE
) -> Iterator[Record]:
    """Stream records from a Wikidata JSON dump or entity document (plain, .gz or .bz2).

    The layout is detected from the first line: ``[`` alone (the dump), a complete entity
    object (JSON lines), or anything else (one document, parsed whole, so refused beyond
    ``MAX_JSON_MB``, see kgprobe.loaders.common). A truncated or corrupt file ends the stream
    with an InputError naming the file.
    """
    return guarded(Path(path), _load_json(Path(path), filters or Filters(), source))


def _load_json(p: Path, f: Filters, source: str) -> Iterator[Record]:
    cap = max_json_chars()  # one document parsed whole: at most this many characters
    with open_text(p) as fh:
        try:
            first = fh.readline(cap + 1)
            lineno = 1
            while first and not first.strip():
                first = fh.readline(cap + 1)
                lineno += 1
            if len(first) > cap:  # one line longer than a whole document may be
                raise json_too_large(p)
        except UnicodeDecodeError as exc:
            raise InputError(f"{p}: not UTF-8 text ({exc.reason})") from exc
        head = first.strip()
        if head == "[":
            yield from _entity_stream(_dump_lines(p, fh, lineno + 1), f, source)
            return
        if head.startswith("{"):
            try:
                obj = json.loads(head.rstrip(","))
            except (json.JSONDecodeError, RecursionError):
                obj = None
            if isinstance(obj, dict) and "id" in obj and "type" in obj and "entities" not in obj:
                # JSON lines: one entity per line, no enclosing brackets
                def lines() -> Iterator[tuple[str, Any]]:
                    yield f"{p}:{lineno}", obj
                    yield from _dump_lines(p, fh, lineno + 1)

                yield from _entity_stream(lines(), f, source)
                return
        try:
            rest = fh.read(cap + 1 - len(first))
            if len(first) + len(rest) > cap:
                raise json_too_large(p)
            doc = json.loads(first + rest)
        except json.JSONDecodeError as exc:
            raise InputError(f"{p}:{exc.lineno + lineno - 1}: not valid JSON ({exc.msg})") from exc
        except RecursionError as exc:
            raise InputError(f"{p}: not valid JSON (nested too deeply)") from exc
        except UnicodeDecodeError as exc:
            raise InputError(f"{p}: not UTF-8 text ({exc.reason})") from exc
    yield from _entity_stream(_document_entities(p, doc), f, source)


__all__ = [
    "SOURCE",
    "entity_from_json",
    "fast_records",
    "load_json",
    "records_from_entity",
    "snak_value",
]
