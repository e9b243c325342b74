"""Causal LM backend: shared-prefix continuation scoring, full-sequence scoring, next-token
distributions, beam search (plain and trie-constrained) and generation.

Shared prefix (DESIGN §3, harness #1351): each distinct context runs once; its key/value
cache is broadcast to a batch of continuations, so a continuation costs only its own tokens.
The first continuation token is read from the context's last logits, so every single-token
continuation of a context comes from that one forward pass, and the last token of a
continuation is never fed (nothing reads its output). log_softmax is taken in fp32 on the
gathered positions only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kgprobe.probing.backends.base import Backend, ScoredTokens, TrieNode


@dataclass
class _ContextState:
    """A context's key/value cache (per layer) and the log-probabilities after it."""

    length: int
    kv: list[tuple[torch.Tensor, torch.Tensor]] | None
    last_logprobs: torch.Tensor  # (V,) fp32


class CausalBackend(Backend):
    """All model calls for decoder-only models."""

    def _forward(self, **kwargs: Any) -> Any:
        self.stats.forward_calls += 1
        with torch.inference_mode():
            return self.model(**kwargs)

    # -- contexts -------------------------------------------------------------------------

    def _run_context(self, ctx: Sequence[int], keep_cache: bool) -> _ContextState:
        from transformers import DynamicCache

        ids = torch.tensor([list(ctx)], device=self.device)
        out = self._forward(input_ids=ids, use_cache=keep_cache,
                            past_key_values=DynamicCache() if keep_cache else None)
        last = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
        kv = None
        if keep_cache:
            cache = out.past_key_values
            kv = [(layer.keys, layer.values) for layer in cache.layers]
        return _ContextState(len(ctx), kv, last)

    def _rows_after_context(
        self, state: _ContextState, rows: Sequence[Sequence[int]]
    ) -> torch.Tensor:
        """Feed ``rows`` (right-padded) after the cached context: fp32 logits (B, T, V)."""
        from transformers import DynamicCache

        assert state.kv is not None
        b = len(rows)
        width = max(len(r) for r in rows)
        pad = self.pad_id
        ids = torch.full((b, width), pad, dtype=torch.long, device=self.device)
        mask = torch.zeros((b, state.length + width), dtype=torch.long, device=self.device)
        mask[:, : state.length] = 1
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(list(r), device=self.device)
            mask[i, state.length : state.length + len(r)] = 1
        pos = torch.arange(state.length, state.length + width, device=self.device).expand(b, -1)
        cache = DynamicCache(
            [(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1)) for k, v in state.kv]
        )
        out = self._forward(input_ids=ids, attention_mask=mask, position_ids=pos,
                            past_key_values=cache, use_cache=True)
        return out.logits

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
        for ctx, members in sorted(groups.items(), key=lambda kv: -len(kv[0])):
            multi = [i for i in members if len(pairs[i][1]) > 1]
            state = self._run_context(ctx, keep_cache=bool(multi))
            last = state.last_logprobs
            top = int(last.argmax())
            for i in members:
                cont = pairs[i][1]
                if len(cont) == 1:  # the single-token shortcut
                    results[i] = ScoredTokens([float(last[cont[0]])], top == cont[0])
            multi.sort(key=lambda i: -len(pairs[i][1]))
            for start in range(0, len(multi), self.batch_size):
                chunk = multi[start : start + self.batch_size]
                feeds = [list(pairs[i][1][:-1]) for i in chunk]
                logits = self._rows_after_context(state, feeds)
                for row, i in enumerate(chunk):
                    cont = list(pairs[i][1])
                    n = len(cont)
                    lp = torch.log_softmax(logits[row, : n - 1].float(), dim=-1)
                    targets = torch.tensor(cont[1:], device=lp.device)
                    vals = [float(last[cont[0]])] + lp.gather(1, targets[:, None])[:, 0].tolist()
                    greedy = top == cont[0] and bool((lp.argmax(-1) == targets).all())
                    results[i] = ScoredTokens(vals, greedy)
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
        return [self._run_context(c, keep_cache=False).last_logprobs for c in contexts]

    # -- search ---------------------------------------------------------------------------

    def _next_dists(self, state: _ContextState, rows: Sequence[Sequence[int]]) -> torch.Tensor:
        """Log-probabilities after context + each row (rows may be empty): (n, V) fp32."""
        out = torch.empty((len(rows), state.last_logprobs.shape[0]), device=self.device)
        fed = [i for i, r in enumerate(rows) if r]
        for i, r in enumerate(rows):
            if not r:
                out[i] = state.last_logprobs
        for start in range(0, len(fed), self.batch_size):
            chunk = fed[start : start + self.batch_size]
            logits = self._rows_after_context(state, [rows[i] for i in chunk])
            for row, i in enumerate(chunk):
                out[i] = torch.log_softmax(logits[row, len(rows[i]) - 1].float(), -1)
        return out

    def beam_search(
        self,
        ctx: Sequence[int],
        num_beams: int,
        max_new_tokens: int,
        trie: TrieNode | None,
    ) -> list[tuple[list[int], float]]:
        """Beam search; with ``trie`` only token paths of the trie are expanded and only
        complete entries are returned. Finished hypotheses, best first."""
        state = self._run_context(ctx, keep_cache=True)
        eos = self.eos_id
        live: list[tuple[list[int], float, TrieNode | None]] = [([], 0.0, trie)]
        finished: list[tuple[list[int], float]] = []
        for _ in range(max_new_tokens):
            if not live:
                break
            dists = self._next_dists(state, [h[0] for h in live])
            cands: list[tuple[list[int], float, TrieNode | None]] = []
            for (seq, score, node), dist in zip(live, dists, strict=True):
                if node is not None:
                    toks = list(node.children)
                    if not toks:
                        continue
                    vals = dist[torch.tensor(toks, device=dist.device)].tolist()
                    for t, v in zip(toks, vals, strict=True):
                        cands.append((seq + [t], score + v, node.children[t]))
                else:
                    v, t = dist.topk(min(num_beams, dist.shape[0]))
                    for tv, tt in zip(v.tolist(), t.tolist(), strict=True):
                        cands.append((seq + [tt], score + tv, None))
            cands.sort(key=lambda c: -c[1])
            live = []
            for seq, score, node in cands:
                done = node.terminal if node is not None else (eos is not None and seq[-1] == eos)
                if done:
                    finished.append((seq, score))
                extendable = not done or (node is not None and bool(node.children))
                if extendable and len(live) < num_beams:
                    live.append((seq, score, node))
            finished.sort(key=lambda f: -f[1])
            if len(finished) >= num_beams and (
                not live or live[0][1] < finished[num_beams - 1][1]
            ):
                break  # log-probabilities only fall: no live beam can still enter the top
        if trie is None:
            finished.extend((seq, score) for seq, score, _ in live)
        finished.sort(key=lambda f: -f[1])
        return finished[:num_beams]

    def generate(
        self,
        ctx: Sequence[int],
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        seed: int,
        stop_check: Any,
    ) -> tuple[list[int], float]:
        """Greedy (temperature 0) or seeded nucleus sampling with an incremental KV cache.

        ``stop_check(ids) -> bool`` ends generation early (stop strings)."""
        from transformers import DynamicCache

        gen = torch.Generator(device="cpu").manual_seed(seed)
        cache = DynamicCache()
        ids = torch.tensor([list(ctx)], device=self.device)
        out_ids: list[int] = []
        total = 0.0
        length = len(ctx)
        for _ in range(max_new_tokens):
            pos = torch.arange(length - ids.shape[1], length, device=self.device)[None]
            out = self._forward(input_ids=ids, position_ids=pos, past_key_values=cache,
                                use_cache=True)
            cache = out.past_key_values
            logits = out.logits[0, -1].float()
            lp = torch.log_softmax(logits, -1)
            if temperature == 0:
                tok = int(lp.argmax())
            else:
                probs = torch.softmax(logits / temperature, -1).cpu()
                if top_p < 1.0:
                    sp, si = probs.sort(descending=True)
                    keep = sp.cumsum(0) - sp < top_p
                    probs = torch.zeros_like(probs).scatter(0, si[keep], sp[keep])
                tok = int(torch.multinomial(probs, 1, generator=gen))
            total += float(lp[tok])
            out_ids.append(tok)
            length += 1
            if tok == self.eos_id or stop_check(out_ids):
                break
            ids = torch.tensor([[tok]], device=self.device)
        return out_ids, total
