"""One self-contained HTML page per report: tables and inlined SVG plots, no script and no
external resource. The page is a Jinja2 template (``templates/report.html.j2``, autoescaped:
every label is data); this module turns the :class:`Report` into the template's tables, one
cell at a time, so that the layout (CSS classes: a label wraps between words, a number never
wraps) is decided in one place."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

from kgprobe.reports.build import bucket_label
from kgprobe.reports.data import Group, ModelReport, Report
from kgprobe.reports.figures import (
    forest_svg,
    histogram_svg,
    popularity_svg,
    reliability_svg,
    staleness_svg,
    vs_svgs,
)
from kgprobe.reports.sections import added_sections
from kgprobe.reports.text import (
    TOO_SMALL,
    bucket_cells,
    chance_note,
    display_name,
    facts_differ,
    facts_same,
    moves_lines,
    moves_title,
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
    import jinja2
    from matplotlib.figure import Figure

#: Two-model tables put each model on its own row under the group's label (never nine columns
#: side by side); a label wraps between words and keeps at least ~12 characters; numbers
#: never wrap; a table wider than the page scrolls inside its box instead of squeezing a column.
_CSS = """
body{font-family:"DejaVu Sans",system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
p.meta,p.note{color:#555;font-size:13px;margin:2px 0}
p.warn{font-size:14px;font-weight:600;color:#7a1f00;background:#fff1e6;border-left:4px solid #d9822b;padding:6px 10px;margin:10px 0;max-width:900px}
div.scroll{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border-bottom:1px solid #ddd;padding:3px 8px;text-align:right;vertical-align:top}
th{white-space:normal;overflow-wrap:break-word}
.label{text-align:left;min-width:12em;max-width:28em;white-space:normal;overflow-wrap:break-word}
.model{text-align:left;white-space:normal;overflow-wrap:break-word;max-width:18em}
td.num{white-space:nowrap}
.text{text-align:left;white-space:normal;min-width:16em}
tr.total td{font-weight:600;border-top:2px solid #888}
tr.first td{border-top:1px solid #aaa}
table.prov td,table.prov th{text-align:left;font-size:12px}
table.prov td{max-width:760px;overflow-wrap:anywhere;white-space:normal}
figure.plot{margin:8px 0}figure.plot svg{max-width:100%;height:auto}
div.plots{display:flex;gap:12px;flex-wrap:wrap}
code{font-size:12px}
"""


class Cell(TypedDict):
    """One cell of a table in the page's template (report.html.j2)."""

    text: str
    cls: str
    rowspan: int
    tag: str


class Row(TypedDict):
    """One row of a table in the page's template."""

    cls: str
    cells: list[Cell]


class Table(TypedDict):
    """A table in the page's template: its id, class, header cells and rows."""

    id: str
    cls: NotRequired[str]
    head: NotRequired[list[Cell]]
    rows: list[Row]


class PopularitySection(TypedDict):
    """The popularity section: the note on the buckets, their table and the plot."""

    note: str
    table: Table
    plot: Any


def _cell(text: Any, cls: str = "num", rowspan: int = 1, tag: str = "td") -> Cell:
    return {"text": str(text), "cls": cls, "rowspan": rowspan, "tag": tag}


def _head(*names: str) -> list[Cell]:
    """Header cells: the first one heads the labels."""
    return [_cell(n, "label" if i == 0 else ("model" if n == "model" else "num"), tag="th")
            for i, n in enumerate(names)]


def _model_rows(rep: Report, label: str, per_model: list[tuple[ModelReport, list[str]]],
                total: bool = False) -> list[Row]:
    """One row per model under one label cell (rowspan): the two-model layout."""
    rows: list[Row] = []
    for i, (m, cells) in enumerate(per_model):
        first = [_cell(label, "label", rowspan=len(per_model))] if i == 0 else []
        rows.append({"cls": "total" if total else ("first" if i == 0 else ""),
                     "cells": [*first, _cell(display_name(rep, m), "model"), *map(_cell, cells)]})
    return rows


def _groups_table(rep: Report) -> Table:
    """The groups (best first, then all facts). One model: one row per group; two: a row per
    model under each group's label, each over that model's own facts (n on every row)."""
    a, b = rep.primary, rep.other
    b_by = {g.key: g for g in b.groups} if b is not None else {}

    def cells(g: Group | None) -> list[str]:
        return [str(g.facts) if g else "–", _ci(g), _known(g), _stale(g)]

    rows: list[Row]
    if b is None:
        rows = [{"cls": "total" if g.key == "all" else "",
                 "cells": [_cell(g.name, "label"), *map(_cell, cells(g))]} for g in [*a.groups, a.overall]]
        return {"id": "groups", "head": _head(rep.by, "n", "mean [95% CI]", "known", "staleness (n)"),
                "rows": rows}
    rows = []
    for g in [*a.groups, a.overall]:
        gb = b.overall if g.key == "all" else b_by.get(g.key)
        rows += _model_rows(rep, g.name, [(a, cells(g)), (b, cells(gb))], total=g.key == "all")
    return {"id": "groups", "cls": "two",
            "head": _head(rep.by, "model", "n", "mean [95% CI]", "known", "staleness (n)"), "rows": rows}


def _popularity(rep: Report, keep: dict[str, Figure] | None) -> PopularitySection | None:
    if rep.popularity_edges is None:
        return None
    a, b = rep.primary, rep.other
    e = rep.popularity_edges
    rows: list[Row] = []
    for k, g in a.overall.by_popularity.items():
        mine = [str(g.facts), _ci(g), _known(g)]
        if b is None:
            rows.append({"cls": "", "cells": [_cell(bucket_label(k, e), "label"), *map(_cell, mine)]})
        else:
            rows += _model_rows(rep, bucket_label(k, e),
                                [(a, mine), (b, bucket_cells(b.overall.by_popularity.get(k)))])
    head = (_head("bucket", "n", "mean [95% CI]", "known") if b is None
            else _head("bucket", "model", "n", "mean [95% CI]", "known"))
    same = f" {display_name(rep, b)}'s facts are bucketed on the same edges." if b is not None else ""
    note = (f"{rep.popularity_facts} of {a.overall.facts} probed facts have a subject popularity; "
            f"buckets are its tertiles over those facts (edges {e[0]:.2f} and {e[1]:.2f}; unit: "
            f"{rep.popularity_unit}).{same}")
    return {"note": note, "table": {"id": "popularity", "head": head, "rows": rows},
            "plot": _safe(popularity_svg(rep, keep))}


def _measures_table(rep: Report) -> Table | None:
    """Every measure probed for the primary model, per relation: n, mean with its interval (only
    where n allows), and the further aggregates — BELIEF's Acc/MRR as mean, range and sd over
    its seeded prompt-set samples (the fluctuation), Consist@1 and Overconf."""
    found = other_measures(rep)
    if not found:
        return None

    def fmt(v: Any) -> str:
        if isinstance(v, dict) and isinstance(v.get("mean"), float):
            extra = ""
            if isinstance(v.get("range"), float):
                extra = f" (range {v['range']:.3f}, sd {v.get('sd') or 0.0:.3f}, {v.get('runs')} samples)"
            return f"{v['mean']:.3f}{extra}"
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)  # e.g. BELIEF's "candidates facts": a population's n
        return f"{v:.3f}" if isinstance(v, float) else ""

    rows: list[Row] = []
    for r in found:
        sc = r.get("score") or {}
        n = int(sc.get("n") or 0)
        mean = "–" if sc.get("mean") is None else f"{sc['mean']:.3f}"
        ci = (f" [{sc['ci_low']:.3f}, {sc['ci_high']:.3f}]"
              if n >= rep.min_n_ci and sc.get("ci_low") is not None else
              (f" ({TOO_SMALL})" if sc.get("mean") is not None else ""))
        more = "; ".join(f"{k} {fmt(v)}" for k, v in r.items()
                         if k not in ("measure", "measure_key", "pid", "facts", "score") and fmt(v))
        rows.append({"cls": "", "cells": [_cell(r["measure_key"], "label"), _cell(r["pid"], "model"),
                                          _cell(n), _cell(mean + ci), _cell(more, "text")]})
    head = _head("measure", "relation", "n", "mean [95% CI]", "further values")
    head[1]["cls"], head[4]["cls"] = "model", "text"
    return {"id": "measures", "head": head, "rows": rows}


def _na(v: Any) -> str:
    return "n/a" if v is None or v == "None" else str(v)


def _provenance_table(rep: Report) -> Table:
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
    return {"id": "provenance", "cls": "prov",
            "rows": [{"cls": "", "cells": [_cell(k, "", tag="th"), _cell(v, "")]} for k, v in rows]}


def _paired_table(rep: Report) -> Table | None:
    """The paired comparison table: both means, the paired difference with its interval and
    McNemar's test, per relation and overall (the same facts for both models)."""
    na, nb = rep.names()
    if not rep.paired or rep.other is None:
        return None
    head = _head("relation", "n", f"{na} mean", f"{nb} mean", f"{nb} − {na} [95% paired CI]",
                 f"known {na} / {nb}", "McNemar b / c", "p")
    rows: list[Row] = [{"cls": "total" if pg.key == "all" else "",
             "cells": [_cell(pg.name, "label"), *map(_cell, [
                 pg.facts, _fmt(pg.mean_a), _fmt(pg.mean_b), _diff(pg), f"{pg.a_known} / {pg.b_known}",
                 f"{pg.b} / {pg.c}", _p(pg.p)])]} for pg in rep.paired]
    return {"id": "paired", "head": head, "rows": rows}


def _safe(svg: str) -> Any:
    """matplotlib's SVG (its text escaped by matplotlib), or a report section's body (which
    escapes its own data: ``ReportSection.html``), into the autoescaped page as markup."""
    from markupsafe import Markup

    return Markup(svg)  # matplotlib writes it, every label in it escaped


@cache
def _template() -> jinja2.Template:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=False, keep_trailing_newline=True,
    )
    return env.get_template("report.html.j2")


def page_title(rep: Report) -> str:
    """The page's heading: the model or models it is about, by name; one model under two
    measure keys (the demo's careful and raw labels) named once, with the two keys."""
    na, nb = rep.names()
    if rep.same_model and nb is not None:
        return (f"What {rep.primary.display} knows: {na} vs {nb}"
                + (" labels" if {na, nb} == {"careful", "raw"} else ""))
    return f"What {na} knows" + (f" vs {nb}" if nb is not None else "")


def render_html(rep: Report, keep: dict[str, Figure] | None = None) -> str:
    """One self-contained page: provenance, the groups sorted by score with n and intervals, and
    matplotlib plots (SVG, inline; ``keep`` collects the figures by name)."""
    a, b = rep.primary, rep.other
    na, nb = rep.names()
    comparison = ""
    if rep.comparison is not None and b is not None:
        c = rep.comparison
        comparison = (f"On {c['both_probed']} facts probed for both models: {na} knows {c['a_known']}, "
                      f"{nb} knows {c['b_known']}, both know {c['both_known']}.")
    stale_plot = staleness_svg(rep, keep)
    stale_notes = [f"{display_name(rep, m) + ': ' if b is not None else ''}{m.overall.history_facts} of "
                   f"{m.overall.facts} probed facts have a past value; overall staleness {_stale(m.overall)}."
                   for m in (a, b) if m is not None]
    vs_fact, vs_group = vs_svgs(rep, keep)
    return _template().render(
        rep=rep, a=a, b=b, name_a=na, name_b=nb, css=_CSS, too_small=TOO_SMALL,
        title=page_title(rep), who=a.display if rep.same_model else na + (f" vs {nb}" if nb else ""),
        threshold=f"{a.threshold:g}", overall_ci=_ci(a.overall), chance=chance_note(rep),
        differ=facts_differ(rep), same=facts_same(rep), by_title=_by_title(rep),
        forest=_safe(forest_svg(rep, keep)), groups=_groups_table(rep),
        histogram=_safe(histogram_svg(rep, keep)), popularity=_popularity(rep, keep),
        stale_plot=_safe(stale_plot), stale_notes=stale_notes,
        comparison=comparison, paired=_paired_table(rep), paired_note=paired_note(rep),
        vs_fact=_safe(vs_fact), vs_group=_safe(vs_group), measures=_measures_table(rep),
        reliability=_safe(reliability_svg(rep.calibration, keep=keep)) if rep.calibration else "",
        calibration_n=len(rep.calibration or []), provenance=_provenance_table(rep),
        moves_title=moves_title(rep) if rep.moves else "",
        moves=[moves_lines(rep, mv) for mv in rep.moves],
        scales=scale_note(rep),  # BELIEF: the other rank scale apart, never pooled
        sections=[{"name": s.name, "title": s.title, "body": _safe(s.html(rep) or "")}
                  for s, _ in added_sections(rep)],  # the plug-ins' sections, before provenance
    )
