"""DRESS (Han et al., 2022): semantic reweighting of the training data.

``weights`` computes the gold weights and the head clusters, ``losses`` the weighted
token loss (negatives as -1 x NLL or unlikelihood), and ``protocol`` the contract between
the :class:`~lightning_div.callbacks.DRESSReweighting` callback and a datamodule.
"""

from lightning_div.dress.losses import NEGATIVE_LOSSES, unlikelihood_per_example, weighted_lm_loss
from lightning_div.dress.protocol import Negatives, ReweightableDataModule
from lightning_div.dress.weights import dress_weights, effective_sample_size, head_clusters, negative_weights

__all__ = [
    "NEGATIVE_LOSSES",
    "Negatives",
    "ReweightableDataModule",
    "dress_weights",
    "effective_sample_size",
    "head_clusters",
    "negative_weights",
    "unlikelihood_per_example",
    "weighted_lm_loss",
]
