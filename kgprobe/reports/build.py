"""Building a knowledge-gap report: per relation (or subject type, or popularity bucket), what a model
knows, with n beside every figure and an interval only where n allows one.

Statistics (docs/reports.md):

* **mean score** of a group of facts with a 95% percentile-bootstrap interval from
  ``scipy.stats.bootstrap`` (1,000 resamples, ``numpy.random.default_rng`` seeded per group);
  the interval is given only when the group has at least ``MIN_N_CI`` (10) facts — below that
  the report says "n too small" instead of printing an interval that looks exact;
* **share known**: facts with score >= the run's threshold, as k/n;
* **popularity buckets**: tertiles of ``Entity.popularity`` of the subjects of ALL probed facts
  that have one (their edges, unit and n are reported; facts without popularity are counted);
* **staleness**: on a fact whose (subject, relation) had other objects in the past,
  stale(f) = share of the fact's cloze sentences on which the model prefers some past value to
  the current one (written by the probe); a group's staleness is the mean over its facts with a
  history, reported with that n;
* **with a second model** (``--vs``), on the facts both were scored on, per relation and
  overall: the paired difference of the means with a paired-bootstrap interval and McNemar's
  exact test on known (``kgprobe.stats``; docs/reports.md says why two marginal intervals are
  not the comparison);
* **chance level** of the measure where it declares one (``Measure.chance``).

Outputs: a rich table, CSV, JSON, Markdown and LaTeX tables (kgprobe.reports.text),
``results.json`` + ``harness.json`` + per-fact ``samples.jsonl`` (kgprobe.reports.results), one
self-contained HTML page whose plots are matplotlib SVG, inlined (no script, no external
resource), and each plot again as its own SVG and PNG file. Titles name the models as probed
(``Report.names``). Every number is computed here from the per-fact rows the graph returns.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from kgprobe.errors import ConfigError
from kgprobe.graph import probe_runs as pr
from kgprobe.graph import results as gres
from kgprobe.reports.data import Chance, Group, ModelReport, PairedGroup, Report, ReportFact
from kgprobe.stats import (
    BOOTSTRAP,
    MIN_N_CI,
    bootstrap_ci,
    group_seed,
    mcnemar,
    paired_bootstrap_ci,
)
from kgprobe.types import QID, MeasureKey, MeasureKeyParts, Properties

if TYPE_CHECKING:  # pragma: no cover

    from kgprobe.graph.client import Graph


_MEASURE_NAMES = {"kmin": "Min@{n}", "kavg": "Avg@{n}"}
_STRATEGIES = {"temp_sem": "temp+sem", "random": "random", "sem": "sem", "appropt": "appropt"}

BUCKETS = ("low", "mid", "high")
NO_POPULARITY = "no popularity"
NO_TYPE = "(no type)"
BY = ("relation", "type", "popularity")


def measure_label(key: str) -> str:
    """A human name for a measure key: ``kmin_temp_sem_n5`` -> "Min@5, temp+sem distractors"."""
    try:
        k = MeasureKeyParts.parse(key)
    except ConfigError:
        return key
    if k.name not in _MEASURE_NAMES or k.strategy is None:
        return key
    name = _MEASURE_NAMES[k.name].format(n=k.n)
    strategy = _STRATEGIES.get(k.strategy, k.strategy.replace("_", "+"))
    extra = f" ({k.rest.replace('_', ' ')})" if k.rest else ""
    return f"{name}, {strategy} distractors{extra}"




def interval(values: Sequence[float], seed: int, n_boot: int = BOOTSTRAP,
             min_n: int = MIN_N_CI) -> tuple[float | None, float | None]:
    """The bootstrap interval where n >= ``min_n``, else (None, None): "n too small"."""
    if len(values) < min_n:
        return None, None
    return bootstrap_ci(values, seed, n_boot)


def popularity_edges(values: Sequence[float]) -> list[float] | None:
    """Tertile edges (numpy's linear quantiles at 1/3 and 2/3); None for fewer than 3 values."""
    if len(values) < 3:
        return None
    q1, q2 = np.quantile(np.asarray(values, dtype=np.float64), [1 / 3, 2 / 3])
    return [float(q1), float(q2)]


def bucket_of(value: float | None, edges: list[float] | None) -> str | None:
    """low: below the first edge; mid: up to the second; high: at or above the second."""
    if value is None or edges is None:
        return None
    return "low" if value < edges[0] else ("mid" if value < edges[1] else "high")


def bucket_label(bucket: str, edges: list[float] | None) -> str:
    if edges is None or bucket not in BUCKETS:
        return bucket
    e = edges
    return {"low": f"low (< {e[0]:.2f})", "mid": f"mid ({e[0]:.2f} – {e[1]:.2f})",
            "high": f"high (≥ {e[1]:.2f})"}[bucket]


#: one seed per group, shared with every other place that bootstraps the same values
#: (kgprobe.stats.group_seed), so a number gets one interval wherever it is printed
_seed_of = group_seed

#: which groups a fact belongs to: (key, label) pairs (``--by type``: its classes)
KeysOf = Callable[[ReportFact], list[tuple[str, str | None]]]


def group_stats(
    key: str, label: str | None, rows: Sequence[Mapping[str, Any]], threshold: float,
    edges: list[float] | None, seed: int = 0, n_boot: int = BOOTSTRAP, with_buckets: bool = True,
) -> Group:
    """Aggregates of per-fact rows ``{score, stale, popularity}`` (a report's facts, a ladder's
    rows)."""
    scores = [float(r["score"]) for r in rows]
    s = _seed_of(seed, key)
    if not scores:
        return Group(key, label, 0, None, None, None, 0, None)
    lo, hi = interval(scores, s, n_boot)
    known = sum(1 for v in scores if v >= threshold)
    stale = [float(r["stale"]) for r in rows if r.get("stale") is not None]
    slo, shi = interval(stale, s + 1, n_boot) if stale else (None, None)
    g = Group(key, label, len(scores), float(np.mean(scores)), lo, hi, known, known / len(scores),
              len(stale), float(np.mean(stale)) if stale else None, slo, shi)
    if with_buckets and edges is not None:
        for b in BUCKETS:
            sub = [r for r in rows if bucket_of(as_float(r.get("popularity")), edges) == b]
            if sub:
                g.by_popularity[b] = group_stats(f"{key}:{b}", b, sub, threshold, None, seed, n_boot, False)
    return g


def paired_group(
    key: str, label: str | None, pairs: list[tuple[float, float]], threshold: float,
    seed: int = 0, n_boot: int = BOOTSTRAP,
) -> PairedGroup:
    """Two models' scores ``(a, b)`` on the same facts: both means, mean(b) − mean(a) with its
    paired-bootstrap interval (where n >= MIN_N_CI) and McNemar's exact test on known
    (score >= ``threshold``)."""
    xa = [a for a, _ in pairs]
    xb = [b for _, b in pairs]
    n = len(pairs)
    lo, hi = (paired_bootstrap_ci(xa, xb, _seed_of(seed, key) + 2, n_boot) if n >= MIN_N_CI
              else (None, None))
    ka = [v >= threshold for v in xa]
    kb = [v >= threshold for v in xb]
    mc = mcnemar(ka, kb)
    mean_a = float(np.mean(xa)) if n else None
    mean_b = float(np.mean(xb)) if n else None
    diff = mean_b - mean_a if mean_a is not None and mean_b is not None else None
    return PairedGroup(key, label, n, mean_a, mean_b, diff, lo, hi,
                       sum(ka), sum(kb), mc.b, mc.c, mc.p)


def paired_groups(
    rows_a: Sequence[ReportFact], rows_b: Sequence[ReportFact], order: list[str],
    labels: dict[str, str | None], threshold: float, seed: int = 0, n_boot: int = BOOTSTRAP,
) -> list[PairedGroup]:
    """Per relation (in ``order``, then any other) and ``all``: the facts both models were
    scored on, matched by fact key."""
    sb = {r["key"]: float(r["score"]) for r in rows_b}
    by_pid: dict[str, list[tuple[float, float]]] = {}
    every: list[tuple[float, float]] = []
    for r in rows_a:
        if r["key"] in sb:
            pair = (float(r["score"]), sb[r["key"]])
            by_pid.setdefault(r["pid"], []).append(pair)
            every.append(pair)
    pids = [p for p in order if p in by_pid] + sorted(p for p in by_pid if p not in order)
    return [*(paired_group(p, labels.get(p), by_pid[p], threshold, seed, n_boot) for p in pids),
            paired_group("all", "all facts", every, threshold, seed, n_boot)]


def _sorted(groups: list[Group]) -> list[Group]:
    """Best mean first; ties (and groups without a mean) by key; groups too small for an
    interval (n < MIN_N_CI) after all the others, so an n = 1 group never heads the list."""
    return sorted(groups, key=lambda g: (g.facts < MIN_N_CI, -(g.mean if g.mean is not None else -1.0),
                                         g.key))


def relation_stats(
    rows: Sequence[ReportFact], labels: Mapping[str, str | None], threshold: float,
    edges: list[float] | None, seed: int = 0, n_boot: int = BOOTSTRAP,
) -> tuple[list[Group], Group]:
    """Per-relation groups (sorted by mean, best first) and the overall group."""
    by_pid: dict[str, list[ReportFact]] = {}
    for r in rows:
        by_pid.setdefault(r["pid"], []).append(r)
    per = [group_stats(p, labels.get(p), rs, threshold, edges, seed, n_boot) for p, rs in by_pid.items()]
    return _sorted(per), group_stats("all", "all facts", rows, threshold, edges, seed, n_boot)


def grouped(
    rows: Sequence[ReportFact], keys_of: KeysOf,
    threshold: float, edges: list[float] | None, seed: int = 0, n_boot: int = BOOTSTRAP,
) -> list[Group]:
    """Groups by any key function; a fact may belong to several groups (its types)."""
    members: dict[str, list[ReportFact]] = {}
    names: dict[str, str | None] = {}
    for r in rows:
        for k, name in keys_of(r):
            members.setdefault(k, []).append(r)
            names.setdefault(k, name)
    return _sorted([group_stats(k, names[k], rs, threshold, edges, seed, n_boot) for k, rs in members.items()])


def type_closure(
    direct: dict[str, list[tuple[str, str | None]]], subclass_edges: Sequence[gres.SubclassEdge]
) -> dict[str, dict[str, str | None]]:
    """Each entity's classes closed over P279: its direct classes and all their superclasses
    (networkx descendants of the SUBCLASS_OF digraph, edges sub -> super)."""
    import networkx as nx

    g = nx.DiGraph()
    labels: dict[str, str | None] = {}
    for e in subclass_edges:
        g.add_edge(e["sub"], e["super"])
        labels.setdefault(e["sub"], e.get("sub_label"))
        labels.setdefault(e["super"], e.get("super_label"))
    out: dict[str, dict[str, str | None]] = {}
    for qid, classes in direct.items():
        closed: dict[str, str | None] = {}
        for c, lab in classes:
            closed[c] = lab or labels.get(c)
            if c in g:
                for sup in nx.descendants(g, c):
                    closed.setdefault(sup, labels.get(sup))
        out[qid] = closed
    return out


def reliability_bins(pairs: Sequence[tuple[float, bool]], bins: int = 10) -> list[dict[str, float]]:
    """Calibration of per-fact (confidence, correct) pairs: equal-width confidence bins on [0, 1]
    (the last closed), each with n, mean confidence and accuracy; empty bins left out."""
    out = []
    for i in range(bins):
        lo, hi = i / bins, (i + 1) / bins
        inside = [(c, ok) for c, ok in pairs if lo <= c < hi or (i == bins - 1 and c == 1.0)]
        if inside:
            out.append({"low": lo, "high": hi, "n": len(inside),
                        "confidence": float(np.mean([c for c, _ in inside])),
                        "accuracy": float(np.mean([1.0 if ok else 0.0 for _, ok in inside]))})
    return out


def as_float(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None



_RUN_FIELDS = ("id", "status", "started", "finished", "seconds", "model", "model_key",
               "model_fingerprint", "model_kind", "model_base_url", "dtype", "device", "code_version", "git_hash",
               "strategy", "n", "seed", "threshold", "sample", "history_first", "shard",
               "batch_facts", "max_templates", "label_rule", "reference_date", "config_hash",
               "measure_keys", "facts_planned", "facts_skipped", "facts_scored", "facts_unscorable",
               "probe_set")
_RUN_JSON = ("measure_params", "graph_snapshot", "library_versions", "templates", "environment")


def run_info(graph: Graph, run_ids: Sequence[str]) -> list[Properties]:
    """The provenance of each run (ProbeRun node), JSON properties decoded."""
    runs = (pr.get_run(graph, rid) for rid in run_ids)
    return [run_fields(run) for run in runs if run is not None]


def run_fields(run: Mapping[str, Any]) -> Properties:
    """A ProbeRun's properties as a report shows them (read by ``provenance.read_run``: JSON
    properties decoded)."""
    from kgprobe.provenance import read_run

    record = read_run(run)
    return {k: getattr(record, k) for k in (*_RUN_FIELDS, *_RUN_JSON)}


def _type_keys(graph: Graph, rows: Sequence[ReportFact], side: str) -> KeysOf:
    def end(r: ReportFact) -> QID:
        return r["subject"] if side == "subject" else r["object"]

    qids = {end(r) for r in rows}
    direct: dict[str, list[tuple[str, str | None]]] = {}
    for r in gres.entity_classes(graph, qids):
        direct.setdefault(r["qid"], []).append((r["class"], r["label"]))
    closed = type_closure(direct, gres.subclass_edges(graph))

    def keys(row: ReportFact) -> list[tuple[str, str | None]]:
        classes = closed.get(end(row))
        return sorted(classes.items()) if classes else [(NO_TYPE, None)]

    return keys


def check_grouping(by: str, type_of: str) -> None:
    """Refuse an unknown grouping before anything else happens."""
    if by not in BY:
        raise ConfigError(f"unknown --by {by!r}; choose from: {', '.join(BY)}")
    if type_of not in ("subject", "object"):
        raise ConfigError(f"unknown --type-of {type_of!r}; choose subject or object")


def build_report(
    graph: Graph, model: str, *, vs: str | None = None, measure: str | None = None,
    threshold: float | None = None, seed: int = 0, n_boot: int = BOOTSTRAP, by: str = "relation",
    type_of: str = "subject", calibration: list[tuple[float, bool]] | None = None,
    facts: Collection[str] | None = None, vs_measure: str | None = None,
    relations: Collection[str] = (),
) -> Report:
    """Read the scores of ``model`` (and ``vs``) from the graph and compute the report; with
    ``facts`` (fact keys: one probe run's sample) on those facts only. ``vs_measure``: compare
    ``model`` with itself under another measure key instead of with another model (e.g. the
    same measure with raw labels, ``kmin_temp_sem_n5_vraw``), paired on the same facts and at
    the primary's threshold. ``relations`` (PIDs): only their facts, in every table, figure
    and count of the report (a relation the model has no score in is one line)."""
    from kgprobe.probing.measures.catalog import rank_scales
    from kgprobe.probing.scores import compare_in, paired_scores, resolve_scores
    from kgprobe.provenance import code_version

    check_grouping(by, type_of)
    if vs is not None and vs_measure is not None:
        raise ConfigError("compare with another model (--vs) or another measure key (--vs-measure), not both")
    sb = None
    if vs is not None:  # one measure key for both (the latest they share, unless given)
        sa, sb = paired_scores(graph, model, vs, measure, threshold)
    else:
        sa = resolve_scores(graph, model, measure, threshold, strict=False)
        if vs_measure is not None:
            sb = resolve_scores(graph, model, vs_measure, sa.threshold)
            if sb.props == sa.props:
                raise ConfigError(f"--vs-measure {vs_measure} is the report's own measure key")

    scope = "all" if facts is None else "run"
    if relations:  # as a set of fact keys: every part of the report reads those facts only
        pick = {p.strip().upper() for p in relations}
        own = gres.fact_rows(graph, sa.props, [])
        keys = {r["key"] for r in [*own, *(gres.fact_rows(graph, sb.props, []) if sb is not None else [])]
                if r["pid"] in pick}
        missing = sorted(pick - {r["pid"] for r in own})
        if missing:
            raise ConfigError(f"--relation {', '.join(missing)}: {model} has no "
                              f"{sa.props.measure_key} score there")
        facts = keys if facts is None else set(facts) & keys
        scope = f"{scope}, relations {', '.join(sorted(pick, key=lambda p: int(p[1:])))}"

    def rows_of(sc: Any) -> tuple[list[ReportFact], str | None, list[ReportFact]]:
        """The rows of the figures, their rank scale (BELIEF) and the rows of other scales."""
        runs = run_info(graph, sc.runs)
        keys = sorted({k for r in runs for k in (r.get("measure_keys") or [])} - {sc.props.measure_key})
        # the rows of FACT_ROWS: one cast where they come back
        rows = cast(list[ReportFact], gres.fact_rows(graph, sc.props,
                                                     [pr.ScoreProps(sc.props.model_key, k) for k in keys]))
        rows = rows if facts is None else [r for r in rows if r["key"] in wanted]
        scales = rank_scales(graph, sc.props.model_key, sc.props.measure_key)
        if scales is None:
            return rows, None, []
        primary, of = scales
        for r in rows:
            r["scale"] = of.get(r["key"], "unseparated")
        return ([r for r in rows if r["scale"] == primary], primary,
                [r for r in rows if r["scale"] != primary])

    wanted = frozenset(facts or ())

    rows_a, scale_a, apart_a = rows_of(sa)
    rows_b, scale_b, apart_b = rows_of(sb) if sb is not None else ([], None, [])
    pops = [p for p in (as_float(r.get("popularity")) for r in rows_a) if p is not None]
    edges = popularity_edges(pops)
    labels = pr.relation_labels(graph, {r["pid"] for r in rows_a} | {r["pid"] for r in rows_b})
    keys_of: KeysOf | None = None
    if by == "type":
        keys_of = _type_keys(graph, rows_a + rows_b, type_of)
    elif by == "popularity":
        def keys_of(row: ReportFact) -> list[tuple[str, str | None]]:
            b = bucket_of(as_float(row.get("popularity")), edges)
            return [(b, bucket_label(b, edges))] if b else [(NO_POPULARITY, None)]

    def model_report(sc: Any, rows: list[ReportFact], scale: str | None = None,
                     apart_rows: Sequence[ReportFact] = ()) -> ModelReport:
        per, overall = relation_stats(rows, labels, sc.threshold, edges, seed, n_boot)
        groups = per if keys_of is None else grouped(rows, keys_of, sc.threshold, edges, seed, n_boot)
        # with ``facts``: only the runs that wrote the scores shown
        runs = list(sc.runs) if facts is None else [r for r in sc.runs
                                                    if r in {row.get("run") for row in [*rows, *apart_rows]}]
        label = measure_label(sc.props.measure_key)
        apart: dict[str, list[Group]] = {}
        for other in sorted({str(r["scale"]) for r in apart_rows}):
            o_per, o_all = relation_stats([r for r in apart_rows if r["scale"] == other], labels,
                                          sc.threshold, None, seed, n_boot)
            apart[other] = [*o_per, o_all]
        return ModelReport(sc.model, sc.props.model_key, sc.props.measure_key,
                           label if scale is None else f"{label} ({scale}-scale ranks)",
                           sc.props.score, sc.threshold, runs, per, overall, groups,
                           run_info(graph, runs), rows, scale, apart, list(apart_rows))

    comparison = None
    paired: list[PairedGroup] = []
    ra = model_report(sa, rows_a, scale_a, apart_a)
    if vs is not None:
        comparison = compare_in(graph, model, vs, measure=sa.props.measure_key, threshold=sa.threshold).counts
    elif sb is not None:
        comparison = pr.compare_facts(graph, sa.props, sb.props, sa.threshold)[1]
    if sb is not None:
        paired = paired_groups(rows_a, rows_b, [g.key for g in ra.relations], labels, sa.threshold,
                               seed, n_boot)
    from kgprobe.probing.measures.catalog import (
        belief_calibration,
        chance_level,
        relation_aggregates,
    )

    level = chance_level(graph, sa.props.model_key, sa.props.measure_key)

    if calibration is None:
        calibration = belief_calibration(graph, sa.props.model_key)
    return Report(
        ra, model_report(sb, rows_b, scale_b, apart_b) if sb is not None else None,
        edges, comparison, seed, n_boot, by=by, type_of=type_of, popularity_facts=len(pops),
        generated=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), code=code_version(),
        calibration=calibration,
        measures=relation_aggregates(graph, sa.props.model_key, seed=seed,
                                     facts=wanted if facts is not None else None),
        paired=paired, chance=Chance(*level) if level is not None else None,
        scope=scope,
    )


def set_report(
    set_header: Mapping[str, Any], set_rows: Sequence[Mapping[str, Any]],
    scores_header: Mapping[str, Any], score_rows: Sequence[Mapping[str, Any]], *,
    measure: str | None = None, seed: int = 0,
    n_boot: int = BOOTSTRAP,
) -> Report:
    """The report of one scored probe set (``kgprobe probe --set``), with no graph: the same
    figures :func:`build_report` computes for the same run's facts from the graph (scope
    "run"), read from the set (labels, popularity, relation labels) and its scores (the FACT
    properties and the ProbeRun's record). ``measure``: the measure key (default: the run's
    first). By relation only; with a rank-scale measure (BELIEF) the primary scale's facts
    make the figures and the others are apart, as from the graph."""
    from kgprobe.probing.measures.catalog import chance_of, load_all, measure_aggregates
    from kgprobe.provenance import MeasureSpec, code_version, read_run

    run = {**scores_header["run"], **scores_header["final"], "id": scores_header["run_id"]}
    model_key = str(scores_header["model_key"])
    keys = list(run.get("measure_keys") or [])
    mkey = measure or (keys[0] if keys else "")
    if mkey not in keys:
        raise ConfigError(f"measure key {mkey!r} was not scored in this run; choose from: {', '.join(keys)}")
    specs: dict[str, MeasureSpec] = {sp["key"]: sp for sp in read_run(run).measure_specs or []}
    facts = {r["key"]: r for r in set_rows}
    props = {r["key"]: json.loads(r["props"]) for r in score_rows if r["measure"] == mkey}
    values: dict[str, dict[MeasureKey, float]] = {}  # key -> measure key -> score
    for r in score_rows:
        if r["score"] is not None:
            values.setdefault(r["key"], {})[r["measure"]] = float(r["score"])
    sp = pr.ScoreProps(model_key, mkey)
    rows: list[ReportFact] = []
    for key in sorted(k for k in props if values.get(k, {}).get(mkey) is not None):
        f, p = facts[key], props[key]
        rows.append({"key": key, "pid": f["pid"], "subject": f["s"], "object": f["o"],
                     "subject_label": f.get("subject_label"), "object_label": f.get("object_label"),
                     "popularity": f.get("popularity"), "object_popularity": f.get("object_popularity"),
                     "score": values[key][mkey], "stale": p.get(sp.stale), "run": p.get(sp.run),
                     "others": {k: values[key].get(k) for k in keys if k != mkey}})
    spec = specs.get(mkey) or MeasureSpec(name=MeasureKeyParts.parse(mkey).name, key=mkey, params={}, extras=[],
                                          section="")
    cls = load_all().get(spec["name"])
    scale: str | None = None
    apart_rows: list[ReportFact] = []
    if cls is not None and "scale" in (spec.get("extras") or []) and hasattr(cls, "primary_scale"):
        scale = str(cls(spec.get("params")).primary_scale())  # type: ignore[attr-defined]
        for r in rows:
            r["scale"] = str(props[r["key"]].get(sp.extra("scale")) or "unseparated")
        apart_rows = [r for r in rows if r["scale"] != scale]
        rows = [r for r in rows if r["scale"] == scale]
    threshold = float(run["threshold"])
    labels: dict[str, str | None] = dict(set_header.get("relation_labels") or {})
    pops = [p for p in (as_float(r.get("popularity")) for r in rows) if p is not None]
    edges = popularity_edges(pops)
    per, overall = relation_stats(rows, labels, threshold, edges, seed, n_boot)
    apart: dict[str, list[Group]] = {}
    for other in sorted({str(r["scale"]) for r in apart_rows}):
        o_per, o_all = relation_stats([r for r in apart_rows if r["scale"] == other], labels,
                                      threshold, None, seed, n_boot)
        apart[other] = [*o_per, o_all]
    label = measure_label(mkey)
    primary = ModelReport(str(run.get("model") or model_key), model_key, mkey,
                          label if scale is None else f"{label} ({scale}-scale ranks)", sp.score,
                          threshold, [run["id"]], per, overall, per, [run_fields(run)], rows,
                          scale, apart, apart_rows)
    aggregates = []
    for k in keys:
        spec_k = specs.get(k)
        if spec_k is None:
            continue
        names = {"score": pr.ScoreProps(model_key, k).score,
                 **{e: pr.ScoreProps(model_key, k).extra(e) for e in spec_k.get("extras") or []}}
        m_rows = []
        for r in score_rows:
            if r["measure"] == k and r["score"] is not None:
                p = json.loads(r["props"])
                m_rows.append({"key": r["key"], "pid": r["pid"], **{n: p.get(v) for n, v in names.items()}})
        m_rows.sort(key=lambda r: r["key"])  # the graph's order (ORDER BY key): the same resamples
        aggregates.extend(measure_aggregates(spec_k["name"], k, spec_k.get("params"), m_rows, seed=seed))
    level = chance_of(spec["name"], mkey)
    return Report(primary, None, edges, None, seed, n_boot, by="relation",
                  popularity_facts=len(pops),
                  generated=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), code=code_version(),
                  measures=aggregates, chance=Chance(*level) if level is not None else None, scope="run")
