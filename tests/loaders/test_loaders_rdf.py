"""RDF loader (N-Triples, Turtle) on real Wikidata RDF, and JSON ⇔ RDF agreement.

The agreement tests use Wikibase's own conformance pairs (the same entity as JSON and as the
N-Triples Wikibase produces from it) and Q42 as Turtle and as derived N-Triples.
"""

from __future__ import annotations

import bz2
import gzip
import json
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
from loaders_support import WD, entities, fact_key, facts, skips

from kgprobe.loaders import Filters, detect_format, open_source
from kgprobe.loaders.build import EntityData
from kgprobe.loaders.rdf import Namespaces, load_rdf, rdf_entities
from kgprobe.loaders.wikidata_json import entity_from_json, load_json
from kgprobe.records import (
    ErrorRecord,
    FactRecord,
    RedirectRecord,
    normalize_statement_id,
)

Q42_TTL = WD / "wdqs-rdf" / "Q42.ttl"
Q42_FULL_NT = WD / "derived" / "Q42_statements_with_qualifiers.nt"
Q42_TRUTHY_NT = WD / "derived" / "Q42_truthy.nt"
SMALL_DUMP = WD / "wdqs-rdf" / "small_dump.ttl"
WB = WD / "wikibase-rdf-tests"
ACME = Namespaces.for_base("http://acme.test/")


def test_q42_turtle_entity_types_and_temporal_qualifiers() -> None:
    recs = list(load_rdf(Q42_TTL))
    ent = entities(recs)[0]
    assert ent.qid == "Q42" and ent.label == "Douglas Adams"
    assert ent.description and "author" in ent.description
    assert ent.types == ["Q5"]
    assert not any(f.pid == "P31" for f in facts(recs))
    text = Q42_TTL.read_text()
    # every statement with a P580 qualifier in the file carries a start time
    with_start = [f for f in facts(recs) if f.start is not None]
    n_p580_item_statements = 0
    for f in facts(recs):
        sid = f.statement_id.replace("$", "-").lower()  # type: ignore[union-attr]
        block = text.lower().split(f"\ns:{sid} ", 1)
        if len(block) == 2 and "pq:p580" in block[1].split("\n\n", 1)[0]:
            n_p580_item_statements += 1
    assert len(with_start) == n_p580_item_statements > 0
    # precision comes from the pqv: value node: a year-precision start is written as such
    assert any(
        f.start.precision == 9 and f.start.time.endswith("-00-00T00:00:00Z") for f in with_start
    )  # type: ignore[union-attr]
    assert any(f.end is not None for f in with_start)
    # the truthy duplicates of full statements are counted, not stored twice
    truthy_lines = [
        line
        for line in Q42_TRUTHY_NT.read_text().splitlines()
        if "<http://www.wikidata.org/prop/direct/P" in line
    ]
    assert skips(recs)["truthy-covered-by-statement"] == len(truthy_lines)
    keys = [f.key for f in facts(recs)]
    assert len(keys) == len(set(keys))


def test_q42_turtle_and_derived_ntriples_agree() -> None:
    ttl = list(load_rdf(Q42_TTL))
    nt = list(open_source(Q42_FULL_NT))
    assert detect_format(Q42_FULL_NT) == "nt"
    # the derived file has no value nodes: times agree to the year, precision is unknown there
    assert {fact_key(f, precision=False) for f in facts(ttl)} == {
        fact_key(f, precision=False) for f in facts(nt)
    }
    assert entities(ttl) == entities(nt)
    assert skips(ttl) == skips(nt)


def test_truthy_ntriples_hold_exactly_the_best_ranked_statements() -> None:
    full = facts(load_rdf(Q42_TTL, Filters.make(ranks=["preferred", "normal", "deprecated"])))
    truthy = facts(load_rdf(Q42_TRUTHY_NT))
    assert all(f.statement_id is None for f in truthy)
    by_pid: dict[str, list[FactRecord]] = defaultdict(list)
    for f in full:
        by_pid[f.pid].append(f)
    best = set()
    for pid, fs in by_pid.items():
        top = "preferred" if any(f.rank == "preferred" for f in fs) else "normal"
        best |= {(f.subject, pid, f.object) for f in fs if f.rank == top}
    assert {(f.subject, f.pid, f.object) for f in truthy} == best


def test_small_dump_redirect_and_somevalue() -> None:
    recs = list(load_rdf(SMALL_DUMP))
    assert RedirectRecord(source="Q6825", target="Q26709563") in recs
    assert [e.qid for e in entities(recs)] == ["Q54872", "Q31"]  # the redirect is no entity
    assert skips(recs)["value:somevalue"] == 1  # wdt:P576 _:genid1


def _json_and_rdf(q: str, nt_files: list[str], tmp_path: Path) -> tuple[Path, Path]:
    nt = tmp_path / f"{q}.nt"
    nt.write_text("".join((WB / f).read_text() for f in nt_files))
    return WB / f"{q}.json", nt


def _valid_day(time: str, precision: int) -> bool:
    """Wikibase clamps impossible days (Feb 30) when writing RDF; the JSON keeps them."""
    if precision < 11:
        return True
    y, m, d = (int(x) for x in time[1:].split("T")[0].split("-"))
    astro = -y + 1 if time[0] == "-" else y
    leap = astro % 4 == 0 and (astro % 100 != 0 or astro % 400 == 0)
    days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    return 1 <= m <= 12 and 1 <= d <= days[m - 1]


@pytest.mark.parametrize(
    ("q", "nt_files"),
    [
        ("Q4", ["Q4_statements.nt", "Q4_values.nt"]),
        ("Q6", ["Q6_statements.nt", "Q6_qualifiers.nt"]),
        ("Q8", ["Q8_baddates.nt"]),
    ],
)
def test_json_and_rdf_conformance_pairs_describe_the_same_statements(
    q: str, nt_files: list[str], tmp_path: Path
) -> None:
    """Statement by statement: id, rank, value kind and value; qualifiers likewise."""
    json_path, nt = _json_and_rdf(q, nt_files, tmp_path)
    from_json = entity_from_json(json.loads(json_path.read_text()))
    from_rdf = [e for e in rdf_entities(nt, namespaces=ACME) if isinstance(e, EntityData)]
    assert len(from_rdf) == 1
    js = {normalize_statement_id(s.statement_id): s for s in from_json.statements}  # type: ignore[arg-type]
    rs = {normalize_statement_id(s.statement_id): s for s in from_rdf[0].statements}  # type: ignore[arg-type]
    assert js.keys() == rs.keys()
    compared_times = 0
    for sid, a in js.items():
        b = rs[sid]
        assert (a.pid, a.rank, a.value.kind) == (b.pid, b.rank, b.value.kind), sid
        if a.value.kind in ("item", "quantity", "monolingualtext", "globecoordinate"):
            assert a.value.text == b.value.text
        if a.value.time is not None and _valid_day(a.value.time.time, a.value.time.precision):
            assert a.value.time == b.value.time, sid  # BCE renumbering and Julian undone
            compared_times += 1
        qa = sorted((p, v.kind) for p, v in a.qualifiers)
        qb = sorted((p, v.kind) for p, v in b.qualifiers)
        assert qa == qb
        items_a = sorted((p, v.text) for p, v in a.qualifiers if v.kind == "item")
        assert items_a == sorted((p, v.text) for p, v in b.qualifiers if v.kind == "item")
        for (_, va), (_, vb) in zip(
            sorted(a.qualifiers, key=lambda x: (x[0], x[1].kind)),
            sorted(b.qualifiers, key=lambda x: (x[0], x[1].kind)),
            strict=True,
        ):
            if va.time is not None and vb.time is not None:
                assert va.time.year == vb.time.year  # no value node in Q6_qualifiers.nt
    if q == "Q8":
        assert compared_times >= 8  # BCE, > 9999, Julian, year 0


def test_json_and_rdf_paths_yield_the_same_records(tmp_path: Path) -> None:
    json_path, nt = _json_and_rdf("Q4", ["Q4_statements.nt", "Q4_values.nt"], tmp_path)
    from_json = list(load_json(json_path))
    from_rdf = list(load_rdf(nt, namespaces=ACME))
    assert {fact_key(f) for f in facts(from_json)} == {fact_key(f) for f in facts(from_rdf)}
    assert facts(from_json)  # Q4 has item-valued statements (one preferred)
    assert skips(from_json) == skips(from_rdf)  # same value types named, same counts
    assert entities(from_json) == entities(from_rdf)


def test_temporal_facts_agree_between_json_and_rdf(tmp_path: Path) -> None:
    """Q42's P580/P582 statements written as JSON (from the Turtle's own values) load alike."""
    ttl = facts(load_rdf(Q42_TTL))
    claims: dict[str, list[object]] = defaultdict(list)
    for f in ttl:
        quals = {}
        for pid, tv in (("P580", f.start), ("P582", f.end), ("P585", f.point_in_time)):
            if tv is not None:
                quals[pid] = [
                    {
                        "snaktype": "value",
                        "property": pid,
                        "datavalue": {
                            "type": "time",
                            "value": {
                                "time": tv.time,
                                "precision": tv.precision,
                                "calendarmodel": f"http://www.wikidata.org/entity/{tv.calendar}",
                            },
                        },
                    }
                ]
        for pid, vals in f.qualifiers.items():
            quals[pid] = [
                {
                    "snaktype": "value",
                    "property": pid,
                    "datavalue": {
                        "type": "wikibase-entityid",
                        "value": {"entity-type": "item", "id": v},
                    },
                }
                for v in vals
            ]
        head, tail = f.statement_id.split("$")  # type: ignore[union-attr]
        claims[f.pid].append(
            {
                "id": f"{head}${tail.lower()}",
                "rank": f.rank,
                "mainsnak": {
                    "snaktype": "value",
                    "property": f.pid,
                    "datavalue": {
                        "type": "wikibase-entityid",
                        "value": {"entity-type": "item", "id": f.object},
                    },
                },
                "qualifiers": quals,
            }
        )
    path = tmp_path / "q42.json"
    path.write_text(
        json.dumps({"entities": {"Q42": {"id": "Q42", "type": "item", "claims": claims}}})
    )
    assert {fact_key(f) for f in facts(load_json(path))} == {fact_key(f) for f in ttl}
    assert sum(1 for f in ttl if f.is_temporal) >= 5


def test_relation_language_and_limit_filters() -> None:
    only = list(load_rdf(Q42_TTL, Filters.make(relations=["P69", "P26"])))
    assert {f.pid for f in facts(only)} == {"P69", "P26"}
    assert entities(only)[0].types == ["Q5"]
    fr = entities(load_rdf(Q42_TTL, Filters(language="fr")))[0]
    assert (
        fr.label == "Douglas Adams"
        and fr.description
        and fr.description != entities(only)[0].description
    )
    limited = list(load_rdf(SMALL_DUMP, Filters(limit=1)))
    assert [e.qid for e in entities(limited)] == ["Q54872"]


@pytest.mark.parametrize("compression", ["gz", "bz2"])
@pytest.mark.parametrize("sample", [Q42_TTL, Q42_FULL_NT])
def test_compressed_rdf(tmp_path: Path, compression: str, sample: Path) -> None:
    target = tmp_path / f"{sample.name}.{compression}"
    opener = gzip.open if compression == "gz" else bz2.open
    with open(sample, "rb") as src, opener(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert [fact_key(f) for f in facts(open_source(target))] == [
        fact_key(f) for f in facts(load_rdf(sample))
    ]


def test_malformed_ntriples_line_is_reported_with_its_line(tmp_path: Path) -> None:
    lines = Q42_FULL_NT.read_text().splitlines()
    target = next(i for i, line in enumerate(lines) if "/prop/direct/P69>" in line)
    lines[target] = lines[target].replace(
        "<http://www.wikidata.org/prop/direct/P69>", "<broken iri"
    )
    bad = tmp_path / "bad.nt"
    bad.write_text("\n".join(lines) + "\n")
    recs = list(load_rdf(bad))
    errors = [r for r in recs if isinstance(r, ErrorRecord)]
    assert [e.location for e in errors] == [f"{bad}:{target + 1}"]
    good = {fact_key(f) for f in facts(load_rdf(Q42_FULL_NT))}
    assert {fact_key(f) for f in facts(recs)} == good  # the entity still loads


def test_malformed_turtle_block_is_reported_and_the_rest_loads(tmp_path: Path) -> None:
    text = SMALL_DUMP.read_text()
    broken = text.replace(
        "wd:Q6825 owl:sameAs wd:Q26709563 .", "wd:Q6825 owl:sameAs wd:Q26709563 ;; ] ."
    )
    bad = tmp_path / "bad.ttl"
    bad.write_text(broken)
    line = broken.splitlines().index("wd:Q6825 owl:sameAs wd:Q26709563 ;; ] .") + 1
    recs = list(load_rdf(bad))
    assert [r.location for r in recs if isinstance(r, ErrorRecord)] == [f"{bad}:{line}"]
    assert [e.qid for e in entities(recs)] == ["Q54872", "Q31"]


def _synthetic_turtle(path: Path, n: int) -> None:
    """n entities in the Wikidata Turtle dump's block layout (entity, statements, values)."""
    head = "".join(
        line for line in Q42_TTL.read_text().splitlines(True) if line.startswith("@prefix")
    )
    with open(path, "w") as fh:
        fh.write(head)
        for i in range(1, n + 1):
            fh.write(
                f'\nwd:Q{i} a wikibase:Item ;\n\trdfs:label "item {i}"@en ;\n'
                f"\twdt:P31 wd:Q5 ;\n\tp:P31 s:Q{i}-a ;\n\tp:P39 s:Q{i}-b .\n\n"
                f"s:Q{i}-a a wikibase:Statement ;\n\tps:P31 wd:Q5 ;\n\twikibase:rank wikibase:NormalRank .\n\n"
                f's:Q{i}-b a wikibase:Statement ;\n\tps:P39 wd:Q{i + 1} ;\n\tpq:P580 "2001-01-01T00:00:00Z"^^xsd:dateTime ;\n'
                f"\tpqv:P580 v:t{i % 50} ;\n\twikibase:rank wikibase:NormalRank .\n\n"
                f'v:t{i % 50} a wikibase:TimeValue ;\n\twikibase:timeValue "2001-01-01T00:00:00Z"^^xsd:dateTime ;\n'
                f'\twikibase:timePrecision "9"^^xsd:integer ;\n\twikibase:timeCalendarModel wd:Q1985727 .\n'
            )


def test_turtle_memory_is_bounded_by_a_chunk_not_the_file(tmp_path: Path) -> None:
    """The peak of Python allocations while loading 400 entities stays near that of 40. Measured
    in a process of its own: tracemalloc counts every thread's allocations, and a test process
    that has run other tests may hold threads that allocate (a run on two xdist workers once
    saw 9.6 MB there)."""
    import subprocess
    import sys

    for n in (40, 400):
        _synthetic_turtle(tmp_path / f"{n}.ttl", n)
    # small chunks so that both sizes span many of them (tracemalloc makes rdflib slow)
    code = (
        "import sys, tracemalloc\n"
        "from kgprobe.loaders import rdf as rdf_loader\n"
        "from kgprobe.records import FactRecord\n"
        "rdf_loader.CHUNK_CHARS, rdf_loader.GC_EVERY = 4096, 4\n"
        "for path in sys.argv[1:]:\n"
        "    tracemalloc.start()\n"
        "    count = 0\n"
        "    for r in rdf_loader.load_rdf(path):\n"
        "        if isinstance(r, FactRecord):\n"
        "            assert r.start is not None and r.start.time == '+2001-00-00T00:00:00Z'\n"
        "            count += 1\n"
        "    print(count, tracemalloc.get_traced_memory()[1])\n"
        "    tracemalloc.stop()\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "40.ttl"), str(tmp_path / "400.ttl")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    counts, peaks = zip(*(map(int, line.split()) for line in done.stdout.split("\n") if line.strip()),
                        strict=True)
    assert counts == (40, 400), done.stdout
    assert peaks[1] < 1.5 * peaks[0] + 256 * 1024, peaks


@pytest.mark.parametrize(
    ("files", "namespaces"),
    [
        ([WD / "wdqs-rdf" / "Q42.ttl"], None),
        ([Q42_FULL_NT], None),
        ([Q42_TRUTHY_NT], None),
        ([SMALL_DUMP], None),
        ([WD / "wdqs-rdf" / "Q24628793.ttl"], None),
        ([WB / "Q4_statements.nt", WB / "Q4_values.nt"], ACME),
        ([WB / "Q6_statements.nt", WB / "Q6_qualifiers.nt"], ACME),
        ([WB / "Q8_baddates.nt"], ACME),
    ],
    ids=lambda v: "+".join(p.name for p in v) if isinstance(v, list) else "",
)
def test_oxigraph_and_rdflib_parsers_give_the_same_records(
    tmp_path: Path, files: list[Path], namespaces: Namespaces | None
) -> None:
    """Issue 12 item 7: pyoxigraph replaced rdflib as the parser; rdflib, the former parser,
    is the reference — every record and every unfiltered statement (any value type, with its
    time value and precision), including Wikibase's own conformance fixtures."""
    path = tmp_path / ("in" + files[0].suffix)
    path.write_text("".join(f.read_text() for f in files))
    new = list(load_rdf(path, namespaces=namespaces, parser="oxigraph"))
    old = list(load_rdf(path, namespaces=namespaces, parser="rdflib"))
    assert new == old and len(new) > 0
    assert [fact_key(f) for f in facts(new)] == [fact_key(f) for f in facts(old)]
    new_ents = list(rdf_entities(path, namespaces=namespaces, parser="oxigraph"))
    old_ents = list(rdf_entities(path, namespaces=namespaces, parser="rdflib"))
    assert new_ents == old_ents
    assert sum(len(e.statements) + len(e.truthy) for e in new_ents if isinstance(e, EntityData)) > 0


@pytest.mark.parametrize("parser", ["oxigraph", "rdflib"])
def test_a_bad_turtle_block_is_reported_by_either_parser(tmp_path: Path, parser: str) -> None:
    text = SMALL_DUMP.read_text()
    broken = text.replace("wd:Q6825 owl:sameAs wd:Q26709563 .", 'wd:Q6825 owl:sameAs "unterminated .')
    bad = tmp_path / "bad.ttl"
    bad.write_text(broken)
    line = broken.splitlines().index('wd:Q6825 owl:sameAs "unterminated .') + 1
    recs = list(load_rdf(bad, parser=parser))
    assert [r.location for r in recs if isinstance(r, ErrorRecord)] == [f"{bad}:{line}"]
    assert [e.qid for e in entities(recs)] == ["Q54872", "Q31"]
