"""Knowledge-gap reports: per relation (or subject type, or popularity bucket), what a model
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

Outputs: a rich table, CSV, JSON, ``results.json`` + per-fact ``samples.jsonl`` (kgprobe.results)
and one self-contained HTML page whose plots are matplotlib SVG, inlined (no script, no external
resource). Every number is computed here from the per-fact rows the graph returns.
"""

from __future__ import annotations

import datetime as dt
import html
import io
import json
import re
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kgprobe.graph import probe_runs as pr
from kgprobe.graph import results as gres
from kgprobe.report_data import POPULARITY_UNIT as POPULARITY_UNIT
from kgprobe.report_data import Chance, Group, ModelReport, PairedGroup, Report
from kgprobe.report_data import RelationStats as RelationStats  # kept for callers
from kgprobe.stats import BOOTSTRAP, MIN_N_CI, mcnemar, paired_bootstrap_ci
from kgprobe.stats import bootstrap_ci as bootstrap_ci  # moved to kgprobe.stats; kept here

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from kgprobe.config import Settings
    from kgprobe.graph.client import Graph

BUCKETS = ("low", "mid", "high")
NO_POPULARITY = "no popularity"
NO_TYPE = "(no type)"
BY = ("relation", "type", "popularity")
TOO_SMALL = "n too small"


# --- names -------------------------------------------------------------------------------------

_MEASURE_NAMES = {"kmin": "Min@{n}", "kavg": "Avg@{n}"}
_KEY = re.compile(r"^(?P<m>[a-z0-9]+)_(?P<s>[a-z0-9_]+?)_n(?P<n>\d+)(?P<rest>_[a-z0-9_]+)?$")
_STRATEGIES = {"temp_sem": "temp+sem", "random": "random", "sem": "sem", "appropt": "appropt"}


def measure_label(key: str) -> str:
    """A human name for a measure key: ``kmin_temp_sem_n5`` -> "Min@5, temp+sem distractors"."""
    m = _KEY.match(key)
    if not m or m["m"] not in _MEASURE_NAMES:
        return key
    name = _MEASURE_NAMES[m["m"]].format(n=m["n"])
    strategy = _STRATEGIES.get(m["s"], m["s"].replace("_", "+"))
    extra = f" ({m['rest'][1:].replace('_', ' ')})" if m["rest"] else ""
    return f"{name}, {strategy} distractors{extra}"


# --- statistics ---------------------------------------------------------------------------------


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


def _seed_of(seed: int, key: str) -> int:
    """A per-group seed, stable across runs: adding a group does not move another's interval."""
    digits = int(re.sub(r"\D", "", key) or 0)
    return (seed * 1_000_003 + digits * 31 + sum(map(ord, key))) % 2**32


def group_stats(
    key: str, label: str | None, rows: list[dict[str, Any]], threshold: float,
    edges: list[float] | None, seed: int = 0, n_boot: int = BOOTSTRAP, with_buckets: bool = True,
) -> Group:
    """Aggregates of per-fact rows ``{score, stale, popularity}``."""
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
            sub = [r for r in rows if bucket_of(_num(r.get("popularity")), edges) == b]
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
    rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]], order: list[str],
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
    """Best mean first; ties (and groups without a mean) by key."""
    return sorted(groups, key=lambda g: (-(g.mean if g.mean is not None else -1.0), g.key))


def relation_stats(
    rows: list[dict[str, Any]], labels: dict[str, str | None], threshold: float,
    edges: list[float] | None, seed: int = 0, n_boot: int = BOOTSTRAP,
) -> tuple[list[Group], Group]:
    """Per-relation groups (sorted by mean, best first) and the overall group."""
    by_pid: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_pid.setdefault(r["pid"], []).append(r)
    per = [group_stats(p, labels.get(p), rs, threshold, edges, seed, n_boot) for p, rs in by_pid.items()]
    return _sorted(per), group_stats("all", "all facts", rows, threshold, edges, seed, n_boot)


def grouped(
    rows: list[dict[str, Any]], keys_of: Callable[[dict[str, Any]], list[tuple[str, str | None]]],
    threshold: float, edges: list[float] | None, seed: int = 0, n_boot: int = BOOTSTRAP,
) -> list[Group]:
    """Groups by any key function; a fact may belong to several groups (its types)."""
    members: dict[str, list[dict[str, Any]]] = {}
    names: dict[str, str | None] = {}
    for r in rows:
        for k, name in keys_of(r):
            members.setdefault(k, []).append(r)
            names.setdefault(k, name)
    return _sorted([group_stats(k, names[k], rs, threshold, edges, seed, n_boot) for k, rs in members.items()])


def type_closure(
    direct: dict[str, list[tuple[str, str | None]]], subclass_edges: list[dict[str, Any]]
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


def _num(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


# --- building -------------------------------------------------------------------------------------

_RUN_FIELDS = ("id", "status", "started", "finished", "model", "model_key", "model_fingerprint",
               "model_kind", "dtype", "device", "code_version", "git_hash", "strategy", "n", "seed",
               "threshold", "sample", "reference_date", "config_hash", "measure_keys")
_RUN_JSON = ("measure_params", "graph_snapshot", "library_versions", "templates")


def run_info(graph: Graph, run_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The provenance of each run (ProbeRun node), JSON properties decoded."""
    out = []
    for rid in run_ids:
        run = pr.get_run(graph, rid)
        if run is None:
            continue
        info = {k: run.get(k) for k in _RUN_FIELDS}
        for k in _RUN_JSON:
            try:
                info[k] = json.loads(run[k]) if isinstance(run.get(k), str) else run.get(k)
            except ValueError:
                info[k] = run.get(k)
        out.append(info)
    return out


def _type_keys(graph: Graph, rows: list[dict[str, Any]], side: str) -> Callable[[dict[str, Any]], list[tuple[str, str | None]]]:
    col = "subject" if side == "subject" else "object"
    qids = {r[col] for r in rows}
    direct: dict[str, list[tuple[str, str | None]]] = {}
    for r in gres.entity_classes(graph, qids):
        direct.setdefault(r["qid"], []).append((r["class"], r["label"]))
    closed = type_closure(direct, gres.subclass_edges(graph))

    def keys(row: dict[str, Any]) -> list[tuple[str, str | None]]:
        classes = closed.get(row[col])
        return sorted(classes.items()) if classes else [(NO_TYPE, None)]

    return keys


def check_grouping(by: str, type_of: str) -> None:
    """Refuse an unknown grouping before anything else happens."""
    from kgprobe.errors import ConfigError

    if by not in BY:
        raise ConfigError(f"unknown --by {by!r}; choose from: {', '.join(BY)}")
    if type_of not in ("subject", "object"):
        raise ConfigError(f"unknown --type-of {type_of!r}; choose subject or object")


def build_report(
    graph: Graph, model: str, *, vs: str | None = None, measure: str | None = None,
    threshold: float | None = None, seed: int = 0, n_boot: int = BOOTSTRAP, by: str = "relation",
    type_of: str = "subject", calibration: list[tuple[float, bool]] | None = None,
) -> Report:
    """Read the scores of ``model`` (and ``vs``) from the graph and compute the report."""
    from kgprobe.probing.scores import compare_in, paired_scores, resolve_scores
    from kgprobe.provenance import code_version

    check_grouping(by, type_of)
    sb = None
    if vs is not None:  # one measure key for both (the latest they share, unless given)
        sa, sb = paired_scores(graph, model, vs, measure, threshold)
    else:
        sa = resolve_scores(graph, model, measure, threshold)

    def rows_of(sc: Any) -> list[dict[str, Any]]:
        runs = run_info(graph, sc.runs)
        keys = sorted({k for r in runs for k in (r.get("measure_keys") or [])} - {sc.props.measure_key})
        return gres.fact_rows(graph, sc.props, [pr.ScoreProps(sc.props.model_key, k) for k in keys])

    rows_a = rows_of(sa)
    rows_b = rows_of(sb) if sb is not None else []
    pops = [p for p in (_num(r.get("popularity")) for r in rows_a) if p is not None]
    edges = popularity_edges(pops)
    labels = pr.relation_labels(graph, {r["pid"] for r in rows_a} | {r["pid"] for r in rows_b})
    keys_of: Callable[[dict[str, Any]], list[tuple[str, str | None]]] | None = None
    if by == "type":
        keys_of = _type_keys(graph, rows_a + rows_b, type_of)
    elif by == "popularity":
        def keys_of(row: dict[str, Any]) -> list[tuple[str, str | None]]:
            b = bucket_of(_num(row.get("popularity")), edges)
            return [(b, bucket_label(b, edges))] if b else [(NO_POPULARITY, None)]

    def model_report(sc: Any, rows: list[dict[str, Any]]) -> ModelReport:
        per, overall = relation_stats(rows, labels, sc.threshold, edges, seed, n_boot)
        groups = per if keys_of is None else grouped(rows, keys_of, sc.threshold, edges, seed, n_boot)
        return ModelReport(sc.model, sc.props.model_key, sc.props.measure_key,
                           measure_label(sc.props.measure_key), sc.props.score, sc.threshold,
                           list(sc.runs), per, overall, groups, run_info(graph, sc.runs), rows)

    comparison = None
    paired: list[PairedGroup] = []
    ra = model_report(sa, rows_a)
    if vs is not None:
        comparison = compare_in(graph, model, vs, measure=sa.props.measure_key, threshold=sa.threshold).counts
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
        ra, model_report(sb, rows_b) if sb is not None else None,
        edges, comparison, seed, n_boot, by=by, type_of=type_of, popularity_facts=len(pops),
        generated=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), code=code_version(),
        calibration=calibration,
        measures=relation_aggregates(graph, sa.props.model_key, seed=seed),
        paired=paired, chance=Chance(*level) if level is not None else None,
    )


def report(
    model: str, *, vs: str | None = None, out: str | Path | None = None, measure: str | None = None,
    threshold: float | None = None, seed: int = 0, by: str = "relation", type_of: str = "subject",
    settings: Settings | None = None, graph: Graph | None = None,
    details: dict[str, dict[str, Any]] | None = None,
) -> tuple[Report, dict[str, Path]]:
    """Build the report and, with ``out``, write the report files and the results file there
    (paths returned). ``details``: per-fact distractor records from a probe (kgprobe.results)."""
    from kgprobe.graph.client import connect

    check_grouping(by, type_of)  # before the graph is contacted
    if out is not None:
        from kgprobe.outputs import check_output_dir

        check_output_dir(out)
    g = graph if graph is not None else connect(settings)
    try:
        rep = build_report(g, model, vs=vs, measure=measure, threshold=threshold, seed=seed, by=by,
                           type_of=type_of)
    finally:
        if graph is None:
            g.close()
    paths = write_report(rep, out, details=details) if out is not None else {}
    return rep, paths


# --- text output ----------------------------------------------------------------------------------


def _fmt(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "–"
    return f"{100 * v:.0f}%" if pct else f"{v:.3f}"


def _ci(g: Group | None) -> str:
    if g is None or g.mean is None:
        return "–"
    if g.ci_low is None or g.ci_high is None:
        return f"{g.mean:.3f} ({TOO_SMALL})"
    return f"{g.mean:.3f} [{g.ci_low:.3f}, {g.ci_high:.3f}]"


def _known(g: Group | None) -> str:
    if g is None or g.known_share is None:
        return "–"
    return f"{g.known}/{g.facts} ({100 * g.known_share:.0f}%)"


def _stale(g: Group | None) -> str:
    if g is None or g.staleness is None:
        return "–"
    ci = (f" [{100 * g.stale_ci_low:.0f}, {100 * g.stale_ci_high:.0f}]"
          if g.stale_ci_low is not None and g.stale_ci_high is not None else "")
    return f"{100 * g.staleness:.0f}%{ci} (n={g.history_facts})"


def _diff(pg: PairedGroup) -> str:
    """The paired difference with its interval, or "n too small" (the same rule as means)."""
    if pg.diff is None:
        return "–"
    if pg.diff_ci_low is None or pg.diff_ci_high is None:
        return f"{pg.diff:+.3f} ({TOO_SMALL})"
    return f"{pg.diff:+.3f} [{pg.diff_ci_low:+.3f}, {pg.diff_ci_high:+.3f}]"


def _p(p: float) -> str:
    return f"{p:.3g}"


def _chance(rep: Report) -> str:
    if rep.chance is None:
        return "chance level: not defined for this measure"
    return (f"chance level: {rep.chance.level:.3f} ({rep.chance.rule}; what a model that knows "
            "nothing scores in expectation)")


def _paired_note(rep: Report) -> str:
    a = rep.primary.model_key
    b = rep.other.model_key if rep.other is not None else "B"
    return (f"paired: the same facts for both models; difference = mean({b}) − mean({a}) with a "
            f"95% paired bootstrap (facts resampled, the same facts for both; only where n ≥ "
            f"{rep.min_n_ci}); McNemar's exact test on known: b = only {a} knows, c = only {b} "
            "knows, two-sided p")


def _by_title(rep: Report) -> str:
    return {"relation": "relation", "popularity": "popularity of the subject",
            "type": f"type of the {rep.type_of} (P31 closed over P279)"}[rep.by]


def print_report(rep: Report, console: Console) -> None:
    from rich.table import Table
    from rich.text import Text

    a, b = rep.primary, rep.other
    title = f"{a.model_key}: {a.measure_label} (known ≥ {a.threshold:g}), by {_by_title(rep)}"
    cols = [rep.by, "n", "mean [95% CI]", "known", "stale (n)"]
    if b is not None:
        title += f"  vs  {b.model_key}"
        cols += [f"{b.model_key} n", f"{b.model_key} mean [95% CI]", f"{b.model_key} known",
                 f"{b.model_key} stale (n)"]
    table = Table(*cols, title=Text(title))
    b_by = {g.key: g for g in b.groups} if b is not None else {}
    for g in [*a.groups, a.overall]:
        row = [g.name, str(g.facts), _ci(g), _known(g), _stale(g)]
        if b is not None:
            gb = b.overall if g.key == "all" else b_by.get(g.key)
            row += [str(gb.facts) if gb else "–", _ci(gb), _known(gb), _stale(gb)]
        table.add_row(*map(Text, row), end_section=bool(a.groups) and g.key == a.groups[-1].key)
    console.print(table)
    console.print(f"intervals: 95% percentile bootstrap ({rep.bootstrap} resamples, seed {rep.seed}), "
                  f"only for n ≥ {rep.min_n_ci}", highlight=False)
    console.print(_chance(rep), highlight=False)
    if rep.popularity_edges is not None and rep.by != "popularity":
        pcols = ["popularity", "n", "mean [95% CI]", "known"]
        if b is not None:
            pcols += [f"{b.model_key} n", f"{b.model_key} mean [95% CI]", f"{b.model_key} known"]
        pt = Table(*pcols, title=Text(f"by popularity of the subject ({rep.popularity_facts} of "
                                      f"{a.overall.facts} facts have one; tertile edges"
                                      + (f", the same for {b.model_key}" if b is not None else "") + ")"))
        for bname, g in a.overall.by_popularity.items():
            prow = [bucket_label(bname, rep.popularity_edges), str(g.facts), _ci(g), _known(g)]
            if b is not None:
                prow += _bucket_cells(b.overall.by_popularity.get(bname))
            pt.add_row(*map(Text, prow))
        console.print(pt)
    if rep.comparison is not None and b is not None:
        c = rep.comparison
        console.print(
            Text(f"on {c['both_probed']} facts probed for both: {a.model_key} knows {c['a_known']}, "
                   f"{b.model_key} knows {c['b_known']}, both {c['both_known']}"), highlight=False,
        )
    if rep.paired and b is not None:
        ptab = Table("relation", "n", f"{a.model_key} mean", f"{b.model_key} mean",
                     f"{b.model_key} − {a.model_key} [95% paired CI]", f"known {a.model_key} / {b.model_key}",
                     "McNemar b / c", "p",
                     title=Text(f"paired: {b.model_key} vs {a.model_key} on the same facts"))
        for pg in rep.paired:
            ptab.add_row(*map(Text, [pg.name, str(pg.facts), _fmt(pg.mean_a), _fmt(pg.mean_b), _diff(pg),
                                     f"{pg.a_known} / {pg.b_known}", f"{pg.b} / {pg.c}", _p(pg.p)]),
                         end_section=len(rep.paired) > 1 and pg is rep.paired[-2])
        console.print(ptab)
        console.print(Text(_paired_note(rep)), highlight=False)
    others = _other_measures(rep)
    if others:
        mt = Table("measure", "relation", "facts", "mean [95% CI]", "more",
                   title=f"other measures probed for {a.model_key}")
        for mrow in others:
            sc = mrow.get("score") or {}
            more = ", ".join(f"{k} {v['mean']:.3f}" for k, v in mrow.items()
                             if isinstance(v, dict) and k != "score" and isinstance(v.get("mean"), float))
            ci = ("" if sc.get("ci_low") is None
                  else f" [{sc['ci_low']:.3f}, {sc['ci_high']:.3f}]")
            mean = "–" if sc.get("mean") is None else f"{sc['mean']:.3f}{ci}"
            mt.add_row(Text(mrow["measure_key"]), mrow["pid"], str(sc.get("n", 0)), mean, Text(more))
        console.print(mt)


def write_report(
    rep: Report, out: str | Path, *, details: dict[str, dict[str, Any]] | None = None
) -> dict[str, Path]:
    """report.json, relations.csv, groups.csv, popularity.csv, paired.csv (with a second
    model), report.html, results.json and
    samples.jsonl (+ samples.parquet with pyarrow) in ``out``, put in place as one output
    (kgprobe.outputs.write_files: a failed write leaves the previous report whole, and files
    of a previous report that this one does not write are removed). CSV text cells go through
    the spreadsheet-formula rule (kgprobe.outputs.csv_cell)."""
    from kgprobe.outputs import csv_text, write_files
    from kgprobe.results import results_files

    head = ["model", "measure", "key", "label", "facts", "mean", "ci_low", "ci_high",
            "known", "known_share", "history_facts", "staleness"]
    models = [m for m in (rep.primary, rep.other) if m is not None]

    def groups_csv(attr: str) -> str:
        return csv_text(head, (
            [m.model_key, m.measure_key, g.key, g.label or "", g.facts, g.mean, g.ci_low, g.ci_high,
             g.known, g.known_share, g.history_facts, g.staleness]
            for m in models for g in [*getattr(m, attr), m.overall]))

    names = {"json": "report.json", "csv": "relations.csv", "popularity_csv": "popularity.csv",
             "html": "report.html"}
    files: dict[str, str | bytes] = {
        "report.json": json.dumps(rep.to_dict(), indent=1, ensure_ascii=False),
        "relations.csv": groups_csv("relations"),
    }
    if rep.by != "relation":
        names["groups_csv"] = f"by_{rep.by}.csv"
        files[names["groups_csv"]] = groups_csv("groups")
    files["popularity.csv"] = csv_text(
        ["model", "key", "bucket", "edges", "facts", "mean", "ci_low", "ci_high", "known_share"],
        ([m.model_key, g.key, bname, bucket_label(bname, rep.popularity_edges),
          bg.facts, bg.mean, bg.ci_low, bg.ci_high, bg.known_share]
         for m in models for g in [*m.relations, m.overall] for bname, bg in g.by_popularity.items()))
    if rep.paired and rep.other is not None:
        names["paired_csv"] = "paired.csv"
        files["paired.csv"] = csv_text(
            ["model_a", "model_b", "measure", "key", "label", "facts", "mean_a", "mean_b", "diff",
             "diff_ci_low", "diff_ci_high", "a_known", "b_known", "mcnemar_b", "mcnemar_c", "mcnemar_p"],
            ([rep.primary.model_key, rep.other.model_key, rep.primary.measure_key, pg.key, pg.label or "",
              pg.facts, pg.mean_a, pg.mean_b, pg.diff, pg.diff_ci_low, pg.diff_ci_high, pg.a_known,
              pg.b_known, pg.b, pg.c, pg.p] for pg in rep.paired))
    files["report.html"] = render_html(rep)
    result_names, result_files = results_files(rep, details)
    files.update(result_files)
    names.update(result_names)
    written = write_files(out, files)
    return {key: written[name] for key, name in names.items()}


# --- plots: matplotlib, SVG, inlined -----------------------------------------------------------------

_COLORS = ("#3b6fb6", "#d9822b")


def _svg(fig: Any, name: str) -> str:
    """The figure as an inline <svg> element: text kept as text (readable, searchable), ids
    salted per figure so that several figures on one page never share a clip-path id."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"kgprobe-{name}"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", buf.getvalue(), flags=re.S)
    text = re.sub(r'\s+xmlns:(?:dc|cc|rdf)="[^"]*"', "", text)
    return f'<figure class="plot" id="plot-{name}">{text[text.find("<svg"):]}</figure>'


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    fig.set_layout_engine("constrained")
    return fig


def _wrap(text: str, width: int = 34) -> str:
    """Wrapped for a tick label; ``$`` escaped so that matplotlib never reads a label from the
    data as mathtext."""
    return ("\n".join(textwrap.wrap(text, width)) or text).replace("$", r"\$")


def forest_svg(rep: Report) -> str:
    """Dot-and-CI per group (sorted as the table), n at the right, zero drawn as zero."""
    a, b = rep.primary, rep.other
    groups = [*a.groups, a.overall]
    if not a.groups:
        return ""
    b_by = {g.key: g for g in b.groups} if b is not None else {}
    labels = [_wrap(g.name) for g in groups]
    lines = sum(max(1, lab.count("\n") + 1) for lab in labels)
    fig = _figure(8.5, 0.8 + 0.24 * lines + 0.12 * len(groups))
    ax = fig.add_subplot()
    ys = np.arange(len(groups))[::-1].astype(float)
    series = [(a, {g.key: g for g in a.groups} | {"all": a.overall})]
    if b is not None:
        series.append((b, b_by | {"all": b.overall}))
    off = 0.18 if b is not None else 0.0
    for si, (m, by) in enumerate(series):
        for y, g0 in zip(ys, groups, strict=True):
            g = by.get(g0.key)
            if g is None or g.mean is None:
                continue
            yy = y + (off if si == 0 else -off)
            if g.ci_low is not None and g.ci_high is not None:
                ax.plot([g.ci_low, g.ci_high], [yy, yy], color=_COLORS[si], lw=2, solid_capstyle="butt")
            ax.plot([g.mean], [yy], marker="o", color=_COLORS[si], ms=6,
                    mfc=_COLORS[si] if g.ci_low is not None else "white", mew=1.5,
                    label=m.model_key if y == ys[0] else None, ls="none")
    for y, g in zip(ys, groups, strict=True):
        note = f"n={g.facts}" + ("" if g.ci_low is not None or g.mean is None else f" ({TOO_SMALL})")
        ax.annotate(note, (1.0, y), xycoords=("axes fraction", "data"), xytext=(6, 0),
                    textcoords="offset points", va="center", fontsize=8, color="#444")
    ax.set_yticks(ys, labels, fontsize=8)
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylim(-0.7, len(groups) - 0.3)
    ax.axvline(0, color="#999", lw=0.8)
    ax.axhline(0.5, color="#bbb", lw=0.8, ls=":")
    if rep.chance is not None:
        ax.axvline(rep.chance.level, color="#b33", lw=0.8, ls="--",
                   label=f"chance {rep.chance.level:.3f}")
    ax.grid(axis="x", color="#eee")
    ax.set_xlabel(f"mean {a.measure_label} per fact (dot); 95% bootstrap CI (bar) where n ≥ {rep.min_n_ci}; "
                  "hollow dot: n too small", fontsize=8)
    if b is not None or rep.chance is not None:
        ax.legend(fontsize=8, loc="best")
    return _svg(fig, "forest")


def histogram_svg(rep: Report) -> str:
    models = [m for m in (rep.primary, rep.other) if m is not None and m.facts]
    if not models:
        return ""
    fig = _figure(6.5, 2.6)
    ax = fig.add_subplot()
    bins = np.linspace(0, 1, 11)
    ax.hist([[float(r["score"]) for r in m.facts] for m in models], bins=bins,
            color=list(_COLORS[: len(models)]), edgecolor="white",
            label=[f"{m.model_key} (n={len(m.facts)})" for m in models])
    ax.set_xlabel(f"per-fact score ({rep.primary.measure_label}); bins of width 0.1, "
                  "the last includes 1.0", fontsize=8)
    ax.set_ylabel("facts", fontsize=8)
    ax.legend(fontsize=8)
    return _svg(fig, "histogram")


def _jitter(values: Sequence[float], seed: int, width: float = 0.02) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.asarray(values, dtype=float) + rng.uniform(-width, width, len(values))


def popularity_svg(rep: Report) -> str:
    """Per-fact score against subject popularity with the bucket means; with ``--vs`` both
    models in their colours, on the same (the primary's) tertile edges."""
    models = [m for m in (rep.primary, rep.other) if m is not None]
    two = len(models) > 1
    series = [(m, [(float(r["popularity"]), float(r["score"])) for r in m.facts
                   if _num(r.get("popularity")) is not None]) for m in models]
    if not series[0][1] or rep.popularity_edges is None:
        return ""
    fig = _figure(6.5, 3.0)
    ax = fig.add_subplot()
    for si, (m, pts) in enumerate(series):
        if not pts:
            continue
        xs, ys = zip(*pts, strict=True)
        who = f"{m.model_key}: " if two else ""
        ax.scatter(xs, _jitter(ys, rep.seed + si), s=12, alpha=0.6 if not two else 0.45,
                   color=_COLORS[si], label=f"{who}one fact (n={len(pts)}), score jittered ±0.02")
    for e in rep.popularity_edges:
        ax.axvline(e, color="#999", ls="--", lw=0.8)
    for si, (m, pts) in enumerate(series):
        for i, (bname, g) in enumerate(m.overall.by_popularity.items()):
            sub = [x for x, _ in pts if bucket_of(x, rep.popularity_edges) == bname]
            if g.mean is not None and sub:
                ax.plot([min(sub), max(sub)], [g.mean, g.mean], color=_COLORS[si] if two else "#111", lw=2)
                who = f"{m.model_key} " if two else ""
                ax.annotate(f"{who}{bname}: {g.mean:.2f} (n={g.facts})", (float(np.median(sub)), g.mean),
                            xytext=(0, 5 if (i + si) % 2 == 0 else -11), textcoords="offset points",
                            ha="center", fontsize=7)
    ax.set_ylim(-0.05, 1.08)
    ax.set_xlabel("subject popularity (Entity.popularity; dashed: tertile edges; line: bucket mean)",
                  fontsize=8)
    ax.set_ylabel("per-fact score", fontsize=8)
    ax.legend(fontsize=7, loc="best" if two else "lower right")
    return _svg(fig, "popularity")


def _stale_relations(rep: Report) -> list[str]:
    """Relations with a fact that has a past value for any model: the primary's order first."""
    keys = [g.key for g in rep.primary.relations if g.history_facts]
    if rep.other is not None:
        keys += [g.key for g in rep.other.relations if g.history_facts and g.key not in keys]
    return keys


def staleness_svg(rep: Report) -> str:
    """Staleness per relation with n; with ``--vs`` both models' dots per row."""
    keys = _stale_relations(rep)
    if not keys:
        return ""
    models = [m for m in (rep.primary, rep.other) if m is not None]
    two = len(models) > 1
    off = 0.18 if two else 0.0
    fig = _figure(6.5, 0.8 + (0.5 if two else 0.35) * len(keys))
    ax = fig.add_subplot()
    ys = np.arange(len(keys))[::-1].astype(float)
    names: dict[str, str] = {}
    for si, m in enumerate(models):
        by = {g.key: g for g in m.relations}
        labelled = not two
        for y, k in zip(ys, keys, strict=True):
            g = by.get(k)
            if g is None or g.staleness is None:
                continue
            names.setdefault(k, g.name)
            yy = y + (off if si == 0 else -off)
            if g.stale_ci_low is not None and g.stale_ci_high is not None:
                ax.plot([g.stale_ci_low, g.stale_ci_high], [yy, yy], color=_COLORS[si], lw=2)
            ax.plot([g.staleness], [yy], "o", color=_COLORS[si],
                    mfc=_COLORS[si] if g.stale_ci_low is not None else "white", mew=1.5,
                    label=None if labelled else m.model_key)
            labelled = True
            ax.annotate(f"n={g.history_facts}" + ("" if g.stale_ci_low is not None else f" ({TOO_SMALL})"),
                        (1.0, yy), xycoords=("axes fraction", "data"), xytext=(6, 0),
                        textcoords="offset points", va="center", fontsize=8 if not two else 7, color="#444")
    ax.set_yticks(ys, [_wrap(names.get(k, k)) for k in keys], fontsize=8)
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylim(-0.7, len(keys) - 0.3)
    ax.axvline(0, color="#999", lw=0.8)
    ax.set_xlabel("staleness: share of cloze sentences preferring a past value (facts with a past value only)",
                  fontsize=8)
    if two:
        ax.legend(fontsize=8, loc="best")
    return _svg(fig, "staleness")


def vs_svgs(rep: Report) -> tuple[str, str]:
    """Model-vs-model scatter per fact (jittered) and per group."""
    a, b = rep.primary, rep.other
    if b is None:
        return "", ""
    sb = {r["key"]: float(r["score"]) for r in b.facts}
    both = [(float(r["score"]), sb[r["key"]]) for r in a.facts if r["key"] in sb]
    per_fact = ""
    if both:
        fig = _figure(4.2, 4.0)
        ax = fig.add_subplot()
        xs, ys = zip(*both, strict=True)
        ax.scatter(_jitter(xs, rep.seed), _jitter(ys, rep.seed + 1), s=12, alpha=0.5, color="#555")
        ax.plot([0, 1], [0, 1], color="#bbb", lw=0.8)
        ax.set_xlabel(f"{a.model_key} (jittered ±0.02)", fontsize=8)
        ax.set_ylabel(f"{b.model_key} (jittered ±0.02)", fontsize=8)
        ax.set_title(f"per fact, n={len(both)}", fontsize=9)
        per_fact = _svg(fig, "vs-facts")
    b_by = {g.key: g for g in b.groups}
    pairs = [(g, b_by[g.key]) for g in a.groups if g.key in b_by and g.mean is not None
             and b_by[g.key].mean is not None]
    per_group = ""
    if pairs:
        fig = _figure(4.2, 4.0)
        ax = fig.add_subplot()
        for ga, gb in pairs:
            ax.plot([ga.mean], [gb.mean], "o", color=_COLORS[0], ms=4 + min(ga.facts, 40) / 5, alpha=0.7)
            ax.annotate(ga.key, (ga.mean, gb.mean), xytext=(3, 3), textcoords="offset points", fontsize=7)
        ax.plot([0, 1], [0, 1], color="#bbb", lw=0.8)
        ax.set_xlim(-0.05, 1.05)
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel(f"{a.model_key} mean", fontsize=8)
        ax.set_ylabel(f"{b.model_key} mean", fontsize=8)
        ax.set_title(f"per {rep.by} (dot size grows with n)", fontsize=9)
        per_group = _svg(fig, "vs-groups")
    return per_fact, per_group


def reliability_svg(pairs: Sequence[tuple[float, bool]], bins: int = 10) -> str:
    """Reliability diagram of per-fact (confidence, correct) pairs, n per bin."""
    rows = reliability_bins(pairs, bins)
    if not rows:
        return ""
    fig = _figure(4.5, 4.0)
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], color="#bbb", lw=0.8, label="perfect calibration")
    ax.plot([r["confidence"] for r in rows], [r["accuracy"] for r in rows], "o-", color=_COLORS[0],
            label=f"facts (n={len(pairs)})")
    for r in rows:
        ax.annotate(f"n={r['n']}", (r["confidence"], r["accuracy"]), xytext=(3, -9),
                    textcoords="offset points", fontsize=7)
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("mean confidence in bin", fontsize=8)
    ax.set_ylabel("accuracy in bin", fontsize=8)
    ax.legend(fontsize=7, loc="upper left")
    return _svg(fig, "reliability")


# --- HTML ---------------------------------------------------------------------------------------------


def _other_measures(rep: Report) -> list[dict[str, Any]]:
    """The per-relation aggregates of every measure probed for the primary model except the one
    the report is about (shown above, with the report's own intervals)."""
    return [r for r in rep.measures if r.get("measure_key") != rep.primary.measure_key]


def _measures_html(rep: Report) -> str:
    """Every measure probed for the primary model, per relation: n, mean with its interval (only
    where n allows), and the further aggregates — BELIEF's Acc/MRR as mean, range and sd over
    its seeded prompt-set samples (the fluctuation), Consist@1 and Overconf."""
    rows = _other_measures(rep)
    if not rows:
        return ""

    def fmt(v: Any) -> str:
        if isinstance(v, dict) and isinstance(v.get("mean"), float):
            extra = ""
            if isinstance(v.get("range"), float):
                extra = f" (range {v['range']:.3f}, sd {v.get('sd') or 0.0:.3f}, {v.get('runs')} samples)"
            return f"{v['mean']:.3f}{extra}"
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)  # e.g. BELIEF's "candidates facts": a population's n
        return f"{v:.3f}" if isinstance(v, float) else ""

    trs = []
    for r in rows:
        sc = r.get("score") or {}
        n = int(sc.get("n") or 0)
        mean = "–" if sc.get("mean") is None else f"{sc['mean']:.3f}"
        ci = (f" [{sc['ci_low']:.3f}, {sc['ci_high']:.3f}]"
              if n >= rep.min_n_ci and sc.get("ci_low") is not None else
              (f" ({TOO_SMALL})" if sc.get("mean") is not None else ""))
        more = "; ".join(f"{k} {fmt(v)}" for k, v in r.items()
                         if k not in ("measure", "measure_key", "pid", "facts", "score") and fmt(v))
        trs.append(f"<tr><td>{_esc(r['measure_key'])}</td><td>{_esc(r['pid'])}</td><td>{n}</td>"
                   f"<td>{_esc(mean + ci)}</td><td style=\"text-align:left\">{_esc(more)}</td></tr>")
    return ("<h2>Other measures probed</h2><table id=\"measures\"><thead><tr><th>measure</th>"
            "<th>relation</th><th>n</th><th>mean [95% CI]</th><th>further values</th></tr></thead>"
            f"<tbody>{''.join(trs)}</tbody></table>")

_CSS = """
body{font-family:"DejaVu Sans",system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
p.meta,p.note{color:#555;font-size:13px;margin:2px 0}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right;vertical-align:top}
th:first-child,td:first-child{text-align:left;max-width:320px;white-space:normal;overflow-wrap:anywhere}
tr.total td{font-weight:600;border-top:2px solid #888}
table.prov td,table.prov th{text-align:left;font-size:12px}
table.prov td{max-width:760px;overflow-wrap:anywhere}
figure.plot{margin:8px 0}figure.plot svg{max-width:100%;height:auto}
code{font-size:12px}
"""


def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _na(v: Any) -> str:
    return "n/a" if v is None or v == "None" else str(v)


def _provenance_html(rep: Report) -> str:
    rows: list[tuple[str, str]] = [
        ("report generated", rep.generated),
        ("report by kgprobe", f"{rep.code.get('kgprobe')} (git {rep.code.get('git') or 'n/a'})"),
    ]
    for m in (rep.primary, rep.other):
        if m is None:
            continue
        fps = sorted({str(r.get("model_fingerprint")) for r in m.run_info if r.get("model_fingerprint")})
        rows.append((f"model {m.model_key}", f"{m.model}; fingerprint {', '.join(fps) or 'n/a'}; "
                     f"dtype {', '.join(sorted({_na(r.get('dtype')) for r in m.run_info})) or 'n/a'}; "
                     f"device {', '.join(sorted({_na(r.get('device')) for r in m.run_info})) or 'n/a'}"))
        rows.append((f"measure ({m.model_key})",
                     f"{m.measure_label} — property {m.score_property}; known = score ≥ {m.threshold:g}"))
        for r in m.run_info:
            params = r.get("measure_params") or {}
            cfg = ", ".join(f"{k}={v}" for k, v in sorted(params.items())
                            if k not in ("fingerprint", "end_marker")) if isinstance(params, dict) else str(params)
            lib = r.get("library_versions") or {}
            libs = ", ".join(f"{k} {v}" for k, v in sorted(lib.items())) if isinstance(lib, dict) else str(lib)
            rows.append((f"run {str(r.get('id'))[:12]}",
                         f"{_na(r.get('status'))}; started {_na(r.get('started'))}, finished "
                         f"{_na(r.get('finished'))}; kgprobe {_na(r.get('code_version'))} "
                         f"(git {_na(r.get('git_hash'))}); {libs or 'library versions n/a'}"))
            rows.append(("  configuration", f"{cfg or 'n/a'}; sample {_na(r.get('sample'))}; reference "
                         f"date {_na(r.get('reference_date'))}; config hash {_na(r.get('config_hash'))}"))
            snap = r.get("graph_snapshot") or {}
            rows.append(("  graph snapshot", ", ".join(f"{v:,} {k}" for k, v in snap.items())
                         if isinstance(snap, dict) and snap else "n/a"))
    body = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in rows)
    return f'<table class="prov" id="provenance">{body}</table>'


def _bucket_cells(g: Group | None) -> list[str]:
    return [str(g.facts) if g else "–", _ci(g), _known(g)]


def _paired_html(rep: Report) -> str:
    """The paired comparison table: both means, the paired difference with its interval and
    McNemar's test, per relation and overall."""
    a, b = rep.primary, rep.other
    if not rep.paired or b is None:
        return ""
    head = ["relation", "n", f"{a.model_key} mean", f"{b.model_key} mean",
            f"{b.model_key} − {a.model_key} [95% paired CI]", f"known {a.model_key} / {b.model_key}", "McNemar b / c", "p"]
    trs = []
    for pg in rep.paired:
        cells = [pg.name, pg.facts, _fmt(pg.mean_a), _fmt(pg.mean_b), _diff(pg),
                 f"{pg.a_known} / {pg.b_known}", f"{pg.b} / {pg.c}", _p(pg.p)]
        cls = ' class="total"' if pg.key == "all" else ""
        trs.append(f"<tr{cls}>" + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>")
    return (f"<p class=note>{_esc(_paired_note(rep))}. Two marginal intervals that overlap do not mean "
            "the models differ by nothing: the paired interval removes what both share.</p>"
            f'<table id="paired"><thead><tr>{"".join(f"<th>{_esc(h)}</th>" for h in head)}</tr></thead>'
            f"<tbody>{''.join(trs)}</tbody></table>")


def render_html(rep: Report) -> str:
    """One self-contained page: provenance, the groups sorted by score with n and intervals, and
    matplotlib plots (SVG, inline)."""
    a, b = rep.primary, rep.other
    b_by = {g.key: g for g in b.groups} if b is not None else {}
    head = [rep.by, "n", "mean [95% CI]", "known", "staleness (n)"]
    if b is not None:
        head += [f"{b.model_key} n", f"{b.model_key} mean [95% CI]", f"{b.model_key} known",
                 f"{b.model_key} staleness (n)"]
    trs = []
    for g in [*a.groups, a.overall]:
        cells = [g.name, g.facts, _ci(g), _known(g), _stale(g)]
        if b is not None:
            gb = b.overall if g.key == "all" else b_by.get(g.key)
            cells += [gb.facts if gb else "–", _ci(gb), _known(gb), _stale(gb)]
        cls = ' class="total"' if g.key == "all" else ""
        trs.append(f"<tr{cls}>" + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>")
    comparison = ""
    if rep.comparison is not None and b is not None:
        c = rep.comparison
        comparison = (f"<p>On {c['both_probed']} facts probed for both models: {_esc(a.model_key)} "
                      f"knows {c['a_known']}, {_esc(b.model_key)} knows {c['b_known']}, both "
                      f"know {c['both_known']}.</p>")
    pop = ""
    if rep.popularity_edges is not None:
        e = rep.popularity_edges
        ptr = "".join(
            f"<tr><td>{_esc(bucket_label(k, e))}</td><td>{g.facts}</td><td>{_esc(_ci(g))}</td>"
            f"<td>{_esc(_known(g))}</td>" + (
                "".join(f"<td>{_esc(c)}</td>" for c in _bucket_cells(b.overall.by_popularity.get(k)))
                if b is not None else "") + "</tr>"
            for k, g in a.overall.by_popularity.items())
        bhead = ("".join(f"<th>{_esc(h)}</th>" for h in (f"{b.model_key} n", f"{b.model_key} mean [95% CI]",
                                                          f"{b.model_key} known"))
                 if b is not None else "")
        same = (f" {_esc(b.model_key)}'s facts are bucketed on the same edges." if b is not None else "")
        pop = (f"<p class=note>{rep.popularity_facts} of {a.overall.facts} probed facts have a subject "
               f"popularity; buckets are its tertiles over those facts (edges {e[0]:.2f} and {e[1]:.2f}; "
               f"unit: {_esc(rep.popularity_unit)}).{same}</p>"
               f"<table id=\"popularity\"><thead><tr><th>bucket</th><th>n</th><th>mean [95% CI]</th>"
               f"<th>known</th>{bhead}</tr></thead><tbody>{ptr}</tbody></table>{popularity_svg(rep)}")
    stale = staleness_svg(rep)
    stale_notes = "".join(
        f"<p class=note>{_esc(m.model_key + ': ') if b is not None else ''}{m.overall.history_facts} of "
        f"{m.overall.facts} probed facts have a past value; overall staleness {_esc(_stale(m.overall))}.</p>"
        for m in (a, b) if m is not None)
    stale_html = (f"{stale_notes}{stale}" if stale
                  else "<p class=note>No probed fact has a past value.</p>")
    vs_fact, vs_group = vs_svgs(rep)
    vs_html = (f"<h2>{_esc(a.model_key)} vs {_esc(b.model_key)}</h2>{comparison}{_paired_html(rep)}"
               f'<div style="display:flex;gap:12px;flex-wrap:wrap">{vs_fact}{vs_group}</div>'
               if b is not None else "")
    measures_html = _measures_html(rep)
    if rep.calibration:
        rel_html = (f"<p class=note>BELIEF: confidence of the top-1 answer against whether it is the "
                    f"gold object, over {len(rep.calibration)} prompts.</p>"
                    + reliability_svg(rep.calibration))
    else:
        rel_html = ("<p class=note>No BELIEF scores in this report (probe a BELIEF measure to get "
                    "per-fact confidence/correct pairs); reliability diagram omitted.</p>")
    title = f"What {a.model_key} knows" + (f" vs {b.model_key}" if b is not None else "")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kgprobe report: {_esc(a.model_key)}</title><style>{_CSS}</style></head>
<body>
<h1>{_esc(title)}</h1>
<p class="meta">{_esc(a.measure_label)}; a fact is known when its score is ≥ {a.threshold:g};
{a.overall.facts} facts over {len(a.relations)} relations; overall mean {_esc(_ci(a.overall))}.</p>
<p class="meta">Intervals: 95% percentile bootstrap (scipy.stats.bootstrap, {rep.bootstrap} resamples,
seed {rep.seed}), shown only where n ≥ {rep.min_n_ci}; otherwise "{TOO_SMALL}".</p>
<p class="meta" id="chance">{_esc(_chance(rep))}.</p>
<h2>By {_esc(_by_title(rep))}, best first</h2>
{forest_svg(rep)}
<table id="groups"><thead><tr>{''.join(f'<th>{_esc(h)}</th>' for h in head)}</tr></thead>
<tbody>{''.join(trs)}</tbody></table>
<h2>Per-fact scores</h2>{histogram_svg(rep)}
<h2>Popularity of the subject</h2>{pop or '<p class=note>No subject popularity in this graph.</p>'}
<h2>Temporal staleness</h2>{stale_html}
{vs_html}
{measures_html}
<h2>Calibration</h2>{rel_html}
<h2>Provenance</h2>
{_provenance_html(rep)}
</body></html>
"""
