"""Seq2seq backend: log p(target | source) with teacher forcing, batched and padded.

Span scoring (T5 style) masks the span in the source with a sentinel and scores the span
as the target between sentinels; the engine builds those texts, this class runs them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kgprobe.probing.backends.base import Backend, ScoredTokens


class Seq2SeqBackend(Backend):
    """All model calls for encoder-decoder models."""

    def score(
        self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]
    ) -> list[ScoredTokens]:
        """Per-token log p of each target given its source; results in input order."""
        results: list[ScoredTokens | None] = [None] * len(pairs)
        order = sorted(range(len(pairs)), key=lambda i: -(len(pairs[i][0]) + len(pairs[i][1])))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            b = len(chunk)
            w_src = max(len(pairs[i][0]) for i in chunk)
            w_tgt = max(len(pairs[i][1]) for i in chunk)
            src = torch.full((b, w_src), self.pad_id, dtype=torch.long, device=self.device)
            src_mask = torch.zeros_like(src)
            labels = torch.full((b, w_tgt), -100, dtype=torch.long, device=self.device)
            for row, i in enumerate(chunk):
                s, t = list(pairs[i][0]), list(pairs[i][1])
                src[row, : len(s)] = torch.tensor(s, device=self.device)
                src_mask[row, : len(s)] = 1
                labels[row, : len(t)] = torch.tensor(t, device=self.device)
            self.stats.forward_calls += 1
            with torch.inference_mode():
                logits = self.model(input_ids=src, attention_mask=src_mask, labels=labels).logits
            for row, i in enumerate(chunk):
                t = list(pairs[i][1])
                lp = torch.log_softmax(logits[row, : len(t)].float(), -1)
                targets = torch.tensor(t, device=lp.device)
                vals = lp.gather(1, targets[:, None])[:, 0].tolist()
                results[i] = ScoredTokens(vals, bool((lp.argmax(-1) == targets).all()))
        return [r for r in results if r is not None]

    def next_token(self, sources: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """Distribution of the first decoder token given each source."""
        out = []
        start_id = self.model.config.decoder_start_token_id
        for s in sources:
            src = torch.tensor([list(s)], device=self.device)
            dec = torch.tensor([[start_id]], device=self.device)
            self.stats.forward_calls += 1
            with torch.inference_mode():
                logits = self.model(input_ids=src, decoder_input_ids=dec).logits
            out.append(torch.log_softmax(logits[0, -1].float(), -1))
        return out
