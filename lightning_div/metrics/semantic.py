"""Sem-Ent (Han et al., 2022): entropy of the semantic-cluster distribution of responses."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lightning_div.metrics.lexical import entropy_from_counts


def cluster_histogram(cluster_ids: Sequence[int] | np.ndarray, num_clusters: int) -> np.ndarray:
    """Counts of each cluster id over ``num_clusters`` bins.

    Args:
        cluster_ids: one cluster id per response, integers in [0, num_clusters).
        num_clusters: k.

    Returns:
        int64 array of shape ``(num_clusters,)``.

    Raises:
        ValueError: an id that is negative, >= ``num_clusters``, NaN or not an integer
            (the message names its index), or ``num_clusters`` < 1.

    Examples:
        >>> cluster_histogram([0, 0, 2], num_clusters=4).tolist()
        [2, 0, 1, 0]
    """
    if isinstance(num_clusters, bool) or not isinstance(num_clusters, (int, np.integer)) or num_clusters < 1:
        raise ValueError(f"num_clusters must be an integer >= 1, got {num_clusters!r}")
    ids = np.asarray(cluster_ids)
    if ids.size == 0:
        return np.zeros(num_clusters, dtype=np.int64)
    if ids.ndim != 1:
        raise ValueError(f"cluster_ids must be 1-D, got shape {ids.shape}")
    if not np.issubdtype(ids.dtype, np.integer):
        if not np.all(np.isfinite(ids)) or not np.all(ids == np.round(ids)):
            bad = int(np.flatnonzero(~np.isfinite(ids) | (ids != np.round(ids)))[0])
            raise ValueError(f"cluster_ids[{bad}] = {ids[bad].item()!r} is not an integer cluster id")
        ids = ids.astype(np.int64)
    if ids.min() < 0:
        bad = int(np.argmin(ids))
        raise ValueError(f"cluster_ids[{bad}] = {ids[bad]} is negative; ids must be in [0, {num_clusters})")
    if ids.max() >= num_clusters:
        bad = int(np.argmax(ids))
        raise ValueError(f"cluster_ids[{bad}] = {ids[bad]} is >= num_clusters={num_clusters}")
    return np.bincount(ids, minlength=num_clusters).astype(np.int64)


def semantic_entropy(cluster_ids: Sequence[int] | np.ndarray, num_clusters: int) -> float:
    """Sem-Ent: the entropy of the responses' semantic-cluster distribution (Han et al., 2022).

    Sem-Ent = -sum_j p_j ln p_j, p_j the share of responses in cluster j.

    Args:
        cluster_ids: one cluster id per response, e.g. from
            :meth:`lightning_div.semantic.clusters.SemanticClusters.assign`.
        num_clusters: k.

    Returns:
        The entropy in nats, between 0 and ln k; 0.0 for no responses.

    Raises:
        ValueError: as :func:`cluster_histogram`.

    Examples:
        >>> round(semantic_entropy([0, 0, 1, 1], num_clusters=20), 4)  # ln 2
        0.6931
        >>> semantic_entropy([3, 3, 3], num_clusters=20)  # one cluster: no diversity
        0.0
    """
    return entropy_from_counts(cluster_histogram(cluster_ids, num_clusters))


def _distribution(counts: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    p = np.asarray(counts, dtype=np.float64)
    if p.ndim != 1 or not np.all(np.isfinite(p)) or (p < 0).any():
        raise ValueError(f"{name} must be a 1-D array of finite counts >= 0")
    if p.sum() <= 0:
        raise ValueError(f"{name} is empty (all counts 0): a distribution needs at least one response")
    return p / p.sum()


def cluster_js_divergence(
    counts: Sequence[float] | np.ndarray, reference_counts: Sequence[float] | np.ndarray, base: float = 2.0
) -> float:
    """Jensen-Shannon divergence between two cluster histograms: how far generated responses are from gold.

    JS(P, Q) = (KL(P || M) + KL(Q || M)) / 2 with M = (P + Q) / 2, computed as the square
    of scipy's ``jensenshannon`` (which returns the distance, the square root).

    Args:
        counts: per-cluster counts (or shares) of one set, e.g. the generated responses.
        reference_counts: per-cluster counts (or shares) of the other, e.g. the gold responses.
        base: logarithm base; 2 (the default) gives bits, and the divergence lies in [0, 1].

    Returns:
        0 for identical distributions, 1 (in bits) for disjoint ones.

    Raises:
        ValueError: a histogram with no responses, negative or non-finite counts, or two
            histograms of different lengths.

    Examples:
        >>> round(cluster_js_divergence([4, 0], [3, 3]), 6)  # (log2(4/3) + (log2(2/3) + 1) / 2) / 2
        0.311278
        >>> cluster_js_divergence([1, 0], [0, 1])
        1.0
    """
    from scipy.spatial.distance import jensenshannon

    p, q = _distribution(counts, "counts"), _distribution(reference_counts, "reference_counts")
    if p.shape != q.shape:
        raise ValueError(f"the histograms have {p.size} and {q.size} clusters")
    return float(jensenshannon(p, q, base=base) ** 2)


def top_cluster_share(cluster_ids: Sequence[int] | np.ndarray, num_clusters: int) -> float:
    """Share of the responses in the most frequent cluster.

    Args:
        cluster_ids: one cluster id per response.
        num_clusters: k.

    Returns:
        Between 1/k (spread evenly) and 1 (collapsed onto one cluster); 0.0 for no responses.

    Examples:
        >>> top_cluster_share([2, 2, 2, 0], num_clusters=3)
        0.75
    """
    counts = cluster_histogram(cluster_ids, num_clusters)
    return float(counts.max() / counts.sum()) if counts.sum() else 0.0
