"""The JSON loader's fast path gives exactly the records of the general path, or steps aside.

`typed_records` (dump lines decoded by msgspec) and `fast_records` (entity objects decoded
already, through the same code) exist for speed only (docs/benchmarks.md, session 13 and
issue 37). The general path (`records_from_entity` → `validated`) is the reference: for any
entity object, the fast path must either return None or the same records, in the same order, with the same locations. The
entities are generated with the shapes real dumps have and the ones they should not have (bad
ids, ranks, values, times, statement ids, over-long terms, kgprobe's own keys), and the fast
path must really be taken for ordinary items, else the comparison would prove nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loaders_support import WD, gen_dump_module

from kgprobe.errors import InputError
from kgprobe.loaders import wikidata_json
from kgprobe.loaders.common import Filters, time_from_json
from kgprobe.loaders.validate import MAX_TERM_CHARS, validated
from kgprobe.loaders.wikidata_json import _loads, fast_records, load_json, records_from_entity
from kgprobe.records import EntityRecord, ErrorRecord, Record, SkipRecord

CAUGHT = (KeyError, TypeError, ValueError, AttributeError, RecursionError)


def shown(records: list[Record] | None) -> list[tuple[str, str, str]] | None:
    """Records as comparable text: the class, every field (repr leaves out the location) and
    the location."""
    if records is None:
        return None
    return [(type(r).__name__, repr(r), getattr(r, "location", "")) for r in records]


def general(obj: dict[str, Any], filters: Filters) -> list[tuple[str, str, str]] | str | None:
    try:
        return shown(list(validated(records_from_entity(obj, filters, "f.json:7"))))
    except CAUGHT as exc:
        return f"malformed: {exc!r}"


def fast(obj: dict[str, Any], filters: Filters) -> list[tuple[str, str, str]] | None:
    try:
        return shown(fast_records(obj, filters, "f.json:7"))
    except CAUGHT:
        return None


# --------------------------------------------------------------------------- generated entities

ITEM_IDS = ["Q1", "Q42", "Q5", "Q1985727", "Q0", "Q-3", "q7", "Q" + "9" * 19, "P31"]
PIDS = ["P31", "P279", "P39", "P69", "P106", "P580", "P582", "P585", "P642", "P0", "X9"]
QUALIFIER_PIDS = ["P580", "P582", "P585", "P642", "P1545", "Q5", "P0"]
TIMES = [
    "+1952-03-11T00:00:00Z",
    "+1952-00-00T00:00:00Z",
    "-0200-01-01T00:00:00Z",
    "+2001-13-01T00:00:00Z",
    "+2001-01-32T00:00:00Z",
    "+" + "9" * 20 + "-01-01T00:00:00Z",
    "yesterday",
]


def item_value(qid: str, flavour: int) -> dict[str, Any]:
    if flavour == 0:
        return {"entity-type": "item", "numeric-id": int(qid[1:]) if qid[1:].isdigit() else 1, "id": qid}
    if flavour == 1:
        return {"entity-type": "item", "numeric-id": int(qid[1:]) if qid[1:].isdigit() else -4}
    return {"entity-type": "property", "id": qid}


def pick(draw: st.DrawFn, clean: bool, good: list[Any], bad: list[Any]) -> Any:
    """One of ``good``, or (unless ``clean``) sometimes one of ``bad``."""
    return draw(st.sampled_from(good if clean else good * 3 + bad))


@st.composite
def snaks(draw: st.DrawFn, pid: str, clean: bool) -> dict[str, Any]:
    kind = pick(draw, clean, ["item"] * 6 + ["time", "string", "somevalue", "novalue",
                                             "quantity", "monolingualtext"], ["broken"])
    if kind in ("somevalue", "novalue"):
        return {"snaktype": kind, "property": pid}
    if kind == "broken":
        return draw(st.sampled_from([{"snaktype": "value"}, {"datavalue": {"type": "time"}},
                                     {"datavalue": {"type": "string", "value": None}}]))
    if kind == "item":
        qid = pick(draw, clean, ITEM_IDS[:4], ITEM_IDS[4:])
        flavour = pick(draw, clean, [0, 0, 0, 1], [2])
        dv = {"type": "wikibase-entityid", "value": item_value(qid, flavour)}
    elif kind == "time":
        dv = {"type": "time", "value": {
            "time": pick(draw, clean, TIMES[:3], TIMES[3:]),
            "precision": pick(draw, clean, [9, 10, 11, 11, 11, 14], [20]),
            "calendarmodel": draw(st.sampled_from(["http://www.wikidata.org/entity/Q1985727",
                                                   "http://www.wikidata.org/entity/Q1985786"])),
        }}
    elif kind == "string":
        dv = {"type": "string", "value": draw(st.text(max_size=5))}
    elif kind == "quantity":
        dv = {"type": "quantity", "value": {"amount": "+12", "unit": "1"}}
    else:
        dv = {"type": "monolingualtext", "value": {"text": "x", "language": "en"}}
    return {"snaktype": "value", "property": pid, "datavalue": dv}


@st.composite
def statements(draw: st.DrawFn, pid: str, clean: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"mainsnak": draw(snaks(pid, clean)), "type": "statement"}
    rank = pick(draw, clean, ["normal"] * 4 + ["preferred", "deprecated", None], ["odd"])
    if rank is not None:
        out["rank"] = rank
    sid = pick(draw, clean, ["Q1$ABC-1", "q1-5f3e", "Q1$5F3E-AA", None, ""],
               [42, "Q1$" + "A" * 300, "Q1$bad id!"])
    if sid is not None:
        out["id"] = sid
    if draw(st.booleans()):
        qualifiers: dict[str, list[dict[str, Any]]] = {}
        qpids = QUALIFIER_PIDS[:5] if clean else QUALIFIER_PIDS
        for qpid in draw(st.lists(st.sampled_from(qpids), max_size=3, unique=True)):
            qualifiers[qpid] = draw(st.lists(snaks(qpid, clean), min_size=1, max_size=2))
        out["qualifiers"] = qualifiers
    if draw(st.integers(0, 9)) == 0:
        out["kgprobe_source"] = pick(draw, clean, ["lama", ""], ["x" * 1001])
    return out


@st.composite
def entity_objects(draw: st.DrawFn) -> tuple[dict[str, Any], bool]:
    """Half of them clean (what a dump mostly holds: the fast path should take them), half
    with broken parts mixed in (it must step aside, or agree)."""
    clean = draw(st.booleans())
    obj: dict[str, Any] = {
        "type": pick(draw, clean, ["item"], ["property", "lexeme"]),
        "id": pick(draw, clean, ["Q1"], ["Q0", "P5", 42, None]),
    }
    label = pick(draw, clean, ["Douglas Adams", "", None], ["x" * (MAX_TERM_CHARS + 1), 7])
    if label is not None:
        obj["labels"] = {"en": {"language": "en", "value": label}, "de": {"value": "D"}}
    if draw(st.booleans()):
        obj["descriptions"] = pick(draw, clean, [{"en": {"value": "writer"}}, [], {"fr": {}}], [])
    if draw(st.booleans()):
        long_alias = [] if clean else ["x" * (MAX_TERM_CHARS + 1)]
        obj["aliases"] = {"en": [{"value": a} for a in draw(st.lists(
            st.sampled_from(["DNA", "Hitchhiker", *long_alias]), max_size=3))]}
    claims: dict[str, list[dict[str, Any]]] = {}
    pids = PIDS[:9] if clean else PIDS
    for pid in draw(st.lists(st.sampled_from(pids), max_size=5, unique=True)):
        claims[pid] = draw(st.lists(statements(pid, clean), min_size=1, max_size=3))
    obj["claims"] = claims
    if not clean and draw(st.integers(0, 6)) == 0:
        obj["kgprobe_popularity"] = 3.5
    if not clean and draw(st.integers(0, 6)) == 0:
        obj["missing"] = ""
    return obj, clean


FILTERS = [
    Filters(),
    Filters.make(relations=["P39", "P106"]),
    Filters.make(ranks=["preferred", "normal", "deprecated"]),
    Filters.make(ranks=["preferred"], language="de"),
]


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(drawn=entity_objects(), which=st.integers(0, len(FILTERS) - 1))
def test_the_fast_path_gives_the_general_paths_records_or_steps_aside(
    drawn: tuple[dict[str, Any], bool], which: int
) -> None:
    obj, clean = drawn
    filters = FILTERS[which]
    expected = general(obj, filters)
    got = fast(obj, filters)
    if clean:  # nothing unusual in it: the fast path must take it
        assert got is not None
    if got is not None:
        assert got == expected


# --------------------------------------------------------------------------- real entities


def dump_objects(path: Path) -> list[dict[str, Any]]:
    lines = [s.strip().rstrip(",") for s in path.read_text().splitlines()]
    return [json.loads(s) for s in lines if s not in ("", "[", "]")]


def test_the_fast_path_is_taken_for_ordinary_items_and_agrees(tmp_path: Path) -> None:
    """Every item of the synthetic dump (the benchmark's input) and of Wikidata's own entity
    documents goes the fast way, with the general path's records."""
    dump = tmp_path / "dump.json"
    gen_dump_module().write_dump(dump, 3000, 3)
    objs = dump_objects(dump)
    for name in ("wbgetentities-Douglas-Adams.json", "wbgetentities-Oliver-Kahn.json"):
        objs += list(json.loads((WD / "wdtk" / name).read_text())["entities"].values())
    objs.append(json.loads((WD / "entity-json" / "Q182397.json").read_text())["entities"]["Q182397"])
    assert len(objs) > 250
    for filters in FILTERS:
        for obj in objs:
            got = fast(obj, filters)
            assert got is not None, obj["id"]
            assert got == general(obj, filters)


@pytest.mark.parametrize("name", ["mock-dump-for-testing.json", "wbgetentities-Oliver-Kahn.json"])
def test_load_json_gives_the_same_records_without_the_fast_path(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = WD / "wdtk" / name
    with_fast = shown(list(load_json(path)))
    monkeypatch.setattr(wikidata_json, "fast_records", lambda *a, **k: None)
    monkeypatch.setattr(wikidata_json, "typed_records", lambda *a, **k: None)  # dump lines'
    without = shown(list(load_json(path)))
    assert with_fast == without
    assert with_fast  # the files hold records


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 2}',
        '{"x": [1e400, -1e400]}',
        '{"x": NaN}',
        '{"numeric-id": 123456789012345678901234567890}',
        '{"numeric-id": 18446744073709551616, "s": "€"}',
        '{"label": "9999999999999999999 in a string"}',
        '{"id": "12345678901234567890123", "n": -9223372036854775809}',
        '[1, -9223372036854775809]',
        '{"a": [18446744073709551615, 18446744073709551616]}',
        '{"a":"x: 12345678901234567890", "b": 1.12345678901234567890123}',
        '{"x": 1e1234567890123456789, "y": 1.7976931348623159e308}',
        '123456789012345678901234',
        '{"s": "\\ud800"}',
        '{"s": "\\u0000", "t": "Ünïcødé"}',
        "[" * 3000 + "]" * 3000,
        '{"broken": ',
        '{"x": 1} trailing',
    ],
)
def test_the_decoder_reads_every_line_as_the_standard_library_does(text: str) -> None:
    try:
        expected: Any = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        expected = (type(exc), str(exc))
    try:
        got: Any = _loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        got = (type(exc), str(exc))
    assert repr(got) == repr(expected)
    try:  # a dump line as bytes (how lines are read since issue 37)
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        return  # a lone surrogate: no UTF-8 line holds one
    try:
        got = _loads(data)
    except (json.JSONDecodeError, RecursionError) as exc:
        got = (type(exc), str(exc))
    assert repr(got) == repr(expected)


def _clean_item() -> dict[str, Any]:
    time = {"time": "+1952-03-11T00:00:00Z", "precision": 11,
            "calendarmodel": "http://www.wikidata.org/entity/Q1985727"}
    return {
        "type": "item", "id": "Q42", "labels": {"en": {"value": "Douglas Adams"}},
        "claims": {"P69": [{
            "mainsnak": {"snaktype": "value", "datavalue": {
                "type": "wikibase-entityid", "value": {"entity-type": "item", "id": "Q691283"}}},
            "rank": "normal", "id": "Q42$AB-1",
            "qualifiers": {"P580": [{"snaktype": "value", "datavalue": {"type": "time", "value": time}}]},
        }, {  # a statement without qualifiers: the fast path checks these itself
            "mainsnak": {"snaktype": "value", "datavalue": {
                "type": "wikibase-entityid", "value": {"entity-type": "item", "id": "Q4961791"}}},
            "rank": "normal", "id": "Q42$AB-2",
        }]},
    }


def _statement(obj: dict[str, Any], i: int = 0) -> dict[str, Any]:
    return obj["claims"]["P69"][i]  # type: ignore[no-any-return]


DEFECTS = {
    **{f"{what}, statement {i}": change
       for i in (0, 1)
       for what, change in {
           "object id": lambda o, i=i: _statement(o, i)["mainsnak"]["datavalue"]["value"].update(id="Q0"),
           "statement id": lambda o, i=i: _statement(o, i).update(id="Q42$bad id!"),
           "long statement id": lambda o, i=i: _statement(o, i).update(id="Q42$" + "A" * 300),
           "long source": lambda o, i=i: _statement(o, i).update(kgprobe_source="x" * 1001),
       }.items()},
    "month 13": lambda o: _statement(o)["qualifiers"]["P580"][0]["datavalue"]["value"].update(
        time="+1952-13-11T00:00:00Z"),
    "precision 20": lambda o: _statement(o)["qualifiers"]["P580"][0]["datavalue"]["value"].update(
        precision=20),
    "qualifier property": lambda o: _statement(o).update(
        qualifiers={"Q5": _statement(o)["qualifiers"]["P580"]}),
    "long label": lambda o: o.update(labels={"en": {"value": "x" * (MAX_TERM_CHARS + 1)}}),
    "long alias": lambda o: o.update(aliases={"en": [{"value": "DNA"}, {"value": "x" * (MAX_TERM_CHARS + 1)}]}),
    "long description": lambda o: o.update(descriptions={"en": {"value": "x" * (MAX_TERM_CHARS + 1)}}),
    "unreadable snak": lambda o: _statement(o)["qualifiers"]["P580"].append({"snaktype": "value"}),
    "entity id": lambda o: o.update(id="Q-42"),
}


@pytest.mark.parametrize("defect", sorted(DEFECTS))
def test_one_defect_in_a_clean_item_is_the_general_paths_error(defect: str) -> None:
    """Each rule the fast path applies itself, broken alone: it must not write the entity
    (the general path reports the error), so a guard left out fails here."""
    obj = _clean_item()
    assert fast(obj, Filters()) is not None and fast(obj, Filters()) == general(obj, Filters())
    DEFECTS[defect](obj)
    expected = general(obj, Filters())
    assert isinstance(expected, str) or any(kind == "ErrorRecord" for kind, _, _ in expected)
    assert fast(obj, Filters()) in (None, expected)


# --------------------------------------------------------------------------- issue 37: real lines

REAL = sorted((WD / "entity-json").glob("Q*.json"))


def real_lines() -> list[bytes]:
    """The real entity documents as dump lines: compact, UTF-8 as the dump writes it."""
    out = []
    for path in REAL:
        (obj,) = json.loads(path.read_text(encoding="utf-8"))["entities"].values()
        out.append(json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode())
    return out


def write_lines(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"[\n" + b",\n".join(lines) + b"\n]\n")
    return path


def test_real_lines_take_the_typed_path_and_never_the_standard_librarys_decoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two of the three real entities hold external ids of 19+ digits (strings, not numbers):
    they used to go to the standard library's decoder. Now no real line does, and every one
    is read by the typed fast path."""
    assert len(REAL) == 3
    dump = write_lines(tmp_path / "real.json", real_lines())
    calls: list[int] = []
    real_json_loads = json.loads
    monkeypatch.setattr(json, "loads", lambda *a, **k: calls.append(1) or real_json_loads(*a, **k))
    taken: list[str] = []
    typed = getattr(wikidata_json, "typed_records", None)
    if typed is not None:
        monkeypatch.setattr(wikidata_json, "typed_records",
                            lambda ent, *a, **k: taken.append(ent.id) or typed(ent, *a, **k))
    records = list(load_json(dump))
    assert calls == []
    assert taken == ["Q182397", "Q53713", "Q8413"]
    assert sum(isinstance(r, EntityRecord) for r in records) == 3


@pytest.mark.parametrize("filters", FILTERS, ids=["default", "relations", "deprecated", "preferred-de"])
def test_real_lines_give_the_general_paths_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, filters: Filters
) -> None:
    """The fast path's records of real entity lines (every language, sitelinks, references,
    external ids, qualifiers) are the general path's, record for record."""
    dump = write_lines(tmp_path / "real.json", real_lines())
    fast_path = shown(list(load_json(dump, filters)))
    monkeypatch.setattr(wikidata_json, "typed_records", lambda *a, **k: None)
    monkeypatch.setattr(wikidata_json, "fast_records", lambda *a, **k: None)
    general_path = shown(list(load_json(dump, filters)))
    assert fast_path == general_path
    assert fast_path is not None and any(kind == "FactRecord" for kind, _, _ in fast_path)


def test_a_statement_that_is_not_kept_is_not_read(tmp_path: Path) -> None:
    """A malformed time in a statement the filters skip (an external id's, a deprecated one's,
    an unselected relation's) no longer rejects the entity: it is counted as skipped, and the
    entity and its facts load. The value a kept fact needs is still read: broken, it is the
    entity's error."""
    def statement(pid: str, dtype: str, value: Any, rank: str = "normal") -> dict[str, Any]:
        return {"mainsnak": {"snaktype": "value", "property": pid,
                             "datavalue": {"type": dtype, "value": value}},
                "rank": rank, "id": f"Q1${pid}-{rank}"}

    bad_time = {"time": "yesterday", "precision": 11}
    claims = {
        "P569": [statement("P569", "time", bad_time)],  # a non-item value: its type is enough
        "P69": [statement("P69", "wikibase-entityid", {"entity-type": "item", "id": "Q5"}),
                statement("P69", "time", bad_time, rank="deprecated")],
    }
    line = {"type": "item", "id": "Q1", "labels": {"en": {"value": "one"}}, "claims": claims}
    dump = write_lines(tmp_path / "d.json", [json.dumps(line).encode()])
    records = list(load_json(dump))
    kinds = [type(r).__name__ for r in records]
    assert kinds == ["EntityRecord", "FactRecord", "SkipRecord", "SkipRecord"]
    assert {(r.reason, r.count) for r in records if isinstance(r, SkipRecord)} == {
        ("rank:deprecated", 1), ("value:time", 1)}
    claims["P69"][0]["qualifiers"] = {"P580": [{"snaktype": "value", "datavalue": {
        "type": "time", "value": bad_time}}]}  # a kept fact's qualifier: read, and broken
    dump = write_lines(tmp_path / "e.json", [json.dumps(line).encode()])
    (error,) = list(load_json(dump))
    assert isinstance(error, ErrorRecord) and "not a time value" in error.message


def test_bytes_that_are_not_utf8_in_a_part_not_read_still_end_the_stream(tmp_path: Path) -> None:
    """msgspec skips the parts records are not made of without reading them; the line is
    checked as UTF-8 all the same, so a bad byte in a sitelink stops the file with one line,
    as it did, after the records of the lines before it."""
    good, bad = (json.dumps({"type": "item", "id": q, "claims": {},
                             "sitelinks": {"enwiki": {"title": "X"}}}).encode() for q in ("Q1", "Q2"))
    dump = write_lines(tmp_path / "d.json", [good, bad.replace(b'"X"', b'"\xff"')])
    got: list[Record] = []
    with pytest.raises(InputError, match="not UTF-8 text"):
        got.extend(load_json(dump))
    assert [type(r).__name__ for r in got] == ["EntityRecord"]


def test_deep_nesting_in_a_part_not_read_is_still_an_error_record(tmp_path: Path) -> None:
    deep = b'{"type":"item","id":"Q1","claims":{},"sitelinks":' + b"[" * 5000 + b"]" * 5000 + b"}"
    dump = write_lines(tmp_path / "d.json", [deep])
    (error,) = list(load_json(dump))
    assert isinstance(error, ErrorRecord) and "nested too deeply" in error.message


@settings(max_examples=300)
@given(sign=st.sampled_from(["+", "-", ""]), year=st.sampled_from(["2011", "0952", "952", "00952", "12345", "0"]),
       month=st.sampled_from(["00", "03", "3", "12", "13"]), day=st.sampled_from(["00", "11", "1", "31"]),
       rest=st.sampled_from(["T00:00:00Z", "", "T12:00:00Z"]), precision=st.integers(0, 14))
def test_a_canonical_time_is_kept_as_it_would_be_written(
    sign: str, year: str, month: str, day: str, rest: str, precision: int
) -> None:
    """`time_from_json` keeps a time string that is canonical already; what it keeps is what
    writing the parts again gives (the RDF path's `_split`/`_format`, spelt out here)."""
    text = f"{sign}{year}-{month}-{day}{rest}"
    s, y, m, d = -1 if sign == "-" else 1, int(year), int(month), int(day)
    if precision <= 9:
        m = d = 0
    elif precision == 10:
        d = 0
    expected = f"{'-' if s < 0 else '+'}{y:04d}-{m:02d}-{d:02d}{rest or 'T00:00:00Z'}"
    tv = time_from_json({"time": text, "precision": precision})
    assert (tv.time, tv.year, tv.sort_key) == (expected, s * y, s * y * 10000 + m * 100 + d)


@pytest.mark.parametrize("source", [float("nan"), float("inf"), 2**70, "lama"])
def test_a_decoded_entity_takes_the_fast_path_only_where_it_agrees(source: Any) -> None:
    """An entity document's object is written back to JSON for the typed path: a value that
    JSON cannot hold the same way (NaN, which orjson would write as null) must not change
    what is read (here the fact's source: "nan" on the general path)."""
    obj = _clean_item()
    _statement(obj, 1)["kgprobe_source"] = source
    got, expected = fast(obj, Filters()), general(obj, Filters())
    assert got in (None, expected)
    assert isinstance(expected, list) and any(f"source='{source}'" in text for _, text, _ in expected)
