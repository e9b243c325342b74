"""Generate a synthetic Wikidata JSON dump of N statements (the real dump's layout and shapes).

Why synthetic: the ingest benchmark needs >= 1M statements and the real dump is ~100 GB; what
matters for throughput is the shape — ``[``, one entity per line with a trailing comma, ``]``;
English and German terms; P31 types; item-valued claims, some with P580/P582 qualifiers, some
preferred or deprecated; a share of non-item values (dates, strings) that loaders must skip.
Written line by line (memory independent of N); ``.gz`` / ``.bz2`` compress by extension.

    python benchmarks/gen_dump.py /tmp/dump.json.gz --statements 1000000 --seed 0

``--realistic --entities N`` writes lines that look like the real dump's instead (issue 37):
every part of a line is taken from real entity JSON (``tests/fixtures/wikidata/entity-json``):
labels, descriptions, aliases and sitelinks in many languages, whole statements with their
references, qualifiers and datatypes (external ids, strings, quantities, coordinates, …), with
sizes drawn so that the averages match the published dump (see `write_realistic_dump`).

    python benchmarks/gen_dump.py /tmp/real.json.gz --realistic --entities 15000 --seed 0
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import json
import math
import random
import uuid
from pathlib import Path
from typing import IO, Any

#: item-valued relations (P31 handled apart) with their share of statements
RELATIONS = [
    "P19",
    "P27",
    "P69",
    "P108",
    "P39",
    "P102",
    "P26",
    "P166",
    "P106",
    "P463",
    "P54",
    "P17",
]
#: relations that get start/end qualifiers now and then
TEMPORAL = {"P39", "P102", "P26", "P108", "P54", "P463", "P69"}
CLASSES = ["Q5", "Q515", "Q6256", "Q43229", "Q3918", "Q4830453", "Q11424", "Q7725634"]
GREGORIAN = "http://www.wikidata.org/entity/Q1985727"


def _open(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "wt", encoding="utf-8", compresslevel=1)
    if path.suffix == ".bz2":
        return bz2.open(path, "wt", encoding="utf-8")
    return open(path, "w", encoding="utf-8")


def _snak(pid: str, value: dict[str, Any], vtype: str, datatype: str) -> dict[str, Any]:
    return {
        "snaktype": "value",
        "property": pid,
        "datavalue": {"value": value, "type": vtype},
        "datatype": datatype,
    }


def _item(pid: str, qid: str) -> dict[str, Any]:
    return _snak(
        pid,
        {"entity-type": "item", "numeric-id": int(qid[1:]), "id": qid},
        "wikibase-entityid",
        "wikibase-item",
    )


def _time(pid: str, rng: random.Random) -> dict[str, Any]:
    year = rng.randint(-300, 2024)
    year = year if year != 0 else 1
    precision = rng.choice((9, 11, 11))
    month, day = (rng.randint(1, 12), rng.randint(1, 28)) if precision == 11 else (0, 0)
    sign = "-" if year < 0 else "+"
    value = {
        "time": f"{sign}{abs(year):04d}-{month:02d}-{day:02d}T00:00:00Z",
        "timezone": 0,
        "before": 0,
        "after": 0,
        "precision": precision,
        "calendarmodel": GREGORIAN,
    }
    return _snak(pid, value, "time", "time")


def _statement(qid: str, mainsnak: dict[str, Any], rng: random.Random, rank: str) -> dict[str, Any]:
    sid = uuid.UUID(int=rng.getrandbits(128), version=4)
    return {
        "mainsnak": mainsnak,
        "type": "statement",
        "id": f"{qid}${str(sid).upper()}",
        "rank": rank,
    }


def _entity(n: int, n_items: int, budget: int, rng: random.Random) -> tuple[dict[str, Any], int]:
    qid = f"Q{n}"
    claims: dict[str, list[dict[str, Any]]] = {}
    used = 0

    def add(pid: str, st: dict[str, Any]) -> None:
        nonlocal used
        claims.setdefault(pid, []).append(st)
        used += 1

    add("P31", _statement(qid, _item("P31", rng.choice(CLASSES)), rng, "normal"))
    while used < budget:
        r = rng.random()
        if r < 0.12:  # a non-item value the loader must skip and count
            if rng.random() < 0.5:
                add("P569", _statement(qid, _time("P569", rng), rng, "normal"))
            else:
                snak = _snak("P214", str(rng.randint(10**6, 10**9)), "string", "external-id")
                add("P214", _statement(qid, snak, rng, "normal"))
            continue
        pid = rng.choice(RELATIONS)
        rank = "normal"
        if r > 0.97:
            rank = "deprecated"
        elif r > 0.92:
            rank = "preferred"
        st = _statement(qid, _item(pid, f"Q{rng.randint(1, n_items)}"), rng, rank)
        if pid in TEMPORAL and rng.random() < 0.4:
            quals: dict[str, list[dict[str, Any]]] = {"P580": [_time("P580", rng)]}
            if rng.random() < 0.6:
                quals["P582"] = [_time("P582", rng)]
            st["qualifiers"] = quals
            st["qualifiers-order"] = list(quals)
        add(pid, st)
    label = f"Entity {n}"
    ent = {
        "type": "item",
        "id": qid,
        "labels": {
            "en": {"language": "en", "value": label},
            "de": {"language": "de", "value": f"Objekt {n}"},
        },
        "descriptions": {"en": {"language": "en", "value": f"synthetic item number {n}"}},
        "aliases": {"en": [{"language": "en", "value": f"E{n}"}]} if rng.random() < 0.5 else {},
        "claims": claims,
        "sitelinks": {},
        "lastrevid": rng.randint(1, 2**31),
    }
    return ent, used


def write_dump(path: str | Path, n_statements: int, seed: int = 0) -> dict[str, int]:
    """Write a dump with exactly ``n_statements`` statements; return what was written.

    About 10 statements per entity (between 2 and 18); objects point at other entities of the
    same dump so the graph is connected. Deterministic for a given seed.
    """
    if n_statements < 1:
        raise ValueError("n_statements must be >= 1")
    p = Path(path)
    rng = random.Random(seed)
    n_items = max(1, n_statements // 10)
    written = entities = 0
    with _open(p) as fh:
        fh.write("[\n")
        first = True
        while written < n_statements:
            entities += 1
            budget = min(rng.randint(2, 18), n_statements - written)
            ent, used = _entity(entities, n_items, budget, rng)
            written += used
            fh.write(("" if first else ",\n") + json.dumps(ent, separators=(",", ":")))
            first = False
        fh.write("\n]\n")
    return {"entities": entities, "statements": written}


# --------------------------------------------------------------------------- realistic lines

#: the real entity documents whose parts the realistic lines are made of
SAMPLES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "wikidata" / "entity-json"
#: the published dump: ~1.4 TB of JSON for ~100 M entities (2022), i.e. ~14 KB per entity.
#: The means below (property groups and languages per entity, both log-normal with sigma 1)
#: were chosen so that the realistic dump lands there; docs/benchmarks.md gives the figures.
MEAN_PROPERTIES = 10.0
MEAN_LANGUAGES = 12.0
SIGMA = 1.0


class _Parts:
    """The real parts a realistic line is assembled from, pooled over the sample files."""

    def __init__(self, samples: Path) -> None:
        self.labels: dict[str, list[Any]] = {}
        self.descriptions: dict[str, list[Any]] = {}
        self.aliases: dict[str, list[Any]] = {}
        self.sitelinks: list[tuple[str, Any]] = []
        self.claims: list[tuple[str, list[dict[str, Any]]]] = []  # one property's statements
        self.types: list[list[dict[str, Any]]] = []  # P31 groups, one per sample
        for path in sorted(samples.glob("*.json")):
            doc = json.loads(path.read_text(encoding="utf-8"))
            for ent in doc["entities"].values():
                for key, pool in (("labels", self.labels), ("descriptions", self.descriptions),
                                  ("aliases", self.aliases)):
                    for lang, term in (ent.get(key) or {}).items():
                        pool.setdefault(lang, []).append(term)
                self.sitelinks += list((ent.get("sitelinks") or {}).items())
                for pid, group in ent["claims"].items():
                    (self.types.append(group) if pid == "P31" else self.claims.append((pid, group)))
        if not self.claims or not self.types:
            raise ValueError(f"{samples}: no entity JSON with claims and P31 to build lines from")
        self.languages = sorted(self.labels)


def _lognormal(rng: random.Random, mean: float, top: int) -> int:
    """A count >= 1 with the given mean before clipping: a few entities large, most small."""
    mu = math.log(mean) - SIGMA**2 / 2
    return max(1, min(top, round(rng.lognormvariate(mu, SIGMA))))


def _realistic_entity(n: int, parts: _Parts, rng: random.Random) -> tuple[dict[str, Any], int]:
    qid = f"Q{n}"
    n_langs = _lognormal(rng, MEAN_LANGUAGES, len(parts.languages))
    langs = rng.sample(parts.languages, n_langs)
    if "en" not in langs and rng.random() < 0.85:  # most items have an English label
        langs[0] = "en"
    labels = {lang: rng.choice(parts.labels[lang]) for lang in langs}
    # descriptions, aliases and sitelinks for a share of those languages, as in the samples
    descriptions = {lang: rng.choice(parts.descriptions[lang]) for lang in langs
                    if lang in parts.descriptions and rng.random() < 0.5}
    aliases = {lang: rng.choice(parts.aliases[lang]) for lang in langs
               if lang in parts.aliases and rng.random() < 0.3}
    sitelinks = dict(rng.sample(parts.sitelinks, min(len(parts.sitelinks), round(n_langs * 0.9))))
    claims: dict[str, list[dict[str, Any]]] = {"P31": rng.choice(parts.types)}
    for pid, group in rng.sample(parts.claims, _lognormal(rng, MEAN_PROPERTIES, len(parts.claims))):
        claims.setdefault(pid, group)
    statements = 0
    for pid, group in claims.items():  # statement ids rewritten to the new entity's
        claims[pid] = [{**st, "id": f"{qid}${str(uuid.UUID(int=rng.getrandbits(128), version=4)).upper()}"}
                       for st in group]
        statements += len(group)
    ent = {
        "pageid": n + 100, "ns": 0, "title": qid, "lastrevid": rng.randint(10**8, 2 * 10**9),
        "modified": "2025-12-18T15:00:34Z", "type": "item", "id": qid,
        "labels": labels or [], "descriptions": descriptions or [], "aliases": aliases or [],
        "claims": claims, "sitelinks": sitelinks or [],
    }
    return ent, statements


def write_realistic_dump(
    path: str | Path, n_entities: int, seed: int = 0, samples: Path = SAMPLES, first_id: int = 1
) -> dict[str, int]:
    """Write ``n_entities`` realistic dump lines; return entities, statements, item-valued
    statements and uncompressed bytes.

    Every label, description, alias list, sitelink and statement (references and qualifiers
    included) is a real one from ``samples``; what is drawn is how many (log-normal, so most
    entities are small and a few large, as in the dump) and which. Each entity gets a P31
    group; statement ids are rewritten to the entity's. Deterministic for a given seed.
    The entities are ``Q<first_id>`` on (a test loads them beside real entities: a range of
    its own); the values they refer to stay the samples' real ids.
    """
    if n_entities < 1:
        raise ValueError("n_entities must be >= 1")
    parts = _Parts(samples)
    rng = random.Random(seed)
    statements = item_valued = size = 0
    with _open(Path(path)) as fh:
        fh.write("[\n")
        size += 2
        for n in range(1, n_entities + 1):
            ent, used = _realistic_entity(first_id + n - 1, parts, rng)
            statements += used
            item_valued += sum(st["mainsnak"].get("datatype") == "wikibase-item"
                               and st["mainsnak"].get("snaktype") == "value"
                               for group in ent["claims"].values() for st in group)
            line = json.dumps(ent, ensure_ascii=False, separators=(",", ":"))
            line += ",\n" if n < n_entities else "\n"
            fh.write(line)
            size += len(line.encode("utf-8"))
        fh.write("]\n")
        size += 2
    return {"entities": n_entities, "statements": statements, "item_valued": item_valued,
            "bytes": size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--statements", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--realistic", action="store_true", help="lines made of real entity JSON")
    ap.add_argument("--entities", type=int, default=15_000, help="with --realistic")
    args = ap.parse_args()
    if args.realistic:
        stats = write_realistic_dump(args.out, args.entities, args.seed)
        print(f"wrote {args.out}: {stats['entities']:,} entities, {stats['bytes']:,} bytes "
              f"({stats['bytes'] / stats['entities']:,.0f} per entity), {stats['statements']:,} "
              f"statements ({stats['statements'] / stats['entities']:.1f} per entity, "
              f"{stats['item_valued'] / stats['statements']:.1%} item-valued)")
        return
    stats = write_dump(args.out, args.statements, args.seed)
    print(f"wrote {args.out}: {stats['entities']:,} entities, {stats['statements']:,} statements")


if __name__ == "__main__":
    main()
