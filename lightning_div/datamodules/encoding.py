"""Pairs -> token ids (once, up front) -> padded training batches.

The token layout is :meth:`lightning_div.model.formatting.DialogueLayout.encode_pair`'s; this
module only runs it over a whole dataset quickly, serves the ids with per-example
weights, and pads them into batches.
"""

from __future__ import annotations

import os
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from lightning_div.keys import NEGATIVE, NEGATIVE_LOSS, SAMPLE_WEIGHT, NegativeLoss
from lightning_div.model.formatting import DialogueLayout, is_seq2seq, model_layout
from lightning_div.model.generation import pad_batch
from lightning_div.pairs import DialoguePair

IGNORE_INDEX = -100
PADDING_INDEX = -1  # `index` of a row that only evens out the DDP shards


class EncodedPairs(Sequence):
    """(context ids, response ids) of many examples, kept in two flat int32 buffers.

    A Python list of ints costs ~36 bytes a token (244 MB for the chitchat training split);
    here a token costs 4 bytes. Item ``i`` is returned as a pair of fresh lists.
    """

    def __init__(self, rows: Iterable[tuple[Sequence[int], Sequence[int]]] = ()) -> None:
        context, response = array("i"), array("i")  # C int: 32 bits on every platform numpy/torch support
        context_ends, response_ends = array("q", [0]), array("q", [0])
        for ctx, resp in rows:
            context.extend(ctx)
            response.extend(resp)
            context_ends.append(len(context))
            response_ends.append(len(response))
        self._context = np.frombuffer(context, dtype=np.int32)
        self._response = np.frombuffer(response, dtype=np.int32)
        self._context_ends = np.frombuffer(context_ends, dtype=np.int64)
        self._response_ends = np.frombuffer(response_ends, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._context_ends) - 1

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:  # type: ignore[override]
        if not -len(self) <= i < len(self):
            raise IndexError(f"index {i} out of range for {len(self)} examples")
        i %= len(self)
        c, r = self._context_ends, self._response_ends
        return self._context[c[i] : c[i + 1]].tolist(), self._response[r[i] : r[i + 1]].tolist()


class ConcatPairs(Sequence):
    """Several encoded sequences one after the other, without copying them (gold, then negatives)."""

    def __init__(self, *parts: Sequence[tuple[list[int], list[int]]]) -> None:
        self.parts = parts
        self._starts = list(accumulate((len(p) for p in parts), initial=0))

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:  # type: ignore[override]
        if not 0 <= i < len(self):
            raise IndexError(f"index {i} out of range for {len(self)} examples")
        k = bisect_right(self._starts, i) - 1
        return self.parts[k][i - self._starts[k]]


def encode_pairs(
    pairs: Sequence[DialoguePair],
    tokenizer: Any,
    model: Any,
    fmt: DialogueLayout | None = None,
    max_response_tokens: int | None = None,
    show_progress: bool = True,
    desc: str = "tokenising",
) -> EncodedPairs:
    """``fmt.encode_pair`` of every pair: (context ids, response ids), fitted to the model window.

    Args:
        pairs: the dialogue pairs.
        tokenizer: the model's tokenizer.
        model: the model (its window and layout are read from it).
        fmt: the token layout (default ``DialogueLayout()``).
        max_response_tokens: the most response tokens.
        show_progress: a tqdm bar.
        desc: the bar's label.

    Returns:
        The token ids of every pair, in flat int32 buffers.
    """
    fmt = fmt or DialogueLayout()
    return EncodedPairs(
        fmt.encode_pairs(
            [p.context for p in pairs],
            [p.response for p in pairs],
            tokenizer,
            model,
            max_response_tokens=max_response_tokens,
            show_progress=show_progress,
            desc=desc,
        )
    )


class EncodedDialogues(Dataset):
    """Token ids of examples with one weight each; the last ``num_negatives`` are DRESS negatives.

    Index ``i < len(self)`` is example ``i``. Index ``len(self) + i`` is a *padding* copy
    of example ``i`` (from :class:`lightning_div.datamodules.samplers.ExactDistributedSampler`): it
    comes with ``sample_weight`` 0 and ``index`` -1 so the weighted loss ignores it (and counts as
    a negative when example ``i`` is one: its tokens count in that part's denominator).
    Index ``2 * len(self) + i`` is a padding row *without targets* (example ``i``'s
    context, no response tokens; from :class:`lightning_div.datamodules.samplers.SeparateBatchSampler`):
    it fills a short batch without adding tokens to the loss's denominator.
    """

    def __init__(
        self,
        encoded: Sequence[tuple[Sequence[int], Sequence[int]]],
        weights: np.ndarray | None = None,
        num_negatives: int = 0,
    ) -> None:
        self.encoded = encoded
        n = len(encoded)
        self.weights = np.ones(n, dtype=np.float32) if weights is None else np.asarray(weights, dtype=np.float32)
        if self.weights.shape != (n,):
            raise ValueError(f"got {self.weights.shape} weights for {n} examples")
        if not 0 <= num_negatives <= n:
            raise ValueError(f"num_negatives={num_negatives} for {n} examples")
        self.num_gold = n - num_negatives

    def __len__(self) -> int:
        return len(self.encoded)

    def __getitem__(self, i: int) -> dict[str, Any]:
        n = len(self.encoded)
        if not 0 <= i < 3 * n:
            raise IndexError(f"index {i} out of range for {n} examples")
        padding = i >= n
        j = i % n
        context_ids, response_ids = self.encoded[j]
        if i >= 2 * n:
            response_ids = []
        return {
            "context_ids": context_ids,
            "response_ids": response_ids,
            "index": PADDING_INDEX if padding else j,
            "sample_weight": 0.0 if padding else float(self.weights[j]),
            "negative": j >= self.num_gold,
        }


@dataclass
class DialogueCollator:
    """Right-pads examples into a batch.

    Causal: ``input_ids`` = context + response, ``labels`` = -100 on the context and the
    padding, the response ids elsewhere. Seq2seq: ``input_ids`` = the encoder input
    (context), ``labels`` = the response ids padded with -100 (the model builds its
    decoder inputs from them). Also ``attention_mask``, ``sample_weight`` (float32),
    ``index`` (int64, -1 on padding rows), and DRESS's two fields: ``negative`` (bool, True for
    a mined negative) and ``negative_loss`` (how negatives are trained, one string for the
    batch), which :func:`lightning_div.dress.losses.dress_loss` reads.
    """

    pad_token_id: int
    seq2seq: bool = False
    negative_loss: NegativeLoss = "nll"

    def __call__(self, items: Sequence[dict[str, Any]]) -> dict[str, Any]:
        if self.seq2seq:
            inputs = [it["context_ids"] for it in items]
            targets = [it["response_ids"] for it in items]
        else:
            inputs = [it["context_ids"] + it["response_ids"] for it in items]
            targets = [[IGNORE_INDEX] * len(it["context_ids"]) + it["response_ids"] for it in items]
        input_ids, attention_mask = pad_batch(inputs, self.pad_token_id, "right")
        labels, _ = pad_batch(targets, IGNORE_INDEX, "right")
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "labels": labels,
            SAMPLE_WEIGHT: torch.tensor([it["sample_weight"] for it in items], dtype=torch.float32),
            "index": torch.tensor([it["index"] for it in items], dtype=torch.long),
            NEGATIVE: torch.tensor([bool(it.get("negative", False)) for it in items], dtype=torch.bool),
            NEGATIVE_LOSS: self.negative_loss,
        }


def resolve_tokenizer_and_model(
    tokenizer: Any, seq2seq: bool | None, module: Any, note: Callable[[str], None]
) -> tuple[Any, Any]:
    """The tokenizer and the model whose layout (causal / seq2seq, window) a datamodule's ids follow.

    Args:
        tokenizer: a name or path (loaded), a tokenizer, or None (the LightningModule's ``tokenizer``).
        seq2seq: the layout asked for (None: the model's; without a model, causal).
        module: the Trainer's LightningModule, or None.
        note: where the note goes that no model was found (the causal layout is then used).

    Returns:
        ``(tokenizer, model)``; the model is the module's ``model`` (or the module itself) when it has a
        config, else a stand-in of the asked layout.

    Raises:
        ValueError: no tokenizer anywhere, or ``seq2seq`` contradicting the model.
    """
    if isinstance(tokenizer, (str, os.PathLike)):
        from lightning_div.model.loading import load_tokenizer

        # the local: names too (the base model's tokenizer, the corpus-trained one), as DialogueLM takes them
        tokenizer = load_tokenizer(os.fspath(tokenizer), seq2seq=bool(seq2seq))
    elif tokenizer is None:
        tokenizer = getattr(module, "tokenizer", None)
        if tokenizer is None:
            raise ValueError(
                "DialogueDataModule needs a tokenizer: pass tokenizer= (a name, a path or a "
                "tokenizer) or give the LightningModule a `tokenizer` attribute"
            )
    model = getattr(module, "model", None)
    if getattr(model, "config", None) is None:
        model = module if getattr(module, "config", None) is not None else None
    if model is None:
        if seq2seq is None:
            note(
                "DialogueDataModule: no model with a config found; using the causal (decoder-only) layout "
                "(pass seq2seq=True for encoder-decoder models)"
            )
        model = model_layout(bool(seq2seq))
    elif seq2seq is not None and is_seq2seq(model) != seq2seq:
        raise ValueError(
            f"seq2seq={seq2seq} but the model is {'an encoder-decoder' if is_seq2seq(model) else 'decoder-only'}"
        )
    return tokenizer, model
