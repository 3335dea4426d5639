"""DRESS (Han et al., 2022): semantic reweighting of the training data.

``weights`` computes the gold weights and the head clusters, ``losses`` the weighted
token loss (negatives as -1 x NLL or unlikelihood) and its gold / negative parts,
``state`` everything DRESS decided (what it checkpoints and draws), and ``guard`` the signs
that training with DRESS collapsed the generations. The contract between the
:class:`~lightning_div.callbacks.DRESSReweighting` callback and a datamodule
(:class:`Negatives`, :class:`ReweightableDataModule`) is :mod:`lightning_div.reweighting`, below
both DRESS and the data side, so that a datamodule implements it without importing DRESS.
"""

from lightning_div.dress.degeneration import ON_COLLAPSE, CollapseThresholds, collapse_reasons
from lightning_div.dress.losses import DressLoss, dress_loss, unlikelihood_per_example, weighted_lm_loss
from lightning_div.dress.state import DressState
from lightning_div.dress.weights import dress_weights, effective_sample_size, head_clusters, negative_weights
from lightning_div.keys import NEGATIVE_LOSSES
from lightning_div.reweighting import Negatives, ReweightableDataModule

__all__ = [
    "NEGATIVE_LOSSES",
    "ON_COLLAPSE",
    "CollapseThresholds",
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
