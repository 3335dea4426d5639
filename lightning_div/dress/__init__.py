"""DRESS (Han et al., 2022): semantic reweighting of the training data.

``weights`` computes the gold weights and the head clusters, ``losses`` the weighted
token loss (negatives as -1 x NLL or unlikelihood) and its gold / negative parts,
``state`` everything DRESS decided (what it checkpoints and draws), and ``degeneration`` the
signs that training with DRESS collapsed the generations (the rule of
:class:`~lightning_div.measure.alerts.DRESSAlert`). The contract between the
:class:`~lightning_div.callbacks.DRESSReweighting` callback and a datamodule
(:class:`Negatives`, :class:`ReweightableDataModule`) is :mod:`lightning_div.reweighting`, below
both DRESS and the data side, so that a datamodule implements it without importing DRESS.
"""

from typing import Any

from lightning_div.dress import degeneration
from lightning_div.dress.degeneration import ON_COLLAPSE, collapse_reasons
from lightning_div.dress.losses import DressLoss, dress_loss, unlikelihood_per_example, weighted_lm_loss
from lightning_div.dress.state import DressState
from lightning_div.dress.weights import dress_weights, effective_sample_size, head_clusters, negative_weights
from lightning_div.keys import NEGATIVE_LOSSES
from lightning_div.reweighting import Negatives, ReweightableDataModule

__all__ = [
    "NEGATIVE_LOSSES",
    "ON_COLLAPSE",
    "DressLoss",
    "DressState",
    "collapse_reasons",
    "Negatives",
    "ReweightableDataModule",
    "dress_loss",
    "dress_weights",
    "effective_sample_size",
    "head_clusters",
    "negative_weights",
    "unlikelihood_per_example",
    "weighted_lm_loss",
]


def __getattr__(name: str) -> Any:
    """0.2's ``CollapseThresholds`` (deprecated: ``DRESSAlert``), as :mod:`lightning_div.dress.degeneration` gives it."""
    if name == "CollapseThresholds":
        return getattr(degeneration, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
