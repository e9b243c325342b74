"""Format-neutral entity description and the one place that turns it into records.

Each loader parses its format into :class:`EntityData` and hands it to :func:`entity_records`,
so filters, type handling, skip reasons and temporal qualifiers behave identically for JSON,
RDF and SPARQL input. That is what makes "the JSON path and the RDF path yield the same facts"
true by construction rather than by coincidence.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from kgprobe.loaders.common import (
    SKIP_DEPRECATED,
    SKIP_RELATION,
    SKIP_TRUTHY_DUP,
    TYPE_RELATIONS,
    Filters,
    SkipCounter,
    skip_value,
)
from kgprobe.records import (
    END_TIME,
    INSTANCE_OF,
    POINT_IN_TIME,
    START_TIME,
    SUBCLASS_OF,
    EntityRecord,
    FactRecord,
    Record,
    RelationRecord,
    TimeValue,
    normalize_statement_id,
)

TEMPORAL = (START_TIME, END_TIME, POINT_IN_TIME)


@dataclass(slots=True)
class Value:
    """A snak value: ``kind`` is ``item`` for items, else the value type that names the skip.

    Kinds: item, property (any non-item entity), string, time, quantity, globecoordinate,
    monolingualtext, somevalue, novalue.
    """

    kind: str
    text: str = ""  # QID for items, rendered value otherwise
    time: TimeValue | None = None


@dataclass(slots=True)
class Statement:
    pid: str
    value: Value
    rank: str = "normal"
    statement_id: str | None = None
    qualifiers: list[tuple[str, Value]] = field(default_factory=list)
    #: the dataset a statement came from when the file says so (kgprobe's demo graph does)
    source: str | None = None


@dataclass
class EntityData:
    """What a loader extracted for one entity, before filtering."""

    id: str
    kind: str = "item"  # item | property | lexeme | …
    label: str | None = None
    aliases: list[str] = field(default_factory=list)
    description: str | None = None
    statements: list[Statement] = field(default_factory=list)
    #: truthy (``wdt:``) triples: (pid, value); no rank, no qualifiers.
    truthy: list[tuple[str, Value]] = field(default_factory=list)


def _temporal(values: list[Value]) -> tuple[TimeValue | None, list[Value]]:
    """Pick one time deterministically (earliest) and return the rest as extra qualifiers.

    RDF is unordered, so "the first" would differ between formats; the earliest does not.
    """
    timed = sorted(
        ((v.time, v) for v in values if v.time is not None),
        key=lambda tv: (tv[0].sort_key, tv[0].time),
    )
    if not timed:
        return None, list(values)
    return timed[0][0], [v for _, v in timed[1:]] + [v for v in values if v.time is None]


def statement_fact(
    subject: str, st: Statement, skips: SkipCounter, source: str, location: str = ""
) -> FactRecord:
    return fact_record(subject, st.pid, st.value.text, st.rank, st.statement_id, st.qualifiers,
                       st.source or source, skips, location)


def fact_record(
    subject: str,
    pid: str,
    obj: str,
    rank: str,
    statement_id: str | None,
    qualifiers: list[tuple[str, Value]],
    source: str,
    skips: SkipCounter,
    location: str = "",
) -> FactRecord:
    """One kept statement as a FactRecord: the earliest of each temporal qualifier chosen, the
    other qualifiers rendered and sorted (shared by every format, and by the JSON fast path)."""
    sid = normalize_statement_id(statement_id) if statement_id else None
    if not qualifiers:  # most statements: nothing to choose or render
        return FactRecord(subject=subject, pid=pid, object=obj, statement_id=sid,
                          rank=rank, source=source, location=location)
    by_pid: dict[str, list[Value]] = {}
    for qpid, qv in qualifiers:
        by_pid.setdefault(qpid, []).append(qv)
    chosen: dict[str, TimeValue | None] = {}
    rendered_by_pid: dict[str, list[str]] = {}
    for qpid, vals in by_pid.items():
        rest = vals
        if qpid in TEMPORAL:
            chosen[qpid], rest = _temporal(vals)
        rendered: list[str] = []
        for v in rest:
            if v.kind in ("somevalue", "novalue"):
                skips.add(f"qualifier:{v.kind}")
            else:
                rendered.append(v.text)
        if rendered:
            rendered_by_pid[qpid] = sorted(rendered)
    return FactRecord(
        subject=subject,
        pid=pid,
        object=obj,
        statement_id=sid,
        rank=rank,
        start=chosen.get(START_TIME),
        end=chosen.get(END_TIME),
        point_in_time=chosen.get(POINT_IN_TIME),
        qualifiers=dict(sorted(rendered_by_pid.items())),
        source=source,
        location=location,
    )


def skip_reason(pid: str, rank: str, kind: str, filters: Filters) -> str | None:
    """Why a statement is not kept (its rank, its relation, or a value that is not an item),
    or None: the one rule every loader's statements go through."""
    if rank not in filters.ranks:
        return SKIP_DEPRECATED if rank == "deprecated" else f"rank:{rank}"
    if pid not in TYPE_RELATIONS and not filters.wants_relation(pid):
        return SKIP_RELATION
    if kind != "item":
        return skip_value(kind)
    return None


def entity_records(
    ent: EntityData, filters: Filters, location: str, source: str
) -> Iterator[Record]:
    """EntityRecord (or RelationRecord), then its facts, then one SkipRecord per skip reason."""
    skips = SkipCounter()
    if ent.kind == "property":
        yield RelationRecord(
            pid=ent.id,
            label=ent.label,
            description=ent.description,
            aliases=list(ent.aliases),
            location=location,
        )
        n = len(ent.statements) + len(ent.truthy)
        if n:
            skips.add("property-statements", n)
        yield from skips.flush(location)
        return

    types: list[str] = []
    supers: list[str] = []
    facts: list[FactRecord] = []
    full_pids = {st.pid for st in ent.statements}
    for st in ent.statements:
        reason = skip_reason(st.pid, st.rank, st.value.kind, filters)
        if reason is not None:
            skips.add(reason)
            continue
        if st.pid == INSTANCE_OF:
            types.append(st.value.text)
        elif st.pid == SUBCLASS_OF:
            supers.append(st.value.text)
        else:
            facts.append(statement_fact(ent.id, st, skips, source, location))
    for pid, val in ent.truthy:
        if pid in full_pids:
            # the same statement is present in full form (ranks, qualifiers, id): keep that one
            skips.add(SKIP_TRUTHY_DUP)
            continue
        if pid not in TYPE_RELATIONS and not filters.wants_relation(pid):
            skips.add(SKIP_RELATION)
            continue
        if val.kind != "item":
            skips.add(skip_value(val.kind))
            continue
        if pid == INSTANCE_OF:
            types.append(val.text)
        elif pid == SUBCLASS_OF:
            supers.append(val.text)
        else:
            facts.append(
                FactRecord(subject=ent.id, pid=pid, object=val.text, source=source, location=location)
            )
    yield EntityRecord(
        qid=ent.id,
        label=ent.label,
        aliases=list(ent.aliases),
        description=ent.description,
        types=list(dict.fromkeys(types)),
        superclasses=list(dict.fromkeys(supers)),
        location=location,
    )
    yield from facts
    yield from skips.flush(location)
