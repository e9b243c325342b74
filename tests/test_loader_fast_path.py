"""The JSON loader's fast path gives exactly the records of the general path, or steps aside.

`fast_records` exists for speed only (docs/benchmarks.md, session 13). The general path
(`records_from_entity` → `validated`) is the reference: for any entity object, the fast path
must either return None or the same records, in the same order, with the same locations. The
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

from kgprobe.loaders import wikidata_json
from kgprobe.loaders.common import Filters
from kgprobe.loaders.validate import MAX_TERM_CHARS, validated
from kgprobe.loaders.wikidata_json import _loads, fast_records, load_json, records_from_entity
from kgprobe.records import Record

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
