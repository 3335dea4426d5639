"""What DRESS checks of a Lightning run before and while it trains: the datamodule, the Trainer, the loss.

Each check raises (or warns once) with the fix in its message; the batch layout itself (which
fields a batch carries, where the negatives go) is checked against the contract it belongs to,
:func:`lightning_div.reweighting.check_batch_layout`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from lightning_div._internal.lightning import pl
from lightning_div._internal.tracking import warn_once
from lightning_div.keys import SAMPLE_WEIGHT
from lightning_div.reweighting import ReweightableDataModule

__all__ = [
    "check_dress_trainer",
    "reweightable_datamodule",
    "unweighted_loss_error",
    "watch_weights",
    "weights_used",
]


def reweightable_datamodule(trainer: pl.Trainer) -> ReweightableDataModule:
    """The Trainer's datamodule, when it implements :class:`~lightning_div.reweighting.ReweightableDataModule`.

    A datamodule of 0.2, whose training responses are ``gold_train_responses()`` (1.0: ``train_responses()``),
    is taken too: DRESS reads them through :func:`~lightning_div.reweighting.train_responses_of`, with a warning.

    Raises:
        ValueError: it has none, or one DRESS cannot reweight.
    """
    dm = getattr(trainer, "datamodule", None)
    of_0_2 = all(callable(getattr(dm, m, None)) for m in ("gold_train_responses", "train_contexts", "apply_weights"))
    if not isinstance(dm, ReweightableDataModule) and not of_0_2:
        raise ValueError(
            f"DRESSReweighting needs a datamodule that implements "
            f"lightning_div.datamodules.ReweightableDataModule (train_responses, train_contexts, "
            f"apply_weights), got {'none' if dm is None else type(dm).__name__}: it must change which "
            "examples and weights the training dataloader yields. Pass one to Trainer.fit(datamodule="
            "...): lightning_div.datamodules.DialogueDataModule, or your own (docs: callbacks/dress)"
        )
    return cast(ReweightableDataModule, dm)


def check_dress_trainer(trainer: pl.Trainer, every_n_epochs: int) -> None:
    """Raise when this Trainer would not use the negatives mined each round; warn (once) when it cuts epochs.

    See :meth:`DRESSReweighting.check_trainer <lightning_div.callbacks.dress.DRESSReweighting.check_trainer>`.
    """
    every = getattr(trainer, "reload_dataloaders_every_n_epochs", 0)  # set in Trainer.__init__, not declared
    if every != 1:
        raise ValueError(
            f"DRESSReweighting(mining=...) trains on new negatives every {every_n_epochs} "
            f"epoch(s), which reach training only through a rebuilt train dataloader, but this "
            f"Trainer has reload_dataloaders_every_n_epochs={every}: create the Trainer with "
            f"reload_dataloaders_every_n_epochs=1 (or use mining=None)"
        )
    limit = getattr(trainer, "limit_train_batches", 1.0)
    if limit is not None and (isinstance(limit, int) or limit < 1.0):  # an int is a number of batches
        # The negative batches are shuffled among the gold ones, so a cut epoch trains only part of them.
        warn_once(
            "dress-limit-train-batches",
            f"DRESSReweighting(mining=...): limit_train_batches={limit} trains only the first "
            f"batches of each epoch, and the negatives' batches are shuffled among the gold ones, so "
            f"only about that share of each round's mined negatives is trained. Train whole epochs "
            f"and take fewer examples instead (DialogueDataModule(examples=Examples(max_train=...)))",
        )


def watch_weights(batch: Any) -> Any:
    """The batch's ``sample_weight`` made a leaf that records its use (None: nothing to watch).

    The loss's graph reaches it only if the loss is weighted; :func:`weights_used` asks at the backward.
    """
    if not isinstance(batch, Mapping):
        return None
    import torch

    weights = batch.get(SAMPLE_WEIGHT)
    if isinstance(weights, torch.Tensor) and weights.is_floating_point() and not weights.requires_grad:
        return weights.requires_grad_(True)
    return None


def weights_used(loss: Any, watched: Any) -> bool | None:
    """Whether ``loss`` depends on the watched weights (None: nothing to tell); the watch is undone.

    Read from the loss's autograd graph without running any of it: a backward pass here (``autograd.grad``)
    would run FSDP's backward hooks once too often, which free the unsharded parameters the training
    step's own backward then needs.
    """
    grad_fn = getattr(loss, "grad_fn", None)
    if watched is None or not getattr(loss, "requires_grad", False) or grad_fn is None:
        return None
    seen: set[Any] = set()
    stack = [grad_fn]
    found = False
    while stack and not found:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        found = getattr(node, "variable", None) is watched  # the leaf's AccumulateGrad node
        stack.extend(following for following, _ in node.next_functions)
    watched.requires_grad_(False)
    return found


def unweighted_loss_error(label: str) -> ValueError:
    """The error of a loss that does not depend on the batch's weights (what :func:`weights_used` found)."""
    return ValueError(
        f"{label}(mode='loss'): the training loss does not depend on the batch's "
        f"'{SAMPLE_WEIGHT}', so the run would train unweighted and DRESS would change nothing. Compute the "
        "loss with lightning_div.dress.dress_loss(logits, batch['labels'], batch) (DialogueLM does); a module "
        "that calls self.model(**batch) hands the DRESS fields to the model's forward instead: pass "
        "input_ids and attention_mask only (README, 'What a batch holds')"
    )
