"""The shipped base model: a small GPT-2 chit-chat model pretrained on Chit-Chat, loaded offline by name.

The weights (fp16 safetensors, under 12 MB), the tokenizer and a model card live in the
package itself (``lightning_div/model/chitchat-gpt2/``), so ``pip install`` brings them and
nothing is downloaded. ``experiments/pretrain_base.py`` made them; the model card
(``README.md`` in that folder) and ``docs/results/pretrain_base.md`` say how.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

BASE_MODEL = "local:chitchat-gpt2"
"""The base model's name wherever lightning-div takes a model name (``DialogueLM``, configs, the CLI)."""

PAD = "<pad>"


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


def resolve_model_name(name: str) -> str:
    """``"local:chitchat-gpt2"`` as the shipped folder's path; any other name unchanged."""
    return str(base_model_path()) if name == BASE_MODEL else name


def load_base_model(dtype: Any = None) -> tuple[Any, Any]:
    """The shipped base model and its tokenizer, offline.

    Args:
        dtype: the parameters' dtype (default ``torch.float32``; the files store float16).

    Returns:
        ``(model, tokenizer)``: a ``transformers.GPT2LMHeadModel`` in eval mode and its
        ``PreTrainedTokenizerFast``, which has a pad token (``<pad>``) distinct from EOS.

    Examples:
        >>> from lightning_div import load_base_model
        >>> model, tokenizer = load_base_model()
        >>> type(model).__name__, len(tokenizer), tokenizer.pad_token
        ('GPT2LMHeadModel', 4001, '<pad>')
    """
    import torch
    from transformers import AutoTokenizer, GPT2LMHeadModel

    path = base_model_path()
    model = GPT2LMHeadModel.from_pretrained(path, dtype=dtype or torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path)
    return model.eval(), tokenizer
