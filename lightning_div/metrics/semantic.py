"""Sem-Ent (Han et al., 2022): entropy of the semantic-cluster distribution of responses."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lightning_div.metrics.lexical import entropy_from_counts


def cluster_histogram(cluster_ids: Sequence[int] | np.ndarray, num_clusters: int) -> np.ndarray:
    """Counts of each cluster id over ``num_clusters`` bins (int64), validating the ids."""
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
    """Sem-Ent = -sum_j p_j ln p_j over the cluster histogram (nats, at most ln k; 0.0 if empty)."""
    return entropy_from_counts(cluster_histogram(cluster_ids, num_clusters))


def _distribution(counts: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    p = np.asarray(counts, dtype=np.float64)
    if p.ndim != 1 or not np.all(np.isfinite(p)) or (p < 0).any():
        raise ValueError(f"{name} must be a 1-D array of finite counts >= 0")
    if p.sum() <= 0:
        raise ValueError(f"{name} is empty (all counts 0): a distribution needs at least one response")
    return p / p.sum()


def cluster_js_divergence(counts: Sequence[float] | np.ndarray, reference_counts: Sequence[float] | np.ndarray,
                          base: float = 2.0) -> float:
    """Jensen-Shannon divergence between two cluster histograms (counts or shares; each is normalised).

    JS(P, Q) = (KL(P || M) + KL(Q || M)) / 2 with M = (P + Q) / 2, computed as the square
    of scipy's ``jensenshannon`` distance. In base 2 (the default) it is in bits and lies in
    [0, 1]: 0 for identical distributions, 1 for disjoint ones.
    """
    from scipy.spatial.distance import jensenshannon

    p, q = _distribution(counts, "counts"), _distribution(reference_counts, "reference_counts")
    if p.shape != q.shape:
        raise ValueError(f"the histograms have {p.size} and {q.size} clusters")
    return float(jensenshannon(p, q, base=base) ** 2)


def top_cluster_share(cluster_ids: Sequence[int] | np.ndarray, num_clusters: int) -> float:
    """Share of the responses in the most frequent cluster (1/k when spread evenly, 1 when collapsed)."""
    counts = cluster_histogram(cluster_ids, num_clusters)
    return float(counts.max() / counts.sum()) if counts.sum() else 0.0
