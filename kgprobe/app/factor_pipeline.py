"""FACTOR benchmarks generated from the graph, following the paper's pipeline (Muhlgay et al.,
§3.2): (1) prefix and factual completion, (2) contradictions of the five error types,
(3) the NLI and fluency filters, (4) diversity selection; then FACTOR accuracy of a model on
the items (``kgprobe factor --from-graph``).

1. c⁺ is a sampled fact verbalized with its relation's first object-last template; the prefix
   t is the subject's other facts valid at the reference date (other relations only, so the
   prefix never names another object of the asked relation), verbalized the same way, at most
   ``prefix_facts`` of them, in PID order (one batched, subject-anchored read).
2. Candidates: the typed graph swaps (entity errors: c⁺ with the object replaced by a typed
   distractor of ``strategy``) and, with a generator, the paper's few-shot prompts of each
   error type that suits c⁺ (:mod:`kgprobe.app.factor_prompts`); a generator is a local
   causal model (greedy) or an OpenAI-compatible chat endpoint (temperature 0, cached).
3. NLI filter (with an NLI model): p(contradiction | [t_near; c⁺], [t_near; c]) > τ_NLI
   (0.6; 0.3 for coreference). Fluency filter (with a fluency model; the paper: GPT2-small):
   log p(c|t)/|c| > log p(c⁺|t)/|c⁺| − τ_LM (0.2), scored as FACTOR scores completions.
4. Diversity: one candidate of each error type first (types in a seeded order, candidates in
   generation order: graph swaps, then the generator's), then the rest in that order, up to n.
   An item with fewer than n survivors is skipped, so every item has n contradictions, as in
   the paper's datasets.

Without a generator this is the graph-only mode: entity swaps only, and without NLI and
fluency models no filter: its accuracy measures whether the model prefers the true object
over typed distractors in context, and is not comparable with Wiki-, News- or Expert-FACTOR.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from kgprobe.app.factor import FactorResult, RelationAccuracy, score_items
from kgprobe.app.factor_prompts import (
    ERROR_TYPES,
    generation_prompt,
    near_context,
    parse_contradictions,
    relevant_error_types,
)
from kgprobe.errors import ConfigError, InputError
from kgprobe.probing.measures.common import Runner
from kgprobe.probing.measures.factor import (
    FactorItem,
    accuracy_interval,
    factor_scores,
    write_factor_csv,
)
from kgprobe.probing.requests import GenerateRequest, GenerateResult
from kgprobe.probing.strategies import strategy_class
from kgprobe.probing.verbalize import fill

#: §3.2.3 thresholds (Appendix A.2).
TAU_NLI = 0.6
TAU_NLI_COREFERENCE = 0.3
TAU_LM = 0.2
GRAPH_ONLY = "graph-only mode: entity swaps only, no NLI/fluency filter"


class Generator(Protocol):
    """Writes text after each prompt (a local causal model or a chat endpoint)."""

    name: str

    def generate(self, prompts: Sequence[str]) -> list[str]: ...


@dataclass
class LocalGenerator:
    """A local causal model through the engine, stopped at the next example ("##"). Sampled
    (``temperature``, seeded per prompt: ``seed`` + its index), as the paper samples its
    generator: greedy decoding of a small model tends to repeat one edit."""

    runner: Runner
    name: str
    max_new_tokens: int = 96
    temperature: float = 0.7
    seed: int = 0

    def generate(self, prompts: Sequence[str]) -> list[str]:
        res = self.runner.run([GenerateRequest(p, max_new_tokens=self.max_new_tokens,
                                               temperature=self.temperature, seed=self.seed + i,
                                               stop=("##",))
                               for i, p in enumerate(prompts)])
        return [r.text if isinstance(r, GenerateResult) else "" for r in res]


@dataclass
class EndpointGenerator:
    """An OpenAI-compatible chat endpoint (as the judge's): temperature 0, answers cached. The
    chat model gets the prompt without its trailing "1. Change:" cue reinstated: the parser
    reads "Contradiction:" lines either way."""

    complete: Callable[[str, int], str]
    name: str
    max_tokens: int = 256

    def generate(self, prompts: Sequence[str]) -> list[str]:
        return [self.complete(p, self.max_tokens) for p in prompts]


@dataclass(frozen=True)
class Candidate:
    """One non-factual completion and what the pipeline found about it."""

    text: str
    error_type: str
    source: str  # "graph:<strategy>" or "generator:<name>"
    nli: float | None = None  # p(contradiction); None: no NLI model
    fluency: float | None = None  # mean log p(c|t) per token minus c⁺'s; None: no model
    nli_passed: bool | None = None  # None: the filter did not run
    fluency_passed: bool | None = None

    @property
    def passed(self) -> bool:
        """Not refused by any filter that ran."""
        return self.nli_passed is not False and self.fluency_passed is not False


@dataclass
class PipelineSettings:
    """What to build: sample, prefixes, candidates, filters, selection."""

    n: int = 3
    strategy: str = "random"
    seed: int = 0
    prefix_facts: int = 4
    per_type: int = 3
    graph_swaps: int | None = None  # typed distractors asked for; None: n + 2 (room to filter)
    generator_tokens: int = 96
    generator_temperature: float = 0.7
    error_types: tuple[str, ...] = ERROR_TYPES
    tau_nli: float = TAU_NLI
    tau_nli_coreference: float = TAU_NLI_COREFERENCE
    tau_lm: float = TAU_LM

    def __post_init__(self) -> None:
        bad = [t for t in self.error_types if t not in ERROR_TYPES]
        if bad or not self.error_types:
            raise ConfigError(f"error types are {', '.join(ERROR_TYPES)}; got {', '.join(bad) or 'none'}")
        if (self.n < 1 or self.prefix_facts < 0 or self.per_type < 1 or self.generator_tokens < 1
                or self.generator_temperature < 0 or (self.graph_swaps is not None
                                                      and self.graph_swaps < 1)):
            raise ConfigError("need n >= 1, prefix facts >= 0, per type >= 1, graph swaps >= 1, "
                              "generator tokens >= 1, generator temperature >= 0")


@dataclass
class Draft:
    """An item under construction: prefix, c⁺, candidates."""

    key: str
    pid: str
    prefix: str
    completion: str
    prefix_facts: int
    candidates: list[Candidate] = field(default_factory=list)


@dataclass(frozen=True)
class BuiltItem:
    item: FactorItem
    pid: str
    prefix_facts: int
    contradictions: tuple[Candidate, ...]
    candidates: tuple[Candidate, ...]


def drafts_from_graph(
    graph: Any,
    facts: Sequence[Mapping[str, Any]],
    settings: PipelineSettings,
    ref: int,
    **distractor_kw: Any,
) -> tuple[list[Draft], dict[str, str]]:
    """Steps 1 and the graph half of 2 for ``fact_details`` rows (key, pid, s, s_label, o,
    o_label): prefix from the subject's other facts, c⁺, typed entity swaps."""
    from kgprobe.graph.factor_prefix import subject_facts
    from kgprobe.probing.distractors import default_template, find_distractors

    templates: dict[str, str] = {}

    def template(pid: str) -> str:
        if pid not in templates:
            templates[pid] = default_template(graph, pid)
        return templates[pid]

    others = subject_facts(graph, [f["s"] for f in facts], ref)
    drafts: list[Draft] = []
    skipped: dict[str, str] = {}
    for f in facts:
        key, pid, s_label = f["key"], f["pid"], f["s_label"]
        rows = [r for r in others.get(f["s"], []) if r["pid"] != pid][: settings.prefix_facts]
        prefix = " ".join(fill(template(r["pid"]), s_label, r["o_label"]) for r in rows)
        true = fill(template(pid), s_label, f["o_label"])
        d = Draft(key, pid, prefix + " " if prefix else "", true, len(rows))
        want = settings.graph_swaps if settings.graph_swaps is not None else settings.n + 2
        dl = find_distractors(graph, f["s"], pid, f["o"], strategy=settings.strategy, n=want,
                              seed=settings.seed, at=ref, **distractor_kw)
        for dist in dl.distractors:
            if dist.label:
                text = fill(template(pid), s_label, dist.label)
                if text != true:
                    d.candidates.append(Candidate(text, "entity", f"graph:{settings.strategy}"))
        if not d.candidates and dl.reason:
            skipped[key] = dl.reason
        drafts.append(d)
    return drafts, skipped


def generate_candidates(drafts: Sequence[Draft], generator: Generator, settings: PipelineSettings) -> None:
    """Step 2 with a model: one prompt per (item, relevant error type), all sent together;
    each generation's contradictions become candidates of that type."""
    jobs: list[tuple[Draft, str]] = []
    prompts: list[str] = []
    for d in drafts:
        for t in relevant_error_types(d.completion, settings.error_types):
            jobs.append((d, t))
            prompts.append(generation_prompt(t, d.prefix, d.completion))
    if not prompts:
        return
    outs = generator.generate(prompts)
    for (d, t), text in zip(jobs, outs, strict=True):
        taken = {c.text for c in d.candidates}
        for c in parse_contradictions(text, d.completion, settings.per_type):
            if c not in taken:
                d.candidates.append(Candidate(c, t, f"generator:{generator.name}"))


def nli_filter(drafts: Sequence[Draft], nli: Any, settings: PipelineSettings) -> None:
    """Step 3a: premise [t_near; c⁺], hypothesis [t_near; c]; keep p(contradiction) > τ."""
    pairs: list[tuple[str, str]] = []
    for d in drafts:
        near = near_context(d.prefix)
        lead = near + " " if near else ""
        pairs += [(lead + d.completion, lead + c.text) for c in d.candidates]
    probs = iter(nli.contradiction_probs(pairs) if pairs else [])
    for d in drafts:
        out = []
        for c in d.candidates:
            p = next(probs)
            tau = settings.tau_nli_coreference if c.error_type == "coreference" else settings.tau_nli
            out.append(replace(c, nli=p, nli_passed=p > tau))
        d.candidates[:] = out


def fluency_filter(drafts: Sequence[Draft], runner: Runner, settings: PipelineSettings) -> list[float | None]:
    """Step 3b: mean log-prob per token of each candidate and of c⁺ after the prefix, as
    FACTOR scores them; keep a candidate within τ_LM of c⁺. Returns c⁺'s mean log-prob."""
    with_c = [d for d in drafts if d.candidates]
    items = [FactorItem(d.prefix, (d.completion, *[c.text for c in d.candidates]), d.key)
             for d in with_c]
    scored = dict(zip([d.key for d in with_c], factor_scores(runner, items), strict=True))
    base: list[float | None] = []
    for d in drafts:
        o = scored.get(d.key)
        if o is None:
            base.append(None)
            continue
        base.append(o.scores[0])
        d.candidates[:] = [replace(c, fluency=s - o.scores[0],
                                   fluency_passed=s > o.scores[0] - settings.tau_lm)
                           for c, s in zip(d.candidates, o.scores[1:], strict=True)]
    return base


def select_diverse(candidates: Sequence[Candidate], n: int, rng: random.Random) -> list[Candidate]:
    """Step 4 (§3.2.4): a single candidate of each error type first (types in a seeded order,
    the first candidate of each), then the remaining candidates in order, up to n."""
    ok = [c for c in candidates if c.passed]
    types = sorted({c.error_type for c in ok}, key=ERROR_TYPES.index)
    rng.shuffle(types)
    first = [next(c for c in ok if c.error_type == t) for t in types]
    chosen = first[:n]
    for c in ok:
        if len(chosen) >= n:
            break
        if c not in chosen:
            chosen.append(c)
    return chosen


def finish(drafts: Sequence[Draft], settings: PipelineSettings) -> tuple[list[BuiltItem], dict[str, str]]:
    """Step 4 for every draft; drafts with fewer than n survivors are skipped, with why."""
    rng = random.Random(settings.seed)
    built: list[BuiltItem] = []
    skipped: dict[str, str] = {}
    for d in drafts:
        chosen = select_diverse(d.candidates, settings.n, rng)
        if len(chosen) < settings.n:
            passed = sum(c.passed for c in d.candidates)
            skipped[d.key] = (f"{passed} of {len(d.candidates)} candidates passed the filters; "
                              f"{settings.n} needed")
            continue
        item = FactorItem(d.prefix, (d.completion, *[c.text for c in chosen]), d.key, d.key)
        built.append(BuiltItem(item, d.pid, d.prefix_facts, tuple(chosen), tuple(d.candidates)))
    return built, skipped


def extra_columns(built: Sequence[BuiltItem], completion_fluency: Sequence[float | None]) -> list[dict[str, object]]:
    """The CSV's columns beyond the official ones: per contradiction its error type, where it
    came from and its filter scores; per item the relation, prefix size and c⁺'s fluency."""
    rows = []
    for b, base in zip(built, completion_fluency, strict=True):
        row: dict[str, object] = {"relation": b.pid, "prefix_facts": b.prefix_facts,
                               "completion_mean_logprob": base, "candidates": len(b.candidates)}
        for i, c in enumerate(b.contradictions):
            row[f"error_type_{i}"] = c.error_type
            row[f"source_{i}"] = c.source
            row[f"nli_contradiction_{i}"] = c.nli
            row[f"fluency_delta_{i}"] = c.fluency
        rows.append(row)
    return rows


def type_counts(drafts: Sequence[Draft], built: Sequence[BuiltItem]) -> dict[str, dict[str, int]]:
    """Per error type: candidates made, passing the NLI filter, the fluency filter, both
    (a filter that did not run passes everything), and selected."""
    out = {t: {"candidates": 0, "nli_passed": 0, "fluency_passed": 0, "passed": 0, "selected": 0}
           for t in ERROR_TYPES}
    for d in drafts:
        for c in d.candidates:
            row = out[c.error_type]
            row["candidates"] += 1
            row["nli_passed"] += c.nli_passed is not False
            row["fluency_passed"] += c.fluency_passed is not False
            row["passed"] += c.passed
    for b in built:
        for c in b.contradictions:
            out[c.error_type]["selected"] += 1
    return {t: v for t, v in out.items() if v["candidates"]}


def steps_line(generator: str | None, nli: str | None, fluency: str | None) -> str:
    """What ran, in words (the CLI prints it)."""
    if generator is None and nli is None and fluency is None:
        return GRAPH_ONLY
    return ("steps: prefixes from the subject's facts; entity swaps from the graph; generator "
            f"{generator or 'none (entity swaps only)'}; NLI filter {nli or 'not run'}; fluency "
            f"filter {fluency or 'not run'}; diversity selection")


def run_factor_pipeline(
    model: str | None,
    *,
    relations: Sequence[str] = (),
    sample: int | None = 60,
    settings: PipelineSettings | None = None,
    at: str | None = None,
    generator: str | None = None,
    nli_model: str | None = None,
    fluency_model: str | None = None,
    out_csv: str | Path | None = None,
    batch_size: int = 16,
    dtype: str = "float32",
    threads: int = 1,
    progress: bool = True,
    max_length: int | None = None,
    graph: Any = None,
) -> FactorResult:
    """Build FACTOR items from a stratified, seeded sample of the graph's facts (drawn as
    ``kgprobe probe`` draws them) through the steps whose models are given, write them as a
    FACTOR CSV when asked, and score ``model`` on them (accuracy overall and per relation).

    ``generator``: a local causal model (registry name, directory, GGUF, hub id) or the base
    URL of an OpenAI-compatible endpoint (``http(s)://…``; model name from
    ``KGPROBE_GENERATOR_MODEL``, key from ``KGPROBE_GENERATOR_API_KEY``)."""
    from kgprobe.graph import distractors as gd
    from kgprobe.graph import probe_runs as pr
    from kgprobe.graph.client import connect
    from kgprobe.probing.run import choose_relations, probe_relations

    st = settings or PipelineSettings()
    if max_length is not None and max_length < 2:
        raise ConfigError("--max-length must be at least 2 tokens")
    if strategy_class(st.strategy).needs_model:
        raise ConfigError(f"factor --from-graph takes distractors that need no model (random, sem, "
                          f"temp+sem), not {st.strategy}")
    g = graph if graph is not None else connect()
    try:
        chosen = choose_relations(probe_relations(g), relations)
        ref = gd.date_sort_key(at)
        # the facts `kgprobe probe` would draw: the sampling index, never every key
        subjects = pr.sample_facts(g, chosen, total=sample, seed=st.seed, ref=ref)
        facts = pr.fact_details(g, list(subjects), subjects, [])
        kw: dict[str, object] = {}  # the semantic index, for a strategy that needs one
        if strategy_class(st.strategy).needs_index:
            from kgprobe.probing.distractors import default_index_dir
            from kgprobe.probing.semantic import ensure_index

            kw["index"] = ensure_index(g, default_index_dir())
        drafts, skipped = drafts_from_graph(g, facts, st, ref, **kw)
    finally:
        if graph is None:
            g.close()
    gen_name = _run_generator(drafts, generator, st, dtype=dtype, threads=threads, progress=progress)
    nli_name = None
    if nli_model is not None:
        from kgprobe.probing.models import LOAD_DEFAULTS, resolve_device
        from kgprobe.probing.nli import NliModel

        nli = NliModel.load(nli_model, threads=threads, device=resolve_device(LOAD_DEFAULTS.device))
        nli_filter(drafts, nli, st)
        nli_name = f"{nli_model} ({nli.fingerprint})"
    base: list[float | None] = [None] * len(drafts)
    if fluency_model is not None:
        from kgprobe.probing.engine import Engine
        from kgprobe.probing.models import load_model

        base = fluency_filter(drafts, Engine(load_model(fluency_model, dtype=dtype, threads=threads),
                                             batch_size=batch_size, progress=progress), st)
    built, dropped = finish(drafts, st)
    skipped.update({k: v for k, v in dropped.items() if k not in skipped})
    if not built:
        raise InputError("no FACTOR item could be built from the sampled facts "
                         f"({len(skipped)} skipped: {next(iter(skipped.values()), '')})")
    base_by_key = {d.key: b for d, b in zip(drafts, base, strict=True)}
    written = None
    if out_csv is not None:
        written = str(write_factor_csv(out_csv, [b.item for b in built],
                                       extra_columns(built, [base_by_key[b.item.item_id] for b in built])))
    scored = score_items([b.item for b in built], model, batch_size=batch_size, dtype=dtype,
                          threads=threads, progress=progress, max_length=max_length)
    per_rel: dict[str, list[bool]] = {}
    for b, o in zip(built, scored["per_item"], strict=True):
        per_rel.setdefault(b.pid, []).append(bool(o["correct"]))
        o["error_types"] = [c.error_type for c in b.contradictions]
        o["prefix_facts"] = b.prefix_facts
    graph_only = gen_name is None and nli_name is None and fluency_model is None
    return {
        "source": "graph", "mode": "graph-only" if graph_only else "pipeline",
        "steps": {"prefix": True, "graph_swaps": st.strategy, "generator": gen_name,
                  "nli": nli_name, "fluency": fluency_model, "diversity": True},
        "steps_line": steps_line(gen_name, nli_name, fluency_model),
        "comparable_with_published_factor": False,
        "strategy": st.strategy, "n": st.n, "seed": st.seed,
        "thresholds": {"nli": st.tau_nli, "nli_coreference": st.tau_nli_coreference, "lm": st.tau_lm},
        "error_types": type_counts(drafts, built),
        "relations": {p: _relation_accuracy(v) for p, v in sorted(per_rel.items(), key=lambda kv: int(kv[0][1:]))},
        "skipped": len(skipped), "skipped_reasons": skipped, "csv": written,
        "candidates": {d.key: [{"text": c.text, "error_type": c.error_type, "source": c.source,
                                "nli": c.nli, "fluency": c.fluency, "passed": c.passed}
                               for c in d.candidates] for d in drafts},
        **scored,
    }


def _relation_accuracy(correct: Sequence[bool]) -> RelationAccuracy:
    ci_low, ci_high = accuracy_interval(correct)
    return {"items": len(correct), "accuracy": sum(correct) / len(correct), "ci_low": ci_low, "ci_high": ci_high}


def _run_generator(drafts: Sequence[Draft], generator: str | None, st: PipelineSettings, *,
                   dtype: str, threads: int, progress: bool) -> str | None:
    """Step 2 with the named generator; returns its name for the record (None: not run)."""
    if generator is None:
        return None
    if generator.startswith(("http://", "https://")):
        import os

        from kgprobe.probing.judge import ChatJudge, VerdictCache, default_verdict_cache

        name = os.environ.get("KGPROBE_GENERATOR_MODEL", "").strip() or "default"
        chat = ChatJudge(generator.rstrip("/"), name, os.environ.get("KGPROBE_GENERATOR_API_KEY") or None,
                         role="FACTOR generator", cache=VerdictCache(default_verdict_cache()))
        gen: Generator = EndpointGenerator(chat.complete, f"{name}@{generator}")
    else:
        from kgprobe.probing.engine import Engine
        from kgprobe.probing.models import load_model

        lm = load_model(generator, dtype=dtype, threads=threads)
        if lm.kind != "causal":
            raise ConfigError(f"generator {generator} is not a causal language model")
        gen = LocalGenerator(Engine(lm, progress=progress), generator, st.generator_tokens,
                             st.generator_temperature, st.seed)
    generate_candidates(drafts, gen, st)
    return gen.name



def factor(file: str | Path | None = None, *, model: str | None = None, from_graph: bool = False,
           relation: Sequence[str] = (), sample: int | None = 60, strategy: str = "random",
           n: int = 3, seed: int = 0, at: str | None = None, generator: str | None = None,
           nli: str | None = None, fluency_model: str | None = None, tau_nli: float = TAU_NLI,
           tau_nli_coreference: float = TAU_NLI_COREFERENCE, tau_lm: float = TAU_LM,
           prefix_facts: int = 4, out: str | Path | None = None, max_length: int | None = None,
           limit: int | None = None, prefix_column: str = "turncated_prefixes",
           dtype: str = "float32", threads: int = 1, progress: bool = True) -> FactorResult:
    """``kgprobe factor``: FACTOR accuracy of ``model`` on the rows of a FACTOR CSV ``file``
    (:func:`kgprobe.app.factor.run_factor_file`) or, with ``from_graph``, on items built from
    the graph (:func:`run_factor_pipeline`). ``sample`` 0 is every fact."""
    from kgprobe.app.factor import run_factor_file
    from kgprobe.app.options import check_date, check_number, check_pids, check_seed, check_threads

    check_pids(relation)
    check_number("--prefix-facts", prefix_facts, 0)
    check_number("--tau-nli", tau_nli, 0, 1)
    check_number("--tau-nli-coreference", tau_nli_coreference, 0, 1)
    check_number("--tau-lm", tau_lm, 0)
    check_date(at)
    check_number("--sample", sample, 0)
    check_number("-n", n, 1)
    check_seed(seed)
    check_number("--max-length", max_length, 2)
    check_number("--limit", limit, 1)
    check_threads(threads)
    if from_graph == (file is not None):
        raise ConfigError("give a FACTOR CSV file or --from-graph (one of them)")
    if from_graph:
        return run_factor_pipeline(
            model, relations=relation, sample=sample or None, at=at,
            settings=PipelineSettings(n=n, strategy=strategy, seed=seed, prefix_facts=prefix_facts,
                                      tau_nli=tau_nli, tau_nli_coreference=tau_nli_coreference,
                                      tau_lm=tau_lm),
            generator=generator, nli_model=nli, fluency_model=fluency_model, out_csv=out,
            dtype=dtype, threads=threads, progress=progress, max_length=max_length)
    assert file is not None
    return run_factor_file(str(file), model, limit=limit, prefix_column=prefix_column, dtype=dtype,
                           threads=threads, progress=progress, max_length=max_length)
