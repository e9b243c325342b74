"""FACTOR parity: kgprobe against AI21's official ``eval_factuality.py`` (issue 21, item 4).

For every row of the FACTOR CSVs, the four per-completion scores of kgprobe
(``factor_scores``: mean log-prob per token of c) are compared with the official script's
mean NLL per token of c (sign flipped), and the picks (argmax of kgprobe = argmin of the
official ``all_scores``) are compared.

Reference values come from either

- ``--reference FILE.jsonl`` (one per CSV, same order as ``--csv``): rows written by a run of
  the official script, ``{"row": i, "nll": [4 floats], ...}`` (the format of the stored
  fixture ``tests/fixtures/factor_reference/*.jsonl``; rows not in the file are skipped), or
- ``--factor-repo DIR``: a checkout of github.com/AI21Labs/factor (commit ee9de30); its
  ``eval_factuality.py`` is imported unchanged and its ``read_data``, ``load_tokenizer`` and
  ``run_eval`` compute the reference here. Only the model loading is replaced: the model
  object is kgprobe's (the GGUF de-quantized to fp32), the tokenizer is the official
  ``load_tokenizer`` on kgprobe's converted model directory (``max_tokens`` 1024, the
  official default).

kgprobe runs with ``--max-length 1024`` (the official truncation; rows shorter than that are
not affected). Example (the run recorded in docs/benchmarks.md)::

    .venv/bin/python benchmarks/bench_factor_parity.py --factor-repo /tmp/factor \\
        --csv ../shared/data/factor/expert_factor.csv ../shared/data/factor/news_factor.csv
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any


def reference_from_script(repo: Path, csv: Path, model: Any, directory: Path,
                          max_tokens: int) -> dict[int, list[float]]:
    """Per row, the official mean NLL per token of the four candidates."""
    sys.path.insert(0, str(repo))
    try:
        ef = importlib.import_module("eval_factuality")
    finally:
        sys.path.pop(0)
    tokenizer = ef.load_tokenizer(str(directory), max_tokens)
    model.config.pad_token_id = model.config.eos_token_id
    data = ef.read_data(str(csv), "turncated_prefixes")
    scores = ef.run_eval(model, tokenizer, data, "cpu")
    return {i: [float(x) for x in row] for i, row in enumerate(scores.tolist())}


def reference_from_file(path: Path) -> dict[int, list[float]]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            out[int(r["row"])] = [float(x) for x in r["nll"]]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", nargs="+", type=Path, required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--reference", nargs="+", type=Path)
    src.add_argument("--factor-repo", type=Path)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--json", type=Path, help="write per-row figures here")
    args = ap.parse_args()
    if args.reference and len(args.reference) != len(args.csv):
        ap.error("one --reference file per --csv")

    import torch

    from kgprobe.probing.engine import Engine
    from kgprobe.probing.measures.factor import factor_scores, read_factor_csv
    from kgprobe.probing.models import REGISTRY, _convert_gguf, load_model, registry_gguf

    torch.set_num_threads(args.threads)
    lm = load_model("smollm2-135m", dtype="float32", threads=args.threads, device="cpu")
    cur = lm.tokenization.max_length
    lm.tokenization.max_length = args.max_tokens if cur is None else min(cur, args.max_tokens)
    lm.tokenization.truncate_left = True  # the official left truncation (kgprobe factor --max-length)
    engine = Engine(lm, batch_size=args.batch_size, progress=False, chunk_size=64)
    directory = _convert_gguf(registry_gguf(REGISTRY["smollm2-135m"]))

    summary: dict[str, Any] = {}
    per_row: list[dict[str, Any]] = []
    ok = True
    for k, csv in enumerate(args.csv):
        t0 = time.perf_counter()
        if args.reference:
            ref = reference_from_file(args.reference[k])
        else:
            ref = reference_from_script(args.factor_repo, csv, lm.model, directory,
                                        args.max_tokens)
        t_ref = time.perf_counter() - t0
        items = read_factor_csv(csv)
        rows = sorted(i for i in ref if i < len(items))
        t0 = time.perf_counter()
        outs = factor_scores(engine, [items[i] for i in rows])
        t_kg = time.perf_counter() - t0
        max_d, worst, same, over = 0.0, -1, 0, 0
        for i, o in zip(rows, outs, strict=True):
            theirs = [-x for x in ref[i]]
            d = max(abs(a - b) for a, b in zip(o.scores, theirs, strict=True))
            pick_kg = max(range(len(o.scores)), key=lambda j: (o.scores[j], -j))
            pick_ref = min(range(len(ref[i])), key=lambda j: (ref[i][j], j))
            same += pick_kg == pick_ref
            over += d > args.tol
            if d > max_d:
                max_d, worst = d, i
            per_row.append({"csv": csv.name, "row": i, "max_abs_delta": d,
                            "pick_kgprobe": pick_kg, "pick_reference": pick_ref})
        summary[csv.name] = {"rows": len(rows), "max_abs_delta": max_d, "worst_row": worst,
                             "rows_over_tol": over, "same_pick": same,
                             "seconds_reference": round(t_ref, 1),
                             "seconds_kgprobe": round(t_kg, 1)}
        ok = ok and over == 0 and same == len(rows)
        print(f"{csv.name}: {len(rows)} rows, max |Δ| {max_d:.2e} nats/token (row {worst}), "
              f"{over} rows over {args.tol:g}, same pick {same}/{len(rows)} "
              f"(reference {t_ref:.0f} s, kgprobe {t_kg:.0f} s)", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rows": per_row}, indent=1))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
