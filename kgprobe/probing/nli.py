"""A natural-language-inference classifier (any local Hugging Face sequence-classification
directory whose labels name a contradiction class, e.g. microsoft/deberta-large-mnli, the one
the FACTOR paper uses): the probability that a hypothesis contradicts a premise. A model
call, so it lives in the scoring package; FACTOR's generation pipeline asks it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgprobe.errors import ConfigError


def contradiction_index(id2label: dict[Any, Any]) -> int:
    """The class index whose label is "contradiction" (any case, MNLI's ``CONTRADICTION`` or
    ``contradiction``); no guess from the position, since NLI models order classes differently."""
    found = [int(i) for i, lab in id2label.items() if str(lab).strip().lower() == "contradiction"]
    if len(found) != 1:
        names = ", ".join(str(v) for v in id2label.values())
        raise ConfigError(f"NLI model has no single 'contradiction' label (labels: {names})")
    return found[0]


@dataclass
class NliModel:
    """A loaded NLI classifier; ``fingerprint`` names the weights (for item provenance)."""

    name: str
    model: Any
    tokenizer: Any
    contradiction: int
    fingerprint: str
    max_length: int = 512

    @classmethod
    def load(cls, path: str, *, threads: int = 1, device: str = "cpu") -> NliModel:
        """Load a local directory (the hub only when reachable; none is reachable here)."""
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        torch.set_num_threads(threads)
        p = Path(path).expanduser()
        if not p.exists() and path.startswith((".", "/", "~")):
            raise ConfigError(f"NLI model directory {p} does not exist")
        if p.exists() and not (p / "config.json").is_file():
            raise ConfigError(f"{p} is not a Hugging Face model directory (no config.json)")
        try:
            tok = AutoTokenizer.from_pretrained(str(p) if p.exists() else path,
                                                local_files_only=p.exists())
            model = AutoModelForSequenceClassification.from_pretrained(
                str(p) if p.exists() else path, local_files_only=p.exists())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot load NLI model {path!r}: {str(exc).splitlines()[0]}") from None
        model.to(device).eval()
        idx = contradiction_index(dict(model.config.id2label))
        digest = hashlib.sha256()
        if p.is_dir():
            for f in sorted(p.iterdir()):
                if f.is_file():
                    digest.update(f.name.encode())
                    digest.update(str(f.stat().st_size).encode())
        else:
            digest.update(path.encode())
        limit = getattr(tok, "model_max_length", 512)
        return cls(path, model, tok, idx, digest.hexdigest()[:16],
                   min(512, limit) if isinstance(limit, int) else 512)

    def contradiction_probs(self, pairs: Sequence[tuple[str, str]], batch_size: int = 16) -> list[float]:
        """p(contradiction | premise, hypothesis) for each (premise, hypothesis), softmax over
        the model's classes."""
        import torch

        out: list[float] = []
        dev = next(self.model.parameters()).device
        for i in range(0, len(pairs), batch_size):
            chunk = pairs[i:i + batch_size]
            enc = self.tokenizer([p for p, _ in chunk], [h for _, h in chunk], padding=True,
                                 truncation=True, max_length=self.max_length, return_tensors="pt")
            with torch.no_grad():
                logits = self.model(**{k: v.to(dev) for k, v in enc.items()}).logits
            probs = torch.softmax(logits.float(), dim=-1)[:, self.contradiction]
            out.extend(float(x) for x in probs)
        return out
