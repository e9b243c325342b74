"""The scoring engine's CPU per request outside the model (issue 18: target <= 25 µs).

Workload: cloze log-prob requests of the demo's shape built from real BEAR facts
(lm-pub-quiz's templates whose object is last, e.g. "<subject> was born in"), ``--candidates``
continuations per context (the true object and distractors of its answer space), with the real
SmolLM2 tokenizer (``smollm2-135m`` from the registry, converted locally: no hub).

The model is a stand-in of almost no cost: a randomly initialised Llama with the tokenizer's
vocabulary, hidden size 8, one layer and one head. Its forward time and the LM head +
log_softmax time on the read positions are measured by the engine itself
(``EngineStats.forward_cpu_seconds`` and ``head_cpu_seconds``) and subtracted; what is left is
the engine's own CPU. That remainder is split by timing its parts alone on the same requests:

- tokenization: ``Tokenization.causal_pairs`` on the whole batch;
- plan: ``packing.plan`` on the encodings (rows, reads);
- rest (result assembly): everything else in ``Engine.run`` (dedupe, dispatch, the segment
  path's masks, gathering the read log-probs, building ``LogProbResult`` objects), the
  remainder; of which masks: ``CausalBackend._block_masks`` on every row of the plan, timed alone;
- scores: a digest of every result (scores, tokens, flags), to check that a change of the
  engine leaves every score identical;
- cache: separately, an engine with a SQLite ``ScoreCache`` in a temporary directory: the
  extra CPU of storing every result (first run) and of answering every request from it
  (second run). Not part of the target (a run's cache is optional).

``--workload zero`` / ``few`` take instead ``bench_scoring.py``'s workload (BEAR P19,
``--prompts`` subjects x ``--candidates`` multi-token labels, zero-shot or with 4 demonstrations):
each context with its 100 candidates packs into one attention block of some 280 tokens, whose
segment mask the engine builds on the host (docs/benchmarks.md, session 32).

All figures are process CPU time (``time.process_time``), minimum over ``--repeat`` runs after
one warm-up run (the per-model token-string memo is warm, as in any run after its first chunk).

    PYTHONPATH=$PWD python benchmarks/bench_engine_overhead.py --contexts 1000 --candidates 6
    PYTHONPATH=$PWD python benchmarks/bench_engine_overhead.py --workload few --prompts 100 \
        --candidates 100 --data ../shared/data/bear/BEAR/P19.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from bench_scoring import workload as scoring_workload  # this directory: run as a script

from kgprobe.probing.backends.packing import plan
from kgprobe.probing.cache import ScoreCache
from kgprobe.probing.engine import Engine
from kgprobe.probing.models import LoadedModel, load_model
from kgprobe.probing.requests import LogProbRequest, LogProbResult

BEAR = Path(__file__).resolve().parents[2] / "shared" / "data" / "bear" / "BEAR"


def workload(data: Path, contexts: int, candidates: int, seed: int) -> list[LogProbRequest]:
    """``contexts`` cloze contexts over all BEAR relations (templates ending in the object),
    each with its true object and ``candidates - 1`` distractors of the relation's answer
    space, as the demo's measures ask for them."""
    meta = json.loads((data / "metadata_relations.json").read_text(encoding="utf-8"))
    rng = random.Random(seed)
    per_rel: list[tuple[str, list[dict[str, Any]], list[str]]] = []
    for rel, info in sorted(meta.items()):
        temps = [t for t in info["templates"] if t.rstrip(".").endswith("[Y]")]
        f = data / f"{rel}.jsonl"
        if not temps or not f.exists():
            continue
        rows = [json.loads(x) for x in f.read_text(encoding="utf-8").splitlines() if x]
        per_rel.append((max(temps, key=len), rows, list(info["answer_space_labels"])))
    reqs: list[LogProbRequest] = []
    k = 0
    while len(reqs) < contexts * candidates:
        temp, rows, space = per_rel[k % len(per_rel)]
        k += 1
        fact = rng.choice(rows)
        context = temp.rstrip(".")[: -len("[Y]")].rstrip().replace("[X]", fact["sub_label"])
        others = rng.sample([s for s in space if s != fact["obj_label"]], candidates - 1)
        reqs.extend(LogProbRequest(context, " " + c) for c in [fact["obj_label"], *others])
    return reqs


def stand_in(threads: int) -> LoadedModel:
    """The default model's tokenization around a 1-layer, hidden-8 random Llama."""
    from transformers import LlamaConfig, LlamaForCausalLM

    base = load_model("smollm2-135m", threads=threads, device="cpu")
    cfg = LlamaConfig(vocab_size=len(base.tokenizer), hidden_size=8, intermediate_size=16,
                      num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1,
                      max_position_embeddings=8192, tie_word_embeddings=True,
                      bos_token_id=base.tokenizer.bos_token_id,
                      eos_token_id=base.tokenizer.eos_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    return replace(base, name="stand-in", model=model, fingerprint="stand-in-h8-l1")


def cpu_of(fn: Callable[[], Any], repeat: int) -> float:
    """Minimum process CPU seconds of ``fn`` over ``repeat`` calls (after one warm-up)."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        c0 = time.process_time()
        fn()
        best = min(best, time.process_time() - c0)
    return best


def engine_run(lm: LoadedModel, reqs: list[LogProbRequest],
               cache: ScoreCache | None = None) -> tuple[float, Engine, list[Any]]:
    """CPU seconds of one ``Engine.run`` (the packing self-check done before timing)."""
    engine = Engine(lm, cache=cache)
    assert engine.causal is not None
    engine.causal.packing_works()
    engine.causal.attention_path()
    c0 = time.process_time()
    res = engine.run(reqs)
    return time.process_time() - c0, engine, res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contexts", type=int, default=1000)
    ap.add_argument("--candidates", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data", type=Path, default=BEAR,
                    help="BEAR's directory (bear), or a relation file such as P19.jsonl (zero, few)")
    ap.add_argument("--workload", choices=["bear", "zero", "few"], default="bear",
                    help="bear: cloze contexts over all relations; zero / few: bench_scoring.py's")
    ap.add_argument("--prompts", type=int, default=100, help="subjects of the zero / few workload")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    lm = stand_in(args.threads)
    if args.workload == "bear":
        reqs = workload(args.data, args.contexts, args.candidates, args.seed)
    else:
        zero, few = scoring_workload(lm, args.data, args.prompts, args.candidates, 4, args.seed)
        reqs = zero if args.workload == "zero" else few
    n = len(reqs)
    tok = lm.tokenization
    ctx_tokens = [len(e.context_ids) for e in tok.causal_pairs(
        [(r.context, r.continuation, r.add_eos) for r in reqs[:: args.candidates]])]

    # the whole run, forward and head subtracted (best of --repeat)
    engine_run(lm, reqs)  # warm-up: token-string memo, attention path, allocator
    best: tuple[float, float, float] | None = None
    logprobs: list[float] = []
    res: list[Any] = []
    for _ in range(args.repeat):
        cpu, engine, res = engine_run(lm, reqs)
        st = engine.stats
        fig = (cpu, st.forward_cpu_seconds, st.head_cpu_seconds)
        if best is None or cpu - fig[1] - fig[2] < best[0] - best[1] - best[2]:
            best = fig
        logprobs = [r.logprob for r in res if isinstance(r, LogProbResult)]
    assert best is not None
    total, forward, head = best
    outside = total - forward - head

    def tokenize() -> Any:
        return tok.causal_pairs([(r.context, r.continuation, r.add_eos) for r in reqs])

    encs = tokenize()
    tokenization = cpu_of(tokenize, args.repeat)
    budget = engine.causal.batch_tokens if engine.causal else 8192
    planning = cpu_of(lambda: plan([e.context_ids for e in encs],
                                   [e.continuation_ids for e in encs], budget or 8192),
                      args.repeat)
    rest = outside - tokenization - planning
    # the segment path's masks alone (part of the rest), built for every row of the plan
    causal = engine.causal
    masks = None
    if causal is not None and causal.attention_path() == "segments":
        rows = plan([e.context_ids for e in encs], [e.continuation_ids for e in encs],
                    budget or 8192).rows
        masks = cpu_of(lambda: [causal._block_masks(r) for r in rows], args.repeat)

    # the cache: storing every result, then answering every request from it
    puts: list[float] = []
    gets: list[float] = []
    for _ in range(max(1, args.repeat // 2)):
        with tempfile.TemporaryDirectory() as d:
            cache = ScoreCache(Path(d) / "scores.sqlite")
            cpu1, e1, _ = engine_run(lm, reqs, cache)
            puts.append(cpu1 - e1.stats.forward_cpu_seconds - e1.stats.head_cpu_seconds - outside)
            cpu2, e2, res2 = engine_run(lm, reqs, cache)
            assert e2.stats.cache_hits == len(set(reqs))
            assert [r.logprob for r in res2 if isinstance(r, LogProbResult)] == logprobs
            gets.append(cpu2)
            cache.close()

    us = 1e6 / n
    figures = {
        "requests": n, "contexts": n // args.candidates, "candidates": args.candidates,
        "context_tokens_mean": sum(ctx_tokens) / len(ctx_tokens),
        "forward_calls": engine.stats.forward_calls,
        "us_per_request": {
            "total_run": total * us, "forward_excluded": forward * us, "head_excluded": head * us,
            "outside_model": outside * us, "tokenization": tokenization * us,
            "plan": planning * us, "rest_result_assembly": rest * us,
            "of_which_masks": masks * us if masks is not None else None,
            "cache_store": min(puts) * us, "cache_answer_all": min(gets) * us,
        },
        "requests_per_cpu_second_outside_model": n / outside,
        # every score and token of every result: a change of the engine that moves any bit
        # of any score changes it
        "scores_sha256": hashlib.sha256(repr(
            [(r.logprob, r.token_logprobs, r.tokens, r.token_ids, r.is_greedy, r.boundary_merged)
             for r in res if isinstance(r, LogProbResult)]).encode()).hexdigest()[:16],
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{n} log-prob requests: {figures['contexts']} contexts x {args.candidates} candidates,"
          f" {figures['context_tokens_mean']:.1f} context tokens on average, "
          f"{figures['forward_calls']} forward calls")
    print(f"CPU µs per request (process time, best of {args.repeat}):")
    for k, v in figures["us_per_request"].items():  # type: ignore[attr-defined]
        print(f"  {k:<22} {v:8.2f}" if v is not None else f"  {k:<22} {'-':>8}")
    print(f"scores digest: {figures['scores_sha256']} (equal before and after a change)")
    print(f"outside the model: {figures['requests_per_cpu_second_outside_model']:,.0f} "
          "requests per CPU-second (target: <= 25 µs, 40,000/s)")


if __name__ == "__main__":
    main()
