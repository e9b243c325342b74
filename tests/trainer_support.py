"""A few sentences as a training set for a real ``transformers.Trainer``, shared by
tests/probing/test_probe_set_callback.py and the docs' Python blocks (tests/project/test_docs_run.py)."""

from __future__ import annotations

from typing import Any

import torch

SENTENCES = ["The capital of France is Paris.", "Joe Biden is a citizen of the United States.",
             "The head of state of Germany is the president.", "Marie Curie is a citizen of France."]


class _Texts(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, tok: Any) -> None:
        enc = tok(SENTENCES * 4, padding="max_length", max_length=16, truncation=True, return_tensors="pt")
        self.ids, self.mask = enc["input_ids"], enc["attention_mask"]

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "attention_mask": self.mask[i], "labels": self.ids[i]}
