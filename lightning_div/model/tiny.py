"""Small models that need no Hub: a locally trained tokenizer and random-init GPT-2 / BART.

Used by the offline demo (``configs/demo.yaml``) and by the tests. Real users load
their model with ``from_pretrained``; these give the same classes, just tiny.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Iterable
from pathlib import Path

import torch
from transformers import BartConfig, BartForConditionalGeneration, GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from lightning_div._internal.io import atomic_directory

EOS = "<|endoftext|>"
BOS, PAD, EOS_S2S, UNK = "<s>", "<pad>", "</s>", "<unk>"


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 2000,
    cache_dir: str | os.PathLike | None = None,
    seq2seq: bool = False,
    min_frequency: int = 2,
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on ``texts``.

    ``seq2seq=False``: GPT-2/DialoGPT style, ``<|endoftext|>`` is BOS/EOS/UNK and there is
    no pad token. ``seq2seq=True``: BART style, ``<s> text </s>`` with ``<pad>``. With
    ``cache_dir`` the tokenizer is saved under a key of its inputs and reloaded on the
    next call instead of retrained.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    texts = list(texts)
    cache_path = None
    if cache_dir is not None:
        h = hashlib.blake2b(digest_size=8)
        for t in texts:
            h.update(t.encode("utf-8", "replace") + b"\x00")
        h.update(f"{vocab_size}:{seq2seq}:{min_frequency}".encode())
        cache_path = Path(cache_dir) / f"tokenizer-{h.hexdigest()}"
        if (cache_path / "tokenizer.json").exists():
            try:
                return PreTrainedTokenizerFast.from_pretrained(str(cache_path))
            except Exception as e:  # a cache: a damaged entry is rebuilt, never a crash on every later run
                warnings.warn(
                    f"the cached tokenizer {str(cache_path / 'tokenizer.json')!r} cannot be read "
                    f"({type(e).__name__}: {str(e)[:200]}); training it again and replacing the cache",
                    stacklevel=2,
                )

    specials = [BOS, PAD, EOS_S2S, UNK] if seq2seq else [EOS]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    if seq2seq:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{BOS} $A {EOS_S2S}",
            pair=f"{BOS} $A {EOS_S2S} $B {EOS_S2S}",
            special_tokens=[(BOS, tok.token_to_id(BOS)), (EOS_S2S, tok.token_to_id(EOS_S2S))],
        )
        fast = PreTrainedTokenizerFast(
            tokenizer_object=tok, bos_token=BOS, eos_token=EOS_S2S, unk_token=UNK, pad_token=PAD, model_max_length=1024
        )
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        fast = PreTrainedTokenizerFast(
            tokenizer_object=tok, bos_token=EOS, eos_token=EOS, unk_token=EOS, model_max_length=1024
        )
    if cache_path is not None:
        # built in a temporary directory and renamed into place: a kill mid-save leaves no half cache
        atomic_directory(cache_path, lambda tmp: fast.save_pretrained(str(tmp)))
    return fast


def tiny_causal_lm(
    tokenizer: PreTrainedTokenizerFast,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 2,
    n_positions: int = 256,
    seed: int = 0,
) -> GPT2LMHeadModel:
    """Random-init GPT-2 (DialoGPT's architecture) sized for CPU tests."""
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return GPT2LMHeadModel(config).eval()


def tiny_seq2seq_lm(
    tokenizer: PreTrainedTokenizerFast,
    layers: int = 2,
    d_model: int = 64,
    heads: int = 2,
    max_position_embeddings: int = 128,
    seed: int = 0,
) -> BartForConditionalGeneration:
    """Random-init BART (encoder-decoder) sized for CPU tests; the tokenizer needs a pad token."""
    if tokenizer.pad_token_id is None:
        raise ValueError("tiny_seq2seq_lm needs a tokenizer with a pad token: train_tokenizer(..., seq2seq=True)")
    eos, bos = tokenizer.eos_token_id, tokenizer.bos_token_id
    config = BartConfig(
        vocab_size=len(tokenizer),
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=2 * d_model,
        decoder_ffn_dim=2 * d_model,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=bos,
        eos_token_id=eos,
        decoder_start_token_id=eos,
        forced_eos_token_id=None,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return BartForConditionalGeneration(config).eval()
