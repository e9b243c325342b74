"""KaRR against DistFactAssessLM's official code on every fact of the reference fixture
(tests/fixtures/karr_reference; the suite checks 8 of them): prints each fact's ratios, the
worst relative difference and the time. Run: ``python benchmarks/bench_karr_reference.py``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "probing"))

from test_karr_reference import compare, items_for, reference  # noqa: E402

from kgprobe.probing.engine import Engine  # noqa: E402
from kgprobe.probing.measures.baselines import karr  # noqa: E402
from kgprobe.probing.models import DEFAULT_MODEL, load_model  # noqa: E402


def main() -> None:
    inputs, rows = reference()
    indices = tuple(sorted(rows))
    lm = load_model(DEFAULT_MODEL, dtype="float32", threads=1, device="cpu")
    engine = Engine(lm, progress=False)
    t0, c0 = time.perf_counter(), time.process_time()
    got = karr(engine, items_for(inputs, indices), sampling="first")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    worst = 0.0
    for i, g in zip(indices, got, strict=True):
        w = rows[i]
        d = compare(g, w)
        worst = max(worst, d)
        print(f"{i:2d} {w['fact'][1]:6s} KaRR_s {g.karr_subject:10.4f} ref {w['subject_ratio']:10.4f}  "
              f"KaRR_r {g.karr_relation:10.4f} ref {w['relation_ratio']:10.4f}  "
              f"KaRR {g.karr:9.4f} ref {w['karr']:9.4f}  knows {g.knows}  rel.diff {d:.1e}")
    print(f"facts {len(indices)}  worst relative difference {worst:.2e}  "
          f"wall {wall:.1f} s  cpu {cpu:.1f} s  requests {engine.stats.computed}")


if __name__ == "__main__":
    main()
