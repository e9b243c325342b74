"""kgprobe's modules form no import cycle at any depth, function-level imports included, and
the layers of docs/design.md §1 point one way (issue 18 #4, issue 21).

Every ``import``/``from … import`` statement of every module counts, wherever it stands (module
top, function body, try block), except those under ``if TYPE_CHECKING:``, which Python never
executes. ``from kgprobe import x`` counts as an import of the package ``kgprobe`` (its lazy API
imports ``kgprobe.api``, so a module that does it closes a cycle).
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2] / "kgprobe"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, package: str) -> list[str]:
    """Every module name an import statement of ``tree`` may load (TYPE_CHECKING blocks left out)."""
    out: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            out.append(base)
            out.extend(f"{base}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


@functools.cache
def import_graph() -> nx.DiGraph:
    files = {_module_name(p): p for p in ROOT.rglob("*.py")}
    g = nx.DiGraph()
    for mod, path in files.items():
        g.add_node(mod)
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for name in _imports(ast.parse(path.read_text(encoding="utf-8")), package):
            if name in files and name != mod:
                g.add_edge(mod, name)
    return g


def test_the_checker_sees_a_function_level_cycle(tmp_path: Path) -> None:
    """The checker itself: a cycle made only of imports inside functions is found."""
    a = ast.parse("def f():\n    from kgprobe.b import x\n")
    b = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kgprobe.c import y\n"
                  "def g():\n    import kgprobe.a\n")
    assert "kgprobe.b" in _imports(a, "kgprobe")
    assert "kgprobe.a" in _imports(b, "kgprobe") and "kgprobe.c" not in _imports(b, "kgprobe")
    g = nx.DiGraph([("kgprobe.a", "kgprobe.b"), ("kgprobe.b", "kgprobe.a")])
    assert [sorted(c) for c in nx.simple_cycles(g)] == [["kgprobe.a", "kgprobe.b"]]


def test_no_import_cycle_at_any_depth() -> None:
    g = import_graph()
    assert g.number_of_edges() > 100  # the walk found the package's imports
    cycles = [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]
    assert cycles == [], f"import cycles: {cycles}"


# (lower layer, higher layer): nothing in the lower layer imports the higher one
LAYERS = [
    ("kgprobe.types", "kgprobe."),  # the vocabulary: every layer may use it
    ("kgprobe.stats", "kgprobe."),
    ("kgprobe.provenance", "kgprobe."),
    ("kgprobe.plugins", "kgprobe."),  # the registry and the backend table call it
    ("kgprobe.progress", "kgprobe."),  # loop, ingest and the CLI use it
    ("kgprobe.runtime", "kgprobe."),  # interpreter settings: loop, ingest and the workers use them
    ("kgprobe.loaders", "kgprobe.graph"),
    ("kgprobe.loaders", "kgprobe.probing"),
    ("kgprobe.graph", "kgprobe.probing"),
    ("kgprobe.graph", "kgprobe.reports"),
    ("kgprobe.probing.measures", "kgprobe.probing.run"),
    ("kgprobe.probing.measures", "kgprobe.probing.loop"),
    ("kgprobe.probing.measures", "kgprobe.probing.scores"),
    ("kgprobe.probing.measures", "kgprobe.reports"),
    ("kgprobe.probing.loop", "kgprobe.probing.run"),
    ("kgprobe.probing.scores", "kgprobe.probing.run"),
    ("kgprobe.probing", "kgprobe.app"),
    ("kgprobe.probing", "kgprobe.reports"),
    ("kgprobe.graph", "kgprobe.app"),
    ("kgprobe.reports", "kgprobe.app"),
]


@pytest.mark.parametrize(("low", "high"), LAYERS)
def test_layers_point_one_way(low: str, high: str) -> None:
    g = import_graph()
    allowed = ({"kgprobe._version", "kgprobe.errors", "kgprobe.config", "kgprobe.types"}
               if high == "kgprobe." else set())
    bad = sorted(
        (a, b) for a, b in g.edges
        if (a == low or a.startswith(low + ".")) and b.startswith(high) and b not in allowed
        and not (b == low or b.startswith(low + "."))
    )
    assert bad == [], f"{low} imports {high}: {bad}"


#: kgprobe.reports, bottom first: each module imports only modules before it in this list
REPORTS = ["wording", "data", "sections", "text", "build", "console", "figures", "html", "results", "write", "ladder"]


def test_the_reports_package_points_one_way() -> None:
    g = import_graph()
    mods = {f"kgprobe.reports.{m}" for m in REPORTS}
    assert mods | {"kgprobe.reports"} == {n for n in g.nodes if n.startswith("kgprobe.reports")}
    assert g.has_edge("kgprobe.reports.write", "kgprobe.reports.build")  # the walk sees the package
    bad = sorted(
        (a, b) for a, b in g.edges
        if a in mods and b in mods
        and REPORTS.index(b.rpartition(".")[2]) >= REPORTS.index(a.rpartition(".")[2])
    )
    assert bad == [], f"upward imports inside kgprobe.reports: {bad}"
    assert not [b for b in g.successors("kgprobe.reports") if b.startswith("kgprobe")], \
        "the package's __init__ imports nothing (importing one module never loads the others)"


#: A string that reads as a Cypher clause (what ``graph/`` holds, and only it).
CYPHER = re.compile(r"\b(MATCH|MERGE|CREATE|UNWIND|DETACH DELETE|OPTIONAL MATCH)\b\s*[(\[a-z]")


def _code_strings(tree: ast.AST) -> list[str]:
    """The string constants of ``tree`` that are not docstrings (a command's docstring is its
    help, whose example may show a query the user types)."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_the_cli_only_parses_calls_and_renders() -> None:
    """Issue 39 #3: ``kgprobe.cli`` reaches the graph only through the workflows of
    ``kgprobe.app`` / ``kgprobe.api`` (no import of ``kgprobe.graph``, at module level or in a
    function), and holds no Cypher of its own."""
    g = import_graph()
    assert g.has_edge("kgprobe.cli", "kgprobe.api")  # the walk sees the CLI's function-level imports
    graph = sorted(b for b in g.successors("kgprobe.cli") if b == "kgprobe.graph" or b.startswith("kgprobe.graph."))
    assert graph == [], f"kgprobe.cli imports {graph}"
    tree = ast.parse((ROOT / "cli.py").read_text(encoding="utf-8"))
    assert [s for s in _code_strings(tree) if CYPHER.search(s)] == []


def test_the_cypher_rule_sees_a_query() -> None:
    """The checker itself: a query string is caught, a help text's example is not."""
    tree = ast.parse('def f():\n    """Example: kgprobe cypher \'MATCH (n) RETURN n\'"""\n'
                     '    q = "MATCH (r:Relation) RETURN r"\n    return "match the facts"\n')
    assert [s for s in _code_strings(tree) if CYPHER.search(s)] == ["MATCH (r:Relation) RETURN r"]
