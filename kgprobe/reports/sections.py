"""Report sections: the contract of one part of the report that every writer renders
(:class:`ReportSection`) and the registry of them (:data:`SECTIONS`, entry-point group
``kgprobe.report_sections``).

A section reads the :class:`~kgprobe.reports.data.Report` and says what it shows in each format:
:meth:`~ReportSection.lines` for the text formats (``report.md``, the terminal),
:meth:`~ReportSection.html` for the page and :meth:`~ReportSection.data` for ``results.json``.
The built-in sections have their fixed places in each writer's layout (the chance level sits
under the tables); a section of a plug-in comes after the built-in content of every writer, under
its ``title``, so a new section is one class in one module (or one installed package) and no
writer is edited. The chance level is one built-in entry, and :func:`chance_words` its one
spelling.

Imports only the report's data types (and :mod:`kgprobe.plugins`)."""

from __future__ import annotations

import html as _html
from dataclasses import asdict
from typing import Any, ClassVar

from kgprobe.plugins import REPORT_SECTIONS as SECTION_GROUP
from kgprobe.plugins import Registry
from kgprobe.reports.data import Chance, Report


class ReportSection:
    """One section of the report. A plug-in subclasses it, sets ``name``, ``title`` and
    ``summary`` and writes :meth:`lines` (and, where the page or ``results.json`` should show
    more than those lines, :meth:`html` or :meth:`data`); ``@SECTIONS.register`` (or an entry
    point of the group ``kgprobe.report_sections``) adds it to every report."""

    #: the section's key (``results.json``'s ``sections``, the page's element id)
    name: ClassVar[str] = ""
    #: its heading in the Markdown, the terminal and the page
    title: ClassVar[str] = ""
    #: one line: what it shows (``kgprobe plugins``)
    summary: ClassVar[str] = ""

    def lines(self, rep: Report) -> list[str] | None:
        """The section as lines of plain text; None: it has nothing to say about this report
        (no heading is written either)."""
        raise NotImplementedError

    def html(self, rep: Report) -> str | None:
        """The section's body on the page, HTML (escape what comes from data); by default the
        lines as paragraphs."""
        lines = self.lines(rep)
        if lines is None:
            return None
        return "".join(f'<p class="note">{_html.escape(x)}</p>' for x in lines)

    def data(self, rep: Report) -> Any:
        """What ``results.json`` records of it (JSON-ready); by default its lines."""
        return self.lines(rep)


#: every report section by name: the built-ins (placed by each writer), then the plug-ins of
#: ``kgprobe.report_sections`` (after each writer's built-in content, in registration order)
SECTIONS: Registry[type[ReportSection]] = Registry(
    "report section", SECTION_GROUP, ReportSection,
    requires=("title", "summary"), overrides=("lines",),
    describe=lambda cls: cls.summary)


def chance_words(chance: Chance, why: str = "") -> str:
    """The chance level as every report writes it: ``0.167 (1/(n+1) for n = 5 distractors)``,
    ``why`` added inside the brackets."""
    return f"{chance.level:.3f} ({chance.rule}{'; ' + why if why else ''})"


@SECTIONS.register
class ChanceSection(ReportSection):
    """The chance level: what a model that knows nothing scores in expectation, where the
    measure defines one (``Measure.chance``)."""

    name = "chance"
    title = "Chance level"
    summary = "the score a model that knows nothing gets in expectation, where the measure defines one"

    def lines(self, rep: Report) -> list[str] | None:
        """The line under the tables of ``report.md`` and ``report.tex``."""
        return None if rep.chance is None else [f"Chance level: {chance_words(rep.chance)}."]

    def note(self, rep: Report) -> str:
        """The terminal's and the page's line, which also says when there is none."""
        if rep.chance is None:
            return "chance level: not defined for this measure"
        return "chance level: " + chance_words(
            rep.chance, "what a model that knows nothing scores in expectation")

    def html(self, rep: Report) -> str | None:
        return _html.escape(self.note(rep))

    def data(self, rep: Report) -> Any:
        return asdict(rep.chance) if rep.chance is not None else None


#: the sections every writer places itself
BUILTIN = ("chance",)


def chance_section() -> ChanceSection:
    """The built-in chance section (the writers place it under their tables)."""
    return ChanceSection()


def added_sections(rep: Report) -> list[tuple[ReportSection, list[str]]]:
    """The plug-ins' sections that have something to say about ``rep``, with their lines, in
    registration order (each writer puts them after its own content)."""
    out = []
    for name, cls in SECTIONS.load().items():
        if name in BUILTIN:
            continue
        section = cls()
        lines = section.lines(rep)
        if lines is not None:
            out.append((section, lines))
    return out
