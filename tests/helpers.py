"""Shared test fixtures' builders: real chitchat text, a locally trained tokenizer, tiny models."""

from __future__ import annotations

from functools import lru_cache

from lightning_div.datamodules.formats import iter_texts, read_chitchat
from lightning_div.tiny import tiny_causal_lm, tiny_seq2seq_lm, train_tokenizer


@lru_cache(maxsize=None)
def chitchat_pairs(split: str = "train", max_conversations: int = 60):
    return tuple(read_chitchat(split, max_history=3, max_conversations=max_conversations))


@lru_cache(maxsize=None)
def tokenizer(seq2seq: bool = False, vocab_size: int = 800):
    texts = list(iter_texts(chitchat_pairs("train", 150)))
    return train_tokenizer(texts, vocab_size=vocab_size, seq2seq=seq2seq)


def causal_model(seed: int = 0, **kwargs):
    return tiny_causal_lm(tokenizer(False), seed=seed, **kwargs)


def seq2seq_model(seed: int = 0, **kwargs):
    return tiny_seq2seq_lm(tokenizer(True), seed=seed, **kwargs)
