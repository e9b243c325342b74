"""The semantic index's graph reads alone: every entity's (relation, object) pairs, by reader threads.

    KGPROBE_HOME=HOME python benchmarks/bench_graph_reads.py --readers 1,2 --rounds 2

A build of the semantic index (kgprobe/probing/semantic.py) reads each indexed entity's facts
from the graph in batches of ``BUILD_BATCH`` (`graph.distractors.entity_facts`: three queries a
batch), in ``READERS`` threads. This benchmark does only that, on the configured graph (the
managed server of ``KGPROBE_HOME``, started if needed, or ``NEO4J_URI`` with ``--server-pid``),
for every entity or the first ``--limit``, with each reader count in turn (rounds alternate them).
It prints one JSON line per run: wall, entities/s, pairs read, the client's CPU and the server's
(utime + stime of its process), and the server's CPU per 1,000 entities: what the reads of
Wikidata's ~100M entities cost the server, whatever the number of its cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.servers import server_cpu_s  # noqa: E402
from kgprobe.config import Settings  # noqa: E402
from kgprobe.graph.client import Graph, connect  # noqa: E402
from kgprobe.graph.distractors import all_entity_ids, entity_facts  # noqa: E402
from kgprobe.graph.servers import graph_server  # noqa: E402
from kgprobe.probing.semantic import BUILD_BATCH  # noqa: E402


def read_all(graph: Graph, ids: list[str], readers: int, batch: int) -> int:
    """Read every id's pairs in ``readers`` threads, one batch a task; the pairs read."""
    parts = [ids[i:i + batch] for i in range(0, len(ids), batch)]

    def one(part: list[str]) -> int:
        return sum(len(pairs) for _, pairs in entity_facts(graph, part, batch))

    with ThreadPoolExecutor(readers, thread_name_prefix="bench-read") as pool:
        return sum(pool.map(one, parts))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--readers", default="1,2", help="comma-separated reader thread counts")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--limit", type=int, default=None, help="the first N entities (QID order)")
    ap.add_argument("--batch", type=int, default=BUILD_BATCH)
    ap.add_argument("--server-pid", type=int, default=None,
                    help="the server's process, for its CPU (found by itself for the managed server)")
    args = ap.parse_args()
    counts = [int(r) for r in args.readers.split(",")]
    settings = Settings.load()
    pid = args.server_pid
    if settings.uri is None:
        pid = pid or graph_server(settings).start().pid
    with connect(settings) as graph:
        ids = all_entity_ids(graph)[: args.limit]
        read_all(graph, ids[: args.batch], 1, args.batch)  # a first batch: connections, query plans
        rows = []
        for r in range(args.rounds):
            for readers in counts:
                s0, c0, t0 = server_cpu_s(pid), time.process_time(), time.monotonic()
                pairs = read_all(graph, ids, readers, args.batch)
                wall, cpu, s1 = time.monotonic() - t0, time.process_time() - c0, server_cpu_s(pid)
                server = None if s0 is None or s1 is None else round(s1 - s0, 2)
                row = {"round": r, "readers": readers, "entities": len(ids), "pairs": pairs,
                       "wall_s": round(wall, 2), "entities_per_s": round(len(ids) / wall),
                       "client_cpu_s": round(cpu, 2), "server_cpu_s": server,
                       "server_ms_per_1k_entities": None if server is None else round(1e6 * server / len(ids), 1),
                       "load_before": round(os.getloadavg()[0], 2)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    first = statistics.median(float(x["wall_s"]) for x in rows if x["readers"] == counts[0])
    for readers in counts:
        med = statistics.median(float(x["wall_s"]) for x in rows if x["readers"] == readers)
        print(json.dumps({"readers": readers, "median_wall_s": round(med, 2),
                          "speedup_vs_first": round(first / med, 2)}), flush=True)


if __name__ == "__main__":
    main()
