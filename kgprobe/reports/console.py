"""A report as Rich tables on a console (kgprobe.progress decides the width off a terminal)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kgprobe.reports.build import bucket_label
from kgprobe.reports.data import Report
from kgprobe.reports.text import (
    bucket_cells,
    chance_note,
    other_measures,
    paired_note,
    scale_note,
    title,
)
from kgprobe.reports.text import ci as _ci
from kgprobe.reports.text import diff as _diff
from kgprobe.reports.text import fmt as _fmt
from kgprobe.reports.text import known as _known
from kgprobe.reports.text import p_value as _p
from kgprobe.reports.text import stale as _stale
from kgprobe.stats import MIN_N_CI

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console









def print_report(rep: Report, console: Console) -> None:
    from rich.table import Table
    from rich.text import Text

    from kgprobe.progress import safe_text, visible

    a, b = rep.primary, rep.other
    na, nb = rep.names()
    cols = [rep.by, "n", "mean [95% CI]", "known", "stale (n)"]
    if b is not None:
        cols += [f"{nb} n", f"{nb} mean [95% CI]", f"{nb} known",
                 f"{nb} stale (n)"]
    table = Table(*cols, title=safe_text(title(rep)))
    b_by = {g.key: g for g in b.groups} if b is not None else {}
    for g in [*a.groups, a.overall]:
        row = [g.name, str(g.facts), _ci(g), _known(g), _stale(g)]
        if b is not None:
            gb = b.overall if g.key == "all" else b_by.get(g.key)
            row += [str(gb.facts) if gb else "–", _ci(gb), _known(gb), _stale(gb)]
        # a rule under the last group with an interval (the small ones follow, apart) and
        # under the last group (the overall row follows)
        nxt = a.groups[a.groups.index(g) + 1] if g in a.groups[:-1] else None
        apart = nxt is not None and g.facts >= MIN_N_CI > nxt.facts
        table.add_row(*map(safe_text, row),
                      end_section=bool(a.groups) and (g.key == a.groups[-1].key or apart))
    console.print(table)
    console.print(f"intervals: 95% percentile bootstrap ({rep.bootstrap} resamples, seed {rep.seed}), "
                  f"only for n ≥ {rep.min_n_ci}", highlight=False)
    console.print(chance_note(rep), highlight=False)
    if (scales := scale_note(rep)) is not None:  # BELIEF: never two rank scales pooled
        console.print(Text(visible(f"rank scales: {scales}")), highlight=False)
    if rep.popularity_edges is not None and rep.by != "popularity":
        pcols = ["popularity", "n", "mean [95% CI]", "known"]
        if b is not None:
            pcols += [f"{nb} n", f"{nb} mean [95% CI]", f"{nb} known"]
        pt = Table(*pcols, title=safe_text(f"by popularity of the subject ({rep.popularity_facts} of "
                                      f"{a.overall.facts} facts have one; tertile edges"
                                      + (f", the same for {nb}" if b is not None else "") + ")"))
        for bname, g in a.overall.by_popularity.items():
            prow = [bucket_label(bname, rep.popularity_edges), str(g.facts), _ci(g), _known(g)]
            if b is not None:
                prow += bucket_cells(b.overall.by_popularity.get(bname))
            pt.add_row(*map(safe_text, prow))
        console.print(pt)
    if rep.comparison is not None and b is not None:
        c = rep.comparison
        console.print(
            Text(visible(f"on {c['both_probed']} facts probed for both: {na} knows {c['a_known']}, "
                         f"{nb} knows {c['b_known']}, both {c['both_known']}")), highlight=False,
        )
    if rep.paired and b is not None:
        ptab = Table("relation", "n", f"{na} mean", f"{nb} mean",
                     f"{nb} − {na} [95% paired CI]", f"known {na} / {nb}",
                     "McNemar b / c", "p",
                     title=safe_text(f"paired: {nb} vs {na} on the same facts"))
        for pg in rep.paired:
            ptab.add_row(*map(safe_text, [pg.name, str(pg.facts), _fmt(pg.mean_a), _fmt(pg.mean_b), _diff(pg),
                                     f"{pg.a_known} / {pg.b_known}", f"{pg.b} / {pg.c}", _p(pg.p)]),
                         end_section=len(rep.paired) > 1 and pg is rep.paired[-2])
        console.print(ptab)
        console.print(Text(visible(paired_note(rep))), highlight=False)
    others = other_measures(rep)
    if others:
        mt = Table("measure", "relation", "facts", "mean [95% CI]", "more",
                   title=f"other measures probed for {na}")
        for mrow in others:
            sc = mrow.get("score") or {}
            more = ", ".join(f"{k} {v['mean']:.3f}" for k, v in mrow.items()
                             if isinstance(v, dict) and k != "score" and isinstance(v.get("mean"), float))
            ci = ("" if sc.get("ci_low") is None
                  else f" [{sc['ci_low']:.3f}, {sc['ci_high']:.3f}]")
            mean = "–" if sc.get("mean") is None else f"{sc['mean']:.3f}{ci}"
            mt.add_row(safe_text(mrow["measure_key"]), safe_text(mrow["pid"]), str(sc.get("n", 0)), mean,
                       safe_text(more))
        console.print(mt)
