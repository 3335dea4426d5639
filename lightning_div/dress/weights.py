"""DRESS (Han et al., 2022) weights: semantic reweighting of training responses.

Gold weight of a training response in cluster c: w = (1 - p_train(c))^lambda, where
p_train is the cluster histogram of the gold training responses (lambda = 30). With
``negatives``, generated responses that fall into "head" clusters (share of the
model's generations > 0.1) are trained on with weight -1, pushing the model away
from what it over-produces: as -1 x NLL (the paper; unbounded gradient ascent) or as
unlikelihood, -log(1 - p(y_t)) a token (Welleck et al., 2020; bounded). The loss
divides the weighted token losses by the number of target tokens, as in the authors'
training loop (:mod:`lightning_div.dress.losses`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from lightning_div.metrics.semantic import cluster_histogram


def check_lam(lam: Any) -> float:
    """DRESS's exponent lambda as given: a finite number >= 0 (``True`` and ``"30"`` are not numbers).

    Raises:
        ValueError: anything else, naming ``lam``.
    """
    value = float(lam) if isinstance(lam, numbers.Real) and not isinstance(lam, bool) else math.nan
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"lam must be a finite number >= 0 (the gold weights' exponent; the paper: 30), got {lam!r}")
    return value


def check_head_threshold(threshold: Any, name: str = "threshold") -> float:
    """A head-cluster share as given: a number in [0, 1) (a share of 1 or more would make no cluster a head).

    Raises:
        ValueError: anything else, naming ``name``.
    """
    value = float(threshold) if isinstance(threshold, numbers.Real) and not isinstance(threshold, bool) else math.nan
    if not 0.0 <= value < 1.0:  # NaN too
        raise ValueError(f"{name} must be a share in [0, 1) (the paper: 0.1), got {threshold!r}")
    return value


def check_negative_weight(weight: Any, name: str = "Mining.weight") -> float:
    """A mined response's weight as given: a finite number < 0.

    A positive weight would train the head-cluster generations as gold examples, reinforcing
    what DRESS pushes the model away from; 0 would train nothing (``mining=None`` says that).

    Raises:
        ValueError: anything else, naming ``name``.
    """
    value = float(weight) if isinstance(weight, numbers.Real) and not isinstance(weight, bool) else math.nan
    if not math.isfinite(value) or value >= 0:
        raise ValueError(
            f"{name} must be a finite number < 0 (the paper: -1; a positive weight would reinforce the "
            f"head-cluster generations DRESS pushes away from; mining=None trains none), got {weight!r}"
        )
    return value


def dress_weights(
    cluster_ids: Sequence[int] | np.ndarray, num_clusters: int, lam: float = 30.0, normalize: bool = False
) -> np.ndarray:
    """w_i = (1 - p_train(c_i))^lam over the gold training responses' cluster ids (float64).

    ``normalize=True`` rescales to mean 1. Off by default, as in the paper: the raw
    weights are all <= 1 (about 0.04 for a cluster holding 10 % of the data at lam=30),
    so unnormalised DRESS also lowers the effective learning rate; normalising keeps
    the step size of unweighted training and changes only the relative emphasis.

    Args:
        cluster_ids: the cluster id of each gold training response.
        num_clusters: k.
        lam: the exponent lambda (the paper: 30).
        normalize: rescale the weights to mean 1.

    Returns:
        float64 array, one weight per response, in [0, 1] (unnormalised).

    Raises:
        ValueError: ``lam`` negative or not finite, bad cluster ids, or ``normalize`` with
            every response in one cluster (all weights 0).

    Examples:
        >>> dress_weights([0, 0, 0, 1], num_clusters=2, lam=1).tolist()
        [0.25, 0.25, 0.25, 0.75]
    """
    lam = check_lam(lam)
    ids = np.asarray(cluster_ids)
    hist = cluster_histogram(ids, num_clusters)
    if hist.sum() == 0:
        return np.zeros(0, dtype=np.float64)
    p_train = hist / hist.sum()
    weights = (1.0 - p_train[ids.astype(np.int64)]) ** lam
    if normalize:
        mean = weights.mean()
        if mean <= 0:  # every response in one cluster: (1 - 1)^lam = 0 for all
            raise ValueError("cannot normalise DRESS weights: all gold responses are in one cluster, every weight is 0")
        weights = weights / mean
    return weights


def head_clusters(generated_ids: Sequence[int] | np.ndarray, num_clusters: int, threshold: float = 0.1) -> np.ndarray:
    """Clusters whose share q_j of the generated responses is > threshold (sorted ids).

    Args:
        generated_ids: the cluster id of each generated response.
        num_clusters: k.
        threshold: the share above which a cluster is a head cluster (the paper: 0.1).

    Returns:
        int64 array of the head clusters' ids, sorted; empty for no responses.

    Raises:
        ValueError: ``threshold`` outside [0, 1), or bad cluster ids.

    Examples:
        >>> head_clusters([0, 0, 0, 1, 2, 2], num_clusters=5, threshold=0.3).tolist()
        [0, 2]
    """
    threshold = check_head_threshold(threshold)
    hist = cluster_histogram(generated_ids, num_clusters)
    if hist.sum() == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(hist / hist.sum() > threshold).astype(np.int64)


def negative_weights(
    generated_ids: Sequence[int] | np.ndarray, heads: Sequence[int] | np.ndarray, negative_weight: float = -1.0
) -> np.ndarray:
    """Weight of each generated response: ``negative_weight`` in a head cluster, else 0 (not trained on).

    Args:
        generated_ids: the cluster id of each generated response.
        heads: the head clusters (from :func:`head_clusters`).
        negative_weight: the weight of a response in a head cluster (the paper: -1).

    Returns:
        float64 array, one weight per generated response.

    Examples:
        >>> negative_weights([0, 1, 2], heads=[0, 2]).tolist()
        [-1.0, 0.0, -1.0]
    """
    ids = np.asarray(generated_ids, dtype=np.int64)
    return np.where(np.isin(ids, np.asarray(heads, dtype=np.int64)), float(negative_weight), 0.0)


def effective_sample_size(weights: Sequence[float] | np.ndarray) -> float:
    """Kish's effective sample size (sum |w|)^2 / sum w^2; equals n for uniform weights, 0 for none.

    Args:
        weights: the per-example weights (negative ones count by their magnitude).

    Returns:
        The effective number of examples.

    Examples:
        >>> effective_sample_size([1.0, 1.0, 1.0, 1.0])
        4.0
        >>> effective_sample_size([1.0, 0.0, 0.0, 0.0])
        1.0
    """
    w = np.abs(np.asarray(weights, dtype=np.float64))
    denom = float((w**2).sum())
    return float(w.sum() ** 2 / denom) if denom > 0 else 0.0
