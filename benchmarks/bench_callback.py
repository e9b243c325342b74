"""The training callback's cost per call (issue 42 #4): ``ProbeSetCallback.score`` on the
shipped demo set (``--set demo``: 60 facts, Min@5 over temp+sem distractors) with a model in
memory, as a Trainer hands it over.

Per call it reports the wall time, split into the weights' fingerprint (``from_model`` hashes
every parameter so that no score of earlier weights is reused), the scoring (engine runs of
the probe loop's scoring code) and the rest (building the report's figures and the records).
The first call is reported apart (tokenizer memos, torch's first kernels); the figures are the
median of ``--repeat`` calls after it. The model is ``smollm2-135m`` from the registry
(converted locally: no hub), float32, on ``--device``.

    PYTHONPATH=$PWD python benchmarks/bench_callback.py --repeat 3 --threads 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--set", default="demo")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    import torch

    from kgprobe.callbacks import ProbeSetCallback
    from kgprobe.probing import models
    from kgprobe.probing import probe_set as ps

    torch.set_num_threads(args.threads)
    lm = models.load_model(args.model, threads=args.threads)
    model, tok = lm.model.to(args.device), lm.tokenizer
    model.train()
    cb = ProbeSetCallback(args.set, every=1, model_name=args.model)

    parts: dict[str, float] = {}
    real_fp, real_score_set = models.weights_fingerprint, ps.score_set

    def timed_fp(*a: Any, **k: Any) -> str:
        t = time.perf_counter()
        try:
            return real_fp(*a, **k)
        finally:
            parts["fingerprint"] = parts.get("fingerprint", 0.0) + time.perf_counter() - t

    models.weights_fingerprint = timed_fp  # type: ignore[assignment]

    def timed_score(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return real_score_set(*a, **k)
        finally:
            parts["scoring"] = parts.get("scoring", 0.0) + time.perf_counter() - t

    ps.score_set = timed_score  # type: ignore[assignment]

    calls = []
    for step in range(args.repeat + 1):
        parts.clear()
        t = time.perf_counter()
        logs = cb.score(model, tok, step)
        wall = time.perf_counter() - t
        calls.append({"wall": wall, "fingerprint": parts.get("fingerprint", 0.0),
                      "scoring": parts.get("scoring", 0.0),
                      "rest": wall - parts.get("fingerprint", 0.0) - parts.get("scoring", 0.0)})
        assert model.training
    last = cb.last
    assert last is not None
    warm = calls[1:]
    print(json.dumps({
        "model": args.model, "device": args.device, "threads": args.threads, "set": args.set,
        "facts": last.summary.scored + last.summary.unscorable, "scored": last.summary.scored,
        "first_call_s": round(calls[0]["wall"], 3),
        "median_s": {k: round(statistics.median(c[k] for c in warm), 3)
                     for k in ("wall", "fingerprint", "scoring", "rest")},
        "all_mean": logs.get("kgprobe/all/mean"),
    }, indent=1))


if __name__ == "__main__":
    main()
