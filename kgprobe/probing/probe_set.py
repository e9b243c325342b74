"""Probe sets that travel (issue 42): build from the graph, score anywhere, write back.

A probe run is gather -> score -> write (:mod:`.loop`). A *probe set* is the gather half
serialized: the sampled facts as the measures see them (:class:`FactInput`: labels, aliases,
verbalizer facts, templates, distractors, past values, ...) with the run's configuration, the
relations' templates, the reference date and the graph's snapshot, in one Parquet file with a
schema version and a sha256 content hash. Scoring a set feeds those items to the same scoring
code (:func:`~kgprobe.probing.loop.score_batches`) with no graph server; its ``scores.parquet``
holds the FACT properties the write half would have written, with the ProbeRun's record;
``import-scores`` hands them to the same write code (``probe_runs.write_scores``).

docs/probe-sets.md says what is checked and what is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast

from kgprobe.errors import ConfigError, InputError, OutputError
from kgprobe.graph import probe_runs as pr
from kgprobe.graph.distractors import date_sort_key
from kgprobe.graph.results import fact_ends
from kgprobe.probing.backends.base import ModelInfo
from kgprobe.probing.config import ProbeConfig, ProbeSummary, Runner, model_key, run_context
from kgprobe.probing.loop import (
    FactRef,
    FactScores,
    Gatherer,
    LoopOutcome,
    LoopPlan,
    Planned,
    chunks,
    fact_details,
    score_batches,
)
from kgprobe.probing.measures.common import Entity
from kgprobe.probing.measures.registry import FactInput, OnFact
from kgprobe.probing.strategies import strategy_class
from kgprobe.probing.verbalize import CAREFUL_RULES_VERSION, Facts
from kgprobe.provenance import code_version, now
from kgprobe.types import PID, QID, FactKey, JSONObject, MeasureKey, ModelKey, Properties, RunId

if TYPE_CHECKING:  # pragma: no cover
    from kgprobe.graph.client import Graph
    from kgprobe.probing.semantic import SemanticIndex

#: The layout of a probe set file. A reader refuses any other (the file says which it is).
SET_SCHEMA = "kgprobe-probe-set/1"
#: The layout of a scores file written by ``probe --set``.
SCORES_SCHEMA = "kgprobe-scores/1"
_SET_META = b"kgprobe.probe_set"
#: per fact, what a report shows beside the score (labels as in the graph, popularity); a set
#: exported before these were carried has none (its report then has no popularity buckets)
_ENDS = ("subject_label", "object_label", "popularity", "object_popularity")
_SCORES_META = b"kgprobe.scores"
#: ProbeConfig fields a set fixes (the model, dtype, shard and force belong to the scoring)
_SET_FIELDS = ("relations", "sample", "per_relation", "measures", "strategy", "n", "seed",
               "threshold", "at", "max_subject_labels", "max_object_labels", "max_templates",
               "max_past_values", "batch_facts", "history_first", "end", "label_rule",
               "verbalizer")


def _pyarrow() -> tuple[Any, Any]:
    """pyarrow and pyarrow.parquet, or one line saying how to get them."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError("probe sets are Parquet files and need pyarrow: "
                          "pip install 'kgprobe[dev]' (or pip install pyarrow)") from None
    return pa, pq


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def content_hash(header: Mapping[str, object], rows: Sequence[Mapping[str, object]]) -> str:
    """sha256 over the canonical JSON of the header (without its hash) and every row, in order."""
    h = hashlib.sha256(_canon({k: v for k, v in header.items() if k != "content_hash"}).encode())
    for row in rows:
        h.update(b"\n")
        h.update(_canon(row).encode())
    return h.hexdigest()


# --- FactInput <-> JSON ---------------------------------------------------------------------------


class FactsJSON(TypedDict):
    """An entity's verbalizer :class:`Facts` in a set's ``fact`` column."""

    types: list[str]
    the_forms: list[str]
    main_takes_the: bool
    work: bool
    main: str


class EntityJSON(TypedDict):
    """One :class:`Entity` in a set's ``fact`` column."""

    label: str
    aliases: list[str]
    qid: QID | None
    facts: FactsJSON | None


class FactJSON(TypedDict):
    """One :class:`FactInput` as a set's ``fact`` column holds it (:func:`fact_json`)."""

    key: FactKey
    pid: PID
    subject: EntityJSON
    object: EntityJSON
    templates: list[str]
    distractors: list[EntityJSON]
    past: list[EntityJSON]
    other_objects: list[EntityJSON]
    other_subjects: list[EntityJSON]
    object_relation_templates: list[list[str]]
    demonstrations: list[FactJSON]
    distractor_reason: str | None


def _entity_json(e: Entity) -> EntityJSON:
    f = e.facts
    return {"label": str(e.label), "aliases": [str(a) for a in e.aliases], "qid": e.qid,
            "facts": None if f is None else {
                "types": sorted(f.types), "the_forms": sorted(f.the_forms),
                "main_takes_the": f.main_takes_the, "work": f.work, "main": f.main}}


def _entity(d: EntityJSON) -> Entity:
    f = d.get("facts")
    facts = None if f is None else Facts(frozenset(f["types"]), frozenset(f["the_forms"]),
                                         bool(f["main_takes_the"]), bool(f["work"]), str(f["main"]))
    return Entity(str(d["label"]), tuple(d["aliases"]), d.get("qid"), facts)


def fact_json(f: FactInput) -> FactJSON:
    """Everything the measures read of one fact, as JSON (:func:`fact_input` reads it back)."""
    return {
        "key": f.key, "pid": f.pid, "subject": _entity_json(f.subject),
        "object": _entity_json(f.object), "templates": list(f.templates),
        "distractors": [_entity_json(e) for e in f.distractors],
        "past": [_entity_json(e) for e in f.past],
        "other_objects": [_entity_json(e) for e in f.other_objects],
        "other_subjects": [_entity_json(e) for e in f.other_subjects],
        "object_relation_templates": [list(t) for t in f.object_relation_templates],
        "demonstrations": [fact_json(d) for d in f.demonstrations],
        "distractor_reason": f.distractor_reason,
    }


def fact_input(d: FactJSON) -> FactInput:
    """The :class:`FactInput` of :func:`fact_json`'s output, equal to the one gathered."""
    return FactInput(
        key=d["key"], pid=d["pid"], subject=_entity(d["subject"]), object=_entity(d["object"]),
        templates=tuple(d["templates"]),
        distractors=tuple(_entity(e) for e in d["distractors"]),
        past=tuple(_entity(e) for e in d["past"]),
        other_objects=tuple(_entity(e) for e in d["other_objects"]),
        other_subjects=tuple(_entity(e) for e in d["other_subjects"]),
        object_relation_templates=tuple(tuple(t) for t in d["object_relation_templates"]),
        demonstrations=tuple(fact_input(x) for x in d["demonstrations"]),
        distractor_reason=d.get("distractor_reason"),
    )


# --- files ---------------------------------------------------------------------------------------


class Ends(TypedDict):
    """What a report shows beside a fact's score (:data:`_ENDS`), one type per column."""

    subject_label: str | None
    object_label: str | None
    popularity: float | None
    object_popularity: float | None


class SetRow(FactRef, Ends):
    """One row of a probe set: the fact, why it could not be planned (None: it could), its
    :class:`FactJSON` as canonical JSON text, and its :class:`Ends`."""

    reason: str | None
    fact: str


class ScoringVersions(TypedDict):
    """:func:`measure_versions`: each measure's version and the careful verbalizer's rules."""

    measures: dict[str, int]
    verbalizer_rules: int


class SetHeader(TypedDict):
    """A probe set's header (its Parquet metadata; docs/probe-sets.md)."""

    schema: str
    created: str
    kgprobe: str | None  # its version (code_version)
    #: the ProbeConfig fields the set fixes (:data:`_SET_FIELDS`), as JSON: read back by
    #: ``ProbeConfig(**config)``, which checks them
    config: JSONObject
    relations: list[PID]
    templates: dict[PID, Sequence[Sequence[str]]]  # (template id, text) pairs
    reference_date: int
    relation_labels: dict[PID, str | None]
    graph_snapshot: dict[str, int]
    facts: int
    scoring: ScoringVersions
    content_hash: NotRequired[str]  # set last: the hash covers the rest


class ScoreRow(TypedDict):
    """One row of a scores file: a fact and measure key, its score, and ``props``, the FACT
    properties it sets, as canonical JSON text."""

    key: FactKey
    s: QID
    pid: PID
    o: QID
    measure: MeasureKey
    score: float | None
    props: str


class RunFinal(TypedDict):
    """What a scored set's ProbeRun is updated with as it ends."""

    status: str
    finished: str
    seconds: float
    unscorable_reasons: str  # JSON text: a graph property holds no map
    contexts_cut: int


class ScoresHeader(TypedDict):
    """A scores file's header: the set and graph it belongs to, the run and its record."""

    schema: str
    probe_set: str
    graph_snapshot: dict[str, int]
    run_id: RunId
    model_key: ModelKey
    fingerprint: str
    run: Properties  # the ProbeRun's properties (RunProvenance.props)
    final: RunFinal
    content_hash: NotRequired[str]


class Imported(TypedDict):
    """What :func:`import_scores` did with one scores file."""

    file: str
    run_id: RunId
    status: str  # "imported" or "already imported"
    facts: int


def _columns(rows: Sequence[Mapping[str, object]], names: Sequence[str]) -> dict[str, list[object]]:
    """``rows`` as the Parquet columns ``names``, in row order."""
    return {k: [r[k] for r in rows] for k in names}


def _write(path: Path, columns: dict[str, list[object]], meta_key: bytes, header: Mapping[str, object]) -> None:
    """One Parquet file, written whole or not at all (a temporary file renamed into place)."""
    pa, pq = _pyarrow()
    table = pa.table(columns).replace_schema_metadata({meta_key: _canon(header).encode()})
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _read(path: str | os.PathLike[str], meta_key: bytes, schema: str,
          what: str) -> tuple[JSONObject, list[JSONObject]]:
    """Header and rows of a file :func:`_write` wrote, its schema and content hash checked
    (what the rest hold is the caller's layout: :class:`SetHeader`, :class:`ScoresHeader`)."""
    _, pq = _pyarrow()
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{what} {p}: no such file")
    try:
        table = pq.read_table(p)
    except Exception as exc:  # pyarrow's errors of a file that is not Parquet
        raise InputError(f"{what} {p} is not a Parquet file ({type(exc).__name__})") from exc
    raw = (table.schema.metadata or {}).get(meta_key)
    if raw is None:
        raise InputError(f"{p} is not a kgprobe {what} (no {meta_key.decode()} metadata)")
    try:
        header = json.loads(raw)
    except ValueError as exc:
        raise InputError(f"{what} {p}: its metadata is not JSON") from exc
    if not isinstance(header, dict) or header.get("schema") != schema:
        found = header.get("schema") if isinstance(header, dict) else None
        raise InputError(f"{what} {p} has layout {found!r}; this kgprobe reads {schema} "
                         "(export it again with this kgprobe)")
    rows = table.to_pylist()
    if content_hash(header, rows) != header.get("content_hash"):
        raise InputError(f"{what} {p} was changed after it was written: its content hash does "
                         "not match its rows; refusing it")
    return header, rows


def _ends_row(e: Mapping[str, object]) -> Ends:
    """A fact's ends as set columns: one type per column (a popularity stored as an integer
    would come back from Parquet as a float, and no longer match the content hash)."""
    def num(v: Any) -> float | None:
        try:
            return None if v is None else float(v)
        except (TypeError, ValueError):
            return None

    return {"subject_label": None if e.get("subject_label") is None else str(e["subject_label"]),
            "object_label": None if e.get("object_label") is None else str(e["object_label"]),
            "popularity": num(e.get("popularity")), "object_popularity": num(e.get("object_popularity"))}


def measure_versions(config: ProbeConfig) -> ScoringVersions:
    """What of the scoring code a set's values depend on beyond its data: each measure's
    version and the careful verbalizer's rules. A set is scored only where these are equal."""
    return {"measures": {m.name: m.version for m in config.measure_objects()},
            "verbalizer_rules": CAREFUL_RULES_VERSION}


# --- export ----------------------------------------------------------------------------------------


def set_config(*, relations: Sequence[str] = (), sample: int | None = 60,
               per_relation: int | None = None, measures: Sequence[str] = ("kmin",),
               strategy: str | None = None, n: int | None = None, **options: Any) -> ProbeConfig:
    """The :class:`ProbeConfig` of an export, from ``probe``'s sampling options (``n`` and
    ``strategy`` may come from a measure's spec, ``kmin:n=3``, as for ``probe``)."""
    from kgprobe.probing.config import DEFAULT_STRATEGY
    from kgprobe.probing.measures.catalog import run_wide_settings

    ms, spec_n, spec_strategy = run_wide_settings(measures, n, strategy)
    return ProbeConfig(relations=tuple(relations), sample=sample, per_relation=per_relation,
                       measures=tuple(ms), strategy=spec_strategy or DEFAULT_STRATEGY,
                       n=spec_n or 5, **options)


def export_set(graph: Graph, config: ProbeConfig, path: str | os.PathLike[str], *,
               index: SemanticIndex | None = None, index_dir: str | Path | None = None,
               progress: bool = True) -> SetHeader:
    """Sample facts as ``probe`` does and write what the measures need of them to ``path``.
    Returns the set's header (its content hash, counts, snapshot)."""
    from kgprobe.probing.distractors import default_index_dir
    from kgprobe.probing.run import _index_progress, choose_relations, probe_relations
    from kgprobe.probing.semantic import ensure_index

    _pyarrow()
    config.validate()
    if strategy_class(config.strategy).needs_model:
        raise ConfigError(f"the {config.strategy} strategy finds distractors with the model itself, "
                          "so it cannot be exported; choose one that does not (random, sem, temp+sem)")
    measures = config.measure_objects()
    for m in measures:
        why = m.available()
        if why:
            raise ConfigError(why)
    ctx = run_context(config, None)
    available = probe_relations(graph, config.max_templates)
    relations = choose_relations(available, config.relations)
    ref = date_sort_key(config.at)
    subjects = pr.sample_facts(graph, relations, total=config.sample, per_relation=config.per_relation,
                               seed=config.seed, ref=ref, history_first=config.history_first,
                               on_progress=_index_progress() if progress else None)
    details = fact_details(graph, subjects, [])
    needs = frozenset().union(*(m.needs for m in measures))
    if "distractors" in needs and strategy_class(config.strategy).needs_index and details and index is None:
        index = ensure_index(graph, index_dir or default_index_dir())
    gather = Gatherer(graph, config, needs, ref, available, index, None, ctx.label_rule, ctx.end)
    rows: list[SetRow] = []
    for batch in chunks(details, config.batch_facts):
        ends = fact_ends(graph, batch)  # what the report shows of each fact, beside its items
        for p in gather.batch(batch):
            e: Mapping[str, Any] = ends.get(str(p.row["key"]), {})
            rows.append({"key": str(p.row["key"]), "s": p.row["s"], "pid": p.row["pid"],
                         "o": p.row["o"], "reason": p.reason, "fact": _canon(fact_json(p.fact)),
                         **_ends_row(e)})
    header: SetHeader = {
        "schema": SET_SCHEMA, "created": now(), "kgprobe": code_version()["kgprobe"],
        "config": {k: getattr(config, k) for k in _SET_FIELDS}, "relations": relations,
        "templates": {p: available[p] for p in relations}, "reference_date": ref,
        "relation_labels": pr.relation_labels(graph, relations),
        "graph_snapshot": pr.graph_counts(graph), "facts": len(rows),
        "scoring": measure_versions(config),
    }
    header["content_hash"] = content_hash(header, rows)
    _write(Path(path), _columns(rows, ("key", "s", "pid", "o", "reason", "fact", *_ENDS)), _SET_META, header)
    return header


# --- scoring without a graph ----------------------------------------------------------------------


@dataclass
class ProbeSet:
    """A probe set as read back: its header and rows (content hash checked)."""

    path: Path
    header: SetHeader
    rows: list[SetRow]

    @property
    def content_hash(self) -> str:
        return str(self.header["content_hash"])

    def config(self, model: str, dtype: str, shard: tuple[int, int] | None) -> ProbeConfig:
        c = dict(self.header["config"])
        c["relations"], c["measures"] = tuple(c["relations"]), tuple(c["measures"])
        return ProbeConfig(model=model, dtype=dtype, shard=shard, force=True, **c)


#: Probe sets shipped inside the package (kgprobe/data), by the name ``--set`` takes
SHIPPED = {"demo": "demo-set.parquet"}


def set_path(name: str | os.PathLike[str]) -> Path:
    """The file of a set: ``name`` itself where it exists, else a shipped set's file
    (:data:`SHIPPED`), else ``name`` (refused by the reader as no such file)."""
    p = Path(name)
    if not p.exists() and str(name) in SHIPPED:
        return Path(__file__).resolve().parents[1] / "data" / SHIPPED[str(name)]
    return p


def read_set(path: str | os.PathLike[str]) -> ProbeSet:
    """The probe set at ``path`` (or the shipped set of that name, :func:`set_path`); refused
    in one line if its layout is not this kgprobe's or its rows do not match its content hash."""
    p = set_path(path)
    header, rows = _read(p, _SET_META, SET_SCHEMA, "probe set")
    return ProbeSet(p, cast(SetHeader, header), cast(list[SetRow], rows))


@dataclass
class SetScores:
    """A probe set scored, in memory: the run's summary, the scores file's header (the
    ProbeRun's record under ``run``, its end under ``final``) and rows (per fact and measure:
    key, s, pid, o, measure key, score, and ``props``, the FACT properties as JSON)."""

    summary: ProbeSummary
    header: ScoresHeader
    rows: list[ScoreRow]


_SCORE_COLUMNS = ("key", "s", "pid", "o", "measure", "score", "props")


def score_set(
    pset: ProbeSet, runner: Runner, out_dir: str | os.PathLike[str] | None, *, model: str,
    fingerprint: str, dtype: str = "float32", model_info: ModelInfo | None = None,
    shard: tuple[int, int] | None = None, progress: bool = True,
    on_fact: OnFact | None = None,
) -> SetScores:
    """Score ``pset`` with ``runner`` (the same measures and loop as ``probe``): per fact and
    measure its FACT properties, with the ProbeRun's record; written to
    ``out_dir/scores.parquet`` unless ``out_dir`` is None (a training loop keeps them in
    memory). No graph is opened. ``shard``: only shard K of N of the set's facts."""
    from kgprobe.probing.run import run_record, run_setup

    config = pset.config(model, dtype, shard)
    config.validate()
    want = measure_versions(config)
    if pset.header.get("scoring") != want:
        raise ConfigError(
            f"probe set {pset.path} was exported for scoring code {_canon(pset.header.get('scoring'))}; "
            f"this kgprobe's is {_canon(want)}, whose values may differ: export the set again")
    measures = config.measure_objects()
    for m in measures:
        why = m.available()
        if why:
            raise ConfigError(why)
    ctx = run_context(config, str((model_info.get("name") if model_info else None) or model))
    mkey = model_key(model, dtype)
    templates = {p: [tuple(t) for t in ts] for p, ts in pset.header["templates"].items()}
    relations = list(pset.header["relations"])
    setup = run_setup(config, ctx, measures, mkey, fingerprint, templates, relations)  # type: ignore[arg-type]
    keys = set(pr.shard_keys([r["key"] for r in pset.rows], shard))
    rows = [r for r in pset.rows if r["key"] in keys]
    plan = LoopPlan(uuid.uuid4().hex, measures, setup.props, setup.cfg_by, config.threshold,
                    True, config.batch_facts, config.write_facts, 0)
    summary = ProbeSummary(plan.run_id, model, mkey, [setup.props[m.name].score for m in measures],
                           relations, planned=len(rows))
    summary.fact_keys = [r["key"] for r in rows]
    summary.summary_measure = setup.props[measures[0].name].measure_key
    record = replace(run_record(config, ctx, measures, setup, summary, rows, runner, model_info,
                                templates, int(pset.header["reference_date"]),  # type: ignore[arg-type]
                                pset.header["graph_snapshot"]), probe_set=pset.content_hash)

    def planned() -> Iterator[tuple[Sequence[Any], list[Planned]]]:
        for batch in chunks(rows, config.batch_facts):
            yield batch, [Planned({"key": r["key"], "s": r["s"], "pid": r["pid"], "o": r["o"],
                                   "cfgs": [None] * len(measures)},
                                  fact_input(json.loads(r["fact"])), r["reason"]) for r in batch]

    written: list[FactScores] = []
    outcome = LoopOutcome()

    def write(batch_rows: list[FactScores], ok: int) -> None:
        written.extend(batch_rows)
        outcome.scored += ok
        outcome.unscorable += len(batch_rows) - ok

    started = time.monotonic()
    tok = getattr(runner, "tok", None)
    cuts_before = int(getattr(tok, "cut_count", 0))
    score_batches(runner, plan, planned(), len(rows), ctx, outcome, write, progress=progress,
                  on_fact=on_fact)
    summary.scored, summary.unscorable = outcome.scored, outcome.unscorable
    summary.by_relation = outcome.by_relation()
    summary.seconds = round(time.monotonic() - started, 2)
    summary.status = "finished"
    summary.unscorable_reasons = dict(outcome.reasons.most_common())
    summary.contexts_cut = int(getattr(tok, "cut_count", 0)) - cuts_before
    final: RunFinal = {"status": "finished", "finished": now(), "seconds": summary.seconds,
             "unscorable_reasons": json.dumps(summary.unscorable_reasons),
             "contexts_cut": summary.contexts_cut}

    facts = {r["key"]: r for r in rows}
    out_rows: list[ScoreRow] = []
    for w in written:
        f = facts[w["key"]]
        for m in measures:
            sp = setup.props[m.name]
            names = {sp.score, sp.known, sp.run, sp.cfg, sp.stale, *(sp.extra(e) for e in m.extras)}
            mine = {k: v for k, v in w["props"].items() if k in names}
            out_rows.append({"key": w["key"], "s": f["s"], "pid": f["pid"], "o": f["o"],
                             "measure": setup.mkeys[m.name],
                             "score": None if mine.get(sp.score) is None else float(mine[sp.score]),
                             "props": _canon(mine)})
    header: ScoresHeader = {
        "schema": SCORES_SCHEMA, "probe_set": pset.content_hash,
        "graph_snapshot": pset.header["graph_snapshot"], "run_id": plan.run_id,
        "model_key": mkey, "fingerprint": fingerprint, "run": record.props(), "final": final,
    }
    header["content_hash"] = content_hash(header, out_rows)
    scored = SetScores(summary, header, out_rows)
    if out_dir is not None:
        write_scores(out_dir, scored)
    return scored


def write_scores(out_dir: str | os.PathLike[str], scored: SetScores) -> Path:
    """``out_dir/scores.parquet``, written whole or not at all."""
    path = Path(out_dir) / "scores.parquet"
    _write(path, _columns(scored.rows, _SCORE_COLUMNS), _SCORES_META, scored.header)
    return path


def read_scores(path: str | os.PathLike[str]) -> tuple[ScoresHeader, list[ScoreRow]]:
    """Header and rows of a scores file (schema and content hash checked)."""
    header, rows = _read(path, _SCORES_META, SCORES_SCHEMA, "scores file")
    return cast(ScoresHeader, header), cast(list[ScoreRow], rows)


def probe_with_set(
    pset: str | os.PathLike[str] | ProbeSet, model: str | Any,
    output_path: str | os.PathLike[str] | None, *, tokenizer: Any = None,
    model_name: str | None = None, dtype: str = "float32", threads: int = 1,
    shard: tuple[int, int] | None = None, cache: bool = True, progress: bool = True,
    on_fact: OnFact | None = None,
) -> SetScores:
    """``kgprobe probe --set``: load ``model`` as ``probe`` does and :func:`score_set` (to
    ``output_path/scores.parquet``, or in memory when None). ``pset``: a set, its path or a
    shipped set's name (:func:`read_set`). Needs no graph server, no Java and no network (a
    local model)."""
    from kgprobe.outputs import check_output_dir
    from kgprobe.probing.cache import ScoreCache
    from kgprobe.probing.config import check_model_name
    from kgprobe.probing.engine import Engine, resolve_model, select_model
    from kgprobe.probing.models import load_model
    from kgprobe.probing.score import default_score_cache

    pset = pset if isinstance(pset, ProbeSet) else read_set(pset)
    if output_path is not None:
        check_output_dir(output_path, "--output-path")
    given = None
    model = select_model(model)  # a served model (--backend, a URL) becomes its backend object
    if not isinstance(model, str):
        given, model, dtype = resolve_model(model, tokenizer, name=model_name)
    else:
        check_model_name(model)
    lm = given if given is not None else load_model(model, dtype=dtype, threads=threads)
    score_cache = ScoreCache(default_score_cache()) if cache else None
    try:
        engine = Engine(lm, cache=score_cache)
        return score_set(pset, engine, output_path, model=str(model), fingerprint=engine.fingerprint,
                         dtype=dtype, model_info=engine.model_info(), shard=shard, progress=progress,
                         on_fact=on_fact)
    finally:
        if score_cache is not None:
            score_cache.close()


# --- write back ---------------------------------------------------------------------------------


def import_scores(graph: Graph, paths: Sequence[str | os.PathLike[str]],
                  write_facts: int = 256) -> list[Imported]:
    """Write each scores file's FACT properties onto the graph and record its ProbeRun, as if
    the probe had run here. Every file is checked before anything is written: its content
    hash, its probe set's graph snapshot against this graph's, each fact's subject, relation
    and object, and the model key's weights. A file whose run is already in the graph was
    imported before: nothing is written again (idempotent)."""
    from kgprobe.probing.run import claim_model_key

    files = [(Path(p), *read_scores(p)) for p in paths]
    snapshot = pr.graph_counts(graph)
    for p, header, rows in files:
        if header["graph_snapshot"] != snapshot:
            raise ConfigError(
                f"scores file {p} was scored on a probe set of another graph (snapshot "
                f"{_canon(header['graph_snapshot'])}, this graph {_canon(snapshot)}); refusing it")
        subjects = {r["key"]: r["s"] for r in rows}
        found = {}
        for batch in chunks(sorted(subjects), 500):
            found.update({d["key"]: d for d in pr.fact_details(graph, batch, subjects, [])})
        for r in rows:
            d = found.get(r["key"])
            if d is None or (d["s"], d["pid"], d["o"]) != (r["s"], r["pid"], r["o"]):
                raise ConfigError(f"scores file {p}: fact {r['key']} is not in this graph as "
                                  f"({r['s']}, {r['pid']}, {r['o']}); refusing the file")
        claim_model_key(graph, header["model_key"], header["fingerprint"], "refuse")
    out: list[Imported] = []
    for p, header, rows in files:
        run_id = header["run_id"]
        before = pr.get_run(graph, run_id)
        if before is not None and before.get("status") == "finished":
            out.append({"file": str(p), "run_id": run_id, "status": "already imported", "facts": 0})
            continue
        by_key: dict[FactKey, FactScores] = {}
        ok_keys: set[FactKey] = set()  # facts with a score under some measure
        for r in rows:
            fact = by_key.setdefault(r["key"], {"key": r["key"], "s": r["s"], "props": {}})
            fact["props"].update(json.loads(r["props"]))
            if r["score"] is not None:
                ok_keys.add(r["key"])
        if before is None:
            pr.create_run(graph, run_id, header["run"])
        else:  # an import stopped half-way: written again whole, counted from zero
            pr.update_run(graph, run_id, {"facts_scored": 0, "facts_unscorable": 0})
        try:
            facts = list(by_key.values())
            for batch in chunks(facts, write_facts):
                ok = sum(1 for f in batch if f["key"] in ok_keys)
                pr.write_scores(graph, run_id, list(batch), scored=ok, unscorable=len(batch) - ok, now=now())
            pr.update_run(graph, run_id, dict(header["final"]))
        finally:
            pr.release_run(run_id)
        out.append({"file": str(p), "run_id": run_id, "status": "imported", "facts": len(by_key)})
    return out
