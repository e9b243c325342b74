"""Tiny random GPT-2 / Llama / BERT / T5 models for the scoring tests.

Built in the test session from configs and tokenizers trained on a few sentences, saved to
disk and loaded back through kgprobe's loader (the Auto classes), so the real loading code
runs. Weights are random: the tests check invariances, not knowledge.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SENTENCES = [
    "The capital of France is Paris.",
    "The capital of England is London.",
    "Lyon is a city in France.",
    "Answer: Paris is the capital of France.",
    "Answer: London is a large city.",
    "Question: What is the capital of Italy? Answer: Rome.",
    "Berlin is the capital of Germany and Madrid is the capital of Spain.",
    "hello world, the world is large and the city is old.",
] * 20


def _gpt2_tokenizer(path: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(SENTENCES, trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.save_pretrained(path)


def _llama_tokenizer(path: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(SENTENCES, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", pad_token="</s>")
    fast.save_pretrained(path)


def _bert_tokenizer(path: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = trainers.WordPieceTrainer(vocab_size=250, special_tokens=special)
    tok.train_from_iterator(SENTENCES, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)],
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    fast.save_pretrained(path)


def _t5_tokenizer(path: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    special = ["<pad>", "</s>", "<unk>", "<extra_id_0>", "<extra_id_1>"]
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=special)
    tok.train_from_iterator(SENTENCES, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)]
    )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>",
                                   unk_token="<unk>",
                                   additional_special_tokens=["<extra_id_0>", "<extra_id_1>"])
    fast.save_pretrained(path)


def build(kind: str, path: Path, positions: int = 64) -> Path:
    """Write a tiny random model of ``kind`` (gpt2, llama, bert, t5) into ``path``
    (``positions``: the GPT-2's context length; ICL prompts need more than 64)."""
    from transformers import (
        AutoTokenizer,
        BertConfig,
        BertForMaskedLM,
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        T5Config,
        T5ForConditionalGeneration,
    )

    torch.manual_seed(0)
    path.mkdir(parents=True, exist_ok=True)
    model: torch.nn.Module
    if kind == "gpt2":
        _gpt2_tokenizer(path)
        tok = AutoTokenizer.from_pretrained(path)
        model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=positions, n_embd=32,
                                           n_layer=2, n_head=2, bos_token_id=0, eos_token_id=0))
    elif kind == "llama":
        _llama_tokenizer(path)
        tok = AutoTokenizer.from_pretrained(path)
        model = LlamaForCausalLM(LlamaConfig(
            vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            bos_token_id=1, eos_token_id=2, pad_token_id=2))
    elif kind == "bert":
        _bert_tokenizer(path)
        tok = AutoTokenizer.from_pretrained(path)
        model = BertForMaskedLM(BertConfig(
            vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=2, max_position_embeddings=64, pad_token_id=0))
    elif kind == "t5":
        _t5_tokenizer(path)
        tok = AutoTokenizer.from_pretrained(path)
        model = T5ForConditionalGeneration(T5Config(
            vocab_size=len(tok), d_model=32, d_ff=64, d_kv=8, num_layers=2, num_heads=2,
            decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))
    else:
        raise ValueError(kind)
    # random init is small; scale up so distributions are far from uniform and bugs show
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)
    model.save_pretrained(path)
    return path
