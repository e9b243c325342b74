"""Per-fact cost of finding FACT edges by key: anchored on the subject (now) vs unanchored (before).

    python benchmarks/bench_fact_lookup.py --graph demo
    python benchmarks/bench_fact_lookup.py --graph synthetic --statements 1000000 --heap 4g

Loads the graph into a fresh server (``--server``: the managed ArcadeDB, default, or a real Neo4j 5;
its own directory and ports), samples facts the
way a probe does (``candidate_keys`` + ``sample_keys``, seed 0), then times, side by side in one
run on the same server:

- ``fact_details`` (what a probe reads of each sampled fact) and ``write_scores`` (one transaction
  of score rows) as kgprobe runs them now: the edge bound from its subject's QID index;
- the same two statements as they were before (``MATCH ()-[f:FACT {key: …}]->()``), on fewer
  facts (``--old-facts``) since each costs a scan of every FACT edge.

Also prints the per-run setup (``candidate_keys`` over every relation), which issue 18 still has
to make independent of the graph's size. Figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.gen_dump import write_dump  # noqa: E402
from benchmarks.servers import add_server_option, fresh_graph  # noqa: E402
from kgprobe.graph import ingest as ing  # noqa: E402
from kgprobe.graph import probe_runs as pr  # noqa: E402
from kgprobe.graph.client import Graph  # noqa: E402
from kgprobe.graph.templates import demo_paths  # noqa: E402
from kgprobe.loaders.wikidata_json import load_json  # noqa: E402

#: The statements as they were before they were anchored (kgprobe 6533d01), for comparison.
OLD_FACT_DETAILS = """
UNWIND $keys AS k
MATCH (s:Entity)-[f:FACT {key: k}]->(o:Entity)
RETURN f.key AS key, f.pid AS pid, s.qid AS s, s.label AS s_label, s.aliases AS s_aliases,
       o.qid AS o, o.label AS o_label, o.aliases AS o_aliases, [c IN $cfgs | f[c]] AS cfgs
"""
OLD_WRITE_SCORES = """
UNWIND $rows AS row
MATCH ()-[f:FACT {key: row.key}]->()
SET f += row.props
RETURN count(f) AS n
"""
SP = pr.ScoreProps("bench", "kmin_random_n5")


def timed(fn: Any, repeat: int) -> tuple[float, Any]:
    """Median wall seconds of ``repeat`` calls, and the last result."""
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", choices=("demo", "synthetic"), default="demo")
    ap.add_argument("--statements", type=int, default=1_000_000, help="synthetic dump size")
    ap.add_argument("--dump", type=Path, help="an existing dump to load instead of generating one")
    ap.add_argument("--facts", type=int, default=256, help="facts per anchored batch")
    ap.add_argument("--old-facts", type=int, default=4, help="facts for the unanchored statements")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--heap", default="2g")
    add_server_option(ap)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    with (tempfile.TemporaryDirectory(prefix="kgprobe-bench-") as tmp,
          fresh_graph(args.server, Path(tmp) / "server", args.heap) as (graph, _)):
        if args.graph == "demo":
            source = demo_paths()[0]
        else:
            source = args.dump or Path(tmp) / "dump.json"
            if args.dump is None:
                write_dump(source, args.statements, seed=0)
        t0 = time.perf_counter()
        loaded = ing.ingest(graph, load_json(source), batch_size=5000)
        ingest_s = time.perf_counter() - t0
        result = measure(graph, args)
        result.update(server=args.server, graph=args.graph,
                      statements=args.statements if args.graph == "synthetic" else None,
                      facts_in_graph=pr.graph_counts(graph)["facts"], ingest_s=round(ingest_s, 1),
                      facts_ingested=loaded.facts)
    if args.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key:32} {value}")


def measure(graph: Graph, args: argparse.Namespace) -> dict[str, Any]:
    pids = [r["pid"] for r in pr.relations_with_facts(graph)]
    t0 = time.perf_counter()
    by_pid = {p: pr.candidate_keys(graph, p, 20240101) for p in pids}
    setup_s = time.perf_counter() - t0
    keys = pr.sample_keys({p: list(k) for p, k in by_pid.items()}, args.facts, seed=0)
    subjects = {k: s for d in by_pid.values() for k, s in d.items()}
    n, m = len(keys), min(args.old_facts, len(keys))

    details_s, details = timed(lambda: pr.fact_details(graph, keys, subjects, [SP.cfg]), args.repeat)
    assert len(details) == n, (len(details), n)
    rows = [{"key": k, "s": subjects[k], "props": {SP.score: 0.5, SP.run: "bench"}} for k in keys]
    write_s, _ = timed(lambda: pr.write_scores(graph, "bench", rows, scored=n, unscorable=0, now="t"),
                       args.repeat)
    written = graph.read("MATCH ()-[f:FACT]->() WHERE f[$p] IS NOT NULL RETURN count(f) AS n", p=SP.score)
    assert written[0]["n"] == n, (written, n)

    old = keys[:m]
    old_details_s, got = timed(lambda: graph.read(OLD_FACT_DETAILS, keys=old, cfgs=[SP.cfg]), 1)
    assert len(got) == m
    old_rows = [{"key": k, "props": {SP.score: 0.25}} for k in old]
    old_write_s, _ = timed(lambda: graph.write(OLD_WRITE_SCORES, rows=old_rows), 1)
    per = {
        "details_ms_per_fact": 1000 * details_s / n,
        "write_ms_per_fact": 1000 * write_s / n,
        "old_details_ms_per_fact": 1000 * old_details_s / m,
        "old_write_ms_per_fact": 1000 * old_write_s / m,
    }
    return {
        "relations": len(pids), "candidate_facts": len(subjects), "setup_candidate_keys_s": round(setup_s, 2),
        "sampled": n, "old_sampled": m, **{k: round(v, 3) for k, v in per.items()},
        "details_speedup": round(per["old_details_ms_per_fact"] / per["details_ms_per_fact"], 1),
        "write_speedup": round(per["old_write_ms_per_fact"] / per["write_ms_per_fact"], 1),
    }


if __name__ == "__main__":
    main()
