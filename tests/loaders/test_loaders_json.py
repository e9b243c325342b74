"""Wikidata JSON loader on real samples: dump layout, entity documents, wbgetentities."""

from __future__ import annotations

import bz2
import gzip
import json
import shutil
import tracemalloc
from pathlib import Path

import pytest
from loaders_support import (
    WD,
    by_type,
    entities,
    facts,
    gen_dump_module,
    load_entity,
    raw_statements,
    skips,
)

from kgprobe.errors import InputError
from kgprobe.loaders import Filters, detect_format, open_source
from kgprobe.loaders.common import (
    IsalMember,
    canonical_time,
    gzip_member,
    open_binary,
    time_from_json,
)
from kgprobe.loaders.wikidata_json import load_json
from kgprobe.records import (
    EntityRecord,
    ErrorRecord,
    FactRecord,
    RedirectRecord,
    RelationRecord,
    SkipRecord,
    TimeValue,
)

MOCK_DUMP = WD / "wdtk" / "mock-dump-for-testing.json"
Q182397 = WD / "entity-json" / "Q182397.json"
WBGET = WD / "wdtk" / "wbgetentities-Douglas-Adams.json"


def test_dump_layout_items_property_and_lexeme() -> None:
    recs = list(load_json(MOCK_DUMP))
    groups = by_type(recs)
    raw = [
        json.loads(line.rstrip().rstrip(",")) for line in MOCK_DUMP.read_text().splitlines()[1:-1]
    ]
    items = [e for e in raw if e["type"] == "item"]
    assert [e.qid for e in groups[EntityRecord]] == [e["id"] for e in items]
    # P31 objects become types, never FACT records
    for ent, e in zip(groups[EntityRecord], items, strict=True):
        p31 = [
            st["mainsnak"]["datavalue"]["value"]["numeric-id"] for st in e["claims"].get("P31", [])
        ]
        assert ent.types == [f"Q{n}" for n in p31]
    assert not any(f.pid == "P31" for f in facts(recs))
    # the property becomes a relation, the lexeme a counted skip
    assert [r.pid for r in groups[RelationRecord]] == ["P16"]
    lexeme_skips = [r for r in groups[SkipRecord] if r.reason == "entity:lexeme"]
    assert len(lexeme_skips) == 1 and lexeme_skips[0].location.endswith(":5")


def test_language_filter_reads_the_chosen_language() -> None:
    de = entities(load_json(MOCK_DUMP, Filters(language="de")))
    en = entities(load_json(MOCK_DUMP))
    assert [e.label for e in de] == ["Universum", "Glück"]
    assert "Weltall" in de[0].aliases
    assert all(e.label is None and not e.aliases for e in en)  # the sample has German terms only


def test_entity_json_every_statement_accounted_for() -> None:
    """Facts + types + counted skips = statements in the file: nothing dropped silently."""
    raw = load_entity(Q182397)
    recs = list(load_json(Q182397))
    ent = entities(recs)[0]
    assert ent.qid == raw["id"] and ent.label == raw["labels"]["en"]["value"]
    n_types = sum(
        1
        for pid, st in raw_statements(raw)
        if pid in ("P31", "P279") and st["rank"] != "deprecated"
    )
    skipped = skips(recs)
    statement_skips = sum(n for reason, n in skipped.items() if not reason.startswith("qualifier:"))
    assert len(facts(recs)) + n_types + statement_skips == len(raw_statements(raw))
    assert skipped["rank:deprecated"] == sum(
        1 for _, st in raw_statements(raw) if st["rank"] == "deprecated"
    )


def test_entity_json_temporal_qualifiers_and_statement_ids() -> None:
    raw = load_entity(Q182397)
    by_id = {f.statement_id: f for f in facts(load_json(Q182397))}
    checked = 0
    for pid, st in raw_statements(raw):
        q = st.get("qualifiers", {})
        if (
            pid in ("P31", "P279")
            or "P580" not in q
            or st["mainsnak"].get("datatype") != "wikibase-item"
            or st["mainsnak"]["snaktype"] != "value"
            or st["rank"] == "deprecated"
        ):
            continue
        sid = st["id"].split("$", 1)
        fact = by_id[f"{sid[0].upper()}${sid[1].upper()}"]
        for qpid, attr in (("P580", "start"), ("P582", "end")):
            times = [
                time_from_json(sn["datavalue"]["value"])
                for sn in q.get(qpid, [])
                if sn["snaktype"] == "value"
            ]
            expected = min(times, key=lambda t: (t.sort_key, t.time)) if times else None
            assert getattr(fact, attr) == expected
            for sn in q.get(qpid, []):
                if sn["snaktype"] == "value":  # the string is Wikidata's, cut to its precision
                    v = sn["datavalue"]["value"]
                    assert canonical_time(v["time"], v["precision"])[:5] == v["time"][:5]
        # other item qualifiers are kept as QIDs
        for qpid, snaks in q.items():
            if qpid in ("P580", "P582", "P585"):
                continue
            ids = [
                s["datavalue"]["value"]["id"]
                for s in snaks
                if s.get("datatype") == "wikibase-item" and s["snaktype"] == "value"
            ]
            assert set(ids) <= set(fact.qualifiers.get(qpid, []))
        checked += 1
    assert checked >= 10  # the sample has 21 statements with P580


def test_wbgetentities_older_flavour_numeric_ids() -> None:
    doc = json.loads(WBGET.read_text())
    raw = doc["entities"]["Q42"]
    recs = list(open_source(WBGET))
    ent = entities(recs)[0]
    assert ent.qid == "Q42" and ent.label == raw["labels"]["en"]["value"]
    assert ent.types == ["Q5"]
    spouse = [f for f in facts(recs) if f.pid == "P26"]
    raw_spouse = raw["claims"]["P26"][0]
    assert [f.object for f in spouse] == [
        f"Q{raw_spouse['mainsnak']['datavalue']['value']['numeric-id']}"
    ]
    assert (
        spouse[0].start is not None
        and spouse[0].start.time
        == raw_spouse["qualifiers"]["P580"][0]["datavalue"]["value"]["time"]
    )


def test_relation_rank_and_limit_filters() -> None:
    only = list(load_json(Q182397, Filters.make(relations=["P39"])))
    assert {f.pid for f in facts(only)} == {"P39"}
    assert entities(only)[0].types == ["Q5"]  # types are read whatever the relation filter
    assert skips(only)["relation-not-selected"] > 0

    with_dep = facts(load_json(Q182397, Filters.make(ranks=["preferred", "normal", "deprecated"])))
    default = facts(load_json(Q182397))
    deprecated = [f for f in with_dep if f.rank == "deprecated"]
    assert deprecated and len(with_dep) == len(default) + len(deprecated)

    recs = list(load_json(MOCK_DUMP, Filters(limit=1)))
    assert [e.qid for e in entities(recs)] == ["Q1"]


def test_bad_filters_are_input_errors() -> None:
    with pytest.raises(InputError, match="property id"):
        Filters.make(relations=["P31", "wdt:P31"])
    with pytest.raises(InputError, match="language"):
        Filters.make(language='en" }')
    with pytest.raises(InputError, match="rank"):
        Filters.make(ranks=["best"])


@pytest.mark.parametrize("compression", ["gz", "bz2"])
def test_compressed_dumps_give_the_same_records(tmp_path: Path, compression: str) -> None:
    target = tmp_path / f"dump.json.{compression}"
    opener = gzip.open if compression == "gz" else bz2.open
    with open(MOCK_DUMP, "rb") as src, opener(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
    plain = [r for r in load_json(MOCK_DUMP) if not isinstance(r, SkipRecord)]
    packed = [r for r in open_source(target) if not isinstance(r, SkipRecord)]
    assert detect_format(target) == "json"
    assert packed == plain and plain


def test_malformed_lines_are_reported_and_skipped(tmp_path: Path) -> None:
    lines = MOCK_DUMP.read_text().splitlines()
    # break the second entity (line 3 of the file) and add a non-entity line
    lines[2] = lines[2][:50]
    lines.insert(4, '{"no": "id"},')
    bad = tmp_path / "bad.json"
    bad.write_text("\n".join(lines) + "\n")
    recs = list(load_json(bad))
    errors = [r for r in recs if isinstance(r, ErrorRecord)]
    assert [e.location for e in errors] == [f"{bad}:3", f"{bad}:5"]
    assert "invalid JSON" in errors[0].message
    assert [e.qid for e in entities(recs)] == ["Q1"]  # the loader went on past the bad lines
    assert any(isinstance(r, RelationRecord) for r in recs)


def test_redirect_in_entity_document(tmp_path: Path) -> None:
    raw = load_entity(Q182397)
    doc = {"entities": {"Q999999999": {**raw}}}  # EntityData answers a merged id with the target
    path = tmp_path / "redirected.json"
    path.write_text(json.dumps(doc))
    recs = list(load_json(path))
    assert recs[0] == RedirectRecord(source="Q999999999", target=raw["id"])
    assert entities(recs)[0].qid == raw["id"]


def test_unsupported_files_raise_one_line_input_errors(tmp_path: Path) -> None:
    csv = tmp_path / "facts.csv"
    csv.write_text("subject,relation,object\nQ1,P31,Q5\n")
    with pytest.raises(InputError, match="unsupported file") as exc:
        open_source(csv)
    assert "\n" not in str(exc.value)
    binary = tmp_path / "blob.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(InputError):
        open_source(binary)
    with pytest.raises(InputError, match="no such file"):
        open_source(tmp_path / "missing.json")
    other = tmp_path / "other.json"
    other.write_text('{"hello": "world"}')
    with pytest.raises(InputError, match="not Wikidata entity JSON"):
        list(open_source(other))


def _with_time_qualifiers(raw_q8: dict[str, object]) -> dict[str, object]:
    """Q8's edge-case dates (BCE, year 0, > 9999, Julian) moved into P580 qualifiers."""
    out = []
    for i, st in enumerate(raw_q8["claims"]["P8"]):  # type: ignore[index]
        out.append(
            {
                "id": f"Q8${i}",
                "rank": "normal",
                "mainsnak": {
                    "snaktype": "value",
                    "property": "P39",
                    "datavalue": {
                        "value": {"entity-type": "item", "numeric-id": 100 + i},
                        "type": "wikibase-entityid",
                    },
                },
                "qualifiers": {"P580": [st["mainsnak"]]},
            }
        )
    return {"id": "Q8", "type": "item", "claims": {"P39": out}}


def test_bce_and_far_future_dates_keep_sign_digits_and_precision(tmp_path: Path) -> None:
    raw = json.loads((WD / "wikibase-rdf-tests" / "Q8.json").read_text())
    path = tmp_path / "q8_temporal.json"
    path.write_text(json.dumps(_with_time_qualifiers(raw)))
    got = {f.object: f for f in facts(load_json(path))}
    originals = [st["mainsnak"]["datavalue"]["value"] for st in raw["claims"]["P8"]]
    assert len(got) == len(originals)
    for i, value in enumerate(originals):
        start = got[f"Q{100 + i}"].start
        assert start is not None
        assert start == time_from_json(value)
        sign = -1 if value["time"].startswith("-") else 1
        assert start.year == sign * int(value["time"][1:].split("-", 1)[0])
        assert start.precision == value["precision"]
    years = sorted(f.start.year for f in got.values() if f.start)
    assert years[0] < -200_000_000 and years[-1] > 2_000_000_000


@pytest.mark.parametrize(
    ("time", "precision", "calendar", "expected"),
    [  # (canonical time, year, sort key, calendar id), worked out by hand
        ("+1952-03-11T00:00:00Z", 10, "http://www.wikidata.org/entity/Q1985727",
         ("+1952-03-00T00:00:00Z", 1952, 19520300, "Q1985727")),
        ("-0199-05-01T00:00:00Z", 9, "http://www.wikidata.org/entity/Q1985786",
         ("-0199-00-00T00:00:00Z", -199, -1990000, "Q1985786")),
        ("+2024-3-5T00:00:00Z", 11, None, ("+2024-03-05T00:00:00Z", 2024, 20240305, "Q1985727")),
        ("-0000-00-00T00:00:00Z", 9, "", ("-0000-00-00T00:00:00Z", 0, 0, "Q1985727")),
        ("+20000000000-01-01T00:00:00Z", 3, "urn:other-calendar",
         ("+20000000000-00-00T00:00:00Z", 20_000_000_000, 200_000_000_000_000, "urn:other-calendar")),
    ],
)
def test_json_time_values_carry_the_year_and_sort_key_of_their_canonical_string(
    time: str, precision: int, calendar: str | None, expected: tuple[str, int, int, str]
) -> None:
    """time_from_json stores the year and sort key it parsed; they must be those of the
    canonical string, as a TimeValue parsed afresh from that string computes them."""
    value: dict[str, object] = {"time": time, "precision": precision}
    if calendar is not None:
        value["calendarmodel"] = calendar
    tv = time_from_json(value)
    assert (tv.time, tv.year, tv.sort_key, tv.calendar) == expected
    fresh = TimeValue(tv.time, tv.precision, tv.calendar)
    assert (fresh.year, fresh.sort_key) == (tv.year, tv.sort_key) and fresh == tv


def test_json_dump_memory_does_not_grow_with_size(tmp_path: Path) -> None:
    gen = gen_dump_module()
    peaks = []
    for n in (1_500, 15_000):
        path = tmp_path / f"dump{n}.json.gz"
        stats = gen.write_dump(path, n, seed=1)
        tracemalloc.start()
        count = sum(1 for r in load_json(path) if isinstance(r, FactRecord))
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert count > 0.6 * stats["statements"]
    # ten times the input, (nearly) the same peak: bounded by one entity, not the file
    assert peaks[1] < 1.5 * peaks[0] + 256 * 1024, peaks
    assert peaks[1] < 4 * 1024 * 1024, peaks


def test_generated_dump_is_deterministic_and_exact(tmp_path: Path) -> None:
    gen = gen_dump_module()
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    sa = gen.write_dump(a, 5_000, seed=7)
    gen.write_dump(b, 5_000, seed=7)
    assert a.read_bytes() == b.read_bytes()
    recs = list(load_json(a))
    total = len(facts(recs)) + sum(len(e.types) for e in entities(recs)) + sum(skips(recs).values())
    assert sa["statements"] == 5_000 and total == 5_000
    assert any(f.start is not None for f in facts(recs))


def test_truncated_compressed_dump_is_one_clear_input_error(tmp_path: Path) -> None:
    gen = gen_dump_module()
    whole = tmp_path / "dump.json.gz"
    gen.write_dump(whole, 3_000, seed=3)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    seen = 0
    with pytest.raises(InputError, match="truncated or corrupt") as exc:
        for _ in load_json(cut):
            seen += 1
    assert seen > 0 and str(cut) in str(exc.value)  # what was readable came through first


def test_a_gz_is_read_by_isal_as_zlib_reads_it(tmp_path: Path) -> None:
    """.gz text comes from ISA-L (a third of zlib's CPU): the standard library's bytes for a
    file of two members with zero padding between them, and corrupt data in the middle of a
    member is the same one line as a truncated file, the lines before it handed on."""
    assert isinstance(gzip_member(), IsalMember)
    gen = gen_dump_module()
    one = tmp_path / "one.json.gz"
    gen.write_dump(one, 2_000, seed=5)
    text = gzip.decompress(one.read_bytes())
    half = text.index(b"\n", len(text) // 2) + 1
    two = tmp_path / "two.json.gz"
    two.write_bytes(gzip.compress(text[:half]) + b"\0" * 7 + gzip.compress(text[half:]))
    with open_binary(two) as fh:
        assert fh.read() == text
    data = bytearray(one.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(64)  # a hole of zeros: not what the deflate stream says
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(bytes(data))
    seen = 0
    with pytest.raises(InputError, match="truncated or corrupt compressed file") as exc:
        for _ in load_json(bad):
            seen += 1
    assert seen > 0 and str(bad) in str(exc.value)


def test_kgprobe_keys_of_the_demo_graph_are_read(tmp_path: Path) -> None:
    """Fallback types stay apart from P31; popularity and statement source are kept."""
    from kgprobe.loaders.wikidata_json import load_json
    from kgprobe.records import EntityRecord, FactRecord

    entity = {
        "type": "item",
        "id": "Q16",
        "labels": {"en": {"language": "en", "value": "Canada"}},
        "claims": {
            "P35": [
                {
                    "mainsnak": {
                        "snaktype": "value",
                        "property": "P35",
                        "datavalue": {"value": {"entity-type": "item", "id": "Q9682"}, "type": "wikibase-entityid"},
                    },
                    "type": "statement",
                    "id": "Q16$DA4773E7-48E8-5FC9-BA6D-4C06DD88C18C",
                    "rank": "normal",
                    "kgprobe_source": "distfactassesslm",
                }
            ]
        },
        "kgprobe_inferred_types": [{"type": "Q6256", "basis": "range of P19, P27"}],
        "kgprobe_popularity": 27.203,
    }
    path = tmp_path / "demo.json"
    path.write_text("[\n" + json.dumps(entity) + "\n]\n")
    records = list(load_json(path))
    (ent,) = [r for r in records if isinstance(r, EntityRecord)]
    assert ent.types == [] and ent.inferred_types == [("Q6256", "range of P19, P27")]
    assert ent.extra == {"popularity": 27.203}
    (fact,) = [r for r in records if isinstance(r, FactRecord)]
    assert fact.source == "distfactassesslm" and fact.object == "Q9682"

    entity["kgprobe_inferred_types"] = [{"type": "not-a-qid", "basis": "x"}]
    path.write_text("[\n" + json.dumps(entity) + "\n]\n")
    errors = [r for r in load_json(path) if type(r).__name__ == "ErrorRecord"]
    assert len(errors) == 1 and "kgprobe_inferred_types" in errors[0].message
