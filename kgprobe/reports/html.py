"""One self-contained HTML page per report: tables and inlined SVG plots, no script and no
external resource."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from kgprobe.reports.build import bucket_label
from kgprobe.reports.data import Report
from kgprobe.reports.figures import (
    forest_svg,
    histogram_svg,
    popularity_svg,
    reliability_svg,
    staleness_svg,
    vs_svgs,
)
from kgprobe.reports.text import (
    TOO_SMALL,
    bucket_cells,
    chance_note,
    display_name,
    other_measures,
    paired_note,
    scale_note,
)
from kgprobe.reports.text import by_title as _by_title
from kgprobe.reports.text import ci as _ci
from kgprobe.reports.text import diff as _diff
from kgprobe.reports.text import fmt as _fmt
from kgprobe.reports.text import known as _known
from kgprobe.reports.text import p_value as _p
from kgprobe.reports.text import stale as _stale

if TYPE_CHECKING:  # pragma: no cover

    pass




def _measures_html(rep: Report) -> str:
    """Every measure probed for the primary model, per relation: n, mean with its interval (only
    where n allows), and the further aggregates — BELIEF's Acc/MRR as mean, range and sd over
    its seeded prompt-set samples (the fluctuation), Consist@1 and Overconf."""
    rows = other_measures(rep)
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
                   f"<td>{_esc(mean + ci)}</td><td style=\"text-align:left;white-space:normal\">{_esc(more)}</td></tr>")
    return ("<h2>Other measures probed</h2><table id=\"measures\"><thead><tr><th>measure</th>"
            "<th>relation</th><th>n</th><th>mean [95% CI]</th><th>further values</th></tr></thead>"
            f"<tbody>{''.join(trs)}</tbody></table>")

_CSS = """
body{font-family:"DejaVu Sans",system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
p.meta,p.note{color:#555;font-size:13px;margin:2px 0}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right;vertical-align:top}
td{white-space:nowrap}
th:first-child,td:first-child{text-align:left;max-width:320px;white-space:normal;overflow-wrap:anywhere}
tr.total td{font-weight:600;border-top:2px solid #888}
table.prov td,table.prov th{text-align:left;font-size:12px}
table.prov td{max-width:760px;overflow-wrap:anywhere;white-space:normal}
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




def _paired_html(rep: Report) -> str:
    """The paired comparison table: both means, the paired difference with its interval and
    McNemar's test, per relation and overall."""
    b = rep.other
    na, nb = rep.names()
    if not rep.paired or b is None:
        return ""
    head = ["relation", "n", f"{na} mean", f"{nb} mean",
            f"{nb} − {na} [95% paired CI]", f"known {na} / {nb}", "McNemar b / c", "p"]
    trs = []
    for pg in rep.paired:
        cells = [pg.name, pg.facts, _fmt(pg.mean_a), _fmt(pg.mean_b), _diff(pg),
                 f"{pg.a_known} / {pg.b_known}", f"{pg.b} / {pg.c}", _p(pg.p)]
        cls = ' class="total"' if pg.key == "all" else ""
        trs.append(f"<tr{cls}>" + "".join(f"<td>{_esc(c)}</td>" for c in cells) + "</tr>")
    return (f"<p class=note>{_esc(paired_note(rep))}. Two marginal intervals that overlap do not mean "
            "the models differ by nothing: the paired interval removes what both share.</p>"
            f'<table id="paired"><thead><tr>{"".join(f"<th>{_esc(h)}</th>" for h in head)}</tr></thead>'
            f"<tbody>{''.join(trs)}</tbody></table>")


def render_html(rep: Report, keep: dict[str, Any] | None = None) -> str:
    """One self-contained page: provenance, the groups sorted by score with n and intervals, and
    matplotlib plots (SVG, inline; ``keep`` collects the figures by name)."""
    a, b = rep.primary, rep.other
    na, nb = rep.names()
    b_by = {g.key: g for g in b.groups} if b is not None else {}
    head = [rep.by, "n", "mean [95% CI]", "known", "staleness (n)"]
    if b is not None:
        head += [f"{nb} n", f"{nb} mean [95% CI]", f"{nb} known",
                 f"{nb} staleness (n)"]
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
        comparison = (f"<p>On {c['both_probed']} facts probed for both models: {_esc(na)} "
                      f"knows {c['a_known']}, {_esc(nb)} knows {c['b_known']}, both "
                      f"know {c['both_known']}.</p>")
    pop = ""
    if rep.popularity_edges is not None:
        e = rep.popularity_edges
        ptr = "".join(
            f"<tr><td>{_esc(bucket_label(k, e))}</td><td>{g.facts}</td><td>{_esc(_ci(g))}</td>"
            f"<td>{_esc(_known(g))}</td>" + (
                "".join(f"<td>{_esc(c)}</td>" for c in bucket_cells(b.overall.by_popularity.get(k)))
                if b is not None else "") + "</tr>"
            for k, g in a.overall.by_popularity.items())
        bhead = ("".join(f"<th>{_esc(h)}</th>" for h in (f"{nb} n", f"{nb} mean [95% CI]",
                                                          f"{nb} known"))
                 if b is not None else "")
        same = (f" {_esc(nb)}'s facts are bucketed on the same edges." if b is not None else "")
        pop = (f"<p class=note>{rep.popularity_facts} of {a.overall.facts} probed facts have a subject "
               f"popularity; buckets are its tertiles over those facts (edges {e[0]:.2f} and {e[1]:.2f}; "
               f"unit: {_esc(rep.popularity_unit)}).{same}</p>"
               f"<table id=\"popularity\"><thead><tr><th>bucket</th><th>n</th><th>mean [95% CI]</th>"
               f"<th>known</th>{bhead}</tr></thead><tbody>{ptr}</tbody></table>{popularity_svg(rep, keep)}")
    stale = staleness_svg(rep, keep)
    stale_notes = "".join(
        f"<p class=note>{_esc(display_name(rep, m) + ': ') if b is not None else ''}{m.overall.history_facts} of "
        f"{m.overall.facts} probed facts have a past value; overall staleness {_esc(_stale(m.overall))}.</p>"
        for m in (a, b) if m is not None)
    stale_html = (f"{stale_notes}{stale}" if stale
                  else "<p class=note>No probed fact has a past value.</p>")
    vs_fact, vs_group = vs_svgs(rep, keep)
    vs_html = (f"<h2>{_esc(na)} vs {_esc(nb)}</h2>{comparison}{_paired_html(rep)}"
               f'<div style="display:flex;gap:12px;flex-wrap:wrap">{vs_fact}{vs_group}</div>'
               if b is not None else "")
    measures_html = _measures_html(rep)
    if rep.calibration:
        rel_html = (f"<p class=note>BELIEF: confidence of the top-1 answer against whether it is the "
                    f"gold object, over {len(rep.calibration)} prompts.</p>"
                    + reliability_svg(rep.calibration, keep=keep))
    else:
        rel_html = ("<p class=note>No BELIEF scores in this report (probe a BELIEF measure to get "
                    "per-fact confidence/correct pairs); reliability diagram omitted.</p>")
    title = f"What {na} knows" + (f" vs {nb}" if b is not None else "")
    note = scale_note(rep)  # BELIEF: the other rank scale apart, never pooled
    scales = f'\n<p class="meta" id="scales">Rank scales: {_esc(note)}.</p>' if note else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kgprobe report: {_esc(na)}</title><style>{_CSS}</style></head>
<body>
<h1>{_esc(title)}</h1>
<p class="meta">{_esc(a.measure_label)}; a fact is known when its score is ≥ {a.threshold:g};
{a.overall.facts} facts over {len(a.relations)} relations; overall mean {_esc(_ci(a.overall))}.</p>
<p class="meta">Intervals: 95% percentile bootstrap (scipy.stats.bootstrap, {rep.bootstrap} resamples,
seed {rep.seed}), shown only where n ≥ {rep.min_n_ci}; otherwise "{TOO_SMALL}".</p>
<p class="meta" id="chance">{_esc(chance_note(rep))}.</p>{scales}
<h2>By {_esc(_by_title(rep))}, best first</h2>
{forest_svg(rep, keep)}
<table id="groups"><thead><tr>{''.join(f'<th>{_esc(h)}</th>' for h in head)}</tr></thead>
<tbody>{''.join(trs)}</tbody></table>
<h2>Per-fact scores</h2>{histogram_svg(rep, keep)}
<h2>Popularity of the subject</h2>{pop or '<p class=note>No subject popularity in this graph.</p>'}
<h2>Temporal staleness</h2>{stale_html}
{vs_html}
{measures_html}
<h2>Calibration</h2>{rel_html}
<h2>Provenance</h2>
{_provenance_html(rep)}
</body></html>
"""
