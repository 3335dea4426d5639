"""DRESS (Han et al., 2022): semantic reweighting of training responses.

Gold weight of a training response in cluster c: w = (1 - p_train(c))^lambda, where
p_train is the cluster histogram of the gold training responses (lambda = 30). With
``negatives``, generated responses that fall into "head" clusters (share of the
model's generations > 0.1) are trained on with weight -1, pushing the model away
from what it over-produces: as -1 x NLL (the paper; unbounded gradient ascent) or as
unlikelihood, -log(1 - p(y_t)) a token (Welleck et al., 2020; bounded). The loss
divides the weighted token losses by the number of target tokens, as in the authors'
training loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from lightning_div.metrics.semantic import cluster_histogram


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
    if not np.isfinite(lam) or lam < 0:
        raise ValueError(f"lam must be a finite number >= 0, got {lam}")
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
    if not 0.0 <= threshold < 1.0:
        raise ValueError(f"threshold must be in [0, 1), got {threshold}")
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


NEGATIVE_LOSSES = ("nll", "unlikelihood")


def weighted_lm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    sample_weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    causal: bool = True,
    negative_loss: str = "nll",
) -> torch.Tensor:
    """sum_i w_i sum_t loss_it / (number of non-ignored target tokens in the batch).

    For an example with weight w_i >= 0, loss_it is the token cross-entropy -log p(y_t).
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

    Returns:
        The scalar loss.

    Raises:
        ValueError: logits and labels, or the weights and the batch, do not line up, or
            ``negative_loss`` is unknown.
    """
    if negative_loss not in NEGATIVE_LOSSES:
        raise ValueError(f"negative_loss must be one of {NEGATIVE_LOSSES}, got {negative_loss!r}")
    if causal:
        logits, labels = logits[:, :-1, :], labels[:, 1:]
    if logits.shape[:2] != labels.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} do not line up")
    token_ce = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1), ignore_index=ignore_index, reduction="none"
    ).view(labels.shape)
    per_example = token_ce.sum(dim=1)
    if sample_weight is not None:
        sample_weight = torch.as_tensor(sample_weight, dtype=per_example.dtype, device=per_example.device)
        if sample_weight.shape != per_example.shape:
            raise ValueError(f"sample_weight has shape {tuple(sample_weight.shape)}, expected ({labels.size(0)},)")
        negative = sample_weight < 0
        if negative_loss == "unlikelihood" and bool(negative.any()):
            per_example = torch.where(
                negative,
                -sample_weight * unlikelihood_per_example(token_ce, labels, ignore_index),
                sample_weight * per_example,
            )
        else:
            per_example = per_example * sample_weight
    num_tokens = (labels != ignore_index).sum().clamp(min=1)
    return per_example.sum() / num_tokens


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
