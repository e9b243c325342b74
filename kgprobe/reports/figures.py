"""The report's plots: matplotlib figures, kept as objects so that the HTML page inlines them as
SVG and the report directory gets each plot again as its own SVG and PNG file."""

from __future__ import annotations

import io
import re
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kgprobe.reports.build import as_float, bucket_of, reliability_bins
from kgprobe.reports.data import Report
from kgprobe.reports.text import TOO_SMALL, facts_differ

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure


_COLORS = ("#3b6fb6", "#d9822b")


def svg_document(fig: Any, name: str) -> str:
    """The figure as a standalone SVG file: text kept as text (readable, searchable), no date
    (the same figure gives the same bytes), ids salted per figure so that several figures on
    one page never share a clip-path id."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": f"kgprobe-{name}"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", buf.getvalue(), flags=re.S)
    return re.sub(r'\s+xmlns:(?:dc|cc|rdf)="[^"]*"', "", text)


def png_bytes(fig: Any, dpi: int = 150) -> bytes:
    """The figure as a PNG (for slides and word processors that take no SVG)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def _svg(fig: Any, name: str, keep: dict[str, Figure] | None = None) -> str:
    """The figure as an inline <svg> element; ``keep`` (when given) collects the figure by name
    for its own SVG and PNG files."""
    if keep is not None:
        keep[name] = fig
    text = svg_document(fig, name)
    return f'<figure class="plot" id="plot-{name}">{text[text.find("<svg"):]}</figure>'


def new_figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    fig.set_layout_engine("constrained")
    return fig


#: a model's name in a figure is cut to this many characters (a served model's GGUF path of 78
#: took the popularity scatter's whole width); the figure's caption gives it in full
_LABEL = 24


def _ellipsize(name: str, width: int = _LABEL) -> str:
    """A long name's own file name, cut in the middle: its start and its end stay readable."""
    if len(name) <= width:
        return name
    base = name.rstrip("/").rsplit("/", 1)[-1] or name
    if len(base) <= width:
        return base
    head = (width - 1) // 2
    return base[:head] + "…" + base[len(base) - (width - 1 - head):]


def figure_names(rep: Report) -> tuple[str, str | None, str | None]:
    """The two models' labels in figures and, when a label is not the model's full name, the
    caption naming them in full (A and B when the cut names would read the same)."""
    na, nb = rep.names()
    la, lb = _ellipsize(na), (_ellipsize(nb) if nb is not None else None)
    if la == na and lb == nb:
        return na, nb, None
    if la == lb:
        la, lb = "A", "B"
    caption = "; ".join(f"{s} = {n}" for s, n in ((la, na), (lb, nb)) if n is not None and s != n)
    return la, lb, caption.replace("$", r"\$")


def _label(rep: Report, m: Any) -> str:
    """A model's label in a figure (see :func:`figure_names`)."""
    la, lb, _ = figure_names(rep)
    return la if m is rep.primary else (lb or m.model_key)


def _caption(fig: Any, rep: Report) -> None:
    """The full names under the figure, where its labels cut them."""
    caption = figure_names(rep)[2]
    if caption is not None:
        fig.supxlabel(textwrap.fill(caption, 110), fontsize=7, color="#444")


def _legend_outside(fig: Any, ax: Any, ncols: int, fontsize: float = 8) -> None:
    """The legend under the axes and their x label, never on the data; the layout makes room."""
    from matplotlib.transforms import offset_copy

    ax.legend(fontsize=fontsize, loc="upper center", ncols=ncols, frameon=False, bbox_to_anchor=(0.5, 0.0),
              bbox_transform=offset_copy(ax.transAxes, fig=fig, y=-38, units="points"))


def _wrap(text: str, width: int = 34) -> str:
    """Wrapped for a tick label; ``$`` escaped so that matplotlib never reads a label from the
    data as mathtext."""
    return ("\n".join(textwrap.wrap(text, width)) or text).replace("$", r"\$")


def forest_svg(rep: Report, keep: dict[str, Figure] | None = None) -> str:
    """Dot-and-CI per group (sorted as the table), n at the right, zero drawn as zero."""
    a, b = rep.primary, rep.other
    groups = [*a.groups, a.overall]
    if not a.groups:
        return ""
    b_by = {g.key: g for g in b.groups} if b is not None else {}
    labels = [_wrap(g.name) for g in groups]
    lines = sum(max(1, lab.count("\n") + 1) for lab in labels)
    fig = new_figure(8.5, 0.8 + 0.24 * lines + 0.12 * len(groups))
    ax = fig.add_subplot()
    ys = np.arange(len(groups))[::-1].astype(float)
    series = [(a, {g.key: g for g in a.groups} | {"all": a.overall})]
    if b is not None:
        series.append((b, b_by | {"all": b.overall}))
    off = 0.18 if b is not None else 0.0
    for si, (m, by) in enumerate(series):
        labelled = False  # each model named once in the legend, on its first drawn dot
        for y, g0 in zip(ys, groups, strict=True):
            g = by.get(g0.key)
            if g is None or g.mean is None:
                continue
            yy = y + (off if si == 0 else -off)
            if g.ci_low is not None and g.ci_high is not None:
                ax.plot([g.ci_low, g.ci_high], [yy, yy], color=_COLORS[si], lw=2, solid_capstyle="butt")
            ax.plot([g.mean], [yy], marker="o", color=_COLORS[si], ms=6,
                    mfc=_COLORS[si] if g.ci_low is not None else "white", mew=1.5,
                    label=None if labelled else _label(rep, m), ls="none")
            labelled = True
    for y, g in zip(ys, groups, strict=True):
        if b is None:
            note = f"n={g.facts}" + ("" if g.ci_low is not None or g.mean is None else f" ({TOO_SMALL})")
        else:  # both models' n: they need not be the same facts
            gb = series[1][1].get(g.key)
            note = f"n={g.facts} / {gb.facts if gb is not None else 0}"
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
    if b is not None:
        na, nb, _ = figure_names(rep)
        differ = facts_differ(rep)
        ax.set_title(f"n: {na} / {nb}" + ("; NOT the same facts: each model over its own" if differ else
                                           "; the same facts for both"), fontsize=8)
    if b is not None or rep.chance is not None:
        _legend_outside(fig, ax, 3)
    _caption(fig, rep)
    return _svg(fig, "forest", keep)


def histogram_svg(rep: Report, keep: dict[str, Figure] | None = None) -> str:
    """Per-fact scores; with a second model, both models on the facts scored for both (the
    same facts, so the bars compare), the title saying how many of each model's facts that
    leaves out."""
    models = [m for m in (rep.primary, rep.other) if m is not None and m.facts]
    if not models:
        return ""
    title = ""
    scores = [[float(r["score"]) for r in m.facts] for m in models]
    if rep.other is not None:
        common = {r["key"] for r in rep.primary.facts} & {r["key"] for r in rep.other.facts}
        if common:
            scores = [[float(r["score"]) for r in m.facts if r["key"] in common] for m in models]
            left = [f"{_label(rep, m)}'s other {len(m.facts) - len(common)}"
                    for m in models if len(m.facts) > len(common)]
            title = (f"the {len(common)} facts scored for both models"
                     + (f" ({' and '.join(left)} not shown)" if left else ""))
        else:
            title = "NOT the same facts: no fact was scored for both; each model over its own"
    fig = new_figure(6.5, 2.6)
    ax = fig.add_subplot()
    bins = np.linspace(0, 1, 11)
    ax.hist(scores, bins=bins, color=list(_COLORS[: len(models)]), edgecolor="white",
            label=[f"{_label(rep, m)} (n={len(sc)})" for m, sc in zip(models, scores, strict=True)])
    if title:
        ax.set_title(title, fontsize=8)
    ax.set_xlabel(f"per-fact score ({rep.primary.measure_label}); bins of width 0.1, "
                  "the last includes 1.0", fontsize=8)
    ax.set_ylabel("facts", fontsize=8)
    ax.yaxis.get_major_locator().set_params(integer=True)  # a count of facts
    _legend_outside(fig, ax, 2)
    _caption(fig, rep)
    return _svg(fig, "histogram", keep)


def _jitter(values: Sequence[float], seed: int, width: float = 0.02) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.asarray(values, dtype=float) + rng.uniform(-width, width, len(values))


def popularity_svg(rep: Report, keep: dict[str, Figure] | None = None) -> str:
    """Per-fact score against subject popularity with the bucket means; with ``--vs`` both
    models in their colours, on the same (the primary's) tertile edges."""
    models = [m for m in (rep.primary, rep.other) if m is not None]
    two = len(models) > 1
    series = [(m, [(p, float(r["score"])) for r in m.facts
                   if (p := as_float(r.get("popularity"))) is not None]) for m in models]
    if not series[0][1] or rep.popularity_edges is None:
        return ""
    fig = new_figure(6.5, 3.0)
    ax = fig.add_subplot()
    for si, (m, pts) in enumerate(series):
        if not pts:
            continue
        xs, ys = zip(*pts, strict=True)
        who = f"{_label(rep, m)}: " if two else ""
        ax.scatter(xs, _jitter(ys, rep.seed + si), s=12, alpha=0.6 if not two else 0.45,
                   color=_COLORS[si], label=f"{who}one fact (n={len(pts)}), score jittered ±0.02")
    for e in rep.popularity_edges:
        ax.axvline(e, color="#999", ls="--", lw=0.8)
    for si, (m, pts) in enumerate(series):
        for i, (bname, g) in enumerate(m.overall.by_popularity.items()):
            sub = [x for x, _ in pts if bucket_of(x, rep.popularity_edges) == bname]
            if g.mean is not None and sub:
                ax.plot([min(sub), max(sub)], [g.mean, g.mean], color=_COLORS[si] if two else "#111", lw=2)
                who = f"{_label(rep, m)} " if two else ""
                ax.annotate(f"{who}{bname}: {g.mean:.2f} (n={g.facts})", (float(np.median(sub)), g.mean),
                            xytext=(0, 5 if (i + si) % 2 == 0 else -11), textcoords="offset points",
                            ha="center", fontsize=7)
    ax.set_ylim(-0.05, 1.08)
    ax.set_xlabel("subject popularity (Entity.popularity; dashed: tertile edges; line: bucket mean)",
                  fontsize=8)
    ax.set_ylabel("per-fact score", fontsize=8)
    _legend_outside(fig, ax, 1, fontsize=7)
    _caption(fig, rep)
    return _svg(fig, "popularity", keep)


def _stale_relations(rep: Report) -> list[str]:
    """Relations with a fact that has a past value for any model: the primary's order first."""
    keys = [g.key for g in rep.primary.relations if g.history_facts]
    if rep.other is not None:
        keys += [g.key for g in rep.other.relations if g.history_facts and g.key not in keys]
    return keys


def staleness_svg(rep: Report, keep: dict[str, Figure] | None = None) -> str:
    """Staleness per relation with n; with ``--vs`` both models' dots per row."""
    keys = _stale_relations(rep)
    if not keys:
        return ""
    models = [m for m in (rep.primary, rep.other) if m is not None]
    two = len(models) > 1
    off = 0.18 if two else 0.0
    fig = new_figure(6.5, 0.8 + (0.5 if two else 0.35) * len(keys))
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
                    label=None if labelled else _label(rep, m))
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
        _legend_outside(fig, ax, 2)
        _caption(fig, rep)
    return _svg(fig, "staleness", keep)


def vs_svgs(rep: Report, keep: dict[str, Figure] | None = None) -> tuple[str, str]:
    """Model-vs-model scatter per fact (jittered) and per group."""
    a, b = rep.primary, rep.other
    na, nb, _ = figure_names(rep)
    if b is None:
        return "", ""
    sb = {r["key"]: float(r["score"]) for r in b.facts}
    both = [(float(r["score"]), sb[r["key"]]) for r in a.facts if r["key"] in sb]
    per_fact = ""
    if both:
        fig = new_figure(4.2, 4.0)
        ax = fig.add_subplot()
        xs, ys = zip(*both, strict=True)
        ax.scatter(_jitter(xs, rep.seed), _jitter(ys, rep.seed + 1), s=12, alpha=0.5, color="#555")
        ax.plot([0, 1], [0, 1], color="#bbb", lw=0.8)
        ax.set_xlabel(f"{na} (jittered ±0.02)", fontsize=8)
        ax.set_ylabel(f"{nb} (jittered ±0.02)", fontsize=8)
        ax.set_title(f"per fact, n={len(both)}", fontsize=9)
        _caption(fig, rep)
        per_fact = _svg(fig, "vs-facts", keep)
    # per relation on the same facts (the paired groups), never two means over different facts
    pairs = [(pg.key, pg.facts, ma, mb) for pg in rep.paired if pg.key != "all"
             for ma, mb in [(pg.mean_a, pg.mean_b)] if ma is not None and mb is not None]
    per_group = ""
    if pairs:
        fig = new_figure(4.2, 4.0)
        ax = fig.add_subplot()
        for key, n, ma, mb in pairs:
            ax.plot([ma], [mb], "o", color=_COLORS[0], ms=4 + min(n, 40) / 5, alpha=0.7)
            ax.annotate(key, (ma, mb), xytext=(3, 3), textcoords="offset points", fontsize=7)
        ax.plot([0, 1], [0, 1], color="#bbb", lw=0.8)
        ax.set_xlim(-0.05, 1.05)
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel(f"{na} mean", fontsize=8)
        ax.set_ylabel(f"{nb} mean", fontsize=8)
        ax.set_title("per relation, facts scored for both\n(dot size grows with n)", fontsize=9)
        _caption(fig, rep)
        per_group = _svg(fig, "vs-groups", keep)
    return per_fact, per_group


def reliability_svg(pairs: Sequence[tuple[float, bool]], bins: int = 10,
                    keep: dict[str, Figure] | None = None) -> str:
    """Reliability diagram of per-fact (confidence, correct) pairs, n per bin."""
    rows = reliability_bins(pairs, bins)
    if not rows:
        return ""
    fig = new_figure(4.5, 4.0)
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
    return _svg(fig, "reliability", keep)
