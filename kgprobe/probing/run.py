"""Probe runs end to end: choose facts, verbalize, find distractors, score, write back.

``run_probe`` is the engine room: it takes an open graph and a scoring runner (an
:class:`~kgprobe.probing.engine.Engine`, or anything with its ``run``), so tests and scripts
can hand it a tiny model. ``probe`` is what the CLI and ``kgprobe.probe(...)`` call: it connects,
loads the model, opens the score cache and the semantic index, then calls ``run_probe``.

Resumability: scores are written batch by batch, each batch in one transaction with the run's
counters, and every scored FACT carries the hash of the configuration that scored it. A second
run of the same configuration skips those facts, so a killed run loses nothing written and the
same command finishes the rest. Cypher lives in :mod:`kgprobe.graph.probe_runs`; model calls
in the scoring engine; the measure arithmetic in :mod:`kgprobe.probing.measures`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from kgprobe.errors import ConfigError, GraphUnavailable, GraphWiped
from kgprobe.graph import probe_runs as pr
from kgprobe.graph.client import connect
from kgprobe.graph.distractors import date_sort_key
from kgprobe.graph.templates import probe_templates
from kgprobe.probing.backends.base import ModelInfo
from kgprobe.probing.cache import ScoreCache
from kgprobe.probing.config import (
    DEFAULT_MEASURES,
    DEFAULT_STRATEGY,
    DEFAULT_THRESHOLD,
    USABLE_STYLES,
    ProbeConfig,
    ProbeSummary,
    Runner,
    check_model_name,
    model_key,
    run_context,
)
from kgprobe.probing.distractors import DEFAULT_N, default_index_dir
from kgprobe.probing.engine import Engine, resolve_model, select_model
from kgprobe.probing.environment import run_environment
from kgprobe.probing.loop import (
    FactDetail,
    FactRef,
    Gatherer,
    LoopOutcome,
    LoopPlan,
    fact_details,
    score_and_write,
)
from kgprobe.probing.measures.catalog import run_wide_settings
from kgprobe.probing.models import LOAD_DEFAULTS, load_model
from kgprobe.probing.score import default_score_cache
from kgprobe.probing.semantic import IndexSettings, ensure_index, kept_settings
from kgprobe.probing.strategies import strategy_class
from kgprobe.provenance import (
    MeasureSpec,
    RunProvenance,
    code_version,
    config_hash,
    library_versions,
    now,
)
from kgprobe.records import is_pid
from kgprobe.types import PID, ConfigHash, MeasureKey, MeasureName, Properties

if TYPE_CHECKING:  # pragma: no cover
    from kgprobe.config import Settings
    from kgprobe.graph.client import Graph
    from kgprobe.probing.measures.registry import OnFact
    from kgprobe.probing.semantic import SemanticIndex

__all__ = ["ProbeConfig", "ProbeSummary", "choose_relations", "claim_model_key", "probe",
           "probe_relations", "run_probe"]


# --- relations and templates --------------------------------------------------------------------


def probe_relations(graph: Graph, max_templates: int | None = None) -> dict[str, list[tuple[str, str]]]:
    """Relations that have facts and at least one usable template: pid -> [(template id, text)]
    (object-last statements and questions; templates with the object inside cannot end in the
    object's label, which the distractor measure scores)."""
    with_facts = {r["pid"] for r in pr.relations_with_facts(graph)}
    out: dict[str, list[tuple[int, str, str]]] = {}
    for t in probe_templates(graph):
        if t.pid in with_facts and t.style in USABLE_STYLES:
            out.setdefault(t.pid, []).append((USABLE_STYLES.index(t.style), t.id or "", t.text))
    return {
        p: [(i, text) for _, i, text in sorted(v)[:max_templates]]
        for p, v in sorted(out.items(), key=lambda kv: int(kv[0][1:]))
    }


def choose_relations(available: dict[str, list[tuple[str, str]]], wanted: Sequence[str]) -> list[str]:
    if not available:
        raise ConfigError(
            "no relation has both facts and object-last/question templates in the graph; "
            "ingest facts and import templates first (kgprobe demo does both)"
        )
    if not wanted:
        return list(available)
    chosen = []
    for w in wanted:
        p = w.strip().upper()
        if not is_pid(p) or p not in available:
            raise ConfigError(
                f"unknown relation {w!r}; relations with facts and templates: {', '.join(available)}"
            )
        if p not in chosen:
            chosen.append(p)
    return chosen


# --- the run ------------------------------------------------------------------------------------------


def run_probe(
    graph: Graph,
    runner: Runner,
    config: ProbeConfig,
    *,
    fingerprint: str,
    model_info: ModelInfo | None = None,
    index: SemanticIndex | None = None,
    index_dir: str | Path | None = None,
    progress: bool = True,
    on_fact: OnFact | None = None,
) -> ProbeSummary:
    """Probe ``config.sample`` facts with ``runner`` and write their scores onto the graph.

    ``fingerprint`` identifies the model's weights and scoring settings (``Engine.fingerprint``);
    it is part of the configuration hash, so a different model never passes for the same one.
    ``on_fact(plan, values)`` sees every fact of the run: its plan (graph row, ``FactInput``,
    reason it could not be planned) and each measure's values by measure name, a
    ``MeasureValue`` each (read as a dict too), with the ``details`` some measures attach
    (per-fact records, kgprobe.reports.results).
    """
    config.validate()
    model_name = str((model_info.get("name") if model_info else None) or config.model)
    ctx = run_context(config, model_name)
    measures = config.measure_objects()
    for m in measures:
        why = m.available()
        if why:
            raise ConfigError(why)
    mkey = claim_model_key(graph, model_key(config.model, config.dtype), fingerprint,
                           config.on_model_mismatch)
    available = probe_relations(graph, config.max_templates)
    relations = choose_relations(available, config.relations)
    ref = date_sort_key(config.at)
    setup = run_setup(config, ctx, measures, mkey, fingerprint, available, relations)

    subjects = pr.sample_facts(graph, relations, total=config.sample, per_relation=config.per_relation,
                               seed=config.seed, ref=ref, history_first=config.history_first,
                               shard=config.shard, on_progress=_index_progress() if progress else None)
    cfg_props = [setup.props[m.name].cfg for m in measures]
    details = fact_details(graph, subjects, cfg_props)

    plan = LoopPlan(uuid.uuid4().hex, measures, setup.props, setup.cfg_by, config.threshold,
                    config.force, config.batch_facts, config.write_facts, config.pipeline)
    todo = [d for d in details if plan.stale(d)]

    run_id = plan.run_id
    summary = ProbeSummary(
        run_id, config.model, mkey, [setup.props[m.name].score for m in measures], relations,
        planned=len(details), skipped=len(details) - len(todo),
    )
    summary.fact_keys = [str(d["key"]) for d in details]
    summary.summary_measure = setup.props[measures[0].name].measure_key
    if index is None and todo and uses_index(config, measures):
        # before the record, which names the index's fitted model (an update keeps it)
        index = ensure_index(graph, index_dir or default_index_dir())
    record = run_record(config, ctx, measures, setup, summary, details, runner, model_info, available,
                        ref, pr.graph_counts(graph),
                        index_settings(config, measures, index, index_dir),
                        index.model_digest if index is not None else None)
    summary.interrupted_runs = pr.create_run(graph, run_id, record.props())
    try:
        return _probe_run(graph, runner, config, summary, plan, todo, measures, ctx, available,
                          index, progress, on_fact, ref)
    finally:
        pr.release_run(run_id)


class EndMarkerSetting(TypedDict):
    kind: str
    text: str | None


class RunSettings(TypedDict):
    """The run-wide settings every measure's configuration hash covers (:func:`run_setup`)."""

    fingerprint: str
    strategy: str
    n: int
    seed: int
    max_subject_labels: int
    max_object_labels: int
    max_past_values: int
    end_marker: EndMarkerSetting
    label_rule: str
    measure_version: int
    at: NotRequired[str]  # the reference date, where one was given


@dataclass(frozen=True)
class RunSetup:
    """What a run's configuration, model and templates decide before any fact is scored: the
    measures' property keys and names, the settings and configuration hashes. Computed from
    the graph's templates by a direct probe, from a probe set's by ``probe --set``: one
    function, so both write the same keys and hashes."""

    mkeys: dict[MeasureName, MeasureKey]
    props: dict[MeasureName, pr.ScoreProps]
    settings: RunSettings
    m_cfg: dict[MeasureName, dict[str, object]]
    cfg_by: dict[MeasureName, dict[PID, ConfigHash]]
    run_cfg: ConfigHash


def run_setup(config: ProbeConfig, ctx: Any, measures: list[Any], mkey: str, fingerprint: str,
              available: dict[str, list[tuple[str, str]]], relations: list[str]) -> RunSetup:
    """The keys and configuration hashes of a run (see :class:`RunSetup`)."""
    mkeys = {m.name: m.key(ctx) for m in measures}
    if len(set(mkeys.values())) != len(mkeys):
        raise ConfigError("two measures give the same property key")
    props = {m.name: pr.ScoreProps(mkey, k) for m, k in zip(measures, mkeys.values(), strict=True)}
    settings: RunSettings = {
        "fingerprint": fingerprint, "strategy": config.strategy, "n": config.n, "seed": config.seed,
        "max_subject_labels": config.max_subject_labels,
        "max_object_labels": config.max_object_labels, "max_past_values": config.max_past_values,
        "end_marker": {"kind": ctx.end.kind, "text": ctx.end.text}, "label_rule": config.label_rule,
        "measure_version": 2,
    }
    if config.at:
        settings["at"] = config.at
    # one configuration hash per measure and relation: a measure's hash covers every
    # parameter that changes its values, so adding a measure never rescores another
    m_cfg = {m.name: m.config(ctx) for m in measures}
    cfg_by = {
        m.name: {p: config_hash({**settings, **m_cfg[m.name], "templates": [t for _, t in available[p]]})
                 for p in relations}
        for m in measures
    }
    run_cfg = config_hash({"settings": settings, "relations": cfg_by, "measures": sorted(mkeys.values()),
                     # shards of one run must not mark each other interrupted; facts keep
                     # the unsharded configuration hashes, so the union is one run
                     **({"shard": list(config.shard)} if config.shard else {})})
    return RunSetup(mkeys, props, settings, m_cfg, cfg_by, run_cfg)


def uses_index(config: ProbeConfig, measures: list[Any]) -> bool:
    """Whether the run's distractors come from the semantic index (its strategy and measures)."""
    needs = frozenset().union(*(m.needs for m in measures))
    return "distractors" in needs and strategy_class(config.strategy).needs_index


def index_settings(config: ProbeConfig, measures: list[Any], index: SemanticIndex | None,
                   index_dir: str | Path | None) -> IndexSettings | None:
    """The settings of the semantic index a run's distractors come from (the run records them),
    None when its strategy or measures use no index: the given index's, else those
    ``ensure_index`` will keep in the index directory (the defaults where it holds none)."""
    if not uses_index(config, measures):
        return None
    if index is not None:
        return index.settings
    return kept_settings(index_dir or default_index_dir())


def run_record(config: ProbeConfig, ctx: Any, measures: list[Any], setup: RunSetup, summary: ProbeSummary,
               details: Sequence[FactRef], runner: Runner, model_info: ModelInfo | None,
               available: dict[str, list[tuple[str, str]]], ref: int,
               snapshot: dict[str, int], semantic: IndexSettings | None = None,
               semantic_model: str | None = None) -> RunProvenance:
    """The ProbeRun's record as the run starts (its provenance: results.json reads it), written
    by ``RunProvenance.props``. ``snapshot``: the graph's counts where the facts were sampled;
    ``semantic``: the settings of the semantic index its distractors come from
    (:func:`index_settings`), recorded beside the measures' parameters with ``semantic_model``,
    the index's fitted model (``SemanticIndex.model_digest``) where the run used it."""
    mkeys, relations = setup.mkeys, summary.relations
    facts_hash = config_hash(sorted(f"{d['key']}|{d['s']}|{d['pid']}|{d['o']}" for d in details))
    info: ModelInfo | None = model_info
    specs: list[MeasureSpec] = [
        {"name": m.name, "key": mkeys[m.name], "params": m.settings, "extras": list(m.extras),
         "section": m.section} for m in measures]
    version = code_version()
    return RunProvenance(
        status="running", started=now(), model=config.model, model_key=summary.model_key,
        model_fingerprint=setup.settings["fingerprint"], model_kind=info.get("kind") if info else None,
        # a served model's address (no user info, no query): which server answered
        model_base_url=info.get("base_url") if info else None,
        dtype=config.dtype,
        device=info.get("device") if info else None, measures=[m.name for m in measures],
        measure_keys=[mkeys[m.name] for m in measures],
        measure_specs=specs,
        score_properties=summary.score_properties,
        measure_params={**setup.settings, "threshold": config.threshold, "measures": setup.m_cfg,
                        **({"semantic_index": {**asdict(semantic), **(
                            {"model": semantic_model} if semantic_model else {})}} if semantic else {})},
        end_marker={"choice": config.end, "kind": ctx.end.kind, "text": ctx.end.text},
        label_rule=config.label_rule, verbalizer=config.verbalizer,
        strategy=config.strategy, n=config.n, seed=config.seed,
        threshold=config.threshold, sample=config.sample, relations=relations,
        per_relation=config.per_relation,
        history_first=config.history_first,
        shard=f"{config.shard[0]}/{config.shard[1]}" if config.shard else None,
        reference_date=ref,
        templates={p: [i for i, _ in available[p]] for p in relations},
        config_hash=setup.run_cfg, relation_config_hashes=setup.cfg_by,
        graph_snapshot=snapshot, facts_hash=facts_hash,
        code_version=version["kgprobe"], git_hash=version["git"],
        library_versions=library_versions(),
        facts_planned=summary.planned, facts_skipped=summary.skipped,
        facts_scored=0, facts_unscorable=0,
        # every setting outside the measure's configuration that can move a number or a timing
        batch_facts=config.batch_facts, max_templates=config.max_templates,
        environment=dict(run_environment(
            runner, device=info.get("device") if info else None, model_args=LOAD_DEFAULTS.model_args,
            device_requested=LOAD_DEFAULTS.device)),
    )


def _probe_run(
    graph: Graph, runner: Runner, config: ProbeConfig, summary: ProbeSummary, plan: LoopPlan,
    todo: list[FactDetail], measures: list[Any], ctx: Any, available: dict[str, list[tuple[str, str]]],
    index: SemanticIndex | None, progress: bool, on_fact: OnFact | None, ref: int,
) -> ProbeSummary:
    """The scoring half of `run_probe`, once the run is recorded (and the semantic index it
    names ensured): score, write, finish."""
    run_id = plan.run_id

    needs = frozenset().union(*(m.needs for m in measures))
    found_by = strategy_class(config.strategy)
    engine = runner if found_by.needs_model else None
    gather = Gatherer(graph, config, needs, ref, available, index, engine, ctx.label_rule, ctx.end)

    started = time.monotonic()
    tok = getattr(runner, "tok", None)
    cuts_before = int(getattr(tok, "cut_count", 0))
    outcome = LoopOutcome()
    try:
        score_and_write(graph, runner, plan, gather, todo, ctx, outcome, progress=progress,
                        on_fact=on_fact)
    except GraphUnavailable as exc:
        summary.scored, summary.unscorable = outcome.scored, outcome.unscorable
        summary.status = "interrupted"
        written = summary.scored + summary.unscorable
        if isinstance(exc, GraphWiped) or _run_gone(graph, run_id):
            # what was written went with the graph: say so, never "N facts written"
            raise GraphWiped(
                f"{exc if isinstance(exc, GraphWiped) else pr.gone(run_id)}; the {written} facts "
                f"this run had written (of {len(todo)}) went with it; load the graph again and probe anew"
            ) from exc
        raise GraphUnavailable(
            f"{exc} (probe run {run_id[:8]}: {written} of {len(todo)} facts written; run the same "
            "command again to score the rest)"
        ) from exc
    except BaseException:
        summary.scored, summary.unscorable = outcome.scored, outcome.unscorable
        summary.status = "interrupted"
        _try_update(graph, run_id, {"status": "interrupted", "finished": now()})
        raise
    summary.scored, summary.unscorable = outcome.scored, outcome.unscorable
    summary.by_relation = outcome.by_relation()
    reasons = outcome.reasons
    summary.seconds = round(time.monotonic() - started, 2)
    summary.status = "finished"
    summary.unscorable_reasons = dict(reasons.most_common())
    summary.contexts_cut = int(getattr(tok, "cut_count", 0)) - cuts_before
    pr.update_run(graph, run_id, {
        "status": "finished", "finished": now(), "seconds": summary.seconds,
        "unscorable_reasons": json.dumps(summary.unscorable_reasons),
        "contexts_cut": summary.contexts_cut,
    })
    return summary


def claim_model_key(graph: Graph, key: str, fingerprint: str, on_mismatch: str = "suffix") -> str:
    """The model key a run writes under. A key belongs to one model's weights (issue 10 #11),
    claimed atomically on the server (``probe_runs.claim_model_key``, issue 38 #5): when it
    belongs to other weights the run refuses (``refuse``) or writes under ``<key>_<first 8 hex
    of the fingerprint>`` (``suffix``, the default), so a different file with the same name
    never overwrites the scores of another model, even when both are probed at once."""
    owner = pr.claim_model_key(graph, key, fingerprint)
    if owner == fingerprint:
        return key
    if on_mismatch == "refuse":
        raise ConfigError(
            f"model key {key} holds scores of other weights (fingerprint {owner[:12]}…, "
            f"this model {fingerprint[:12]}…); rename the model file or let kgprobe suffix the key"
        )
    alt = pr.check_part(f"{key[: pr.MAX_PART - 9]}_{pr.key_part(fingerprint)[:8]}")
    if pr.claim_model_key(graph, alt, fingerprint) != fingerprint:
        raise ConfigError(f"model keys {key} and {alt} both hold scores of other weights")
    return alt


def _index_progress() -> Callable[[str, int, int], None]:
    """A progress line for the one-time build of the sampling index (graph/sample_index.py)."""
    from rich.markup import escape

    from kgprobe.progress import console as safe_console

    console = safe_console(stderr=True, markup=True)
    shown = {"at": -1}

    def show(what: str, done: int, total: int) -> None:
        pct = 100 * done // max(total, 1)
        if pct >= shown["at"] + 10 or done == total:
            shown["at"] = pct
            console.print(f"[dim]{escape(what)}: {done:,}/{total:,} ({pct}%)[/dim]")

    return show


#: How long a probe that lost its server waits for it to come back before it reports facts as
#: written: ``db wipe`` stops the server, deletes the database and starts it again.
RETURN_WAIT = 20.0


def _run_gone(graph: Graph, run_id: str) -> bool:
    """After a lost server: is it back (``db wipe`` restarts it) without this run's record?
    Asked for up to ``RETURN_WAIT`` seconds; False when it still does not answer (then the
    facts counted as written are what the server held when it went away)."""
    deadline = time.monotonic() + RETURN_WAIT
    while True:
        try:
            return pr.get_run(graph, run_id) is None
        except GraphUnavailable:
            if time.monotonic() >= deadline:
                return False
            time.sleep(1.0)


def _try_update(graph: Graph, run_id: str, props: Properties) -> None:
    """Best effort: record an interruption if the graph is still there."""
    with contextlib.suppress(GraphUnavailable):
        pr.update_run(graph, run_id, props)


#: Prompts shown per measure by a dry run: the first request of the first fact of as many
#: relations.
PREVIEW_PROMPTS = 3


def render_request(req: Any) -> str:
    """One scoring request as a line a person can read: a log-probability request as its
    context and continuation (JSON strings, so spaces and newlines show), any other as its
    type and fields."""
    import dataclasses

    if hasattr(req, "context") and hasattr(req, "continuation"):
        eos = " + <eos>" if getattr(req, "add_eos", False) else ""
        return (f"{json.dumps(req.context, ensure_ascii=False)} + "
                f"{json.dumps(req.continuation, ensure_ascii=False)}{eos}")
    if dataclasses.is_dataclass(req):
        fields = ", ".join(f"{f.name}={getattr(req, f.name)!r}" for f in dataclasses.fields(req))
        return f"{type(req).__name__}({fields})"[:300]
    return repr(req)[:300]


def plan_run(graph: Graph, config: ProbeConfig, model_name: str, *, index_dir: str | Path | None = None,
             preview: int = PREVIEW_PROMPTS) -> ProbeSummary:
    """What a probe of ``config`` would do, done up to the model: the sampled facts per
    relation and each measure's first prompt for the first fact of up to ``preview``
    relations. Nothing is written: no ModelKey, no ProbeRun, no score (the sampling and
    semantic indexes are built when missing, as the probe itself would)."""
    from collections import Counter

    from kgprobe.probing.measures.registry import guarded

    ctx = run_context(config, model_name)
    measures = config.measure_objects()
    available = probe_relations(graph, config.max_templates)
    relations = choose_relations(available, config.relations)
    ref = date_sort_key(config.at)
    subjects = pr.sample_facts(graph, relations, total=config.sample, per_relation=config.per_relation,
                               seed=config.seed, ref=ref, history_first=config.history_first,
                               shard=config.shard)
    details = fact_details(graph, subjects, [])
    counts = Counter(str(d["pid"]) for d in details)
    firsts: dict[PID, FactDetail] = {}
    for d in details:  # the first fact of each relation, in sample order
        firsts.setdefault(str(d["pid"]), d)
    shown_facts = list(firsts.values())[:preview]
    needs = frozenset().union(*(m.needs for m in measures))
    index = None
    if "distractors" in needs and strategy_class(config.strategy).needs_index and shown_facts:
        index = ensure_index(graph, index_dir or default_index_dir())
    gather = Gatherer(graph, config, needs, ref, available, index, None, ctx.label_rule, ctx.end)
    planned = gather.batch(shown_facts) if shown_facts else []
    prompts: dict[str, list[str]] = {}
    for m in measures:
        shown = prompts.setdefault(m.key(ctx), [])
        for p in planned:
            if p.reason is not None:
                shown.append(f"{p.row['pid']}: not scorable ({p.reason})")
                continue
            reqs = guarded(m, [p.fact], functools.partial(m.requests, [p.fact], ctx))
            if reqs:
                shown.append(f"{p.row['pid']}: {render_request(reqs[0])}")
    mkey = model_key(config.model, config.dtype)
    summary = ProbeSummary("", config.model, mkey, [pr.ScoreProps(mkey, m.key(ctx)).score for m in measures],
                           relations, planned=len(details), status="dry run")
    summary.fact_keys = [str(d["key"]) for d in details]
    summary.summary_measure = measures[0].key(ctx) if measures else ""
    summary.planned_by_relation = {p: counts.get(p, 0) for p in relations}
    summary.prompts = prompts
    return summary


# --- the entry point the CLI and the Python API call ------------------------------------------------


def probe(
    model: str | Any = "smollm2-135m",
    *,
    tokenizer: Any = None,
    model_name: str | None = None,
    relations: Sequence[str] = (),
    sample: int | None = 60,
    per_relation: int | None = None,
    measures: Sequence[str] = DEFAULT_MEASURES,
    strategy: str | None = None,
    n: int | None = None,
    seed: int = 0,
    threshold: float = DEFAULT_THRESHOLD,
    at: str | None = None,
    max_object_labels: int = 3,
    max_templates: int | None = None,
    dtype: str = "float32",
    threads: int = 1,
    batch_facts: int = 16,
    write_facts: int = 256,
    pipeline: int = 2,
    force: bool = False,
    history_first: bool = False,
    end: str = "auto",
    label_rule: str = "names",
    verbalizer: str = "careful",
    max_subject_labels: int = 1,
    on_model_mismatch: str = "suffix",
    shard: tuple[int, int] | None = None,
    cache: bool = True,
    index_dir: str | Path | None = None,
    progress: bool = True,
    settings: Settings | None = None,
    graph: Graph | None = None,
    on_fact: OnFact | None = None,
    dry_run: bool = False,
) -> ProbeSummary:
    """Probe ``model`` on a stratified, seeded sample of facts and write the scores back.

    Idempotent: facts already scored with the same configuration are skipped, so re-running
    after an interruption finishes the rest. Returns what was done (see ``ProbeSummary``).

    ``model``: a registry name, GGUF file or model directory; the URL of an OpenAI-compatible
    server (``http://host:port/v1``); or a transformers model object with its ``tokenizer``
    (fingerprinted from its weights), or a scoring backend such as ``OpenAICompletions``
    (docs/backends.md). ``model_name`` names an object in the score keys.

    ``n`` (default 5) and ``strategy`` (default temp+sem) may also come from a distractor
    measure's spec (``kmin:n=3``); they are one per run.

    ``dry_run``: sample the facts and render a few prompts per measure (:func:`plan_run`),
    without loading the model, writing a score or recording a run; the summary's status is
    ``dry run``."""
    given = None
    model = select_model(model)  # a served model (--backend, a URL) becomes its backend object
    if not isinstance(model, str):  # an object: scored where it is, never loaded by name
        given, model, dtype = resolve_model(model, tokenizer, name=model_name)
    measures, spec_n, spec_strategy = run_wide_settings(measures, n, strategy)
    n = spec_n if spec_n is not None else DEFAULT_N
    strategy = spec_strategy if spec_strategy is not None else DEFAULT_STRATEGY
    config = ProbeConfig(
        model=model, relations=tuple(relations), sample=sample, per_relation=per_relation,
        measures=tuple(measures),
        strategy=strategy, n=n, seed=seed, threshold=threshold, at=at, batch_facts=batch_facts,
        write_facts=write_facts, pipeline=pipeline,
        dtype=dtype, max_object_labels=max_object_labels, max_templates=max_templates, force=force,
        history_first=history_first, end=end, label_rule=label_rule, verbalizer=verbalizer,
        max_subject_labels=max_subject_labels, on_model_mismatch=on_model_mismatch, shard=shard,
    )
    config.validate()
    for m in config.measure_objects():
        why = m.available()
        if why:
            raise ConfigError(why)
    if given is None:
        check_model_name(model)
    own = graph is None
    g = graph if graph is not None else connect(settings)
    try:
        # fail on a bad relation before paying for the model load
        choose_relations(probe_relations(g, max_templates), config.relations)
        if dry_run:
            return plan_run(g, config, model_name or model, index_dir=index_dir)
        lm = given if given is not None else load_model(model, dtype=dtype, threads=threads)
        score_cache = ScoreCache(default_score_cache()) if cache else None
        try:
            engine = Engine(lm, cache=score_cache)
            info = engine.model_info()
            return run_probe(g, engine, config, fingerprint=engine.fingerprint, model_info=info,
                             index_dir=index_dir, progress=progress, on_fact=on_fact)
        finally:
            if score_cache is not None:
                score_cache.close()
    finally:
        if own:
            g.close()
