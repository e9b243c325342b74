"""The scoring engine: requests in, results out, in order.

``Engine.run`` sees all requests of a run, so it can dedupe them, answer from the cache,
group them by kind and context, sort by length, batch, and store new results as it goes
(chunk by chunk, so a killed run resumes).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import numpy as np
import torch

from kgprobe.errors import ConfigError
from kgprobe.probing.backends import (
    CausalBackend,
    EngineStats,
    MaskedBackend,
    ScoredTokens,
    Seq2SeqBackend,
    TrieNode,
)
from kgprobe.probing.backends.causal import default_batch_tokens
from kgprobe.probing.cache import ScoreCache
from kgprobe.probing.models import LoadedModel
from kgprobe.probing.requests import (
    BeamSearchRequest,
    BeamSearchResult,
    GenerateRequest,
    GenerateResult,
    Hypothesis,
    LogProbRequest,
    LogProbResult,
    NextTokenRequest,
    NextTokenResult,
    Request,
    Result,
    SpanScoreRequest,
    SpanScoreResult,
    TokenScoresRequest,
    TokenScoresResult,
    entropy_of,
)
from kgprobe.probing.tokenization import SpanEncoding, split_trailing_whitespace


class Engine:
    """Runs scoring requests against one loaded model.

    Causal models: requests are packed as (context + continuation trie) segments into rows of
    up to ``batch_tokens`` tokens ("auto": the load-time choice, else 8192 where masked-out
    attention costs nothing and 512 with a dense mask, see ``default_batch_tokens``), one
    forward per row (``attention``: "auto", "flex", "segments" or "dense", see
    ``CausalBackend.attention_path``). ``share_prefix`` off runs every pair as
    one full sequence instead (the reference path, ``batch_size`` rows padded on
    ``padding_side``). Masked and seq2seq models batch ``batch_size`` rows, more for short rows
    up to ``batch_tokens``. ``cache`` makes results persistent."""

    def __init__(
        self,
        model: LoadedModel,
        *,
        batch_size: int = 32,
        cache: ScoreCache | None = None,
        share_prefix: bool = True,
        padding_side: Literal["left", "right"] = "right",
        batch_tokens: int | None | Literal["auto"] = "auto",
        chunk_size: int = 16384,
        progress: bool = False,
        attention: str = "auto",
    ) -> None:
        self.lm = model
        self.tok = model.tokenization
        if batch_tokens == "auto":
            # chosen at load time (--batch-tokens), else per device
            batch_tokens = model.batch_tokens or default_batch_tokens(
                str(model.device), None if attention == "dense" else model.model)
        self.cache = cache
        self.share_prefix = share_prefix
        self.chunk_size = chunk_size
        self.progress = progress
        self.stats = EngineStats()
        kw = {"batch_size": batch_size, "padding_side": padding_side,
              "batch_tokens": batch_tokens, "stats": self.stats}
        self.causal = self.masked = self.seq2seq = None
        if attention not in ("auto", "flex", "segments", "dense"):
            raise ConfigError(
                f"unknown attention path {attention!r}; use auto, flex, segments or dense")
        if model.kind == "causal":
            self.causal = CausalBackend(model.model, model.tokenizer, **kw)  # type: ignore[arg-type]
            self.causal.attention = attention
        elif model.kind == "masked":
            self.masked = MaskedBackend(model.model, model.tokenizer, **kw)  # type: ignore[arg-type]
        else:
            self.seq2seq = Seq2SeqBackend(model.model, model.tokenizer, **kw)  # type: ignore[arg-type]

    @property
    def fingerprint(self) -> str:
        return self.lm.fingerprint

    def instilled(self, texts: Sequence[str], *, steps: int = 5, lr: float = 1e-3,
                  seed: int = 0) -> Engine:
        """An engine over a fine-tuned copy of this model (implicit instillation of ``texts``,
        :func:`kgprobe.probing.instill.finetune_copy`), with this engine's cache: the copy has
        its own fingerprint, so its scores never mix with the original's."""
        from kgprobe.probing.instill import finetune_copy

        return Engine(finetune_copy(self.lm, texts, steps=steps, lr=lr, seed=seed),
                      cache=self.cache, share_prefix=self.share_prefix, chunk_size=self.chunk_size)

    # -- public ---------------------------------------------------------------------------

    def run(self, requests: Sequence[Request]) -> list[Result]:
        """One result per request, in the order given. Duplicates are computed once."""
        unique = list(dict.fromkeys(requests))
        done: dict[Request, Result] = {}
        if self.cache is not None:
            done = self.cache.get_many(self.fingerprint, unique)
            self.stats.cache_hits += len(done)
        todo = [r for r in unique if r not in done]
        chunks = [todo[i : i + self.chunk_size] for i in range(0, len(todo), self.chunk_size)]
        if self.progress and len(chunks) > 1:
            from rich.progress import track

            iterator = track(chunks, description="scoring")
        else:
            iterator = chunks
        for chunk in iterator:
            new = self._compute(chunk)
            self.stats.computed += len(new)
            if self.cache is not None:
                self.cache.put_many(self.fingerprint, new.items())
            done.update(new)
        return [done[r] for r in requests]

    def score(self, context: str, candidates: Sequence[str], add_eos: bool = False) -> list[LogProbResult]:
        """Shorthand: log P(candidate | context) for each candidate."""
        results = self.run([LogProbRequest(context, c, add_eos) for c in candidates])
        return [r for r in results if isinstance(r, LogProbResult)]

    # -- dispatch -------------------------------------------------------------------------

    def _compute(self, reqs: list[Request]) -> dict[Request, Result]:
        out: dict[Request, Result] = {}
        handlers: tuple[tuple[type, Callable[[Any], Sequence[Result]]], ...] = (
            (LogProbRequest, self._logprobs), (SpanScoreRequest, self._spans),
            (NextTokenRequest, self._next_tokens), (BeamSearchRequest, self._beams),
            (GenerateRequest, self._generates), (TokenScoresRequest, self._token_scores))
        for kind, handle in handlers:
            batch = [r for r in reqs if isinstance(r, kind)]
            if batch:
                with self._timed(kind.__name__, len(batch)):
                    out.update(zip(batch, handle(batch), strict=True))
        return out

    @contextlib.contextmanager
    def _timed(self, kind: str, n: int) -> Iterator[None]:
        """Charge the CPU time of computing ``n`` requests of one kind to that kind."""
        c0 = time.process_time()
        try:
            yield
        finally:
            st = self.stats
            st.kind_cpu_seconds[kind] = st.kind_cpu_seconds.get(kind, 0.0) + time.process_time() - c0
            st.kind_requests[kind] = st.kind_requests.get(kind, 0) + n

    def _packed(self) -> bool:
        """Whether causal requests go through packed rows (see ``CausalBackend.score_items``)."""
        return self.causal is not None and self.causal.pack and self.causal.packing_works()

    # -- continuation log-probs -----------------------------------------------------------

    def _logprobs(self, reqs: list[LogProbRequest]) -> list[LogProbResult]:
        if self.causal is not None:
            encs = self.tok.causal_pairs([(r.context, r.continuation, r.add_eos) for r in reqs])
            pairs = [(e.context_ids, e.continuation_ids) for e in encs]
            if self.share_prefix and self._packed():
                scored, _ = self.causal.score_items([c for c, _ in pairs], [x for _, x in pairs])
            elif self.share_prefix:
                scored = self.causal.score_pairs_shared(pairs)
            else:
                seqs = [list(c) + list(x) for c, x in pairs]
                scored = self.causal.score_sequences(seqs, [len(c) for c, _ in pairs])
            return [
                self._lp_result(s, e.continuation_ids, e.boundary_merged)
                for s, e in zip(scored, encs, strict=True)
            ]
        if self.seq2seq is not None:
            encs = [self.tok.seq2seq_pair(r.context, r.continuation, r.add_eos) for r in reqs]
            scored = self.seq2seq.score([(e.context_ids, e.continuation_ids) for e in encs])
            return [
                self._lp_result(s, e.continuation_ids, False)
                for s, e in zip(scored, encs, strict=True)
            ]
        assert self.masked is not None
        if any(r.add_eos for r in reqs):
            raise ConfigError("add_eos has no meaning for a masked LM")
        spans = []
        for r in reqs:
            ctx, cont = split_trailing_whitespace(r.context, r.continuation)
            spans.append(self.tok.masked_span(ctx + cont, len(ctx), len(ctx + cont)))
        scored = self.masked.pll(spans, [True] * len(spans))
        return [
            self._lp_result(s, _span_ids(e), False) for s, e in zip(scored, spans, strict=True)
        ]

    def _lp_result(self, s: ScoredTokens, ids: Sequence[int], merged: bool) -> LogProbResult:
        return LogProbResult(
            logprob=float(sum(s.logprobs)),
            token_logprobs=tuple(s.logprobs),
            tokens=self.tok.decode_tokens(list(ids)),
            is_greedy=s.is_greedy,
            boundary_merged=merged,
            token_ids=tuple(int(i) for i in ids),
        )

    # -- sentence + span ------------------------------------------------------------------

    def _spans(self, reqs: list[SpanScoreRequest]) -> list[SpanScoreResult]:
        out: list[SpanScoreResult] = []
        if self.causal is not None:
            encs = self.tok.causal_spans([(r.text, r.start, r.end) for r in reqs])
            if self._packed():
                # every sentence continues the same prefix token: one trie, so the sentences
                # of one fact share everything up to the object (DESIGN §3)
                scored, _ = self.causal.score_items([e.ids[:1] for e in encs],
                                                    [e.ids[1:] for e in encs])
            else:
                scored = self.causal.score_sequences([e.ids for e in encs], [1] * len(encs))
            for s, e in zip(scored, encs, strict=True):
                # position 0 is the prefix token, never scored
                flags = e.in_span[1:]
                ids = e.ids[1:]
                out.append(self._span_result(s.logprobs, flags, ids, sum(s.logprobs)))
            return out
        if self.masked is not None:
            encs = [self.tok.masked_span(r.text, r.start, r.end) for r in reqs]
            scored = self.masked.pll(encs, [False] * len(encs))
            for s, e in zip(scored, encs, strict=True):
                pos = [i for i in range(len(e.ids)) if e.scorable[i]]
                flags = tuple(e.in_span[i] for i in pos)
                ids = tuple(e.ids[i] for i in pos)
                out.append(self._span_result(s.logprobs, flags, ids, sum(s.logprobs)))
            return out
        assert self.seq2seq is not None
        pairs = [self._t5_span(r) for r in reqs]
        scored = self.seq2seq.score([(p[0], p[1]) for p in pairs])
        for s, (_, tgt, flags) in zip(scored, pairs, strict=True):
            out.append(self._span_result(s.logprobs, flags, tgt, sum(s.logprobs)))
        return out

    def _t5_span(self, r: SpanScoreRequest) -> tuple[list[int], list[int], tuple[bool, ...]]:
        """Source with the span replaced by a sentinel; target ``<s0> span <s1>``; falls back
        to prefix -> span when the tokenizer has no sentinels."""
        tk = self.lm.tokenizer
        s0 = "<extra_id_0>"
        s1 = "<extra_id_1>"
        vocab = tk.get_vocab()
        span = r.text[r.start : r.end]
        if s0 in vocab and s1 in vocab:
            src = tk(r.text[: r.start] + s0 + r.text[r.end :], add_special_tokens=True)["input_ids"]
            body = self.tok.encode(span)
            tgt = [vocab[s0]] + body + [vocab[s1]]
            flags = (False,) + (True,) * len(body) + (False,)
        else:
            src = tk(r.text[: r.start], add_special_tokens=True)["input_ids"]
            tgt = self.tok.encode(span)
            flags = (True,) * len(tgt)
        return list(src), tgt, flags

    def _span_result(
        self, vals: Sequence[float], flags: Sequence[bool], ids: Sequence[int], total: float
    ) -> SpanScoreResult:
        chosen = [v for v, f in zip(vals, flags, strict=True) if f]
        chosen_ids = [i for i, f in zip(ids, flags, strict=True) if f]
        return SpanScoreResult(
            logprob=float(sum(chosen)),
            token_logprobs=tuple(chosen),
            tokens=self.tok.decode_tokens(chosen_ids),
            sentence_logprob=float(total),
        )

    def _token_scores(self, reqs: list[TokenScoresRequest]) -> list[TokenScoresResult]:
        """Each text alone, ``tokenizer(text)`` with its default special tokens and no prefix
        token: log p of every token after the first (KaRR's reference scoring)."""
        causal = self._need_causal("token scores")
        encs = [list(self.lm.tokenizer(r.text)["input_ids"]) for r in reqs]
        longer = [i for i, ids in enumerate(encs) if len(ids) > 1]
        scored = causal.score_sequences([encs[i] for i in longer], [1] * len(longer))
        vals: dict[int, tuple[float, ...]] = {i: tuple(s.logprobs) for i, s in zip(longer, scored, strict=True)}
        return [TokenScoresResult(tuple(int(x) for x in ids), vals.get(i, ()))
                for i, ids in enumerate(encs)]

    # -- distributions --------------------------------------------------------------------

    def _context_ids(self, context: str, room: int = 1) -> list[int]:
        """Causal context ids as a LogProbRequest would see them (trailing space removed),
        cut from the left (BOS kept) so ``room`` more tokens fit: a generation or search
        never runs past the model's positions. Prompts put the question last (BELIEF-ICL's
        demonstrations first), so a cut drops demonstrations; it is counted in
        ``Tokenization.cut_count`` (a probe run records it as ``contexts_cut``)."""
        ids = self.tok._with_prefix(self.tok.encode(context.rstrip()))
        return self.tok._fit(ids, max(1, room), cut=True)

    def _next_tokens(self, reqs: list[NextTokenRequest]) -> list[NextTokenResult]:
        if self.causal is not None and self._packed():
            ctxs = [tuple(self._context_ids(r.context)) for r in reqs]
            _, found = self.causal.score_items(ctxs, [()] * len(ctxs))
            dists = [found[i] for i in range(len(reqs))]
        elif self.causal is not None:
            dists = self.causal.next_token([self._context_ids(r.context) for r in reqs])
        elif self.seq2seq is not None:
            srcs = [self.lm.tokenizer(r.context, add_special_tokens=True)["input_ids"] for r in reqs]
            dists = self.seq2seq.next_token(srcs)
        else:
            raise ConfigError("next-token distributions need a causal or seq2seq model")
        out = []
        for r, d in zip(reqs, dists, strict=True):
            full = d.cpu().numpy().astype(np.float32)
            k = full.shape[0] if r.top_k is None else min(r.top_k, full.shape[0])
            v, i = torch.topk(d, k)
            ids = tuple(int(x) for x in i.tolist())
            out.append(NextTokenResult(
                token_ids=ids,
                tokens=self.tok.decode_tokens(ids) if r.top_k is not None else (),
                logprobs=tuple(float(x) for x in v.tolist()),
                entropy=entropy_of(full),
                full_logprobs=full if r.top_k is None else None,
            ))
        return out

    # -- search ---------------------------------------------------------------------------

    def _need_causal(self, what: str) -> CausalBackend:
        if self.causal is None:
            raise ConfigError(f"{what} needs a causal language model")
        return self.causal

    def _beams(self, reqs: list[BeamSearchRequest]) -> list[BeamSearchResult]:
        """All beam searches of a chunk decoded together (``CausalBackend.beam_search_many``)."""
        backend = self._need_causal("beam search")
        searches = []
        named: list[dict[tuple[int, ...], str]] = []
        for r in reqs:
            ctx = (self._context_ids(r.context) if r.allowed is not None
                   else self._context_ids(r.context, r.max_new_tokens))
            trie = None
            max_new = r.max_new_tokens
            names: dict[tuple[int, ...], str] = {}
            if r.allowed is not None:
                limit = self.tok.max_length
                for a in r.allowed:
                    try:
                        ids = self.tok.causal_pair(r.context, a, r.add_eos).continuation_ids
                    except ConfigError:
                        continue  # encodes to nothing, or longer than the model's whole context
                    if limit is not None and len(ctx) + len(ids) > limit:
                        continue  # cannot be generated after this context: not a reachable answer
                    names.setdefault(ids, a)
                if not names:
                    raise ConfigError(
                        "beam search: none of the allowed strings fits after the context "
                        f"(model context length {limit})"
                    )
                trie = TrieNode.build(list(names))
                max_new = max(len(s) for s in names)  # the trie's depth bounds the search
            searches.append((ctx, r.num_beams, max_new, trie))
            named.append(names)
        return [
            BeamSearchResult(tuple(
                Hypothesis(names.get(tuple(ids)) or self._continuation_text(ctx, ids), tuple(ids), lp)
                for ids, lp in found
            ))
            for found, names, (ctx, _, _, _) in zip(
                backend.beam_search_many(searches), named, searches, strict=True)
        ]

    def _continuation_text(self, ctx: Sequence[int], ids: Sequence[int]) -> str:
        """Decode new tokens in their context so a leading space survives (SentencePiece
        drops it when the tokens are decoded alone)."""
        tk = self.lm.tokenizer
        before = tk.decode(list(ctx), skip_special_tokens=True)
        after = tk.decode(list(ctx) + list(ids), skip_special_tokens=True)
        if after.startswith(before):
            return after[len(before):]
        return tk.decode(list(ids), skip_special_tokens=True)

    def _generates(self, reqs: list[GenerateRequest]) -> list[GenerateResult]:
        """All generations of a chunk decoded together (``CausalBackend.generate_many``)."""
        backend = self._need_causal("generation")
        ctxs = [self._context_ids(r.context, r.max_new_tokens) for r in reqs]

        def stop_check(i: int, ids: list[int]) -> bool:
            if not reqs[i].stop:
                return False
            text = self._continuation_text(ctxs[i], ids)
            return any(s in text for s in reqs[i].stop)

        found = backend.generate_many(
            [(c, r.max_new_tokens, r.temperature, r.top_p, r.seed) for c, r in zip(ctxs, reqs, strict=True)],
            stop_check)
        out = []
        for r, ctx, (ids, lp) in zip(reqs, ctxs, found, strict=True):
            text = self._continuation_text(ctx, ids)
            for s in r.stop:
                if s in text:
                    text = text[: text.index(s)]
            out.append(GenerateResult(text, tuple(ids), lp))
        return out


def _span_ids(e: SpanEncoding) -> list[int]:
    return [i for i, s, f in zip(e.ids, e.scorable, e.in_span, strict=True) if s and f]
