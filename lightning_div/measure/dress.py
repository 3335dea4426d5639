"""DRESS's negative mining (Han et al., 2022), with no trainer: generate, cluster, weigh the head clusters.

The Lightning :class:`~lightning_div.callbacks.DRESSReweighting` chooses when to mine and on
which training contexts, and trains on the result; what a round mines is :class:`NegativeMiner`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lightning_div._internal.checks import warn_if_mostly_empty
from lightning_div.dress.weights import check_head_threshold, check_negative_weight, head_clusters, negative_weights
from lightning_div.keys import MOSTLY_EMPTY
from lightning_div.measure.base import Measure
from lightning_div.model.generation import generate_responses
from lightning_div.pairs import DialoguePair
from lightning_div.semantic.space import SemanticSpace

__all__ = ["MinedNegatives", "NegativeMiner"]


@dataclass
class MinedNegatives:
    """One round of mined negatives (what :meth:`~lightning_div.dress.state.DressState.set_negatives` takes).

    Attributes:
        pairs: the negatives kept, each a context with the model's own response.
        weights: their weights (``negative_weight`` for a response in a head cluster, else 0).
        clusters: the cluster each came from.
        heads: the head clusters (those holding at least ``head_threshold`` of the generations).
        head_share: the share of all the generations that fell in a head cluster.
    """

    pairs: list[DialoguePair]
    weights: np.ndarray
    clusters: np.ndarray
    heads: np.ndarray
    head_share: float


class NegativeMiner(Measure):
    """Mine DRESS's negatives: the model's greedy responses that fall in its over-produced (head) clusters.

    Args:
        space: the semantic space; its clusters are fitted on the gold responses beforehand
            (the DRESS callback fits them at fit start).
        head_threshold: a cluster holding at least this share of the generations is a head cluster.
        negative_weight: the weight of a negative (the paper: -1).
        batch_size: contexts per generation batch.
        show_progress: progress bars.

    Raises:
        ValueError: a ``head_threshold`` outside [0, 1] or a ``negative_weight`` that is not a finite number < 0.
    """

    def __init__(
        self,
        space: SemanticSpace,
        head_threshold: float = 0.1,
        negative_weight: float = -1.0,
        batch_size: int = 32,
        show_progress: bool = False,
    ) -> None:
        self.space = space
        self.head_threshold = check_head_threshold(head_threshold, "head_threshold")
        self.negative_weight = check_negative_weight(negative_weight)
        self.batch_size, self.show_progress = batch_size, show_progress

    def measure(
        self,
        adapter: Any,
        contexts: Sequence[Sequence[str]],
        *,
        generation_kwargs: dict[str, Any] | None = None,
        keep_zero_weights: bool = True,
        device: Any = None,
        who: str = "DRESS",
    ) -> MinedNegatives:
        """Generate one response per context and mine the negatives among them (every process must call it).

        Args:
            adapter: the model (a :class:`~lightning_div.model.adapters.DialogueModelAdapter`).
            contexts: the training contexts of this round, each a list of turns.
            generation_kwargs: what ``generate`` gets.
            keep_zero_weights: keep the generations outside the head clusters too (weight 0: with
                separate negative batches they count in their batches' token denominator).
            device: where the encoder runs.
            who: named in the warning when every response is empty.

        Returns:
            The round's negatives.
        """
        generated = generate_responses(
            adapter, contexts, generation_kwargs, self.batch_size, self.show_progress, "DRESS negatives"
        )
        warn_if_mostly_empty(generated, who, "the negatives", MOSTLY_EMPTY)
        return self.negatives_of(contexts, generated, self.space.assign(generated, device), keep_zero_weights)

    def negatives_of(
        self,
        contexts: Sequence[Sequence[str]],
        generated: Sequence[str],
        ids: np.ndarray,
        keep_zero_weights: bool = True,
    ) -> MinedNegatives:
        """The negatives among given generations and their cluster ids (no model, no encoder).

        Args:
            contexts: the contexts.
            generated: one response per context.
            ids: the responses' cluster ids.
            keep_zero_weights: keep the responses outside the head clusters (weight 0) too.

        Returns:
            The round's negatives.

        Raises:
            ValueError: not one response and one cluster id per context.
        """
        ids = np.asarray(ids, dtype=np.int64)
        if not len(contexts) == len(generated) == len(ids):
            raise ValueError(
                f"{len(contexts)} contexts, {len(generated)} generated responses and {len(ids)} cluster ids: "
                "one of each per context"
            )
        heads = head_clusters(ids, self.space.clusters.num_clusters, self.head_threshold)
        w = negative_weights(ids, heads, self.negative_weight)
        keep = np.arange(len(w)) if keep_zero_weights else np.flatnonzero(w != 0)
        return MinedNegatives(
            [DialoguePair(tuple(contexts[i]), generated[i], source="dress-negative") for i in keep.tolist()],
            w[keep],
            ids[keep],
            heads,
            float(np.isin(ids, heads).mean()) if len(ids) else 0.0,
        )
