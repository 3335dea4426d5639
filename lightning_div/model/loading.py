"""Loading a dialogue model and its tokenizer by name: the Hub, a local folder, or the project's own names.

``"local:chitchat"`` is a byte-level BPE trained on the embedded Chit-Chat corpus on first use
(cached); ``"local:chitchat-gpt2"`` is the shipped base model (:mod:`lightning_div.model.base`).
No Lightning here: the Hugging Face ``Trainer`` integration loads models the same way.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lightning_div.model.base import (
    BASE_MODEL,
    LOCAL_TOKENIZER,
    PAD,
    ModelLoadError,
    check_local_name,
    quiet_loss_type,
    resolve_model_name,
)

__all__ = ["LOCAL_TOKENIZER", "ModelLoadError", "base_tokenizer", "build_model", "cache_root", "load_tokenizer"]


def _cannot_load(what: str, name: str, err: BaseException) -> ModelLoadError:
    """One line for a model or tokenizer that cannot be loaded, naming it (the library's first line as the reason)."""
    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return ModelLoadError(f"cannot load {what} {name!r}: {reason}")


def cache_root() -> Path:
    """lightning-div's cache (tokenizers); ``$LIGHTNING_DIV_CACHE`` or ``~/.cache/lightning_div``."""
    return Path(os.environ.get("LIGHTNING_DIV_CACHE", Path.home() / ".cache" / "lightning_div"))


def load_tokenizer(spec: str, vocab_size: int = 4000, seq2seq: bool = False) -> Any:
    """A tokenizer by Hub name / local path, or ``"local:chitchat"``: BPE trained on the embedded corpus (cached).

    Args:
        spec: a Hub name, a local path, ``"local:chitchat"``, or ``"local:chitchat-gpt2"`` (the
            shipped base model's tokenizer: ``local:chitchat`` plus a ``<pad>`` token).
        vocab_size: the vocabulary of the locally trained tokenizer.
        seq2seq: train the local tokenizer BART-style (``<s> ... </s>`` with a pad token)
            instead of GPT-2-style (``<|endoftext|>``, no pad token).

    Returns:
        A Hugging Face tokenizer. ``"local:chitchat"`` is trained on the Chit-Chat training
        turns on first use and cached under ``$LIGHTNING_DIV_CACHE`` (default
        ``~/.cache/lightning_div``); later calls load the cached one.

    Raises:
        ModelLoadError: an unknown ``local:`` name (the message lists the local names), or a name or
            path that does not load (an :class:`OSError`, naming it).
    """
    check_local_name(spec, "tokenizer")
    if spec == BASE_MODEL:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(resolve_model_name(spec, "tokenizer"))
    if spec == LOCAL_TOKENIZER:
        from lightning_div.chitchat import chitchat_conversations
        from lightning_div.model.tiny import train_tokenizer

        texts = [turn for _, turns in chitchat_conversations("train") for turn in turns]
        return train_tokenizer(texts, vocab_size=vocab_size, cache_dir=cache_root() / "tokenizers", seq2seq=seq2seq)
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(spec)
    except (OSError, ValueError) as err:  # not found, not a repo id (the Hub client's ValueError), a broken file
        raise _cannot_load("tokenizer", spec, err) from err


def build_model(
    model_name_or_path: str | None,
    from_scratch: dict[str, Any] | None,
    tokenizer: Any,
    config_overrides: dict[str, Any] | None = None,
) -> Any:
    """``from_pretrained(model_name_or_path)``, or a random-init model from a config dict (``model_type`` + sizes).

    Args:
        model_name_or_path: Hub name, local path or ``"local:chitchat-gpt2"`` (used when
            ``from_scratch`` is None).
        from_scratch: a config dict, e.g. ``{"model_type": "gpt2", "n_layer": 2, "n_embd": 128}``.
        tokenizer: sets the vocabulary size and the special-token ids of a model from scratch.
        config_overrides: config attributes to change when loading a pretrained model, e.g. its
            dropout (``{"resid_pdrop": 0.4, "embd_pdrop": 0.4, "attn_pdrop": 0.4}`` for GPT-2).

    Raises:
        ValueError: neither a name nor ``from_scratch``; or an override that is not an attribute
            of the model's config (a typo would otherwise be ignored silently).
        ModelLoadError: a model that cannot be loaded (an unknown ``local:`` name, a missing path, a
            Hub name offline, truncated weights): an :class:`OSError` naming it, in one line.

    Returns:
        A causal or seq2seq LM (by the config's ``is_encoder_decoder``).
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM

    if from_scratch is not None:
        spec = dict(from_scratch)
        model_type = spec.pop("model_type", "gpt2")
        special = {
            name: getattr(tokenizer, name)
            for name in ("bos_token_id", "eos_token_id", "pad_token_id")
            if getattr(tokenizer, name, None) is not None
        }
        config = AutoConfig.for_model(model_type, vocab_size=len(tokenizer), **{**special, **spec})
        if getattr(config, "is_encoder_decoder", False):
            config.decoder_start_token_id = spec.get("decoder_start_token_id", tokenizer.eos_token_id)
            return AutoModelForSeq2SeqLM.from_config(config)
        return quiet_loss_type(AutoModelForCausalLM.from_config(config))
    if model_name_or_path is None:
        raise ValueError("DialogueLM needs model_name_or_path (Hub name or local path) or from_scratch (a config)")
    location = resolve_model_name(model_name_or_path)
    try:
        config = AutoConfig.from_pretrained(location)
    except (OSError, ValueError) as err:  # not found, not a repo id (the Hub client's ValueError), a broken config
        raise _cannot_load("model", model_name_or_path, err) from err
    unknown = sorted(set(config_overrides or {}) - set(config.to_dict()))
    if unknown:
        raise ValueError(f"config_overrides: {unknown} are not attributes of {model_name_or_path!r}'s config")
    for key, value in (config_overrides or {}).items():
        setattr(config, key, value)
    cls = AutoModelForSeq2SeqLM if getattr(config, "is_encoder_decoder", False) else AutoModelForCausalLM
    from safetensors import SafetensorError

    try:
        model = cls.from_pretrained(location, config=config)
    except (OSError, ValueError, SafetensorError) as err:  # a truncated weights file is a SafetensorError
        raise _cannot_load("model", model_name_or_path, err) from err
    if location != model_name_or_path:
        # the shipped base model stores float16 to stay small; it trains and measures in float32. Upcast
        # after loading (exact for float16) rather than passing a dtype: transformers < 4.56 calls it
        # `torch_dtype` and writes an unknown `dtype` into the config; 5.x loads the stored dtype ("auto").
        model = model.float()
    return quiet_loss_type(model)


def base_tokenizer() -> Any:
    """The ``local:chitchat`` tokenizer (4,000 tokens) plus ``<pad>`` (id 4000), as the base model was trained with.

    The shipped model folder carries the same tokenizer; this builds it from the corpus
    (``experiments/pretrain_base.py`` uses it before there is a model folder).
    """
    tokenizer = load_tokenizer(LOCAL_TOKENIZER, vocab_size=4000)
    if tokenizer.pad_token is None:
        tokenizer.add_special_tokens({"pad_token": PAD})
    return tokenizer
