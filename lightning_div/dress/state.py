"""DressState: everything DRESS has decided, in one place.

The gold weights, the negatives mined this round with the clusters they came from, the head
clusters, the round they were mined for, and how the negatives are batched and trained. The
:class:`~lightning_div.callbacks.DRESSReweighting` callback fills it, checkpoints it
(:meth:`DressState.state_dict`), hands it to the datamodule (:meth:`DressState.negatives`) and
draws its figures from it; a resumed run restores all of it, so its figures and batches are
those of the uninterrupted run.

Only numpy: usable without Lightning or torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lightning_div.dress.weights import effective_sample_size
from lightning_div.keys import (
    DRESS_EFFECTIVE_SAMPLE_SIZE,
    DRESS_HEAD_CLUSTERS,
    DRESS_HEAD_SHARE,
    DRESS_NEGATIVES,
    DRESS_WEIGHT_MAX,
    DRESS_WEIGHT_MEAN,
    DRESS_WEIGHT_MIN,
    NegativeLoss,
)
from lightning_div.pairs import DialoguePair
from lightning_div.reweighting import NegativeBatches, Negatives

__all__ = ["DressState"]

_SOURCE = "dress-negative"  # DialoguePair.source of a mined negative: where it came from, in error messages


def _ints(values: Any) -> np.ndarray:
    return np.asarray(values if values is not None else [], dtype=np.int64).reshape(-1)


def _floats(values: Any) -> np.ndarray:
    return np.asarray(values if values is not None else [], dtype=np.float64).reshape(-1)


@dataclass
class DressState:
    """What DRESS applies, checkpoints and shows.

    Attributes:
        weights: one weight per gold training example, in the datamodule's order (None: not
            computed yet).
        heads: the head clusters of the last mining (sorted cluster ids).
        head_share: the share of the last mining's generations in head clusters.
        negative_pairs: the mined (training context, generated response) examples trained next.
        negative_weights: one weight per negative (``negative_weight`` in a head cluster, else 0).
        negative_clusters: the cluster each negative was assigned to, in the same order.
        mined_for: the round: the epoch whose training data the negatives were mined for (None:
            never mined).
        negative_loss: how a negative is trained (``"nll"`` or ``"unlikelihood"``): travels with
            every training batch (``batch["negative_loss"]``).
        negative_batches: ``"separate"`` (batches of their own) or ``"mixed"`` (among the gold).
        gold_top_share: the largest cluster's share of the gold training responses: the degeneration
            guard's reference (:mod:`lightning_div.dress.degeneration`; None: not computed yet).
        negatives_stopped_at: the epoch at whose end the guard stopped mining negatives
            (``on_collapse="stop_negatives"``; None: never): no round is mined after it, also on resume.
    """

    weights: np.ndarray | None = None
    heads: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    head_share: float = 0.0
    negative_pairs: list[DialoguePair] = field(default_factory=list)
    negative_weights: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float64))
    negative_clusters: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    mined_for: int | None = None
    negative_loss: NegativeLoss = "nll"
    negative_batches: NegativeBatches = "separate"
    gold_top_share: float | None = None
    negatives_stopped_at: int | None = None

    def set_negatives(
        self,
        pairs: Sequence[DialoguePair],
        weights: np.ndarray,
        clusters: np.ndarray,
        heads: np.ndarray,
        head_share: float,
        mined_for: int,
    ) -> None:
        """Replace the negatives with a new round's (all of them at once: the fields never disagree).

        Raises:
            ValueError: pairs, weights and clusters of different lengths.
        """
        weights, clusters = _floats(weights), _ints(clusters)
        if not len(pairs) == len(weights) == len(clusters):
            raise ValueError(
                f"DressState: {len(pairs)} negatives, {len(weights)} weights and {len(clusters)} cluster ids"
            )
        self.negative_pairs, self.negative_weights, self.negative_clusters = list(pairs), weights, clusters
        self.heads, self.head_share, self.mined_for = _ints(heads), float(head_share), int(mined_for)

    def clear_negatives(self) -> None:
        """No negatives (and no round mined): what a state whose settings changed starts from."""
        fresh = DressState(negative_loss=self.negative_loss, negative_batches=self.negative_batches)
        self.heads, self.head_share, self.mined_for = fresh.heads, fresh.head_share, fresh.mined_for
        self.negative_pairs, self.negative_weights = fresh.negative_pairs, fresh.negative_weights
        self.negative_clusters = fresh.negative_clusters

    def reset(self) -> None:
        """Nothing decided: no weights (fit start computes them), no negatives, the guard not stopped."""
        self.clear_negatives()
        self.weights, self.gold_top_share, self.negatives_stopped_at = None, None, None

    def negatives(self) -> Negatives:
        """The negatives as a datamodule gets them (:meth:`ReweightableDataModule.apply_weights`)."""
        return Negatives(tuple(self.negative_pairs), self.negative_weights, self.negative_batches, self.negative_loss)

    def all_weights(self) -> np.ndarray:
        """The gold weights then the negatives' (empty before the gold weights are computed)."""
        if self.weights is None:
            return np.zeros(0)
        return np.concatenate([self.weights, self.negative_weights])

    def trained_negative_clusters(self) -> np.ndarray:
        """The cluster of each negative with a non-zero weight: what training pushes away from."""
        if len(self.negative_clusters) != len(self.negative_weights):
            return np.zeros(0, dtype=np.int64)  # a state restored without cluster ids (see load_state_dict)
        return self.negative_clusters[self.negative_weights != 0]

    def summary(self) -> dict[str, float]:
        """The ``dress/...`` scalars of this state (:mod:`lightning_div.keys`)."""
        all_w = self.all_weights()
        return {
            DRESS_HEAD_CLUSTERS: float(len(self.heads)),
            DRESS_HEAD_SHARE: float(self.head_share),
            DRESS_NEGATIVES: float(np.count_nonzero(self.negative_weights)),
            DRESS_WEIGHT_MEAN: float(all_w.mean()) if all_w.size else 0.0,
            DRESS_WEIGHT_MIN: float(all_w.min()) if all_w.size else 0.0,
            DRESS_WEIGHT_MAX: float(all_w.max()) if all_w.size else 0.0,
            DRESS_EFFECTIVE_SAMPLE_SIZE: effective_sample_size(all_w),
        }

    def state_dict(self) -> dict[str, Any]:
        """Plain lists and numbers (a checkpoint loads them with ``weights_only=True``).

        ``negative_loss`` and ``negative_batches`` are the callback's settings, not restored from here.
        """
        return {
            "weights": None if self.weights is None else self.weights.tolist(),
            "heads": self.heads.tolist(),
            "head_share": self.head_share,
            "negative_pairs": [(list(p.context), p.response) for p in self.negative_pairs],
            "negative_weights": self.negative_weights.tolist(),
            "negative_clusters": self.negative_clusters.tolist(),
            "mined_for": self.mined_for,
            "gold_top_share": self.gold_top_share,
            "negatives_stopped_at": self.negatives_stopped_at,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved.

        Raises:
            ValueError: negatives and their weights (or cluster ids) of different lengths.
        """
        weights = state.get("weights")
        self.weights = None if weights is None else _floats(weights)
        pairs = [DialoguePair(tuple(c), r, source=_SOURCE) for c, r in state.get("negative_pairs", [])]
        negative_weights = _floats(state.get("negative_weights"))
        if len(pairs) != len(negative_weights):
            raise ValueError(f"DRESS checkpoint: {len(pairs)} negatives but {len(negative_weights)} weights")
        clusters = _ints(state.get("negative_clusters"))
        if clusters.size and len(clusters) != len(pairs):
            raise ValueError(f"DRESS checkpoint: {len(pairs)} negatives but {len(clusters)} cluster ids")
        self.negative_pairs, self.negative_weights, self.negative_clusters = pairs, negative_weights, clusters
        self.heads = _ints(state.get("heads"))
        self.head_share = float(state.get("head_share", 0.0))
        mined_for = state.get("mined_for")
        self.mined_for = None if mined_for is None else int(mined_for)
        top = state.get("gold_top_share")  # absent from older checkpoints: the guard uses its floor alone
        self.gold_top_share = None if top is None else float(top)
        stopped = state.get("negatives_stopped_at")
        self.negatives_stopped_at = None if stopped is None else int(stopped)
