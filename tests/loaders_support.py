"""Helpers shared by the loader tests (fixture paths, record grouping, the dump generator)."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from kgprobe.records import EntityRecord, FactRecord, Record, SkipRecord

ROOT = Path(__file__).resolve().parent.parent
WD = Path(__file__).parent / "fixtures" / "wikidata"


def by_type(records: Iterable[Record]) -> dict[type, list[Any]]:
    out: dict[type, list[Any]] = {}
    for r in records:
        out.setdefault(type(r), []).append(r)
    return out


def facts(records: Iterable[Record]) -> list[FactRecord]:
    return [r for r in records if isinstance(r, FactRecord)]


def entities(records: Iterable[Record]) -> list[EntityRecord]:
    return [r for r in records if isinstance(r, EntityRecord)]


def skips(records: Iterable[Record]) -> Counter[str]:
    c: Counter[str] = Counter()
    for r in records:
        if isinstance(r, SkipRecord):
            c[r.reason] += r.count
    return c


def fact_key(f: FactRecord, *, precision: bool = True) -> tuple[Any, ...]:
    """What "the same fact" means across formats (source tag excluded)."""

    def t(tv: Any) -> Any:
        if tv is None:
            return None
        return (tv.time, tv.precision, tv.calendar) if precision else tv.year

    return (
        f.subject,
        f.pid,
        f.object,
        f.rank,
        f.statement_id,
        t(f.start),
        t(f.end),
        t(f.point_in_time),
        tuple(sorted((k, tuple(v)) for k, v in f.qualifiers.items())) if precision else (),
    )


def gen_dump_module() -> ModuleType:
    """``benchmarks/gen_dump.py`` (not a package): loaded from its file."""
    spec = importlib.util.spec_from_file_location("gen_dump", ROOT / "benchmarks" / "gen_dump.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def raw_statements(entity: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(pid, st) for pid, sts in entity.get("claims", {}).items() for st in sts]


def load_entity(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    return next(iter(doc["entities"].values())) if "entities" in doc else doc
