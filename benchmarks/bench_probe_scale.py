"""Graph cost of a probe run as the graph grows: per-run setup (time to the first fact) and the
per-fact gather/write cost, with the model made free, on the demo graph or a synthetic dump.

    # a fresh server with the demo graph (or a dump from benchmarks/gen_dump.py) and templates:
    python benchmarks/bench_probe_scale.py --server arcadedb --graph demo
    python benchmarks/bench_probe_scale.py --server arcadedb --graph /tmp/dump1m.json.gz
    # the graph kgprobe is configured for (KGPROBE_HOME...), already ingested with `kgprobe ingest`:
    python benchmarks/bench_probe_scale.py --server configured

Setup is what a run does before its first fact, timed step by step with the functions the run
calls: relations with templates (`probe_relations`), the graph snapshot counts, the fact sample
(`sample_facts`, from the sampling index) and the sampled facts' details. Then a whole probe
(`run_probe`) with a model-free runner: every request answered with a constant log-probability
(no tokenization, no model), so what remains is the graph (gather, write-back) and kgprobe's own
Python. Reported: wall and CPU of this process, and the server's CPU (/proc of its pid), per
fact. The machine may be shared: the load average is printed, CPU times are the steadier figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.servers import server_cpu_s  # noqa: E402
from kgprobe.probing.requests import (  # noqa: E402
    BeamSearchResult,
    GenerateResult,
    Hypothesis,
    LogProbRequest,
    LogProbResult,
    NextTokenRequest,
    NextTokenResult,
    Request,
    Result,
    SpanScoreRequest,
    SpanScoreResult,
)


class FreeRunner:
    """Answers every request at once with a constant: the model costs nothing."""

    fingerprint = "model-free-constant"

    def __init__(self) -> None:
        self.requests = 0

    def run(self, requests: Sequence[Request]) -> list[Result]:
        self.requests += len(requests)
        out: list[Result] = []
        for r in requests:
            if isinstance(r, LogProbRequest):
                out.append(LogProbResult(-1.0, (-1.0,), ("x",), False))
            elif isinstance(r, SpanScoreRequest):
                out.append(SpanScoreResult(-1.0, (-1.0,), ("x",), -2.0))
            elif isinstance(r, NextTokenRequest):
                out.append(NextTokenResult((0,), ("x",), (-1.0,), 1.0))
            elif hasattr(r, "num_beams"):
                out.append(BeamSearchResult((Hypothesis("x", (0,), -1.0),)))
            else:
                out.append(GenerateResult("x", (0,), -1.0))
        return out


@contextlib.contextmanager
def _graph(server: str, source: str, heap: str) -> Iterator[tuple[Any, int | None, dict[str, float]]]:
    """(graph, server pid, load timings) for the configured graph or a fresh loaded server."""
    from kgprobe.graph.client import connect

    if server == "configured":
        from kgprobe.config import Settings
        from kgprobe.graph.server import ManagedServer

        settings = Settings.load()
        with connect(settings) as graph:  # started first: its pid is known once it runs
            yield graph, None if settings.uri else ManagedServer(settings).info().pid, {}
        return
    from benchmarks.servers import fresh_graph
    from kgprobe.api import write_records
    from kgprobe.graph.templates import demo_paths, import_own_templates
    from kgprobe.loaders.wikidata_json import load_json

    path = demo_paths()[0] if source == "demo" else Path(source)
    with tempfile.TemporaryDirectory(prefix="kgprobe-bench-") as tmp, \
            fresh_graph(server, Path(tmp) / "server", heap) as (graph, pid):
        t0 = time.monotonic()
        summary = write_records(graph, load_json(path), quiet=True)
        load_s = time.monotonic() - t0
        import_own_templates(graph)
        yield graph, pid, {"ingest_s": round(load_s, 1), "ingest_facts": summary.facts}


def _cpu(pid: int | None) -> float:
    return server_cpu_s(pid) or 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", choices=("configured", "arcadedb", "neo4j"), default="configured")
    ap.add_argument("--graph", default="demo", help="with a fresh server: 'demo' or a dump file")
    ap.add_argument("--heap", default="3g")
    ap.add_argument("--sample", type=int, default=500, help="facts of the timed probe")
    ap.add_argument("--per-relation", type=int, default=None)
    ap.add_argument("--strategy", default="random", help="random (model-free Ω(f) draws) or temp+sem")
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--batch-facts", type=int, default=64)
    ap.add_argument("--index-dir", type=Path, default=None,
                    help="semantic index directory (sem, temp+sem; one per graph, or it is rebuilt)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with _graph(args.server, args.graph, args.heap) as (graph, pid, loaded):
        result = {"server": graph.server_agent(), "graph": args.graph if args.server != "configured"
                  else "configured", **loaded, **_bench(args, graph, pid)}
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:38} {v}")


def _bench(args: argparse.Namespace, graph: Any, pid: int | None) -> dict[str, Any]:
    from kgprobe.graph import probe_runs as pr
    from kgprobe.graph import sample_index as si
    from kgprobe.graph.distractors import date_sort_key
    from kgprobe.probing.run import ProbeConfig, probe_relations, run_probe

    out: dict[str, Any] = {"load_average_before": round(os.getloadavg()[0], 1)}
    counts = pr.graph_counts(graph)
    out["facts_in_graph"] = counts["facts"]
    out["entities_in_graph"] = counts["entities"]

    def clock() -> tuple[float, float, float]:
        return time.monotonic(), time.process_time(), _cpu(pid)

    def since(t: tuple[float, float, float]) -> tuple[float, float, float]:
        n = clock()
        return n[0] - t[0], n[1] - t[1], n[2] - t[2]

    t = clock()
    built = si.ensure_sample_index(graph)
    out["sample_index_build_s"] = round(since(t)[0], 2) if built else 0.0

    # per-run setup, step by step (what run_probe does before its first fact)
    steps: dict[str, float] = {}
    t0 = t = clock()
    available = probe_relations(graph)
    relations = list(available)
    steps["relations"] = since(t)[0]
    t = clock()
    pr.graph_counts(graph)
    steps["graph_counts"] = since(t)[0]
    t = clock()
    ref = date_sort_key(None)
    subjects = pr.sample_facts(graph, relations, total=args.sample, per_relation=args.per_relation,
                               seed=args.seed, ref=ref)
    steps["sample_facts"] = since(t)[0]
    t = clock()
    keys = list(subjects)
    for i in range(0, len(keys), 500):
        pr.fact_details(graph, keys[i:i + 500], subjects, [])
    steps["fact_details"] = since(t)[0]
    wall, cpu, srv = since(t0)
    out["relations_with_templates"] = len(relations)
    out["sampled_facts"] = len(subjects)
    out["setup_steps_s"] = {k: round(v, 3) for k, v in steps.items()}
    out["setup_wall_s"] = round(wall, 2)
    out["setup_cpu_s"] = round(cpu, 2)
    out["setup_server_cpu_s"] = round(srv, 2)

    # the whole probe, model-free
    runner = FreeRunner()
    cfg = ProbeConfig(model="model-free", relations=tuple(relations), sample=args.sample,
                      per_relation=args.per_relation, strategy=args.strategy, n=args.n,
                      seed=args.seed, batch_facts=args.batch_facts, force=True)
    index = None
    if args.strategy in ("sem", "temp+sem"):
        from kgprobe.probing.semantic import ensure_index

        t = clock()
        index = ensure_index(graph, args.index_dir or Path(tempfile.gettempdir()) / "kgprobe-bench-scale-index")
        out["semantic_index_s"] = round(since(t)[0], 1)
    first: list[float] = []
    t = clock()
    summary = run_probe(graph, runner, cfg, fingerprint=runner.fingerprint, index=index,  # type: ignore[arg-type]
                        model_info={"name": "model-free", "kind": "none", "device": "cpu"},
                        progress=False, on_fact=lambda plan, values: first.append(time.monotonic()) if not first else None)
    wall, cpu, srv = since(t)
    done = summary.scored + summary.unscorable
    out["probe_facts"] = done
    out["probe_unscorable"] = summary.unscorable
    out["probe_requests"] = runner.requests
    out["probe_time_to_first_fact_s"] = round(first[0] - t[0], 2) if first else None
    out["probe_wall_s"] = round(wall, 2)
    out["per_fact_wall_ms"] = round(1000 * wall / max(done, 1), 2)
    out["per_fact_cpu_ms"] = round(1000 * cpu / max(done, 1), 2)
    out["per_fact_server_cpu_ms"] = round(1000 * srv / max(done, 1), 2)
    out["facts_per_s"] = round(done / wall, 1) if wall else None
    out["load_average_after"] = round(os.getloadavg()[0], 1)
    return out


if __name__ == "__main__":
    main()
