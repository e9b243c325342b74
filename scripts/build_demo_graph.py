#!/usr/bin/env python3
"""Build kgprobe's bundled demo knowledge graph from Wikidata-derived research data.

    python scripts/build_demo_graph.py [--data ../shared/data] [--out kgprobe/data] [--seed 13]

Reads the copies described in each folder's README (BEAR, DistFactAssessLM samples, TempLAMA
sample, KAMEL, LPAQA T-REx) and keeps only Wikidata content (QIDs, PIDs, English labels,
aliases, descriptions, validity dates; CC0), never third-party template text. Writes

- ``demo_graph.json.gz``: the Wikidata JSON dump layout (``[`` line, one entity per line with a
  trailing comma, ``]``), items and properties, item-valued claims with ``P580``/``P582``
  qualifiers in Wikidata's JSON shape; kgprobe-only additions sit under ``kgprobe_*`` keys;
- ``DEMO_PROVENANCE.md``: sources, selection, counts.

Deterministic: fixed seed for the one sampling step, sorted output, gzip mtime 0.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import io
import json
import random
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Relations of the demo graph: Wikidata English property label and the class used as the
#: documented fallback type of objects without a declared P31 (docs/design.md §2): the class of
#: the relation's objects in the demo graph, chosen after reading BEAR's closed answer spaces.
RELATIONS: dict[str, tuple[str, str]] = {
    "P6": ("head of government", "Q5"),
    "P17": ("country", "Q6256"),
    "P19": ("place of birth", "Q6256"),
    "P20": ("place of death", "Q6256"),
    "P26": ("spouse", "Q5"),
    "P27": ("country of citizenship", "Q6256"),
    "P30": ("continent", "Q5107"),
    "P35": ("head of state", "Q5"),
    "P36": ("capital", "Q515"),
    "P37": ("official language", "Q34770"),
    "P39": ("position held", "Q4164871"),
    "P50": ("author", "Q5"),
    "P54": ("member of sports team", "Q12973014"),
    "P57": ("director", "Q5"),
    "P58": ("screenwriter", "Q5"),
    "P69": ("educated at", "Q3918"),
    "P102": ("member of political party", "Q7278"),
    "P103": ("native language", "Q34770"),
    "P108": ("employer", "Q43229"),
    "P127": ("owned by", "Q43229"),
    "P131": ("located in the administrative territorial entity", "Q6256"),
    "P137": ("operator", "Q43229"),
    "P170": ("creator", "Q5"),
    "P176": ("manufacturer", "Q4830453"),
    "P178": ("developer", "Q4830453"),
    "P206": ("located in or next to body of water", "Q15324"),
    "P286": ("head coach", "Q5"),
    "P364": ("original language of film or TV show", "Q34770"),
    "P403": ("mouth of the watercourse", "Q15324"),
    "P449": ("original broadcaster", "Q15265344"),
    "P463": ("member of", "Q43229"),
    "P488": ("chairperson", "Q5"),
    "P509": ("cause of death", "Q1931388"),
    "P641": ("sport", "Q349"),
    "P1303": ("instrument", "Q34379"),
    "P1376": ("capital of", "Q6256"),
    "P1412": ("languages spoken, written or signed", "Q34770"),
    "P1532": ("country for sport", "Q6256"),
    "P3373": ("sibling", "Q5"),
    "P4552": ("mountain range", "Q46831"),
    "P6886": ("writing language", "Q34770"),
}

#: English Wikidata labels of the fallback classes.
CLASS_LABELS: dict[str, str] = {
    "Q5": "human",
    "Q515": "city",
    "Q3918": "university",
    "Q4164871": "position",
    "Q4830453": "business",
    "Q5107": "continent",
    "Q6256": "country",
    "Q7278": "political party",
    "Q12973014": "sports team",
    "Q15265344": "broadcaster",
    "Q15324": "body of water",
    "Q1931388": "cause of death",
    "Q34379": "musical instrument",
    "Q34770": "language",
    "Q349": "sport",
    "Q43229": "organization",
    "Q46831": "mountain range",
}

#: BEAR relations taken whole (its files hold 60 relations; these have a clear object class).
BEAR_RELATIONS = [
    "P6", "P19", "P20", "P26", "P27", "P30", "P36", "P37", "P50", "P57", "P58", "P69", "P103",
    "P108", "P127", "P131", "P137", "P170", "P176", "P178", "P206", "P364", "P403", "P449",
    "P463", "P509", "P641", "P1303", "P1376", "P1412", "P1532", "P3373", "P4552", "P6886",
]
#: DistFactAssessLM sample S' rows with a validity start are taken for these relations
#: (P54 sampled: it has 1,420 such rows; P131 left out: there its objects are not countries).
DFA_TEMPORAL_RELATIONS = [
    "P6", "P17", "P26", "P27", "P35", "P36", "P39", "P54", "P102", "P108", "P286", "P463", "P488",
]
DFA_P54_SAMPLE = 300
GREGORIAN = "http://www.wikidata.org/entity/Q1985727"
#: uuid5 namespace of the synthetic statement ids (the sources carry no statement ids).
STATEMENT_NS = uuid.UUID("6f1c3a52-8d1e-4c55-9a53-0f1f4b5f1e63")


@dataclass
class Entity:
    qid: str
    label: str | None = None
    aliases: list[str] = field(default_factory=list)
    description: str | None = None
    popularity: float | None = None
    declared_types: list[str] = field(default_factory=list)
    declared_source: dict[str, str] = field(default_factory=dict)  # P31 class -> source

    def add_label(self, label: str | None) -> None:
        """First label wins; a different label from another dump becomes an alias."""
        if not label:
            return
        if self.label is None:
            self.label = label
        elif label != self.label:
            self.add_alias(label)

    def add_alias(self, alias: str | None) -> None:
        if alias and alias != self.label and alias not in self.aliases:
            self.aliases.append(alias)


@dataclass
class Fact:
    subject: str
    pid: str
    object: str
    source: str
    start: tuple[str, int] | None = None  # (Wikidata time string, precision)
    end: tuple[str, int] | None = None


class Builder:
    def __init__(self, data: Path, seed: int) -> None:
        self.data = data
        self.rng = random.Random(seed)
        self.entities: dict[str, Entity] = {}
        self.facts: dict[tuple[str, str, str, str, str], Fact] = {}
        self.triples: dict[tuple[str, str, str], set[str]] = {}
        self.counts: collections.Counter[str] = collections.Counter()

    def entity(self, qid: str) -> Entity:
        if qid not in self.entities:
            self.entities[qid] = Entity(qid)
        return self.entities[qid]

    def add_fact(self, fact: Fact) -> bool:
        """Keep one statement per triple, except dated stints (one per start/end).

        An undated triple already present (e.g. a BEAR fact that DFA gave with dates) and a
        TempLAMA stint of a triple that DFA dated from Wikidata itself are skipped.
        """
        triple = (fact.subject, fact.pid, fact.object)
        seen = self.triples.get(triple, set())
        undated = fact.start is None and fact.end is None
        if (undated and seen) or (fact.source == "templama" and "distfactassesslm" in seen):
            self.counts[f"duplicate triple skipped ({fact.source})"] += 1
            return False
        key = (*triple, fact.start[0] if fact.start else "", fact.end[0] if fact.end else "")
        if key in self.facts:
            self.counts[f"duplicate triple skipped ({fact.source})"] += 1
            return False
        self.facts[key] = fact
        self.triples.setdefault(triple, set()).add(fact.source)
        self.counts[f"facts from {fact.source}"] += 1
        return True

    # -- sources ---------------------------------------------------------------------------

    def load_dfa(self) -> None:
        """DistFactAssessLM sample S': facts with a validity start (labels, descriptions, popularity)."""
        path = self.data / "distfactassesslm" / "facts_balanced_5000_temp_dist.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        keep = [r for r in rows if r["relation_id"] in DFA_TEMPORAL_RELATIONS and r["valid_start"]]
        p54 = sorted((r for r in keep if r["relation_id"] == "P54"), key=lambda r: r["row_index"])
        chosen_p54 = {r["row_index"] for r in self.rng.sample(p54, min(DFA_P54_SAMPLE, len(p54)))}
        keep = [r for r in keep if r["relation_id"] != "P54" or r["row_index"] in chosen_p54]
        for r in sorted(keep, key=lambda r: r["row_index"]):
            start = _dfa_time(r["valid_start"])
            end = _dfa_time(r["valid_end"]) if r["valid_end"] else None
            if start and end and _sort_key(end[0]) < _sort_key(start[0]):
                self.counts["dfa: dropped, end before start"] += 1
                continue
            fact = Fact(r["subject_id"], r["relation_id"], r["object_id"], "distfactassesslm", start, end)
            if self.add_fact(fact):
                s = self.entity(r["subject_id"])
                s.add_label(r["subject_label"])
                s.description = s.description or r["subject_description"]
                if r.get("popularity") is not None:
                    s.popularity = round(float(r["popularity"]), 3)
                o = self.entity(r["object_id"])
                o.add_label(r["object_label"])
                o.description = o.description or r["object_description"]

    def load_templama(self) -> None:
        """TempLAMA P54 sample: per-year team membership 2010-2020 becomes dated stints.

        A stint is a run of consecutive years with the same team (TempLAMA lists a year when a
        Wikidata P54 statement was valid in it). Its start year is kept only when it begins
        after 2010 and its end year only when it ends before 2020 (otherwise it may extend
        beyond the window). The sample was printed truncated, so the last subject of the file
        may miss years: it gets no end dates.
        """
        path = self.data / "templama-sample" / "templama_P54_sample.jsonl"
        years: dict[str, dict[str, set[int]]] = collections.defaultdict(lambda: collections.defaultdict(set))
        labels: dict[str, str] = {}
        order: list[str] = []
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            r = json.loads(line)
            subj = r["id"].split("_")[0]
            if subj not in labels:
                order.append(subj)
            labels[subj] = r["query"].split(" plays for _X_.")[0]
            team = r["answer"]["wikidata_id"]
            years[subj][team].add(int(r["date"]))
            self.entity(team).add_label(r["answer"]["name"])
        truncated = order[-1]
        for subj in sorted(years, key=lambda q: int(q[1:])):
            self.entity(subj).add_label(labels[subj])
            for team in sorted(years[subj], key=lambda q: int(q[1:])):
                for first, last in _runs(sorted(years[subj][team])):
                    start = (f"+{first:04d}-00-00T00:00:00Z", 9) if first > 2010 else None
                    end = (f"+{last:04d}-00-00T00:00:00Z", 9) if last < 2020 and subj != truncated else None
                    self.add_fact(Fact(subj, "P54", team, "templama", start, end))

    def load_bear(self) -> None:
        """BEAR: every fact of the chosen relations, with subject aliases."""
        for pid in BEAR_RELATIONS:
            path = self.data / "bear" / "BEAR" / f"{pid}.jsonl"
            for line in path.read_text().splitlines():
                if not line.strip():
                    continue
                r = json.loads(line)
                if self.add_fact(Fact(r["sub_id"], pid, r["obj_id"], "bear")):
                    s = self.entity(r["sub_id"])
                    s.add_label(r["sub_label"])
                    for alias in r["sub_aliases"]:
                        s.add_alias(alias)
                    self.entity(r["obj_id"]).add_label(r["obj_label"])

    def add_kamel_aliases(self) -> None:
        """KAMEL lists English alternative labels of its object QIDs: aliases for ours."""
        n = 0
        for path in sorted((self.data / "kamel" / "test").glob("P*.jsonl")):
            for line in path.read_text().splitlines():
                if not line.strip():
                    continue
                r = json.loads(line)
                for qid, lab in zip(r["obj_uri"], r["obj_label"], strict=False):
                    if qid in self.entities and isinstance(lab, dict):
                        e = self.entities[qid]
                        before = len(e.aliases)
                        for alias in [lab.get("rdf"), *(lab.get("alternative") or [])]:
                            e.add_alias(alias)
                        n += len(e.aliases) - before
        self.counts["aliases added from kamel"] = n

    def add_declared_types(self) -> None:
        """Declared P31 from the sources that have P31 rows (DFA samples, LPAQA T-REx)."""
        rows: list[tuple[str, str, str | None, str]] = []
        for name in ("facts_balanced_5000.jsonl", "facts_balanced_5000_temp_dist.jsonl"):
            for line in (self.data / "distfactassesslm" / name).read_text().splitlines():
                r = json.loads(line)
                if r["relation_id"] == "P31":
                    rows.append((r["subject_id"], r["object_id"], r["object_label"], "distfactassesslm"))
        for line in (self.data / "lpaqa" / "TREx_train" / "P31.jsonl").read_text().splitlines():
            r = json.loads(line)
            rows.append((r["sub_uri"], r["obj_uri"], r["obj_label"], "lpaqa-trex"))
        for subj, cls, cls_label, source in rows:
            if subj in self.entities and cls not in self.entities[subj].declared_types:
                self.entities[subj].declared_types.append(cls)
                self.entities[subj].declared_source[cls] = source
                self.entity(cls).add_label(cls_label)
                self.counts["declared P31 statements"] += 1

    # -- output ----------------------------------------------------------------------------

    def inferred_types(self) -> dict[str, list[dict[str, str]]]:
        """Fallback types for objects without a declared P31: the class of each relation's objects.

        One entry per class; ``basis`` lists every relation that implies it
        (``"range of P19, P27"``).
        """
        bases: dict[str, dict[str, list[str]]] = collections.defaultdict(dict)
        for fact in self.facts.values():
            if self.entities[fact.object].declared_types:
                continue
            pids = bases[fact.object].setdefault(RELATIONS[fact.pid][1], [])
            if fact.pid not in pids:
                pids.append(fact.pid)
        return {
            qid: [
                {"type": cls, "basis": "range of " + ", ".join(sorted(pids, key=lambda p: int(p[1:])))}
                for cls, pids in sorted(by_cls.items(), key=lambda kv: int(kv[0][1:]))
            ]
            for qid, by_cls in bases.items()
        }

    def entity_json(self) -> list[dict[str, Any]]:
        for cls, label in CLASS_LABELS.items():
            self.entity(cls).add_label(label)
        inferred = self.inferred_types()
        claims: dict[str, dict[str, list[dict[str, Any]]]] = collections.defaultdict(
            lambda: collections.defaultdict(list)
        )
        for fact in sorted(self.facts.values(), key=_fact_order):
            claims[fact.subject][fact.pid].append(_statement(fact))
        for e in self.entities.values():
            for cls in e.declared_types:
                claims[e.qid]["P31"].append(_statement(Fact(e.qid, "P31", cls, e.declared_source[cls])))
        out: list[dict[str, Any]] = []
        for pid in sorted(RELATIONS, key=lambda p: int(p[1:])):
            out.append({
                "type": "property", "datatype": "wikibase-item", "id": pid,
                "labels": {"en": {"language": "en", "value": RELATIONS[pid][0]}},
                "descriptions": {}, "aliases": {}, "claims": {},
            })
        for qid in sorted(self.entities, key=lambda q: int(q[1:])):
            e = self.entities[qid]
            item: dict[str, Any] = {
                "type": "item", "id": qid,
                "labels": {"en": {"language": "en", "value": e.label}} if e.label else {},
                "descriptions": {"en": {"language": "en", "value": e.description}} if e.description else {},
                "aliases": {"en": [{"language": "en", "value": a} for a in e.aliases]} if e.aliases else {},
                "claims": {p: claims[qid][p] for p in sorted(claims[qid], key=lambda p: int(p[1:]))},
            }
            if qid in inferred:
                item["kgprobe_inferred_types"] = inferred[qid]
            if e.popularity is not None:
                item["kgprobe_popularity"] = e.popularity
            out.append(item)
        return out


def _runs(years: list[int]) -> Iterable[tuple[int, int]]:
    start = prev = years[0]
    for y in years[1:]:
        if y != prev + 1:
            yield start, prev
            start = y
        prev = y
    yield start, prev


def _dfa_time(value: str | None) -> tuple[str, int] | None:
    """numpy datetime64 string ([-]YYYY / YYYY-MM / YYYY-MM-DD) → Wikidata time and precision."""
    if not value:
        return None
    sign = "-" if value.startswith("-") else "+"
    parts = value.lstrip("-").split("-")
    if not parts[0].isdigit():
        raise ValueError(f"unexpected DFA date {value!r}")
    year = int(parts[0])
    month = int(parts[1]) if len(parts) > 1 else 0
    day = int(parts[2][:2]) if len(parts) > 2 else 0
    precision = 11 if day else 10 if month else 9
    return f"{sign}{year:04d}-{month:02d}-{day:02d}T00:00:00Z", precision


def _sort_key(time: str) -> int:
    """Wikidata's ``year*10000 + month*100 + day`` (as kgprobe.records.time_sort_key)."""
    sign = -1 if time.startswith("-") else 1
    y, m, d = time[1:].split("T")[0].split("-")
    return sign * (int(y) * 10000 + int(m) * 100 + int(d))


def _fact_order(f: Fact) -> tuple[int, int, int, int]:
    return (int(f.subject[1:]), int(f.pid[1:]), _sort_key(f.start[0]) if f.start else 0, int(f.object[1:]))


def _time_snak(pid: str, value: tuple[str, int]) -> dict[str, Any]:
    return {
        "snaktype": "value", "property": pid,
        "datavalue": {"value": {"time": value[0], "timezone": 0, "before": 0, "after": 0,
                                "precision": value[1], "calendarmodel": GREGORIAN}, "type": "time"},
        "datatype": "time",
    }


def _statement(f: Fact) -> dict[str, Any]:
    sid = uuid.uuid5(STATEMENT_NS, f"{f.subject}|{f.pid}|{f.object}|{f.start[0] if f.start else ''}")
    st: dict[str, Any] = {
        "mainsnak": {
            "snaktype": "value", "property": f.pid,
            "datavalue": {"value": {"entity-type": "item", "numeric-id": int(f.object[1:]), "id": f.object},
                          "type": "wikibase-entityid"},
            "datatype": "wikibase-item",
        },
        "type": "statement",
        "id": f"{f.subject}${str(sid).upper()}",
        "rank": "normal",
        "kgprobe_source": f.source,
    }
    quals: dict[str, list[dict[str, Any]]] = {}
    if f.start:
        quals["P580"] = [_time_snak("P580", f.start)]
    if f.end:
        quals["P582"] = [_time_snak("P582", f.end)]
    if quals:
        st["qualifiers"] = quals
        st["qualifiers-order"] = list(quals)
    return st


def write_dump(entities: list[dict[str, Any]], path: Path) -> None:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as gz:
        gz.write(b"[\n")
        for i, ent in enumerate(entities):
            line = json.dumps(ent, ensure_ascii=False, separators=(",", ":"))
            gz.write((line + (",\n" if i < len(entities) - 1 else "\n")).encode())
        gz.write(b"]\n")
    path.write_bytes(buf.getvalue())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "kgprobe" / "data")
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args()

    b = Builder(args.data, args.seed)
    b.load_dfa()
    b.load_templama()
    b.load_bear()
    b.add_kamel_aliases()
    b.add_declared_types()
    entities = b.entity_json()
    args.out.mkdir(parents=True, exist_ok=True)
    write_dump(entities, args.out / "demo_graph.json.gz")

    facts = list(b.facts.values())
    per_rel = collections.Counter(f.pid for f in facts)
    dated = sum(1 for f in facts if f.start or f.end)
    groups = collections.Counter((f.subject, f.pid) for f in facts if f.start or f.end)
    history = sum(1 for f in facts if f.end or groups[(f.subject, f.pid)] >= 2)
    ended = sum(1 for f in facts if f.end)
    stats = {
        "entities (items)": sum(1 for e in entities if e["type"] == "item"),
        "relations": len(per_rel),
        "facts (item-valued, excluding P31)": len(facts),
        "facts with a start or end date": dated,
        "facts with an end date": ended,
        "facts with a temporal history (end date, or one of >= 2 dated values)": history,
        "objects with declared P31": sum(1 for f in {f.object for f in facts} if b.entities[f].declared_types),
        "objects with inferred (fallback) types only": sum(
            1 for q in {f.object for f in facts} if not b.entities[q].declared_types
        ),
        "entities with aliases": sum(1 for e in b.entities.values() if e.aliases),
        "entities with popularity": sum(1 for e in b.entities.values() if e.popularity is not None),
        **dict(sorted(b.counts.items())),
    }
    (args.out / "demo_stats.json").write_text(json.dumps({"stats": stats, "per_relation": dict(
        sorted(per_rel.items(), key=lambda kv: int(kv[0][1:])))}, indent=1) + "\n")
    for k, v in stats.items():
        print(f"{k:60} {v}")


if __name__ == "__main__":
    main()
