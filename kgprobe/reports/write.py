"""A report's files, put in place as one output, and ``report()``: connect, build, write."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from kgprobe.reports.build import bucket_label, build_report, check_grouping
from kgprobe.reports.data import Report
from kgprobe.reports.figures import png_bytes, svg_document
from kgprobe.reports.html import render_html
from kgprobe.reports.results import FactDetail
from kgprobe.types import FactKey

if TYPE_CHECKING:  # pragma: no cover

    from matplotlib.figure import Figure

    from kgprobe.config import Settings
    from kgprobe.graph.client import Graph


def write_report(
    rep: Report, out: str | Path, *, details: Mapping[FactKey, FactDetail] | None = None,
    overwrite: bool = False, command_seconds: float | None = None,
) -> dict[str, Path]:
    """report.json, relations.csv, groups.csv, popularity.csv, paired.csv (with a second
    model), report.html, report.md, report.tex, each plot as ``figure-<name>.svg`` and
    ``.png``, results.json, harness.json and samples.jsonl (+ samples.parquet with pyarrow) in
    ``out``, put in place as one output (kgprobe.outputs.write_files: a failed write leaves the
    previous report whole, files of a previous report that this one does not write are
    removed, and a directory holding the report of other models is refused unless
    ``overwrite``). CSV text cells go through the spreadsheet-formula rule
    (kgprobe.outputs.csv_cell)."""
    from kgprobe.outputs import csv_text, json_text, write_files
    from kgprobe.reports.results import report_owner, results_files
    from kgprobe.reports.text import latex, markdown

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
        "report.json": json_text(rep.to_dict(), "report.json", indent=1),
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
    figures: dict[str, Figure] = {}
    files["report.html"] = render_html(rep, figures)
    names.update({"markdown": "report.md", "latex": "report.tex"})
    files["report.md"] = markdown(rep)
    files["report.tex"] = latex(rep)
    for fname, fig in figures.items():
        names[f"figure_{fname}_svg"] = f"figure-{fname}.svg"
        names[f"figure_{fname}_png"] = f"figure-{fname}.png"
        files[f"figure-{fname}.svg"] = svg_document(fig, fname)
        files[f"figure-{fname}.png"] = png_bytes(fig)
    result_names, result_files = results_files(rep, details, command_seconds=command_seconds)
    files.update(result_files)
    names.update(result_names)
    written = write_files(out, files, owner=report_owner(rep), overwrite=overwrite)
    return {key: written[name] for key, name in names.items()}



def report(
    model: str, *, vs: str | None = None, out: str | Path | None = None, measure: str | None = None,
    threshold: float | None = None, seed: int = 0, by: str = "relation", type_of: str = "subject",
    settings: Settings | None = None, graph: Graph | None = None,
    details: Mapping[FactKey, FactDetail] | None = None, facts: Collection[str] | None = None,
    overwrite: bool = False, command_seconds: float | None = None, vs_measure: str | None = None,
    vs_details: Mapping[FactKey, FactDetail] | None = None, relations: Collection[str] = (),
) -> tuple[Report, dict[str, Path]]:
    """Build the report and, with ``out``, write the report files and the results file there
    (paths returned). ``details``: per-fact distractor records from a probe (kgprobe.reports.results);
    ``facts``: report on these fact keys only (one run's); ``overwrite``: replace a directory
    that holds another report (kgprobe.outputs.check_owner); ``vs_measure``: the model against
    itself under another measure key (build_report); ``vs_details``: that measure's per-fact
    records, with which the report lists the facts that moved and why (kgprobe.reports.wording);
    ``relations``: only these relations' facts."""
    from kgprobe.graph.client import connect

    check_grouping(by, type_of)  # before the graph is contacted
    if out is not None:
        from kgprobe.outputs import check_output_dir

        check_output_dir(out)
    g = graph if graph is not None else connect(settings)
    try:
        rep = build_report(g, model, vs=vs, measure=measure, threshold=threshold, seed=seed, by=by,
                           type_of=type_of, facts=facts, vs_measure=vs_measure, relations=relations)
    finally:
        if graph is None:
            g.close()
    if vs_details is not None and details is not None and rep.other is not None and rep.same_model:
        from kgprobe.reports.wording import wording_moves

        rep.moves = wording_moves(rep.primary.facts, rep.other.facts, details, vs_details)
    paths = (write_report(rep, out, details=details, overwrite=overwrite,
                          command_seconds=command_seconds) if out is not None else {})
    return rep, paths
