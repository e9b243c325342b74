"""Issue 39 items 1-2 for loader formats: the formats are entries of one registry
(`kgprobe.loaders.formats.LOADERS`, entry-point group `kgprobe.loaders`), and a format from
outside the package (examples/kgprobe-kgtsv, pip-installed into a temporary folder) is read by
`kgprobe ingest`, by suffix and by content, its records carried into the graph unedited."""

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
from kgprobe.loaders import LOADERS, Loader, detect_format, open_source
from kgprobe.loaders.common import Filters

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "kgprobe-kgtsv"

KGTSV = (
    "# two people, where they studied, and a relation's label\n"
    "Q42\tlabel\tDouglas Adams\n"
    "Q42\talias\tDNA\n"
    "Q42\tP31\tQ5\n"
    "Q42\tP69\tQ691283\tpreferred\n"
    "Q42\tP69\tQ4961791\n"
    "Q42\tP20\tQ159288\n"
    "Q7251\tlabel\tAlan Turing\n"
    "Q7251\tP69\tQ35794\n"
    "Q7251\tP69\tQ21578\tdeprecated\n"
    "P69\tlabel\teducated at\n"
)
#: what the file says, read by eye: (subject, pid, object, rank) of the non-deprecated facts
FACTS = {("Q42", "P69", "Q691283", "preferred"), ("Q42", "P69", "Q4961791", "normal"),
         ("Q42", "P20", "Q159288", "normal"), ("Q7251", "P69", "Q35794", "normal")}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_example(tmp_path_factory, "kgprobe-kgtsv")


def test_the_built_in_formats_are_the_registry() -> None:
    """Suffixes, sniffing and the supported-inputs line come from the registry's entries."""
    assert list(LOADERS) == ["json", "nt", "turtle", "sparql"]
    assert {s: n for n, c in LOADERS.items() for s in c.suffixes} == {
        ".json": "json", ".jsonl": "json", ".ndjson": "json", ".nt": "nt", ".ntriples": "nt",
        ".ttl": "turtle", ".turtle": "turtle"}
    assert [n for n, c in LOADERS.items() if c.sniff("# c\n\n@prefix wd: <x> .\n")] == ["turtle"]
    assert detect_format("https://query.wikidata.org/sparql") == "sparql"


def test_a_bad_loader_is_refused_naming_both(tmp_path: Path) -> None:
    """A format that takes a built-in suffix, or declares nothing that could pick it."""

    class Clash(Loader):
        name, title, suffixes = "clash", "Clash (.ttl)", (".ttl",)

        def read(self, source: Any, filters: Filters, **options: Any) -> Any:
            return iter(())

    class Unreachable(Loader):
        name, title = "nowhere", "Nowhere"

        def read(self, source: Any, filters: Filters, **options: Any) -> Any:
            return iter(())

    with pytest.raises(TypeError, match=r"^loader 'clash' \(.*Clash\): suffix \.ttl is taken by the loader 'turtle'$"):
        LOADERS.register(Clash)
    with pytest.raises(TypeError, match="nothing would ever pick it"):
        LOADERS.register(Unreachable)
    assert "clash" not in LOADERS and "nowhere" not in LOADERS


def test_installed_loader_format_through_ingest(graph: Any, kgprobe_env: dict[str, str], site: Path,
                                                tmp_path: Path) -> None:
    """Not installed: a .kgtsv file is one line, exit 4. Installed (entry point of
    `kgprobe.loaders`): `kgprobe plugins` lists it with its origin, `kgprobe ingest` reads it
    by its suffix, and the graph holds exactly what the file says."""
    data = tmp_path / "people.kgtsv"
    data.write_text(KGTSV, encoding="utf-8")
    before = kgprobe("ingest", str(data), env=kgprobe_env)
    assert before.returncode == 4 and before.stderr.startswith(f"error: {data}: unsupported file;")
    assert len(before.stderr.strip().splitlines()) == 1

    env = with_path(kgprobe_env, site)
    listed = json.loads(kgprobe("plugins", "--json", env=env).stdout)["plugins"]
    mine = [p for p in listed if p["kind"] == "loader" and p["name"] == "kgtsv"]
    assert mine == [{"kind": "loader", "name": "kgtsv", "description": "kgprobe TSV (.kgtsv)",
                     "origin": "entry point kgtsv = kgprobe_kgtsv:KgTsv of kgprobe-kgtsv 0.1.0 (kgprobe.loaders)",
                     "target": "kgprobe_kgtsv.KgTsv"}]
    (tmp_path / "notes.bin").write_bytes(b"\x00\x01")
    bad = kgprobe("ingest", str(tmp_path / "notes.bin"), env=env)
    assert bad.returncode == 4 and "kgprobe TSV (.kgtsv), optionally .gz/.bz2/.zst" in bad.stderr

    r = kgprobe("ingest", str(data), "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["facts"] == len(FACTS)
    facts = graph.read("MATCH (s:Entity)-[f:FACT]->(o:Entity) "
                       "RETURN s.qid AS s, f.pid AS p, o.qid AS o, f.rank AS rank, f.source AS source")
    assert {(x["s"], x["p"], x["o"], x["rank"]) for x in facts} == FACTS
    assert len(facts) == len(FACTS) and {x["source"] for x in facts} == {"kgtsv"}
    people = graph.read("MATCH (e:Entity) WHERE e.label IS NOT NULL "
                        "RETURN e.qid AS q, e.label AS label, e.aliases AS aliases ORDER BY q")
    assert [(x["q"], x["label"], x["aliases"]) for x in people] == [
        ("Q42", "Douglas Adams", ["DNA"]), ("Q7251", "Alan Turing", None)]
    assert graph.read("MATCH (:Entity {qid: 'Q42'})-[:INSTANCE_OF]->(t) RETURN t.qid AS t") == [{"t": "Q5"}]
    assert graph.read("MATCH (r:Relation {pid: 'P69'}) RETURN r.label AS label") == [{"label": "educated at"}]


def test_plugin_format_by_content_and_filters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through `--plugin`/KGPROBE_PLUGINS (the module registers its class): a file whose
    suffix says nothing is sniffed; the filters apply; a bad line fails the call."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setenv("KGPROBE_PLUGINS", "kgprobe_kgtsv")
    data = tmp_path / "people.txt"
    data.write_text(KGTSV, encoding="utf-8")
    try:
        assert detect_format(data) == "kgtsv"
        got = [r for r in open_source(data, Filters.make(relations=["P69"], limit=1))]
        assert [type(r).__name__ for r in got] == ["RelationRecord", "EntityRecord", "FactRecord", "FactRecord"]
        assert {(f.subject, f.object) for f in got[2:]} == {("Q42", "Q691283"), ("Q42", "Q4961791")}
        (tmp_path / "bad.kgtsv").write_text("Q42\tlabel\n", encoding="utf-8")
        with pytest.raises(InputError, match=r"bad\.kgtsv:1: not subject"):
            open_source(tmp_path / "bad.kgtsv")
    finally:
        LOADERS.pop("kgtsv")
        sys.modules.pop("kgprobe_kgtsv", None)
        plugins._loaded.clear()


def test_a_broken_loader_plugin_is_one_line(tmp_path: Path) -> None:
    """A plug-in module whose format takes a built-in's suffix: one line, exit 2."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "json_again.py").write_text(
        "from kgprobe.loaders.formats import LOADERS, Loader\n\n\n"
        "@LOADERS.register\nclass Mine(Loader):\n    name = 'mine'\n    title = 'Mine (.json)'\n"
        "    suffixes = ('.json',)\n\n    def read(self, source, filters, **options):\n        return iter(())\n")
    env = clean_env()
    env = with_path({**env, "KGPROBE_HOME": str(tmp_path / "home")}, mods)
    (tmp_path / "x.json").write_text("{}", encoding="utf-8")
    r = kgprobe("--plugin", "json_again", "ingest", str(tmp_path / "x.json"), env=env)
    assert r.returncode == 2, r.stderr
    assert r.stderr == ("error: plugin module json_again: TypeError: loader 'mine' (json_again.Mine): "
                        "suffix .json is taken by the loader 'json'\n")


def test_the_docs_example_is_the_package() -> None:
    """docs/loaders.md shows the example package's module and pyproject.toml as they are."""
    doc = (REPO / "docs" / "loaders.md").read_text(encoding="utf-8")
    part = doc.split("### Worked example: adding a format", 1)[1].split("\n## ", 1)[0]
    for path in (EXAMPLE / "kgprobe_kgtsv" / "__init__.py", EXAMPLE / "pyproject.toml"):
        assert path.read_text(encoding="utf-8") in part, path
