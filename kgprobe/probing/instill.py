"""Implicit knowledge instillation: a few fine-tuning steps on a fact, on a *copy* of a model
(information-theoretic measures). A model call, so it lives in the scoring package.

The copy gets its own fingerprint (original fingerprint + texts + settings), so scores of the
fine-tuned model never mix with the original's in the score cache.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Sequence
from dataclasses import replace

from kgprobe.errors import ConfigError
from kgprobe.probing.models import LoadedModel


def finetune_copy(
    lm: LoadedModel,
    texts: Sequence[str],
    *,
    steps: int = 5,
    lr: float = 1e-3,
    seed: int = 0,
) -> LoadedModel:
    """Fine-tune a deep copy of a causal model on ``texts`` (language-modelling loss over the
    whole text, Adam, fp32) for ``steps`` steps; the original is untouched."""
    import torch

    if lm.kind != "causal":
        raise ConfigError("implicit instillation is implemented for causal models")
    if steps < 1 or not texts:
        raise ConfigError("implicit instillation needs steps >= 1 and at least one text")
    torch.manual_seed(seed)
    model = copy.deepcopy(lm.model)
    model.train()
    tok = lm.tokenization
    batch = []
    for t in texts:
        ids = tok._with_prefix(tok.encode(t))
        if len(ids) < 2:
            raise ConfigError(f"text too short to train on: {t!r}")
        batch.append(ids)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    device = next(model.parameters()).device
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.zeros((), device=device)
        for ids in batch:
            x = torch.tensor([ids], device=device)
            loss = loss + model(input_ids=x, labels=x).loss
        (loss / len(batch)).backward()
        opt.step()
    model.eval()
    h = hashlib.sha256(
        (lm.fingerprint + "|instill|" + "\x1f".join(texts) + f"|{steps}|{lr}|{seed}").encode()
    ).hexdigest()
    return replace(lm, model=model, fingerprint=h, name=f"{lm.name}+instilled")
