"""A tiny random GPT-2 with a long context (FACTOR prefixes run to thousands of tokens under
a 400-token vocabulary), built with the tokenizer of the scoring tests' fixtures."""

from __future__ import annotations

from pathlib import Path

import torch
from _scoring_models import _gpt2_tokenizer


def build_long_gpt2(path: Path, n_positions: int = 4096) -> Path:
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    path.mkdir(parents=True, exist_ok=True)
    _gpt2_tokenizer(path)
    tok = AutoTokenizer.from_pretrained(path)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=n_positions, n_embd=32,
                                       n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)
    model.save_pretrained(path)
    return path


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
