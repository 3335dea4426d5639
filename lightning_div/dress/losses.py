"""The losses DRESS trains with: sample-weighted token cross-entropy, negatives as -1 x NLL or unlikelihood.

:func:`weighted_lm_loss` is the formula; :func:`dress_loss` reads a DRESS batch's fields and splits the
loss into its gold and negative parts, which a ``training_step`` logs as two curves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from lightning_div.keys import NEGATIVE_LOSSES


def weighted_lm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    sample_weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    causal: bool = True,
    negative_loss: str = "nll",
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """sum_i w_i sum_t loss_it / (number of non-ignored target tokens in the batch).

    For an example with weight w_i >= 0, loss_it is the token cross-entropy -log p(y_t),
    or with ``label_smoothing`` = e > 0 the cross-entropy against the smoothed target
    (1 - e) * one-hot + e / V, i.e. (1 - e) * -log p(y_t) + e * mean_v -log p(v), as
    ``torch.nn.functional.cross_entropy(label_smoothing=e)`` defines it (Khayrallah & Sedoc
    sweep it as a regulariser).
    For w_i < 0 (DRESS negatives), ``negative_loss`` decides:

    - ``"nll"`` (the DRESS paper): w_i * -log p(y_t), i.e. gradient *ascent* on the
      likelihood. It has no bound: pushing p(y_t) towards 0 makes the loss go to -inf,
      so a few negatives can outweigh the whole positive term.
    - ``"unlikelihood"`` (Welleck et al., 2020): |w_i| * -log(1 - p(y_t)), which is >= 0,
      is 0 when p(y_t) = 0 and so stops pushing once a token is unlikely. 1 - p is
      clamped at 1e-5 as in the unlikelihood authors' code, which bounds it by 11.5 a token.

    The denominator counts every target token in the batch, zero-weight examples
    included (as the DRESS authors' loop does). ``causal=True``: Hugging Face causal
    layout, labels aligned with the inputs, so logits at t predict labels at t+1.
    ``causal=False``: seq2seq layout, logits and labels already aligned. With all
    weights 1 this equals the usual mean token cross-entropy; a batch with no target
    tokens gives 0 (with a graph), not NaN.

    Args:
        logits: (batch, time, vocab).
        labels: (batch, time), ``ignore_index`` where there is no target.
        sample_weight: (batch,) weights; None = all 1.
        ignore_index: the label of positions that are not targets.
        causal: the layout (see above).
        negative_loss: ``"nll"`` or ``"unlikelihood"``, used for examples with weight < 0.
        label_smoothing: e in [0, 1); smooths the targets of examples with weight >= 0 only
            (a negative's loss is about p(y_t) itself, so it stays unsmoothed).

    Returns:
        The scalar loss.

    Raises:
        ValueError: logits and labels, or the weights and the batch, do not line up, or
            ``negative_loss`` is unknown, or ``label_smoothing`` is outside [0, 1).
    """
    per_example, tokens = _weighted_per_example(
        logits, labels, sample_weight, ignore_index, causal, negative_loss, label_smoothing
    )
    return per_example.sum() / tokens.sum().clamp(min=1)


@dataclass(frozen=True)
class DressLoss:
    """The loss of one training batch, and its gold and negative parts for logging.

    Attributes:
        loss: what to backpropagate: :func:`weighted_lm_loss` over the whole batch.
        gold: the gold examples' part, sum_i w_i sum_t CE_it over them / their target tokens
            (None: the batch holds no gold example). For a batch of gold examples it is ``loss``.
        negative: the DRESS negatives' part, over them / their target tokens (None: no negative
            in the batch). For a batch of negatives of its own (``negative_batches="separate"``)
            it is ``loss``.
    """

    loss: torch.Tensor
    gold: torch.Tensor | None
    negative: torch.Tensor | None


def dress_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    batch: Mapping[str, Any],
    ignore_index: int = -100,
    causal: bool = True,
    label_smoothing: float = 0.0,
) -> DressLoss:
    """The DRESS loss of a training batch, read from the fields the batch carries, split for logging.

    A DRESS batch (``DialogueDataModule``'s, or your own datamodule's) carries
    ``sample_weight`` (one weight per example), ``negative`` (True for a mined negative) and
    ``negative_loss`` (how negatives are trained): the loss kind travels with the batch, so
    a ``training_step`` needs nothing else. Log ``gold`` and ``negative`` under their own keys
    (``train/loss``, ``train/negative_loss``): their scales differ by orders of magnitude,
    and one curve over both alternates between them.

    A field that is missing means: ``sample_weight`` all 1, ``negative_loss`` ``"nll"``, and
    ``negative`` the examples with a weight < 0 (then a zero-weight negative counts as gold).

    Args:
        logits: (batch, time, vocab).
        labels: (batch, time), ``ignore_index`` where there is no target.
        batch: the batch's fields (a dict of the collated batch).
        ignore_index: the label of positions that are not targets.
        causal: the Hugging Face causal layout (see :func:`weighted_lm_loss`).
        label_smoothing: smooths the gold examples' targets (see :func:`weighted_lm_loss`).

    Returns:
        A :class:`DressLoss`: ``loss`` to backpropagate, ``gold`` and ``negative`` to log.

    Raises:
        ValueError: as :func:`weighted_lm_loss`, or a ``negative`` field of the wrong shape.

    Examples:
        >>> import torch
        >>> logits = torch.zeros(2, 3, 4)  # uniform: every target token costs ln 4
        >>> labels = torch.tensor([[-100, 1, 2], [-100, 3, -100]])
        >>> batch = {"sample_weight": torch.tensor([1.0, -1.0]), "negative": torch.tensor([False, True])}
        >>> parts = dress_loss(logits, labels, batch, causal=False)
        >>> [round(float(x), 4) for x in (parts.loss, parts.gold, parts.negative)]
        [0.4621, 1.3863, -1.3863]
    """
    from lightning_div.keys import NEGATIVE, NEGATIVE_LOSS, SAMPLE_WEIGHT

    weights = batch.get(SAMPLE_WEIGHT)
    kind = batch.get(NEGATIVE_LOSS) or "nll"
    per_example, tokens = _weighted_per_example(logits, labels, weights, ignore_index, causal, kind, label_smoothing)
    loss = per_example.sum() / tokens.sum().clamp(min=1)
    negative = batch.get(NEGATIVE)
    if negative is None:
        negative = torch.zeros_like(per_example, dtype=torch.bool) if weights is None else torch.as_tensor(weights) < 0
    negative = torch.as_tensor(negative, dtype=torch.bool, device=per_example.device).reshape(-1)
    if negative.shape != per_example.shape:
        raise ValueError(f"batch['{NEGATIVE}'] has shape {tuple(negative.shape)}, expected ({per_example.numel()},)")

    def part(rows: torch.Tensor) -> torch.Tensor | None:
        if not bool(rows.any()):
            return None
        if bool(rows.all()):
            return loss  # the whole batch: the very tensor backpropagated
        return per_example[rows].sum() / tokens[rows].sum().clamp(min=1)

    return DressLoss(loss, part(~negative), part(negative))


def _weighted_per_example(
    logits: torch.Tensor,
    labels: torch.Tensor,
    sample_weight: Any,
    ignore_index: int,
    causal: bool,
    negative_loss: str,
    label_smoothing: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum_t w_i loss_it per example, target tokens per example): :func:`weighted_lm_loss`'s two sums."""
    if negative_loss not in NEGATIVE_LOSSES:
        raise ValueError(f"negative_loss must be one of {NEGATIVE_LOSSES}, got {negative_loss!r}")
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing!r}")
    if causal:
        logits, labels = logits[:, :-1, :], labels[:, 1:]
    if logits.shape[:2] != labels.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} do not line up")
    flat_logits, flat_labels = logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1)
    token_ce = F.cross_entropy(flat_logits, flat_labels, ignore_index=ignore_index, reduction="none").view(labels.shape)
    per_example = token_ce.sum(dim=1)
    if sample_weight is not None:
        sample_weight = torch.as_tensor(sample_weight, dtype=per_example.dtype, device=per_example.device)
        if sample_weight.shape != per_example.shape:
            raise ValueError(f"sample_weight has shape {tuple(sample_weight.shape)}, expected ({labels.size(0)},)")
    negative = sample_weight < 0 if sample_weight is not None else torch.zeros_like(per_example, dtype=torch.bool)
    if label_smoothing > 0:
        smoothed = F.cross_entropy(
            flat_logits, flat_labels, ignore_index=ignore_index, reduction="none", label_smoothing=label_smoothing
        ).view(labels.shape)
        # a negative keeps the plain -log p(y_t): its loss is about the probability of those very tokens
        per_example = torch.where(negative, per_example, smoothed.sum(dim=1))
    if sample_weight is not None:
        if negative_loss == "unlikelihood" and bool(negative.any()):
            per_example = torch.where(
                negative,
                -sample_weight * unlikelihood_per_example(token_ce, labels, ignore_index),
                sample_weight * per_example,
            )
        else:
            per_example = per_example * sample_weight
    return per_example, (labels != ignore_index).sum(dim=1)


def unlikelihood_per_example(
    token_ce: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100, min_complement: float = 1e-5
) -> torch.Tensor:
    """sum_t -log(1 - p(y_t)) per example, from the token cross-entropies -log p(y_t) (0 where ignored).

    ``1 - p`` is computed as ``-expm1(log p)`` (exact for small p) and clamped at
    ``min_complement`` so a token the model is sure of costs at most -log(1e-5) = 11.5.
    """
    log_p = -token_ce
    complement = (-torch.expm1(log_p)).clamp(min=min_complement)
    token_ul = torch.where(labels != ignore_index, -torch.log(complement), torch.zeros_like(token_ce))
    return token_ul.sum(dim=1)
