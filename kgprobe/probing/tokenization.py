"""The single place where text becomes token ids (DESIGN §3).

Rules, each a lesson of lm-evaluation-harness users:
- trailing whitespace of the context moves into the continuation (" Paris", not "Paris"
  after "is ") so the continuation is tokenized the way the model saw such text;
- context and continuation are encoded *jointly* and split where the continuation's first
  character lies, so the context tokens are exactly those of the full text; a token that
  spans the boundary (harness #1053, #1297) is scored as part of the continuation and flagged,
  instead of crashing or silently scoring nothing;
- an explicit BOS policy per model (harness #1455, #3333): BOS is prepended by us, once,
  never by the tokenizer as well (texts are encoded with ``add_special_tokens=False``);
- EOS appended to the continuation when a request asks for it;
- too long a scored context (a cloze, a FACTOR prefix) is an error (:class:`ContextTooLong`),
  never silently cut: cutting from the left would drop the subject; only a caller that asks
  for it (``truncate_left``, FACTOR's ``--max-length``) has it cut from the left (BOS kept).
  A prompt for generation or search (BELIEF-ICL demonstrations, question last) is cut from
  the left to leave room for the new tokens, and each cut is counted (``cut_count``; a probe
  run records it as ``contexts_cut``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tokenizers import Tokenizer as _RustTokenizer  # behind every fast tokenizer

from kgprobe.errors import ConfigError

BosPolicy = Literal["auto", "always", "never"]


class ContextTooLong(ConfigError):
    """A context and its continuation exceed the model's context length (never cut silently)."""


@dataclass(frozen=True)
class PairEncoding:
    """Token ids of a (context, continuation) pair for a causal or seq2seq model."""

    context_ids: tuple[int, ...]
    continuation_ids: tuple[int, ...]
    boundary_merged: bool = False


@dataclass(frozen=True)
class SpanEncoding:
    """A whole text's ids (with prefix/special tokens) and which positions are scored.

    ``in_span[i]`` marks tokens overlapping the span; ``scorable[i]`` marks tokens that count
    in the sentence score (not BOS/CLS/SEP); ``word_ids`` groups subword tokens into words
    (masked-LM within-word masking)."""

    ids: tuple[int, ...]
    in_span: tuple[bool, ...]
    scorable: tuple[bool, ...]
    word_ids: tuple[int | None, ...]


def split_trailing_whitespace(context: str, continuation: str) -> tuple[str, str]:
    """Move the context's trailing whitespace to the front of the continuation."""
    stripped = context.rstrip()
    return stripped, context[len(stripped) :] + continuation


class Tokenization:
    """Encodes text for one model under its BOS policy and context length."""

    def __init__(
        self,
        tokenizer: Any,
        *,
        bos_policy: BosPolicy = "auto",
        prefix_token_id: int | None = None,
        max_length: int | None = None,
    ) -> None:
        if bos_policy not in ("auto", "always", "never"):
            raise ConfigError(f"unknown BOS policy {bos_policy!r}; use auto, always or never")
        self.tokenizer = tokenizer
        self.bos_policy: BosPolicy = bos_policy
        bos = tokenizer.bos_token_id
        eos = tokenizer.eos_token_id
        if bos_policy == "always" and bos is None:
            raise ConfigError("BOS policy 'always' but the tokenizer has no BOS token")
        if bos_policy == "auto":
            probe = tokenizer("a", add_special_tokens=True)["input_ids"]
            self.add_bos = bos is not None and len(probe) > 0 and probe[0] == bos
        else:
            self.add_bos = bos_policy == "always"
        self.bos_id: int | None = bos
        self.eos_id: int | None = eos
        # What conditions the first token when the context is empty: BOS, else EOS (the
        # document separator of most causal LMs), as the harness does.
        self.prefix_id: int | None = prefix_token_id if prefix_token_id is not None else (
            bos if self.add_bos else (eos if eos is not None else bos)
        )
        self.max_length = max_length
        #: cut too long a context from the left instead of raising ContextTooLong (only when a
        #: caller asks for it and says so: FACTOR's --max-length, the paper's protocol)
        self.truncate_left = False
        #: contexts cut from the left so far (generation prompts, or with truncate_left)
        self.cut_count = 0
        self._decoded: dict[int, str] = {}
        self._splits_at_space = _splits_at_space(tokenizer)

    # -- low level ------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` without any special token added by the tokenizer."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _backend(self) -> Any:
        """The Rust tokenizer to call directly, when a call through the transformers wrapper
        would do exactly that call (no truncation, no padding, its special-token setting):
        the wrapper's per-text conversion costs a third of the encoding."""
        bk = getattr(self.tokenizer, "_tokenizer", None)
        if (not isinstance(bk, _RustTokenizer)
                or bk.truncation is not None or bk.padding is not None
                or bk.encode_special_tokens != bool(getattr(self.tokenizer, "split_special_tokens",
                                                            False))):
            return None
        return bk

    def _encode_many(self, texts: list[str]) -> list[list[int]]:
        """Ids of each text without special tokens, one tokenizer call."""
        bk = self._backend()
        if bk is not None:
            return [e.ids for e in bk.encode_batch(texts, add_special_tokens=False)]
        return [list(x) for x in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def _encode_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]] | None]:
        try:
            enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
            return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
        except (NotImplementedError, ValueError, TypeError):
            return self.encode(text), None

    def decode_tokens(self, ids: Sequence[int]) -> tuple[str, ...]:
        """Each id decoded on its own (for per-token displays), keeping a SentencePiece
        word-start marker as the leading space it stands for. Each vocabulary id is decoded
        once per model and remembered: results carry token strings without a tokenizer call
        per token on the hot path."""
        memo = self._decoded
        try:  # the usual case: every id seen before
            return tuple(map(memo.__getitem__, ids))
        except KeyError:
            pass
        missing = [i for i in dict.fromkeys(ids) if i not in memo]
        if missing:
            texts = self.tokenizer.batch_decode([[i] for i in missing])
            pieces = self.tokenizer.convert_ids_to_tokens(missing)
            for i, text, piece in zip(missing, texts, pieces, strict=True):
                if isinstance(piece, str) and piece.startswith("\u2581") and not text.startswith(" "):
                    text = " " + text
                memo[i] = text
        return tuple(memo[i] for i in ids)

    def _prefix(self) -> list[int]:
        return [self.bos_id] if self.add_bos and self.bos_id is not None else []

    def _with_prefix(self, ids: list[int]) -> list[int]:
        """Prepend BOS per policy, never doubling it; guarantee one conditioning token."""
        prefix = self._prefix()
        if prefix and ids[:1] == prefix:
            prefix = []
        out = prefix + ids
        if not out:
            if self.prefix_id is None:
                raise ConfigError("empty context and the tokenizer has neither BOS nor EOS")
            out = [self.prefix_id]
        return out

    # -- causal ---------------------------------------------------------------------------

    def split_joint(self, context: str, continuation: str) -> tuple[list[int], list[int], bool]:
        """Encode ``context + continuation`` once and split at the continuation's first char.

        Returns (context ids, continuation ids, boundary_merged)."""
        return self.split_joint_many([(context, continuation)])[0]

    def split_joint_many(
        self, pairs: Sequence[tuple[str, str]]
    ) -> list[tuple[list[int], list[int], bool]]:
        """``split_joint`` for many pairs with ONE tokenizer call (the fast tokenizer's batch
        encoding): no per-request tokenizer round trip on the hot path."""
        texts = [c + x for c, x in pairs]
        bk = self._backend()
        all_ids: Any
        all_offs: Any
        if bk is not None:
            encs = bk.encode_batch(texts, add_special_tokens=False)
            all_ids, all_offs = [e.ids for e in encs], [e.offsets for e in encs]
        else:
            try:
                enc = self.tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
                all_ids, all_offs = enc["input_ids"], enc["offset_mapping"]
            except (NotImplementedError, ValueError, TypeError):
                all_ids, all_offs = [self.encode(t) for t in texts], None
        out: list[tuple[list[int], list[int], bool]] = []
        for i, (context, _) in enumerate(pairs):
            whole = list(all_ids[i])
            cut = len(context)
            if all_offs is not None:
                offsets = all_offs[i]
                k = next((j for j, (_, end) in enumerate(offsets) if end > cut), len(whole))
                merged = k < len(whole) and offsets[k][0] < cut
                out.append((whole[:k], whole[k:], merged))
                continue
            ctx = self.encode(context)
            k = 0
            while k < min(len(ctx), len(whole)) and ctx[k] == whole[k]:
                k += 1
            out.append((whole[:k], whole[k:], k < len(ctx)))
        return out

    def split_many(
        self, pairs: Sequence[tuple[str, str]]
    ) -> list[tuple[list[int], list[int], bool]]:
        """``split_joint_many``, with each distinct context and each distinct continuation
        encoded once where the tokenizer provably splits the joint text at the boundary
        (``_splits_at_space``: a GPT-2 style byte-level BPE, a context ending in a
        non-space and a continuation starting with one space then a letter, digit or ASCII
        sign): there the joint encoding IS the context's ids followed by the continuation's,
        and nothing merges. Every other pair is encoded jointly. The demo's cloze requests
        repeat each context for every candidate and each candidate for many contexts. Pairs
        may share the lists of a context or a continuation: copy them, never mutate them."""
        if not self._splits_at_space:
            return self.split_joint_many(pairs)
        apart = [bool(c) and _space_word(x) for c, x in pairs]
        joint_at = [i for i, ok in enumerate(apart) if not ok]
        out: list[tuple[list[int], list[int], bool]] = [([], [], False)] * len(pairs)
        if len(joint_at) < len(pairs):
            index: dict[str, int] = {}
            for (c, x), ok in zip(pairs, apart, strict=True):
                if ok:
                    index.setdefault(c, len(index))
                    index.setdefault(x, len(index))
            ids = self._encode_many(list(index))
            for i, ((c, x), ok) in enumerate(zip(pairs, apart, strict=True)):
                if ok:  # lists shared between pairs: callers copy, never mutate
                    out[i] = (ids[index[c]], ids[index[x]], False)
        if joint_at:
            for i, got in zip(joint_at, self.split_joint_many([pairs[i] for i in joint_at]),
                              strict=True):
                out[i] = got
        return out

    def causal_pair(self, context: str, continuation: str, add_eos: bool = False) -> PairEncoding:
        """Context and continuation ids for a causal LM (see the module rules)."""
        return self.causal_pairs([(context, continuation, add_eos)])[0]

    def causal_pairs(self, requests: Sequence[tuple[str, str, bool]]) -> list[PairEncoding]:
        """``causal_pair`` for a whole chunk of (context, continuation, add_eos), one
        tokenizer call; errors name the offending continuation."""
        split = [split_trailing_whitespace(c, x) for c, x, _ in requests]
        prefix = self._prefix()
        limit = self.max_length
        out = []
        for (_, continuation), (ctx, cont, merged), (_, _, add_eos) in zip(
            split, self.split_many(split), requests, strict=True
        ):
            if add_eos:
                if self.eos_id is None:
                    raise ConfigError("add_eos asked but the tokenizer has no EOS token")
                cont = cont + [self.eos_id]
            if not cont:
                raise ConfigError(f"continuation {continuation!r} encodes to no token")
            if prefix and ctx[:1] != prefix:  # ``_with_prefix``, inlined for the usual cases
                ctx = prefix + ctx
            elif not ctx:
                ctx = self._with_prefix(ctx)
            if limit is not None and len(ctx) + len(cont) > limit:
                ctx = self._fit(ctx, len(cont))
            out.append(PairEncoding(tuple(ctx), tuple(cont), merged))
        return out

    def _fit(self, ctx: list[int], n_cont: int, cut: bool = False) -> list[int]:
        """``ctx`` when context+continuation fit; else ContextTooLong, or with ``cut`` or
        ``truncate_left`` the context cut from the left (keeping BOS) so they fit (counted)."""
        if self.max_length is None or len(ctx) + n_cont <= self.max_length:
            return ctx
        room = self.max_length - n_cont
        if room < 1:
            raise ContextTooLong(
                f"continuation of {n_cont} tokens does not fit the model's context length "
                f"{self.max_length}"
            )
        if not (cut or self.truncate_left):
            raise ContextTooLong(
                f"a context of {len(ctx)} tokens and {n_cont} more do not fit the model's context "
                f"length {self.max_length}; kgprobe never cuts a context silently (it would drop "
                f"its start, e.g. the subject): shorten the template or the demonstrations"
            )
        self.cut_count += 1
        keep_bos = self.add_bos and ctx[:1] == self._prefix()
        if keep_bos and room >= 2:
            return ctx[:1] + ctx[len(ctx) - (room - 1) :]
        return ctx[len(ctx) - room :]

    def causal_span(self, text: str, start: int, end: int) -> SpanEncoding:
        """A whole sentence for a causal LM: a prefix token, then every token scored."""
        return self.causal_spans([(text, start, end)])[0]

    def causal_spans(self, spans: Sequence[tuple[str, int, int]]) -> list[SpanEncoding]:
        """``causal_span`` for many sentences with one tokenizer call."""
        try:
            enc = self.tokenizer([t for t, _, _ in spans], add_special_tokens=False,
                                 return_offsets_mapping=True)
        except (NotImplementedError, ValueError, TypeError):
            raise ConfigError("span scoring needs a fast tokenizer (character offsets)") from None
        prefix = self._with_prefix([])  # BOS, or the prefix token
        out = []
        for (_, start, end), ids, offsets in zip(spans, enc["input_ids"], enc["offset_mapping"],
                                                 strict=True):
            in_span = [False] * len(prefix) + [s < end and e > start for s, e in offsets]
            scorable = [False] * len(prefix) + [True] * len(ids)
            all_ids = prefix + list(ids)
            if self.max_length is not None and len(all_ids) > self.max_length:
                raise ConfigError(f"text of {len(all_ids)} tokens exceeds the context length")
            out.append(SpanEncoding(tuple(all_ids), tuple(in_span), tuple(scorable),
                                    (None,) * len(all_ids)))
        return out

    # -- masked ---------------------------------------------------------------------------

    def masked_span(self, text: str, start: int, end: int) -> SpanEncoding:
        """A text with the model's own special tokens ([CLS] ... [SEP]) and word ids."""
        enc = self.tokenizer(text, add_special_tokens=True, return_offsets_mapping=True)
        ids = list(enc["input_ids"])
        offsets = [tuple(o) for o in enc["offset_mapping"]]
        special = set(self.tokenizer.all_special_ids)
        words = enc.word_ids()
        scorable = [i not in special and e > s for i, (s, e) in zip(ids, offsets, strict=True)]
        in_span = [
            ok and s < end and e > start
            for ok, (s, e) in zip(scorable, offsets, strict=True)
        ]
        if self.max_length is not None and len(ids) > self.max_length:
            raise ConfigError(f"text of {len(ids)} tokens exceeds the context length")
        return SpanEncoding(tuple(ids), tuple(in_span), tuple(scorable), tuple(words))

    # -- seq2seq --------------------------------------------------------------------------

    def seq2seq_pair(self, context: str, continuation: str, add_eos: bool = False) -> PairEncoding:
        """Encoder ids (the model's own special tokens) and decoder target ids."""
        enc = list(self.tokenizer(context, add_special_tokens=True)["input_ids"])
        dec = self.encode(continuation)
        if add_eos:
            if self.eos_id is None:
                raise ConfigError("add_eos asked but the tokenizer has no EOS token")
            dec = dec + [self.eos_id]
        if not dec:
            raise ConfigError(f"continuation {continuation!r} encodes to no token")
        return PairEncoding(tuple(enc), tuple(dec), False)


def _space_word(text: str) -> bool:
    """``text`` starts with one space and then a letter, a digit or a visible ASCII sign: the
    GPT-2 pre-tokenization regex starts a new piece at that space whatever comes before
    it, provided that is not whitespace."""
    if len(text) < 2 or text[0] != " ":
        return False
    c = text[1]
    return c.isalnum() or (c.isascii() and c.isprintable() and c != " ")


def _splits_at_space(tokenizer: Any) -> bool:
    """Whether encoding ``context + continuation`` gives the context's ids followed by the
    continuation's whenever the context ends in a non-space and the continuation starts with
    a space word (``_space_word``): a byte-level BPE (GPT-2, SmolLM2, Pythia) with no
    normalizer, the GPT-2 regex as its only pre-tokenizer (every regex alternative that
    matches a non-space stops at whitespace; ``\\s+(?!\\S)`` only looks ahead), no BPE
    dropout, offsets not trimmed after it, and added tokens that cannot reach across a space (no whitespace in them, no
    stripping, no whole-word rule). Read from the tokenizer's serialized pipeline; anything
    else is encoded jointly."""

    bk = getattr(tokenizer, "_tokenizer", None)
    if not isinstance(bk, _RustTokenizer) or type(bk.pre_tokenizer).__name__ != "ByteLevel":
        return False  # (checked first: serializing a large vocabulary costs a moment)
    try:
        spec = json.loads(bk.to_str())
    except (ValueError, TypeError, AttributeError):
        return False
    pre = spec.get("pre_tokenizer") or {}
    model = spec.get("model") or {}
    post = spec.get("post_processor") or {}
    if (spec.get("normalizer") is not None or pre.get("type") != "ByteLevel"
            or pre.get("use_regex") is not True or model.get("type") != "BPE"
            or model.get("dropout") is not None
            # trimmed offsets could start a lone-space token past the boundary: the joint
            # split (by offsets) would then differ; untrimmed ones cannot
            or (post.get("type") == "ByteLevel" and post.get("trim_offsets") is not False)):
        return False
    return all(
        not any(ch.isspace() for ch in a.get("content", " "))
        and not (a.get("lstrip") or a.get("rstrip") or a.get("single_word"))
        for a in spec.get("added_tokens") or []
    )
