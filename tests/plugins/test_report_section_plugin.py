"""Issue 39 items 1-2 for report sections: the chance level is one built-in entry of one
registry (`kgprobe.reports.sections.SECTIONS`, entry-point group `kgprobe.report_sections`), and
a section from outside the package (examples/kgprobe-spread, pip-installed into a temporary
folder) is added by `kgprobe report` to the Markdown, the page, results.json and the terminal,
its numbers worked out by hand from the hand-scored graph of tests/reports/test_reports.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from plugin_support import install_example, with_path
from report_worlds import hand_graph_fixture  # noqa: F401  (the fixture hand_graph)

from kgprobe.reports.data import Chance
from kgprobe.reports.sections import SECTIONS, ReportSection, chance_words

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "kgprobe-spread"
#: tests/reports/test_reports.py's HAND scores by relation: P36 1, 0, 1 (mean 2/3); P27 seven facts,
#: mean 3.5/7 = 0.5; P35 one fact, 0.5. Best first, ties by PID: P36, P27, P35.
LINES = ["Best: P36 capital, mean 0.667 over 3 facts.",
         "Worst: P35 head of state, mean 0.500 over 1 facts.",
         "Spread: 0.167."]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_example(tmp_path_factory, "kgprobe-spread")


def test_the_chance_level_is_one_entry_with_one_spelling() -> None:
    """The built-in chance section, and the one spelling of a chance level."""
    assert list(SECTIONS)[:1] == ["chance"] and SECTIONS.origin("chance") is None
    assert chance_words(Chance(1 / 6, "1/(n+1) for n = 5 distractors")) == \
        "0.167 (1/(n+1) for n = 5 distractors)"
    assert chance_words(Chance(0.5, "1/2"), "why") == "0.500 (1/2; why)"

    class NoLines(ReportSection):
        name, title, summary = "nolines", "No lines", "says nothing"

    with pytest.raises(TypeError, match="has no lines"):
        SECTIONS.register(NoLines)
    assert "nolines" not in SECTIONS


def _report(env: dict[str, str], out: Path) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).parent / "kgprobe")
    return subprocess.run([exe, "report", "-m", "hand", "--out", str(out)], capture_output=True,
                          text=True, env={**env, "COLUMNS": "120"}, timeout=300)


def test_installed_section_in_every_report_format(hand_graph: Any,
                                                  kgprobe_env: dict[str, str], site: Path,
                                                  tmp_path: Path) -> None:
    """Installed (entry point of `kgprobe.report_sections`): `kgprobe plugins` lists it with its
    origin, and `kgprobe report` writes it, with the numbers worked out by hand, under its
    title into report.md, report.html (before the provenance), results.json (`sections`) and
    the terminal. Not installed: none of it, and results.json has no `sections` key."""
    hand_graph.write("MATCH (r:Relation {pid: 'P36'}) SET r.label = 'capital'")
    hand_graph.write("MATCH (r:Relation {pid: 'P35'}) SET r.label = 'head of state'")
    plain = _report(kgprobe_env, tmp_path / "plain")
    assert plain.returncode == 0, plain.stderr
    assert "Spread" not in (tmp_path / "plain" / "report.md").read_text(encoding="utf-8")
    assert "sections" not in json.loads((tmp_path / "plain" / "results.json").read_text())

    env = with_path(kgprobe_env, site)
    listed = json.loads(subprocess.run(
        [str(Path(sys.executable).parent / "kgprobe"), "plugins", "--json"], capture_output=True,
        text=True, env=env, timeout=300).stdout)["plugins"]
    assert [(p["name"], p["origin"]) for p in listed if p["kind"] == "report section"] == [
        ("chance", "built-in"),
        ("spread", "entry point spread = kgprobe_spread of kgprobe-spread 0.1.0 (kgprobe.report_sections)")]

    r = _report(env, tmp_path / "with")
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "with" / "report.md").read_text(encoding="utf-8")
    before = (tmp_path / "plain" / "report.md").read_text(encoding="utf-8")
    assert md == before + "\n\n### Spread between groups\n\n" + "\n".join(x + "  " for x in LINES) + "\n"
    page = (tmp_path / "with" / "report.html").read_text(encoding="utf-8")
    body = "".join(f'<p class="note">{x}</p>' for x in LINES)
    assert f'<section id="section-spread"><h2>Spread between groups</h2>\n{body}</section>' in page
    assert page.index('id="section-spread"') < page.index("<h2>Provenance</h2>")
    doc = json.loads((tmp_path / "with" / "results.json").read_text())
    assert doc["sections"] == {"spread": LINES}
    terminal = r.stdout.splitlines()
    at = terminal.index("Spread between groups")
    assert terminal[at + 1:at + 4] == LINES


def test_the_docs_example_is_the_package() -> None:
    """docs/reports.md shows the example package's module and pyproject.toml as they are."""
    doc = (REPO / "docs" / "reports.md").read_text(encoding="utf-8")
    part = doc.split("### Worked example: adding a section", 1)[1].split("\n## ", 1)[0]
    for path in (EXAMPLE / "kgprobe_spread" / "__init__.py", EXAMPLE / "pyproject.toml"):
        assert path.read_text(encoding="utf-8") in part, path
