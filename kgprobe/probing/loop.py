"""The probe loop: gather what the measures need for a batch of facts, score the batch in one
engine run, write its values back. Nothing else: which facts, under which names and hashes, is
the run's setup (:mod:`.run`); reading scores back is :mod:`.scores`.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast

from kgprobe.errors import ConfigError
from kgprobe.graph import distractors as gd
from kgprobe.graph import probe_runs as pr
from kgprobe.graph.templates import probe_templates
from kgprobe.probing.config import ProbeConfig, RelationSummary, Runner
from kgprobe.probing.distractors import find_distractors, prefetch
from kgprobe.probing.measures.registry import (
    FactInput,
    MeasureValue,
    OnFact,
    Replay,
    checked_values,
    guarded,
)
from kgprobe.probing.pipeline import Ahead, Behind
from kgprobe.probing.verbalize import entity_facts
from kgprobe.progress import Progress
from kgprobe.provenance import now
from kgprobe.runtime import rare_collections
from kgprobe.types import PID, QID, FactKey, Properties

if TYPE_CHECKING:  # pragma: no cover
    from kgprobe.graph.client import Graph
    from kgprobe.probing.semantic import SemanticIndex


#: The verbalizer's facts of an entity, from its row (the same entities recur fact after fact).
_entity_facts = functools.lru_cache(maxsize=1 << 16)(entity_facts)

#: Batches gathered at once (each one's reads in order; up to the pipeline depth). One: a
#: second gather thread gave nothing measurable at 1M statements (the process is bound by its
#: own Python there, docs/benchmarks.md); `benchmarks/bench_probe.py --gather-threads` measures it.
GATHER_THREADS = 1


class FactRef(TypedDict):
    """A fact: its key (the statement id), subject, relation and object."""

    key: FactKey
    s: QID
    pid: PID
    o: QID


class PlannedFact(FactRef):
    """A fact as the loop plans it, with, per measure of the run, the configuration hash
    stored on it (None: not scored under that measure yet)."""

    cfgs: list[str | None]


class FactDetail(PlannedFact):
    """A row of ``probe_runs.FACT_DETAILS``: a planned fact with its ends' labels, aliases and
    classes, which the gather reads (:func:`fact_details`)."""

    s_label: str | None
    s_aliases: list[str] | None
    s_types: NotRequired[list[str] | None]
    o_label: str | None
    o_aliases: list[str] | None
    o_types: NotRequired[list[str] | None]


class FactScores(TypedDict):
    """One fact's values as the loop writes them (``probe_runs.write_scores``): its key, its
    subject's QID (the write's anchor) and the FACT properties it sets."""

    key: FactKey
    s: QID
    props: Properties  # score property names are per model and measure


def fact_details(graph: Graph, subjects: Mapping[FactKey, QID],
                 cfg_props: Sequence[str]) -> list[FactDetail]:
    """The :class:`FactDetail` of every fact of ``subjects`` (key -> subject), in its order,
    read 500 keys per round trip."""
    out: list[FactDetail] = []
    for batch in chunks(list(subjects), 500):
        out.extend(cast(list[FactDetail], pr.fact_details(graph, batch, subjects, cfg_props)))
    return out


@dataclass
class Planned:
    row: PlannedFact
    fact: Any  # FactInput
    reason: str | None = None


class Gatherer:
    """Fetches what the run's measures need for a whole batch of facts, each need in one
    UNWIND round trip anchored on the facts' entities (and once per relation for what a
    relation shares): the batch's fact contexts serve the distractor strategy, the past values
    and the other correct objects; the temporal candidates and the first Ω(f) checks of the
    semantic search are read for the batch too (:func:`~kgprobe.probing.distractors.prefetch`).
    The values are those of the per-fact reads (tests/graph/test_probe_batched_gather.py)."""

    def __init__(self, graph: Graph, cfg: ProbeConfig, needs: frozenset[str], ref: int,
                 templates: dict[str, list[tuple[str, str]]], index: SemanticIndex | None,
                 engine: Any, rule: Any, end: Any = None) -> None:
        self.graph, self.cfg, self.needs, self.ref = graph, cfg, needs, ref
        self.end = end
        self.templates, self.index, self.engine, self.rule = templates, index, engine, rule
        self._subjects: dict[str, list[str]] = {}
        self._all_templates: dict[str, tuple[str, ...]] | None = None
        self._demos: tuple[Any, ...] | None = None
        #: the run's entity terms: Ω(f) checks and labels of entities met before cost nothing
        self.terms = gd.EntityTerms(graph)

    def _ent(self, row: Mapping[str, Any] | None, qid: str, pid: str | None = None) -> Any:
        """The Entity of ``qid`` from its ``label``, ``aliases`` and ``types`` (an entity
        terms row as the graph returns it; None or missing keys: nothing known)."""
        row = row or {}
        facts = (None if self.cfg.verbalizer == "raw" else  # pid: the relation it is subject of
                 _entity_facts(row.get("label") or "", tuple(row.get("aliases") or ()),
                               tuple(row.get("types") or ()), pid))
        return self.rule.entity(row.get("label"), row.get("aliases"), qid, facts)

    def batch(self, rows: Sequence[FactDetail]) -> list[Planned]:
        facts = [(row["s"], row["pid"], row["o"]) for row in rows]
        wants_ctx = bool(self.needs & {"distractors", "past", "other_objects"})
        contexts = gd.fact_contexts(self.graph, facts) if wants_ctx else {}
        known = [k for k in dict.fromkeys(facts) if k in contexts]
        fetched = dict(zip(known, prefetch(
            self.graph, [contexts[k] for k in known],
            strategy=self.cfg.strategy if "distractors" in self.needs else "", n=self.cfg.n,
            at=self.ref, index=self.index, temporal="past" in self.needs, terms=self.terms,
            seed=self.cfg.seed,
        ), strict=True)) if wants_ctx else {}
        orels = (pr.object_relations_many(self.graph, [row["o"] for row in rows])
                 if "object_relations" in self.needs else {})
        pre = []
        for row, fact_key in zip(rows, facts, strict=True):
            ds: list[str] = []
            past: list[str] = []
            others: list[str] = []
            why: str | None = None
            err: str | None = None
            subjects: list[str] = []
            orel: list[str] = []
            try:
                if wants_ctx:
                    ctx = contexts.get(fact_key)
                    if ctx is None:  # not in the graph, or not ids: the per-fact read says why
                        ctx = gd.fact_context(self.graph, *fact_key)
                    pf = fetched.get(fact_key)
                    others = [q for q in ctx.true_objects if q != row["o"]]
                    if "distractors" in self.needs:
                        found = find_distractors(
                            self.graph, row["s"], row["pid"], row["o"], strategy=self.cfg.strategy,
                            n=self.cfg.n, seed=self.cfg.seed, at=self.ref, index=self.index,
                            engine=self.engine, context=ctx, end=self.end, prefetched=pf,
                        )
                        ds = [d.qid for d in found.distractors][: self.cfg.n]
                        why = None if ds else (found.reason or "no distractor found")
                    if "past" in self.needs:
                        temporal = (pf.temporal if pf is not None and pf.temporal is not None
                                    else gd.temporal_candidates(self.graph, ctx, self.ref))
                        past = [c.qid for c in temporal][: self.cfg.max_past_values]
                if "other_subjects" in self.needs:
                    subjects = [q for q in self._relation_subjects(row["pid"]) if q != row["s"]]
                if "object_relations" in self.needs:
                    orel = [p for p in orels[row["o"]] if p != row["pid"]]
            except ConfigError as exc:
                why = err = str(exc)
            pre.append((row, ds, past, others, subjects, orel, why, err))
        labels = self.terms.get([q for _, ds, past, others, subjects, _, _, _ in pre
                                 for q in (*ds, *past, *others, *subjects)])
        all_t = self._relation_templates() if "object_relations" in self.needs else {}
        out = []
        for row, ds, past, others, subjects, orel, why, err in pre:
            fact = FactInput(
                key=row["key"], pid=row["pid"],
                subject=self._ent({"label": row["s_label"], "aliases": row["s_aliases"],
                                   "types": row.get("s_types")}, row["s"], row["pid"]),
                object=self._ent({"label": row["o_label"], "aliases": row["o_aliases"],
                                  "types": row.get("o_types")}, row["o"]),
                templates=tuple(text for _, text in self.templates[row["pid"]]),
                distractors=tuple(self._ent(labels.get(q), q) for q in ds),
                past=tuple(self._ent(labels.get(q), q) for q in past),
                other_objects=tuple(self._ent(labels.get(q), q) for q in others),
                other_subjects=tuple(self._ent(labels.get(q), q, row["pid"]) for q in subjects),
                object_relation_templates=tuple(all_t[p] for p in orel if all_t.get(p)),
                demonstrations=self._demonstrations() if "demonstrations" in self.needs else (),
                distractor_reason=why,
            )
            out.append(Planned(row, fact, err))
        return out

    def _demonstrations(self) -> tuple[Any, ...]:
        """The run's one demonstration pool: a seeded sample of facts of every relation with
        templates (the same for every fact and batch, so values do not depend on batching)."""
        if self._demos is None:
            pool = []
            for pid in sorted(self.templates, key=lambda p: int(p[1:])):
                for r in pr.relation_facts(self.graph, pid, self.cfg.seed):
                    pool.append(FactInput(
                        key=r["key"], pid=pid,
                        subject=self._ent({"label": r["s_label"], "aliases": r["s_aliases"],
                                           "types": r.get("s_types")}, r["s"], pid),
                        object=self._ent({"label": r["o_label"], "aliases": r["o_aliases"],
                                          "types": r.get("o_types")}, r["o"]),
                        templates=tuple(text for _, text in self.templates[pid])))
            self._demos = tuple(pool)
        return self._demos

    def _relation_subjects(self, pid: str) -> list[str]:
        if pid not in self._subjects:
            self._subjects[pid] = pr.relation_subjects(self.graph, pid, self.cfg.seed, limit=50)
        return self._subjects[pid]

    def _relation_templates(self) -> dict[str, tuple[str, ...]]:
        if self._all_templates is None:
            acc: dict[str, list[str]] = {}
            for t in probe_templates(self.graph):
                acc.setdefault(t.pid, []).append(t.text)
            self._all_templates = {p: tuple(v) for p, v in acc.items()}
        return self._all_templates


class BatchScoring:
    """A batch's scoring, in three steps so that a probe on a GPU keeps the device fed: every
    measure's first-round requests (built at once, deduplicated), their launch (``launch``: ONE
    engine run, or :meth:`~kgprobe.probing.engine.Engine.submit` when launched ahead), and the
    values (``values``: waits for the results, then the measures' later rounds run). What a
    measure returns is checked against the contract (:func:`checked_values`) before anything
    of the batch is written, and a plug-in's own exception is one line naming it."""

    def __init__(self, measures: Sequence[Any], planned: list[Planned], ctx: Any) -> None:
        self.measures, self.ctx = measures, ctx
        self.facts = [p.fact for p in planned]
        wanted: list[Any] = []
        for m in measures:
            wanted.extend(guarded(m, self.facts, functools.partial(m.requests, self.facts, ctx)))
        self.unique = list(dict.fromkeys(wanted))
        self._read: Callable[[], Sequence[Any]] | None = None

    def launch(self, runner: Runner, ahead: bool = False) -> None:
        """The batch's one engine run: submitted (read in ``values``) when ``ahead``, else
        run now."""
        if not self.unique:
            return
        if ahead:
            self._read = cast(Any, runner).submit(self.unique).result
        else:
            got = runner.run(self.unique)
            self._read = lambda: got

    def values(self, runner: Runner) -> list[list[MeasureValue]]:
        results = dict(zip(self.unique, self._read(), strict=True)) if self._read else {}
        replay = Replay(runner, results)
        facts, ctx = self.facts, self.ctx
        return [checked_values(m, facts, guarded(m, facts, functools.partial(m.values, facts, ctx, replay)))
                for m in self.measures]


def launches_ahead(runner: Runner) -> bool:
    """Whether the loop launches batch k+1 before it writes batch k: where the runner's
    launches run on a device while the host goes on (``Engine.launches_ahead``, CUDA) and the
    runner has ``submit`` of its own. A wrapper that forwards what it does not define (e.g. a
    ``run`` that records) is called through its ``run``, as before."""
    own = "submit" in getattr(runner, "__dict__", {}) or any(
        "submit" in vars(k) for k in type(runner).__mro__)
    return own and bool(getattr(runner, "launches_ahead", False))


@dataclass
class LoopPlan:
    """What the run's setup hands the loop: the run, its measures, where each measure's values
    go (``props``) and the configuration hash each writes per relation (``cfg_by``)."""

    run_id: str
    measures: list[Any]
    props: dict[str, pr.ScoreProps]
    cfg_by: dict[str, dict[str, str]]
    threshold: float
    force: bool
    batch_facts: int  # facts per gather and engine run
    write_facts: int = 256  # facts per write transaction
    pipeline: int = 2  # batches gathered ahead, writes waiting behind; 0: all on one thread

    def stale(self, d: PlannedFact) -> list[Any]:
        """The measures a fact still needs: those whose stored configuration hash differs
        (all of them with ``force``)."""
        return [m for m, c in zip(self.measures, d["cfgs"], strict=True)
                if self.force or c != self.cfg_by[m.name][d["pid"]]]


@dataclass
class LoopOutcome:
    """Counters of the facts the loop wrote (committed), for the run's summary."""

    scored: int = 0
    unscorable: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    #: per relation, the first measure's score of each fact it scored (None: no score), in
    #: scoring order: what ``probe`` prints at its end (:meth:`by_relation`)
    first_scores: dict[str, list[float | None]] = field(default_factory=dict)

    def by_relation(self) -> list[RelationSummary]:
        """Per relation (numeric PID order): facts the first measure scored, their mean score,
        and facts it could not score."""
        out: list[RelationSummary] = []
        for pid in sorted(self.first_scores, key=lambda p: int(p[1:]) if p[1:].isdigit() else 0):
            got = [s for s in self.first_scores[pid] if s is not None]
            out.append({"relation": pid, "n": len(got),
                        "mean": sum(got) / len(got) if got else None,
                        "unscorable": len(self.first_scores[pid]) - len(got)})
        return out


def score_and_write(
    graph: Graph, runner: Runner, plan: LoopPlan, gather: Gatherer, todo: Sequence[FactDetail],
    ctx: Any, outcome: LoopOutcome, *, progress: bool = True,
    on_fact: OnFact | None = None,
) -> LoopOutcome:
    """gather -> score -> write. Batches of ``plan.batch_facts`` facts are gathered ahead of the
    scoring on a thread of their own (``plan.pipeline`` at most; ApprOpt's gather runs the
    engine, so it stays on this thread) and their values written behind it, ``plan.write_facts``
    facts per transaction together with the run's counters, so a killed run loses nothing
    written and ``outcome`` counts what was. An error on either thread stops the loop here."""
    ahead = Ahead(lambda b: (b, gather.batch(b)), chunks(todo, plan.batch_facts),
                  0 if gather.engine is not None else plan.pipeline, GATHER_THREADS)
    behind = Behind(plan.pipeline)

    def write(rows: list[FactScores], ok: int) -> None:
        def job() -> None:
            pr.write_scores(graph, plan.run_id, rows, scored=ok, unscorable=len(rows) - ok, now=now())
            outcome.scored += ok
            outcome.unscorable += len(rows) - ok

        behind.submit(job)

    try:
        # a gather that runs the engine (ApprOpt) runs between a batch's launch and its
        # later rounds if batches are launched ahead: then they are not
        score_batches(runner, plan, ((b, p) for b, p in ahead), len(todo), ctx, outcome, write,
                      progress=progress, on_fact=on_fact,
                      launch_ahead=None if gather.engine is None else False)
        behind.finish()
    except BaseException:
        # stop reading ahead; drop the writes still waiting (their facts are scored again by
        # the next run) and let the one under way commit or roll back whole
        ahead.close()
        behind.abort()
        raise
    return outcome


def score_batches(
    runner: Runner, plan: LoopPlan, batches: Iterable[tuple[Sequence[Any], list[Planned]]],
    total: int, ctx: Any, outcome: LoopOutcome,
    write: Callable[[list[FactScores], int], None], *, progress: bool = True,
    on_fact: OnFact | None = None, launch_ahead: bool | None = None,
) -> None:
    """score -> write, for batches already gathered: from the graph (:func:`score_and_write`)
    or from a probe set's file (:mod:`kgprobe.probing.probe_set`). ``write(rows, scored)``
    takes ``plan.write_facts`` facts' ``{key, s, props}`` rows at a time and the number of them
    that got a value; the reasons of the others are counted in ``outcome``. ``launch_ahead``:
    launch batch k+1 before writing batch k (None: where the runner launches ahead).

    Python's cyclic collector runs rarely meanwhile (:func:`kgprobe.runtime.rare_collections`):
    a batch's requests, results and item plans are tens of thousands of objects, and at the
    default threshold its full passes took 40 % of the loop's own CPU (docs/benchmarks.md)."""
    with rare_collections():
        _score_batches(runner, plan, batches, total, ctx, outcome, write, progress=progress,
                       on_fact=on_fact, launch_ahead=launch_ahead)


def _score_batches(
    runner: Runner, plan: LoopPlan, batches: Iterable[tuple[Sequence[Any], list[Planned]]],
    total: int, ctx: Any, outcome: LoopOutcome,
    write: Callable[[list[FactScores], int], None], *, progress: bool,
    on_fact: OnFact | None, launch_ahead: bool | None,
) -> None:
    pending: list[FactScores] = []
    pending_ok = 0

    def write_pending() -> None:
        nonlocal pending, pending_ok
        rows, ok = pending, pending_ok
        pending, pending_ok = [], 0
        write(rows, ok)

    def emit(batch: Sequence[Any], planned: list[Planned], wanted: dict[FactKey, set[str]],
             active: list[Any], per_measure: list[list[MeasureValue]]) -> None:
        """A batch's values: FACT properties, the run's counters, the writes."""
        nonlocal pending_ok
        for i, p in enumerate(planned):
            fact_props: Properties = {}
            got_any = False
            why = p.reason
            for m, values in zip(active, per_measure, strict=True):
                if m.name not in wanted[p.row["key"]]:
                    continue
                v = values[i] if p.reason is None else MeasureValue.unscored(p.reason)
                fact_props.update(_fact_props(plan.props[m.name], m, v, plan.run_id,
                                              plan.cfg_by[m.name][p.row["pid"]], plan.threshold))
                if v.score is not None:
                    got_any = True
                elif why is None:
                    why = f"{m.name}: {v.reason or 'no value'}"
            first = plan.measures[0] if plan.measures else None
            if first is not None and first.name in wanted[p.row["key"]] and first in active:
                score = per_measure[active.index(first)][i].score if p.reason is None else None
                outcome.first_scores.setdefault(p.row["pid"], []).append(
                    None if score is None else float(score))
            if on_fact is not None:
                on_fact(p, {m.name: (values[i] if p.reason is None
                                     else MeasureValue.unscored(p.reason))
                            for m, values in zip(active, per_measure, strict=True)})
            if got_any:
                pending_ok += 1
            else:
                outcome.reasons[(why or "no value").split(";")[0][:120]] += 1
            pending.append({"key": p.row["key"], "s": p.row["s"], "props": fact_props})
        if len(pending) >= plan.write_facts:
            write_pending()
        bar.advance(len(batch))

    # On a GPU (``launches_ahead``) batch k+1's requests are built while batch k is scored,
    # and batch k+1 is launched before batch k's values are read and written: the device
    # scores one batch while the host reads and writes the other, and takes batch k+1 right
    # after batch k. Where a measure of batch k may have a later round (``later_rounds``),
    # batch k's values are read first, so that its later rounds run before batch k+1 is
    # launched. Either way the engine (and its cache) compute the same requests as one batch
    # after the other, and every value is the same.
    ahead = launches_ahead(runner) if launch_ahead is None else (
        launch_ahead and hasattr(runner, "submit"))
    prev: tuple[Sequence[Any], list[Planned], dict[FactKey, set[str]], list[Any],
                BatchScoring] | None = None
    with Progress("probing", total, "facts", enabled=progress) as bar:
        for batch, planned in batches:
            # a measure already stored with this configuration is not recomputed
            wanted = {p.row["key"]: {m.name for m in plan.stale(p.row)} for p in planned}
            active = [m for m in plan.measures if any(m.name in w for w in wanted.values())]
            scoring = BatchScoring(active, planned, ctx)
            if not ahead:
                scoring.launch(runner)
                emit(batch, planned, wanted, active, scoring.values(runner))
                continue
            done: list[list[MeasureValue]] | None
            if prev is not None and any(getattr(m, "later_rounds", True) for m in prev[3]):
                done = prev[4].values(runner)
                scoring.launch(runner, ahead=True)
            else:
                scoring.launch(runner, ahead=True)
                done = prev[4].values(runner) if prev is not None else None
            if prev is not None and done is not None:
                emit(*prev[:4], done)
            prev = (batch, planned, wanted, active, scoring)
        if prev is not None:
            emit(*prev[:4], prev[4].values(runner))
        if pending:
            write_pending()


def _fact_props(sp: pr.ScoreProps, m: Any, v: MeasureValue, run_id: str, cfg_hash: str,
                threshold: float) -> Properties:
    """The FACT properties of one measure's values. A fact the measure could not score keeps
    no configuration hash, so the next run tries it again (the graph may have gained what it
    lacked)."""
    score = v.score
    known = v.stored.get("known")
    if known is None and score is not None and m.has_known:
        known = score >= threshold
    out: Properties = {
        sp.score: score, sp.known: None if score is None else known, sp.run: run_id,
        sp.cfg: None if score is None else cfg_hash,
    }
    if "stale" in v.stored or m.uses_distractors:
        out[sp.stale] = v.stored.get("stale")
    for e in m.extras:
        out[sp.extra(e)] = v.stored.get(e)
    return out


def chunks(rows: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [rows[i : i + size] for i in range(0, len(rows), size)]
