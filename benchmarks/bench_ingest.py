"""Ingest throughput: kgprobe's full path (JSON dump → loader → records → batched MERGE) next to
the raw batched-UNWIND write rate of the same server, measured in the same run.

    python benchmarks/bench_ingest.py --statements 1000000

Both sides write the same nodes and edges with the same MERGE statements into a fresh database
of a fresh managed ArcadeDB server, the sampling index's slots included (``--raw-without-index``
leaves them out of the raw side, as before the index existed); "raw" gets its rows pre-built in memory (no file, no JSON,
no records), so the ratio is the cost of everything kgprobe adds on top of the database.
Prints one table; figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.gen_dump import write_dump  # noqa: E402
from benchmarks.servers import add_server_option, fresh_graph, server_cpu_s  # noqa: E402
from kgprobe.graph import ingest as ing  # noqa: E402
from kgprobe.graph.client import Graph  # noqa: E402
from kgprobe.loaders.wikidata_json import load_json  # noqa: E402
from kgprobe.records import EntityRecord, FactRecord  # noqa: E402


def jvm_peak_mb(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def raw_rows(records: Iterable[Any]) -> dict[str, list[Any]]:
    """The exact rows kgprobe's writer sends, built up front (records streamed: at 5M statements
    a list of them would double the benchmark's memory), the sampling index's slots numbered
    here as kgprobe numbers them (per relation, per type, in the order written)."""
    ents: dict[str, dict[str, Any]] = {}
    stubs: set[str] = set()
    types: list[dict[str, str]] = []
    facts: list[dict[str, Any]] = []
    fact_slots: list[dict[str, Any]] = []
    members: dict[str, dict[str, str]] = {}
    for r in records:
        if isinstance(r, EntityRecord):
            props: dict[str, Any] = {"label": r.label} if r.label else {}
            if r.aliases:
                props["aliases"] = r.aliases
            if r.description:
                props["description"] = r.description
            ents[r.qid] = props
            stubs.update(r.types)
            types += [{"s": r.qid, "o": t} for t in r.types]
            for t in r.types:
                members.setdefault(f"{t}|{r.qid}", {"space": t, "s": r.qid})
        elif isinstance(r, FactRecord):
            stubs.update((r.subject, r.object))
            facts.append({"s": r.subject, "o": r.object, "key": r.key, "props": ing.fact_properties(r)})
            fact_slots.append({"space": r.pid, "key": r.key, "s": r.subject})
    return {
        "entities": [{"qid": q, "props": p} for q, p in ents.items()],
        "stubs": sorted(stubs - ents.keys()),
        "types": types,
        "facts": facts,
        "fact_slots": _numbered(fact_slots),
        "type_slots": _numbered([{"member": m, **row} for m, row in members.items()]),
    }


def node_counts(graph: Graph) -> dict[str, int]:
    """Nodes per label: both sides must have written the same graph."""
    return {label: int(graph.read(f"MATCH (x:{label}) RETURN count(x) AS n")[0]["n"])
            for label in ("Entity", "FactSlot", "TypeSlot")}


def _minus(after: float | None, before: float | None) -> float | None:
    return None if after is None or before is None else round(after - before, 1)


def _numbered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    taken: Counter[str] = Counter()
    out = []
    for r in rows:
        o = taken[r["space"]]
        taken[r["space"]] += 1
        out.append({**r, "ord": o, "id": f"{r['space']}:{o}"})
    return out


def write_raw(graph: Graph, rows: dict[str, list[Any]], batch: int, index: bool = True) -> float:
    """Write the rows (entities, stubs and type edges first, then the facts, then the slots);
    returns the seconds spent before the first FACT edge."""
    t0 = time.perf_counter()
    graph.write_batches(ing.MERGE_ENTITIES, rows["entities"], batch)
    graph.write_batches(ing.MERGE_STUBS, rows["stubs"], batch)
    graph.write_batches(ing.MERGE_INSTANCE_OF, rows["types"], batch)
    entities_s = time.perf_counter() - t0
    graph.write_batches(ing.MERGE_FACTS, rows["facts"], batch)
    if index:  # the sampling index kgprobe writes with the same statements
        graph.write_batches(ing.MERGE_FACT_SLOTS, rows["fact_slots"], batch)
        graph.write_batches(ing.MERGE_TYPE_SLOTS, rows["type_slots"], batch)
    return entities_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--statements", type=int, default=1_000_000)
    ap.add_argument("--batch-size", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--heap", default="4g")
    add_server_option(ap)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep", type=Path, default=None,
                    help="keep kgprobe's ingested graph in this new directory (a KGPROBE_HOME for "
                         "bench_probe_scale.py --server configured; ArcadeDB only)")
    ap.add_argument("--gil-switch-us", type=float, default=None,
                    help="ablation: the GIL switch interval kgprobe's ingest runs with, in µs "
                         "(default: kgprobe's own, 5; Python's default is 5000)")
    ap.add_argument("--gc-threshold", type=int, default=None,
                    help="ablation: the cyclic collector's first threshold kgprobe's ingest runs "
                         f"with (default: kgprobe's own, {ing.INGEST_GC_THRESHOLD}; Python's is 700)")
    ap.add_argument("--raw-without-index", action="store_true",
                    help="raw writes no sampling-index slots (the comparison before the index)")
    args = ap.parse_args()
    if args.keep is not None and (args.server != "arcadedb" or args.keep.exists()):
        raise SystemExit("--keep needs --server arcadedb and a directory that does not exist yet")

    tuning: dict[str, Any] = {}
    if args.gil_switch_us is not None:
        tuning["switch_s"] = args.gil_switch_us / 1e6
    if args.gc_threshold is not None:
        tuning["gc_threshold"] = args.gc_threshold
    if tuning:
        ing._ingest_tuning = functools.partial(ing._ingest_tuning, **tuning)  # type: ignore[assignment]

    with tempfile.TemporaryDirectory(prefix="kgprobe-bench-") as tmp:
        root = Path(tmp)
        dump = root / "dump.json"
        t0 = time.perf_counter()
        write_dump(dump, args.statements, args.seed)
        gen_s = time.perf_counter() - t0

        # kgprobe: file → loader → records → writer
        with fresh_graph(args.server, args.keep or root / "a", args.heap) as (graph, pid):
            t0, c0, s0 = time.perf_counter(), time.process_time(), server_cpu_s(pid)
            summary = ing.ingest(graph, load_json(dump), batch_size=args.batch_size)
            kg_s = time.perf_counter() - t0
            kg_cpu = (time.process_time() - c0, _minus(server_cpu_s(pid), s0))
            kg_jvm = jvm_peak_mb(pid)
            kg_counts = node_counts(graph)
        py_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        statements = summary.facts + summary.type_edges

        # raw: the same rows, pre-built, written with the same statements
        rows = raw_rows(load_json(dump))
        with fresh_graph(args.server, root / "b", args.heap) as (graph, pid):
            t0, c0, s0 = time.perf_counter(), time.process_time(), server_cpu_s(pid)
            with ing._ingest_tuning():  # raw's client runs with the same interpreter settings
                raw_before_facts = write_raw(graph, rows, args.batch_size,
                                             index=not args.raw_without_index)
            raw_s = time.perf_counter() - t0
            raw_cpu = (time.process_time() - c0, _minus(server_cpu_s(pid), s0))
            raw_jvm = jvm_peak_mb(pid)
            raw_counts = node_counts(graph)

    result = {
        "server": args.server,
        "statements_in_dump": args.statements,
        "statements_written": statements,
        "entities": summary.entities,
        "skipped": dict(summary.skipped),
        "dump_generation_s": round(gen_s, 1),
        "kgprobe_s": round(kg_s, 1),
        "kgprobe_statements_per_s": round(statements / kg_s),
        "raw_s": round(raw_s, 1),
        "raw_statements_per_s": round(statements / raw_s),
        "ratio_kgprobe_over_raw": round(raw_s / kg_s, 3),
        "raw_before_first_fact_s": round(raw_before_facts, 1),
        "client_cpu_s": {"kgprobe": round(kg_cpu[0], 1), "raw": round(raw_cpu[0], 1)},
        "server_cpu_s": {"kgprobe": kg_cpu[1], "raw": raw_cpu[1]},
        "python_peak_rss_mb_during_kgprobe_ingest": round(py_peak),
        "server_peak_rss_mb": {"kgprobe": round(kg_jvm), "raw": round(raw_jvm)},
        "batch_size": args.batch_size,
        "gil_switch_us": "kgprobe's own" if args.gil_switch_us is None else args.gil_switch_us,
        "gc_threshold": ing.INGEST_GC_THRESHOLD if args.gc_threshold is None else args.gc_threshold,
        "raw_writes_sampling_index": not args.raw_without_index,
        "nodes_written": {"kgprobe": kg_counts, "raw": raw_counts},
        "load_average_after": round(os.getloadavg()[0], 1),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:45} {v}")


if __name__ == "__main__":
    main()
