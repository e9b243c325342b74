"""Every Cypher statement that finds a FACT edge by its key binds an indexed node first.

ArcadeDB answers an unanchored ``MATCH ()-[f:FACT {key: $k}]->()`` with a scan of every FACT edge
(issue 18: 4 s per fact at 765k edges), so per-fact work grew with the graph. The rule checked
here, on the source of every module of the package (string constants and f-strings, read with
``ast``): a relationship pattern ``(A)-[v:FACT ...]->(B)`` that is looked up by key — ``{key: …}``
in the pattern, or ``v.key = …`` / ``v.key IN …`` — has an end ``A`` or ``B`` bound through the
unique ``Entity.qid`` index: ``{qid: …}`` in that node pattern, or its variable bound so earlier
in the same statement. Cypher lives only in ``kgprobe/graph/`` (docs/design.md §1): that is checked too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import kgprobe

PACKAGE = Path(kgprobe.__file__).parent

#: (A)-[v:FACT {props}]->(B) or (A)<-[v:FACT ...]-(B): the two node patterns and the edge
EDGE = re.compile(
    r"\((?P<a>[^()]*)\)\s*<?-\[\s*(?P<var>\w*)\s*:FACT\b(?P<props>[^\]]*)\]->?\s*\((?P<b>[^()]*)\)"
)


def cypher_strings() -> list[tuple[str, str]]:
    """(module, text) of every string constant and f-string in the package but docstrings
    (f-string holes become ``{}``)."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)  # prose, which may quote a bad pattern
                      if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                      and n.body and isinstance(n.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if id(node) in docstrings:
                continue
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.append((str(path.relative_to(PACKAGE)), node.value))
            elif isinstance(node, ast.JoinedStr):
                text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
                out.append((str(path.relative_to(PACKAGE)), text))
    return out


def _bound_by_qid(node: str, before: str) -> bool:
    """Is this node pattern (``var:Label {...}``) bound through the QID index, here or earlier?"""
    if re.search(r"\{\s*qid\s*:", node):
        return True
    var = re.match(r"\s*(\w+)", node)
    return bool(var) and re.search(rf"\(\s*{var.group(1)}\s*:Entity\s*\{{\s*qid\s*:", before) is not None


def key_lookups(text: str) -> list[tuple[str, bool]]:
    """Each FACT pattern of ``text`` that is looked up by key, and whether it is anchored."""
    found = []
    for m in EDGE.finditer(text):
        by_key = re.search(r"\bkey\s*:", m["props"]) is not None
        if m["var"] and re.search(rf"\b{m['var']}\.key\s*(=|IN\b)", text):
            by_key = True
        if by_key:
            before = text[: m.start()]
            found.append((m.group(0), _bound_by_qid(m["a"], before) or _bound_by_qid(m["b"], before)))
    return found


def test_the_rule_tells_anchored_from_unanchored_lookups() -> None:
    """The checker itself, on statements whose answer is known (so the main test can fail)."""
    assert key_lookups("UNWIND $rows AS row MATCH ()-[f:FACT {key: row.key}]->() SET f += row.props") == [
        ("()-[f:FACT {key: row.key}]->()", False)]
    assert key_lookups("MATCH (s:Entity)-[f:FACT]->(o:Entity) WHERE f.key = $k RETURN o")[0][1] is False
    assert key_lookups("MATCH (s:Entity)-[f:FACT]->(o) WHERE f.key IN $ks RETURN o")[0][1] is False
    assert key_lookups("MATCH (:Entity {qid: row.s})-[f:FACT {key: row.key}]->() SET f.x = 1")[0][1]
    assert key_lookups("MATCH (a:Entity {qid: row.s}) MATCH (b:Entity {qid: row.o}) "
                       "MERGE (a)-[f:FACT {key: row.key}]->(b)")[0][1]
    assert key_lookups("MATCH (s)-[f:FACT]->(o:Entity {qid: $o}) WHERE f.key = $k RETURN s")[0][1]
    assert key_lookups("MATCH (s:Entity)-[f:FACT]->(o:Entity) WHERE f.pid = $pid RETURN f.key") == []


def test_every_fact_lookup_by_key_binds_an_indexed_node_first() -> None:
    lookups = [(module, pattern, ok) for module, text in cypher_strings() for pattern, ok in key_lookups(text)]
    unanchored = [(module, pattern) for module, pattern, ok in lookups if not ok]
    assert unanchored == []
    # the statements that must be there: ingest's MERGE, redirect moves, details and write-back
    modules = {module for module, _, _ in lookups}
    assert {"graph/ingest.py", "graph/probe_runs.py"} <= modules and len(lookups) >= 5


def test_cypher_with_fact_edges_lives_only_in_the_graph_package() -> None:
    outside = [(module, text[:60]) for module, text in cypher_strings()
               if not module.startswith("graph/") and EDGE.search(text)]
    assert outside == []
