"""Reference check: kgprobe's BEAR multiple-choice accuracy next to lm-pub-quiz's, same model,
same templates, same facts, with a per-relation table.

BEAR's protocol (Wiland et al. 2024, lm-pub-quiz): for each fact and template, fill the
template with every object of the relation's answer space, score each whole sentence by its
summed token log-likelihood, and count a hit when the true object's sentence scores highest
(ties go to the first answer, as lm-pub-quiz's ``index(max(...))``). The sentence is
capitalized as lm-pub-quiz does. kgprobe scores each sentence with a ``SpanScoreRequest``
covering the whole text through its engine; lm-pub-quiz gets the very same transformers
model object and tokenizer (converted once by kgprobe's loader, since it cannot read the
GGUF file) with ``ensure_bos_token_added`` and the tokenizer's BOS set to the conditioning
token kgprobe's registry uses for the model (SmolLM2: ``<|endoftext|>``), so both condition
the first token the same way.

Usage (CPU; the full BEAR-lite run is 628k sentences per tool, too slow on 2 shared cores, so
by default the first N facts of every relation and template 0 are used):

    .venv/bin/python benchmarks/bench_bear.py /work/shared/data/bear --per-relation 10
    .venv/bin/python benchmarks/bench_bear.py /work/shared/data/bear --per-relation 0 --templates 0,1,2
    # with lm-evaluation-harness's whole-text path too (its own venv, see docs/benchmarks.md):
    python benchmarks/bench_bear.py /work/shared/data/bear --per-relation 5 --systems kgprobe,lmpq,harness
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def capitalize(text: str) -> str:
    return text[:1].upper() + text[1:]


def load_subset(bear: Path, per_relation: int, relations: list[str] | None) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    meta = json.loads((bear / "BEAR" / "metadata_relations.json").read_text(encoding="utf-8"))
    facts: dict[str, list[dict[str, Any]]] = {}
    for pid in sorted(meta, key=lambda p: int(p[1:])):
        if relations and pid not in relations:
            continue
        lines = (bear / "BEAR" / f"{pid}.jsonl").read_text(encoding="utf-8").splitlines()
        rows = [json.loads(x) for x in lines if x.strip()]
        facts[pid] = rows[:per_relation] if per_relation > 0 else rows
    return {p: meta[p] for p in facts}, facts


def write_subset(meta: dict[str, Any], facts: dict[str, list[dict[str, Any]]], out: Path) -> Path:
    d = out / "BEAR"
    d.mkdir(parents=True)
    (d / "metadata_relations.json").write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
    for pid, rows in facts.items():
        (d / f"{pid}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return d


def bear_sentences(meta: dict[str, Any], facts: dict[str, list[dict[str, Any]]],
                   templates: list[int]) -> list[tuple[str, int, list[str]]]:
    """(relation, gold index, the filled sentences) per fact and template, as BEAR fills them."""
    out = []
    for pid, rows in facts.items():
        answers = meta[pid]["answer_space_labels"]
        for row in rows:
            for t in templates:
                tpl = meta[pid]["templates"][t]
                out.append((pid, row["answer_idx"],
                            [capitalize(tpl.replace("[X]", row["sub_label"]).replace("[Y]", a))
                             for a in answers]))
    return out


def kgprobe_counts(lm: Any, meta: dict[str, Any], facts: dict[str, list[dict[str, Any]]],
                   templates: list[int], batch_size: int,
                   stats_out: dict[str, Any] | None = None, batch_tokens: int | None = None,
                   attention: str = "auto") -> tuple[dict[str, tuple[int, int]], list[float]]:
    """Hits per relation, and every sentence's log-probability in ``bear_sentences`` order."""
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.requests import SpanScoreRequest, SpanScoreResult

    engine = Engine(lm, batch_size=batch_size, progress=True, batch_tokens=batch_tokens or "auto",
                    attention=attention)
    plans = bear_sentences(meta, facts, templates)
    reqs = [SpanScoreRequest(x, 0, len(x)) for _, _, xs in plans for x in xs]
    results = engine.run(reqs)
    if stats_out is not None:
        st = engine.stats
        stats_out.update(forward_calls=st.forward_calls, tokens_fed=st.tokens_fed,
                         sentence_tokens=sum(len(e.ids) for e in lm.tokenization.causal_spans(
                             [(r.text, 0, len(r.text)) for r in reqs])),
                         forward_cpu_seconds=st.forward_cpu_seconds,
                         head_cpu_seconds=st.head_cpu_seconds)
    scores = []
    for res in results:
        assert isinstance(res, SpanScoreResult)
        scores.append(res.logprob)
    return hits(plans, scores, facts), scores


def hits(plans: list[tuple[str, int, list[str]]], scores: list[float],
         facts: dict[str, list[dict[str, Any]]]) -> dict[str, tuple[int, int]]:
    """(hits, facts) per relation: a hit when the gold sentence scores highest (ties go to
    the first answer, as lm-pub-quiz's ``index(max(...))``)."""
    counts: dict[str, list[int]] = {p: [0, 0] for p in facts}
    at = 0
    for pid, gold, xs in plans:
        sc = scores[at : at + len(xs)]
        at += len(xs)
        counts[pid][0] += int(sc.index(max(sc)) == gold)
        counts[pid][1] += 1
    return {p: (c[0], c[1]) for p, c in counts.items()}


def harness_scores(lm: Any, sentences: list[str], batch_size: int, bos_token: str | None) -> list[float]:
    """lm-evaluation-harness's whole-text path (``HFLM.loglikelihood_rolling``) on the same
    model object: every token of the sentence given the prefix token (the conditioning
    token kgprobe uses for the model), one padded sequence per sentence."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    kw: dict[str, Any] = {}
    if bos_token is not None:
        kw["prefix_token_id"] = lm.tokenizer.convert_tokens_to_ids(bos_token)
    h = HFLM(pretrained=lm.model, tokenizer=lm.tokenizer, batch_size=batch_size,
             max_length=lm.max_length, **kw)
    inst = [Instance(request_type="loglikelihood_rolling", doc={}, arguments=(x,), idx=i)
            for i, x in enumerate(sentences)]
    return [float(v) for v in h.loglikelihood_rolling(inst, disable_tqdm=True)]


def lmpq_counts(lm: Any, subset_dir: Path, templates: list[int], batch_size: int,
                bos_token: str | None) -> dict[str, tuple[int, int]]:
    from lm_pub_quiz import Dataset, Evaluator

    tok = copy.deepcopy(lm.tokenizer)
    if bos_token is not None:
        tok.bos_token = bos_token
    evaluator = Evaluator.from_model(lm.model, model_type="CLM", tokenizer=tok, device=lm.device)
    dataset = Dataset.from_path(str(subset_dir))
    out = {}
    for relation in dataset:
        res = evaluator.evaluate_relation(relation, template_index=templates, batch_size=batch_size,
                                          reduction="sum", metric="accuracy",
                                          create_instance_table=False)
        acc = res.metric_values["accuracy"]
        support = res.metric_values.get("support")
        n = int(support) if support is not None else len(relation.instance_table) * len(templates)
        out[relation.relation_code] = (round(acc * n), n)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bear", type=Path, help="BEAR folder (holding BEAR/metadata_relations.json)")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--per-relation", type=int, default=10, help="first N facts per relation; 0 = all")
    ap.add_argument("--templates", default="0", help="comma-separated template indices")
    ap.add_argument("--relations", default="", help="comma-separated PIDs (default: all)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--batch-tokens", type=int, default=None, help="kgprobe's row budget")
    ap.add_argument("--attention", default="auto", choices=["auto", "flex", "segments", "dense"])
    ap.add_argument("--systems", default="kgprobe,lmpq",
                    help="kgprobe plus any of lmpq (lm-pub-quiz), harness (lm-eval rolling)")
    args = ap.parse_args()
    systems = {x.strip() for x in args.systems.split(",") if x.strip()}

    from kgprobe.probing.models import REGISTRY, load_model

    templates = [int(x) for x in args.templates.split(",")]
    rels = [x for x in args.relations.split(",") if x] or None
    meta, facts = load_subset(args.bear, args.per_relation, rels)
    lm = load_model(args.model, threads=args.threads)
    entry = REGISTRY.get(args.model)
    bos = entry.prefix_token if entry is not None and entry.prefix_token else None
    n_sent = sum(len(rows) * len(meta[p]["answer_space_labels"]) * len(templates)
                 for p, rows in facts.items())
    print(f"{sum(len(r) for r in facts.values())} facts, {len(facts)} relations, templates "
          f"{templates}, {n_sent} sentences per tool; model {args.model}", flush=True)

    engine_stats: dict[str, Any] = {}
    t0, c0 = time.perf_counter(), time.process_time()
    ours, kv = kgprobe_counts(lm, meta, facts, templates, args.batch_size, engine_stats,
                              args.batch_tokens, args.attention)
    t_ours, c_ours = time.perf_counter() - t0, time.process_time() - c0
    print(f"kgprobe engine: {engine_stats}", flush=True)
    t_theirs = c_theirs = 0.0
    theirs: dict[str, tuple[int, int]] = {}
    if "lmpq" in systems:
        tmp = Path(tempfile.mkdtemp(prefix="bear-subset-"))
        try:
            subset = write_subset(meta, facts, tmp)
            t0, c0 = time.perf_counter(), time.process_time()
            theirs = lmpq_counts(lm, subset, templates, args.batch_size, bos)
            t_theirs, c_theirs = time.perf_counter() - t0, time.process_time() - c0
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    harness: dict[str, Any] = {}
    if "harness" in systems:
        plans = bear_sentences(meta, facts, templates)
        texts = [x for _, _, xs in plans for x in xs]
        t0, c0 = time.perf_counter(), time.process_time()
        hv = harness_scores(lm, texts, args.batch_size, bos)
        t_h, c_h = time.perf_counter() - t0, time.process_time() - c0
        h_hits = hits(plans, hv, facts)
        acc_h = sum(a for a, _ in h_hits.values()) / len(plans)
        delta = max(abs(a - b) for a, b in zip(kv, hv, strict=True))
        harness = {"wall_seconds": t_h, "cpu_seconds": c_h, "accuracy": acc_h,
                   "max_abs_delta_logprob_vs_kgprobe": delta, "sentences": len(texts)}
        print(f"harness loglikelihood_rolling: {t_h:.0f} s wall {c_h:.0f} cpu-s, accuracy "
              f"{acc_h:.4f}; kgprobe {c_h / c_ours:.1f}x faster in CPU time; "
              f"max |Δ log p| per sentence {delta:.2e}", flush=True)
    if "lmpq" not in systems:
        if args.json:
            args.json.write_text(json.dumps({
                "model": args.model, "templates": templates, "per_relation": args.per_relation,
                "cpu_seconds": {"kgprobe": c_ours}, "seconds": {"kgprobe": t_ours},
                "engine": engine_stats, "harness": harness}, indent=1), encoding="utf-8")
        return
    print("\n| relation | n | kgprobe acc | lm-pub-quiz acc | diff (pp) |\n|---|---|---|---|---|")
    rows = []
    for pid in facts:
        a, n = ours[pid]
        b, m = theirs.get(pid, (0, 0))
        diff = 100 * (a / n - (b / m if m else 0))
        rows.append({"relation": pid, "n": n, "kgprobe": a / n, "lm_pub_quiz": b / m if m else None,
                     "diff_pp": diff})
        print(f"| {pid} | {n} | {a / n:.4f} | {(b / m if m else float('nan')):.4f} | {diff:+.2f} |")
    tot_a = sum(c[0] for c in ours.values())
    tot_n = sum(c[1] for c in ours.values())
    tot_b = sum(c[0] for c in theirs.values())
    tot_m = sum(c[1] for c in theirs.values())
    overall = 100 * (tot_a / tot_n - tot_b / tot_m)
    print(f"| **all (micro)** | {tot_n} | {tot_a / tot_n:.4f} | {tot_b / tot_m:.4f} | {overall:+.2f} |")
    print(f"\nkgprobe {t_ours:.0f} s wall {c_ours:.0f} cpu-s, lm-pub-quiz {t_theirs:.0f} s wall "
          f"{c_theirs:.0f} cpu-s (kgprobe {c_theirs / c_ours:.1f}x faster in CPU time); "
          f"{'EQUAL within 0.5 pp' if abs(overall) <= 0.5 else 'DIFFERENT by more than 0.5 pp'}")
    if args.json:
        args.json.write_text(json.dumps({
            "model": args.model, "templates": templates, "per_relation": args.per_relation,
            "kgprobe_accuracy": tot_a / tot_n, "lm_pub_quiz_accuracy": tot_b / tot_m,
            "diff_pp": overall, "relations": rows, "seconds": {"kgprobe": t_ours, "lm_pub_quiz": t_theirs},
            "cpu_seconds": {"kgprobe": c_ours, "lm_pub_quiz": c_theirs}, "engine": engine_stats,
            "harness": harness,
        }, indent=1), encoding="utf-8")
    sys.exit(0 if abs(overall) <= 0.5 else 1)


if __name__ == "__main__":
    main()
