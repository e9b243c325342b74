"""Benchmark of the scoring engine: kgprobe vs naive vs lm-evaluation-harness (HFLM).

Workload: cloze distractor scoring on real BEAR facts (Wikidata; lm-pub-quiz): each prompt
"<subject> was born in" is scored against the same candidate set of multi-token city labels
(the distractor workload of DESIGN §3), zero-shot and after a 4-shot prompt of other facts.
Every system gets identical (context, continuation) pairs in the same process, with the same
model object and the same torch thread setting:

- kgprobe: ``Engine.run`` (packed rows of (context + continuation trie) segments up to
  ``--batch-tokens``; forward calls, tokens per forward and CPU time outside the forward are
  reported from the engine's counters);
- naive: one forward per candidate over the full sequence (``Engine`` with
  ``share_prefix=False, batch_size=1``);
- harness: ``lm_eval.models.huggingface.HFLM(pretrained=<model object>)`` ``.loglikelihood``
  at its best batch size among ``--harness-batches`` (timed on the first
  ``--harness-pick-prompts`` prompts, then run in full at the best one).

``--random-init 135m|1.7b|8b`` builds a randomly initialised Llama of that real shape (SmolLM2-
135M, SmolLM2-1.7B, Llama-3-8B layers) with the default model's tokenizer, so no hub is needed:
speed does not depend on the weights; ``--tokenizer DIR`` reads that tokenizer from a directory
(``save_pretrained``) on a machine without the model's package. ``--device`` / ``--dtype`` as
on the CLI. On a GPU kgprobe's first forwards compile FlexAttention for each row shape: one
untimed run of the whole workload comes first (``warmup_seconds``), so the timed run is a long
probe's steady state.

Figures: requests/s, speed-ups, max |Δ log p| against the harness, and achieved FLOP/s
(2 × parameters × tokens actually fed) against a matmul peak measured here (single-thread,
per cpu-second, on the CPU; per wall second on a GPU), as a fraction per wall second
(``peak_fraction_wall``, the GPU's figure) and per cpu-second (``peak_fraction``). For kgprobe
also the engine's own host work: process CPU seconds outside the model's forward calls, the LM
head and the final wait for the device (``cpu_seconds_outside_model``: tokenizing, planning,
masks, bookkeeping) as a share of the run's wall (``cpu_outside_model_share_of_wall``); on
CUDA the rows' forward and head spans from CUDA events and, from one more run under torch's
profiler, the device's kernel seconds and its idle share of the timed wall
(``gpu_idle_share_of_wall``; ``--no-gpu-profile`` skips it). A summary table closes the run.
The script runs against an older engine as well (its missing counters read as 0 or None), so
one command line compares two checkouts by ``PYTHONPATH``.

Needs the ``bench`` extra (``pip install -e .[bench]``) for the harness; ``--systems`` can
leave it out. Example (the run recorded in docs/benchmarks.md)::

    .venv/bin/python benchmarks/bench_scoring.py --prompts 50 --candidates 100 --threads 1
    .venv/bin/python benchmarks/bench_scoring.py --device cuda --dtype bfloat16 \
        --random-init 8b --prompts 100 --candidates 100 --batch-tokens 8192
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from kgprobe.probing.engine import Engine
from kgprobe.probing.models import LoadedModel, load_model, resolve_device, torch_dtype
from kgprobe.probing.requests import LogProbRequest, LogProbResult

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "bear" / "BEAR" / "P19.jsonl"


def workload(lm: LoadedModel, data: Path, prompts: int, candidates: int, shots: int,
             seed: int) -> tuple[list[LogProbRequest], list[LogProbRequest]]:
    """(zero-shot requests, k-shot requests) over the same prompts and candidates."""
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines() if line]
    rng = random.Random(seed)
    rng.shuffle(rows)
    # candidate (distractor) set: distinct multi-token object labels of all BEAR relations,
    # the relation's own answer space first
    pool: list[str] = []
    for f in [data, *sorted(data.parent.glob("*.jsonl"))]:
        for line in f.read_text(encoding="utf-8").splitlines():
            lab = " " + json.loads(line)["obj_label"]
            if lab not in pool and len(lm.tokenization.encode(lab)) >= 2:
                pool.append(lab)
        if len(pool) >= candidates:
            break
    if len(pool) < candidates:
        # a P19.jsonl without its sibling relations' files has 5 such labels: the workload
        # would shrink 20x and its figures be taken for the 10,000-request ones
        raise SystemExit(f"bench_scoring: {len(pool)} multi-token candidate labels in "
                         f"{data.parent}/*.jsonl, {candidates} asked for (--candidates); "
                         "point --data into a whole BEAR directory")
    if len(rows) < prompts + shots:
        raise SystemExit(f"bench_scoring: {data} has {len(rows)} facts, "
                         f"{prompts + shots} asked for (--prompts + --shots)")
    labels = pool[:candidates]
    facts = rows[: prompts + shots]
    demos = "".join(f"{f['sub_label']} was born in {f['obj_label']}.\n" for f in facts[:shots])
    subjects = [f["sub_label"] for f in facts[shots:]]
    zero = [LogProbRequest(f"{s} was born in", c) for s in subjects for c in labels]
    few = [LogProbRequest(f"{demos}{s} was born in", c) for s in subjects for c in labels]
    return zero, few


def quiet_collector() -> None:
    """Before a timed run: collect, then freeze what survives (torch, transformers, the model:
    some 400,000 objects), so a full collection over them (0.1-0.25 s, docs/benchmarks.md)
    does not fall at random into a run of a few tenths of a second. Every system gets it."""
    gc.collect()
    gc.freeze()


def matmul_peak(seconds: float = 3.0, n: int = 1024, device: str = "cpu",
                dtype: torch.dtype = torch.float32) -> float:
    """FLOP per second of an n×n matmul in ``dtype`` on ``device``: per CPU-second on the CPU
    (other users of the shared cores do not count), per wall second on a GPU (synchronised)."""
    if device.startswith("cuda"):
        n = max(n, 8192)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    cuda = device.startswith("cuda")
    clock = time.perf_counter if cuda else time.process_time
    torch.mm(a, b)
    if cuda:
        torch.cuda.synchronize()
    reps = 0
    t0 = clock()
    while clock() - t0 < seconds:
        torch.mm(a, b)
        if cuda:
            torch.cuda.synchronize()
        reps += 1
    return 2 * n**3 * reps / (clock() - t0)


SHAPES = {  # Llama shapes: (hidden, intermediate, layers, heads, kv heads)
    "135m": (576, 1536, 30, 9, 3),
    "1.7b": (2048, 8192, 24, 32, 32),
    "8b": (4096, 14336, 32, 32, 8),
}


def random_init(shape: str, device: str, dtype: str, threads: int,
                tokenizer_dir: Path | None = None) -> LoadedModel:
    """A random Llama of a real shape with the default model's tokenizer (no hub).

    ``tokenizer_dir``: that tokenizer saved in a directory (``save_pretrained``), for a machine
    without the model's GGUF package (a GPU machine reached without a network); it gets the
    default model's BOS policy and prefix token, as ``load_model`` gives them."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from kgprobe.probing.models import REGISTRY
    from kgprobe.probing.tokenization import Tokenization

    if tokenizer_dir is None:
        tok = load_model("smollm2-135m", threads=threads, device="cpu").tokenizer
    else:
        tok = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    entry = REGISTRY["smollm2-135m"]
    prefix = tok.convert_tokens_to_ids(entry.prefix_token) if entry.prefix_token else None
    hidden, inter, layers, heads, kv = SHAPES[shape]
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=inter,
                      num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv, max_position_embeddings=8192,
                      tie_word_embeddings=shape != "8b", bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id)
    dev = resolve_device(device)
    # the thread setting load_model gives (its path sets it; this one did not). On a 16-core
    # H100 host the overlapped engine's process CPU came out above its wall (1.45 cpu-s in a
    # 0.99 s run): host-side copies on 16 OpenMP threads that spin after each copy are the
    # suspected reason (not isolated)
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    with torch.device(dev):
        model = LlamaForCausalLM(cfg).to(torch_dtype(dtype)).eval()
    tokenization = Tokenization(tok, bos_policy=entry.bos_policy,
                                prefix_token_id=prefix if isinstance(prefix, int) else None,
                                max_length=cfg.max_position_embeddings)
    return LoadedModel(f"random-{shape}", "causal", model, tok, tokenization,
                       f"random-{shape}", dtype, dev)  # type: ignore[arg-type]


def fed_tokens(lm: LoadedModel, reqs: list[LogProbRequest], shared: bool) -> int:
    """Tokens each system must feed through the model: one sequence per request (naive; the
    harness feeds the same minus its last token, < 1 token per request, ignored), or with
    ``shared`` the unique tokens of all requests (the FLOP/s figures count these)."""
    encs = [lm.tokenization.causal_pair(r.context, r.continuation) for r in reqs]
    if not shared:
        return sum(len(e.context_ids) + len(e.continuation_ids) - 1 for e in encs)
    # unique tokens: the distinct prefixes of every fed sequence (context + continuation
    # minus its last token), i.e. one trie over all of them — what kgprobe feeds at best
    # (contexts sharing their demonstrations share them; the engine re-feeds a shared trunk
    # once per row and a context once per segment, counted in its own tokens_fed_engine)
    root: dict[int, Any] = {}
    nodes = 0
    for e in encs:
        node = root
        for t in (*e.context_ids, *e.continuation_ids[:-1]):
            if t not in node:
                node[t] = {}
                nodes += 1
            node = node[t]
    return nodes


def plan_figures(lm: LoadedModel, reqs: list[LogProbRequest], batch_tokens: int) -> dict[str, float]:
    """The engine's packing plan for the workload without running the model: forward calls
    (rows) and tokens per forward are exactly what ``Engine.run`` does with one chunk."""
    from kgprobe.probing.backends.packing import plan

    encs = lm.tokenization.causal_pairs([(r.context, r.continuation, r.add_eos) for r in reqs])
    c0 = time.process_time()
    p = plan([e.context_ids for e in encs], [e.continuation_ids for e in encs], batch_tokens)
    return {"requests": len(reqs), "forward_calls": len(p.rows), "tokens": p.tokens,
            "tokens_per_forward": p.tokens / max(1, len(p.rows)),
            "plan_cpu_seconds": time.process_time() - c0}


def run_kgprobe(lm: LoadedModel, reqs: list[LogProbRequest], batch: int,
                batch_tokens: int | None, attention: str = "auto", gpu_profile: bool = True,
                chunk_size: int | None = None,
                ) -> tuple[float, float, list[float], dict[str, Any]]:
    """kgprobe's engine on ``reqs``: wall and process CPU seconds, log-probs, and its
    counters. Runs on any checkout's engine (counters an older engine lacks read as None),
    so the same command compares two checkouts (``PYTHONPATH``)."""
    extra = {"chunk_size": chunk_size} if chunk_size else {}  # chunks launched ahead on CUDA
    engine = Engine(lm, batch_size=batch, batch_tokens=batch_tokens or "auto", attention=attention,
                    **extra)
    assert engine.causal is not None
    engine.causal.packing_works()  # the one-off self-check is not part of the run
    path = engine.causal.attention_path()
    cold = None
    cuda = engine.causal.device.type == "cuda"
    if cuda:
        # a GPU run compiles its attention kernels for each new row shape (FlexAttention):
        # one untimed run of the whole workload first, so the timed run is the steady state
        # of a long probe (rows of the same shapes, kernels compiled); its time is reported
        t0 = time.perf_counter()
        engine.run(reqs)
        torch.cuda.synchronize()
        cold = time.perf_counter() - t0
        fresh = type(engine.stats)()  # the timed run's counters start from zero
        for f in fields(fresh):
            setattr(engine.stats, f.name, getattr(fresh, f.name))
    quiet_collector()
    t0, c0 = time.perf_counter(), time.process_time()
    res = engine.run(reqs)
    if cuda:
        torch.cuda.synchronize()  # an older engine may return before its last kernel ends
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    st = engine.stats
    wait = getattr(st, "wait_cpu_seconds", 0.0)
    outside = cpu - st.forward_cpu_seconds - st.head_cpu_seconds - wait
    info: dict[str, Any] = {"attention": path, "attention_fallback": engine.causal.attention_fallback,
            "packed": engine.causal.packing_works(),
            "packing_check_diff": engine.causal.packing_check_diff,
            "warmup_seconds": cold,
            "batch_tokens": engine.causal.batch_tokens,
            "forward_calls": st.forward_calls, "tokens_fed_engine": st.tokens_fed,
            "chunk_size": engine.chunk_size,
            "launches_ahead": getattr(engine, "launches_ahead", None),
            "tokens_per_forward": st.tokens_fed / max(1, st.forward_calls),
            "forward_cpu_seconds": st.forward_cpu_seconds,
            "head_cpu_seconds": st.head_cpu_seconds,
            "wait_cpu_seconds": wait,
            "cpu_seconds_outside_forward": cpu - st.forward_cpu_seconds,
            "cpu_seconds_outside_model": outside,
            # the engine's own host work (tokenizing, planning, masks, bookkeeping) against
            # the run's wall: the issue-43 target (<= 25 %) for small models
            "cpu_outside_model_share_of_wall": outside / dt,
            "forward_gpu_seconds": getattr(st, "forward_gpu_seconds", None) if cuda else None,
            "head_gpu_seconds": getattr(st, "head_gpu_seconds", None) if cuda else None,
            "gpu_kernel_seconds": None, "gpu_idle_share_of_wall": None, "host_cuda_api_seconds": {}}
    if cuda and gpu_profile:
        busy, api = gpu_kernel_seconds(engine, reqs)
        info["gpu_kernel_seconds"] = busy
        info["gpu_idle_share_of_wall"] = None if busy is None else 1 - busy / dt
        info["host_cuda_api_seconds"] = api
        info["host_syncs"] = host_syncs(engine, reqs)
    return dt, cpu, [r.logprob for r in res if isinstance(r, LogProbResult)], info


def host_syncs(engine: Engine, reqs: list[LogProbRequest]) -> dict[str, int]:
    """Where the host waits for the device in one more run of ``reqs``: PyTorch's sync debug
    mode warns at every synchronising call (a value read, a device-to-host copy that blocks,
    an output sized by values), counted here by the Python line that made it, the eight most
    frequent. The suite checks on the CPU that nothing Python can see reads a value inside the
    model's forward (tests/probing/test_scoring_packing.py); this catches what only CUDA can
    say, e.g. a synchronising op inside a kernel's wrapper. The expected ones: the final
    read-back, once a call. Empty where the mode is not there."""
    import warnings

    if not hasattr(torch.cuda, "set_sync_debug_mode"):
        return {}
    found: dict[str, int] = {}
    try:  # a figure the run can do without: never lose the others to it
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                engine.run(reqs)
                torch.cuda.synchronize()
            finally:
                torch.cuda.set_sync_debug_mode("default")
    except Exception as exc:  # noqa: BLE001
        print(f"  (sync debug run failed: {type(exc).__name__}: {exc})", flush=True)
        return {}
    for w in caught:
        if "synchroniz" in str(w.message):
            at = f"{Path(w.filename).name}:{w.lineno}"
            found[at] = found.get(at, 0) + 1
    return dict(sorted(found.items(), key=lambda kv: -kv[1])[:8])


def gpu_kernel_seconds(engine: Engine, reqs: list[LogProbRequest]) -> tuple[float | None, dict[str, float]]:
    """Device seconds of every kernel and copy of one more run of ``reqs``, from torch's
    profiler (CUDA activity only): the device's busy time, which the timed run's wall minus
    it leaves idle. Kernel times barely move under the profiler (its cost is the host's), so
    they are set against the unprofiled run's wall. None where the profiler fails.

    Also the host's seconds in the CUDA runtime's calls of that run, the five largest
    (``cudaLaunchKernel``, ``cudaStreamSynchronize``, ``cudaMemcpyAsync``, ``cudaHostAlloc``
    ...): on an H200 the host spent most of a forward's device time inside its launch
    (session 33), and these say in which call it waits."""
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            engine.run(reqs)
            torch.cuda.synchronize()
        events = prof.key_averages()
        total = 0.0
        for evt in events:
            us = getattr(evt, "self_device_time_total", None)
            if us is None:
                us = getattr(evt, "self_cuda_time_total", 0.0)
            total += float(us)
    except Exception as exc:  # noqa: BLE001 - a figure the run can do without
        print(f"  (gpu profile failed: {type(exc).__name__}: {exc})", flush=True)
        return None, {}
    api: dict[str, float] = {}
    try:  # apart: a profiler whose events lack these fields keeps the kernel seconds
        calls = sorted(((float(e.self_cpu_time_total or 0.0) / 1e6, str(e.key)) for e in events
                        if str(e.key).startswith("cuda")), reverse=True)
        api = {name: round(sec, 4) for sec, name in calls[:5]}
    except Exception as exc:  # noqa: BLE001
        print(f"  (CUDA runtime calls not read: {type(exc).__name__}: {exc})", flush=True)
    return total / 1e6, api


def run_naive(lm: LoadedModel, reqs: list[LogProbRequest]) -> tuple[float, float, list[float]]:
    quiet_collector()
    t0, c0 = time.perf_counter(), time.process_time()
    res = Engine(lm, batch_size=1, share_prefix=False).run(reqs)
    return time.perf_counter() - t0, time.process_time() - c0, [
        r.logprob for r in res if isinstance(r, LogProbResult)]


def best_harness(lm: LoadedModel, reqs: list[LogProbRequest], batches: list[int]) -> tuple[Any, int, dict[int, float]]:
    """HFLM at the batch size with the highest request rate on ``reqs`` (CPU time on the
    CPU, wall time on a GPU)."""
    from lm_eval.models.huggingface import HFLM

    rates: dict[int, float] = {}
    gpu = str(lm.device).startswith("cuda")
    first: list[float] | None = None
    for b in batches:
        h = HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=b, max_length=lm.max_length)
        dt, cpu, vals = run_harness(h, reqs)
        rates[b] = len(reqs) / (dt if gpu else cpu)
        # the harness against itself at another batch size: the noise floor of the dtype
        # (its padding and kernel shapes change), beside which kgprobe's |Δ| is read
        self_delta = "" if first is None else f", max |Δ log p| vs batch {batches[0]}: " + (
            f"{max(abs(a - c) for a, c in zip(first, vals, strict=True)):.2e}")
        first = first or vals
        print(f"  harness batch {b}: {rates[b]:.1f} req/{'s' if gpu else 'cpu-s'}{self_delta}",
              flush=True)
    best = max(rates, key=lambda b: rates[b])
    return HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=best,
                max_length=lm.max_length), best, rates


def run_harness(hflm: Any, reqs: list[LogProbRequest]) -> tuple[float, float, list[float]]:
    from lm_eval.api.instance import Instance

    inst = [Instance(request_type="loglikelihood", doc={}, arguments=(r.context, r.continuation),
                     idx=i) for i, r in enumerate(reqs)]
    quiet_collector()
    t0, c0 = time.perf_counter(), time.process_time()
    out = hflm.loglikelihood(inst, disable_tqdm=True)
    return time.perf_counter() - t0, time.process_time() - c0, [float(lp) for lp, _ in out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="BEAR relation file (jsonl)")
    ap.add_argument("--prompts", type=int, default=50)
    ap.add_argument("--candidates", type=int, default=100)
    ap.add_argument("--shots", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32, help="kgprobe's padded-path rows")
    ap.add_argument("--batch-tokens", type=int, default=None,
                    help="kgprobe's row budget (default: the engine's, 512 on CPU, 8192 on CUDA)")
    ap.add_argument("--chunk-size", type=int, default=None,
                    help="kgprobe's requests per chunk (default: the engine's, 16384); on CUDA a "
                         "chunk is tokenized, planned and launched while the one before runs "
                         "(issue 43), so a smaller chunk starts the device sooner but packs less")
    ap.add_argument("--attention", default="auto", choices=["auto", "flex", "segments", "dense"],
                    help="kgprobe's attention path over packed rows (auto: flex on CUDA, "
                    "segments elsewhere)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
    ap.add_argument("--dtype", default="float32", help="float32, bfloat16, float16")
    ap.add_argument("--random-init", choices=sorted(SHAPES), default=None,
                    help="a random Llama of this shape instead of --model")
    ap.add_argument("--tokenizer", type=Path, default=None,
                    help="with --random-init: the default model's tokenizer saved in this "
                    "directory (a machine without its GGUF package)")
    ap.add_argument("--harness-batches", default="32,128,256,512")
    ap.add_argument("--plan-only", action="store_true",
                    help="only the packing plan (forward calls, tokens per forward); no forward")
    ap.add_argument("--harness-pick-prompts", type=int, default=2,
                    help="prompts of each workload on which the harness batch sizes are timed")
    ap.add_argument("--naive-prompts", type=int, default=None,
                    help="run naive on only this many prompts (its req/s is per request)")
    ap.add_argument("--systems", default="kgprobe,naive,harness")
    ap.add_argument("--workloads", default="zero,few")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--no-gpu-profile", action="store_true",
                    help="on CUDA, skip the profiled extra kgprobe run that measures the "
                    "device's busy time (gpu_kernel_seconds, gpu_idle_share_of_wall)")
    args = ap.parse_args()

    if args.random_init:
        lm = random_init(args.random_init, args.device, args.dtype, args.threads, args.tokenizer)
    else:
        lm = load_model(args.model, threads=args.threads, device=args.device, dtype=args.dtype)
    systems = args.systems.split(",")
    n_params = sum(p.numel() for p in lm.model.parameters())
    # the tied input embedding is a lookup, not a matmul; the LM head is a matmul per token
    embed = lm.model.get_input_embeddings().weight.numel()
    flops_per_token = 2 * (n_params - embed + lm.model.get_output_embeddings().weight.numel())
    peak = matmul_peak(device=str(lm.device), dtype=torch_dtype(args.dtype))
    zero, few = workload(lm, args.data, args.prompts, args.candidates, args.shots, args.seed)
    if args.plan_only:
        from kgprobe.probing.backends.causal import default_batch_tokens

        args.batch_tokens = args.batch_tokens or default_batch_tokens(str(lm.device), lm.model)
        for name, reqs in (("zero-shot", zero), (f"{args.shots}-shot", few)):
            f = plan_figures(lm, reqs, args.batch_tokens)
            naive = fed_tokens(lm, reqs, shared=False)
            print(f"[{name}] {f['requests']} requests, budget {args.batch_tokens}: "
                  f"{f['forward_calls']} forward calls, {f['tokens']} tokens "
                  f"({f['tokens_per_forward']:.0f}/forward; one sequence per request: {naive}), "
                  f"plan built in {f['plan_cpu_seconds']:.3f} cpu-s")
        return
    report: dict[str, Any] = {
        "model": args.random_init and f"random-{args.random_init}" or args.model,
        "device": str(lm.device), "dtype": args.dtype, "batch_tokens": args.batch_tokens,
        "threads": args.threads, "batch_size": args.batch_size,
        "prompts": args.prompts, "candidates": args.candidates, "shots": args.shots,
        "matmul_peak_gflops": peak / 1e9, "flops_per_token": flops_per_token, "workloads": {},
    }
    print(f"model {report['model']} ({lm.device}, {args.dtype}): {n_params / 1e6:.1f}M params, {flops_per_token / 1e6:.0f} MFLOP/token; "
          f"matmul peak {peak / 1e9:.1f} GFLOP/s ({args.threads} thread)")
    for name, reqs in (("zero", zero), ("few", few)):
        if name not in args.workloads.split(","):
            continue
        label = "zero-shot" if name == "zero" else f"{args.shots}-shot"
        row: dict[str, Any] = {"requests": len(reqs)}
        scores: dict[str, list[float]] = {}
        hflm = None
        if "harness" in systems:
            pick = reqs[: args.harness_pick_prompts * args.candidates]
            hflm, best, rates = best_harness(
                lm, pick, [int(b) for b in args.harness_batches.split(",")])
            row["harness_batch"] = best
            row["harness_batch_rates"] = rates
        for system in systems:
            sub = reqs
            if system == "naive" and args.naive_prompts is not None:
                sub = reqs[: args.naive_prompts * args.candidates]
            info: dict[str, Any] = {}
            if system == "kgprobe":
                dt, cpu, vals, info = run_kgprobe(lm, sub, args.batch_size, args.batch_tokens,
                                                  args.attention, not args.no_gpu_profile,
                                                  args.chunk_size)
            elif system == "naive":
                dt, cpu, vals = run_naive(lm, sub)
            else:
                dt, cpu, vals = run_harness(hflm, sub)
            scores[system] = vals
            tokens = fed_tokens(lm, sub, shared=system == "kgprobe")
            row[system] = {
                "requests": len(sub), "seconds": dt, "cpu_seconds": cpu,
                "req_per_s": len(sub) / dt, "req_per_cpu_s": len(sub) / cpu,
                "tokens_fed": tokens, "gflops": tokens * flops_per_token / dt / 1e9,
                "gflops_cpu": tokens * flops_per_token / cpu / 1e9, **info,
            }
            print(f"[{label}] {system:8} {len(sub):6d} req  {dt:8.2f} s wall {cpu:8.2f} s cpu  "
                  f"{len(sub) / dt:7.1f} req/s  {len(sub) / cpu:7.1f} req/cpu-s  "
                  f"{row[system]['gflops_cpu']:6.2f} GFLOP/cpu-s", flush=True)
            if info:
                if info["attention_fallback"]:
                    print(f"[{label}] {system:8} flex attention fell back: "
                          f"{info['attention_fallback']}", flush=True)
                print(f"[{label}] {system:8} packed rows: {info['packed']} (self-check max "
                      f"|Δ log p| {info['packing_check_diff']}); warm-up "
                      f"{info['warmup_seconds']} s", flush=True)
                print(f"[{label}] {system:8} attention {info['attention']}, row budget "
                      f"{info['batch_tokens']}: {info['forward_calls']} forward calls, "
                      f"{info['tokens_per_forward']:.0f} tokens/forward, "
                      f"{info['forward_cpu_seconds']:.2f} cpu-s in forward, "
                      f"{info['head_cpu_seconds']:.2f} in LM head + log_softmax, "
                      f"{info['wait_cpu_seconds']:.2f} waiting for the device, "
                      f"{info['cpu_seconds_outside_model']:.2f} cpu-s outside all three = "
                      f"{100 * info['cpu_outside_model_share_of_wall']:.0f}% of the wall",
                      flush=True)
                if info["forward_gpu_seconds"] is not None or info["gpu_kernel_seconds"] is not None:
                    idle = info["gpu_idle_share_of_wall"]
                    print(f"[{label}] {system:8} device: rows' forward spans "
                          f"{info['forward_gpu_seconds']} s, head spans "
                          f"{info['head_gpu_seconds']} s (CUDA events); kernels "
                          f"{info['gpu_kernel_seconds']} s (profiled run), idle "
                          f"{'n/a' if idle is None else f'{100 * idle:.0f}%'} of the wall",
                          flush=True)
                    if info.get("host_cuda_api_seconds"):
                        calls = ", ".join(f"{k} {v:.3f} s" for k, v in info["host_cuda_api_seconds"].items())
                        print(f"[{label}] {system:8} host in CUDA runtime calls (profiled run): {calls}",
                              flush=True)
                    if "host_syncs" in info:
                        syncs = ", ".join(f"{k} x{v}" for k, v in info["host_syncs"].items()) or "none"
                        print(f"[{label}] {system:8} synchronising calls (sync debug mode, one more run): {syncs}",
                              flush=True)
        if "kgprobe" in scores:
            for other in ("naive", "harness"):
                if other in scores:
                    row[f"speedup_vs_{other}"] = row["kgprobe"]["req_per_s"] / row[other]["req_per_s"]
                    row[f"cpu_speedup_vs_{other}"] = (
                        row["kgprobe"]["req_per_cpu_s"] / row[other]["req_per_cpu_s"])
                    print(f"[{label}] kgprobe / {other}: {row[f'speedup_vs_{other}']:.1f}x wall, "
                          f"{row[f'cpu_speedup_vs_{other}']:.1f}x cpu time", flush=True)
            if "harness" in scores:
                d = max(abs(a - b) for a, b in zip(scores["kgprobe"], scores["harness"], strict=True))
                row["max_abs_delta_vs_harness"] = d
                print(f"[{label}] max |Δ log p| kgprobe vs harness: {d:.2e}")
            if "naive" in scores:
                n = len(scores["naive"])
                d = max(abs(a - b) for a, b in zip(scores["kgprobe"][:n], scores["naive"], strict=True))
                row["max_abs_delta_vs_naive"] = d
        report["workloads"][label] = row
    # the machine is shared: take the peak again at the end and keep the higher figure
    peak_end = matmul_peak(device=str(lm.device), dtype=torch_dtype(args.dtype))
    peak_best = max(peak, peak_end)
    report["matmul_peak_end_gflops"] = peak_end / 1e9
    print(f"matmul peak at start {peak / 1e9:.1f}, at end {peak_end / 1e9:.1f} GFLOP/s; "
          f"achieved FLOP (2 x parameters x tokens fed) per wall second and per cpu-second "
          f"as a fraction of the higher one:")
    for label, row in report["workloads"].items():
        for system in systems:
            if system in row:
                row[system]["peak_fraction"] = row[system]["gflops_cpu"] * 1e9 / peak_best
                row[system]["peak_fraction_wall"] = row[system]["gflops"] * 1e9 / peak_best
                print(f"  [{label}] {system:8} {100 * row[system]['peak_fraction_wall']:.0f}% "
                      f"per wall ({row[system]['gflops']:.1f} GFLOP/s), "
                      f"{100 * row[system]['peak_fraction']:.0f}% per cpu-second "
                      f"({row[system]['gflops_cpu']:.1f} GFLOP per cpu-second)")
    # the issue-43 figures in one table: requests/s, % of the peak (per wall second on a GPU,
    # per cpu-second on the CPU, as the peak itself is measured), kgprobe's own host share
    gpu = str(lm.device).startswith("cuda")
    print(f"summary ({report['model']}, {lm.device}, {args.dtype}; % of peak per "
          f"{'wall second' if gpu else 'cpu-second'}):")
    for label, row in report["workloads"].items():
        for system in systems:
            if system in row:
                r = row[system]
                frac = r["peak_fraction_wall"] if gpu else r["peak_fraction"]
                extra = ""
                if system == "kgprobe":
                    idle = r.get("gpu_idle_share_of_wall")
                    extra = (f"  cpu outside model {100 * r['cpu_outside_model_share_of_wall']:.0f}%"
                             f" of wall, {r['forward_calls']} rows of "
                             f"{r['tokens_per_forward']:.0f} tokens (budget {r['batch_tokens']})"
                             + ("" if idle is None else f", device idle {100 * idle:.0f}%"))
                print(f"  [{label:9}] {system:8} {r['req_per_s']:9.1f} req/s  "
                      f"{100 * frac:5.1f}% of peak{extra}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
