"""The transformers scoring backends: ``hf-causal``, ``hf-masked`` and ``hf-seq2seq``.

Each turns typed requests into token ids (:class:`~kgprobe.probing.tokenization.Tokenization`)
and runs them through its model-call class (:class:`CausalBackend`, :class:`MaskedBackend`,
:class:`Seq2SeqBackend`), so the engine only dispatches by request kind (DESIGN §3).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypedDict

import numpy as np
import torch

from kgprobe.errors import ConfigError
from kgprobe.probing.backends.base import (
    EngineStats,
    Handler,
    Launcher,
    ModelInfo,
    ScoredTokens,
    ScoringBackend,
    TrieNode,
    register_backend,
)
from kgprobe.probing.backends.causal import CausalBackend, default_batch_tokens
from kgprobe.probing.backends.masked import MaskedBackend
from kgprobe.probing.backends.seq2seq import Seq2SeqBackend
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
    SpanScoreRequest,
    SpanScoreResult,
    TokenScoresRequest,
    TokenScoresResult,
    entropy_of,
)
from kgprobe.probing.tokenization import SpanEncoding, split_trailing_whitespace

ATTENTION_PATHS = ("auto", "flex", "segments", "dense")


class LayerSettings(TypedDict):
    """What every model-call layer (causal, masked, seq2seq) is built with."""

    batch_size: int
    padding_side: Literal["left", "right"]
    batch_tokens: int | None
    stats: EngineStats


class HFBackend(ScoringBackend):
    """What the transformers backends share: the loaded model, its tokenization, and turning
    scored tokens into results."""

    built_from = "--model NAME|FILE|DIR (the transformers loader picks the kind from the model's config)"

    @classmethod
    def arguments(cls) -> list[str]:
        return ["revision", "trust_remote_code", "attn_implementation", "device_map",
                "(from_pretrained's)"]

    @classmethod
    def from_args(cls, model: str | None, args: Mapping[str, Any]) -> ScoringBackend:
        """Built by the engine from a loaded model, never from arguments: the CLI's default
        (no ``--backend``, or ``--backend hf``) loads the model and picks this kind."""
        raise ConfigError(f"backend {cls.name!r} is chosen by the transformers loader from the "
                          "model's config: leave out --backend (or give --backend hf)")

    def __init__(
        self,
        lm: LoadedModel,
        *,
        stats: EngineStats,
        batch_size: int = 32,
        padding_side: Literal["left", "right"] = "right",
        batch_tokens: int | None | Literal["auto"] = "auto",
        share_prefix: bool = True,
        attention: str = "auto",
    ) -> None:
        if attention not in ATTENTION_PATHS:
            raise ConfigError(
                f"unknown attention path {attention!r}; use auto, flex, segments or dense")
        if batch_tokens == "auto":
            # chosen at load time (--batch-tokens), else per device
            batch_tokens = lm.batch_tokens or default_batch_tokens(
                str(lm.device), None if attention == "dense" else lm.model)
        self.lm = lm
        self.tok = lm.tokenization
        self.fingerprint = lm.fingerprint
        self.stats = stats
        self.share_prefix = share_prefix
        self.attention = attention
        self.settings: LayerSettings = {
            "batch_size": batch_size, "padding_side": padding_side,
            "batch_tokens": batch_tokens, "stats": stats}

    @property
    def label(self) -> str:
        return self.lm.name

    def info(self) -> ModelInfo:
        return {"name": self.lm.name, "kind": self.lm.kind, "device": self.lm.device}

    def _lp_result(self, s: ScoredTokens, ids: Sequence[int], merged: bool) -> LogProbResult:
        return LogProbResult(
            logprob=float(sum(s.logprobs)),
            token_logprobs=tuple(s.logprobs),
            tokens=self.tok.decode_tokens(ids),
            is_greedy=s.is_greedy,
            boundary_merged=merged,
            token_ids=tuple(map(int, ids)),
        )

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

    def _next_results(self, reqs: list[NextTokenRequest],
                      dists: Sequence[torch.Tensor]) -> list[NextTokenResult]:
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


@register_backend("hf-causal")
class HFCausal(HFBackend):
    """Decoder-only transformers models: every request kind. Continuation log-probs,
    sentences and next-token distributions go through packed rows (``CausalBackend.score_items``)
    where the architecture allows; beam searches and generations decode many at once."""

    def __init__(self, lm: LoadedModel, **kw: Any) -> None:
        super().__init__(lm, **kw)
        self.model = CausalBackend(lm.model, lm.tokenizer, **self.settings)
        self.model.attention = self.attention

    def handlers(self) -> Mapping[type, Handler]:
        return {LogProbRequest: self._logprobs, SpanScoreRequest: self._spans,
                NextTokenRequest: self._next_tokens, BeamSearchRequest: self._beams,
                GenerateRequest: self._generates, TokenScoresRequest: self._token_scores}

    def _token_scores(self, reqs: list[TokenScoresRequest]) -> list[TokenScoresResult]:
        """Each text alone, ``tokenizer(text)`` with its default special tokens and no prefix
        token: log p of every token after the first (KaRR's reference scoring)."""
        encs = [list(self.lm.tokenizer(r.text)["input_ids"]) for r in reqs]
        longer = [i for i, ids in enumerate(encs) if len(ids) > 1]
        scored = self.model.score_sequences([encs[i] for i in longer], [1] * len(longer))
        vals: dict[int, tuple[float, ...]] = {i: tuple(s.logprobs) for i, s in zip(longer, scored, strict=True)}
        return [TokenScoresResult(tuple(int(x) for x in ids), vals.get(i, ()))
                for i, ids in enumerate(encs)]

    def _packed(self) -> bool:
        """Whether requests go through packed rows (see ``CausalBackend.score_items``)."""
        return self.model.pack and self.model.packing_works()

    def launches_ahead(self) -> bool:
        """On CUDA, packed rows are launched without waiting (``launch_items``)."""
        return self.model.device.type == "cuda" and self.model.overlap

    def launchers(self) -> Mapping[type, Launcher]:
        """Continuation log-probs, sentences and next-token distributions are launched and read
        later where they go through packed rows (``CausalBackend.launch_items``)."""
        return {LogProbRequest: self._launch_logprobs, SpanScoreRequest: self._launch_spans,
                NextTokenRequest: self._launch_next_tokens}

    def _logprobs(self, reqs: list[LogProbRequest]) -> list[LogProbResult]:
        return self._launch_logprobs(reqs)()

    def _launch_logprobs(self, reqs: list[LogProbRequest]) -> Callable[[], list[LogProbResult]]:
        encs = self.tok.causal_pairs([(r.context, r.continuation, r.add_eos) for r in reqs])
        pairs = [(e.context_ids, e.continuation_ids) for e in encs]
        if self.share_prefix and self._packed():
            launched = self.model.launch_items([c for c, _ in pairs], [x for _, x in pairs])

            def scored_now() -> list[ScoredTokens]:
                return launched()[0]
        elif self.share_prefix:
            shared = self.model.score_pairs_shared(pairs)

            def scored_now() -> list[ScoredTokens]:
                return shared
        else:
            seqs = [list(c) + list(x) for c, x in pairs]
            whole = self.model.score_sequences(seqs, [len(c) for c, _ in pairs])

            def scored_now() -> list[ScoredTokens]:
                return whole

        def results() -> list[LogProbResult]:
            decode = self.tok.decode_tokens  # ``_lp_result``, inlined: one result per request
            return [
                LogProbResult(float(sum(s.logprobs)), tuple(s.logprobs),
                              decode(e.continuation_ids), s.is_greedy, e.boundary_merged,
                              tuple(map(int, e.continuation_ids)))
                for s, e in zip(scored_now(), encs, strict=True)
            ]

        return results

    def _spans(self, reqs: list[SpanScoreRequest]) -> list[SpanScoreResult]:
        return self._launch_spans(reqs)()

    def _launch_spans(self, reqs: list[SpanScoreRequest]) -> Callable[[], list[SpanScoreResult]]:
        encs = self.tok.causal_spans([(r.text, r.start, r.end) for r in reqs])
        if self._packed():
            # every sentence continues the same prefix token: one trie, so the sentences
            # of one fact share everything up to the object (DESIGN §3)
            launched = self.model.launch_items([e.ids[:1] for e in encs],
                                               [e.ids[1:] for e in encs])

            def scored_now() -> list[ScoredTokens]:
                return launched()[0]
        else:
            whole = self.model.score_sequences([e.ids for e in encs], [1] * len(encs))

            def scored_now() -> list[ScoredTokens]:
                return whole

        def results() -> list[SpanScoreResult]:
            # position 0 is the prefix token, never scored
            return [self._span_result(s.logprobs, e.in_span[1:], e.ids[1:], sum(s.logprobs))
                    for s, e in zip(scored_now(), encs, strict=True)]

        return results

    def _context_ids(self, context: str, room: int = 1) -> list[int]:
        """Context ids as a LogProbRequest would see them (trailing space removed), cut from
        the left (BOS kept) so ``room`` more tokens fit: a generation or search never runs
        past the model's positions. Prompts put the question last (BELIEF-ICL's
        demonstrations first), so a cut drops demonstrations; it is counted in
        ``Tokenization.cut_count`` (a probe run records it as ``contexts_cut``)."""
        ids = self.tok._with_prefix(self.tok.encode(context.rstrip()))
        return self.tok._fit(ids, max(1, room), cut=True)

    def _next_tokens(self, reqs: list[NextTokenRequest]) -> list[NextTokenResult]:
        return self._launch_next_tokens(reqs)()

    def _launch_next_tokens(self, reqs: list[NextTokenRequest]
                            ) -> Callable[[], list[NextTokenResult]]:
        if self._packed():
            ctxs = [tuple(self._context_ids(r.context)) for r in reqs]
            launched = self.model.launch_items(ctxs, [()] * len(ctxs))

            def dists_now() -> list[torch.Tensor]:
                found = launched()[1]
                return [found[i] for i in range(len(reqs))]
        else:
            unpacked = self.model.next_token([self._context_ids(r.context) for r in reqs])

            def dists_now() -> list[torch.Tensor]:
                return unpacked

        return lambda: self._next_results(reqs, dists_now())

    def _beams(self, reqs: list[BeamSearchRequest]) -> list[BeamSearchResult]:
        """All beam searches of a chunk decoded together (``CausalBackend.beam_search_many``)."""
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
                self.model.beam_search_many(searches), named, searches, strict=True)
        ]

    def _continuation_text(self, ctx: Sequence[int], ids: Sequence[int]) -> str:
        """Decode new tokens in their context so a leading space survives (SentencePiece
        drops it when the tokens are decoded alone)."""
        tk = self.lm.tokenizer
        before = tk.decode(list(ctx), skip_special_tokens=True)
        after = tk.decode(list(ctx) + list(ids), skip_special_tokens=True)
        if after.startswith(before):
            return str(after[len(before):])
        return str(tk.decode(list(ids), skip_special_tokens=True))

    def _generates(self, reqs: list[GenerateRequest]) -> list[GenerateResult]:
        """All generations of a chunk decoded together (``CausalBackend.generate_many``)."""
        ctxs = [self._context_ids(r.context, r.max_new_tokens) for r in reqs]

        def stop_check(i: int, ids: list[int]) -> bool:
            if not reqs[i].stop:
                return False
            text = self._continuation_text(ctxs[i], ids)
            return any(s in text for s in reqs[i].stop)

        found = self.model.generate_many(
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


@register_backend("hf-masked")
class HFMasked(HFBackend):
    """Encoder-only masked LMs: pseudo-log-likelihoods (PLL-word-l2r) of continuations and
    spans; no next-token distribution, search or generation."""

    def __init__(self, lm: LoadedModel, **kw: Any) -> None:
        super().__init__(lm, **kw)
        self.model = MaskedBackend(lm.model, lm.tokenizer, **self.settings)

    def handlers(self) -> Mapping[type, Handler]:
        return {LogProbRequest: self._logprobs, SpanScoreRequest: self._spans}

    def _logprobs(self, reqs: list[LogProbRequest]) -> list[LogProbResult]:
        if any(r.add_eos for r in reqs):
            raise ConfigError("add_eos has no meaning for a masked LM")
        spans = []
        for r in reqs:
            ctx, cont = split_trailing_whitespace(r.context, r.continuation)
            spans.append(self.tok.masked_span(ctx + cont, len(ctx), len(ctx + cont)))
        scored = self.model.pll(spans, [True] * len(spans))
        return [
            self._lp_result(s, _span_ids(e), False) for s, e in zip(scored, spans, strict=True)
        ]

    def _spans(self, reqs: list[SpanScoreRequest]) -> list[SpanScoreResult]:
        encs = [self.tok.masked_span(r.text, r.start, r.end) for r in reqs]
        scored = self.model.pll(encs, [False] * len(encs))
        out = []
        for s, e in zip(scored, encs, strict=True):
            pos = [i for i in range(len(e.ids)) if e.scorable[i]]
            flags = tuple(e.in_span[i] for i in pos)
            ids = tuple(e.ids[i] for i in pos)
            out.append(self._span_result(s.logprobs, flags, ids, sum(s.logprobs)))
        return out


@register_backend("hf-seq2seq")
class HFSeq2Seq(HFBackend):
    """Encoder-decoder models: log p(target | source) with teacher forcing, T5-style span
    scoring and the first decoder token's distribution; no search or generation."""

    def __init__(self, lm: LoadedModel, **kw: Any) -> None:
        super().__init__(lm, **kw)
        self.model = Seq2SeqBackend(lm.model, lm.tokenizer, **self.settings)

    def handlers(self) -> Mapping[type, Handler]:
        return {LogProbRequest: self._logprobs, SpanScoreRequest: self._spans,
                NextTokenRequest: self._next_tokens}

    def _logprobs(self, reqs: list[LogProbRequest]) -> list[LogProbResult]:
        encs = [self.tok.seq2seq_pair(r.context, r.continuation, r.add_eos) for r in reqs]
        scored = self.model.score([(e.context_ids, e.continuation_ids) for e in encs])
        return [
            self._lp_result(s, e.continuation_ids, False)
            for s, e in zip(scored, encs, strict=True)
        ]

    def _spans(self, reqs: list[SpanScoreRequest]) -> list[SpanScoreResult]:
        pairs = [self._t5_span(r) for r in reqs]
        scored = self.model.score([(p[0], p[1]) for p in pairs])
        return [self._span_result(s.logprobs, flags, tgt, sum(s.logprobs))
                for s, (_, tgt, flags) in zip(scored, pairs, strict=True)]

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

    def _next_tokens(self, reqs: list[NextTokenRequest]) -> list[NextTokenResult]:
        srcs = [self.lm.tokenizer(r.context, add_special_tokens=True)["input_ids"] for r in reqs]
        return self._next_results(reqs, self.model.next_token(srcs))


#: a loaded model's kind -> the backend that serves it
FOR_KIND: dict[str, type[HFBackend]] = {"causal": HFCausal, "masked": HFMasked,
                                        "seq2seq": HFSeq2Seq}


def hf_backend(lm: LoadedModel, **settings: Any) -> HFBackend:
    """The transformers backend for a loaded model's kind (``FOR_KIND``)."""
    return FOR_KIND[lm.kind](lm, **settings)


def _span_ids(e: SpanEncoding) -> list[int]:
    return [i for i, s, f in zip(e.ids, e.scorable, e.in_span, strict=True) if s and f]
