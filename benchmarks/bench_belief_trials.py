"""Cost of BELIEF's fluctuation at the paper's N = 50,000 trials (report time, no model call).

    python benchmarks/bench_belief_trials.py

For one relation of F facts with P prompts each over T templates (random ranks, seed 0), times
``Belief.aggregate`` — Acc@1, Acc@10 and MRR over N trials of one prompt per fact with one
template per relation (vectorized), plus Consist@1 and Overconf — and, for scale, the loop kgprobe
used before (one ``random.Random`` per trial, N = 50, no template sharing) extrapolated per trial.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kgprobe.probing.measures.builtin import Belief  # noqa: E402


def rows(facts: int, prompts: int, templates: int) -> list[dict[str, object]]:
    rng = random.Random(0)
    out = []
    for _ in range(facts):
        ranks = [rng.choice((1, 1, 2, 5, 40, 900)) for _ in range(prompts)]
        out.append({"score": sum(r == 1 for r in ranks) / prompts, "ranks": ranks,
                    "confidences": [rng.random() for _ in ranks], "scale": "vocab",
                    "templates": [i % templates for i in range(prompts)], "consistency": 0.5})
    return out


def old_loop_per_trial(rs: list[dict[str, object]], trials: int = 50) -> float:
    """Seconds per trial of the loop before (random.Random(seed + i), one prompt per fact)."""
    per = [list(r["ranks"]) for r in rs]  # type: ignore[call-overload]
    t0 = time.perf_counter()
    for i in range(trials):
        g = random.Random(i)
        s = [rr[g.randrange(len(rr))] for rr in per]
        _ = (sum(1 for x in s if x <= 1) / len(s), sum(1 for x in s if x <= 10) / len(s),
             sum(1 / x for x in s) / len(s))
    return (time.perf_counter() - t0) / trials


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--facts", type=int, nargs="+", default=[60, 1000, 10000])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--templates", type=int, default=4)
    ap.add_argument("--runs", type=int, default=50_000)
    args = ap.parse_args()
    print(f"{'facts':>7} {'prompts':>8} {'N':>7} {'aggregate s':>12} {'µs/trial':>9} {'old µs/trial':>13}")
    for f in args.facts:
        rs = rows(f, args.prompts, args.templates)
        t0 = time.perf_counter()
        agg = Belief({"runs": args.runs}).aggregate(rs, seed=0)
        s = time.perf_counter() - t0
        assert agg["acc@1"]["runs"] == args.runs
        old = old_loop_per_trial(rs)
        print(f"{f:>7} {f * args.prompts:>8} {args.runs:>7} {s:>12.2f} {1e6 * s / args.runs:>9.1f} "
              f"{1e6 * old:>13.1f}")


if __name__ == "__main__":
    main()
