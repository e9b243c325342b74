"""Time a probe run on the graph kgprobe is configured for (the demo graph after `kgprobe demo`),
or with ``--server arcadedb|neo4j`` on a fresh server of that kind loaded with the demo graph and
its templates (the same run on both servers, for docs/benchmarks.md).

    python benchmarks/bench_probe.py --sample 60 -n 5 --strategy temp+sem [--dtype bfloat16]
    python benchmarks/bench_probe.py --server neo4j --relations demo --history-first --sample 60
    python benchmarks/bench_probe.py --relations demo --history-first --sample 60 \
        --per-measure --measure kmin --measure belief ...   # the demo sample, cost per measure

Prints the wall time and this process's CPU time of each phase (model load, semantic index,
probe) and the facts scored, and per fact the wall and CPU time of the loop's three parts:
gather (the graph reads of a batch), score (the measures and the runner) and write (the write
transactions), each timed on the thread that runs it, plus the server's CPU with ``--server``.
With the pipeline (issue 18) gather and write run beside the scoring, so the parts add up to
more than the probe's wall.

``--model-free`` replaces the model by a runner that tokenizes every request for real and
builds the engine's packing plan, then returns made-up log-probabilities (a function of the
token ids): what is left is the graph side and the loop, which a GPU engine must not wait for.
The same script runs against another checkout (``PYTHONPATH=/path/to/old/checkout``) to
compare before and after; ``--write-batch`` and ``--pipeline`` are passed only when given.

    python benchmarks/bench_probe.py --server arcadedb --model-free --relations demo --sample 600

On a GPU machine without the model's package or a hub, ``--random-init 8b --tokenizer DIR
--device cuda --dtype bfloat16`` probes with a randomly initialised Llama of a real shape and the
default model's tokenizer saved in DIR (as ``bench_scoring.py`` does): speed does not depend on
the weights, and "in the engine" says whether the loop keeps the GPU fed.

Where no graph server can run beside the GPU (its machine has no Java), the loop's score half is
measured on a probe set (docs/probe-sets.md) instead: ``--export-set FILE`` samples and gathers
facts with the options above and writes the set (here, with the graph), and ``--set FILE`` scores
it through ``score_set``, the code of ``kgprobe probe --set`` (there, with the model): the same
loop (``loop.score_batches``), measures and engine, no gather thread and no writes::

    python benchmarks/bench_probe.py --server arcadedb --export-set set.parquet --sample 3000 \
        --strategy temp+sem -n 5 --batch-facts 256
    python benchmarks/bench_probe.py --set set.parquet --random-init 8b --tokenizer DIR \
        --device cuda --dtype bfloat16 --repeat 2

``--instant`` (with ``--set``) answers every request at once, with no tokenization: the probe's
wall is then the loop's own Python, which issue 43 asks to keep under what the device spends::

    python benchmarks/bench_probe.py --set set.parquet --instant --repeat 3

The set fixes what is sampled and measured (its ``--measure``, ``--strategy``, ``-n`` and
``--batch-facts``); those options are refused with ``--set``.

The machine may be shared: the load average before and after is
printed too, since wall time grows with it while CPU time does not. ``--force`` rescoring makes
repeated runs comparable; the score cache is off.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# appended, not first: with PYTHONPATH=/other/checkout the kgprobe measured is that one
sys.path.append(str(Path(__file__).resolve().parent.parent))

from benchmarks.servers import server_cpu_s  # noqa: E402


class ModelFree:
    """A runner without a model: the real tokenization and packing plan of the loaded model's
    engine for log-probability requests, then log p = -(0.1 + (id mod 97) / 10) per token (so
    different labels get different scores). Any other kind of request goes to the engine."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.tok = engine.lm.tokenization  # what the engine's backend encodes with
        self.requests = 0

    def run(self, requests: Any) -> list[Any]:
        from kgprobe.probing.backends.packing import plan
        from kgprobe.probing.requests import LogProbRequest, LogProbResult

        lps = [r for r in dict.fromkeys(requests) if isinstance(r, LogProbRequest)]
        out: dict[Any, Any] = {}
        if lps:
            encs = self.tok.causal_pairs([(r.context, r.continuation, r.add_eos) for r in lps])
            plan([e.context_ids for e in encs], [e.continuation_ids for e in encs], 8192)
            for r, e in zip(lps, encs, strict=True):
                ids = tuple(int(i) for i in e.continuation_ids)
                per = tuple(-(0.1 + (i % 97) / 10) for i in ids)
                out[r] = LogProbResult(sum(per), per, (), False, e.boundary_merged, ids)
        rest = [r for r in requests if r not in out]
        if rest:
            out.update(zip(rest, self.engine.run(rest), strict=True))
        self.requests += len(requests)
        return [out[r] for r in requests]


class SimulatedDevice(ModelFree):
    """A GPU in outline (``--simulate-device MS``): ``submit`` does the host's real work
    (ModelFree: tokenization, the packing plan) and queues a run that takes MS per unique
    request on a thread of its own, one run after another as on a CUDA stream; ``result``
    waits for it. The loop's own Python is real, so how much of it the device waits for is
    measured here, not modelled. ``queue`` (``--device-queue S``) models CUDA's bounded launch
    queue: ``submit`` returns only once the device has at most S seconds of work left, as a
    host blocked in its last launches would. Not modelled: a synchronising call inside a launch
    (docs/benchmarks.md, session 38)."""

    launches_ahead = True

    def __init__(self, engine: Any, ms: float, queue: float | None = None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        super().__init__(engine)
        self.ms, self.queue = ms, queue
        self.stream = ThreadPoolExecutor(1, thread_name_prefix="device")
        self.busy = 0.0
        self.ends = 0.0  # when the work queued so far ends (perf_counter)

    def _compute(self, n: int) -> None:
        t = time.perf_counter()
        time.sleep(n * self.ms / 1000)
        self.busy += time.perf_counter() - t

    def submit(self, requests: Any) -> Any:
        from kgprobe.probing.engine import Submitted

        out = ModelFree.run(self, requests)
        n = len(set(requests))
        queued = self.stream.submit(self._compute, n)
        self.ends = max(time.perf_counter(), self.ends) + n * self.ms / 1000
        if self.queue is not None:  # the last launches wait for room in the queue
            time.sleep(max(0.0, self.ends - self.queue - time.perf_counter()))

        def read() -> list[Any]:
            queued.result()
            return out

        return Submitted(read)

    def run(self, requests: Any) -> list[Any]:
        return list(self.submit(requests).result())


class Instant:
    """A runner that answers at once, log p = -(1 + len(continuation) mod 7 / 10) (no
    tokenization, no plan): what is left of a probe is the loop's own Python (measures,
    results, the set's rows), which a GPU's engine waits for (issue 43)."""

    requests = 0

    def run(self, requests: Any) -> list[Any]:
        from kgprobe.probing.requests import LogProbRequest, LogProbResult

        if not all(isinstance(r, LogProbRequest) for r in requests):
            raise SystemExit("--instant answers log-probability requests only (measure kmin/kavg)")
        self.requests += len(requests)
        return [LogProbResult(-(1.0 + (len(r.continuation) % 7) / 10), (), (), False) for r in requests]


class Parts:
    """Wall and thread-CPU seconds of the loop's parts (gather, score, write), by wrapping the
    loop's own functions (kgprobe.probing.loop) for the length of the benchmark, and of Python's
    cyclic collector (``gc.callbacks``), wherever its passes fall."""

    def __init__(self) -> None:
        import kgprobe.probing.loop as loop
        from kgprobe.graph import probe_runs as pr

        self.t: dict[str, list[float]] = {k: [0.0, 0.0, 0] for k in ("gather", "score", "write", "engine",
                                                                  "collector")}
        loop.Gatherer.batch = self._timed("gather", loop.Gatherer.batch)  # type: ignore[method-assign]
        # the score part: the measures' requests, the batch's launch, its values (two-phase
        # since issue 43; ``score_batch`` before it)
        if hasattr(loop, "BatchScoring"):
            for name in ("__init__", "launch", "values"):
                setattr(loop.BatchScoring, name, self._timed("score", getattr(loop.BatchScoring, name)))
        else:
            loop.score_batch = self._timed("score", loop.score_batch)  # type: ignore[assignment]
        pr.write_scores = self._timed("write", pr.write_scores)  # type: ignore[assignment]
        gc.callbacks.append(self._collector)
        self._gc_start = (0.0, 0.0)

    def _collector(self, phase: str, info: dict[str, int]) -> None:
        """Python's cyclic collector, any thread: its passes' wall and CPU ("calls": passes)."""
        if phase == "start":
            self._gc_start = (time.perf_counter(), time.thread_time())
            return
        t = self.t["collector"]
        t[0] += time.perf_counter() - self._gc_start[0]
        t[1] += time.thread_time() - self._gc_start[1]
        t[2] += 1

    def _timed(self, name: str, fn: Any) -> Any:
        def wrapper(*a: Any, **k: Any) -> Any:
            w, c = time.perf_counter(), time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                t = self.t[name]
                t[0] += time.perf_counter() - w
                t[1] += time.thread_time() - c
                t[2] += 1
        return wrapper

    def engine(self, runner: Any) -> Any:
        """``runner`` with its ``run`` timed as the "engine" part (the model's share of the wall)."""
        parts = self

        class Timed:
            def __init__(self) -> None:
                self.run = parts._timed("engine", runner.run)
                if hasattr(runner, "submit"):  # a launch and, later, the wait for its results
                    submit = parts._timed("engine", runner.submit)

                    def timed_submit(requests: Any) -> Any:
                        launched = submit(requests)
                        launched.result = parts._timed("engine", launched.result)
                        return launched

                    self.submit = timed_submit

            def __getattr__(self, name: str) -> Any:
                return getattr(runner, name)

        return Timed()

    def reset(self) -> None:
        for t in self.t.values():
            t[:] = [0.0, 0.0, 0]

    def line(self, facts: int) -> str:
        per = max(facts, 1) / 1000
        return "; ".join(f"{k} {t[0] / per:.2f} ms wall {t[1] / per:.2f} ms CPU per fact ({t[2]} calls)"
                         for k, t in self.t.items())


class Statements:
    """Wall seconds and calls of every Cypher statement the probe sends, by the name of the
    constant in kgprobe.graph that holds it (``--statements``)."""

    def __init__(self) -> None:
        from kgprobe.graph import client, distractors, probe_runs, templates

        self.names = {v: f"{m.__name__.rsplit('.', 1)[1]}.{k}" for m in (distractors, probe_runs, templates)
                      for k, v in vars(m).items() if k.isupper() and isinstance(v, str)}
        self.t: dict[str, list[float]] = {}
        lock = __import__("threading").Lock()
        read, write_many = client.Graph.read, client.Graph.write_many

        def add(cypher: str, dt: float) -> None:
            name = self.names.get(cypher, cypher.strip().splitlines()[0][:40])
            with lock:
                t = self.t.setdefault(name, [0.0, 0])
                t[0] += dt
                t[1] += 1

        def timed_read(g: Any, cypher: str, **params: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return read(g, cypher, **params)
            finally:
                add(cypher, time.perf_counter() - t0)

        def timed_write_many(g: Any, statements: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return write_many(g, statements)
            finally:
                add(" + ".join(self.names.get(c, "?") for c, _ in statements), time.perf_counter() - t0)

        client.Graph.read = timed_read  # type: ignore[method-assign]
        client.Graph.write_many = timed_write_many  # type: ignore[method-assign]

    def report(self, facts: int) -> None:
        for name, (sec, n) in sorted(self.t.items(), key=lambda kv: -kv[1][0]):
            print(f"    {name}: {n} calls, {1000 * sec / max(facts, 1):.2f} ms per fact, "
                  f"{1000 * sec / max(n, 1):.1f} ms per call")
        self.t.clear()


@contextlib.contextmanager
def _graph(server: str | None, heap: str) -> Iterator[tuple[Any, str | None, int | None]]:
    """The configured graph; or a fresh server of ``server``'s kind with the demo graph and its
    templates loaded, and a semantic-index directory of its own."""
    if server is None:
        from kgprobe.config import Settings
        from kgprobe.graph.client import connect
        from kgprobe.graph.server import ManagedServer

        settings = Settings.load()
        with connect() as graph:
            # the managed server's pid, for its CPU (none for a NEO4J_URI server)
            yield graph, None, None if settings.uri else ManagedServer(settings).info().pid
        return
    # appended, not first: with PYTHONPATH=/other/checkout the kgprobe measured is that one
    sys.path.append(str(Path(__file__).resolve().parent.parent))
    from benchmarks.servers import fresh_graph
    from kgprobe.api import write_records
    from kgprobe.graph.templates import demo_paths, import_own_templates
    from kgprobe.loaders.wikidata_json import load_json

    with tempfile.TemporaryDirectory(prefix="kgprobe-bench-") as tmp, \
            fresh_graph(server, Path(tmp) / "server", heap) as (graph, pid):
        t0 = time.monotonic()
        write_records(graph, load_json(demo_paths()[0]), quiet=True)
        import_own_templates(graph)
        print(f"{server}: demo graph and templates loaded in {time.monotonic() - t0:.1f} s; "
              f"server {graph.server_agent()}")
        yield graph, str(Path(tmp) / "index"), pid


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--random-init", choices=("135m", "1.7b", "8b"), default=None,
                    help="a random Llama of this real shape instead of --model (bench_scoring.py)")
    ap.add_argument("--tokenizer", type=Path, default=None,
                    help="with --random-init: the default model's tokenizer saved in this directory")
    ap.add_argument("--device", default=None, help="cpu, cuda, ... (default: as load_model picks)")
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
    ap.add_argument("--model-free", action="store_true",
                    help="real tokenization and packing plan, made-up scores: the graph side alone")
    ap.add_argument("--instant", action="store_true",
                    help="with --set: made-up scores at once, no tokenization: the loop's own Python")
    ap.add_argument("--simulate-device", type=float, default=None, metavar="MS",
                    help="with --set: ModelFree's host work, then a device thread taking MS per "
                         "request (what the device waits for in the loop)")
    ap.add_argument("--device-queue", type=float, default=None, metavar="S",
                    help="with --simulate-device: a launch returns once at most S seconds of "
                         "device work are left (a bounded launch queue)")
    ap.add_argument("--batch-facts", type=int, default=16)
    ap.add_argument("--write-batch", type=int, default=None, help="facts per write transaction")
    ap.add_argument("--pipeline", type=int, default=None, help="pipeline depth (0: one thread)")
    ap.add_argument("--repeat", type=int, default=1, help="probe runs per measure set (--force)")
    ap.add_argument("--launch-ahead", choices=("auto", "on", "off", "both", "three"), default="auto",
                    help="launch batch k+1 before writing batch k (issue 43): auto = on CUDA; "
                         "on/off to force it; both (--set): each repeat probes off, then on, "
                         "in one process (one model load, kernels compiled once); three (--set): "
                         "off, read-first (batch k's values read before batch k+1 is launched, "
                         "as before session 38 and for a measure with a later round), on")
    ap.add_argument("--statements", action="store_true", help="wall time of every Cypher statement")
    ap.add_argument("--gather-threads", type=int, default=None,
                    help="batches gathered at once (kgprobe.probing.loop.GATHER_THREADS)")
    ap.add_argument("--set", type=Path, default=None,
                    help="score this probe set (no graph): the loop's score half, e.g. on a GPU machine")
    ap.add_argument("--export-set", type=Path, default=None,
                    help="write a probe set of the graph's facts with these options, then stop")
    args = ap.parse_args()
    if (args.instant or args.simulate_device is not None) and args.set is None:
        ap.error("--instant and --simulate-device go with --set")
    if args.launch_ahead == "three" and args.set is None:
        ap.error("--launch-ahead three goes with --set")
    if args.set is not None:
        fixed = [o for o, v, d in (("--measure", args.measure, None), ("--strategy", args.strategy, "temp+sem"),
                                   ("-n", args.n, 5), ("--batch-facts", args.batch_facts, 16),
                                   ("--server", args.server, None), ("--export-set", args.export_set, None))
                 if v != d]
        if fixed:
            ap.error(f"the probe set fixes {', '.join(fixed)}: leave them out with --set")
        _bench_set(args)
        return
    if args.gather_threads is not None:
        import kgprobe.probing.loop as loop

        loop.GATHER_THREADS = args.gather_threads
    with _graph(args.server, args.heap) as (graph, index_dir, pid):
        if args.export_set is not None:
            _export(args, graph, index_dir)
        else:
            _bench(args, graph, index_dir, pid)


def _relations(arg: str | None) -> tuple[str, ...]:
    from kgprobe.api import DEMO_RELATIONS

    if arg == "demo":
        return DEMO_RELATIONS
    return tuple(r.strip() for r in arg.split(",") if r.strip()) if arg else ()


def _header() -> None:
    """Which kgprobe is measured (``PYTHONPATH`` may name another checkout) and the load."""
    import kgprobe

    print(f"kgprobe from {Path(kgprobe.__file__).parent}")
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


def _clock() -> tuple[float, float]:
    return time.monotonic(), time.process_time()


def _model(args: argparse.Namespace) -> Any:
    """The model of ``--model``, or a random Llama of ``--random-init``'s shape; its load timed."""
    import torch

    torch.set_num_threads(1)
    from kgprobe.probing.models import load_model

    w0, c0 = _clock()
    if args.random_init:
        from benchmarks.bench_scoring import random_init

        lm = random_init(args.random_init, args.device or "auto", args.dtype, 1, args.tokenizer)
    else:
        lm = load_model(args.model, dtype=args.dtype, threads=1, device=args.device)
    print(f"model {lm.name} on {lm.device}, {args.dtype}")
    w1, c1 = _clock()
    print(f"model load: {w1 - w0:.1f} s wall, {c1 - c0:.1f} s CPU")
    return lm


def _model_info(lm: Any) -> dict[str, Any]:
    from kgprobe.probing.measures.common import end_marker_for

    end = end_marker_for(lm.name)
    return {"name": lm.name, "kind": lm.kind, "device": lm.device,
            "end_marker": {"kind": end.kind, "text": end.text}}


def _read_first(on: bool) -> None:
    """``--launch-ahead three``'s middle run: the distractor measures say they may have a later
    round, so the loop reads each batch's values before it launches the next (its order before
    session 38)."""
    from kgprobe.probing.measures import builtin

    if hasattr(builtin._DistractorK, "later_rounds"):
        builtin._DistractorK.later_rounds = on


def _set_ahead(engine: Any, choice: str) -> None:
    """``--launch-ahead``: on/off sets ``Engine.ahead`` (an engine from before issue 43 has none:
    only auto runs there)."""
    if choice == "auto":
        return
    if choice == "both":
        raise SystemExit("--launch-ahead both: with --set only (a probe of the graph writes "
                         "its scores, so a second probe in the process would skip the facts)")
    if not hasattr(engine, "submit"):
        raise SystemExit("--launch-ahead on/off: this checkout's engine has no two-phase launch")
    engine.ahead = choice == "on"


def _report(measures: Any, done: int, scored: int, unscorable: int, relations: int,
            wall: float, cpu: float, engine: Any, runner: Any, parts: Parts, server: str = "") -> None:
    """A probe's lines: facts, wall and CPU, the engine's share (what the GPU is fed)."""
    st = engine.stats
    kinds = ", ".join(f"{k.removesuffix('Request')} {st.kind_requests[k]} req "
                      f"{v:.1f} s" for k, v in sorted(st.kind_cpu_seconds.items()))
    print(f"probe [{' '.join(measures)}]: {done} facts ({scored} scored, "
          f"{unscorable} unscorable) over {relations} relations in "
          f"{wall:.1f} s wall, {cpu:.1f} s CPU ({cpu / max(done, 1):.2f} CPU-s "
          f"per fact); engine {sum(st.kind_cpu_seconds.values()):.1f} CPU-s ({kinds}), "
          f"{st.forward_calls} forward calls", flush=True)
    per = max(done, 1) / 1000
    free = (f"; {runner.requests / max(done, 1):.1f} requests per fact"
            if isinstance(runner, ModelFree | Instant) else "")
    print(f"  per fact: {wall / per:.2f} ms wall, {cpu / per:.2f} CPU-ms (this process)"
          f"{server}; {done / max(wall, 1e-9):.1f} facts/s{free}", flush=True)
    print(f"  loop parts: {parts.line(done)}", flush=True)
    ahead = bool(getattr(runner, "launches_ahead", False))
    print(f"  in the engine (runner.run, submit and the wait for its results, wall): "
          f"{100 * parts.t['engine'][0] / max(wall, 1e-9):.1f} % of the probe's wall; "
          f"batches launched ahead: {'yes' if ahead else 'no'}", flush=True)
    outside = wall - parts.t["engine"][0]  # issue 43: the loop's own Python, which the device waits for
    print(f"  outside the engine: {outside / per:.3f} ms wall per fact", flush=True)
    causal = getattr(engine, "causal", None)
    if causal is not None and st.forward_calls:  # which attention the rows ran on, and why not flex
        fell = causal.attention_fallback
        print(f"  attention: {causal.attention_path()}"
              + (f" (FlexAttention fell back: {fell})" if fell else ""), flush=True)
    device = getattr(st, "forward_gpu_seconds", 0.0) + getattr(st, "head_gpu_seconds", 0.0)
    if device > 0:  # CUDA: the stream's spans over the rows (events), what the device was fed
        print(f"  device on the rows (CUDA events): {device:.2f} s, "
              f"{100 * device / max(wall, 1e-9):.1f} % of the probe's wall", flush=True)


def _export(args: argparse.Namespace, graph: Any, index_dir: str | None) -> None:
    """``--export-set``: the set a ``--set`` run scores, sampled and gathered as a probe would."""
    from kgprobe.probing.probe_set import export_set, set_config

    cfg = set_config(relations=_relations(args.relations), sample=args.sample,
                     measures=tuple(args.measure or ("kmin",)), strategy=args.strategy, n=args.n,
                     history_first=args.history_first, seed=args.seed,
                     max_object_labels=args.max_labels, max_templates=args.max_templates,
                     batch_facts=args.batch_facts)
    w0, _ = _clock()
    header = export_set(graph, cfg, args.export_set, index_dir=args.index_dir or index_dir,
                        progress=sys.stderr.isatty())
    print(f"probe set {args.export_set}: {header['facts']} facts over {len(header['relations'])} "
          f"relations, exported in {_clock()[0] - w0:.1f} s; content hash {header['content_hash']}")


def _bench_set(args: argparse.Namespace) -> None:
    """``--set``: the probe set scored ``--repeat`` times through ``score_set`` (no graph)."""
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.probe_set import read_set, score_set

    _header()
    pset = read_set(args.set)
    cfg = pset.header["config"]
    print(f"probe set {args.set}: {pset.header['facts']} facts, measures {' '.join(cfg['measures'])}, "
          f"{cfg['strategy']} n={cfg['n']}, {cfg['batch_facts']} facts per batch")
    lm = _model(args)
    parts = Parts()
    modes = {"both": ["off", "on"], "three": ["off", "read-first", "on"]}.get(
        args.launch_ahead, [args.launch_ahead])
    for mode in [m for _ in range(args.repeat) for m in modes]:
        engine = Engine(lm)  # a fresh engine per run: its counters cover that run only
        _set_ahead(engine, "on" if mode == "read-first" else mode)
        _read_first(mode == "read-first")
        runner: Any = (Instant() if args.instant else ModelFree(engine) if args.model_free
                       else SimulatedDevice(engine, args.simulate_device, args.device_queue)
                       if args.simulate_device is not None else engine)
        if isinstance(runner, SimulatedDevice) and mode in ("on", "off", "read-first"):
            runner.launches_ahead = mode != "off"
        if args.launch_ahead in ("both", "three"):
            print(f"launch ahead: {mode}")
        parts.reset()
        w0, c0 = _clock()
        got = score_set(pset, parts.engine(runner), None, model=lm.name, fingerprint=engine.fingerprint,
                        dtype=args.dtype, model_info=_model_info(lm),  # type: ignore[arg-type]
                        progress=sys.stderr.isatty())
        w1, c1 = _clock()
        s = got.summary
        _report(cfg["measures"], s.scored + s.unscorable, s.scored, s.unscorable, len(s.relations),
                w1 - w0, c1 - c0, engine, runner, parts)
        if isinstance(runner, SimulatedDevice):
            print(f"  simulated device: busy {runner.busy:.2f} s, {100 * runner.busy / max(w1 - w0, 1e-9):.1f} % "
                  f"of the probe's wall ({runner.ms} ms a request"
                  f"{'' if runner.queue is None else f', queue {runner.queue} s'})", flush=True)
    _read_first(False)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def _bench(args: argparse.Namespace, graph: Any, index_dir: str | None, server_pid: int | None) -> None:
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.run import ProbeConfig, run_probe

    relations = _relations(args.relations)
    _header()
    lm = _model(args)
    w1, c1 = _clock()
    index = None
    if args.strategy in ("sem", "temp+sem"):
        from kgprobe.probing.distractors import default_index_dir
        from kgprobe.probing.semantic import ensure_index

        index = ensure_index(graph, args.index_dir or index_dir or default_index_dir())
        w2, c2 = _clock()
        print(f"semantic index (load or build): {w2 - w1:.1f} s wall, {c2 - c1:.1f} s CPU")
    runs = [(m,) for m in args.measure or ()] if args.per_measure else []
    runs.append(tuple(args.measure or ("kmin",)))
    parts = Parts()
    statements = Statements() if args.statements else None
    loop_knobs = {k: v for k, v in (("write_facts", args.write_batch), ("pipeline", args.pipeline))
                  if v is not None}
    for measures in [m for m in runs for _ in range(args.repeat)]:
        engine = Engine(lm)  # a fresh engine per run: its counters cover that run only
        _set_ahead(engine, args.launch_ahead)
        runner = ModelFree(engine) if args.model_free else engine
        cfg = ProbeConfig(
            model=lm.name if args.random_init else args.model, relations=relations, sample=args.sample, n=args.n,
            strategy=args.strategy, history_first=args.history_first, measures=measures, dtype=args.dtype, seed=args.seed,
            max_object_labels=args.max_labels, max_templates=args.max_templates, force=True,
            batch_facts=args.batch_facts, **loop_knobs,
        )
        parts.reset()
        server0 = server_cpu_s(server_pid)
        w3, c3 = _clock()
        s = run_probe(graph, parts.engine(runner), cfg, fingerprint=engine.fingerprint, index=index,
                      model_info=_model_info(lm), progress=sys.stderr.isatty())  # type: ignore[arg-type]
        w4, c4 = _clock()
        done = s.scored + s.unscorable
        server1 = server_cpu_s(server_pid)
        server = (f", server {(server1 - server0) / (max(done, 1) / 1000):.2f} CPU-ms"
                  if server0 is not None and server1 is not None else "")
        _report(measures, done, s.scored, s.unscorable, len(s.relations), w4 - w3, c4 - c3,
                engine, runner, parts, server)
        if statements is not None:
            statements.report(done)
    print(f"load average after: {os.getloadavg()[0]:.1f}")

if __name__ == "__main__":
    main()
