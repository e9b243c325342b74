"""Knowledge-gap reports: per relation, what a model knows, with uncertainty.

For each relation: facts probed, mean score with a seeded percentile-bootstrap 95% confidence
interval, share known (score >= the run's threshold), mean score and share known per
popularity bucket of the subject (where ``Entity.popularity`` exists), and temporal staleness.

Staleness (docs/probing.md): on a fact whose (subject, relation) had other objects in the past,
stale(f) = 1/|C| Σ_c 1[max over past objects o' of Pl(o'|c) > Pl(o|c)], the share of the
fact's cloze sentences on which the model prefers some past value to the current one; the
probe writes it next to the score. A relation's staleness is the mean of stale(f) over its
facts with a history.

Outputs: a rich table, CSV, JSON, and a self-contained HTML page (inline SVG, no script, no
external resource). Every number is computed here from the per-fact rows the graph returns.
"""

from __future__ import annotations

import csv
import html
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kgprobe.graph import probe_runs as pr

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from kgprobe.config import Settings
    from kgprobe.graph.client import Graph

BUCKETS = ("low", "mid", "high")
BOOTSTRAP = 1000


@dataclass
class Group:
    """Aggregates over a set of probed facts."""

    facts: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None
    known: int
    known_share: float | None


@dataclass
class RelationStats:
    pid: str
    label: str | None
    facts: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None
    known: int
    known_share: float | None
    history_facts: int
    staleness: float | None
    by_popularity: dict[str, Group] = field(default_factory=dict)


@dataclass
class ModelReport:
    model: str
    model_key: str
    measure_key: str
    score_property: str
    threshold: float
    runs: list[str]
    relations: list[RelationStats]
    overall: RelationStats


@dataclass
class Report:
    primary: ModelReport
    other: ModelReport | None
    popularity_edges: list[float] | None  # tertile edges of the subjects' popularity
    comparison: dict[str, int] | None
    seed: int
    bootstrap: int
    #: per relation, every measure probed for the primary model
    #: (:func:`kgprobe.probing.measures.registry.relation_aggregates`)
    measures: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --- statistics ---------------------------------------------------------------------------------


def bootstrap_ci(values: Sequence[float], seed: int, n_boot: int = BOOTSTRAP) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the mean: ``n_boot`` resamples with replacement
    drawn by ``numpy.random.default_rng(seed)``."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        raise ValueError("no values")
    rng = np.random.default_rng(seed)
    means = arr[rng.integers(0, arr.size, size=(n_boot, arr.size))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return float(lo), float(hi)


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


def _group(scores: list[float], threshold: float, seed: int, n_boot: int) -> Group:
    if not scores:
        return Group(0, None, None, None, 0, None)
    lo, hi = bootstrap_ci(scores, seed, n_boot)
    known = sum(1 for s in scores if s >= threshold)
    return Group(len(scores), sum(scores) / len(scores), lo, hi, known, known / len(scores))


def _relation_seed(seed: int, pid: str) -> int:
    return seed * 1_000_003 + int(pid[1:])


def relation_stats(
    rows: list[dict[str, Any]], labels: dict[str, str | None], threshold: float,
    edges: list[float] | None, seed: int = 0, n_boot: int = BOOTSTRAP,
) -> tuple[list[RelationStats], RelationStats]:
    """Per-relation and overall statistics of per-fact rows ``{pid, score, stale, popularity}``."""

    def stats(pid: str, label: str | None, rs: list[dict[str, Any]], s: int) -> RelationStats:
        scores = [float(r["score"]) for r in rs]
        g = _group(scores, threshold, s, n_boot)
        stale = [float(r["stale"]) for r in rs if r.get("stale") is not None]
        by_pop: dict[str, Group] = {}
        if edges is not None:
            for b in BUCKETS:
                sub = [float(r["score"]) for r in rs if bucket_of(_num(r.get("popularity")), edges) == b]
                if sub:
                    by_pop[b] = _group(sub, threshold, s, n_boot)
        return RelationStats(
            pid, label, g.facts, g.mean, g.ci_low, g.ci_high, g.known, g.known_share,
            len(stale), sum(stale) / len(stale) if stale else None, by_pop,
        )

    by_pid: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_pid.setdefault(r["pid"], []).append(r)
    per = [
        stats(p, labels.get(p), by_pid[p], _relation_seed(seed, p))
        for p in sorted(by_pid, key=lambda p: int(p[1:]))
    ]
    return per, stats("all", "all relations", rows, seed)


def _num(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


# --- building -------------------------------------------------------------------------------------


def build_report(
    graph: Graph, model: str, *, vs: str | None = None, measure: str | None = None,
    threshold: float | None = None, seed: int = 0, n_boot: int = BOOTSTRAP,
) -> Report:
    """Read the scores of ``model`` (and ``vs``) from the graph and compute the report."""
    from kgprobe.probing.run import compare_in, resolve_scores

    sa = resolve_scores(graph, model, measure, threshold)
    rows_a = pr.report_rows(graph, sa.props)
    sb = rows_b = None
    if vs is not None:
        sb = resolve_scores(graph, vs, sa.props.measure_key, threshold if threshold is not None else sa.threshold)
        rows_b = pr.report_rows(graph, sb.props)
    pops = [p for p in (_num(r.get("popularity")) for r in rows_a) if p is not None]
    edges = popularity_edges(pops)
    labels = pr.relation_labels(graph, {r["pid"] for r in rows_a} | {r["pid"] for r in rows_b or []})

    def model_report(sc: Any, rows: list[dict[str, Any]]) -> ModelReport:
        per, overall = relation_stats(rows, labels, sc.threshold, edges, seed, n_boot)
        return ModelReport(sc.model, sc.props.model_key, sc.props.measure_key, sc.props.score,
                           sc.threshold, list(sc.runs), per, overall)

    comparison = None
    if vs is not None:
        comparison = compare_in(graph, model, vs, measure=sa.props.measure_key, threshold=sa.threshold).counts
    from kgprobe.probing.measures.registry import relation_aggregates

    return Report(
        model_report(sa, rows_a), model_report(sb, rows_b or []) if sb is not None else None,
        edges, comparison, seed, n_boot, relation_aggregates(graph, sa.props.model_key, seed=seed),
    )


def report(
    model: str, *, vs: str | None = None, out: str | Path | None = None, measure: str | None = None,
    threshold: float | None = None, seed: int = 0, settings: Settings | None = None,
    graph: Graph | None = None,
) -> tuple[Report, dict[str, Path]]:
    """Build the report and, with ``out``, write CSV, JSON and HTML there (paths returned)."""
    from kgprobe.graph.client import connect

    g = graph if graph is not None else connect(settings)
    try:
        rep = build_report(g, model, vs=vs, measure=measure, threshold=threshold, seed=seed)
    finally:
        if graph is None:
            g.close()
    paths = write_report(rep, out) if out is not None else {}
    return rep, paths


# --- output ---------------------------------------------------------------------------------------


def _fmt(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "–"
    return f"{100 * v:.0f}%" if pct else f"{v:.3f}"


def _ci(r: RelationStats | Group) -> str:
    if r.mean is None:
        return "–"
    return f"{r.mean:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}]"


def print_report(rep: Report, console: Console) -> None:
    from rich.table import Table

    a, b = rep.primary, rep.other
    title = f"{a.model_key}: {a.measure_key} (known ≥ {a.threshold:g})"
    cols = ["relation", "label", "facts", "mean [95% CI]", "known", "history", "stale"]
    if b is not None:
        title += f"  vs  {b.model_key}"
        cols += [f"{b.model_key} mean", f"{b.model_key} known"]
    table = Table(*cols, title=title)
    b_by = {r.pid: r for r in b.relations} if b is not None else {}
    for r in [*a.relations, a.overall]:
        row = [r.pid, r.label or "", str(r.facts), _ci(r), _fmt(r.known_share, True),
               str(r.history_facts), _fmt(r.staleness, True)]
        if b is not None:
            rb = b.overall if r.pid == "all" else b_by.get(r.pid)
            row += [_fmt(rb.mean) if rb else "–", _fmt(rb.known_share, True) if rb else "–"]
        table.add_row(*row, end_section=r.pid == a.relations[-1].pid if a.relations else False)
    console.print(table)
    if rep.popularity_edges is not None:
        e = rep.popularity_edges
        pt = Table("popularity", "range", "facts", "mean [95% CI]", "known",
                   title="by popularity of the subject (all relations)")
        ranges = {"low": f"< {e[0]:.2f}", "mid": f"{e[0]:.2f} – {e[1]:.2f}", "high": f"≥ {e[1]:.2f}"}
        for bname, g in a.overall.by_popularity.items():
            pt.add_row(bname, ranges[bname], str(g.facts), _ci(g), _fmt(g.known_share, True))
        console.print(pt)
    if rep.comparison is not None and b is not None:
        c = rep.comparison
        console.print(
            f"on {c['both_probed']} facts probed for both: {a.model_key} knows {c['a_known']}, "
            f"{b.model_key} knows {c['b_known']}, both {c['both_known']}", highlight=False,
        )
    if rep.measures:
        from rich.markup import escape

        mt = Table("measure", "relation", "facts", "mean [95% CI]", "more",
                   title=f"every measure probed for {a.model_key}")
        for mrow in rep.measures:
            sc = mrow.get("score") or {}
            more = ", ".join(f"{k} {v['mean']:.3f}" for k, v in mrow.items()
                             if isinstance(v, dict) and k != "score" and isinstance(v.get("mean"), float))
            ci = ("" if sc.get("ci_low") is None
                  else f" [{sc['ci_low']:.3f}, {sc['ci_high']:.3f}]")
            mean = "–" if sc.get("mean") is None else f"{sc['mean']:.3f}{ci}"
            mt.add_row(escape(mrow["measure_key"]), mrow["pid"], str(sc.get("n", 0)), mean, escape(more))
        console.print(mt)


def write_report(rep: Report, out: str | Path) -> dict[str, Path]:
    """report.json, relations.csv, popularity.csv and report.html in ``out``."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    paths = {"json": d / "report.json", "csv": d / "relations.csv",
             "popularity_csv": d / "popularity.csv", "html": d / "report.html"}
    paths["json"].write_text(json.dumps(rep.to_dict(), indent=1, ensure_ascii=False), encoding="utf-8")
    with paths["csv"].open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["model", "measure", "pid", "label", "facts", "mean", "ci_low", "ci_high",
                    "known", "known_share", "history_facts", "staleness"])
        for m in (rep.primary, rep.other):
            if m is None:
                continue
            for r in [*m.relations, m.overall]:
                w.writerow([m.model_key, m.measure_key, r.pid, r.label or "", r.facts, r.mean,
                            r.ci_low, r.ci_high, r.known, r.known_share, r.history_facts, r.staleness])
    with paths["popularity_csv"].open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["model", "pid", "bucket", "facts", "mean", "ci_low", "ci_high", "known_share"])
        for m in (rep.primary, rep.other):
            if m is None:
                continue
            for r in [*m.relations, m.overall]:
                for bname, g in r.by_popularity.items():
                    w.writerow([m.model_key, r.pid, bname, g.facts, g.mean, g.ci_low, g.ci_high,
                                g.known_share])
    paths["html"].write_text(render_html(rep), encoding="utf-8")
    return paths


# --- HTML with inline SVG ----------------------------------------------------------------------------

_COLORS = ("#3b6fb6", "#d9822b")
_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
p.meta{color:#555;font-size:13px;margin:2px 0}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right}
th:nth-child(-n+2),td:nth-child(-n+2){text-align:left}
tr.total td{font-weight:600;border-top:2px solid #888}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}
svg text{font-family:inherit;font-size:11px;fill:#222}
"""


def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _hbar_svg(
    rows: list[tuple[str, list[tuple[float | None, float | None, float | None]]]],
    title: str, pct: bool = False,
) -> str:
    """Horizontal bars on a 0..1 axis, one group per row, one bar per series, with optional
    whiskers (lo, hi)."""
    if not rows:
        return ""
    series = max(len(vals) for _, vals in rows)
    bar_h, gap, left, width = 12, 8, 230, 520
    group_h = series * bar_h + gap
    height = 30 + group_h * len(rows) + 24
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 60}" height="{height}" '
             f'role="img" aria-label="{_esc(title)}">']
    for i in range(0, 11, 2):
        x = left + width * i / 10
        parts.append(f'<line x1="{x:.1f}" y1="22" x2="{x:.1f}" y2="{height - 20}" stroke="#e3e3e3"/>')
        label = f"{10 * i}%" if pct else f"{i / 10:.1f}"
        parts.append(f'<text x="{x:.1f}" y="{height - 6}" text-anchor="middle">{label}</text>')
    parts.append(f'<text x="{left}" y="14" font-weight="600">{_esc(title)}</text>')
    for gi, (name, vals) in enumerate(rows):
        y0 = 26 + gi * group_h
        parts.append(f'<text x="{left - 6}" y="{y0 + series * bar_h / 2 + 4:.1f}" text-anchor="end">'
                     f'{_esc(name[:38])}</text>')
        for si, (v, lo, hi) in enumerate(vals):
            y = y0 + si * bar_h
            if v is None or math.isnan(v):
                continue
            w = max(0.0, min(1.0, v)) * width
            parts.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h - 2}" '
                         f'fill="{_COLORS[si % len(_COLORS)]}"><title>{_esc(name)}: {v:.3f}</title></rect>')
            if lo is not None and hi is not None:
                x1, x2 = left + lo * width, left + hi * width
                ym = y + (bar_h - 2) / 2
                parts.append(f'<line x1="{x1:.1f}" y1="{ym:.1f}" x2="{x2:.1f}" y2="{ym:.1f}" stroke="#111"/>')
                for x in (x1, x2):
                    parts.append(f'<line x1="{x:.1f}" y1="{ym - 3:.1f}" x2="{x:.1f}" y2="{ym + 3:.1f}" stroke="#111"/>')
    parts.append("</svg>")
    return "\n".join(parts)


def render_html(rep: Report) -> str:
    """One self-contained page: provenance, per-relation table, and four SVG charts."""
    a, b = rep.primary, rep.other
    models = [a] + ([b] if b is not None else [])
    b_by = {r.pid: r for r in b.relations} if b is not None else {}

    def rel_name(r: RelationStats) -> str:
        return "all relations" if r.pid == "all" else f"{r.pid} {r.label or ''}".strip()

    def vals(r: RelationStats, attr: str, ci: bool) -> list[tuple[float | None, float | None, float | None]]:
        out = [(getattr(r, attr), r.ci_low if ci else None, r.ci_high if ci else None)]
        if b is not None:
            rb = b.overall if r.pid == "all" else b_by.get(r.pid)
            out.append((getattr(rb, attr), rb.ci_low if ci else None, rb.ci_high if ci else None)
                       if rb else (None, None, None))
        return out

    rels = [*a.relations, a.overall]
    legend = "".join(f'<span style="background:{_COLORS[i]}"></span>{_esc(m.model_key)}'
                     for i, m in enumerate(models))
    mean_svg = _hbar_svg([(rel_name(r), vals(r, "mean", True)) for r in rels],
                         f"mean {a.measure_key} with 95% bootstrap CI")
    known_svg = _hbar_svg([(rel_name(r), vals(r, "known_share", False)) for r in rels],
                          f"share known (score ≥ {a.threshold:g})", pct=True)
    hist = [r for r in rels if r.history_facts]
    stale_svg = _hbar_svg([(rel_name(r), vals(r, "staleness", False)) for r in hist],
                          "staleness: share of cloze sentences preferring a past value", pct=True)
    pop_svg = ""
    if rep.popularity_edges is not None:
        pop_rows = []
        for bname in BUCKETS:
            row = []
            for m in models:
                g = m.overall.by_popularity.get(bname)
                row.append((g.mean, g.ci_low, g.ci_high) if g else (None, None, None))
            pop_rows.append((f"{bname} popularity", row))
        pop_svg = _hbar_svg(pop_rows, "mean score by popularity of the subject (tertiles)")

    head = ["relation", "label", "facts", "mean [95% CI]", "known", "history", "stale"]
    if b is not None:
        head += [f"{b.model_key} mean [95% CI]", f"{b.model_key} known"]
    trs = []
    for r in rels:
        cells = [r.pid, r.label or "", r.facts, _ci(r), _fmt(r.known_share, True), r.history_facts,
                 _fmt(r.staleness, True)]
        if b is not None:
            rb = b.overall if r.pid == "all" else b_by.get(r.pid)
            cells += [_ci(rb) if rb else "–", _fmt(rb.known_share, True) if rb else "–"]
        cls = ' class="total"' if r.pid == "all" else ""
        trs.append(f"<tr{cls}>" + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>")
    comparison = ""
    if rep.comparison is not None and b is not None:
        c = rep.comparison
        comparison = (f"<p>On {c['both_probed']} facts probed for both models: {_esc(a.model_key)} "
                      f"knows {c['a_known']}, {_esc(b.model_key)} knows {c['b_known']}, both "
                      f"know {c['both_known']}.</p>")
    meta = "".join(
        f'<p class="meta">{_esc(m.model_key)} ({_esc(m.model)}): property <code>{_esc(m.score_property)}</code>, '
        f"{m.overall.facts} facts, runs {_esc(', '.join(r[:8] for r in m.runs))}</p>" for m in models
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kgprobe report: {_esc(a.model_key)}</title><style>{_CSS}</style></head>
<body>
<h1>Knowledge gaps of {_esc(a.model_key)}{' vs ' + _esc(b.model_key) if b is not None else ''}</h1>
{meta}
<p class="meta">measure {_esc(a.measure_key)}; known = score ≥ {a.threshold:g}; 95% percentile bootstrap
({rep.bootstrap} resamples, seed {rep.seed}); staleness on facts with a past value only.</p>
<p class="legend">{legend}</p>
{comparison}
<h2>Per relation</h2>
<table><thead><tr>{''.join(f'<th>{_esc(h)}</th>' for h in head)}</tr></thead>
<tbody>{''.join(trs)}</tbody></table>
<h2>Mean score</h2>{mean_svg}
<h2>Share known</h2>{known_svg}
<h2>Popularity</h2>{pop_svg or '<p>No subject popularity in this graph.</p>'}
<h2>Temporal staleness</h2>{stale_svg or '<p>No probed fact has a past value.</p>'}
</body></html>
"""
