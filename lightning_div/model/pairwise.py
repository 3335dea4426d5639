"""One batch of (context, response) pairs through the model: the log-probability of each response token.

The pieces :func:`~lightning_div.model.scoring.token_logprobs_batched` runs batch by batch, and
that :mod:`lightning_div.model.shared_context` builds on: which padding a model may be scored
with (one check for both paths), the decoder-only scorer that projects only the rows that
predict a response token, the encoder-decoder scorer, and ``logit - logsumexp`` at the target.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from lightning_div.model.generation import pad_batch


def _forward_params(model: Any) -> set[str]:
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()


def _padding_side(model: Any, seq2seq: bool, params: set[str], padding_side: str | None) -> str:
    """The padding a model is scored with: ``padding_side`` checked, or the best one for the model.

    ``None`` gives ``"left"`` for a decoder-only model whose forward takes ``position_ids``
    (position ids are then built from the mask), else ``"right"``.

    Raises:
        ValueError: not ``"left"``, ``"right"`` or None; ``"left"`` for a seq2seq model (its
            learned positions cannot be shifted) or for a forward without ``position_ids``.
    """
    if padding_side is None:
        return "left" if not seq2seq and "position_ids" in params else "right"
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left', 'right' or None, got {padding_side!r}")
    if seq2seq and padding_side == "left":
        raise ValueError(
            "seq2seq models are scored with right padding only (their learned positions "
            "cannot be shifted); use padding_side='right' or None"
        )
    if padding_side == "left" and "position_ids" not in params:
        raise ValueError(
            f"{type(model).__name__}.forward takes no position_ids, so left padding would shift "
            "its positions; use padding_side='right' or None"
        )
    return padding_side


def _decoder_start(model: Any) -> int:
    for config in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        start = getattr(config, "decoder_start_token_id", None)
        if start is not None:
            return int(start)
    raise ValueError(f"{type(model).__name__} has no decoder_start_token_id in its config or generation_config")


def _target_logprobs(rows: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) for logits rows [N, V]: logit - logsumexp (no [N, V] log-softmax written)."""
    rows = rows.float()
    return rows.gather(1, targets.unsqueeze(1)).squeeze(1) - rows.logsumexp(-1)


def _unscored(response: list[int], prefix: list[int]) -> int:
    """How many leading target ids are the tokenizer's prefix (never scored); at least EOS stays scored."""
    n = len(prefix)
    return n if n and response[:n] == prefix and len(response) > n else 0


class _CausalModel:
    """A decoder-only model, its padding side, and its output layer where logits can be kept to a few positions."""

    def __init__(self, model: Any, side: str, params: set[str]) -> None:
        self.model, self.side = model, side
        self.keep = "logits_to_keep" in params
        head = model.get_output_embeddings() if callable(getattr(model, "get_output_embeddings", None)) else None
        self.head = head if self.keep else None

    def plain_projection(self, hidden: torch.Tensor | None, ids: torch.Tensor, logits: torch.Tensor) -> bool:
        """Whether the output layer applied to the last hidden state gives the model's own last logits.

        Checked on every batch; a model that post-processes its logits (bias, soft-capping,
        scaling) fails, and is scored from its logits for the rest of the call (``head`` unset).
        """
        if (
            self.head is not None
            and hidden is not None
            and hidden.shape[:2] == ids.shape
            and torch.allclose(self.head(hidden[:, -1]).float(), logits[:, -1].float(), rtol=1e-3, atol=1e-3)
        ):
            return True
        self.head = None
        return False


class _CausalScorer(_CausalModel):
    """One forward per batch; the vocabulary projection only where a response token is predicted.

    Fast path (models with ``logits_to_keep`` and a plain output layer, e.g. GPT-2/DialoGPT):
    the model projects just the last position, and the output layer is applied to the
    final hidden states of the target positions only (see :meth:`_CausalModel.plain_projection`);
    a model that post-processes its logits is scored from its logits, restricted to the last
    max|y| positions when left-padded.
    """

    def __call__(self, pairs: list[tuple[list[int], list[int]]], pad_id: int, device: torch.device) -> torch.Tensor:
        # The input is context + response without its last token; the last len(response)
        # positions of each row predict the response tokens (EOS included).
        inputs = [c + r[:-1] for c, r in pairs]
        ids, mask = pad_batch(inputs, pad_id, self.side, device)
        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
        if self.side == "left":
            kwargs["position_ids"] = (mask.cumsum(-1) - 1).clamp(min=0)
        width = ids.shape[1]
        targets = torch.zeros((len(pairs), width), dtype=torch.long)
        tmask = torch.zeros((len(pairs), width), dtype=torch.bool)
        for row, ((_, resp), seq) in enumerate(zip(pairs, inputs)):
            end = width if self.side == "left" else len(seq)
            targets[row, end - len(resp) : end] = torch.as_tensor(resp)
            tmask[row, end - len(resp) : end] = True
        targets, tmask = targets.to(device), tmask.to(device)

        if self.head is not None:
            out = self.model(**kwargs, logits_to_keep=1, output_hidden_states=True)
            hidden = out.hidden_states[-1] if out.hidden_states else None
            if self.plain_projection(hidden, ids, out.logits) and hidden is not None:
                return _target_logprobs(self.head(hidden[tmask]), targets[tmask])
        if self.side == "left" and self.keep:
            # Left padding right-aligns every response, so the last max|y| columns hold all targets.
            keep = max(len(r) for _, r in pairs)
            kwargs["logits_to_keep"] = keep
            targets, tmask = targets[:, -keep:], tmask[:, -keep:]
        logits = self.model(**kwargs).logits
        return _target_logprobs(logits[tmask], targets[tmask])


def _seq2seq_batch(
    model: Any,
    pairs: list[tuple[list[int], list[int]]],
    pad_id: int,
    start: int,
    prefix: list[int],
    device: torch.device,
) -> torch.Tensor:
    # Right padding on both sides: BART-style learned positions cannot be shifted.
    ids, mask = pad_batch([c for c, _ in pairs], pad_id, "right", device)
    dec, dmask = pad_batch([[start] + r[:-1] for _, r in pairs], pad_id, "right", device)
    targets, _ = pad_batch([r for _, r in pairs], pad_id, "right", device)
    logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, decoder_attention_mask=dmask).logits
    scored = dmask.bool()
    # The decoder reads the target's BOS (as in training); its prediction is not part of the score.
    for row, (_, r) in enumerate(pairs):
        scored[row, : _unscored(r, prefix)] = False
    return _target_logprobs(logits[scored], targets[scored])
