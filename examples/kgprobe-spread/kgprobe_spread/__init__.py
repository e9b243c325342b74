"""kgprobe-spread: a report section from outside kgprobe (docs/reports.md)."""

from __future__ import annotations

from kgprobe.reports.data import Report
from kgprobe.reports.sections import SECTIONS, ReportSection


@SECTIONS.register
class Spread(ReportSection):
    """How far apart the best and the worst group of the report are (the primary model)."""

    name = "spread"
    title = "Spread between groups"
    summary = "the best and the worst group by mean score, and the difference"

    def lines(self, rep: Report) -> list[str] | None:
        groups = [g for g in rep.primary.groups if g.mean is not None]  # best first
        if len(groups) < 2:
            return None  # nothing to compare: no section
        best, worst = groups[0], groups[-1]
        return [f"Best: {best.name}, mean {best.mean:.3f} over {best.facts} facts.",
                f"Worst: {worst.name}, mean {worst.mean:.3f} over {worst.facts} facts.",
                f"Spread: {best.mean - worst.mean:.3f}."]
