"""The report's numbers as text: one formatter per kind of cell, used by every place that prints
them (the terminal tables, the HTML page, Markdown and LaTeX), so a number has one spelling and
one interval wherever it appears. Markdown (GitHub tables) and LaTeX (``booktabs``) tables are
built here from a :class:`~kgprobe.reports.data.Report`; ``kgprobe report --format md|tex``
prints them and every report directory holds them as ``report.md`` and ``report.tex``.

Imports only the report's data types (below ``reporting`` and ``results``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kgprobe.reports.data import Group, ModelReport, PairedGroup, Report, WordingMove
from kgprobe.reports.sections import added_sections, chance_section

TOO_SMALL = "n too small"


# --- cells ----------------------------------------------------------------------------------------


def fmt(v: float | None, pct: bool = False) -> str:
    if v is None:
        return "–"
    return f"{100 * v:.0f}%" if pct else f"{v:.3f}"


def ci(g: Group | None) -> str:
    """Mean with its 95% interval, or "n too small" where the group has no interval."""
    if g is None or g.mean is None:
        return "–"
    if g.ci_low is None or g.ci_high is None:
        return f"{g.mean:.3f} ({TOO_SMALL})"
    return f"{g.mean:.3f} [{g.ci_low:.3f}, {g.ci_high:.3f}]"


def known(g: Group | None) -> str:
    if g is None or g.known_share is None:
        return "–"
    return f"{g.known}/{g.facts} ({100 * g.known_share:.0f}%)"


def stale(g: Group | None) -> str:
    if g is None or g.staleness is None:
        return "–"
    iv = (f" [{100 * g.stale_ci_low:.0f}, {100 * g.stale_ci_high:.0f}]"
          if g.stale_ci_low is not None and g.stale_ci_high is not None else "")
    return f"{100 * g.staleness:.0f}%{iv} (n={g.history_facts})"


def diff(pg: PairedGroup) -> str:
    """The paired difference with its interval, or "n too small" (the same rule as means)."""
    if pg.diff is None:
        return "–"
    if pg.diff_ci_low is None or pg.diff_ci_high is None:
        return f"{pg.diff:+.3f} ({TOO_SMALL})"
    return f"{pg.diff:+.3f} [{pg.diff_ci_low:+.3f}, {pg.diff_ci_high:+.3f}]"


def p_value(p: float) -> str:
    return f"{p:.3g}"


def by_title(rep: Report) -> str:
    return {"relation": "relation", "popularity": "popularity of the subject",
            "type": f"type of the {rep.type_of} (P31 closed over P279)"}[rep.by]


# --- tables as rows of text -----------------------------------------------------------------------


def group_table(rep: Report) -> tuple[list[str], list[list[str]]]:
    """The groups table (best first, then all facts): header and rows, as every format shows it."""
    a, b = rep.primary, rep.other
    name_a, name_b = rep.names()
    head = [rep.by, "n", "mean [95% CI]", "known", "stale (n)"]
    if b is not None:
        head = [rep.by, f"{name_a} n", f"{name_a} mean [95% CI]", f"{name_a} known",
                f"{name_a} stale (n)", f"{name_b} n", f"{name_b} mean [95% CI]",
                f"{name_b} known", f"{name_b} stale (n)"]
    b_by = {g.key: g for g in b.groups} if b is not None else {}
    rows = []
    for g in [*a.groups, a.overall]:
        row = [g.name, str(g.facts), ci(g), known(g), stale(g)]
        if b is not None:
            gb = b.overall if g.key == "all" else b_by.get(g.key)
            row += [str(gb.facts) if gb else "–", ci(gb), known(gb), stale(gb)]
        rows.append(row)
    return head, rows


def paired_table(rep: Report) -> tuple[list[str], list[list[str]]]:
    """The paired comparison (empty without a second model)."""
    if not rep.paired or rep.other is None:
        return [], []
    name_a, name_b = rep.names()
    head = ["relation", "n", f"{name_a} mean", f"{name_b} mean",
            f"{name_b} − {name_a} [95% paired CI]", f"known {name_a} / {name_b}", "McNemar b / c", "p"]
    rows = [[pg.name, str(pg.facts), fmt(pg.mean_a), fmt(pg.mean_b), diff(pg),
             f"{pg.a_known} / {pg.b_known}", f"{pg.b} / {pg.c}", p_value(pg.p)] for pg in rep.paired]
    return head, rows


def title(rep: Report) -> str:
    """What the report is about, with model names (not property keys)."""
    name_a, name_b = rep.names()
    a = rep.primary
    vs = f" vs {name_b}" if name_b is not None else ""
    if rep.same_model:  # one model, two measure keys: name it once
        both = {name_a, name_b} == {"careful", "raw"}
        who = f"{a.display}, {name_a}{vs}" + (" labels" if both else "")
    else:
        who = f"{name_a}{vs}"
    return f"{who}: {a.measure_label} (known ≥ {a.threshold:g}), by {by_title(rep)}"


def notes(rep: Report) -> list[str]:
    """The lines every format prints under the tables: the interval rule and the chance level."""
    out = [f"Intervals: 95% percentile bootstrap ({rep.bootstrap} resamples, seed {rep.seed}), "
           f"only for n ≥ {rep.min_n_ci}; otherwise \"{TOO_SMALL}\"."]
    out += chance_section().lines(rep) or []
    if (scales := scale_note(rep)) is not None:
        out.append(f"Rank scales: {scales}.")
    if rep.paired and rep.other is not None:
        name_a, name_b = rep.names()
        out.append(f"Paired: the same facts for both models; difference = mean({name_b}) − "
                   f"mean({name_a}), 95% paired bootstrap; McNemar's exact test on known "
                   f"(b = only {name_a} knows, c = only {name_b} knows).")
    return out


# --- Markdown ---------------------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    if not head:
        return ""
    align = ["---", *("---:" for _ in head[1:])]
    lines = ["| " + " | ".join(_md_cell(h) for h in head) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def markdown(rep: Report) -> str:
    """The report's tables as GitHub-flavoured Markdown."""
    head, rows = group_table(rep)
    out = [f"## {_md_cell(title(rep))}\n", _md_table(head, rows)]
    phead, prows = paired_table(rep)
    if phead:
        out += ["\n### Paired comparison\n", _md_table(phead, prows)]
    if rep.moves:
        out += [f"\n### {_md_cell(moves_title(rep))}\n",
                "\n".join(_md_cell(x) + "  " for m in rep.moves for x in moves_lines(rep, m)) + "\n"]
    out += ["\n" + "\n".join(f"{_md_cell(n)}  " for n in notes(rep)) + "\n"]
    for section, lines in added_sections(rep):  # the plug-ins' sections, after kgprobe's own
        out += [f"\n### {_md_cell(section.title)}\n", "\n".join(f"{_md_cell(x)}  " for x in lines) + "\n"]
    return "\n".join(out)


def moves_title(rep: Report) -> str:
    a, b = rep.names()
    return (f"Facts that moved between {b} and {a} wording ({len(rep.moves)}), with the sentences "
            "that changed (Δ log Pl in nats)")


def moves_lines(rep: Report, move: WordingMove) -> list[str]:
    """One moved fact as lines (kgprobe.reports.wording.move_lines), labels made visible."""
    from kgprobe.reports.wording import move_lines

    a, b = rep.names()
    return move_lines(move, (a, b or "B"))


# --- LaTeX ------------------------------------------------------------------------------------------

_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
        "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
        "–": "--", "−": "$-$", "≥": r"$\geq$", "≤": r"$\leq$"}


def tex_escape(text: str) -> str:
    """Text (labels from the data included) made safe for LaTeX: every special character is
    written as a command, so a label never runs as LaTeX."""
    return "".join(_TEX.get(c, c) for c in text)


def _tex_table(head: Sequence[str], rows: Sequence[Sequence[str]], caption: str, label: str) -> str:
    spec = "l" + "r" * (len(head) - 1)
    body = [" & ".join(tex_escape(c) for c in row) + r" \\" for row in rows]
    if len(body) > 1:
        body.insert(len(body) - 1, r"\midrule")  # the last row is the total
    return "\n".join([
        r"\begin{table}[ht]", r"\centering", r"\small", f"\\begin{{tabular}}{{{spec}}}", r"\toprule",
        " & ".join(tex_escape(h) for h in head) + r" \\", r"\midrule", *body, r"\bottomrule",
        r"\end{tabular}", f"\\caption{{{tex_escape(caption)}}}", f"\\label{{{label}}}", r"\end{table}", "",
    ])


def latex(rep: Report) -> str:
    """The report's tables as LaTeX ``table`` environments (needs ``\\usepackage{booktabs}``)."""
    head, rows = group_table(rep)
    cap = title(rep) + ". " + " ".join(notes(rep))
    out = ["% kgprobe report tables; needs \\usepackage{booktabs}",
           _tex_table(head, rows, cap, "tab:kgprobe-groups")]
    phead, prows = paired_table(rep)
    if phead:
        name_a, name_b = rep.names()
        out.append(_tex_table(phead, prows, f"Paired comparison of {name_b} and {name_a} on the same facts.",
                              "tab:kgprobe-paired"))
    return "\n".join(out)


def scale_note(rep: Report) -> str | None:
    """A measure ranking facts on two scales (BELIEF): which scale the figures are of, with its
    n, and each other scale's facts apart with their own n and mean (never pooled); None for
    every other measure."""
    parts = []
    for m in (rep.primary, rep.other):
        if m is None or m.scale is None:
            continue
        apart = "; ".join(f"{gs[-1].facts} facts ranked on the {name} scale apart, mean {fmt(gs[-1].mean)}"
                          for name, gs in m.apart.items() if gs)
        parts.append(f"{m.display}: figures of the {m.overall.facts} facts ranked on the {m.scale} scale"
                     + (f" ({apart})" if apart else "") + ", never pooled")
    return "; ".join(parts) or None


def chance_note(rep: Report) -> str:
    """The terminal's and the page's chance line (the built-in chance section's)."""
    return chance_section().note(rep)


def paired_note(rep: Report) -> str:
    a, b = rep.names()
    b = b or "B"
    return (f"paired: the same facts for both models; difference = mean({b}) − mean({a}) with a "
            f"95% paired bootstrap (facts resampled, the same facts for both; only where n ≥ "
            f"{rep.min_n_ci}); McNemar's exact test on known: b = only {a} knows, c = only {b} "
            "knows, two-sided p")


def display_name(rep: Report, m: ModelReport) -> str:
    """A model's display name in this report (Report.names: its name, not its property key)."""
    na, nb = rep.names()
    return na if m is rep.primary else (nb or m.model_key)


def other_measures(rep: Report) -> list[Mapping[str, Any]]:
    """The per-relation aggregates of every measure probed for the primary model except the one
    the report is about (shown above, with the report's own intervals; with ``--vs-measure``,
    the compared key is shown above too)."""
    shown = {rep.primary.measure_key} | ({rep.other.measure_key} if rep.same_model and rep.other else set())
    return [r for r in rep.measures if r.get("measure_key") not in shown]


def bucket_cells(g: Group | None) -> list[str]:
    return [str(g.facts) if g else "–", ci(g), known(g)]


def facts_differ(rep: Report) -> str | None:
    """With a second model: the loud line for when the two models' own figures (the groups
    table, the forest plot, popularity, staleness) are not over the same facts — each model's
    rows are then over its own facts and only the paired comparison is like for like. None when
    both were scored on exactly the same facts (or there is one model)."""
    a, b, overlap = rep.primary, rep.other, rep.fact_overlap()
    if b is None or overlap is None:
        return None
    both = rep.paired[-1].facts if rep.paired else 0
    if a.overall.facts == both == b.overall.facts:
        return None
    na, nb = rep.names()
    return (f"Not the same facts: {na} was scored on {a.overall.facts} facts, {nb} on "
            f"{b.overall.facts}, {both} of them for both ({overlap['primary_only']} for {na} alone, "
            f"{overlap['other_only']} for {nb} alone). Each model's rows and plots are over its "
            f"own facts; only the paired comparison ({both} facts) compares the same facts.")


def facts_same(rep: Report) -> str | None:
    """With a second model scored on exactly the same facts: the line that says so (with the
    count), so every two-model report states what its counts compare; else None."""
    if rep.other is None or facts_differ(rep) is not None:
        return None
    na, nb = rep.names()
    return (f"The same facts: {na} and {nb} were both scored on these {rep.primary.overall.facts} "
            "facts (none alone).")
