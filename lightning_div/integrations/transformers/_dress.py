"""DRESS in a Hugging Face ``Trainer``: the gold weights, the dataset and collator, the weighted sampler and loss."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from transformers import Trainer

from lightning_div._internal.compat.transformers import train_sampler
from lightning_div._internal.deprecation import renamed_value, take_deprecated
from lightning_div.datamodules.encoding import DialogueCollator, EncodedDialogues, encode_pairs
from lightning_div.datamodules.samplers import WeightedDistributedSampler, check_sampling_weights
from lightning_div.dress.losses import dress_loss
from lightning_div.dress.state import DressState
from lightning_div.dress.weights import check_lam, dress_weights
from lightning_div.keys import NEGATIVE, NEGATIVE_LOSS, SAMPLE_WEIGHT
from lightning_div.model.formatting import DialogueLayout, is_seq2seq
from lightning_div.model.generation import pad_id_of
from lightning_div.pairs import DialoguePair
from lightning_div.reweighting import MODES, Mode, check_choice
from lightning_div.semantic.space import SemanticSpace

__all__ = ["DRESS_FIELDS", "DressTrainer", "DressTrainerMixin", "dress_dataset", "gold_dress_state"]

#: The fields a DRESS batch carries besides the model's inputs (DialogueCollator's): read by the loss, not the model.
DRESS_FIELDS = (SAMPLE_WEIGHT, NEGATIVE, NEGATIVE_LOSS, "index")


def gold_dress_state(
    space: SemanticSpace,
    train_responses: Sequence[str] | None = None,
    *,
    lam: float = 30.0,
    normalize: bool = True,
    cache_dir: str | Path | None = None,
    device: Any = None,
    **deprecated: Any,
) -> DressState:
    """A :class:`~lightning_div.dress.state.DressState` holding the gold weights, as DRESSReweighting computes them.

    The clusters are fitted on (or read from the cache for) ``train_responses``, and each response
    gets w = (1 - p_train(c))^lam (:func:`~lightning_div.dress.weights.dress_weights`).

    Args:
        space: the semantic space (shared with a :class:`TrainerDiversityMonitor` it is fitted once).
        train_responses: the training responses, in the training dataset's order (required).
        lam: the exponent (the paper: 30).
        normalize: rescale the weights to mean 1 (the default, as ``DRESSReweighting``'s; the paper's
            raw weights: ``normalize=False``).
        cache_dir: the clusters' cache directory when the space has no ``dirpath``.
        device: where the encoder runs.
        **deprecated: 0.2's ``gold_responses=`` (``train_responses=``), with a ``DeprecationWarning``.

    Returns:
        The state, without negatives.

    Raises:
        ValueError: ``lam`` is not a finite number >= 0 (checked before the clusters are fitted), or
            ``train_responses`` given twice (by its 1.0 and its 0.2 name).
        TypeError: no ``train_responses``, or an unknown keyword argument.
    """
    old, _ = take_deprecated("gold_dress_state", deprecated, {"gold_responses": "train_responses"})
    train_responses = renamed_value("gold_dress_state", "gold_responses", "train_responses", train_responses, None, old)
    if train_responses is None:
        raise TypeError("gold_dress_state() missing its argument train_responses (the training responses)")
    lam = check_lam(lam)
    gold = list(train_responses)
    space.fit(gold, device=device, cache_dir=cache_dir)
    ids = space.gold_assignments(gold, device=device)
    return DressState(weights=dress_weights(ids, space.clusters.num_clusters, lam, normalize), negative_batches="mixed")


def dress_dataset(
    pairs: Sequence[DialoguePair],
    tokenizer: Any,
    model: Any,
    state: DressState | None = None,
    mode: Mode = "loss",
    layout: DialogueLayout | None = None,
    **deprecated: Any,
) -> tuple[EncodedDialogues, DialogueCollator]:
    """The training dataset and collator of a DRESS run in a ``Trainer``: gold pairs, then the state's negatives.

    Each item is one example's token ids with its weight (``mode="loss"``; all 1.0 with
    ``"sampler"``, where the weights decide the draws instead) and whether it is a negative; the
    collator pads them into ``input_ids`` / ``attention_mask`` / ``labels`` plus the DRESS fields
    (:data:`DRESS_FIELDS`), as :class:`~lightning_div.datamodules.DialogueDataModule` does.

    Args:
        pairs: the gold training pairs (the order of ``state.weights``).
        tokenizer: the model's tokenizer.
        model: the model (its window and layout are read from it).
        state: the weights and negatives; None = every weight 1, no negatives (an evaluation set).
        mode: ``"loss"`` or ``"sampler"``.
        layout: how a dialogue becomes tokens (default ``DialogueLayout()``).
        **deprecated: 0.2's ``format=`` (``layout=``), with a ``DeprecationWarning``.

    Returns:
        ``(dataset, collator)`` for ``Trainer(train_dataset=..., data_collator=...)``.

    Raises:
        ValueError: weights that do not match the pairs, negatives to train in batches of
            their own (``negative_batches="separate"``: the Trainer front end mixes them in), or
            ``layout`` given twice (by its 1.0 and its 0.2 name).
        TypeError: an unknown keyword argument.
    """
    old, _ = take_deprecated("dress_dataset", deprecated, {"format": "layout"})
    layout = renamed_value("dress_dataset", "format", "layout", layout, None, old)
    check_choice("mode", mode, MODES)
    if state is None:
        state = DressState(weights=np.ones(len(pairs)), negative_batches="mixed")
    if state.weights is None or len(state.weights) != len(pairs):
        got = "no weights" if state.weights is None else f"{len(state.weights)} weights"
        raise ValueError(f"dress_dataset: the DressState holds {got} for {len(pairs)} training pairs")
    if state.negative_pairs and state.negative_batches != "mixed":
        raise ValueError(
            "dress_dataset: the Trainer front end trains negatives mixed in with the gold examples: "
            "DressState(negative_batches='mixed')"
        )
    encoded = encode_pairs([*pairs, *state.negative_pairs], tokenizer, model, layout, show_progress=False)
    weights = state.all_weights() if mode == "loss" else None
    dataset = EncodedDialogues(encoded, weights, num_negatives=len(state.negative_pairs))
    collator = DialogueCollator(pad_id_of(tokenizer), seq2seq=is_seq2seq(model), negative_loss=state.negative_loss)
    return dataset, collator


def _check_dataset(dataset: Any, weights: np.ndarray, mode: str) -> None:
    """The training dataset :func:`dress_dataset` built must match the state and the mode ``set_dress`` is given.

    In loss mode each example carries its weight, so the dataset must hold the state's weights
    (gold then negatives); in sampler mode the draws apply them, so the dataset's must all be 1.
    Any other dataset is the user's own: its length is the only thing checked.
    """
    if dataset is None or not hasattr(dataset, "__len__"):
        return
    if len(dataset) != weights.size:
        raise ValueError(
            f"set_dress: the DressState holds {weights.size} weights (gold then negatives) for a training "
            f"dataset of {len(dataset)} examples: build the dataset and the state from the same pairs "
            "(dress_dataset(pairs, tokenizer, model, state, mode=...))"
        )
    if not isinstance(dataset, EncodedDialogues):
        return
    built = np.asarray(dataset.weights, dtype=np.float32)
    carries = not np.all(built == 1.0)
    if mode == "sampler" and carries:
        raise ValueError(
            "set_dress: the training dataset carries the DRESS weights (dress_dataset(..., mode='loss')), and "
            "mode='sampler' would apply them a second time through the draws: build it with mode='sampler' "
            "or call set_dress(state, mode='loss')"
        )
    if mode == "loss" and not np.array_equal(built, weights.astype(np.float32)):
        raise ValueError(
            "set_dress: the training dataset does not carry this DressState's weights (it was built with "
            "mode='sampler', without a state, or from another state), so mode='loss' would train without "
            "DRESS: build it with dress_dataset(pairs, tokenizer, model, state, mode='loss')"
        )


class DressTrainerMixin:
    """DRESS in a ``transformers.Trainer``: the weighted sampler and the weighted / negative loss.

    Mix it in before the trainer class (:class:`DressTrainer` is ``Trainer``'s), then give it the state:

    ```python
    class MyTrainer(DressTrainerMixin, Trainer): ...

    state = gold_dress_state(space, [p.response for p in train])
    dataset, collator = dress_dataset(train, tokenizer, model, state, mode="loss")
    trainer = MyTrainer(model=model, args=args, train_dataset=dataset, data_collator=collator)
    trainer.set_dress(state, mode="loss")
    ```

    Training without :meth:`set_dress` is refused (:meth:`train` raises): the batches of
    :func:`dress_dataset` carry weights that only DRESS's loss reads, so the run would silently
    train the unweighted loss. For a run without DRESS use the plain trainer class.

    ``mode="loss"``: every batch carries its examples' weights and the loss is
    :func:`~lightning_div.dress.losses.dress_loss` (negatives as ``state.negative_loss`` says).
    ``mode="sampler"``: the train sampler draws ``len(dataset)`` examples per epoch with
    probability proportional to the weights (:class:`~lightning_div.datamodules.samplers.WeightedDistributedSampler`
    seeded with ``args.seed`` + epoch: on one process the very draws of DialogueDataModule with that seed)
    and the loss is unweighted. Under several processes the draws are one stream that accelerate
    splits into per-process batches. Label smoothing is ``args.label_smoothing_factor``, applied to
    the gold examples only, as DialogueLM's ``label_smoothing``.
    """

    dress_state: DressState | None = None
    dress_mode: Mode = "loss"

    def set_dress(self, state: DressState, mode: Mode = "loss") -> None:
        """Train with ``state``'s weights (and negatives, in loss mode) from the next train dataloader on.

        Args:
            state: the DRESS state (:func:`gold_dress_state`, or one DRESSReweighting filled).
            mode: ``"loss"`` or ``"sampler"``.

        Raises:
            ValueError: an unknown mode, no weights, a weight that is not finite, negatives or
                weights < 0 in sampler mode, ``remove_unused_columns=True`` (it would drop the DRESS
                fields from the batches), or a training dataset built by :func:`dress_dataset` for
                another mode or state (the weights would be applied twice, or not at all).
        """
        check_choice("mode", mode, MODES)
        if state.weights is None:
            raise ValueError("set_dress: the DressState has no weights yet (gold_dress_state computes them)")
        weights = state.all_weights()
        if not np.all(np.isfinite(weights)):
            bad = int(np.flatnonzero(~np.isfinite(weights))[0])
            raise ValueError(f"set_dress: the DressState's weight {bad} is {weights[bad]}, not a finite number")
        trainer: Any = self
        if mode == "sampler":
            if np.count_nonzero(state.negative_weights):
                raise ValueError("set_dress: negatives cannot be drawn by a sampler (weights < 0): use mode='loss'")
            check_sampling_weights(weights, "DRESS sampling weights")
        _check_dataset(getattr(trainer, "train_dataset", None), weights, mode)
        if trainer.args.remove_unused_columns:
            raise ValueError(
                "set_dress: DRESS batches carry sample_weight, negative and negative_loss, which "
                "remove_unused_columns=True would drop: TrainingArguments(remove_unused_columns=False)"
            )
        # The loss is a per-batch token mean, as in the Lightning path: the Trainer divides it by the
        # gradient accumulation steps instead of expecting a loss normalised by num_items_in_batch.
        trainer.model_accepts_loss_kwargs = False
        self.dress_state, self.dress_mode = state, mode

    def train(self, *args: Any, **kwargs: Any) -> Any:
        """The trainer's ``train``, once :meth:`set_dress` has given the DRESS state.

        Raises:
            ValueError: :meth:`set_dress` was never called (training would silently be without DRESS).
        """
        if self.dress_state is None:
            raise ValueError(
                f"{type(self).__name__}.train(): set_dress(state, mode=...) was never called, so this run would "
                "train without DRESS (the batches' weights unread, the plain loss): call "
                "trainer.set_dress(gold_dress_state(space, train_responses), mode='loss') first, or train with "
                "the plain Trainer"
            )
        return super().train(*args, **kwargs)  # type: ignore[misc]

    def _get_train_sampler(self, train_dataset: Any = None) -> Any:
        trainer: Any = self
        if self.dress_state is None or self.dress_mode != "sampler":
            return train_sampler(DressTrainerMixin, self, train_dataset)
        dataset = train_dataset if train_dataset is not None else trainer.train_dataset
        return WeightedDistributedSampler(
            dataset, self.dress_state.all_weights(), num_replicas=1, rank=0, seed=trainer.args.seed
        )

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        """:func:`~lightning_div.dress.losses.dress_loss` of the batch (its DRESS fields are not given to the model).

        In evaluation the loss is the plain NLL, with or without a state: a :meth:`evaluate` before
        :meth:`set_dress` on batches of :func:`dress_dataset` drops their DRESS fields instead of
        passing them to the model's forward.
        """
        if self.dress_state is None and not any(k in inputs for k in DRESS_FIELDS):
            return super().compute_loss(  # type: ignore[misc]
                model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
            )
        trainer: Any = self
        fields = {k: inputs[k] for k in DRESS_FIELDS if k in inputs}
        model_inputs = {k: v for k, v in inputs.items() if k not in DRESS_FIELDS}
        labels = model_inputs["labels"]
        seq2seq = is_seq2seq(trainer.accelerator.unwrap_model(model))
        if not seq2seq:  # the model's own loss is not wanted: the labels stay out of its forward
            model_inputs.pop("labels")
        outputs = model(**model_inputs)
        smoothing = float(trainer.args.label_smoothing_factor) if model.training else 0.0
        # evaluation measures the plain NLL, as DialogueLM does (training without a state: train() refused it)
        weighted = fields if model.training and self.dress_state is not None else {}
        loss = dress_loss(outputs.logits, labels, weighted, causal=not seq2seq, label_smoothing=smoothing).loss
        return (loss, outputs) if return_outputs else loss


class DressTrainer(DressTrainerMixin, Trainer):
    """A ``transformers.Trainer`` with :class:`DressTrainerMixin` (call :meth:`set_dress` before training)."""
