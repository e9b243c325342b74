"""A report as Rich tables on a console (kgprobe.progress decides the width off a terminal)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kgprobe.reports.build import bucket_label
from kgprobe.reports.data import Report
from kgprobe.reports.sections import added_sections
from kgprobe.reports.text import (
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
    from rich.table import Table

    from kgprobe.reports.data import Group, ModelReport

#: paired-table headers name the models by letter when a name is longer than this (a
#: header's longest word sets its column's least width)
_SHORT = 8
#: the popularity table's model column names the models by letter when a name is longer than
#: this (a served model's GGUF path: the column would take most of 100 columns)
_MODEL_COLUMN = 24


def _table(title: str | None, labels: Sequence[str], numbers: Sequence[str]) -> Table:
    """A table whose label columns fold a long key onto the next line (never cut it off) and
    whose number columns never wrap, so that ``0.875 [0.700, 1.000]`` stays on one line: what
    does not fit is split into more tables by the caller, not squeezed."""
    from rich.table import Table
    from rich.text import Text

    from kgprobe.progress import safe_text

    def head(h: str) -> Text:  # a header's own line breaks kept, each line made safe
        return Text("\n").join(safe_text(line) for line in h.split("\n"))

    t = Table(title=safe_text(title) if title is not None else None)
    for h in labels:
        t.add_column(head(h), overflow="fold")
    for h in numbers:
        t.add_column(head(h), no_wrap=True)
    return t


def _cells(g: Group | None) -> list[str]:
    return [str(g.facts) if g else "–", _ci(g), _known(g), _stale(g)]


def _groups_table(rep: Report, m: ModelReport, title: str) -> Table:
    """One model's groups, best first (a two-model report: in the primary's order, then the
    other's own), a rule under the last group with an interval, then all facts."""
    from kgprobe.progress import safe_text

    order = [g.key for g in rep.primary.groups]
    by = {g.key: g for g in m.groups}
    groups = [by[k] for k in order if k in by] + [g for g in m.groups if g.key not in order]
    t = _table(title, [rep.by], ["n", "mean [95% CI]", "known", "stale (n)"])
    for i, g in enumerate([*groups, m.overall]):
        nxt = groups[i + 1] if i + 1 < len(groups) else None
        apart = nxt is not None and g.facts >= MIN_N_CI > nxt.facts
        t.add_row(*map(safe_text, [g.name, *_cells(g)]),
                  end_section=bool(groups) and (i == len(groups) - 1 or apart))
    return t


def print_report(rep: Report, console: Console) -> None:
    """The report as terminal tables that fit 100 columns without wrapping a mean with its
    interval: with a second model, one groups table per model and a paired table, rather than
    nine columns side by side."""
    from rich.text import Text

    from kgprobe.progress import safe_text, visible

    a, b = rep.primary, rep.other
    na, nb = rep.names()
    if b is None:
        console.print(_groups_table(rep, a, title(rep)))
    else:
        console.print(Text(visible(title(rep)), style="bold"))
        differ = facts_differ(rep)
        if differ:
            console.print(Text(visible(differ), style="bold"))
        elif (same := facts_same(rep)) is not None:
            console.print(Text(visible(same)), highlight=False)
        for m in (a, b):
            console.print(_groups_table(rep, m, f"{display_name(rep, m)}: {m.overall.facts} facts"))
    console.print(f"intervals: 95% percentile bootstrap ({rep.bootstrap} resamples, seed {rep.seed}), "
                  f"only for n ≥ {rep.min_n_ci}", highlight=False)
    console.print(chance_note(rep), highlight=False)
    if (scales := scale_note(rep)) is not None:  # BELIEF: never two rank scales pooled
        console.print(Text(visible(f"rank scales: {scales}")), highlight=False)
    if rep.popularity_edges is not None and rep.by != "popularity":
        # a long name (a GGUF path) in the model column made the table ~160 columns wide: the
        # rows then say A and B, and the line under the table names them in full, once
        la, lb = (na, nb) if max(len(na), len(nb or "")) <= _MODEL_COLUMN else ("A", "B")
        pt = _table(f"by popularity of the subject ({rep.popularity_facts} of {a.overall.facts} facts "
                    "have one; tertile edges" + (f", the same for {lb}" if b is not None else "") + ")",
                    ["popularity", *(["model"] if b is not None else [])], ["n", "mean [95% CI]", "known"])
        for bname, g in a.overall.by_popularity.items():
            label = bucket_label(bname, rep.popularity_edges)
            if b is None:
                pt.add_row(*map(safe_text, [label, str(g.facts), _ci(g), _known(g)]))
                continue
            pt.add_row(*map(safe_text, [label, la, str(g.facts), _ci(g), _known(g)]))
            pt.add_row(*map(safe_text, ["", lb or "", *bucket_cells(b.overall.by_popularity.get(bname))]),
                       end_section=True)
        console.print(pt)
        if b is not None and la != na:
            console.print(Text(visible(f"A = {na}, B = {nb}")), highlight=False)
    if rep.comparison is not None and b is not None:
        c = rep.comparison
        console.print(
            Text(visible(f"on {c['both_probed']} facts probed for both: {na} knows {c['a_known']}, "
                         f"{nb} knows {c['b_known']}, both {c['both_known']}")), highlight=False,
        )
    if rep.paired and b is not None and nb is not None:
        # headers no wider than their numbers (a no-wrap column is as wide as its header):
        # short names over two lines, long ones as A and B, named in the title
        short = max(len(na), len(nb)) <= _SHORT
        sa, sb = (na, nb) if short else ("A", "B")
        br = "\n" if short else " "
        ptab = _table(f"paired: {nb} vs {na} on the same facts" + ("" if short else f" (A = {na}, B = {nb})"),
                      ["relation"], ["n", f"{sa}{br}mean", f"{sb}{br}mean", f"{sb} − {sa}{br}[95% paired CI]",
                                     f"known{br}{sa} / {sb}", "McNemar\nb / c", "p"])
        for pg in rep.paired:
            ptab.add_row(*map(safe_text, [pg.name, str(pg.facts), _fmt(pg.mean_a), _fmt(pg.mean_b), _diff(pg),
                                          f"{pg.a_known} / {pg.b_known}", f"{pg.b} / {pg.c}", _p(pg.p)]),
                         end_section=len(rep.paired) > 1 and pg is rep.paired[-2])
        console.print(ptab)
        console.print(Text(visible(paired_note(rep))), highlight=False)
    if rep.moves:
        console.print(Text(visible(moves_title(rep)), style="bold"), highlight=False)
        for move in rep.moves:
            for line in moves_lines(rep, move):
                console.print(Text(visible(line)), highlight=False, soft_wrap=True)
    others = other_measures(rep)
    if others:
        mt = _table(f"other measures probed for {na}", ["measure", "relation"], ["facts", "mean [95% CI]"])
        mt.add_column("more", overflow="fold")
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
    for section, lines in added_sections(rep):  # the plug-ins' sections, after kgprobe's own
        console.print(Text(visible(section.title), style="bold"), highlight=False)
        for line in lines:
            console.print(Text(visible(line)), highlight=False, soft_wrap=True)
