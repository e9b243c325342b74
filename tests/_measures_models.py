"""A tiny random NLI model (a BERT sequence classifier) for the FACTOR pipeline's tests, built
with the tokenizer of the scoring tests' fixtures. (The long-context GPT-2 that FACTOR's
prefixes need is ``_scoring_models.build("gpt2", path, positions=4096)``.)"""

from __future__ import annotations

from pathlib import Path

import torch


def build_tiny_nli(path: Path) -> Path:
    """A tiny random BERT sequence classifier with MNLI's label names (the order of
    microsoft/deberta-large-mnli: contradiction, neutral, entailment): an NLI model directory
    as ``AutoModelForSequenceClassification`` loads it."""
    from _scoring_models import _bert_tokenizer
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    path.mkdir(parents=True, exist_ok=True)
    _bert_tokenizer(path)
    tok = AutoTokenizer.from_pretrained(path)
    labels = {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}
    model = BertForSequenceClassification(BertConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, max_position_embeddings=512, pad_token_id=0, num_labels=3,
        id2label=labels, label2id={v: k for k, v in labels.items()}))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)
    model.save_pretrained(path)
    return path
