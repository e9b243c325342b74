"""The segment path's attention masks alone: CPU µs per request of ``CausalBackend._block_masks``
over every packed row of a workload (best of ``--repeat``), on five workloads whose blocks range
from ~10 x 10 (one candidate per context) to ~280 x 320 (100 candidates, 4-shot):

- ``bear1``, ``bear2``, ``bear6``: ``bench_engine_overhead.py``'s cloze contexts over all BEAR
  relations with 1, 2 or 6 candidates each (6,000 requests);
- ``zero``, ``few``: ``bench_scoring.py``'s 100 subjects x 100 candidates of BEAR P19, zero-shot
  and 4-shot (10,000 requests).

The model is ``bench_engine_overhead.py``'s hidden-8 stand-in (the masks depend on the rows, not
the weights). ``--against CHECKOUT`` times that checkout's ``_block_masks`` too, on the same
backend object and rows, alternating with this one's in one process (side by side: runs in two
processes differed by more than the change on this machine), and checks that both give the same
masks:

    PYTHONPATH=$PWD python benchmarks/bench_segment_masks.py --bear ../shared/data/bear/BEAR \
        --against /tmp/before
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine_overhead import BEAR, stand_in, workload  # noqa: E402
from bench_scoring import workload as scoring_workload  # noqa: E402

from kgprobe.probing.backends.packing import plan  # noqa: E402
from kgprobe.probing.engine import Engine  # noqa: E402


def other_block_masks(checkout: Path) -> Callable[..., Any]:
    """``CausalBackend._block_masks`` of another checkout's engine, loaded from its file."""
    path = checkout / "kgprobe" / "probing" / "backends" / "causal.py"
    spec = importlib.util.spec_from_file_location("other_causal", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["other_causal"] = mod
    spec.loader.exec_module(mod)
    return mod.CausalBackend._block_masks  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bear", type=Path, default=BEAR, help="BEAR's directory")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--against", type=Path, default=None,
                    help="another checkout whose masks are timed beside these, in this process")
    args = ap.parse_args()
    torch.set_num_threads(1)
    lm = stand_in(1)
    causal = Engine(lm, attention="segments").causal
    assert causal is not None and causal.attention_path() == "segments"
    loads = {f"bear{k}": workload(args.bear, 6000 // k, k, 0) for k in (1, 2, 6)}
    loads["zero"], loads["few"] = scoring_workload(lm, args.bear / "P19.jsonl", 100, 100, 4, 0)
    sides: dict[str, Callable[..., Any]] = {"this": type(causal)._block_masks}
    if args.against is not None:
        sides["against"] = other_block_masks(args.against)
    figures: dict[str, dict[str, float]] = {side: {} for side in sides}
    blocks = {}
    for name, reqs in loads.items():
        encs = lm.tokenization.causal_pairs([(r.context, r.continuation, r.add_eos) for r in reqs])
        rows = plan([e.context_ids for e in encs], [e.continuation_ids for e in encs], 8192).rows
        if "against" in sides:  # the same masks, bit for bit
            for row in rows:
                mine, theirs = sides["this"](causal, row), sides["against"](causal, row)
                assert mine.blocks == theirs.blocks and all(
                    torch.equal(a, b) for a, b in zip(mine.masks, theirs.masks, strict=True))
        best = dict.fromkeys(sides, float("inf"))
        for _ in range(args.repeat):
            for side, build in sides.items():
                c0 = time.process_time()
                for row in rows:
                    build(causal, row)
                best[side] = min(best[side], time.process_time() - c0)
        for side in sides:
            figures[side][name] = round(best[side] / len(reqs) * 1e6, 2)
        bl = np.concatenate([r.blocks.reshape(-1, 4) for r in rows]).astype(np.int64)
        nq = bl[:, 1] - bl[:, 0]
        blocks[name] = {"blocks": len(bl), "mean_pairs": round(float((nq * (bl[:, 3] - bl[:, 2] + nq)).mean()))}
    print(json.dumps({"us_per_request": figures, "blocks": blocks}, indent=1))


if __name__ == "__main__":
    main()
