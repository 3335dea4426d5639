"""The shipped base model: a small GPT-2 chit-chat model pretrained on Chit-Chat, loaded offline by name.

The weights (fp16 safetensors, under 12 MB), the tokenizer and a model card live in the
package itself (``lightning_div/model/chitchat-gpt2/``), so ``pip install`` brings them and
nothing is downloaded. ``experiments/pretrain_base.py`` made them; the model card
(``README.md`` in that folder) and ``docs/results/pretrain_base.md`` say how.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

BASE_MODEL = "local:chitchat-gpt2"
"""The base model's name wherever lightning-div takes a model name (``DialogueLM``, configs, the CLI)."""

LOCAL_TOKENIZER = "local:chitchat"
"""The tokenizer trained on the embedded Chit-Chat corpus on first use (cached): a tokenizer name only."""

LOCAL_NAMES = {
    BASE_MODEL: "the shipped base model, with its tokenizer",
    LOCAL_TOKENIZER: "a tokenizer only, trained on the Chit-Chat corpus",
}
"""Every ``local:`` name lightning-div knows, with what it is."""

PAD = "<pad>"

WEIGHTS_SHA256 = "450d1fab2214f8b50176ff11beb926bd02083e9e91a2dfd6d267a6fecac463f0"
"""sha256 of the shipped ``model.safetensors`` (also in its model card): checked whenever it is loaded."""

_REINSTALL = "reinstall lightning-div (a source checkout has it under lightning_div/model/chitchat-gpt2)"


class ModelLoadError(OSError):
    """A model or tokenizer that cannot be loaded by the name given (an unknown ``local:`` name, damaged weights)."""


def check_local_name(name: str, what: str = "model") -> None:
    """Refuse a ``local:`` name lightning-div does not know (any case of the prefix), listing those it knows.

    Without this, an unknown ``local:`` name reaches the Hub's client, whose message is about repo ids.

    Args:
        name: a model or tokenizer name.
        what: ``"model"``, ``"tokenizer"`` or ``"encoder"``, for the message.

    Raises:
        ModelLoadError: ``name`` starts with ``local:`` (in any case) and is not one of :data:`LOCAL_NAMES`.

    Examples:
        >>> check_local_name("local:chitchat-gpt2")
        >>> check_local_name("gpt2")
        >>> check_local_name("local:chitchat-gpt3")
        Traceback (most recent call last):
        ...
        lightning_div.model.base.ModelLoadError: 'local:chitchat-gpt3' is not a local name; the local names are 'local:chitchat-gpt2' (the shipped base model, with its tokenizer) and 'local:chitchat' (a tokenizer only, trained on the Chit-Chat corpus)
    """
    if isinstance(name, str) and name[:6].lower() == "local:" and name not in LOCAL_NAMES:
        known = " and ".join(f"{k!r} ({v})" for k, v in LOCAL_NAMES.items())
        raise ModelLoadError(f"{name!r} is not a local name; the local names are {known}")
    if what != "tokenizer" and name == LOCAL_TOKENIZER:
        raise ModelLoadError(
            f"{name!r} names a tokenizer, not a {what}; the shipped model is {BASE_MODEL!r} (its tokenizer included)"
        )


def base_model_path() -> Path:
    """The folder of the shipped base model (``from_pretrained`` works on it directly).

    Raises:
        FileNotFoundError: the package was installed without its model files.
    """
    path = Path(__file__).resolve().parent / "chitchat-gpt2"
    if not (path / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"the base model's weights are missing from {path}: the lightning-div installation is incomplete "
            "(reinstall it; a source checkout has them under lightning_div/model/chitchat-gpt2)"
        )
    return path


def check_base_weights(path: Path | None = None) -> Path:
    """The shipped weights file, after checking its sha256 against :data:`WEIGHTS_SHA256` (about 30 ms).

    A truncated file, a flipped byte or a weight edited on disk (an infinite value makes every logit NaN)
    is said here, naming the file, instead of as a safetensors error or a model that outputs NaN.

    Args:
        path: the model folder (default: :func:`base_model_path`).

    Returns:
        The folder.

    Raises:
        FileNotFoundError: the weights are missing.
        ModelLoadError: their bytes are not the shipped ones.
    """
    folder = base_model_path() if path is None else path
    weights = folder / "model.safetensors"
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    if digest != WEIGHTS_SHA256:
        raise ModelLoadError(
            f"{weights}: not the shipped weights of {BASE_MODEL} (sha256 {digest[:12]}..., shipped "
            f"{WEIGHTS_SHA256[:12]}...; truncated, damaged or edited): {_REINSTALL}"
        )
    return folder


def resolve_model_name(name: str, what: str = "model") -> str:
    """``"local:chitchat-gpt2"`` as the shipped folder's path (its weights checked); any other name unchanged.

    Raises:
        ModelLoadError: an unknown ``local:`` name, or shipped weights that are not the shipped bytes.
    """
    check_local_name(name, what)
    return str(check_base_weights()) if name == BASE_MODEL else name


def quiet_loss_type(model: Any) -> Any:
    """``model`` with ``loss_type`` set to the causal-LM loss where transformers would warn and use it anyway.

    transformers derives ``loss_type`` from the class name; ``GPT2LMHeadModel`` (the base model,
    DialoGPT) matches none, so the first loss printed "`loss_type=None` ... unrecognized. Using the
    default loss: `ForCausalLMLoss`". Setting it to that default changes nothing but the warning.
    """
    if getattr(model, "loss_type", "") is None and not getattr(
        getattr(model, "config", None), "is_encoder_decoder", True
    ):
        model.loss_type = "ForCausalLM"
    return model


def load_base_model(dtype: Any = None) -> tuple[Any, Any]:
    """The shipped base model and its tokenizer, offline, ready to fine-tune.

    The model comes back in **train mode** (dropout on), unlike ``from_pretrained``, which returns
    eval mode: it is there to be fine-tuned, and Lightning keeps a submodule's mode as it finds it,
    so a model in eval mode would fine-tune without dropout. Call ``model.eval()`` to generate or
    measure with it outside a Trainer. The weights' sha256 is checked first.

    Args:
        dtype: the parameters' dtype (default ``torch.float32``; the files store float16).

    Returns:
        ``(model, tokenizer)``: a ``transformers.GPT2LMHeadModel`` in train mode and its
        ``PreTrainedTokenizerFast``, which has a pad token (``<pad>``) distinct from EOS.

    Raises:
        FileNotFoundError: the weights are missing (an incomplete installation).
        ModelLoadError: the weights file is not the shipped one (truncated, damaged, edited).

    Examples:
        >>> from lightning_div import load_base_model
        >>> model, tokenizer = load_base_model()
        >>> type(model).__name__, len(tokenizer), tokenizer.pad_token, model.training
        ('GPT2LMHeadModel', 4001, '<pad>', True)
    """
    import torch
    from transformers import AutoTokenizer, GPT2LMHeadModel

    path = check_base_weights()
    # the dtype is set after loading (float16 -> float32 is exact), not passed: transformers < 4.56 calls the
    # argument `torch_dtype` and writes an unknown `dtype` into the config, where it fails to serialise
    # (Any: transformers 5.25 types PreTrainedModel.to through a wrapper that takes no dtype)
    model: Any = GPT2LMHeadModel.from_pretrained(path)
    model = model.to(dtype or torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path)
    return quiet_loss_type(model).train(), tokenizer
