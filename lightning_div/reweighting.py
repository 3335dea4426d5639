"""The contract between :class:`~lightning_div.callbacks.dress.DRESSReweighting` and a datamodule.

DRESS computes the weights; a datamodule only applies them. Any ``LightningDataModule``
with the three methods of :class:`ReweightableDataModule` can be reweighted:
:class:`~lightning_div.datamodules.dialogue.DialogueDataModule` is one, a user's own or a
streaming one can be another. The callback owns the weights and negatives (it computes,
checkpoints and re-applies them on resume, at fit start, before the first train
dataloader is built), validates the Trainer's settings in its ``setup`` (the train
dataloader must be rebuilt when new negatives arrive) and calls
:meth:`ReweightableDataModule.apply_weights` whenever they change. The datamodule keeps
no copy in its checkpoint and never changes the Trainer.

This module needs only numpy, so a datamodule can import it without Lightning or torch; it sits
below both DRESS and the data side (neither imports the other through it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

import numpy as np

from lightning_div._internal.deprecation import warn_deprecated
from lightning_div.keys import NEGATIVE, NEGATIVE_LOSS, NEGATIVE_LOSSES, SAMPLE_WEIGHT, NegativeLoss
from lightning_div.pairs import DialoguePair, as_pair

__all__ = [
    "MODES",
    "NEGATIVE_BATCHES",
    "NEGATIVE_LOSSES",
    "Mode",
    "NegativeBatches",
    "NegativeLoss",
    "LayoutCheck",
    "Negatives",
    "ReweightableDataModule",
    "check_batch_layout",
    "check_choice",
    "finite_weights",
    "train_responses_of",
]

#: How the gold weights are used: in the loss (batches carry ``sample_weight``) or as draw probabilities.
Mode = Literal["loss", "sampler"]
MODES: tuple[str, ...] = ("loss", "sampler")
#: Where the negatives are trained: in batches of their own (the DRESS authors) or among the gold examples.
NegativeBatches = Literal["separate", "mixed"]
NEGATIVE_BATCHES: tuple[str, ...] = ("separate", "mixed")


def check_choice(arg: str, value: str, choices: Sequence[str]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise ``ValueError`` naming ``arg`` and the choices."""
    if value not in choices:
        raise ValueError(f"{arg} must be one of {tuple(choices)}, got {value!r}")
    return value


def finite_weights(weights: Any, count: int, what: str) -> np.ndarray:
    """``weights`` as float64, one finite number per example of ``count``, else ``ValueError`` naming ``what``
    (and the index of the first non-finite weight)."""
    try:
        w = np.array(weights, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{what} must be numbers: {e}") from None
    if w.shape != (count,):
        raise ValueError(f"{what}: got shape {w.shape}, need one weight per example ({count},)")
    if not np.all(np.isfinite(w)):
        bad = int(np.flatnonzero(~np.isfinite(w))[0])
        raise ValueError(f"{what}[{bad}] = {w[bad]} is not finite")
    return w


@dataclass(frozen=True)
class Negatives:
    """Generated responses to train against, and how (DRESS's head-cluster negatives).

    Attributes:
        pairs: the (training context, generated response) examples; their index in a batch is
            ``len(gold examples) + position``.
        weights: one finite weight per pair (DRESS: ``negative_weight`` in a head cluster, 0 outside).
        batches: ``"separate"`` (batches of their own, so a batch's token denominator counts only
            negatives, zero-weight ones included) or ``"mixed"`` (shuffled in with the gold examples).
        loss: how a ``training_step`` trains a negative weight: ``"nll"`` or ``"unlikelihood"``;
            the datamodule puts it in every training batch (``batch["negative_loss"]``), where
            :func:`lightning_div.dress.losses.dress_loss` reads it.

    Raises:
        ValueError: ``pairs`` and ``weights`` differ in length, a weight is not finite, or
            ``batches`` / ``loss`` is unknown.
    """

    pairs: tuple[DialoguePair, ...] = ()
    weights: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float64))
    batches: NegativeBatches = "separate"
    loss: NegativeLoss = "nll"

    def __post_init__(self) -> None:
        check_choice("negative_batches", self.batches, NEGATIVE_BATCHES)
        check_choice("negative_loss", self.loss, NEGATIVE_LOSSES)
        weights = np.array(self.weights, dtype=np.float64).reshape(-1)
        if len(weights) != len(self.pairs):
            raise ValueError(f"Negatives: {len(self.pairs)} pairs but {len(weights)} weights")
        if not np.all(np.isfinite(weights)):
            bad = int(np.flatnonzero(~np.isfinite(weights))[0])
            raise ValueError(f"Negatives: weights[{bad}] = {weights[bad]} is not finite")
        weights.flags.writeable = False  # frozen: what DRESS applied is what it checkpoints
        object.__setattr__(self, "pairs", tuple(as_pair(p, f"negatives[{i}]") for i, p in enumerate(self.pairs)))
        object.__setattr__(self, "weights", weights)

    def __len__(self) -> int:
        return len(self.pairs)


@runtime_checkable
class ReweightableDataModule(Protocol):
    """A datamodule :class:`~lightning_div.callbacks.dress.DRESSReweighting` can reweight.

    ``isinstance(dm, ReweightableDataModule)`` checks that the three methods exist (not their
    signatures). Contract:

    * :meth:`train_responses` and :meth:`train_contexts` list the training examples in
      one fixed order, the same on every process: the order of the weights.
    * :meth:`apply_weights` replaces whatever was applied before. It is called at fit start
      (before the first train dataloader is built) and whenever DRESS mines new negatives
      (at an epoch's end; the Trainer rebuilds the train dataloader for the next epoch,
      which DRESS checks in ``setup``). The next train dataloader must yield the gold
      examples with their weights and the negatives with theirs; in ``"loss"`` mode its
      batches carry what :func:`lightning_div.dress.losses.dress_loss` reads:
      ``sample_weight``, ``negative`` (True for a negative) and ``negative_loss``
      (``negatives.loss``), so a ``training_step`` never reads them back from the datamodule.
    * The datamodule does not checkpoint what it was given and does not change the Trainer:
      DRESS checkpoints the weights and applies them again on resume.
    """

    def train_responses(self) -> Sequence[str]:
        """The gold response of every training example, in index order (0.2 called it ``gold_train_responses``)."""
        ...

    def train_contexts(self) -> Sequence[Sequence[str]]:
        """The context turns of every training example, in the same order."""
        ...

    def apply_weights(self, weights: np.ndarray, negatives: Negatives, mode: Mode) -> None:
        """Use these weights from the next train dataloader on.

        Args:
            weights: one finite float64 weight per gold training example, in index order.
            negatives: extra examples with their weights (empty: none).
            mode: ``"loss"``: batches carry the weights as ``sample_weight`` for a weighted loss;
                ``"sampler"``: examples are drawn with probability proportional to the weights
                and the loss stays unweighted (``negatives`` is then empty).
        """
        ...


def train_responses_of(datamodule: Any, who: str) -> list[str] | None:
    """``datamodule.train_responses()``; a datamodule of 0.2 with only ``gold_train_responses()`` still works, with a warning.

    Args:
        datamodule: the Trainer's datamodule (or None).
        who: the caller, named in the warning.

    Returns:
        The gold response of every training example, in index order; None when the datamodule has neither method.
    """
    method = getattr(datamodule, "train_responses", None)
    if callable(method):
        return list(method())
    old = getattr(datamodule, "gold_train_responses", None)
    if callable(old):
        warn_deprecated(f"{who}: a datamodule's gold_train_responses()", "train_responses()")
        return list(old())
    return None


class LayoutCheck(NamedTuple):
    """What :func:`check_batch_layout` found in one training batch.

    Attributes:
        decided: the batch settles the question (it lacks the fields, or it holds negatives);
            False for a gold-only batch, which says nothing about where the negatives go.
        problems: ``(what, message)`` for each way the batch breaks the contract: ``what`` is
            ``"fields"``, ``"loss"`` or ``"layout"`` (a caller warns once for each).
    """

    decided: bool
    problems: tuple[tuple[str, str], ...]


def check_batch_layout(
    batch: Any, negative_loss: NegativeLoss, negative_batches: NegativeBatches, label: str
) -> LayoutCheck:
    """Whether a ``"loss"``-mode training batch carries what DRESS decided to the loss, as the contract says.

    A batch must hold ``sample_weight`` and ``negative``; one with negatives must hold
    ``negative_loss`` equal to ``negatives.loss``, and with ``negative_batches="separate"`` no gold
    example (padding rows of weight 0 do not count). ``label`` names the caller in the messages.
    """
    if not isinstance(batch, Mapping) or SAMPLE_WEIGHT not in batch or NEGATIVE not in batch:
        return LayoutCheck(
            True,
            (
                (
                    "fields",
                    f"{label}(mode='loss'): a training batch carries no '{SAMPLE_WEIGHT}' and '{NEGATIVE}' fields, "
                    "so the loss cannot weight the examples or tell the negatives apart: the datamodule must put "
                    "them in every batch (DialogueDataModule does; docs: callbacks/dress, 'Your own datamodule')",
                ),
            ),
        )
    negative = np.asarray(_cpu(batch[NEGATIVE]), dtype=bool).reshape(-1)
    if not negative.any():
        return LayoutCheck(False, ())  # a gold batch says nothing about where the negatives go
    problems: list[tuple[str, str]] = []
    weights = np.asarray(_cpu(batch[SAMPLE_WEIGHT]), dtype=np.float64).reshape(-1)
    kind = batch.get(NEGATIVE_LOSS)
    if kind != negative_loss:
        said = "no 'negative_loss' field (dress_loss then trains them as 'nll')" if kind is None else repr(kind)
        problems.append(
            (
                "loss",
                f"{label}(negative_loss={negative_loss!r}): a batch with negatives carries {said}: the "
                "datamodule must put negatives.loss (from apply_weights) in every batch, or the negatives are "
                "not trained the way this callback was set",
            )
        )
    gold_rows = ~negative & (weights != 0)  # padding rows (weight 0) fill a negatives' batch: not gold
    if negative_batches == "separate" and gold_rows.any() and negative.shape == weights.shape:
        problems.append(
            (
                "layout",
                f"{label}(negative_batches='separate'): a training batch holds {int(negative.sum())} negatives "
                f"among {int(gold_rows.sum())} gold examples, so the datamodule mixes them: the negatives' "
                "tokens then share the gold examples' denominator. Batch negatives.pairs apart when "
                "negatives.batches == 'separate' (docs: callbacks/dress), or pass negative_batches='mixed'",
            )
        )
    return LayoutCheck(True, tuple(problems))


def _cpu(value: Any) -> Any:
    """A tensor as a CPU array (one small copy of a per-example field); anything else as it is."""
    return value.detach().cpu().numpy() if hasattr(value, "detach") else value
