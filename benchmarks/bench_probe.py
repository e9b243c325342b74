"""Time a probe run on the graph kgprobe is configured for (the demo graph after `kgprobe demo`),
or with ``--server arcadedb|neo4j`` on a fresh server of that kind loaded with the demo graph and
its templates (the same run on both servers, for docs/benchmarks.md).

    python benchmarks/bench_probe.py --sample 60 -n 5 --strategy temp+sem [--dtype bfloat16]
    python benchmarks/bench_probe.py --server neo4j --relations demo --history-first --sample 60
    python benchmarks/bench_probe.py --relations demo --history-first --sample 60 \
        --per-measure --measure kmin --measure belief ...   # the demo sample, cost per measure

Prints the wall time and this process's CPU time of each phase (model load, semantic index,
probe) and the facts scored. The machine may be shared: the load average before and after is
printed too, since wall time grows with it while CPU time does not. ``--force`` rescoring makes
repeated runs comparable; the score cache is off.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def _graph(server: str | None, heap: str) -> Iterator[tuple[Any, str | None]]:
    """The configured graph; or a fresh server of ``server``'s kind with the demo graph and its
    templates loaded, and a semantic-index directory of its own."""
    if server is None:
        from kgprobe.graph.client import connect

        with connect() as graph:
            yield graph, None
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks.servers import fresh_graph
    from kgprobe.api import write_records
    from kgprobe.graph.templates import demo_paths, import_own_templates
    from kgprobe.loaders.wikidata_json import load_json

    with tempfile.TemporaryDirectory(prefix="kgprobe-bench-") as tmp, \
            fresh_graph(server, Path(tmp) / "server", heap) as (graph, _):
        t0 = time.monotonic()
        write_records(graph, load_json(demo_paths()[0]), quiet=True)
        import_own_templates(graph)
        print(f"{server}: demo graph and templates loaded in {time.monotonic() - t0:.1f} s; "
              f"server {graph.server_agent()}")
        yield graph, str(Path(tmp) / "index")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--sample", type=int, default=60)
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--strategy", default="temp+sem")
    ap.add_argument("--measure", action="append", default=None)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--max-labels", type=int, default=3)
    ap.add_argument("--max-templates", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--index-dir", default=None)
    ap.add_argument("--relations", default=None,
                    help="comma-separated PIDs; 'demo' = the demo's relations (kgprobe.api)")
    ap.add_argument("--history-first", action="store_true", help="as kgprobe demo samples")
    ap.add_argument("--per-measure", action="store_true",
                    help="also probe each --measure alone first, to split the cost by measure")
    ap.add_argument("--server", choices=("arcadedb", "neo4j"), default=None,
                    help="a fresh server of this kind with the demo graph (default: the configured graph)")
    ap.add_argument("--heap", default="2g", help="with --server: the server's heap")
    args = ap.parse_args()
    with _graph(args.server, args.heap) as (graph, index_dir):
        _bench(args, graph, index_dir)


def _bench(args: argparse.Namespace, graph: Any, index_dir: str | None) -> None:

    import torch

    torch.set_num_threads(1)
    from kgprobe.api import DEMO_RELATIONS
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.measures.common import end_marker_for
    from kgprobe.probing.models import load_model
    from kgprobe.probing.run import ProbeConfig, run_probe

    relations: tuple[str, ...] = ()
    if args.relations == "demo":
        relations = DEMO_RELATIONS
    elif args.relations:
        relations = tuple(r.strip() for r in args.relations.split(",") if r.strip())
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")

    def clock() -> tuple[float, float]:
        return time.monotonic(), time.process_time()

    w0, c0 = clock()
    lm = load_model(args.model, dtype=args.dtype, threads=1)
    w1, c1 = clock()
    print(f"model load: {w1 - w0:.1f} s wall, {c1 - c0:.1f} s CPU")
    index = None
    if args.strategy in ("sem", "temp+sem"):
        from kgprobe.probing.distractors import default_index_dir
        from kgprobe.probing.semantic import ensure_index

        index = ensure_index(graph, args.index_dir or index_dir or default_index_dir())
        w2, c2 = clock()
        print(f"semantic index (load or build): {w2 - w1:.1f} s wall, {c2 - c1:.1f} s CPU")
    end = end_marker_for(lm.name)
    runs = [(m,) for m in args.measure or ()] if args.per_measure else []
    runs.append(tuple(args.measure or ("kmin",)))
    for measures in runs:
        engine = Engine(lm)  # a fresh engine per run: its counters cover that run only
        cfg = ProbeConfig(
            model=args.model, relations=relations, sample=args.sample, n=args.n,
            strategy=args.strategy, history_first=args.history_first, measures=measures, dtype=args.dtype, seed=args.seed,
            max_object_labels=args.max_labels, max_templates=args.max_templates, force=True,
        )
        w3, c3 = clock()
        s = run_probe(graph, engine, cfg, fingerprint=engine.fingerprint, index=index,
                      model_info={"name": lm.name, "kind": lm.kind, "device": lm.device,
                                  "end_marker": {"kind": end.kind, "text": end.text}},
                      progress=sys.stderr.isatty())
        w4, c4 = clock()
        done = s.scored + s.unscorable
        st = engine.stats
        kinds = ", ".join(f"{k.removesuffix('Request')} {st.kind_requests[k]} req "
                          f"{v:.1f} s" for k, v in sorted(st.kind_cpu_seconds.items()))
        print(f"probe [{' '.join(measures)}]: {done} facts ({s.scored} scored, "
              f"{s.unscorable} unscorable) over {len(s.relations)} relations in "
              f"{w4 - w3:.1f} s wall, {c4 - c3:.1f} s CPU ({(c4 - c3) / max(done, 1):.2f} CPU-s "
              f"per fact); engine {sum(st.kind_cpu_seconds.values()):.1f} CPU-s ({kinds}), "
              f"{st.forward_calls} forward calls", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
