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

    _head_ok: bool | None = None
    _packing_ok: bool | None = None
    #: pack continuations as one trie row with a 4D mask (else padded rows)
    pack: bool = True

    def _forward(self, **kwargs: Any) -> Any:
        self.stats.forward_calls += 1
        with torch.inference_mode():
            return self.model(**kwargs)

    # -- contexts -------------------------------------------------------------------------

    def _run_context(self, ctx: Sequence[int], keep_cache: bool) -> _ContextState:
        from transformers import DynamicCache

        ids = torch.tensor([list(ctx)], device=self.device)
        out = self._forward(input_ids=ids, use_cache=keep_cache, logits_to_keep=1,
                            past_key_values=DynamicCache() if keep_cache else None)
        last = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
        kv = None
        if keep_cache:
            cache = out.past_key_values
            kv = [(layer.keys, layer.values) for layer in cache.layers]
        return _ContextState(len(ctx), kv, last)

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
        width = max(len(c) for c in ctxs)
        ids = torch.full((b, width), self.pad_id, dtype=torch.long, device=self.device)
        mask = torch.zeros((b, width), dtype=torch.long, device=self.device)
        for i, c in enumerate(ctxs):
            ids[i, : len(c)] = torch.tensor(list(c), device=self.device)
            mask[i, : len(c)] = 1
        pos = torch.arange(width, device=self.device).expand(b, -1)
        self.stats.forward_calls += 1
        with torch.inference_mode():
            out = self.model.base_model(input_ids=ids, attention_mask=mask, position_ids=pos,
                                        past_key_values=DynamicCache() if keep_cache else None,
                                        use_cache=keep_cache)
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
                      for layer in out.past_key_values.layers]
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
                  "past_key_values": cache, "use_cache": True}
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

    # -- packed continuations -------------------------------------------------------------

    def _packed_hidden(
        self, state: _ContextState, tokens: list[int], parents: list[int], depth: list[int]
    ) -> torch.Tensor:
        """Feed a token trie as ONE row after the cached context: node i sees the context,
        its ancestors and itself (a 4D mask), at position context+depth-1. No padding, no
        copy of the context cache per continuation, shared prefixes fed once.
        Returns hidden states (N, H) (or logits (N, V) when the head does not split)."""
        from transformers import DynamicCache

        assert state.kv is not None
        n = len(tokens)
        allowed = torch.zeros((n, state.length + n), dtype=torch.bool)
        allowed[:, : state.length] = True
        for i in range(n):
            allowed[i, state.length + i] = True
            p = parents[i]
            if p >= 0:
                allowed[i, state.length:] |= allowed[p, state.length:]
        mask: torch.Tensor = allowed[None, None].to(self.device)
        if self.model.config._attn_implementation != "sdpa":
            neg = torch.finfo(next(self.model.parameters()).dtype).min
            mask = torch.zeros(mask.shape, device=self.device).masked_fill(~mask, neg)
        ids = torch.tensor([tokens], device=self.device)
        pos = torch.tensor([[state.length + d - 1 for d in depth]], device=self.device)
        cache = DynamicCache([(k, v) for k, v in state.kv])
        kwargs = {"input_ids": ids, "attention_mask": mask, "position_ids": pos,
                  "past_key_values": cache, "use_cache": True}
        self.stats.forward_calls += 1
        with torch.inference_mode():
            if self.head_splits():
                return self.model.base_model(**kwargs).last_hidden_state[0]
            return self.model(**kwargs).logits[0]

    def packing_works(self) -> bool:
        """Whether this architecture honours a custom 4D mask (checked once against the
        padded path on a few tokens); if not, continuations are padded rows."""
        if self._packing_ok is None:
            calls = self.stats.forward_calls
            try:
                ctx = [self.eos_id or 0, 1, 2]
                conts = [[3, 4, 5], [3, 6], [7, 8]]
                state = self._run_context(ctx, keep_cache=True)
                rows = self._rows_after_context(state, conts, hidden=False)
                tokens, parents, depth = [3, 4, 5, 6, 7, 8], [-1, 0, 1, 0, -1, 4], [1, 2, 3, 2, 1, 2]
                packed = self._packed_hidden(state, tokens, parents, depth)
                if self.head_splits():
                    packed = self._head(packed)
                ref = torch.stack([rows[0, 0], rows[0, 1], rows[0, 2], rows[1, 1], rows[2, 0],
                                   rows[2, 1]]).float()
                diff = (torch.log_softmax(packed.float(), -1) - torch.log_softmax(ref, -1)).abs()
                # fp32 sums in another order differ by ~1e-4 on a 135M model; a wrong mask
                # moves log-probs by whole nats
                self._packing_ok = bool(diff.max() < 1e-2)
            except (TypeError, RuntimeError, ValueError, IndexError):
                self._packing_ok = False
            self.stats.forward_calls = calls  # a self-check, not work done for a request
        return self._packing_ok

    def _score_packed(
        self, state: _ContextState, conts: list[Sequence[int]]
    ) -> list[tuple[list[float], list[bool]]]:
        """Per continuation: log p and argmax hits of tokens 2..n, from packed trie rows."""
        index: dict[tuple[int, ...], int] = {}
        tokens: list[int] = []
        parents: list[int] = []
        depth: list[int] = []
        for c in conts:
            parent = -1
            for k in range(1, len(c)):
                key = tuple(c[:k])
                if key not in index:
                    index[key] = len(tokens)
                    tokens.append(c[k - 1])
                    parents.append(parent)
                    depth.append(k)
                parent = index[key]
        hidden = self._packed_hidden(state, tokens, parents, depth)
        nodes = [index[tuple(c[:k])] for c in conts for k in range(1, len(c))]
        targets = [c[k] for c in conts for k in range(1, len(c))]
        vals, hits = self._gather_nodes(hidden, nodes, targets, self.head_splits())
        out = []
        k = 0
        for c in conts:
            n = len(c) - 1
            out.append((vals[k : k + n], hits[k : k + n]))
            k += n
        return out

    def _gather_nodes(
        self, out: torch.Tensor, nodes: list[int], targets: list[int], is_hidden: bool,
        chunk: int = 64,
    ) -> tuple[list[float], list[bool]]:
        """Like ``_gather`` but each trie node goes through the LM head once, however many
        continuations read it (" University of" → " Oxford", " Vienna", ...)."""
        uniq = sorted(set(nodes))
        where = {n: i for i, n in enumerate(uniq)}
        vals = [0.0] * len(nodes)
        hits = [False] * len(nodes)
        by_row: dict[int, list[int]] = {}
        for k, n in enumerate(nodes):
            by_row.setdefault(where[n], []).append(k)
        for s in range(0, len(uniq), chunk):
            rows = uniq[s : s + chunk]
            part = out[torch.tensor(rows, device=out.device)]
            logits = self._head(part) if is_hidden else part.float()
            lp = torch.log_softmax(logits, dim=-1)
            best = lp.argmax(-1).tolist()
            r_idx: list[int] = []
            t_idx: list[int] = []
            ks: list[int] = []
            for r in range(len(rows)):
                for k in by_row[s + r]:
                    r_idx.append(r)
                    t_idx.append(targets[k])
                    ks.append(k)
            got = lp[torch.tensor(r_idx), torch.tensor(t_idx)].tolist()
            for k, r, t, v in zip(ks, r_idx, t_idx, got, strict=True):
                vals[k] = v
                hits[k] = best[r] == t
        return vals, hits

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
                if multi and self.pack and self.packing_works():
                    budget = self.batch_tokens or 1024
                    group: list[int] = []
                    fed = 0
                    for i in [*multi, -1]:
                        n = len(pairs[i][1]) - 1 if i >= 0 else 0
                        if group and (i < 0 or fed + n > budget):
                            scored = self._score_packed(state, [pairs[j][1] for j in group])
                            for j, (vals, hits) in zip(group, scored, strict=True):
                                cont = pairs[j][1]
                                results[j] = ScoredTokens([float(last[cont[0]])] + vals,
                                                          top == cont[0] and all(hits))
                            group, fed = [], 0
                        if i >= 0:
                            group.append(i)
                            fed += n
                    multi = []
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
