"""Masked LM backend: pseudo-log-likelihood, within-word left-to-right (PLL-word-l2r).

To score token i, mask it and the tokens to its right that belong to the same word, so a
multi-token word is not scored from its own visible pieces (Kauf & Ivanova 2023; the
original PLL inflates multi-token words). One row per scored token, batched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from kgprobe.probing.backends.base import Backend, ScoredTokens
from kgprobe.probing.tokenization import SpanEncoding


class MaskedBackend(Backend):
    """All model calls for encoder-only masked LMs."""

    def __init__(self, model: Any, tokenizer: Any, **kwargs: Any) -> None:
        super().__init__(model, tokenizer, **kwargs)
        if tokenizer.mask_token_id is None:
            from kgprobe.errors import ConfigError

            raise ConfigError("masked LM tokenizer has no mask token")
        self.mask_id: int = tokenizer.mask_token_id

    def pll(self, encs: Sequence[SpanEncoding], only_span: Sequence[bool]) -> list[ScoredTokens]:
        """Per-token PLL of each text's span tokens (``only_span``) or all scorable tokens.

        Returns, per text, the values in token order over the positions scored."""
        rows: list[tuple[int, int, list[int]]] = []  # (text index, position, masked ids)
        for t, enc in enumerate(encs):
            ids = list(enc.ids)
            positions = [
                i for i in range(len(ids))
                if enc.scorable[i] and (enc.in_span[i] or not only_span[t])
            ]
            for i in positions:
                row = ids.copy()
                word = enc.word_ids[i]
                for j in range(i, len(ids)):
                    if j == i or (word is not None and enc.word_ids[j] == word):
                        row[j] = self.mask_id
                rows.append((t, i, row))
        vals: list[list[float]] = [[] for _ in encs]
        greedy = [True] * len(encs)
        rows.sort(key=lambda r: -len(r[2]))
        for start in range(0, len(rows), self.batch_size):
            chunk = rows[start : start + self.batch_size]
            width = max(len(r[2]) for r in chunk)
            ids_t = torch.full((len(chunk), width), self.pad_id, dtype=torch.long,
                               device=self.device)
            mask = torch.zeros_like(ids_t)
            for k, (_, _, row) in enumerate(chunk):
                ids_t[k, : len(row)] = torch.tensor(row, device=self.device)
                mask[k, : len(row)] = 1
            self.stats.forward_calls += 1
            with torch.inference_mode():
                logits = self.model(input_ids=ids_t, attention_mask=mask).logits
            for k, (t, i, _) in enumerate(chunk):
                lp = torch.log_softmax(logits[k, i].float(), -1)
                target = encs[t].ids[i]
                vals[t].append(float(lp[target]))
                greedy[t] = greedy[t] and int(lp.argmax()) == target
        # rows were sorted by length only, so restore token order per text
        ordered: list[ScoredTokens] = []
        for t, enc in enumerate(encs):
            positions = [
                i for i in range(len(enc.ids))
                if enc.scorable[i] and (enc.in_span[i] or not only_span[t])
            ]
            by_pos = dict(zip([r[1] for r in rows if r[0] == t], vals[t], strict=True))
            ordered.append(ScoredTokens([by_pos[i] for i in positions], greedy[t]))
        return ordered
