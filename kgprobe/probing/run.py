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
import math
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kgprobe.errors import ConfigError, GraphUnavailable
from kgprobe.graph import probe_runs as pr
from kgprobe.probing.pipeline import Ahead, Behind
from kgprobe.records import STYLE_OBJECT_LAST, STYLE_QUESTION, is_pid

if TYPE_CHECKING:  # pragma: no cover
    from kgprobe.config import Settings
    from kgprobe.graph.client import Graph
    from kgprobe.graph.semantic import SemanticIndex
    from kgprobe.probing.requests import Request, Result

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
    batch_facts: int = 16  # facts per gather and per engine run
    write_facts: int = 256  # facts per write transaction (scores and counters together)
    pipeline: int = 2  # batches gathered ahead / writes behind the scoring; 0 = one thread
    dtype: str = "float32"
    force: bool = False  # rescore facts already scored with this configuration
    history_first: bool = False  # sample facts with a past value (staleness) first
    end: str = "auto"  # Eq. 1 end marker: auto (the model's documented one), eos, tail, none
    label_rule: str = "names"  # which aliases are labels (LabelRule): names or all
    on_model_mismatch: str = "suffix"  # another model's weights under this key: suffix or refuse
    shard: tuple[int, int] | None = None  # (K, N): only shard K of N of the sampled facts

    def measure_objects(self) -> list[Any]:
        """The registered measures of ``measures`` (``name`` or ``name:param=value,...``)."""
        from kgprobe.probing.measures.registry import create, parse_measure

        out = []
        for spec in self.measures:
            name, params = parse_measure(spec)
            out.append(create(name, params))
        return out

    def validate(self) -> None:
        from kgprobe.probing.distractors import STRATEGIES
        from kgprobe.probing.measures.registry import SHARED

        if not self.measures:
            raise ConfigError("no measure given; see `kgprobe measures`")
        ms = self.measure_objects()
        if len({m.name for m in ms}) != len(ms):
            raise ConfigError("a measure is given twice")
        SHARED["end"].parse(self.end)
        SHARED["label_rule"].parse(self.label_rule)
        if self.on_model_mismatch not in ("suffix", "refuse"):
            raise ConfigError("on a model mismatch choose suffix or refuse")
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"unknown strategy {self.strategy!r}; choose from: {', '.join(STRATEGIES)}")
        if self.n < 1:
            raise ConfigError("-n (distractors per fact) must be at least 1")
        if not (math.isfinite(self.threshold) and self.threshold >= 0):
            raise ConfigError(f"the threshold must be a finite number >= 0, not {self.threshold}")
        if self.at is not None:
            from kgprobe.graph.distractors import date_sort_key

            date_sort_key(self.at)  # a bad --at is refused before the graph is contacted
        if self.sample is not None and self.sample < 1:
            raise ConfigError("--sample must be at least 1 (or leave it out for every fact)")
        if self.batch_facts < 1:
            raise ConfigError("the batch size must be at least 1")
        if self.write_facts < 1:
            raise ConfigError("the write batch must be at least 1")
        if self.pipeline < 0:
            raise ConfigError("the pipeline depth must not be negative")
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
    #: generation/search prompts cut from the left to fit the model (docs/probing.md)
    contexts_cut: int = 0

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


def measure_key(measure: str, strategy: str, n: int, **shared: Any) -> str:
    """The measure part of score property names, e.g. ``kmin_temp_sem_n5`` (see
    :meth:`kgprobe.probing.measures.registry.Measure.key`; ``shared`` overrides the run-wide
    label settings, e.g. ``max_object_labels=1`` gives ``kmin_temp_sem_n5_o1``)."""
    from kgprobe.probing.measures.registry import create, parse_measure

    name, params = parse_measure(measure)
    return create(name, params).key(_run_context(ProbeConfig(strategy=strategy, n=n, **shared), None))


def _run_context(cfg: ProbeConfig, model_name: str | None) -> Any:
    from kgprobe.probing.measures.common import EndMarker, LabelRule, end_marker_for
    from kgprobe.probing.measures.registry import RunContext

    end = end_marker_for(model_name) if cfg.end == "auto" else EndMarker(cfg.end)  # type: ignore[arg-type]
    return RunContext(end=end, max_subject_labels=cfg.max_subject_labels,
                      max_object_labels=cfg.max_object_labels,
                      label_rule=LabelRule(cfg.label_rule),  # type: ignore[arg-type]
                      n=cfg.n, strategy=cfg.strategy, seed=cfg.seed, end_choice=cfg.end)


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
    from kgprobe.graph.templates import probe_templates

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


# --- scoring one batch -------------------------------------------------------------------------------


@dataclass
class _Planned:
    row: dict[str, Any]
    fact: Any  # FactInput
    reason: str | None = None


class _Gatherer:
    """Fetches what the run's measures need for a whole batch of facts, each need in one
    UNWIND round trip anchored on the facts' entities (and once per relation for what a
    relation shares): the batch's fact contexts serve the distractor strategy, the past values
    and the other correct objects; the temporal candidates and the first Ω(f) checks of the
    semantic search are read for the batch too (``probing.distractors.prefetch``). The
    values are those of the per-fact reads (tests/test_probe_batched_gather.py)."""

    def __init__(self, graph: Graph, cfg: ProbeConfig, needs: frozenset[str], ref: int,
                 templates: dict[str, list[tuple[str, str]]], index: SemanticIndex | None,
                 engine: Any, rule: Any, end: Any = None) -> None:
        self.graph, self.cfg, self.needs, self.ref = graph, cfg, needs, ref
        self.end = end
        self.templates, self.index, self.engine, self.rule = templates, index, engine, rule
        self._subjects: dict[str, list[str]] = {}
        self._all_templates: dict[str, tuple[str, ...]] | None = None
        self._demos: tuple[Any, ...] | None = None

    def _ent(self, row: dict[str, Any] | None, qid: str) -> Any:
        row = row or {}
        return self.rule.entity(row.get("label"), row.get("aliases"), qid)

    def batch(self, rows: Sequence[dict[str, Any]]) -> list[_Planned]:
        from kgprobe.graph import distractors as gd
        from kgprobe.probing.distractors import find_distractors, prefetch
        from kgprobe.probing.measures.registry import FactInput

        facts = [(row["s"], row["pid"], row["o"]) for row in rows]
        wants_ctx = bool(self.needs & {"distractors", "past", "other_objects"})
        contexts = gd.fact_contexts(self.graph, facts) if wants_ctx else {}
        known = [k for k in dict.fromkeys(facts) if k in contexts]
        fetched = dict(zip(known, prefetch(
            self.graph, [contexts[k] for k in known],
            strategy=self.cfg.strategy if "distractors" in self.needs else "", n=self.cfg.n,
            at=self.ref, index=self.index, temporal="past" in self.needs,
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
        labels = pr.entity_labels(self.graph, [q for _, ds, past, others, subjects, _, _, _ in pre
                                               for q in (*ds, *past, *others, *subjects)])
        all_t = self._relation_templates() if "object_relations" in self.needs else {}
        out = []
        for row, ds, past, others, subjects, orel, why, err in pre:
            fact = FactInput(
                key=row["key"], pid=row["pid"],
                subject=self._ent({"label": row["s_label"], "aliases": row["s_aliases"]}, row["s"]),
                object=self._ent({"label": row["o_label"], "aliases": row["o_aliases"]}, row["o"]),
                templates=tuple(text for _, text in self.templates[row["pid"]]),
                distractors=tuple(self._ent(labels.get(q), q) for q in ds),
                past=tuple(self._ent(labels.get(q), q) for q in past),
                other_objects=tuple(self._ent(labels.get(q), q) for q in others),
                other_subjects=tuple(self._ent(labels.get(q), q) for q in subjects),
                object_relation_templates=tuple(all_t[p] for p in orel if all_t.get(p)),
                demonstrations=self._demonstrations() if "demonstrations" in self.needs else (),
                distractor_reason=why,
            )
            out.append(_Planned(row, fact, err))
        return out

    def _demonstrations(self) -> tuple[Any, ...]:
        """The run's one demonstration pool: a seeded sample of facts of every relation with
        templates (the same for every fact and batch, so values do not depend on batching)."""
        if self._demos is None:
            from kgprobe.probing.measures.registry import FactInput

            pool = []
            for pid in sorted(self.templates, key=lambda p: int(p[1:])):
                for r in pr.relation_facts(self.graph, pid, self.cfg.seed):
                    pool.append(FactInput(
                        key=r["key"], pid=pid,
                        subject=self._ent({"label": r["s_label"], "aliases": r["s_aliases"]}, r["s"]),
                        object=self._ent({"label": r["o_label"], "aliases": r["o_aliases"]}, r["o"]),
                        templates=tuple(text for _, text in self.templates[pid])))
            self._demos = tuple(pool)
        return self._demos

    def _relation_subjects(self, pid: str) -> list[str]:
        if pid not in self._subjects:
            self._subjects[pid] = pr.relation_subjects(self.graph, pid, self.cfg.seed, limit=50)
        return self._subjects[pid]

    def _relation_templates(self) -> dict[str, tuple[str, ...]]:
        if self._all_templates is None:
            from kgprobe.graph.templates import probe_templates

            acc: dict[str, list[str]] = {}
            for t in probe_templates(self.graph):
                acc.setdefault(t.pid, []).append(t.text)
            self._all_templates = {p: tuple(v) for p, v in acc.items()}
        return self._all_templates


def _score_batch(
    runner: Runner, measures: Sequence[Any], planned: list[_Planned], ctx: Any,
) -> list[list[dict[str, Any]]]:
    """Per measure, per fact: its values. Every measure's first-round requests go to the
    engine in ONE run (deduplicated); each measure then reads its values off the results."""
    from kgprobe.probing.measures.registry import Replay

    facts = [p.fact for p in planned]
    wanted: list[Any] = []
    for m in measures:
        wanted.extend(m.requests(facts, ctx))
    unique = list(dict.fromkeys(wanted))
    results = dict(zip(unique, runner.run(unique), strict=True)) if unique else {}
    replay = Replay(runner, results)
    return [m.values(facts, ctx, replay) for m in measures]


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
    on_fact: Callable[[Any, dict[str, dict[str, Any]]], None] | None = None,
) -> ProbeSummary:
    """Probe ``config.sample`` facts with ``runner`` and write their scores onto the graph.

    ``fingerprint`` identifies the model's weights and scoring settings (``Engine.fingerprint``);
    it is part of the configuration hash, so a different model never passes for the same one.
    ``on_fact(plan, values)`` sees every fact of the run: its plan (graph row, ``FactInput``,
    reason it could not be planned) and each measure's values by measure name, including the
    private ``_details`` some measures attach (per-fact records, kgprobe.results).
    """
    from kgprobe.graph import distractors as gd

    config.validate()
    model_name = str((model_info or {}).get("name") or config.model)
    ctx = _run_context(config, model_name)
    measures = config.measure_objects()
    for m in measures:
        why = m.available()
        if why:
            raise ConfigError(why)
    mkey = claim_model_key(graph, model_key(config.model, config.dtype), fingerprint,
                           config.on_model_mismatch)
    mkeys = {m.name: m.key(ctx) for m in measures}
    if len(set(mkeys.values())) != len(mkeys):
        raise ConfigError("two measures give the same property key")
    props = {m.name: pr.ScoreProps(mkey, k) for m, k in zip(measures, mkeys.values(), strict=True)}
    available = probe_relations(graph, config.max_templates)
    relations = choose_relations(available, config.relations)
    ref = gd.date_sort_key(config.at)

    settings = {
        "fingerprint": fingerprint, "strategy": config.strategy, "n": config.n, "seed": config.seed,
        "max_subject_labels": config.max_subject_labels,
        "max_object_labels": config.max_object_labels, "max_past_values": config.max_past_values,
        "end_marker": {"kind": ctx.end.kind, "text": ctx.end.text}, "label_rule": config.label_rule,
        "measure_version": 2, **({"at": config.at} if config.at else {}),
    }
    # one configuration hash per measure and relation: a measure's hash covers every
    # parameter that changes its values, so adding a measure never rescores another
    m_cfg = {m.name: m.config(ctx) for m in measures}
    cfg_by = {
        m.name: {p: _hash({**settings, **m_cfg[m.name], "templates": [t for _, t in available[p]]})
                 for p in relations}
        for m in measures
    }
    run_cfg = _hash({"settings": settings, "relations": cfg_by, "measures": sorted(mkeys.values()),
                     # shards of one run must not mark each other interrupted; facts keep
                     # the unsharded configuration hashes, so the union is one run
                     **({"shard": list(config.shard)} if config.shard else {})})

    subject_by_pid = {p: pr.candidate_keys(graph, p, ref) for p in relations}
    keys_by_pid = {p: list(by_key) for p, by_key in subject_by_pid.items()}
    first = ({p: list(pr.history_keys(graph, p, ref)) for p in relations}
             if config.history_first else None)
    chosen = pr.shard_keys(pr.sample_keys(keys_by_pid, config.sample, config.seed, first),
                           config.shard)
    subjects = {k: s for by_key in subject_by_pid.values() for k, s in by_key.items()}
    cfg_props = [props[m.name].cfg for m in measures]
    details = []
    for batch in _chunks(chosen, 500):
        details.extend(pr.fact_details(graph, batch, subjects, cfg_props))

    def stale_measures(d: dict[str, Any]) -> list[Any]:
        return [m for m, c in zip(measures, d["cfgs"], strict=True)
                if config.force or c != cfg_by[m.name][d["pid"]]]

    todo = [d for d in details if stale_measures(d)]

    run_id = uuid.uuid4().hex
    summary = ProbeSummary(
        run_id, config.model, mkey, [props[m.name].score for m in measures], relations,
        planned=len(details), skipped=len(details) - len(todo),
    )
    facts_hash = _hash(sorted(f"{d['key']}|{d['s']}|{d['pid']}|{d['o']}" for d in details))
    info = model_info or {}
    specs = [{"name": m.name, "key": mkeys[m.name], "params": m.settings, "extras": list(m.extras),
              "section": m.section} for m in measures]
    run_props = {
        "status": "running", "started": _now(), "model": config.model, "model_key": mkey,
        "model_fingerprint": fingerprint, "model_kind": info.get("kind"), "dtype": config.dtype,
        "device": info.get("device"), "measures": [m.name for m in measures],
        "measure_keys": [mkeys[m.name] for m in measures],
        "measure_specs": json.dumps(specs, default=str),
        "score_properties": summary.score_properties,
        "measure_params": json.dumps({**settings, "threshold": config.threshold,
                                      "measures": m_cfg}, default=str),
        "end_marker": json.dumps({"choice": config.end, "kind": ctx.end.kind, "text": ctx.end.text}),
        "label_rule": config.label_rule,
        "strategy": config.strategy, "n": config.n, "seed": config.seed,
        "threshold": config.threshold, "sample": config.sample, "relations": relations,
        "history_first": config.history_first,
        "shard": f"{config.shard[0]}/{config.shard[1]}" if config.shard else None,
        "reference_date": ref,
        "templates": json.dumps({p: [i for i, _ in available[p]] for p in relations}),
        "config_hash": run_cfg, "relation_config_hashes": json.dumps(cfg_by),
        "graph_snapshot": json.dumps(pr.graph_counts(graph)), "facts_hash": facts_hash,
        "code_version": code_version()["kgprobe"], "git_hash": code_version()["git"],
        "library_versions": json.dumps(_library_versions()),
        "facts_planned": summary.planned, "facts_skipped": summary.skipped,
        "facts_scored": 0, "facts_unscorable": 0,
    }
    summary.interrupted_runs = pr.create_run(graph, run_id, run_props)

    needs = frozenset().union(*(m.needs for m in measures))
    engine = runner if config.strategy == "appropt" else None
    if ("distractors" in needs and config.strategy in ("sem", "temp+sem") and todo
            and index is None):
        from kgprobe.graph.semantic import ensure_index
        from kgprobe.probing.distractors import default_index_dir

        index = ensure_index(graph, index_dir or default_index_dir())
    gather = _Gatherer(graph, config, needs, ref, available, index, engine, ctx.label_rule, ctx.end)

    started = time.monotonic()
    tok = getattr(runner, "tok", None)
    cuts_before = int(getattr(tok, "cut_count", 0))
    reasons: Counter[str] = Counter()
    # gather ahead and write behind the scoring (kgprobe.probing.pipeline); ApprOpt's gather
    # runs the engine itself, so it stays on this thread
    ahead = Ahead(lambda b: (b, gather.batch(b)), _chunks(todo, config.batch_facts),
                  0 if engine is not None else config.pipeline)
    behind = Behind(config.pipeline)
    written = [0]  # facts whose scores are committed (the write thread counts them)
    pending: list[dict[str, Any]] = []
    pending_ok = 0

    def write_pending() -> None:
        nonlocal pending, pending_ok
        rows, ok = pending, pending_ok
        pending, pending_ok = [], 0

        def job() -> None:
            pr.write_scores(graph, run_id, rows, scored=ok, unscorable=len(rows) - ok, now=_now())
            written[0] += len(rows)

        behind.submit(job)

    try:
        with _progress(progress, len(todo)) as (bar, task):
            for batch, planned in ahead:
                # a measure already stored with this configuration is not recomputed
                wanted = {p.row["key"]: {m.name for m in stale_measures(p.row)} for p in planned}
                active = [m for m in measures if any(m.name in w for w in wanted.values())]
                per_measure = _score_batch(runner, active, planned, ctx)
                n_ok = 0
                for i, p in enumerate(planned):
                    fact_props: dict[str, Any] = {}
                    got_any = False
                    why = p.reason
                    for m, values in zip(active, per_measure, strict=True):
                        if m.name not in wanted[p.row["key"]]:
                            continue
                        v = values[i] if p.reason is None else {"score": None, "_reason": p.reason}
                        fact_props.update(_fact_props(props[m.name], m, v, run_id,
                                                      cfg_by[m.name][p.row["pid"]], config.threshold))
                        if v.get("score") is not None:
                            got_any = True
                        elif why is None:
                            why = f"{m.name}: {v.get('_reason') or 'no value'}"
                    if on_fact is not None:
                        on_fact(p, {m.name: (values[i] if p.reason is None
                                             else {"score": None, "_reason": p.reason})
                                    for m, values in zip(active, per_measure, strict=True)})
                    if got_any:
                        n_ok += 1
                    else:
                        reasons[(why or "no value").split(";")[0][:120]] += 1
                    pending.append({"key": p.row["key"], "s": p.row["s"], "props": fact_props})
                pending_ok += n_ok
                if len(pending) >= config.write_facts:
                    write_pending()
                summary.scored += n_ok
                summary.unscorable += len(planned) - n_ok
                if bar is not None:
                    bar.advance(task, len(batch))
            if pending:
                write_pending()
            behind.finish()
    except GraphUnavailable as exc:
        summary.status = "interrupted"
        ahead.close()
        behind.abort()
        raise GraphUnavailable(
            f"{exc} (probe run {run_id[:8]}: {written[0]} of {len(todo)} "
            "facts written; run the same command again to score the rest)"
        ) from exc
    except BaseException:
        summary.status = "interrupted"
        ahead.close()
        behind.abort()  # what was scored but not written is scored again by the next run
        _try_update(graph, run_id, {"status": "interrupted", "finished": _now()})
        raise
    summary.seconds = round(time.monotonic() - started, 2)
    summary.status = "finished"
    summary.unscorable_reasons = dict(reasons.most_common())
    summary.contexts_cut = int(getattr(tok, "cut_count", 0)) - cuts_before
    pr.update_run(graph, run_id, {
        "status": "finished", "finished": _now(), "seconds": summary.seconds,
        "unscorable_reasons": json.dumps(summary.unscorable_reasons),
        "contexts_cut": summary.contexts_cut,
    })
    return summary


def _fact_props(sp: pr.ScoreProps, m: Any, v: dict[str, Any], run_id: str, cfg_hash: str,
                threshold: float) -> dict[str, Any]:
    """The FACT properties of one measure's values. A fact the measure could not score keeps
    no configuration hash, so the next run tries it again (the graph may have gained what it
    lacked)."""
    score = v.get("score")
    known = v.get("known")
    if known is None and score is not None and m.has_known:
        known = score >= threshold
    out: dict[str, Any] = {
        sp.score: score, sp.known: None if score is None else known, sp.run: run_id,
        sp.cfg: None if score is None else cfg_hash,
    }
    if "stale" in v or m.uses_distractors:
        out[sp.stale] = v.get("stale")
    for e in m.extras:
        out[sp.extra(e)] = v.get(e)
    return out


def claim_model_key(graph: Graph, key: str, fingerprint: str, on_mismatch: str = "suffix") -> str:
    """The model key a run writes under. A key belongs to one model's weights (issue 10 #11):
    the fingerprint recorded on the key's earlier probe runs must equal this one, else the run
    refuses (``refuse``) or writes under ``<key>_<first 8 hex of the fingerprint>``
    (``suffix``, the default), so a different file with the same name never overwrites the
    scores of another model."""
    seen = pr.key_fingerprints(graph, key)
    if not seen or seen == {fingerprint}:
        return key
    if on_mismatch == "refuse":
        raise ConfigError(
            f"model key {key} holds scores of other weights (fingerprint {sorted(seen)[0][:12]}…, "
            f"this model {fingerprint[:12]}…); rename the model file or let kgprobe suffix the key"
        )
    alt = pr.check_part(f"{key[: pr.MAX_PART - 9]}_{pr.key_part(fingerprint)[:8]}")
    other = pr.key_fingerprints(graph, alt)
    if other and other != {fingerprint}:
        raise ConfigError(f"model keys {key} and {alt} both hold scores of other weights")
    return alt


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
    max_subject_labels: int = 1,
    on_model_mismatch: str = "suffix",
    shard: tuple[int, int] | None = None,
    cache: bool = True,
    index_dir: str | Path | None = None,
    progress: bool = True,
    settings: Settings | None = None,
    graph: Graph | None = None,
    on_fact: Callable[[Any, dict[str, dict[str, Any]]], None] | None = None,
) -> ProbeSummary:
    """Probe ``model`` on a stratified, seeded sample of facts and write the scores back.

    Idempotent: facts already scored with the same configuration are skipped, so re-running
    after an interruption finishes the rest. Returns what was done (see ``ProbeSummary``).

    ``n`` (default 5) and ``strategy`` (default temp+sem) may also come from a distractor
    measure's spec (``kmin:n=3``); they are one per run."""
    from kgprobe.probing.measures.registry import run_wide_settings

    measures, spec_n, spec_strategy = run_wide_settings(measures, n, strategy)
    n = spec_n if spec_n is not None else 5
    strategy = spec_strategy if spec_strategy is not None else DEFAULT_STRATEGY
    config = ProbeConfig(
        model=model, relations=tuple(relations), sample=sample, measures=tuple(measures),
        strategy=strategy, n=n, seed=seed, threshold=threshold, at=at, batch_facts=batch_facts,
        write_facts=write_facts, pipeline=pipeline,
        dtype=dtype, max_object_labels=max_object_labels, max_templates=max_templates, force=force,
        history_first=history_first, end=end, label_rule=label_rule,
        max_subject_labels=max_subject_labels, on_model_mismatch=on_model_mismatch, shard=shard,
    )
    config.validate()
    for m in config.measure_objects():
        why = m.available()
        if why:
            raise ConfigError(why)
    check_model_name(model)
    from kgprobe.graph.client import connect

    own = graph is None
    g = graph if graph is not None else connect(settings)
    try:
        # fail on a bad relation before paying for the model load
        choose_relations(probe_relations(g, max_templates), config.relations)
        from kgprobe.probing.cache import ScoreCache
        from kgprobe.probing.engine import Engine
        from kgprobe.probing.models import load_model
        from kgprobe.probing.score import default_score_cache

        lm = load_model(model, dtype=dtype, threads=threads)
        score_cache = ScoreCache(default_score_cache()) if cache else None
        try:
            engine = Engine(lm, cache=score_cache)
            info = {"name": lm.name, "kind": lm.kind, "device": lm.device}
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


def _model_measures(graph: Graph, model: str) -> tuple[str, list[dict[str, Any]], list[str]]:
    """The model key ``model`` names (a key, or the name it was probed under), its runs (oldest
    first) and its measure keys, latest run's first."""
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
    return key, runs, keys_in_order


def resolve_scores(
    graph: Graph, model: str, measure: str | None = None, threshold: float | None = None
) -> Scores:
    """The score properties of ``model`` (a model key, or the name it was probed under) and
    ``measure`` (a measure key like ``kmin_temp_sem_n5``, or a measure name like ``kmin``);
    without ``measure``, the first measure of the model's latest run. An exact measure key wins
    over a longer key it is a prefix of."""
    if threshold is not None and not (math.isfinite(threshold) and threshold >= 0):
        raise ConfigError(f"the threshold must be a finite number >= 0, not {threshold}")
    key, runs, keys_in_order = _model_measures(graph, model)
    if measure is None:
        chosen = keys_in_order[0]
    elif measure in keys_in_order:
        chosen = measure
    else:
        matches = [k for k in keys_in_order if k.startswith(pr.key_part(measure) + "_")]
        if not matches:
            raise ConfigError(
                f"no {measure!r} scores for model {key}; measures probed: {', '.join(keys_in_order)}"
            )
        chosen = matches[0]
    used = [r for r in runs if chosen in (r.get("measure_keys") or [])]
    thr = threshold if threshold is not None else float(used[-1].get("threshold") or DEFAULT_THRESHOLD)
    return Scores(pr.ScoreProps(key, chosen), str(used[-1].get("model") or key), thr,
                  tuple(str(r["id"]) for r in used))


def paired_scores(
    graph: Graph, a: str, b: str, measure: str | None = None, threshold: float | None = None
) -> tuple[Scores, Scores]:
    """The scores of two models under one measure key, for comparing them fact by fact.

    Of the keys both were probed with (only those ``measure`` names, when given: the exact key,
    else the keys of that measure name), A's latest: A's latest measure when B has it too, else
    the latest of A's keys that B also has (the two models' latest runs may have used different
    measures). No common key: one ConfigError line naming both lists.
    ``threshold`` defaults to A's, for both."""
    ka, _, keys_a = _model_measures(graph, a)
    kb, _, keys_b = _model_measures(graph, b)

    def wanted(keys: list[str]) -> list[str]:
        if measure is None or measure in keys:
            return keys if measure is None else [measure]
        return [k for k in keys if k.startswith(pr.key_part(measure) + "_")]

    common = [k for k in wanted(keys_a) if k in wanted(keys_b)]
    if not common:
        what = "no measure" if measure is None else f"no {measure!r} measure key"
        raise ConfigError(
            f"{ka} and {kb} share {what}, so they cannot be compared fact by fact "
            f"({ka}: {', '.join(keys_a)}; {kb}: {', '.join(keys_b)}); probe one with the other's measure"
        )
    sa = resolve_scores(graph, a, common[0], threshold)  # an exact key: the same for both
    sb = resolve_scores(graph, b, common[0], threshold if threshold is not None else sa.threshold)
    return sa, sb


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
    sa, sb = paired_scores(graph, a, b, measure, threshold)
    thr = threshold if threshold is not None else sa.threshold
    rows, counts = pr.compare_facts(graph, sa.props, sb.props, thr)
    facts = [ComparedFact(**r) for r in rows]
    a_not_b = [f for f in facts if f.score_a >= thr]
    b_not_a = [f for f in facts if f.score_a < thr]
    return Comparison(sa.props.model_key, sb.props.model_key, sa.props.measure_key, thr,
                      a_not_b, b_not_a, counts)
