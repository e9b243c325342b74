"""Distractor retrieval strategies (distractors paper §3.3): random, sem, temp+sem, appropt —
the built-in entries of the strategy registry (:mod:`kgprobe.probing.strategies`).

Each returns up to ``n`` ranked distractors of a fact f = (s, r, o) with the reason each one
qualified, drawn from Ω(f) (see :mod:`kgprobe.graph.distractors`) — except the temporal ones of
temp+sem, which are by definition past objects of (s, r). When fewer than ``n`` are found the
result says why (no type, no alternative, object not indexed, …): an empty list is an answer,
not an error.

The Cypher lives in ``kgprobe.graph.distractors``, the vectors in ``kgprobe.probing.semantic``,
the model calls in the scoring engine (ApprOpt sends it one constrained beam search request).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kgprobe.errors import ConfigError
from kgprobe.graph import distractors as gd
from kgprobe.probing.strategies import (
    BUILTIN_STRATEGIES,
    DistractorStrategy,
    Search,
    strategy_class,
)

if TYPE_CHECKING:  # pragma: no cover
    from kgprobe.graph.client import Graph
    from kgprobe.probing.engine import Engine
    from kgprobe.probing.measures.common import EndMarker
    from kgprobe.probing.semantic import IndexSettings, Neighbour, SemanticIndex

#: Distractors per fact when none is asked for: the same for `probe` (kmin) and `distractors`.
DEFAULT_N = 5

REASON_TYPE = "shared type"
REASON_TEMPORAL = "temporal"
REASON_SIMILARITY = "similarity"
REASON_MODEL = "model probability"

#: Ω(f) up to this size is read whole and the semantic search is exact over it; a larger one
#: is checked batch by batch against the index's nearest neighbours (one round trip a batch).
OMEGA_READ_LIMIT = 50_000
#: Sem first checks this many nearest neighbours per wanted distractor against Ω(f).
SEM_FIRST_BATCH = 4
#: ApprOpt builds its token trie over at most this many candidate entities (QID order).
APPROPT_MAX_CANDIDATES = 5_000


@dataclass
class Distractor:
    """One distractor, its rank (1 = hardest according to the strategy) and why it qualified."""

    rank: int
    qid: str
    label: str | None
    reason: str
    score: float | None = None  # cosine similarity (sem) or log-probability (appropt)
    shared_types: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class DistractorList:
    subject: str
    relation: str
    object: str
    object_label: str | None
    strategy: str
    n: int
    seed: int
    reference_date: int
    distractors: list[Distractor] = field(default_factory=list)
    #: why the list is shorter than n (None when it is full)
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Prefetched:
    """What a probe batch already read for one fact in round trips shared by the whole batch
    (:func:`prefetch`): the strategies use it instead of asking again, with the same results.

    ``temporal``: the fact's :func:`~kgprobe.graph.distractors.temporal_candidates` at the
    run's reference date; ``omega``: candidates already checked against Ω(f), each mapped to
    its :class:`~kgprobe.graph.distractors.Candidate` when a member, else ``None``.
    """

    temporal: list[gd.Candidate] | None = None
    omega: dict[str, gd.Candidate | None] = field(default_factory=dict)
    #: the semantic search's plan A, done: ((n, skipped), hits, candidates seen in Ω(f))
    plan_a: tuple[tuple[int, frozenset[str]], list[Neighbour], dict[str, gd.Candidate]] | None = None
    #: plan B's read of Ω(f) (typed candidates, up to OMEGA_READ_LIMIT + 1), when plan A fell short
    typed: list[gd.Candidate] | None = None
    #: the run's entity terms, which answer the Ω(f) checks of entities already read
    terms: gd.EntityTerms | None = None
    #: the random strategy's seeded draw (n, seed, members), done for the batch at once
    random: tuple[int, int | str, list[gd.Candidate]] | None = None

    def omega_filter(self, graph: Graph, ctx: gd.FactContext, candidates: Sequence[str]) -> list[gd.Candidate]:
        """:func:`~kgprobe.graph.distractors.omega_filter`, asking the graph only about the
        candidates not checked yet (membership of one candidate does not depend on the others)."""
        asked = list(dict.fromkeys(candidates))
        unknown = [q for q in asked if q not in self.omega]
        if unknown:
            found = {c.qid: c for c in gd.omega_filter(graph, ctx, unknown, self.terms)}
            self.omega.update((q, found.get(q)) for q in unknown)
        return [c for q in asked if (c := self.omega[q]) is not None]


def prefetch(
    graph: Graph,
    contexts: Sequence[gd.FactContext],
    *,
    strategy: str | None,
    n: int,
    at: dt.date | str | int | None,
    index: SemanticIndex | None,
    temporal: bool = False,
    terms: gd.EntityTerms | None = None,
    seed: int = 0,
) -> list[Prefetched]:
    """What ``strategy`` will ask the graph about each fact of a batch, read in one round trip
    per need: the random strategy's draws (one round trip per round of draws, ``seed`` as the
    per-fact strategy takes it), the temporal candidates (temp+sem, or ``temporal`` when the caller wants the
    past objects too), then the Ω(f) membership of the nearest neighbours the semantic search
    checks first (sem, temp+sem), then, for the facts whose plan A falls short, Ω(f) for plan B.
    Whatever the search asks beyond these is read per fact. What to read is what the strategy's
    entry says it uses (``draws_random``, ``past_first``, ``searches_neighbours``), so a
    strategy of a plug-in gets the same batch reads; ``strategy`` empty or None: no distractors.
    ``terms``: the run's entity terms (Ω(f) checks of entities it holds need no round trip)."""
    uses = strategy_class(strategy) if strategy else DistractorStrategy
    out = [Prefetched(terms=terms) for _ in contexts]
    if uses.draws_random:
        draw = [(ctx, pf) for ctx, pf in zip(contexts, out, strict=True) if ctx.object_types]
        drawn = gd.random_same_type_many(graph, [c for c, _ in draw], n, [seed] * len(draw))
        for (_, pf), members in zip(draw, drawn, strict=True):
            pf.random = (n, seed, members)
    if temporal or uses.past_first:
        for pf, cands in zip(out, gd.temporal_candidates_many(graph, contexts, at), strict=True):
            pf.temporal = cands
    if not uses.searches_neighbours or index is None:
        return out
    asks: list[tuple[gd.FactContext, list[str]]] = []
    owners: list[Prefetched] = []
    wants: list[int] = []
    skips: list[set[str]] = []
    for ctx, pf in zip(contexts, out, strict=True):
        if not ctx.object_types or ctx.object not in index:
            continue
        skip: set[str] = set()
        want = n
        if uses.past_first:
            first = (pf.temporal or [])[:n]
            want, skip = n - len(first), {c.qid for c in first}
        if want <= 0:
            continue
        seen: list[str] = []

        def record(batch: list[str], seen: list[str] = seen) -> list[str]:
            seen.extend(batch)
            return batch  # accept all: the search stops after its first round, as plan A does

        index.neighbours(ctx.object, want, predicate=record, max_checked=SEM_FIRST_BATCH * want)
        asks.append((ctx, [q for q in seen if q not in skip]))
        owners.append(pf)
        wants.append(want)
        skips.append(skip)
    for (_, asked), pf, members in zip(asks, owners, gd.omega_filters(graph, asks, terms), strict=True):
        got = {c.qid: c for c in members}
        pf.omega.update((q, got.get(q)) for q in asked)
    short: list[tuple[gd.FactContext, Prefetched]] = []
    for (ctx, _), pf, want, skip in zip(asks, owners, wants, skips, strict=True):
        hits, info = _plan_a(graph, ctx, want, index, skip, pf)
        pf.plan_a = ((want, frozenset(skip)), hits, info)
        if len(hits) < want:
            short.append((ctx, pf))
    if short:
        typed = gd.typed_candidates_many(graph, [c for c, _ in short], OMEGA_READ_LIMIT + 1)
        for (_, pf), cands in zip(short, typed, strict=True):
            pf.typed = cands
    return out


def _plan_a(graph: Graph, ctx: gd.FactContext, n: int, index: SemanticIndex, skip: set[str],
            prefetched: Prefetched | None) -> tuple[list[Neighbour], dict[str, gd.Candidate]]:
    """Sem's plan A: o's nearest neighbours, checked against Ω(f) (usually enough: entities
    with o's relations and objects mostly share its type); the hits and the members seen."""
    info: dict[str, gd.Candidate] = {}
    check = _omega_check(graph, ctx, skip, prefetched, info)
    return index.neighbours(ctx.object, n, predicate=check, max_checked=SEM_FIRST_BATCH * n), info


def _omega_check(graph: Graph, ctx: gd.FactContext, skip: Collection[str],
                 prefetched: Prefetched | None,
                 info: dict[str, gd.Candidate]) -> Callable[[list[str]], list[str]]:
    """A neighbour predicate: which QIDs of a batch are in Ω(f) (and not skipped), through the
    batch's prefetch when there is one; the members found are recorded in ``info``."""

    def check(batch: list[str]) -> list[str]:
        asked = [q for q in batch if q not in skip]
        ok = (prefetched.omega_filter(graph, ctx, asked) if prefetched is not None
              else gd.omega_filter(graph, ctx, asked))
        info.update((c.qid, c) for c in ok)
        return [c.qid for c in ok]

    return check


# --- strategies ---------------------------------------------------------------------------------


def _short_reason(ctx: gd.FactContext, what: str) -> str:
    if not ctx.object_types:
        return f"object {ctx.object} has no type (no INSTANCE_OF or INFERRED_TYPE edge)"
    return (
        f"only these {what}: no other labelled entity shares a type ({', '.join(ctx.object_types)}) "
        f"with {ctx.object}, differs from its labels and is not an object of ({ctx.subject}, {ctx.pid})"
    )


def random_distractors(
    graph: Graph, ctx: gd.FactContext, n: int, seed: int, prefetched: Prefetched | None = None,
) -> tuple[list[Distractor], str | None]:
    """Random: a seeded sample of Ω(f) — the paper's lower bound on distractor quality."""
    if not ctx.object_types:
        return [], _short_reason(ctx, "random distractors")
    done = prefetched.random if prefetched is not None else None
    cands = done[2] if done is not None and done[:2] == (n, seed) else gd.random_same_type(graph, ctx, n, seed)
    out = [
        Distractor(i + 1, c.qid, c.label, REASON_TYPE, None, list(c.shared_types), {"seed": seed})
        for i, c in enumerate(cands)
    ]
    return out, None if len(out) >= n else _short_reason(ctx, f"{len(out)} random distractors")


def semantic_distractors(
    graph: Graph,
    ctx: gd.FactContext,
    n: int,
    index: SemanticIndex,
    *,
    skip: Sequence[str] = (),
    prefetched: Prefetched | None = None,
) -> tuple[list[Distractor], str | None]:
    """Sem: the members of Ω(f) whose vectors are closest (cosine) to o's."""
    if not ctx.object_types:
        return [], _short_reason(ctx, "semantic distractors")
    if ctx.object not in index:
        return (
            [],
            f"object {ctx.object} is not in the semantic index (rebuild it: the graph changed?)",
        )
    skip_set = set(skip)
    done = prefetched.plan_a if prefetched is not None else None
    if done is not None and done[0] == (n, frozenset(skip_set)):
        hits, info = list(done[1]), dict(done[2])
    else:  # Plan A: o's nearest neighbours checked against Ω(f), in one round trip
        hits, info = _plan_a(graph, ctx, n, index, skip_set, prefetched)

    check = _omega_check(graph, ctx, skip_set, prefetched, info)
    if len(hits) < n:
        # Plan B: read Ω(f) whole and search only inside it (exact on the flat index).
        # (read whole only when the sampling index says Ω(f) may be small enough; a batch's
        # prefetch has read it already, capped the same way)
        cands: list[gd.Candidate] | None
        if prefetched is not None and prefetched.typed is not None:
            cands = prefetched.typed
        else:
            bound = gd.omega_bound(graph, ctx)
            cands = (gd.typed_candidates(graph, ctx, limit=OMEGA_READ_LIMIT + 1)
                     if bound is None or bound <= OMEGA_READ_LIMIT else None)
        if cands is not None and len(cands) <= OMEGA_READ_LIMIT:
            info = {c.qid: c for c in cands if c.qid not in skip_set}
            hits = index.neighbours(ctx.object, n, allowed=list(info))
        else:
            hits = index.neighbours(ctx.object, n, predicate=check)
    out = [
        Distractor(
            i + 1,
            h.qid,
            info[h.qid].label,
            REASON_SIMILARITY,
            round(h.similarity, 6),
            list(info[h.qid].shared_types),
        )
        for i, h in enumerate(hits)
    ]
    if len(out) < n:
        missing = [q for q in info if q not in index]
        note = f"; {len(missing)} candidates are not in the index (stale?)" if missing else ""
        return out, _short_reason(ctx, f"{len(out)} semantic distractors") + note
    return out, None


def temporal_semantic_distractors(
    graph: Graph,
    ctx: gd.FactContext,
    n: int,
    index: SemanticIndex,
    at: dt.date | str | int | None = None,
    *,
    prefetched: Prefetched | None = None,
) -> tuple[list[Distractor], str | None]:
    """Temp+Sem: past objects of (s, r) (most recently valid first), then semantic ones."""
    if prefetched is not None and prefetched.temporal is not None:
        temporal = prefetched.temporal[:n]
    else:
        temporal = gd.temporal_candidates(graph, ctx, at)[:n]
    out = [
        Distractor(
            i + 1,
            c.qid,
            c.label,
            REASON_TEMPORAL,
            None,
            list(c.shared_types),
            {
                "last_valid_sort": c.detail.get("last_sort"),
                "statements": c.detail.get("statements", []),
            },
        )
        for i, c in enumerate(temporal)
    ]
    if len(out) >= n:
        return out, None
    sem, why = semantic_distractors(graph, ctx, n - len(out), index, skip=[d.qid for d in out],
                                    prefetched=prefetched)
    for d in sem:
        d.rank = len(out) + 1
        out.append(d)
    if why and temporal:
        why = f"{len(temporal)} temporal distractors, then: {why}"
    return out, why


def appropt_distractors(
    graph: Graph,
    ctx: gd.FactContext,
    n: int,
    engine: Engine,
    template: str,
    *,
    max_candidates: int = APPROPT_MAX_CANDIDATES,
    seed: int = 0,
    end: EndMarker | None = None,
) -> tuple[list[Distractor], str | None]:
    """ApprOpt: beam search of width n constrained to the labels of o and of Ω(f), each
    followed by the SAME end marker as the Eq. 1 scoring it serves (``end``; default the
    model's documented one), so the beam ranks the strings by the plausibility the measure
    compares.

    Candidates: every entity of Ω(f) (all typed candidates). When there are more than
    ``max_candidates`` (a trie of every city of the world does not help the beam), a uniform
    sample seeded by ``seed`` and the fact is taken, never "the first N by QID string".

    Every label and alias of each candidate goes into the trie, so an entity reachable through
    several surface forms (and so several token sequences) is found through any of them and
    reported once, with its best form. Hypotheses that are o's own labels are dropped; when that
    or duplicate forms leave fewer than n entities the beam is widened (×2) up to the number of
    strings in the trie.
    """
    from kgprobe.probing.requests import BeamSearchRequest, BeamSearchResult
    from kgprobe.probing.verbalize import cloze

    if not ctx.object_types:
        return [], _short_reason(ctx, "ApprOpt distractors")
    cands = appropt_candidates(graph, ctx, max_candidates, seed)
    if not cands:
        return [], _short_reason(ctx, "ApprOpt distractors")
    if end is None:
        from kgprobe.probing.measures.common import end_marker_for

        end = end_marker_for(getattr(getattr(engine, "lm", None), "name", None))
    subject_label = ctx.subject_label or ctx.subject
    cz = cloze(template, subject_label)

    def constrained(name: str) -> str:
        return end.continuation(cz, name)[0]
    forms: dict[str, set[str]] = {}  # normalized form -> qids
    strings: list[str] = []
    by_qid = {c.qid: c for c in cands}
    for c in cands:
        for name in dict.fromkeys([c.label or "", *c.aliases]):
            if name:
                forms.setdefault(gd.normalize_label(name), set()).add(c.qid)
                strings.append(constrained(name))
    o_terms: Mapping[str, Any] = gd.entity_terms(graph, [ctx.object]).get(ctx.object, {})
    for name in dict.fromkeys([o_terms.get("label") or "", *(o_terms.get("aliases") or [])]):
        if name:
            strings.append(constrained(name))
    strings = list(dict.fromkeys(strings))
    # normalized forms are compared without the end marker's text
    tail = end.continuation(cz, "")[0][len(cz.continuation("")):] if end.kind in ("tail", "text") else ""
    width = n
    out: list[Distractor] = []
    while True:
        req = BeamSearchRequest(
            cz.context, num_beams=min(width, len(strings)), allowed=tuple(strings),
            add_eos=end.kind == "eos",
        )
        res = engine.run([req])[0]
        assert isinstance(res, BeamSearchResult)
        out = []
        seen: set[str] = set()
        for hyp in res.hypotheses:
            text = hyp.text[: len(hyp.text) - len(tail)] if tail and hyp.text.endswith(tail) else hyp.text
            norm = gd.normalize_label(text)
            if norm in ctx.object_labels:
                continue
            for q in sorted(forms.get(norm, ()), key=lambda x: (len(x), x)):
                if q not in seen:
                    seen.add(q)
                    c = by_qid[q]
                    out.append(
                        Distractor(
                            len(out) + 1,
                            q,
                            c.label,
                            REASON_MODEL,
                            round(hyp.logprob, 6),
                            list(c.shared_types),
                            {
                                "form": text.strip(),
                                "context": cz.context,
                                "beam_width": req.num_beams,
                            },
                        )
                    )
        if len(out) >= n or req.num_beams >= len(strings):
            break
        width *= 2
    out = out[:n]
    why = None
    if len(out) < n:
        why = f"the constrained beam search found {len(out)} distractors among {len(cands)} candidates"
    return out, why


def appropt_candidates(graph: Graph, ctx: gd.FactContext, max_candidates: int | None,
                       seed: int) -> list[gd.Candidate]:
    """Ω(f) for ApprOpt: all typed candidates, or a seeded uniform sample of
    ``max_candidates`` of them (in QID order) when there are more."""
    import random

    bound = gd.omega_bound(graph, ctx)
    if max_candidates is not None and bound is not None and bound > max_candidates:
        # a large Ω(f): a seeded uniform draw from the sampling index, never read whole
        drawn = gd.random_same_type(graph, ctx, max_candidates,
                                    seed=f"{seed}|{ctx.subject}|{ctx.pid}|{ctx.object}|appropt")
        if len(drawn) == max_candidates:
            return sorted(drawn, key=lambda c: gd.qid_order(c.qid))
    cands = gd.typed_candidates(graph, ctx)
    if max_candidates is None or len(cands) <= max_candidates:
        return cands
    rng = random.Random(f"{seed}|{ctx.subject}|{ctx.pid}|{ctx.object}|appropt")
    keep = set(rng.sample(range(len(cands)), max_candidates))
    return [c for i, c in enumerate(cands) if i in keep]


# --- the built-in strategies as registry entries (kgprobe.probing.strategies) ----------------


class RandomStrategy(DistractorStrategy):
    """Random: the paper's lower bound on distractor quality."""

    name = "random"
    summary = BUILTIN_STRATEGIES[name][1]
    draws_random = True

    def find(self, graph: Graph, ctx: gd.FactContext, n: int,
             search: Search) -> tuple[list[Distractor], str | None]:
        return random_distractors(graph, ctx, n, search.seed, search.prefetched)


class SemanticStrategy(DistractorStrategy):
    """Sem: nearest neighbours of o in the semantic index, inside Ω(f)."""

    name = "sem"
    summary = BUILTIN_STRATEGIES[name][1]
    needs_index = True
    searches_neighbours = True

    def find(self, graph: Graph, ctx: gd.FactContext, n: int,
             search: Search) -> tuple[list[Distractor], str | None]:
        assert search.index is not None  # needs_index: find_distractors loads it
        return semantic_distractors(graph, ctx, n, search.index, prefetched=search.prefetched)


class TemporalSemanticStrategy(DistractorStrategy):
    """Temp+Sem: past objects first, then Sem."""

    name = "temp+sem"
    summary = BUILTIN_STRATEGIES[name][1]
    needs_index = True
    past_first = True
    searches_neighbours = True

    def find(self, graph: Graph, ctx: gd.FactContext, n: int,
             search: Search) -> tuple[list[Distractor], str | None]:
        assert search.index is not None  # needs_index: find_distractors loads it
        return temporal_semantic_distractors(graph, ctx, n, search.index, search.at,
                                             prefetched=search.prefetched)


class ApproptStrategy(DistractorStrategy):
    """ApprOpt: the model's own constrained beam search."""

    name = "appropt"
    summary = BUILTIN_STRATEGIES[name][1]
    needs_model = True

    def find(self, graph: Graph, ctx: gd.FactContext, n: int,
             search: Search) -> tuple[list[Distractor], str | None]:
        assert search.engine is not None  # needs_model: find_distractors refuses without it
        return appropt_distractors(graph, ctx, n, search.engine,
                                   search.template or default_template(graph, ctx.pid),
                                   seed=search.seed, end=search.end)


# --- entry points -------------------------------------------------------------------------------


def pick_object(graph: Graph, subject: str, pid: str, at: dt.date | str | int | None = None) -> str:
    """The object of (s, r) a user means when giving none: valid at ``at``, preferred first."""
    rows = gd.true_objects(graph, subject, pid)
    if not rows:
        raise ConfigError(f"no fact ({subject}, {pid}, ?) in the graph; give --object")
    ref = gd.date_sort_key(at)

    def valid_now(r: gd.TrueObject) -> bool:
        return gd.statement_state(r, ref) in ("now", "always")

    rows.sort(
        key=lambda r: (not valid_now(r), r.get("rank") != "preferred", gd.qid_order(r["qid"]))
    )
    return str(rows[0]["qid"])


def default_template(graph: Graph, pid: str) -> str:
    """The relation's first object-last template in the store, else ``[X] <label> [Y].``."""
    from kgprobe.graph.templates import probe_templates
    from kgprobe.records import STYLE_OBJECT_LAST

    for t in probe_templates(graph, pid):
        if t.style == STYLE_OBJECT_LAST:
            return t.text
    rows = graph.read(gd.RELATION_BY_PID, pid=pid)
    label = (rows[0].get("label") if rows else None) or pid
    return f"[X] {label} [Y]."


def find_distractors(
    graph: Graph,
    subject: str,
    pid: str,
    obj: str | None = None,
    *,
    strategy: str = "temp+sem",
    n: int = 10,
    seed: int = 0,
    at: dt.date | str | int | None = None,
    index: SemanticIndex | None = None,
    index_dir: str | Path | None = None,
    index_settings: IndexSettings | None = None,
    engine: Engine | None = None,
    template: str | None = None,
    progress: bool = False,
    context: gd.FactContext | None = None,
    end: EndMarker | None = None,
    prefetched: Prefetched | None = None,
) -> DistractorList:
    """Distractors of (subject, pid, obj) by ``strategy``; ids must already be QIDs/PIDs.

    ``index`` (or ``index_dir``, loaded and rebuilt if stale) serves sem and temp+sem;
    ``engine`` serves appropt, with ``template`` (default: from the template store).
    ``context`` is the fact's :func:`~kgprobe.graph.distractors.fact_context` when the caller
    already read it (a probe run reads it once per fact for every measure); ``prefetched``
    what a probe batch read for it in shared round trips (:func:`prefetch`, same results).
    """
    found_by = strategy_class(strategy)  # an unknown name: one line listing the known ones
    if n < 1:
        raise ConfigError("n must be at least 1")
    gd.check_ids(qids=[subject] + ([obj] if obj else []), pids=[pid])
    ref = gd.date_sort_key(at)
    obj = obj or pick_object(graph, subject, pid, ref)
    ctx = context if context is not None and context.object == obj else gd.fact_context(graph, subject, pid, obj)
    result = DistractorList(subject, pid, obj, ctx.object_label, strategy, n, seed, ref)
    if found_by.needs_index and index is None:
        from kgprobe.probing.semantic import ensure_index

        index = ensure_index(graph, index_dir or default_index_dir(), index_settings, progress=progress)
    if found_by.needs_model and engine is None:
        raise ConfigError(f"{strategy} needs a language model (--model)")
    found, why = found_by().find(graph, ctx, n, Search(seed=seed, at=ref, index=index, engine=engine,
                                                       template=template, end=end, prefetched=prefetched))
    result.distractors = found
    result.reason = why
    return result


def default_index_dir() -> Path:
    from kgprobe.config import Settings, tighten_tree

    indexes = Path(Settings.load().home) / "indexes"
    tighten_tree(indexes)  # owner-only like the rest of KGPROBE_HOME (0700/0600)
    return indexes / "semantic"


def distractors_command(
    subject: str,
    relation: str,
    obj: str | None = None,
    *,
    strategy: str = "temp+sem",
    n: int | None = None,
    seed: int = 0,
    at: str | None = None,
    model: str | Any | None = None,
    template: str | None = None,
    index_dir: str | None = None,
) -> DistractorList:
    """What ``kgprobe distractors`` runs: connect, resolve labels, find, close. ``n``: default
    :data:`DEFAULT_N`, as a probe's. ``model`` (appropt) is chosen as a probe's is
    (``select_model``: a name, a server's URL, or the backend ``--backend`` set)."""
    from kgprobe.graph.client import connect

    found_by = strategy_class(strategy)  # an unknown one is refused before the graph is contacted
    with connect() as graph:
        s = gd.resolve_entity(graph, subject)
        p = gd.resolve_relation(graph, relation)
        o = gd.resolve_entity(graph, obj) if obj else None
        engine = None
        if found_by.needs_model:
            from kgprobe.probing.engine import Engine, resolve_model, select_model
            from kgprobe.probing.models import load_model

            chosen = select_model(model)  # a served model (--backend, a URL): its backend
            engine = Engine(load_model(chosen) if isinstance(chosen, str) else resolve_model(chosen)[0])
        return find_distractors(
            graph,
            s,
            p,
            o,
            strategy=strategy,
            n=DEFAULT_N if n is None else n,
            seed=seed,
            at=at,
            engine=engine,
            template=template,
            index_dir=index_dir,
            progress=True,
        )
