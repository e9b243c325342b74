"""RDF loading: pyoxigraph (the parser now) next to rdflib (the parser before), in one run.

    python benchmarks/bench_rdf.py --copies 20 --repeat 3

Two measurements per file, each the best of ``--repeat`` runs, old and new alternating:

* **parse only** — the whole file through ``rdflib.Graph().parse`` and through
  ``pyoxigraph.parse`` into a set of triples (as a Graph holds them), nothing else;
* **loader** — ``kgprobe.loaders.rdf.load_rdf(path, parser=...)`` to the last record: textual
  entity blocks, parsing, reading statements and qualifiers, validation. The records of both
  parsers are checked equal before any figure is printed.

Files: the real ``Q42.ttl`` (WDQS, 200 KB) and the N-Triples form of its statements, plus a
larger file made of ``--copies`` renumbered copies of each (``wd:Q42`` → ``wd:Q1000001``, …,
statement nodes with it), so that the per-parse overhead and the per-triple cost both show.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyoxigraph as ox  # noqa: E402
import rdflib  # noqa: E402

from kgprobe.loaders.rdf import _lexical_literals, load_rdf  # noqa: E402

WD = ROOT / "tests" / "fixtures" / "wikidata"
Q42_TTL = WD / "wdqs-rdf" / "Q42.ttl"
Q42_NT = WD / "derived" / "Q42_statements_with_qualifiers.nt"
_Q42 = re.compile(r"(?<=[:/])Q42(?=[\s>.;,-])")


def copies(src: Path, dst: Path, n: int) -> Path:
    """``n`` copies of ``src``'s triples with Q42 renumbered (prefix lines written once)."""
    lines = src.read_text().splitlines(True)
    head = [ln for ln in lines if ln.lstrip().lower().startswith("@prefix")]
    body = "".join(ln for ln in lines if ln not in head)
    with open(dst, "w") as fh:
        fh.writelines(head)
        for i in range(n):
            fh.write("\n" + _Q42.sub(f"Q{1_000_001 + i}", body))
    return dst


def best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def parse_rdflib(path: Path, fmt: str) -> int:
    g = rdflib.Graph()
    with _lexical_literals():
        g.parse(path, format="nt" if fmt == "nt" else "turtle")
    return len(g)


def parse_oxigraph(path: Path, fmt: str) -> int:
    kind = ox.RdfFormat.N_TRIPLES if fmt == "nt" else ox.RdfFormat.TURTLE
    return len(set(ox.parse(path=str(path), format=kind)))  # a set of triples, as a Graph


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kgprobe-bench-rdf-") as tmp:
        files = [
            (Q42_TTL, "turtle"),
            (copies(Q42_TTL, Path(tmp) / f"q42x{args.copies}.ttl", args.copies), "turtle"),
            (Q42_NT, "nt"),
            (copies(Q42_NT, Path(tmp) / f"q42x{args.copies}.nt", args.copies), "nt"),
        ]
        for path, fmt in files:
            new_recs = list(load_rdf(path, parser="oxigraph"))
            old_recs = list(load_rdf(path, parser="rdflib"))
            if new_recs != old_recs:
                raise SystemExit(f"{path.name}: the parsers' records differ — no figures")
            triples = parse_oxigraph(path, fmt)
            if parse_rdflib(path, fmt) != triples:
                raise SystemExit(f"{path.name}: the parsers' triple counts differ — no figures")
            row: dict[str, Any] = {
                "file": path.name,
                "bytes": path.stat().st_size,
                "triples": triples,
                "records": len(new_recs),
            }
            for name, fn in (
                ("parse_rdflib_s", lambda p=path, f=fmt: parse_rdflib(p, f)),
                ("parse_oxigraph_s", lambda p=path, f=fmt: parse_oxigraph(p, f)),
                ("load_rdflib_s", lambda p=path: sum(1 for _ in load_rdf(p, parser="rdflib"))),
                ("load_oxigraph_s", lambda p=path: sum(1 for _ in load_rdf(p, parser="oxigraph"))),
            ):
                row[name] = round(best(fn, args.repeat), 4)
            row["parse_speedup"] = round(row["parse_rdflib_s"] / row["parse_oxigraph_s"], 1)
            row["load_speedup"] = round(row["load_rdflib_s"] / row["load_oxigraph_s"], 2)
            rows.append(row)

    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print("| file | size | triples | records | parse: rdflib | parse: pyoxigraph | × | loader: rdflib | loader: pyoxigraph | × |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['file']} | {r['bytes'] / 1e6:.2f} MB | {r['triples']:,} | {r['records']:,} "
            f"| {r['parse_rdflib_s'] * 1000:,.1f} ms | {r['parse_oxigraph_s'] * 1000:,.1f} ms | {r['parse_speedup']} "
            f"| {r['load_rdflib_s'] * 1000:,.0f} ms | {r['load_oxigraph_s'] * 1000:,.0f} ms | {r['load_speedup']} |"
        )


if __name__ == "__main__":
    main()
