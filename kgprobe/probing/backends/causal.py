"""Causal LM backend: packed scoring, full-sequence scoring, next-token distributions, beam
search (plain and trie-constrained) and generation.

Packed scoring (DESIGN §3, harness #1351): continuation log-probs, whole sentences and
next-token distributions all become (context, continuation) items; each distinct context is
fed once with the trie of its continuations' prefixes, and many such segments share one
forward row (``packing``), so a continuation costs only its unshared tokens and a forward
carries up to ``batch_tokens`` tokens. The first continuation token is read at the context's
last position; the last token of a continuation is never fed. The LM head and log_softmax
(fp32) run on the read positions only. Architectures that ignore a custom 4D mask fall back
to a shared key/value cache with padded rows (``score_pairs_shared``).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from kgprobe.errors import ConfigError
from kgprobe.probing.backends.base import Backend, ScoredTokens, TrieNode
from kgprobe.probing.backends.packing import PackedRow, plan

#: the attention implementation kgprobe registers with transformers (``_segment_attention``)
SEGMENT_ATTENTION = "kgprobe_segments"


@dataclass
class _RowSegments:
    """The attention blocks of the packed row being run, each with its own mask (queries
    ``[a, b)`` against the keys of its trunk, then of itself): built once per row, read by
    every layer, instead of one row × row mask (8192² floats for an 8192-token row)."""

    blocks: list[tuple[int, int, int, int]]
    masks: list[torch.Tensor]


_SEGMENTS: contextvars.ContextVar[_RowSegments | None] = (
    contextvars.ContextVar("kgprobe_segments", default=None))


@dataclass
class _HeadChunk:
    """One LM-head chunk of a row's kept positions (``_head_cuts``), on the device:
    ``out[start : start + size]`` goes through the head; ``local``/``target``/``dest`` are
    the scored reads' positions in the chunk, their target tokens and their indices in the
    run's reads; ``dists`` the (item, position in the chunk) of reads wanting a distribution."""

    start: int
    size: int
    local: torch.Tensor
    target: torch.Tensor
    dest: torch.Tensor
    dists: list[tuple[int, int]]


@dataclass
class _RowWork:
    """A packed row's inputs, on the device before its forward runs (``_prepare_row``), and
    the host arrays its head chunks were cut from (to cut them again for another width)."""

    row: PackedRow
    path: str  # the attention path ``mask`` was built for
    ids: torch.Tensor
    pos: torch.Tensor
    keep: torch.Tensor  # the row positions read, each once, ascending
    end: torch.Tensor
    mask: Any  # None: built at the forward (the first FlexAttention row, inside its check)
    segments: _RowSegments | None
    vocab: int
    chunks: list[_HeadChunk]
    sel: np.ndarray
    inv: np.ndarray
    target: np.ndarray
    read_item: np.ndarray


_Cut = tuple[int, int, np.ndarray, np.ndarray, np.ndarray, list[tuple[int, int]]]


def _head_cuts(sel: np.ndarray, inv: np.ndarray, n_keep: int, vocab: int,
               target: np.ndarray, read_item: np.ndarray) -> list[_Cut]:
    """A row's kept positions in chunks of 2**25 / ``vocab`` (one chunk's fp32 log-probs
    stay near 128 MiB): per chunk its first kept position and size, then the scored reads'
    positions in the chunk, targets and read indices, and the (item, position) of the reads
    that want a whole distribution. ``sel``: the row's reads, sorted by their kept position
    ``inv``."""
    chunk = max(1, (1 << 25) // max(1, vocab))
    cuts: list[_Cut] = []
    for s in range(0, n_keep, chunk):
        lo, hi = np.searchsorted(inv, [s, s + chunk])
        k_sel = sel[lo:hi]
        tgt = target[k_sel]
        scored = tgt >= 0
        loc = inv[lo:hi] - s
        dists = list(zip(read_item[k_sel[~scored]].tolist(), loc[~scored].tolist(), strict=True))
        cuts.append((s, chunk, loc[scored], tgt[scored], k_sel[scored], dists))
    return cuts


#: the packing self-check's tolerance per token in nats, in fp32 and in bf16/fp16
PACKING_TOLERANCE = 5e-2
PACKING_TOLERANCE_HALF = 0.25


#: blocks of at most this many (query, key) pairs get their masks in one vectorised pass over
#: all of them (a flat index per pair); larger ones one broadcast comparison each. The flat
#: pass costs about 20 ns a pair, the per-block one about 8 µs a block plus 1 ns a pair: on
#: 100-candidate rows (blocks of ~280 x 320) the flat pass alone was 15x the CPU, on rows of
#: one candidate per context (blocks of ~10 x 10) the loop alone was 2-3x (docs/benchmarks.md)
SMALL_BLOCK = 4096

#: FlexAttention rows are padded to a multiple of its sparse block (128 tokens), two blocks at
#: least. Dynamo compiles FlexAttention again for a new row length, for any length once it
#: has seen two (dynamic shapes), but it specialises a dimension of size 1: a row of one block
#: (<= 128 tokens, e.g. a probe batch whose other requests the cache held) then compiled on
#: its own, and on an H200 (torch 2.11, an 8B shape) that compile failed ("NoValidChoicesError"
#: in the flex_attention lowering) and took the probe down. Whole blocks also bound the number
#: of row shapes; the pad costs at most one block's projections per row
FLEX_ROW_BLOCK = 128


def _compile_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is torch's compiler failing (dynamo or inductor, e.g. ``InductorError``),
    told by the class's module so that nothing of the compiler is imported to ask."""
    return any(c.__module__.startswith(("torch._dynamo", "torch._inductor"))
               for c in type(exc).__mro__)


def _padded(row: PackedRow, block: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A row's ids, positions and ``end`` padded to a multiple of ``block`` tokens, two blocks
    at least. Each pad token is a segment of its own (``end[p] = p + 1``): no real token
    attends to it, it attends to itself alone (no row is all masked: finite everywhere), and
    no read is taken there, so every real position's score is the unpadded row's."""
    n = len(row.ids)
    m = max(-(-n // block) * block, 2 * block)
    if m == n:
        return row.ids, row.positions, row.end
    pad = np.arange(n, m)
    return (np.concatenate((row.ids, np.zeros(m - n, row.ids.dtype))),
            np.concatenate((row.positions, np.zeros(m - n, row.positions.dtype))),
            np.concatenate((row.end, (pad + 1).astype(row.end.dtype))))


def _small_blocks_allowed(bl: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Whether each query of each block ``(a, b, t0, t1)`` may see each of its keys (its
    trunk's t0..t1-1, then its own a..b-1): kv <= q < end[kv], block after block, row-major."""
    a, t0 = bl[:, 0], bl[:, 2]
    nq, tl = bl[:, 1] - a, bl[:, 3] - t0
    nkv = tl + nq
    sizes = nq * nkv
    blk = np.repeat(np.arange(len(bl)), sizes)
    off = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    qpos = a[blk] + off // nkv[blk]
    kj = off % nkv[blk]
    kvpos = np.where(kj < tl[blk], t0[blk] + kj, a[blk] + kj - tl[blk])
    allowed: np.ndarray = (kvpos <= qpos) & (qpos < end[kvpos])
    return allowed


def _segment_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """SDPA block by block over a packed row (``PackedRow.blocks``): segments never see each
    other, so each segment's queries are computed alone against the keys of its trunk and of
    itself — the cost is the sum of |segment| × (|trunk| + |segment|), not the square of the
    row (the CPU's block-sparse path; FlexAttention is CUDA's). Any other forward (no packed
    row, a key/value cache) is plain SDPA, so the model stays usable by other code."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    base = ALL_ATTENTION_FUNCTIONS["sdpa"]
    row = _SEGMENTS.get()
    if row is None:
        return base(module, query, key, value, attention_mask, **kwargs)  # type: ignore[no-any-return]
    if query.shape[2] != key.shape[2] or row.blocks[-1][1] != query.shape[2]:
        # the row's mask exists only block by block: nothing else may run under it
        raise RuntimeError("segment attention: a forward that is not the packed row ran "
                           "under the row's blocks")
    outs = []
    for (a, b, t0, t1), m in zip(row.blocks, row.masks, strict=True):
        k, v = key[:, :, a:b], value[:, :, a:b]
        if t1 > t0:
            k = torch.cat([key[:, :, t0:t1], k], dim=2)
            v = torch.cat([value[:, :, t0:t1], v], dim=2)
        outs.append(base(module, query[:, :, a:b], k, v, m, **kwargs)[0])
    if len(outs) == 1:
        return outs[0], None
    return torch.cat(outs, dim=1), None


def _register_segments() -> None:
    """Register the attention function and SDPA's mask builder under its name: without the
    mask builder transformers drops a 2D padding mask (padded rows, key/value caches)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(SEGMENT_ATTENTION, _segment_attention)
    AttentionMaskInterface.register(SEGMENT_ATTENTION, sdpa_mask)


def segments_possible(model: Any) -> bool:
    """Whether a model can run packed rows segment by segment (it attends through SDPA)."""
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return impl in ("sdpa", SEGMENT_ATTENTION)


#: models up to this many parameters get ``SMALL_MODEL_BATCH_TOKENS`` rows on CUDA
SMALL_MODEL_PARAMS = 2_500_000_000
#: their row budget: on an H100 a 135M model scored 22k requests/s with 8192-token rows (4
#: forwards) and 36k with 32768 (1 forward): launching a small model's forward costs the host
#: about what running it costs the device, so fewer, longer rows keep the device busy
SMALL_MODEL_BATCH_TOKENS = 32768
#: device memory a 32768-token row needs spare: FlexAttention's ``create_block_mask``
#: evaluates the mask over the whole row × row grid (about 9 GiB of temporaries at 32768)
SMALL_MODEL_MIN_MEMORY = 40 * 1024**3


def default_batch_tokens(device: str, model: Any = None, memory: int | None = None) -> int:
    """The row budget of ``batch_tokens="auto"``: 8192 where masked-out attention costs
    nothing — FlexAttention's block mask on CUDA, segment-wise SDPA (``_segment_attention``)
    on any device for SDPA models (measured on the CPU: 8192-token rows cost the same CPU
    time as 512-token ones, with 1/20 of the forward calls); 512 with a dense mask, whose
    attention is quadratic in the row (a 4096-token row cost 1.8x the CPU of 512-token rows
    for the same tokens). On CUDA a model of at most ``SMALL_MODEL_PARAMS`` parameters gets
    ``SMALL_MODEL_BATCH_TOKENS`` where the device has ``SMALL_MODEL_MIN_MEMORY`` (``memory``:
    its bytes; None: asked from torch)."""
    if str(device).startswith("cuda"):
        if model is not None and sum(p.numel() for p in model.parameters()) <= SMALL_MODEL_PARAMS:
            if memory is None and torch.cuda.is_available():
                memory = torch.cuda.get_device_properties(torch.device(device)).total_memory
            if memory is not None and memory >= SMALL_MODEL_MIN_MEMORY:
                return SMALL_MODEL_BATCH_TOKENS
        return 8192
    if model is not None and segments_possible(model):
        return 8192
    return 512


def _has_flex() -> bool:
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def _cache_keyword(model: Any) -> str:
    """The keyword under which ``model``'s forward takes its key/value cache: ``cache`` in
    recent transformers (5.24 has it; there ``past_key_values`` raises a FutureWarning and
    goes in 5.40), ``past_key_values`` in older ones and in remote code written for them."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def _returned_cache(out: Any) -> Any:
    """The key/value cache a forward returned: ``cache`` where the output has that field,
    else ``past_key_values`` (which warns where ``cache`` exists)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


@dataclass
class _Slots:
    """Sequences decoded together (beam search, generation): one key/value cache whose row j
    holds slot j's context and the tokens chosen so far."""

    cache: Any
    mask: torch.Tensor  # (N, T) 1 where the cache holds a real token
    next_pos: torch.Tensor  # (N,) position id of each slot's next token
    logits: torch.Tensor  # (N, V) fp32 logits of each slot's next token


@dataclass
class _ContextState:
    """A context's key/value cache (per layer) and the log-probabilities after it."""

    length: int
    kv: list[tuple[torch.Tensor, torch.Tensor]] | None
    last_logprobs: torch.Tensor  # (V,) fp32


class CausalBackend(Backend):
    """All model calls for decoder-only models."""

    _head_ok: bool | None = None
    _packing_ok: bool | None = None
    #: the largest |Δ log p| of ``packing_works``'s check (None: not run, or it raised)
    packing_check_diff: float | None = None
    _attention_resolved: str | None = None
    #: pack (context + trie) segments into rows with a tree mask (else padded rows)
    pack: bool = True
    #: "auto", "flex" or "dense" (see ``attention_path``)
    attention: str = "auto"
    #: why the flex path fell back to the dense mask (None: it did not)
    attention_fallback: str | None = None
    _flex_checked: bool = False
    _attn_before: str | None = None
    _cache_kw: str | None = None
    #: on a GPU, launch row r+1 before reading row r's results and read them all back once
    #: (``score_items``); off: wait for the device after every forward (its host clocks
    #: then split forward and head; a device error surfaces at the row that caused it)
    overlap: bool = True
    #: pad each packed row to a multiple of this many tokens (``_padded``); None: FlexAttention's
    #: block (``FLEX_ROW_BLOCK``) on the flex path, no padding on the others
    row_block: int | None = None

    def _with_cache(self, cache: Any) -> dict[str, Any]:
        """The forward's keyword arguments that pass ``cache`` (None: none), under the name
        the installed transformers expects (``_cache_keyword``)."""
        if self._cache_kw is None:
            self._cache_kw = _cache_keyword(self.model.base_model)
        return {self._cache_kw: cache}

    def _forward(self, **kwargs: Any) -> Any:
        self.stats.forward_calls += 1
        c0 = time.process_time()
        with torch.inference_mode():
            out = self.model(**kwargs)
        self.stats.forward_cpu_seconds += time.process_time() - c0
        return out

    # -- contexts -------------------------------------------------------------------------

    def _run_context(self, ctx: Sequence[int], keep_cache: bool) -> _ContextState:
        from transformers import DynamicCache

        ids = torch.tensor([list(ctx)], device=self.device)
        out = self._forward(input_ids=ids, use_cache=keep_cache, logits_to_keep=1,
                            **self._with_cache(DynamicCache() if keep_cache else None))
        last = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
        kv = None
        if keep_cache:
            cache = _returned_cache(out)
            kv = [(layer.keys, layer.values) for layer in cache.layers]
        return _ContextState(len(ctx), kv, last)

    def _right_padded(
        self, ctxs: Sequence[Sequence[int]]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(ids, attention mask, position ids) of contexts right-padded to the longest:
        padding sits after every real token, so no real position sees it."""
        b = len(ctxs)
        width = max(len(c) for c in ctxs)
        ids = torch.full((b, width), self.pad_id, dtype=torch.long, device=self.device)
        mask = torch.zeros((b, width), dtype=torch.long, device=self.device)
        for i, c in enumerate(ctxs):
            ids[i, : len(c)] = torch.tensor(list(c), device=self.device)
            mask[i, : len(c)] = 1
        return ids, mask, torch.arange(width, device=self.device).expand(b, -1)

    def _run_contexts(
        self, ctxs: Sequence[Sequence[int]], keep_cache: bool
    ) -> list[_ContextState]:
        """Several contexts in one right-padded forward (a short context alone is a tiny,
        inefficient matmul); each gets its own slice of the key/value cache. Padding sits
        after every real token, so no real position sees it."""
        if len(ctxs) == 1 or not self.head_splits():
            return [self._run_context(c, keep_cache) for c in ctxs]
        from transformers import DynamicCache

        b = len(ctxs)
        ids, mask, pos = self._right_padded(ctxs)
        self.stats.forward_calls += 1
        with torch.inference_mode():
            out = self.model.base_model(input_ids=ids, attention_mask=mask, position_ids=pos,
                                        use_cache=keep_cache,
                                        **self._with_cache(DynamicCache() if keep_cache else None))
            last_h = out.last_hidden_state[
                torch.arange(b, device=self.device),
                torch.tensor([len(c) - 1 for c in ctxs], device=self.device)]
            last = torch.log_softmax(self._head(last_h), dim=-1)
        states = []
        for i, c in enumerate(ctxs):
            kv = None
            if keep_cache:
                n = len(c)
                kv = [(layer.keys[i : i + 1, :, :n], layer.values[i : i + 1, :, :n])
                      for layer in _returned_cache(out).layers]
            states.append(_ContextState(len(c), kv, last[i]))
        return states

    def _rows_after_context(
        self, state: _ContextState, rows: Sequence[Sequence[int]], hidden: bool = False
    ) -> torch.Tensor:
        """Feed ``rows`` (right-padded) after the cached context: logits (B, T, V), or the
        final hidden states (B, T, H) when ``hidden`` and the head can be split off."""
        from transformers import DynamicCache

        assert state.kv is not None
        b = len(rows)
        width = max(len(r) for r in rows)
        ids = torch.full((b, width), self.pad_id, dtype=torch.long, device=self.device)
        mask = torch.zeros((b, state.length + width), dtype=torch.long, device=self.device)
        mask[:, : state.length] = 1
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(list(r), device=self.device)
            mask[i, state.length : state.length + len(r)] = 1
        pos = torch.arange(state.length, state.length + width, device=self.device).expand(b, -1)
        cache = DynamicCache(
            [(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1)) for k, v in state.kv]
        )
        kwargs = {"input_ids": ids, "attention_mask": mask, "position_ids": pos,
                  "use_cache": True, **self._with_cache(cache)}
        if hidden and self.head_splits():
            self.stats.forward_calls += 1
            with torch.inference_mode():
                return self.model.base_model(**kwargs).last_hidden_state
        return self._forward(**kwargs).logits

    def head_splits(self) -> bool:
        """Whether base model + output embedding reproduce the model's logits (checked once
        on a few tokens). Then only real (unpadded) positions go through the LM head, in
        chunks: a 262k vocabulary times every padded position would not fit in memory."""
        if self._head_ok is None:
            ids = torch.tensor([[self.pad_id, self.eos_id or 0, 1, 2]], device=self.device)
            try:
                with torch.inference_mode():
                    full = self.model(input_ids=ids).logits.float()
                    h = self.model.base_model(input_ids=ids).last_hidden_state
                    mine = self._head(h)
                self._head_ok = bool(torch.allclose(full, mine, atol=1e-4, rtol=1e-4))
            except (AttributeError, TypeError, RuntimeError):
                self._head_ok = False
        return self._head_ok

    def _head(self, h: torch.Tensor) -> torch.Tensor:
        """LM head (+ Gemma-style final soft-capping) in fp32."""
        with torch.inference_mode():
            logits = self.model.get_output_embeddings()(h).float()
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits

    def _gather(
        self, sel: torch.Tensor, targets: torch.Tensor, is_hidden: bool, chunk: int = 64
    ) -> tuple[list[float], list[bool]]:
        """log p(target) and argmax==target for N selected positions, log_softmax in fp32."""
        vals: list[float] = []
        hits: list[bool] = []
        for s in range(0, sel.shape[0], chunk):
            part = sel[s : s + chunk]
            logits = self._head(part) if is_hidden else part.float()
            lp = torch.log_softmax(logits, dim=-1)
            t = targets[s : s + chunk]
            vals.extend(lp.gather(1, t[:, None])[:, 0].tolist())
            hits.extend((lp.argmax(-1) == t).tolist())
        return vals, hits

    # -- packed segments (DESIGN §3) ------------------------------------------------------

    def attention_path(self) -> str:
        """``flex`` (block-sparse FlexAttention with a BlockMask: masked-out blocks cost
        nothing), ``segments`` (SDPA per segment of a row, ``_segment_attention``) or
        ``dense`` (a boolean 4D mask over the whole row through SDPA/eager). ``auto`` picks
        flex on CUDA when torch has it, segments for SDPA models elsewhere (on the CPU flex
        needs a ~1 min compile), dense for the rest."""
        if self._attention_resolved is None:
            want = self.attention
            if want == "auto":
                if self.device.type == "cuda" and _has_flex():
                    want = "flex"
                else:
                    want = "segments" if segments_possible(self.model) else "dense"
            self._attn_before = self.model.config._attn_implementation
            if want == "flex":
                if not _has_flex():
                    raise ConfigError("attention 'flex' needs torch.nn.attention.flex_attention")
                try:
                    self.model.set_attn_implementation("flex_attention")
                except (ValueError, ImportError) as exc:  # the architecture has no flex path
                    self.attention_fallback = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                    self._flex_checked = True
                    want = self._fallback()
            elif want == "segments":
                self._use_segments()
            self._attention_resolved = want
        return self._attention_resolved

    def _use_segments(self) -> None:
        """Switch the model to ``_segment_attention`` (registered with transformers)."""
        if not segments_possible(self.model):
            raise ConfigError("attention 'segments' needs a model that attends through SDPA")
        _register_segments()
        self.model.set_attn_implementation(SEGMENT_ATTENTION)

    def _fallback(self) -> str:
        """Where a failed flex path goes, switched to: segments for SDPA models, else the
        dense mask."""
        before = self._attn_before or "sdpa"
        self.model.set_attn_implementation(before)
        if before in ("sdpa", SEGMENT_ATTENTION):
            self._use_segments()
            return "segments"
        return "dense"

    def _row_mask(self, row: PackedRow, end: torch.Tensor | None = None) -> Any:
        """The row's mask from its ``end`` array: allowed[q, kv] = kv <= q < end[kv]
        (``end``: that array already on the device, padded or not: its length is the row's)."""
        if end is None:
            end = torch.from_numpy(row.end).to(self.device)
        length = len(end)
        if self.attention_path() == "flex":
            from torch.nn.attention.flex_attention import create_block_mask

            def mask_mod(b: Any, h: Any, q: Any, kv: Any) -> Any:
                return (kv <= q) & (q < end[kv])

            return create_block_mask(mask_mod, 1, None, length, length, device=self.device)
        ar = torch.arange(length, device=self.device)
        allowed = (ar[None, :] <= ar[:, None]) & (ar[:, None] < end[None, :])
        mask: torch.Tensor = allowed[None, None]
        if self.model.config._attn_implementation not in ("sdpa", "flex_attention"):
            neg = torch.finfo(next(self.model.parameters()).dtype).min
            mask = torch.zeros(mask.shape, device=self.device).masked_fill(~mask, neg)
        return mask

    def _row_block(self, path: str) -> int:
        """The multiple a row on ``path`` is padded to (1: none). Segment attention reads the
        row's own blocks, so it never pads."""
        if path == "segments":
            return 1
        return self.row_block or (FLEX_ROW_BLOCK if path == "flex" else 1)

    def _row_forward(self, work: _RowWork) -> tuple[torch.Tensor, bool]:
        """One forward of a packed row; hidden states (or logits) at its kept positions only.
        The first FlexAttention forward is synchronised inside its check, so a kernel that
        fails on the device is caught there and the row reruns on the fallback path. A later
        row of a new length compiles FlexAttention again (dynamo): a failed compile there
        falls back the same way, for this row and the rest (``attention_fallback`` says why;
        rows scored before stay flex's), where it took the whole run down before."""
        if self.attention_path() != "flex":
            return self._row_forward_once(work)
        first = not self._flex_checked
        try:
            out = self._row_forward_once(work)
            if first and self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            return out
        except Exception as exc:  # noqa: BLE001 - the first row: any compile/kernel failure
            # e.g. torch 2.13's CPU inductor fails to compile FlexAttention with GQA; later
            # rows: compile failures only (an out-of-memory error is not the path's fault)
            if not first and not _compile_failure(exc):
                raise
            self.attention_fallback = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            self._attention_resolved = self._fallback()
        finally:
            self._flex_checked = True
        return self._row_forward_once(work)

    def _block_masks(self, row: PackedRow) -> _RowSegments:
        """Each attention block's slice of ``_row_mask``'s (dense, additive) mask, built on its
        own: the same values the block would read from the whole row's mask."""
        neg = np.float32(torch.finfo(next(self.model.parameters()).dtype).min)
        bl = row.blocks.astype(np.int64).reshape(-1, 4)
        nq = bl[:, 1] - bl[:, 0]
        nkv = bl[:, 3] - bl[:, 2] + nq
        sizes = nq * nkv
        # every mask in one flat float32 buffer, row-major (block i's keys: its trunk's t0..t1-1,
        # then its own a..b-1): the small blocks first, all at once, then each large one
        small = sizes <= SMALL_BLOCK
        n_small = int(sizes[small].sum())
        large = sizes[~small]
        end = row.end
        total = int(sizes.sum())
        if n_small == total:  # every block small: no copy
            buf = np.where(_small_blocks_allowed(bl, end), np.float32(0.0), neg)
        else:
            buf = np.empty(total, np.float32)
            if n_small:
                buf[:n_small] = np.where(_small_blocks_allowed(bl[small], end), np.float32(0.0),
                                         neg)
        for (a, b, t0, t1), o, n in zip(bl[~small].tolist(),
                                        (n_small + np.cumsum(large) - large).tolist(),
                                        large.tolist(), strict=True):
            q = np.arange(a, b)
            kv = np.concatenate((np.arange(t0, t1), q))
            allowed = (kv <= q[:, None]) & (q[:, None] < end[kv])
            buf[o : o + n].reshape(allowed.shape)[...] = np.where(allowed, np.float32(0.0), neg)
        flat = torch.from_numpy(buf)
        # on an H100 in bf16, float32 masks viewed out of one flat buffer gave log-probs 0.8
        # nats off (docs/benchmarks.md); masks in the model's dtype, each its own tensor, agree
        # with FlexAttention (which of the two mattered is not isolated). The CPU's views
        # stay: they are exact there, and copying costs time
        gpu = self.device.type != "cpu"
        if gpu:
            # 0 and the dtype's minimum convert exactly; the copy leaves from pinned memory
            # without waiting for the device (``_upload``)
            flat = flat.to(next(self.model.parameters()).dtype)
            cuda = self.device.type == "cuda"
            flat = (flat.pin_memory() if cuda else flat).to(self.device, non_blocking=cuda)
        blocks: list[tuple[int, int, int, int]] = [tuple(b) for b in bl.tolist()]  # type: ignore[misc]
        # the buffer holds the small blocks' masks, then the large ones': split in that order,
        # then listed in block order
        stored = np.concatenate((np.flatnonzero(small), np.flatnonzero(~small)))
        parts = [m.view(1, 1, q, k) for m, q, k in
                 zip(torch.split(flat, sizes[stored].tolist()), nq[stored].tolist(),
                     nkv[stored].tolist(), strict=True)]
        masks = (parts if n_small in (0, total)
                 else [parts[i] for i in np.argsort(stored).tolist()])
        if gpu:
            masks = [m.clone() for m in masks]
        return _RowSegments(blocks, masks)

    def _upload(self, arrays: Sequence[np.ndarray]) -> list[torch.Tensor]:
        """int64 arrays as tensors on the device: on the CPU the arrays themselves (no copy);
        on CUDA one pinned buffer and one asynchronous copy for all of them, so the host
        goes on without waiting for the device (a copy from pageable memory would wait)."""
        if self.device.type == "cpu":
            return [torch.from_numpy(a) for a in arrays]
        flat = torch.from_numpy(np.concatenate([a.astype(np.int64, copy=False) for a in arrays]))
        cuda = self.device.type == "cuda"  # another device copies from pageable memory: wait
        dev = (flat.pin_memory() if cuda else flat).to(self.device, non_blocking=cuda)
        return list(torch.split(dev, [len(a) for a in arrays]))

    def _masks(self, row: PackedRow, path: str, end: torch.Tensor) -> tuple[Any, _RowSegments | None]:
        """The mask handed to the model for a row on ``path``, and the blocks segment
        attention reads (None on the other paths)."""
        if path == "segments":
            # the blocks carry their masks; the model is handed a 4D placeholder that
            # transformers passes through untouched (no row × row tensor is built)
            length = len(row.ids)
            return (torch.zeros((), device=self.device).expand(1, 1, length, length),
                    self._block_masks(row))
        return self._row_mask(row, end), None

    def _prepare_row(self, row: PackedRow, sel: np.ndarray, pos: np.ndarray,
                     target: np.ndarray, read_item: np.ndarray, vocab: int) -> _RowWork:
        """Everything a row's forward and head need, built on the host and sent to the device
        before the row runs (``score_items`` builds row r+1's while row r's forward runs):
        the positions to read (each once, ``keep``), the head's chunks of them, ids,
        positions and the mask."""
        uniq, inv = np.unique(pos[sel], return_inverse=True)
        by = np.argsort(inv, kind="stable")
        sel, inv = sel[by], inv[by]
        cuts = _head_cuts(sel, inv, len(uniq), vocab, target, read_item)
        path = self.attention_path()
        block = self._row_block(path)
        row_ids, row_pos, row_end = (_padded(row, block) if block > 1
                                     else (row.ids, row.positions, row.end))
        arrays = [row_ids, row_pos, uniq, row_end]
        for c in cuts:
            arrays.extend(c[2:5])
        dev = self._upload(arrays)
        ids, positions, keep, end = dev[:4]
        chunks = [_HeadChunk(start, size, dev[4 + 3 * i], dev[5 + 3 * i], dev[6 + 3 * i], dists)
                  for i, (start, size, _, _, _, dists) in enumerate(cuts)]
        mask: Any = None
        segments = None
        if path != "flex" or self._flex_checked:  # else built inside the flex check
            mask, segments = self._masks(row, path, end)
        return _RowWork(row, path, ids, positions, keep, end, mask, segments, vocab, chunks,
                        sel, inv, target, read_item)

    def _row_forward_once(self, work: _RowWork) -> tuple[torch.Tensor, bool]:
        path = self.attention_path()
        n = len(work.row.ids)
        ids, pos, end = work.ids, work.pos, work.end
        if len(ids) != n and self._row_block(path) == 1:
            # padded for the flex path, which fell back since: the row runs unpadded (the
            # pad is at the end: views, no copy)
            ids, pos, end = ids[:n], pos[:n], end[:n]
        if work.mask is None or work.path != path:  # the path fell back since it was built
            work.mask, work.segments = self._masks(work.row, path, end)
            work.path = path
        self.stats.forward_calls += 1
        self.stats.tokens_fed += n
        split = self.head_splits()  # its own check forward runs outside the row's segments
        token = _SEGMENTS.set(work.segments)
        c0 = time.process_time()
        try:
            return self._row_forward_model(ids[None], pos[None], work.keep, work.mask, c0, split)
        finally:
            _SEGMENTS.reset(token)

    def _row_forward_model(self, ids: torch.Tensor, pos: torch.Tensor, at: torch.Tensor,
                           mask: Any, c0: float, split: bool) -> tuple[torch.Tensor, bool]:
        """The model's forward, launched: on CUDA nothing here waits for the device (the
        host's clock counts launching it; ``overlap`` off waits for it as well)."""
        with torch.inference_mode():
            if split:
                h = self.model.base_model(input_ids=ids, attention_mask=mask, position_ids=pos,
                                          use_cache=False).last_hidden_state[0, at]
                out, is_hidden = h, True
            else:
                out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos,
                                 use_cache=False, logits_to_keep=at).logits[0]
                is_hidden = False
            if not self.overlap and self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        self.stats.forward_cpu_seconds += time.process_time() - c0
        return out, is_hidden

    def _row_head(self, work: _RowWork, out: torch.Tensor, is_hidden: bool,
                  vals: torch.Tensor, hits: torch.Tensor, dists: dict[int, torch.Tensor]) -> None:
        """LM head (when ``out`` is hidden states) and fp32 log_softmax over a row's kept
        positions, chunk by chunk: log p of each scored read's target and whether it is the
        argmax go into ``vals``/``hits`` on the device (nothing is read back here); a read
        that wants the whole distribution keeps its log-prob vector (``dists``)."""
        width = out.shape[-1] if not is_hidden else work.vocab
        if width != work.vocab:  # logits narrower or wider than the output embedding
            cuts = _head_cuts(work.sel, work.inv, int(work.keep.shape[0]), width,
                              work.target, work.read_item)
            work.chunks = []
            for s, n, li, ti, dst, d in cuts:
                local, tgt, dest = self._upload([li, ti, dst])
                work.chunks.append(_HeadChunk(s, n, local, tgt, dest, d))
        # the vocabulary-wide work on the read positions (LM head, log_softmax, the greedy
        # check's argmax, releasing those buffers) is the model's, timed apart from the
        # engine's own bookkeeping
        c0 = time.process_time()
        with torch.inference_mode():
            for ch in work.chunks:
                part = out[ch.start : ch.start + ch.size]
                lp = torch.log_softmax(self._head(part) if is_hidden else part.float(), -1)
                if ch.local.shape[0]:
                    vals[ch.dest] = lp[ch.local, ch.target].double()
                    hits[ch.dest] = lp.argmax(-1)[ch.local] == ch.target
                for item, loc in ch.dists:
                    dists[item] = lp[loc]
                del lp
            if not self.overlap and self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        self.stats.head_cpu_seconds += time.process_time() - c0

    def score_items(
        self,
        contexts: Sequence[tuple[int, ...]],
        continuations: Sequence[Sequence[int]],
    ) -> tuple[list[ScoredTokens], dict[int, torch.Tensor]]:
        """Score items (context, continuation) packed many to a forward (see ``packing``).

        Returns per item the log p of each continuation token and whether every token is
        the argmax; for an item with an empty continuation, its fp32 next-token log-prob
        vector instead (second value, by item index). ``launch_items``, then its results."""
        return self.launch_items(contexts, continuations)()

    def launch_items(
        self,
        contexts: Sequence[tuple[int, ...]],
        continuations: Sequence[Sequence[int]],
    ) -> Callable[[], tuple[list[ScoredTokens], dict[int, torch.Tensor]]]:
        """``score_items`` in two phases: plan the items and launch every row, then return
        the function that reads the results (on CUDA it waits for this batch's copies, not for
        the stream: work launched after it runs on).

        On a GPU the host keeps ahead of the device: row r+1's inputs (read positions, ids,
        masks) are built and sent while row r's forward runs, results stay on the device
        until the last row is launched, and one wait reads them all back, when the caller
        asks for them (``overlap`` off: a wait after every forward and head, for timing
        forwards or localising a device error). On the CPU the rows have run when this
        returns. The plan, the rows and every value are the same in both phases as in one."""
        p = plan(contexts, continuations,
                 self.batch_tokens or default_batch_tokens(str(self.device), self.model))
        n_reads = len(p.read_pos)
        read_item = np.repeat(np.arange(len(contexts)), np.diff(p.read_start))
        vals_dev = torch.zeros(n_reads, dtype=torch.float64, device=self.device)
        hits_dev = torch.zeros(n_reads, dtype=torch.bool, device=self.device)
        dists: dict[int, torch.Tensor] = {}
        split = self.head_splits()
        emb = self.model.get_output_embeddings() if split else None
        vocab = int(emb.weight.shape[0]) if emb is not None else int(self.model.config.vocab_size)
        # each row's reads, in read order (one stable sort instead of a scan per row)
        by_row = np.argsort(p.read_row, kind="stable")
        bounds = np.searchsorted(p.read_row[by_row], np.arange(len(p.rows) + 1))
        events = self._row_events(len(p.rows))

        def prepare(r: int) -> _RowWork:
            return self._prepare_row(p.rows[r], by_row[bounds[r] : bounds[r + 1]], p.read_pos,
                                     p.read_target, read_item, vocab)

        nxt = prepare(0) if p.rows and self.overlap else None
        for r in range(len(p.rows)):
            work = nxt if self.overlap else prepare(r)
            assert work is not None
            if events:
                events[r][0].record()
            out, is_hidden = self._row_forward(work)
            if events:
                events[r][1].record()
            # the host builds the next row while the device runs this one (depth 1: the
            # device's queue holds this row's forward and head; more would only hold memory)
            nxt = prepare(r + 1) if self.overlap and r + 1 < len(p.rows) else None
            self._row_head(work, out, is_hidden, vals_dev, hits_dev, dists)
            if events:
                events[r][2].record()
            del out, work
        read_back = self._copy_back(vals_dev, hits_dev, events)

        def results() -> tuple[list[ScoredTokens], dict[int, torch.Tensor]]:
            vals, hits = read_back()
            greedy = (np.logical_and.reduceat(hits, p.read_start[:-1]) if n_reads
                      else hits).tolist()
            starts = p.read_start.tolist()
            flat = vals.tolist()
            return ([ScoredTokens(flat[lo:hi], g)
                     for lo, hi, g in zip(starts, starts[1:], greedy, strict=False)], dists)

        return results

    def _row_events(self, n: int) -> list[tuple[Any, Any, Any]]:
        """CUDA events around each row's forward and head (none off CUDA): device time,
        read once at the end instead of a synchronisation per row."""
        if self.device.type != "cuda":
            return []
        return [tuple(torch.cuda.Event(enable_timing=True) for _ in range(3))  # type: ignore[misc]
                for _ in range(n)]

    def _copy_back(self, vals: torch.Tensor, hits: torch.Tensor, events: list[tuple[Any, Any, Any]],
                   ) -> Callable[[], tuple[np.ndarray, np.ndarray]]:
        """Start the copies of a run's results to the host and return what waits for them: on
        CUDA two asynchronous copies into pinned memory and an event recorded after them; the
        wait (timed as ``wait_cpu_seconds``) is on that event alone, then the rows' event
        times are read. Elsewhere the values are there already."""
        if self.device.type == "cpu":
            return lambda: (vals.numpy(), hits.numpy())
        pin = self.device.type == "cuda"
        host_v = torch.empty(vals.shape, dtype=vals.dtype, pin_memory=pin)
        host_h = torch.empty(hits.shape, dtype=hits.dtype, pin_memory=pin)
        host_v.copy_(vals, non_blocking=pin)
        host_h.copy_(hits, non_blocking=pin)
        copied: Any = None
        if pin:
            copied = torch.cuda.Event()
            copied.record()

        def wait() -> tuple[np.ndarray, np.ndarray]:
            c0 = time.process_time()
            if copied is not None:
                copied.synchronize()
            self.stats.wait_cpu_seconds += time.process_time() - c0
            for start, fwd, head in events:
                self.stats.forward_gpu_seconds += start.elapsed_time(fwd) / 1000
                self.stats.head_gpu_seconds += fwd.elapsed_time(head) / 1000
            return host_v.numpy(), host_h.numpy()

        return wait

    def packing_works(self) -> bool:
        """Whether this architecture honours the packed rows' custom 4D mask and position
        ids (checked once against plain full sequences); if not, the padded paths run."""
        if self._packing_ok is None:
            calls, fed, secs, head = (self.stats.forward_calls, self.stats.tokens_fed,
                                      self.stats.forward_cpu_seconds, self.stats.head_cpu_seconds)
            timed = (self.stats.wait_cpu_seconds, self.stats.forward_gpu_seconds,
                     self.stats.head_gpu_seconds)
            try:
                e = self.eos_id or 0
                ctxs = [(e, 1, 2), (e, 1, 2), (e, 1, 2), (e, 5)]
                conts = [(3, 4, 5), (3, 6), (7, 8), (9, 3, 4)]
                got, _ = self.score_items(ctxs, conts)
                ref = self.score_sequences([c + x for c, x in zip(ctxs, conts, strict=True)],
                                           [len(c) for c in ctxs])
                diff = max(abs(a - b) for g, f in zip(got, ref, strict=True)
                           for a, b in zip(g.logprobs, f.logprobs, strict=True))
                # sums in another order differ by ~1e-5 on a 135M model in fp32, by up to
                # 0.08 in bf16 (random 8B shape on an H100); a wrong mask or wrong positions
                # move log-probs by whole nats
                self.packing_check_diff = float(diff)
                half = next(self.model.parameters()).dtype in (torch.bfloat16, torch.float16)
                self._packing_ok = bool(diff < (PACKING_TOLERANCE_HALF if half else PACKING_TOLERANCE))
            except (TypeError, RuntimeError, ValueError, IndexError):
                self._packing_ok = False
            if not self._packing_ok and self._attention_resolved == "flex":
                # the padded paths run instead: through SDPA, not a FlexAttention recompiled
                # for every batch shape (torch's recompile limit, then its unfused fallback)
                self.model.set_attn_implementation(self._attn_before or "sdpa")
            self.stats.forward_calls, self.stats.tokens_fed = calls, fed
            self.stats.forward_cpu_seconds = secs  # a self-check, not work done for a request
            self.stats.head_cpu_seconds = head
            (self.stats.wait_cpu_seconds, self.stats.forward_gpu_seconds,
             self.stats.head_gpu_seconds) = timed
        return self._packing_ok

    # -- continuation scoring -------------------------------------------------------------

    def score_pairs_shared(
        self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]
    ) -> list[ScoredTokens]:
        """Score (context ids, continuation ids) pairs, one context forward per distinct
        context; results in input order."""
        results: list[ScoredTokens | None] = [None] * len(pairs)
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, (ctx, _) in enumerate(pairs):
            groups.setdefault(tuple(ctx), []).append(i)
        ordered = sorted(groups.items(), key=lambda kv: -len(kv[0]))
        b0 = 0
        while b0 < len(ordered):
            n_ctx = self.rows_per_batch(len(ordered[b0][0])) if self.batch_tokens else 1
            batch = ordered[b0 : b0 + n_ctx]
            b0 += len(batch)
            states = self._run_contexts([c for c, _ in batch], keep_cache=any(
                len(pairs[i][1]) > 1 for _, members in batch for i in members))
            for (_ctx, members), state in zip(batch, states, strict=True):
                multi = [i for i in members if len(pairs[i][1]) > 1]
                last = state.last_logprobs
                top = int(last.argmax())
                for i in members:
                    cont = pairs[i][1]
                    if len(cont) == 1:  # the single-token shortcut
                        results[i] = ScoredTokens([float(last[cont[0]])], top == cont[0])
                multi.sort(key=lambda i: -len(pairs[i][1]))
                start = 0
                while start < len(multi):
                    chunk = multi[start : start + self.rows_per_batch(len(pairs[multi[start]][1]) - 1)]
                    start += len(chunk)
                    feeds = [list(pairs[i][1][:-1]) for i in chunk]
                    use_hidden = self.head_splits()
                    out = self._rows_after_context(state, feeds, hidden=use_hidden)
                    rows_idx: list[int] = []
                    cols_idx: list[int] = []
                    targets: list[int] = []
                    for row, i in enumerate(chunk):
                        cont = pairs[i][1]
                        rows_idx.extend([row] * (len(cont) - 1))
                        cols_idx.extend(range(len(cont) - 1))
                        targets.extend(cont[1:])
                    sel = out[torch.tensor(rows_idx, device=out.device),
                              torch.tensor(cols_idx, device=out.device)]
                    vals, hits = self._gather(sel, torch.tensor(targets, device=out.device),
                                              use_hidden)
                    k = 0
                    for i in chunk:
                        cont = pairs[i][1]
                        n = len(cont) - 1
                        greedy = top == cont[0] and all(hits[k : k + n])
                        results[i] = ScoredTokens([float(last[cont[0]])] + vals[k : k + n], greedy)
                        k += n
                del state
        return [r for r in results if r is not None]

    def score_sequences(
        self, seqs: Sequence[Sequence[int]], first_scored: Sequence[int]
    ) -> list[ScoredTokens]:
        """Full-sequence scoring: log p of tokens ``first_scored[i]:`` of each sequence,
        batched by length with the configured padding side (the reference path)."""
        results: list[ScoredTokens | None] = [None] * len(seqs)
        order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
        left = self.padding_side == "left"
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            width = max(len(seqs[i]) for i in chunk)
            b = len(chunk)
            ids = torch.full((b, width), self.pad_id, dtype=torch.long, device=self.device)
            mask = torch.zeros((b, width), dtype=torch.long, device=self.device)
            offs = []
            for row, i in enumerate(chunk):
                s = list(seqs[i])
                off = width - len(s) if left else 0
                ids[row, off : off + len(s)] = torch.tensor(s, device=self.device)
                mask[row, off : off + len(s)] = 1
                offs.append(off)
            pos = (mask.cumsum(-1) - 1).clamp(min=0)
            logits = self._forward(input_ids=ids, attention_mask=mask, position_ids=pos,
                                   use_cache=False).logits
            for row, i in enumerate(chunk):
                s = list(seqs[i])
                f, off = first_scored[i], offs[row]
                lp = torch.log_softmax(logits[row, off + f - 1 : off + len(s) - 1].float(), -1)
                targets = torch.tensor(s[f:], device=lp.device)
                vals = lp.gather(1, targets[:, None])[:, 0].tolist()
                results[i] = ScoredTokens(vals, bool((lp.argmax(-1) == targets).all()))
        return [r for r in results if r is not None]

    # -- distributions --------------------------------------------------------------------

    def next_token(self, contexts: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """fp32 log-probability vectors of the token after each context."""
        out: list[torch.Tensor] = []
        ordered = sorted(range(len(contexts)), key=lambda i: -len(contexts[i]))
        found: dict[int, torch.Tensor] = {}
        start = 0
        while start < len(ordered):
            n = self.rows_per_batch(len(contexts[ordered[start]])) if self.batch_tokens else 1
            chunk = ordered[start : start + n]
            start += len(chunk)
            for i, st in zip(chunk, self._run_contexts([contexts[i] for i in chunk], False),
                             strict=True):
                found[i] = st.last_logprobs
        out.extend(found[i] for i in range(len(contexts)))
        return out

    # -- search ---------------------------------------------------------------------------

    def _decode_logits(self, kwargs: dict[str, Any], last: torch.Tensor) -> tuple[Any, torch.Tensor]:
        """One forward with a key/value cache: (cache, fp32 logits at position ``last[i]`` of
        row i). Only those positions go through the LM head when it splits off."""
        rows = torch.arange(last.shape[0], device=self.device)
        if self.head_splits():
            self.stats.forward_calls += 1
            c0 = time.process_time()
            with torch.inference_mode():
                out = self.model.base_model(**kwargs)
                logits = self._head(out.last_hidden_state[rows, last])
            self.stats.forward_cpu_seconds += time.process_time() - c0
        else:
            out = self._forward(**kwargs)
            logits = out.logits[rows, last].float()
        return _returned_cache(out), logits

    def _decode_start(self, ctxs: Sequence[Sequence[int]]) -> _Slots:
        """Feed many contexts in one right-padded forward and keep their cache: the slots
        every search and generation step extends (``_decode_step``)."""
        from transformers import DynamicCache

        ids, mask, pos = self._right_padded(ctxs)
        lengths = torch.tensor([len(c) for c in ctxs], device=self.device)
        cache, logits = self._decode_logits(
            {"input_ids": ids, "attention_mask": mask, "position_ids": pos,
             "use_cache": True, **self._with_cache(DynamicCache())}, lengths - 1)
        return _Slots(cache, mask, lengths, logits)

    def _decode_step(self, slots: _Slots, parents: Sequence[int], tokens: Sequence[int]) -> _Slots:
        """New slots: slot j continues slot ``parents[j]`` by ``tokens[j]``. One token per slot
        is fed (the cache holds the rest), so a step costs one forward for every live
        hypothesis of every request in the batch. Right padding sits between a context and
        its new tokens; the attention mask hides it and position ids skip it."""
        idx = torch.tensor(list(parents), dtype=torch.long, device=self.device)
        cache = slots.cache
        cache.reorder_cache(idx)
        n = len(parents)
        mask = torch.cat([slots.mask.index_select(0, idx),
                          torch.ones((n, 1), dtype=torch.long, device=self.device)], dim=1)
        pos = slots.next_pos.index_select(0, idx)
        ids = torch.tensor([[t] for t in tokens], dtype=torch.long, device=self.device)
        cache, logits = self._decode_logits(
            {"input_ids": ids, "attention_mask": mask, "position_ids": pos[:, None],
             "use_cache": True, **self._with_cache(cache)},
            torch.zeros(n, dtype=torch.long, device=self.device))
        return _Slots(cache, mask, pos + 1, logits)

    def _decode_groups(self, ctxs: Sequence[Sequence[int]], width: int, new: int) -> list[list[int]]:
        """Indices of requests decoded together, longest contexts first: as many as keep
        each forward within the row budget (``batch_tokens``, else ``batch_size`` rows of 64
        tokens) — the first forward feeds their contexts, each later one ``width`` tokens
        per request — and the key/value cache within twice the budget in token slots
        (``width`` slots of context + ``new`` tokens each). A step's cost is mostly reading
        the weights, so more slots per forward is nearly free until the budget is reached."""
        budget = self.batch_tokens or self.batch_size * 64
        order = sorted(range(len(ctxs)), key=lambda i: -len(ctxs[i]))
        groups: list[list[int]] = []
        start = 0
        while start < len(order):
            longest = len(ctxs[order[start]])
            n = max(1, min(budget // max(1, longest, width),
                           2 * budget // max(1, width * (longest + new))))
            groups.append(order[start : start + n])
            start += n
        return groups

    def beam_search_many(
        self, searches: Sequence[tuple[Sequence[int], int, int, TrieNode | None]],
    ) -> list[list[tuple[list[int], float]]]:
        """Beam searches ``(context, num_beams, max_new_tokens, trie)``, many at once: their
        contexts in one forward, then one forward per step for every live beam of every
        search (one new token each, the rest from the cache). With a trie only its token
        paths are expanded and only complete entries are returned. Finished hypotheses of
        each search, best first."""
        out: list[list[tuple[list[int], float]]] = [[] for _ in searches]
        width = max((s[1] for s in searches), default=1)
        new = max((s[2] for s in searches), default=1)
        for group in self._decode_groups([s[0] for s in searches], width, new):
            for i, found in zip(group, self._beam_group([searches[i] for i in group]),
                                strict=True):
                out[i] = found
        return out

    def _beam_group(
        self, searches: Sequence[tuple[Sequence[int], int, int, TrieNode | None]],
    ) -> list[list[tuple[list[int], float]]]:
        eos = self.eos_id
        slots = self._decode_start([s[0] for s in searches])
        # per search: live hypotheses (tokens, score, trie node, slot)
        live: list[list[tuple[list[int], float, TrieNode | None, int]]] = [
            [([], 0.0, s[3], i)] for i, s in enumerate(searches)]
        finished: list[list[tuple[list[int], float]]] = [[] for _ in searches]
        for step in range(max(s[2] for s in searches)):
            parents: list[int] = []
            tokens: list[int] = []
            for i, (_, num_beams, max_new, _) in enumerate(searches):
                if not live[i] or step >= max_new:
                    continue
                cands: list[tuple[list[int], float, TrieNode | None, int]] = []
                for seq, score, node, slot in live[i]:
                    dist = torch.log_softmax(slots.logits[slot], -1)
                    if node is not None:
                        toks = list(node.children)
                        if not toks:
                            continue
                        vals = dist[torch.tensor(toks, device=dist.device)].tolist()
                        for t, v in zip(toks, vals, strict=True):
                            cands.append((seq + [t], score + v, node.children[t], slot))
                    else:
                        top_v, top_t = dist.topk(min(num_beams, dist.shape[0]))
                        for tv, tt in zip(top_v.tolist(), top_t.tolist(), strict=True):
                            cands.append((seq + [tt], score + tv, None, slot))
                cands.sort(key=lambda c: -c[1])
                nxt: list[tuple[list[int], float, TrieNode | None, int]] = []
                for seq, score, node, slot in cands:
                    done = node.terminal if node is not None else (eos is not None and seq[-1] == eos)
                    if done:
                        finished[i].append((seq, score))
                    extendable = not done or (node is not None and bool(node.children))
                    if extendable and len(nxt) < num_beams:
                        nxt.append((seq, score, node, slot))
                finished[i].sort(key=lambda f: -f[1])
                if len(finished[i]) >= num_beams and (
                    not nxt or nxt[0][1] < finished[i][num_beams - 1][1]
                ):
                    nxt = []  # log-probabilities only fall: no live beam can still enter the top
                live[i] = []
                for seq, score, node, slot in nxt:
                    if step + 1 < max_new:  # it gets a slot in the next step
                        live[i].append((seq, score, node, len(parents)))
                        parents.append(slot)
                        tokens.append(seq[-1])
                    else:
                        live[i].append((seq, score, node, -1))
            if not parents:
                break
            slots = self._decode_step(slots, parents, tokens)
        results = []
        for i, (_, num_beams, _, trie) in enumerate(searches):
            if trie is None:
                finished[i].extend((seq, score) for seq, score, _, _ in live[i])
            finished[i].sort(key=lambda f: -f[1])
            results.append(finished[i][:num_beams])
        return results

    def generate_many(
        self,
        runs: Sequence[tuple[Sequence[int], int, float, float, int]],
        stop_check: Any,
    ) -> list[tuple[list[int], float]]:
        """Greedy (temperature 0) or seeded nucleus sampling ``(context, max_new_tokens,
        temperature, top_p, seed)``, many at once with one key/value cache; each run draws
        from its own seeded generator, so a run's output does not depend on its batch.
        ``stop_check(i, ids) -> bool`` ends run i early (stop strings)."""
        out: list[tuple[list[int], float]] = [([], 0.0) for _ in runs]
        new = max((r[1] for r in runs), default=1)
        for group in self._decode_groups([r[0] for r in runs], 1, new):
            slots = self._decode_start([runs[i][0] for i in group])
            gens = {i: torch.Generator(device="cpu").manual_seed(runs[i][4]) for i in group}
            active = list(range(len(group)))  # slot -> position in group
            ids: dict[int, list[int]] = {i: [] for i in group}
            total: dict[int, float] = {i: 0.0 for i in group}
            while active:
                parents: list[int] = []
                tokens: list[int] = []
                still: list[int] = []
                for slot, g in enumerate(active):
                    i = group[g]
                    _, max_new, temperature, top_p, _ = runs[i]
                    logits = slots.logits[slot]
                    lp = torch.log_softmax(logits, -1)
                    if temperature == 0:
                        tok = int(lp.argmax())
                    else:
                        probs = torch.softmax(logits / temperature, -1).cpu()
                        if top_p < 1.0:
                            sp, si = probs.sort(descending=True)
                            keep = sp.cumsum(0) - sp < top_p
                            probs = torch.zeros_like(probs).scatter(0, si[keep], sp[keep])
                        tok = int(torch.multinomial(probs, 1, generator=gens[i]))
                    total[i] += float(lp[tok])
                    ids[i].append(tok)
                    if len(ids[i]) >= max_new or tok == self.eos_id or stop_check(i, ids[i]):
                        continue
                    parents.append(slot)
                    tokens.append(tok)
                    still.append(g)
                active = still
                if active:
                    slots = self._decode_step(slots, parents, tokens)
            for i in group:
                out[i] = (ids[i], total[i])
        return out
