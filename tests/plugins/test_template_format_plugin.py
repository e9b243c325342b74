"""Issue 39 step 8: template formats are entries of one registry
(`kgprobe.loaders.templates.TEMPLATE_FORMATS`, entry-point group `kgprobe.template_formats`),
and a format from outside the package (examples/kgprobe-pidcsv, pip-installed into a temporary
folder) is read by `kgprobe templates import --format pidcsv`, its templates carried into the
graph and listed by `kgprobe templates list`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_support import clean_env, kgprobe
from plugin_support import install_example, with_path

from kgprobe import plugins
from kgprobe.errors import InputError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "kgprobe-pidcsv"
BUILT_IN = ["lama", "pararel", "lpaqa", "wikifactdiff", "bear", "kamel", "templama", "kgprobe"]

PIDCSV = ("pid,template\n"
          "P36,The capital of [X] is [Y] .\n"
          "P36,\"What is the capital of [X]?\"\n"
          "P19,[X] was born in [Y] .\n")
#: what the file says, read by eye: (pid, text, style), the source being the format's name
TEMPLATES = {("P36", "The capital of [X] is [Y] .", "statement-object-last"),
             ("P36", "What is the capital of [X]?", "question"),
             ("P19", "[X] was born in [Y] .", "statement-object-last")}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_example(tmp_path_factory, "kgprobe-pidcsv")


def test_the_built_in_formats_are_the_registry() -> None:
    """The eight formats are the registry's entries, the names tuple and the help are read
    from it, and each entry reads its own kind of file (a folder for pararel and lpaqa)."""
    from kgprobe.loaders.templates import FORMATS, TEMPLATE_FORMATS, folder_formats, formats_help

    assert list(TEMPLATE_FORMATS) == BUILT_IN and tuple(BUILT_IN) == FORMATS
    assert formats_help(plugins=False) == "lama, pararel, lpaqa, wikifactdiff, bear, kamel, templama or kgprobe"
    assert folder_formats(plugins=False) == ("pararel", "lpaqa")


def test_a_bad_template_format_is_refused() -> None:
    """A format without a description or a reader, or one that takes a built-in's name."""
    from kgprobe.loaders.templates import TEMPLATE_FORMATS, TemplateFormat

    class NoRead(TemplateFormat):
        name, description = "noread", "nothing"

    class Again(TemplateFormat):
        name, description = "lama", "LAMA again"

        def read(self, path: Path, relation: str | None) -> Any:
            return iter(())

    with pytest.raises(TypeError, match="has no read"):
        TEMPLATE_FORMATS.register(NoRead)
    with pytest.raises(TypeError, match=r"^template format name 'lama' of .*Again is taken by the built-in"):
        TEMPLATE_FORMATS.register(Again)
    assert "noread" not in TEMPLATE_FORMATS and TEMPLATE_FORMATS["lama"] is not Again


def test_installed_template_format_through_the_cli(graph: Any, kgprobe_env: dict[str, str], site: Path,
                                                   tmp_path: Path) -> None:
    """Not installed: --format pidcsv is one line, exit 2, naming the known formats. Installed
    (entry point of `kgprobe.template_formats`): `kgprobe plugins` lists it with its origin,
    `kgprobe templates import` writes its templates to the graph and `templates list` shows them."""
    data = tmp_path / "mine.csv"
    data.write_text(PIDCSV, encoding="utf-8")
    before = kgprobe("templates", "import", str(data), "--format", "pidcsv", env=kgprobe_env)
    assert before.returncode == 2
    assert before.stderr == ("error: unknown template format 'pidcsv'; one of "
                             f"{', '.join(BUILT_IN)}\n")

    env = with_path(kgprobe_env, site)
    listed = json.loads(kgprobe("plugins", "--json", env=env).stdout)["plugins"]
    mine = [p for p in listed if p["kind"] == "template format"]
    assert [p["name"] for p in mine] == [*BUILT_IN, "pidcsv"]
    assert mine[-1] == {"kind": "template format", "name": "pidcsv",
                        "description": "CSV with a header pid,template ([X] / [Y])",
                        "origin": "entry point pidcsv = kgprobe_pidcsv:PidCsv of kgprobe-pidcsv 0.1.0 "
                                  "(kgprobe.template_formats)",
                        "target": "kgprobe_pidcsv.PidCsv"}
    unknown = kgprobe("templates", "import", str(data), "--format", "nope", env=env)
    assert unknown.returncode == 2 and unknown.stderr.endswith(", kgprobe, pidcsv\n")

    r = kgprobe("templates", "import", str(data), "--format", "pidcsv", "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"imported": 3}
    shown = kgprobe("templates", "list", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)
    assert {(t["pid"], t["text"], t["style"]) for t in rows} == TEMPLATES
    assert len(rows) == 3 and {t["source"] for t in rows} == {"pidcsv"}
    stored = graph.read("MATCH (t:Template) RETURN t.text AS text")
    assert {x["text"] for x in stored} == {t for _, t, _ in TEMPLATES}


def test_plugin_format_through_kgprobe_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through KGPROBE_PLUGINS (the module registers its class): read_templates reads the
    format, keeps one relation, and a bad row fails with one line naming the file and row."""
    from kgprobe.loaders.templates import TEMPLATE_FORMATS, read_templates

    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setenv("KGPROBE_PLUGINS", "kgprobe_pidcsv")
    data = tmp_path / "mine.csv"
    data.write_text(PIDCSV, encoding="utf-8")
    try:
        got = list(read_templates(data, "pidcsv", relation="P36"))
        assert {(t.pid, t.text, t.style) for t in got} == {x for x in TEMPLATES if x[0] == "P36"}
        (tmp_path / "bad.csv").write_text("pid,template\nP36,no slots here\n", encoding="utf-8")
        with pytest.raises(InputError, match=r"bad\.csv:2"):
            list(read_templates(tmp_path / "bad.csv", "pidcsv"))
    finally:
        TEMPLATE_FORMATS.pop("pidcsv")
        sys.modules.pop("kgprobe_pidcsv", None)
        plugins._loaded.clear()


def test_a_broken_template_format_plugin_is_one_line(tmp_path: Path) -> None:
    """A plug-in module whose format takes a built-in's name: one line, exit 2."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "lama_again.py").write_text(
        "from kgprobe.loaders.templates import TEMPLATE_FORMATS, TemplateFormat\n\n\n"
        "@TEMPLATE_FORMATS.register\nclass Mine(TemplateFormat):\n    name = 'lama'\n"
        "    description = 'mine'\n\n    def read(self, path, relation):\n        return iter(())\n")
    env = clean_env()
    env = with_path({**env, "KGPROBE_HOME": str(tmp_path / "home")}, mods)
    (tmp_path / "x.jsonl").write_text("", encoding="utf-8")
    r = kgprobe("--plugin", "lama_again", "templates", "import", str(tmp_path / "x.jsonl"),
                "--format", "lama", env=env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: plugin module lama_again: TypeError: template format name 'lama' of "
                               "lama_again.Mine is taken by the built-in template format"), r.stderr
    assert len(r.stderr.splitlines()) == 1


def test_the_docs_example_is_the_package() -> None:
    """docs/templates.md shows the example package's module and pyproject.toml as they are."""
    doc = (REPO / "docs" / "templates.md").read_text(encoding="utf-8")
    part = doc.split("### Worked example: adding a template format", 1)[1].split("\n## ", 1)[0]
    for path in (EXAMPLE / "kgprobe_pidcsv" / "__init__.py", EXAMPLE / "pyproject.toml"):
        assert path.read_text(encoding="utf-8") in part, path
