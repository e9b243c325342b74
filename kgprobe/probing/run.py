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
import datetime as dt
import hashlib
import json
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from kgprobe.errors import ConfigError, GraphUnavailable
from kgprobe.graph import probe_runs as pr
from kgprobe.records import STYLE_OBJECT_LAST, STYLE_QUESTION, is_pid

if TYPE_CHECKING:  # pragma: no cover
    from kgprobe.config import Settings
    from kgprobe.graph.client import Graph
    from kgprobe.graph.semantic import SemanticIndex
    from kgprobe.probing.requests import Request, Result

#: Measures a probe can write, each from the same plausibility scores (distractors paper §3.2).
MEASURES: dict[str, str] = {
    "kmin": "Min@n: 1 for a cloze sentence only if the object beats all n distractors; "
    "mean over the fact's cloze sentences",
    "kavg": "Avg@n: share of the n distractors the object beats; mean over cloze sentences",
}
DEFAULT_MEASURES = ("kmin",)
DEFAULT_STRATEGY = "temp+sem"
#: A fact counts as known when its score is at least this (overridable per run and query).
DEFAULT_THRESHOLD = 0.5
USABLE_STYLES = (STYLE_OBJECT_LAST, STYLE_QUESTION)


class Runner(Protocol):
    """Requests in, results out, in order (``Engine`` is one)."""

    def run(self, requests: Sequence[Request]) -> list[Result]: ...


@dataclass(frozen=True)
class ProbeConfig:
    """Everything that decides which facts are probed and what their scores mean."""

    model: str = "smollm2-135m"
    relations: tuple[str, ...] = ()
    sample: int | None = 60  # facts in all, split evenly over the relations; None = all
    measures: tuple[str, ...] = DEFAULT_MEASURES
    strategy: str = DEFAULT_STRATEGY
    n: int = 5
    seed: int = 0
    threshold: float = DEFAULT_THRESHOLD
    at: str | None = None  # reference date YYYY-MM-DD; None = today (not part of the config hash)
    max_subject_labels: int = 1
    max_object_labels: int = 3
    max_templates: int | None = None  # per relation; object-last statements first
    max_past_values: int = 5
    batch_facts: int = 16
    dtype: str = "float32"
    force: bool = False  # rescore facts already scored with this configuration
    history_first: bool = False  # sample facts with a past value (staleness) first

    def validate(self) -> None:
        from kgprobe.probing.distractors import STRATEGIES

        bad = [m for m in self.measures if m not in MEASURES]
        if bad or not self.measures:
            raise ConfigError(
                f"unknown measure {', '.join(bad) or '(none)'}; choose from: {', '.join(MEASURES)}"
            )
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"unknown strategy {self.strategy!r}; choose from: {', '.join(STRATEGIES)}")
        if self.n < 1:
            raise ConfigError("-n (distractors per fact) must be at least 1")
        if self.sample is not None and self.sample < 1:
            raise ConfigError("--sample must be at least 1 (or leave it out for every fact)")
        if self.batch_facts < 1:
            raise ConfigError("the batch size must be at least 1")
        if min(self.max_subject_labels, self.max_object_labels, self.max_templates or 1) < 1:
            raise ConfigError("label and template limits must be at least 1")
        if self.max_past_values < 0:
            raise ConfigError("the past-value limit must not be negative")


@dataclass
class ProbeSummary:
    """What a probe run did (also stored on its ProbeRun node)."""

    run_id: str
    model: str
    model_key: str
    score_properties: list[str]
    relations: list[str]
    planned: int = 0
    skipped: int = 0  # already scored with the same configuration
    scored: int = 0
    unscorable: int = 0
    seconds: float = 0.0
    status: str = "running"
    unscorable_reasons: dict[str, int] = field(default_factory=dict)
    interrupted_runs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- naming and provenance -------------------------------------------------------------------------


def model_key(model: str, dtype: str = "float32") -> str:
    """The model part of score property names: the registry name, or the file/directory name
    of a local model; ``_bf16`` is appended for bfloat16 so both precisions can coexist."""
    from kgprobe.probing.models import REGISTRY

    p = Path(model)
    base = model if model in REGISTRY else (p.stem if p.suffix == ".gguf" else p.name or model)
    key = pr.key_part(base)
    return key + ("_bf16" if dtype in ("bfloat16", "bf16") else "")


def measure_key(measure: str, strategy: str, n: int) -> str:
    """The measure part of score property names, e.g. ``kmin_temp_sem_n5``."""
    return pr.check_part(f"{pr.key_part(measure)}_{pr.key_part(strategy)}_n{int(n)}")


def check_model_name(model: str) -> None:
    """One clear line for a model that is neither a registry name nor a local file/directory."""
    from kgprobe.probing.models import REGISTRY

    p = Path(model).expanduser()
    if model in REGISTRY or p.is_dir() or (p.suffix == ".gguf" and p.is_file()):
        return
    raise ConfigError(
        f"unknown model {model!r}; choose from: {', '.join(REGISTRY)}, "
        "or give a .gguf file or a local Hugging Face model directory"
    )


def code_version() -> dict[str, str | None]:
    """kgprobe's version and, in a git checkout, the commit (``-dirty`` with local changes)."""
    from kgprobe import __version__

    git: str | None = None
    root = Path(__file__).resolve().parents[2]  # the checkout, not kgprobe/
    if (root / ".git").exists():
        try:
            out = subprocess.run(
                ["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=12"],
                capture_output=True, text=True, timeout=5, check=False,
            )
            git = out.stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            git = None
    return {"kgprobe": __version__, "git": git}


def _library_versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {}
    for dist in ("torch", "transformers", "neo4j", "faiss-cpu"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            continue
    return out


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


# --- relations and templates --------------------------------------------------------------------


def probe_relations(graph: Graph, max_templates: int | None = None) -> dict[str, list[tuple[str, str]]]:
    """Relations that have facts and at least one usable template: pid -> [(template id, text)]
    (object-last statements and questions; templates with the object inside cannot end in the
    object's label, which the distractor measure scores)."""
    from kgprobe.graph.templates import list_templates

    with_facts = {r["pid"] for r in pr.relations_with_facts(graph)}
    out: dict[str, list[tuple[int, str, str]]] = {}
    for t in list_templates(graph):
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


# --- scoring one batch -------------------------------------------------------------------------------


@dataclass
class _Planned:
    row: dict[str, Any]
    distractors: list[str]  # the strategy's ranked distractor qids (Δ_n)
    past: list[str]  # past objects of (s, r), for staleness
    reason: str | None = None
    scored: Any = None  # the FactPlausibilities behind the values (per-fact records, on_fact)


def _entity(row: dict[str, Any] | None, qid: str) -> Any:
    from kgprobe.probing.measures.common import Entity

    row = row or {}
    return Entity(row.get("label") or qid, tuple(row.get("aliases") or ()), qid)


def _plan_fact(
    graph: Graph, row: dict[str, Any], cfg: ProbeConfig, ref: int,
    index: SemanticIndex | None, engine: Any,
) -> _Planned:
    """Distractors (by the chosen strategy) and past values of one fact."""
    from kgprobe.graph import distractors as gd
    from kgprobe.probing.distractors import find_distractors

    try:
        found = find_distractors(
            graph, row["s"], row["pid"], row["o"], strategy=cfg.strategy, n=cfg.n, seed=cfg.seed,
            at=ref, index=index, engine=engine,
        )
        ctx = gd.fact_context(graph, row["s"], row["pid"], row["o"])
        past = [c.qid for c in gd.temporal_candidates(graph, ctx, ref)][: cfg.max_past_values]
    except ConfigError as exc:
        return _Planned(row, [], [], str(exc))
    ds = [d.qid for d in found.distractors][: cfg.n]
    return _Planned(row, ds, past, None if ds else (found.reason or "no distractor found"))


def _score_batch(
    graph: Graph, runner: Runner, planned: list[_Planned], cfg: ProbeConfig,
    templates: dict[str, list[tuple[str, str]]], model_name: str,
) -> list[tuple[_Planned, dict[str, float | None], float | None]]:
    """(plan, {measure: value}, staleness) per fact, all plausibilities in ONE engine run."""
    from kgprobe.probing.measures.common import Fact, end_marker_for
    from kgprobe.probing.measures.distractors import (
        DistractorItem,
        distractor_measure,
        knowledge_given_cloze,
    )

    ok = [p for p in planned if p.reason is None]
    labels = pr.entity_labels(graph, [q for p in ok for q in (*p.distractors, *p.past)])
    items = []
    for p in ok:
        r = p.row
        subject = _entity({"label": r["s_label"], "aliases": r["s_aliases"]}, r["s"])
        obj = _entity({"label": r["o_label"], "aliases": r["o_aliases"]}, r["o"])
        others = list(dict.fromkeys([*p.distractors, *p.past]))
        items.append(DistractorItem(
            Fact(subject, r["pid"], obj, r["key"]),
            tuple(text for _, text in templates[r["pid"]]),
            tuple(_entity(labels.get(q), q) for q in others),
        ))
    scored = distractor_measure(
        runner, items, end=end_marker_for(model_name),
        max_subject_labels=cfg.max_subject_labels, max_object_labels=cfg.max_object_labels,
    ) if items else []
    out: list[tuple[_Planned, dict[str, float | None], float | None]] = []
    by_key = {fp.fact.key: fp for fp in scored}
    for p in planned:
        fp = p.scored = by_key.get(p.row["key"]) if p.reason is None else None
        if fp is None or not fp.clozes:
            if p.reason is None:
                p.reason = "no usable cloze sentence"
            out.append((p, {m: None for m in cfg.measures}, None))
            continue
        order = list(dict.fromkeys([*p.distractors, *p.past]))
        n_ds = len(p.distractors)
        past_pos = [order.index(q) for q in p.past]
        values: dict[str, float | None] = {}
        for m in cfg.measures:
            agg: Literal["min", "avg"] = "min" if m == "kmin" else "avg"
            per = [knowledge_given_cloze(c.log_pl_true, c.log_pl_distractors[:n_ds], None, agg)
                   for c in fp.clozes]
            got = [v for v in per if v is not None]
            values[m] = sum(got) / len(got) if got else None
        stale = None
        if past_pos:
            flags = [
                1.0 if max(c.log_pl_distractors[i] for i in past_pos) > c.log_pl_true else 0.0
                for c in fp.clozes
            ]
            stale = sum(flags) / len(flags)
        out.append((p, values, stale))
    return out


# --- the run ------------------------------------------------------------------------------------------


def run_probe(
    graph: Graph,
    runner: Runner,
    config: ProbeConfig,
    *,
    fingerprint: str,
    model_info: dict[str, Any] | None = None,
    index: SemanticIndex | None = None,
    index_dir: str | Path | None = None,
    progress: bool = True,
    on_fact: Callable[[_Planned, dict[str, float | None], float | None], None] | None = None,
) -> ProbeSummary:
    """Probe ``config.sample`` facts with ``runner`` and write their scores onto the graph.

    ``fingerprint`` identifies the model's weights and scoring settings (``Engine.fingerprint``);
    it is part of the configuration hash, so a different model never passes for the same one.
    ``on_fact(plan, values, staleness)`` sees every fact scored (per-fact records, kgprobe.results).
    """
    from kgprobe.graph import distractors as gd

    config.validate()
    mkey = model_key(config.model, config.dtype)
    mkeys = {m: measure_key(m, config.strategy, config.n) for m in config.measures}
    props = {m: pr.ScoreProps(mkey, k) for m, k in mkeys.items()}
    available = probe_relations(graph, config.max_templates)
    relations = choose_relations(available, config.relations)
    ref = gd.date_sort_key(config.at)

    settings = {
        "fingerprint": fingerprint, "strategy": config.strategy, "n": config.n, "seed": config.seed,
        "max_subject_labels": config.max_subject_labels,
        "max_object_labels": config.max_object_labels, "max_past_values": config.max_past_values,
        "measure_version": 1, **({"at": config.at} if config.at else {}),
    }
    cfg_by_pid = {p: _hash({**settings, "templates": [t for _, t in available[p]]}) for p in relations}
    run_cfg = _hash({"settings": settings, "relations": cfg_by_pid, "measures": sorted(mkeys.values())})

    keys_by_pid = {p: pr.candidate_keys(graph, p, ref) for p in relations}
    first = {p: pr.history_keys(graph, p, ref) for p in relations} if config.history_first else None
    chosen = pr.sample_keys(keys_by_pid, config.sample, config.seed, first)
    cfg_props = [props[m].cfg for m in config.measures]
    details = []
    for batch in _chunks(chosen, 500):
        details.extend(pr.fact_details(graph, batch, cfg_props))
    todo = [d for d in details if config.force or any(c != cfg_by_pid[d["pid"]] for c in d["cfgs"])]

    run_id = uuid.uuid4().hex
    summary = ProbeSummary(
        run_id, config.model, mkey, [props[m].score for m in config.measures], relations,
        planned=len(details), skipped=len(details) - len(todo),
    )
    facts_hash = _hash(sorted(f"{d['key']}|{d['s']}|{d['pid']}|{d['o']}" for d in details))
    info = model_info or {}
    run_props = {
        "status": "running", "started": _now(), "model": config.model, "model_key": mkey,
        "model_fingerprint": fingerprint, "model_kind": info.get("kind"), "dtype": config.dtype,
        "device": info.get("device"), "measures": list(config.measures),
        "measure_keys": [mkeys[m] for m in config.measures],
        "score_properties": summary.score_properties,
        "measure_params": json.dumps({**settings, "threshold": config.threshold,
                                      "end_marker": info.get("end_marker")}),
        "strategy": config.strategy, "n": config.n, "seed": config.seed,
        "threshold": config.threshold, "sample": config.sample, "relations": relations,
        "history_first": config.history_first,
        "reference_date": ref,
        "templates": json.dumps({p: [i for i, _ in available[p]] for p in relations}),
        "config_hash": run_cfg, "relation_config_hashes": json.dumps(cfg_by_pid),
        "graph_snapshot": json.dumps(pr.graph_counts(graph)), "facts_hash": facts_hash,
        "code_version": code_version()["kgprobe"], "git_hash": code_version()["git"],
        "library_versions": json.dumps(_library_versions()),
        "facts_planned": summary.planned, "facts_skipped": summary.skipped,
        "facts_scored": 0, "facts_unscorable": 0,
    }
    summary.interrupted_runs = pr.create_run(graph, run_id, run_props)

    engine = runner if config.strategy == "appropt" else None
    if config.strategy in ("sem", "temp+sem") and todo and index is None:
        from kgprobe.graph.semantic import ensure_index
        from kgprobe.probing.distractors import default_index_dir

        index = ensure_index(graph, index_dir or default_index_dir())

    started = time.monotonic()
    reasons: Counter[str] = Counter()
    model_name = str(info.get("name") or config.model)
    try:
        with _progress(progress, len(todo)) as (bar, task):
            for batch in _chunks(todo, config.batch_facts):
                planned = [_plan_fact(graph, d, config, ref, index, engine) for d in batch]
                results = _score_batch(graph, runner, planned, config, available, model_name)
                rows = []
                n_ok = 0
                for p, values, stale in results:
                    if on_fact is not None:
                        on_fact(p, values, stale)
                    cfg_hash = cfg_by_pid[p.row["pid"]]
                    fact_props: dict[str, Any] = {}
                    for m, v in values.items():
                        sp = props[m]
                        # An unscorable fact keeps no configuration hash, so the next run
                        # tries it again (the graph may have gained the types it lacked).
                        fact_props.update({
                            sp.score: v, sp.known: None if v is None else v >= config.threshold,
                            sp.stale: stale, sp.run: run_id,
                            sp.cfg: None if p.reason is not None else cfg_hash,
                        })
                    if p.reason is not None:
                        reasons[p.reason.split(";")[0][:120]] += 1
                    else:
                        n_ok += 1
                    rows.append({"key": p.row["key"], "props": fact_props})
                pr.write_scores(graph, run_id, rows, scored=n_ok, unscorable=len(rows) - n_ok, now=_now())
                summary.scored += n_ok
                summary.unscorable += len(rows) - n_ok
                if bar is not None:
                    bar.advance(task, len(batch))
    except GraphUnavailable as exc:
        summary.status = "interrupted"
        raise GraphUnavailable(
            f"{exc} (probe run {run_id[:8]}: {summary.scored + summary.unscorable} of {len(todo)} "
            "facts written; run the same command again to score the rest)"
        ) from exc
    except BaseException:
        summary.status = "interrupted"
        _try_update(graph, run_id, {"status": "interrupted", "finished": _now()})
        raise
    summary.seconds = round(time.monotonic() - started, 2)
    summary.status = "finished"
    summary.unscorable_reasons = dict(reasons.most_common())
    pr.update_run(graph, run_id, {
        "status": "finished", "finished": _now(), "seconds": summary.seconds,
        "unscorable_reasons": json.dumps(summary.unscorable_reasons),
    })
    return summary


def _try_update(graph: Graph, run_id: str, props: dict[str, Any]) -> None:
    """Best effort: record an interruption if the graph is still there."""
    with contextlib.suppress(GraphUnavailable):
        pr.update_run(graph, run_id, props)


def _chunks(rows: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [rows[i : i + size] for i in range(0, len(rows), size)]


class _progress:
    """A rich progress bar with an ETA, or nothing when ``enabled`` is false."""

    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled = enabled and total > 0
        self.total = total
        self.bar: Any = None

    def __enter__(self) -> tuple[Any, Any]:
        if not self.enabled:
            return None, None
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(
            TextColumn("probing"), BarColumn(), MofNCompleteColumn(), TextColumn("facts"),
            TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
        )
        self.bar.__enter__()
        return self.bar, self.bar.add_task("probing", total=self.total)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


# --- the entry point the CLI and the Python API call ------------------------------------------------


def probe(
    model: str = "smollm2-135m",
    *,
    relations: Sequence[str] = (),
    sample: int | None = 60,
    measures: Sequence[str] = DEFAULT_MEASURES,
    strategy: str = DEFAULT_STRATEGY,
    n: int = 5,
    seed: int = 0,
    threshold: float = DEFAULT_THRESHOLD,
    at: str | None = None,
    max_object_labels: int = 3,
    max_templates: int | None = None,
    dtype: str = "float32",
    threads: int = 1,
    batch_facts: int = 16,
    force: bool = False,
    history_first: bool = False,
    cache: bool = True,
    index_dir: str | Path | None = None,
    progress: bool = True,
    settings: Settings | None = None,
    graph: Graph | None = None,
    on_fact: Callable[[_Planned, dict[str, float | None], float | None], None] | None = None,
) -> ProbeSummary:
    """Probe ``model`` on a stratified, seeded sample of facts and write the scores back.

    Idempotent: facts already scored with the same configuration are skipped, so re-running
    after an interruption finishes the rest. Returns what was done (see ``ProbeSummary``)."""
    config = ProbeConfig(
        model=model, relations=tuple(relations), sample=sample, measures=tuple(measures),
        strategy=strategy, n=n, seed=seed, threshold=threshold, at=at, batch_facts=batch_facts,
        dtype=dtype, max_object_labels=max_object_labels, max_templates=max_templates, force=force,
        history_first=history_first,
    )
    config.validate()
    check_model_name(model)
    from kgprobe.graph.client import connect

    own = graph is None
    g = graph if graph is not None else connect(settings)
    try:
        # fail on a bad relation before paying for the model load
        choose_relations(probe_relations(g, max_templates), config.relations)
        from kgprobe.probing.cache import ScoreCache
        from kgprobe.probing.engine import Engine
        from kgprobe.probing.measures.common import end_marker_for
        from kgprobe.probing.models import load_model
        from kgprobe.probing.score import default_score_cache

        lm = load_model(model, dtype=dtype, threads=threads)
        score_cache = ScoreCache(default_score_cache()) if cache else None
        try:
            engine = Engine(lm, cache=score_cache)
            end = end_marker_for(lm.name)
            info = {"name": lm.name, "kind": lm.kind, "device": lm.device,
                    "end_marker": {"kind": end.kind, "text": end.text}}
            return run_probe(g, engine, config, fingerprint=engine.fingerprint, model_info=info,
                             index_dir=index_dir, progress=progress, on_fact=on_fact)
        finally:
            if score_cache is not None:
                score_cache.close()
    finally:
        if own:
            g.close()


# --- asking the scores ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Scores:
    """Which score properties a question reads: the model and measure keys, the threshold of
    "known" (the latest run's unless given), and the runs that wrote them."""

    props: pr.ScoreProps
    model: str
    threshold: float
    runs: tuple[str, ...]


def probed(graph: Graph) -> dict[str, list[dict[str, Any]]]:
    """Finished or partial probe runs, by model key, oldest first."""
    out: dict[str, list[dict[str, Any]]] = {}
    for run in pr.list_runs(graph):
        if run.get("model_key"):
            out.setdefault(str(run["model_key"]), []).append(run)
    return out


def resolve_scores(
    graph: Graph, model: str, measure: str | None = None, threshold: float | None = None
) -> Scores:
    """The score properties of ``model`` (a model key, or the name it was probed under) and
    ``measure`` (a measure key like ``kmin_temp_sem_n5``, or a measure name like ``kmin``);
    without ``measure``, the first measure of the model's latest run."""
    runs_by_model = probed(graph)
    if not runs_by_model:
        raise ConfigError("no probe run in the graph yet; run `kgprobe probe --model M` first")
    # an exact model key, else the key the name gives at float32, else a run under that name
    key: str | None = model if model in runs_by_model else None
    if key is None:
        try:
            key = model_key(model)
        except ConfigError:
            key = None
    if key not in runs_by_model:
        named = [r for rs in runs_by_model.values() for r in rs if r.get("model") == model]
        key = str(max(named, key=lambda r: str(r.get("started")))["model_key"]) if named else None
    if key is None or key not in runs_by_model:
        raise ConfigError(f"no scores for model {model!r}; probed models: {', '.join(sorted(runs_by_model))}")
    runs = runs_by_model[key]
    keys_in_order: list[str] = []
    for r in reversed(runs):
        for k in r.get("measure_keys") or []:
            if k not in keys_in_order:
                keys_in_order.append(k)
    if measure is None:
        chosen = keys_in_order[0]
    else:
        matches = [k for k in keys_in_order if k == measure or k.startswith(pr.key_part(measure) + "_")]
        if not matches:
            raise ConfigError(
                f"no {measure!r} scores for model {key}; measures probed: {', '.join(keys_in_order)}"
            )
        chosen = matches[0]
    used = [r for r in runs if chosen in (r.get("measure_keys") or [])]
    thr = threshold if threshold is not None else float(used[-1].get("threshold") or DEFAULT_THRESHOLD)
    return Scores(pr.ScoreProps(key, chosen), str(used[-1].get("model") or key), thr,
                  tuple(str(r["id"]) for r in used))


@dataclass(frozen=True)
class ScoredFact:
    """One fact with a model's score on it."""

    key: str
    pid: str
    relation: str | None
    subject: str
    subject_label: str | None
    object: str
    object_label: str | None
    score: float
    run: str | None = None


def unknown_in(
    graph: Graph, model: str, *, relation: str | None = None, below: float | None = None,
    measure: str | None = None,
) -> tuple[Scores, list[ScoredFact]]:
    """Facts ``model`` does not know: score below ``below`` (default: the run's threshold)."""
    sc = resolve_scores(graph, model, measure, below)
    pid = None
    if relation is not None:
        pid = relation.strip().upper()
        known = {r["pid"] for r in pr.relations_with_facts(graph)}
        if not is_pid(pid) or pid not in known:
            raise ConfigError(f"unknown relation {relation!r}; relations with facts: {', '.join(sorted(known, key=lambda p: int(p[1:])))}")
    rows = pr.unknown_facts(graph, sc.props, sc.threshold, pid)
    return sc, [ScoredFact(**r) for r in rows]


@dataclass(frozen=True)
class ComparedFact:
    """A fact on which two models disagree about being known, with both scores."""

    key: str
    pid: str
    relation: str | None
    subject: str
    subject_label: str | None
    object: str
    object_label: str | None
    score_a: float
    score_b: float


@dataclass
class Comparison:
    """What one model knows and the other does not, on the facts both were probed on."""

    a: str
    b: str
    measure: str
    threshold: float
    a_not_b: list[ComparedFact]
    b_not_a: list[ComparedFact]
    counts: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare_in(
    graph: Graph, a: str, b: str, *, measure: str | None = None, threshold: float | None = None
) -> Comparison:
    sa = resolve_scores(graph, a, measure, threshold)
    sb = resolve_scores(graph, b, sa.props.measure_key if measure is None else measure, threshold)
    if sb.props.measure_key != sa.props.measure_key:
        raise ConfigError(
            f"{a} and {b} were not probed with the same measure ({sa.props.measure_key} vs "
            f"{sb.props.measure_key}); pass --measure"
        )
    thr = threshold if threshold is not None else sa.threshold
    rows, counts = pr.compare_facts(graph, sa.props, sb.props, thr)
    facts = [ComparedFact(**r) for r in rows]
    a_not_b = [f for f in facts if f.score_a >= thr]
    b_not_a = [f for f in facts if f.score_a < thr]
    return Comparison(sa.props.model_key, sb.props.model_key, sa.props.measure_key, thr,
                      a_not_b, b_not_a, counts)
