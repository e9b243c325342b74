"""A small hand-made fact set for the distractor tests: real QIDs, real US head-of-state history.

Written through the real ingest writer (`kgprobe.graph.ingest`) into the real test server.
Dates are those of Wikidata's P35 statements on Q30 (inauguration days).
"""

from __future__ import annotations

from kgprobe.records import EntityRecord, FactRecord, Record, RelationRecord, TimeValue

HUMAN, COUNTRY, CITY, LONE_TYPE = "Q5", "Q6256", "Q515", "Q90000001"
USA = "Q30"
CLINTON, BUSH, OBAMA, TRUMP, BIDEN = "Q1124", "Q207", "Q76", "Q22686", "Q6279"
PRESIDENTS = [CLINTON, BUSH, OBAMA, TRUMP, BIDEN]
ADAMS, BACH, CURIE, IMPOSTOR, NOLABEL = "Q42", "Q1339", "Q7186", "Q90000002", "Q90000003"
UNTYPED, LONELY = "Q90000010", "Q90000011"
FRANCE, GERMANY, PARIS, BERLIN, WASHINGTON = "Q142", "Q183", "Q90", "Q64", "Q61"


def t(date: str) -> TimeValue:
    return TimeValue(f"+{date}T00:00:00Z", 11)


def world() -> list[Record]:
    recs: list[Record] = [
        RelationRecord("P35", "head of state", aliases=["president"]),
        RelationRecord("P36", "capital"),
        RelationRecord("P27", "country of citizenship"),
        RelationRecord("P999", "mystery relation"),
        EntityRecord(HUMAN, "human", superclasses=[]),
        EntityRecord(COUNTRY, "country"),
        EntityRecord(CITY, "city"),
        EntityRecord(LONE_TYPE, "lonely type"),
        EntityRecord(USA, "United States of America", aliases=["USA", "U.S."], types=[COUNTRY]),
        EntityRecord(FRANCE, "France", types=[COUNTRY]),
        EntityRecord(GERMANY, "Germany", types=[COUNTRY]),
        EntityRecord(PARIS, "Paris", types=[CITY]),
        EntityRecord(BERLIN, "Berlin", types=[CITY]),
        EntityRecord(WASHINGTON, "Washington, D.C.", aliases=["Washington"], types=[CITY]),
        EntityRecord(CLINTON, "Bill Clinton", types=[HUMAN]),
        EntityRecord(BUSH, "George W. Bush", types=[HUMAN]),
        EntityRecord(OBAMA, "Barack Obama", aliases=["Obama"], types=[HUMAN]),
        EntityRecord(TRUMP, "Donald Trump", types=[HUMAN]),
        EntityRecord(BIDEN, "Joe Biden", types=[HUMAN]),
        EntityRecord(ADAMS, "Douglas Adams", types=[HUMAN]),
        EntityRecord(BACH, "Johann Sebastian Bach", types=[HUMAN]),
        EntityRecord(CURIE, "Marie Curie", types=[HUMAN]),
        # same name as Obama once case and punctuation are erased: never a distractor of Obama
        EntityRecord(
            IMPOSTOR, "B. Obama (impersonator)", aliases=["barack  OBAMA!"], types=[HUMAN]
        ),
        EntityRecord(NOLABEL, None, types=[HUMAN]),
        EntityRecord(UNTYPED, "Untyped thing"),
        EntityRecord(LONELY, "Only member", types=[LONE_TYPE]),
    ]
    terms = [
        (CLINTON, "1993-01-20", "2001-01-20"),
        (BUSH, "2001-01-20", "2009-01-20"),
        (OBAMA, "2009-01-20", "2017-01-20"),
        (TRUMP, "2017-01-20", "2021-01-20"),
        (BIDEN, "2021-01-20", "2025-01-20"),
        (TRUMP, "2025-01-20", None),
    ]
    for i, (who, start, end) in enumerate(terms):
        recs.append(
            FactRecord(
                USA,
                "P35",
                who,
                statement_id=f"Q30$P35-{i}",
                start=t(start),
                end=t(end) if end else None,
            )
        )
    recs += [
        FactRecord(USA, "P36", WASHINGTON, statement_id="Q30$P36"),
        FactRecord(FRANCE, "P36", PARIS, statement_id="Q142$P36"),
        FactRecord(GERMANY, "P36", BERLIN, statement_id="Q183$P36"),
        FactRecord(ADAMS, "P27", "Q145", statement_id="Q42$P27"),
        FactRecord(CURIE, "P27", FRANCE, statement_id="Q7186$P27a"),
        FactRecord(CURIE, "P27", "Q36", statement_id="Q7186$P27b"),
        FactRecord(OBAMA, "P27", USA, statement_id="Q76$P27"),
        FactRecord(TRUMP, "P27", USA, statement_id="Q22686$P27"),
        FactRecord(BIDEN, "P27", USA, statement_id="Q6279$P27"),
        FactRecord(BUSH, "P27", USA, statement_id="Q207$P27"),
        FactRecord(CLINTON, "P27", USA, statement_id="Q1124$P27"),
        FactRecord(BACH, "P27", GERMANY, statement_id="Q1339$P27"),
        # a deprecated claim is no true fact: Adams stays a distractor of (USA, P35, ·)
        FactRecord(USA, "P35", ADAMS, statement_id="Q30$P35-x", rank="deprecated"),
        FactRecord(USA, "P999", UNTYPED, statement_id="Q30$P999a"),
        FactRecord(USA, "P999", LONELY, statement_id="Q30$P999b"),
    ]
    return recs


def load(graph: object) -> None:
    from kgprobe.graph.ingest import ingest

    ingest(graph, world())  # type: ignore[arg-type]


class Oracle:
    """Ω(f) and temporal distractors computed from records alone, straight from the paper's
    definition — no Cypher — to check what the graph queries return."""

    def __init__(self, records: list[Record]) -> None:
        from collections import defaultdict

        self.entities = {r.qid: r for r in records if isinstance(r, EntityRecord)}
        self.facts = [r for r in records if isinstance(r, FactRecord)]
        self.by_sr: dict[tuple[str, str], list[FactRecord]] = defaultdict(list)
        for f in self.facts:
            if f.rank != "deprecated":
                self.by_sr[(f.subject, f.pid)].append(f)
        self.by_type: dict[str, set[str]] = defaultdict(set)
        for e in self.entities.values():
            for t in self.types(e):
                self.by_type[t].add(e.qid)

    @staticmethod
    def types(e: EntityRecord) -> list[str]:
        """Declared P31 types and the documented fallback types (INFERRED_TYPE)."""
        return list(e.types) + [t for t, _ in e.inferred_types]

    def omega(self, s: str, pid: str, o: str) -> set[str]:
        from kgprobe.graph.distractors import label_set

        o_rec = self.entities.get(o) or EntityRecord(o)  # a stub object: no label, no type
        o_labels = label_set(o_rec.label, o_rec.aliases)
        trues = {f.object for f in self.by_sr[(s, pid)]}
        o_types = self.types(o_rec)
        same_type = set().union(*(self.by_type[t] for t in o_types)) if o_types else set()
        return {
            q
            for q in same_type
            if q != o
            and q not in trues
            and self.entities[q].label
            and not (label_set(self.entities[q].label, self.entities[q].aliases) & o_labels)
        }

    def temporal(self, s: str, pid: str, o: str, ref: int) -> set[str]:
        def end_eff(tv: TimeValue | None) -> int | None:
            if tv is None:
                return None
            k = tv.sort_key
            return k if tv.precision >= 11 or k < 0 else k + (99 if tv.precision == 10 else 9999)

        def state(f: FactRecord) -> str:
            st, en = (f.start.sort_key if f.start else None), end_eff(f.end)
            if st is None and en is None:
                if f.point_in_time is None:
                    return "always"
                p = f.point_in_time
                pe = end_eff(p) if p.precision < 11 else p.sort_key + 1
                return (
                    "past"
                    if pe is not None and pe <= ref
                    else ("now" if p.sort_key <= ref else "future")
                )
            if (st is None or st <= ref) and (en is None or en > ref):
                return "now"
            return "past" if en is not None and en <= ref else "future"

        states: dict[str, set[str]] = {}
        for f in self.by_sr[(s, pid)]:
            if f.object != o:
                states.setdefault(f.object, set()).add(state(f))
        return {q for q, ss in states.items() if "past" in ss and not ss & {"now", "always"}}
