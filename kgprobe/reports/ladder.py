"""A model ladder (issue 20 #1): three or more models on the facts all of them were probed on.

Models stay in the order the user gives (a ladder of sizes, checkpoints or fine-tunes); each
rung is a model's mean with its bootstrap interval, and each step between two consecutive rungs
is a paired comparison on the same facts: mean(upper) − mean(lower) with its paired-bootstrap
interval, and McNemar's exact test on known/unknown. Per relation, every model's mean on the
shared facts, with an interval where n is large enough. One interval per number: every number
is computed once, here, and the table, CSV, markdown and plot all print that one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kgprobe.errors import ConfigError
from kgprobe.graph import probe_runs as pr
from kgprobe.probing.measures.catalog import chance_level
from kgprobe.probing.scores import shared_scores

# the report's own formatting: a number prints the same in a ladder as in a report
from kgprobe.reports.build import group_stats, measure_label, paired_group
from kgprobe.reports.data import Chance, Group, PairedGroup
from kgprobe.reports.figures import new_figure
from kgprobe.reports.sections import chance_words
from kgprobe.reports.text import ci as _with_ci
from kgprobe.reports.text import diff as _diff
from kgprobe.stats import BOOTSTRAP

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from kgprobe.graph.client import Graph


@dataclass
class Rung:
    """One model of the ladder on the shared facts."""

    model: str  # the name it was probed under
    model_key: str
    overall: Group
    relations: dict[str, Group] = field(default_factory=dict)


@dataclass
class Step:
    """Two consecutive rungs compared fact by fact (B = the upper rung)."""

    lower: str
    upper: str
    overall: PairedGroup
    relations: list[PairedGroup] = field(default_factory=list)


@dataclass
class Ladder:
    measure_key: str
    threshold: float
    facts: int
    relations: list[str]
    labels: dict[str, str | None]
    rungs: list[Rung]
    steps: list[Step]
    chance: Chance | None
    seed: int
    bootstrap: int

    def to_dict(self) -> dict[str, object]:
        """ladder.json's document: the dataclasses as dicts."""
        return asdict(self)


def build_ladder(
    graph: Graph, models: Sequence[str], *, measure: str | None = None,
    threshold: float | None = None, seed: int = 0, n_boot: int = BOOTSTRAP,
) -> Ladder:
    """The ladder of ``models`` (at least three; two are ``report --vs``) under one measure key
    all of them were probed with, on the facts scored for every one of them."""
    if len(models) < 3:
        raise ConfigError("a ladder needs at least three models (for two, use `kgprobe report --vs`)")
    if len(set(models)) != len(models):
        raise ConfigError("a model is given twice")
    scores = shared_scores(graph, models, measure, threshold)
    keys = [s.props.model_key for s in scores]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"two of the names give the same model key: {', '.join(keys)}")
    thr = scores[0].threshold
    rows = [{r["key"]: r for r in pr.report_rows(graph, s.props)} for s in scores]
    common = sorted(set.intersection(*(set(r) for r in rows)))
    if not common:
        raise ConfigError(f"no fact was scored for all of {', '.join(keys)} under {scores[0].props.measure_key}")
    pids = sorted({rows[0][k]["pid"] for k in common}, key=lambda p: int(p[1:]))
    labels = pr.relation_labels(graph, pids)

    def facts_of(i: int, pid: str | None) -> list[Mapping[str, Any]]:
        return [rows[i][k] for k in common if pid is None or rows[i][k]["pid"] == pid]

    rungs = []
    for i, sc in enumerate(scores):
        rung = Rung(sc.model, sc.props.model_key,
                    group_stats("all", "all facts", facts_of(i, None), thr, None, seed, n_boot, False))
        for p in pids:
            rung.relations[p] = group_stats(p, labels.get(p), facts_of(i, p), thr, None, seed, n_boot, False)
        rungs.append(rung)

    def pairs(i: int, pid: str | None) -> list[tuple[float, float]]:
        return [(float(a["score"]), float(b["score"]))
                for a, b in zip(facts_of(i, pid), facts_of(i + 1, pid), strict=True)]

    steps = [Step(keys[i], keys[i + 1], paired_group("all", "all facts", pairs(i, None), thr, seed, n_boot),
                  [paired_group(p, labels.get(p), pairs(i, p), thr, seed, n_boot) for p in pids])
             for i in range(len(scores) - 1)]
    level = chance_level(graph, keys[0], scores[0].props.measure_key)
    return Ladder(scores[0].props.measure_key, thr, len(common), pids, labels, rungs, steps,
                  Chance(*level) if level is not None else None, seed, n_boot)


# --- output ---------------------------------------------------------------------------------------


def _rel_name(lad: Ladder, pid: str) -> str:
    label = lad.labels.get(pid)
    return f"{pid} {label}" if label else pid


def tables(lad: Ladder) -> tuple[list[str], list[list[str]], list[str], list[list[str]]]:
    """The rung table (relation rows × model columns) and the step table, as text cells."""
    head = ["relation", *(r.model for r in lad.rungs)]
    body = [["all facts", *(_with_ci(r.overall) for r in lad.rungs)]]
    body += [[_rel_name(lad, p), *(_with_ci(r.relations[p]) for r in lad.rungs)] for p in lad.relations]
    shead = ["step", "facts", "difference [95% CI]", "known (lower, upper)", "McNemar b/c", "p"]
    sbody = [[f"{s.lower} → {s.upper}", str(s.overall.facts), _diff(s.overall),
              f"{s.overall.a_known}, {s.overall.b_known}", f"{s.overall.b}/{s.overall.c}",
              f"{s.overall.p:.3g}"] for s in lad.steps]
    return head, body, shead, sbody


def print_ladder(lad: Ladder, console: Console) -> None:
    from rich.table import Table

    from kgprobe.progress import safe_text

    head, body, shead, sbody = tables(lad)
    t = Table(*head, title=safe_text(f"model ladder: {measure_label(lad.measure_key)} on {lad.facts} shared facts"))
    for row in body:
        t.add_row(*(safe_text(c) for c in row))
    console.print(t)
    st = Table(*shead, title=safe_text("steps: the upper rung minus the lower, fact by fact"))
    for row in sbody:
        st.add_row(*(safe_text(c) for c in row))
    console.print(st)
    console.print(f"intervals: 95% percentile bootstrap ({lad.bootstrap} resamples, seed {lad.seed}); "
                  f"known = score >= {lad.threshold:g}", highlight=False)
    if lad.chance is not None:
        console.print(f"chance: {chance_words(lad.chance)}", highlight=False)


def markdown(lad: Ladder) -> str:
    def md(head: list[str], body: list[list[str]]) -> str:
        esc = [[c.replace("|", "\\|") for c in r] for r in [head, *body]]
        lines = ["| " + " | ".join(esc[0]) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in esc[1:]]
        return "\n".join(lines)

    head, body, shead, sbody = tables(lad)
    chance = f"\n\nChance: {chance_words(lad.chance)}." if lad.chance else ""
    return (f"# Model ladder: {measure_label(lad.measure_key)} on {lad.facts} shared facts\n\n"
            f"{md(head, body)}\n\n## Steps\n\n{md(shead, sbody)}\n\n95% percentile bootstrap "
            f"({lad.bootstrap} resamples, seed {lad.seed}); known = score >= {lad.threshold:g}.{chance}\n")


def ladder_svg(lad: Ladder) -> str:
    """Each model's overall mean with its interval, in ladder order; relations as thin lines;
    the chance level dashed. A standalone SVG document."""
    import io

    import matplotlib

    fig = new_figure(1.6 + 1.1 * len(lad.rungs), 3.6)
    ax = fig.add_subplot()
    xs = list(range(len(lad.rungs)))
    for p in lad.relations:
        ys = [r.relations[p].mean for r in lad.rungs]
        ax.plot(xs, ys, color="#bbbbbb", linewidth=0.8, zorder=1)
    means = [r.overall.mean or 0.0 for r in lad.rungs]
    lo = [m - (r.overall.ci_low if r.overall.ci_low is not None else m) for m, r in zip(means, lad.rungs, strict=True)]
    hi = [(r.overall.ci_high if r.overall.ci_high is not None else m) - m for m, r in zip(means, lad.rungs, strict=True)]
    ax.errorbar(xs, means, yerr=[lo, hi], fmt="o-", color="#3b6fb6", capsize=4, zorder=3,
                label="all facts, 95% CI")
    if lad.chance is not None:
        ax.axhline(lad.chance.level, color="#999999", linestyle="--", linewidth=1,
                   label=f"chance {lad.chance.level:.3f}")
    ax.set_xticks(xs, [r.model.replace("$", r"\$") for r in lad.rungs], rotation=20, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel(measure_label(lad.measure_key).replace("$", r"\$"))
    ax.set_title(f"{lad.facts} shared facts (grey: relations)", fontsize=9)
    ax.legend(fontsize=8, loc="best")
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "kgprobe-ladder"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    return buf.getvalue()


def write_ladder(lad: Ladder, out: str | Path, *, overwrite: bool = False) -> dict[str, Path]:
    """ladder.json, ladder.csv (one row per model and relation, one per step), ladder.md and
    ladder.svg in ``out``, written as one output (kgprobe.outputs.write_files). A directory that
    holds a report, or the ladder of other models, is refused unless ``overwrite``."""
    from kgprobe.outputs import csv_text, write_files

    rows: list[list[Any]] = []
    for r in lad.rungs:
        for g in [r.overall, *(r.relations[p] for p in lad.relations)]:
            rows.append(["rung", r.model_key, "", lad.measure_key, g.key, g.facts, g.mean, g.ci_low,
                         g.ci_high, g.known, None, None, None])
    for s in lad.steps:
        for pg in [s.overall, *s.relations]:
            rows.append(["step", s.lower, s.upper, lad.measure_key, pg.key, pg.facts, pg.diff,
                         pg.diff_ci_low, pg.diff_ci_high, None, pg.b, pg.c, pg.p])
    files: dict[str, str | bytes] = {
        "ladder.json": json.dumps(lad.to_dict(), indent=1, ensure_ascii=False),
        "ladder.csv": csv_text(["row", "model", "upper_model", "measure", "key", "facts", "value",
                                "ci_low", "ci_high", "known", "mcnemar_b", "mcnemar_c", "mcnemar_p"], rows),
        "ladder.md": markdown(lad),
        "ladder.svg": ladder_svg(lad),
    }
    owner = {"kind": "ladder", "models": [r.model_key for r in lad.rungs]}
    return write_files(out, files, owner=owner, overwrite=overwrite)
