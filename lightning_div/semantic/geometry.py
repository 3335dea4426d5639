"""The arithmetic of the clusters' space: rows checked and L2-normalised, the exact PCA, its projection.

:class:`~lightning_div.semantic.clusters.SemanticClusters` fits and assigns with these; they are
apart so that the numbers (float32 rows, a float64 PCA matching scikit-learn's to 1e-7) are one
module's job, tested on their own, and a loaded clusters file runs the same arithmetic as a fit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["check_rows", "count_distinct", "pca", "project"]


def check_rows(x: Any, name: str = "embeddings") -> np.ndarray:
    """float32 [n, d] with finite, non-zero rows (L2-normalising a zero row is undefined)."""
    arr = np.asarray(x)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array [n, dim], got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
        raise ValueError(f"{name} must be real numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float32, copy=False)
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        bad = int(np.flatnonzero(~finite)[0])
        raise ValueError(f"{name}[{bad}] contains NaN or inf ({int((~finite).sum())} such rows)")
    norms = np.linalg.norm(arr, axis=1)
    if arr.shape[0] and (norms == 0).any():
        bad = int(np.flatnonzero(norms == 0)[0])
        raise ValueError(f"{name}[{bad}] is the zero vector, which has no direction to L2-normalise")
    return arr / norms[:, None].astype(np.float32)


def count_distinct(x: np.ndarray) -> int:
    """Distinct unit rows, equal up to float32 rounding (rounded to 1e-6 so that v and 3v count once)."""
    rounded = np.ascontiguousarray(np.round(x, 6) + 0.0)  # + 0.0 turns -0.0 into 0.0
    # rows as opaque bytes: a 1-D unique, much faster than np.unique(axis=0)
    return int(np.unique(rounded.view(np.dtype((np.void, rounded.dtype.itemsize * rounded.shape[1])))).size)


def pca(x: np.ndarray, seed: int, chunk: int = 4096) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean (float64), explained-variance ratios and all components (rows, float64) of ``x`` [n, d] float32.

    With n >= d: eigendecomposition of the d x d covariance of the *centred* data, built in
    float32 chunks of ``chunk`` rows and summed in float64. scikit-learn's ``covariance_eigh``
    needs a float64 copy of x for that accuracy (it subtracts the mean after a float32 product,
    which lost 7e-4 in the components); this matches the float64 result to 1e-7 at 50,000 x
    1,024 in 0.6 s instead of 0.95 s, without the copy (400 MB there). MAUVE's float32 SVD
    took 61 s. Components follow scikit-learn's sign convention (largest |entry| positive).
    With n < d: scikit-learn's exact SVD, with MAUVE's random_state (the authors pass seed
    25: PCA 26, faiss 27), which that solver does not use.
    """
    from sklearn.utils.extmath import svd_flip

    n, d = x.shape
    if n < d:
        from sklearn.decomposition import PCA

        fitted = PCA(n_components=None, svd_solver="full", random_state=seed).fit(x.astype(np.float64))
        return fitted.mean_, np.nan_to_num(fitted.explained_variance_ratio_, nan=0.0), fitted.components_
    mean = x.mean(axis=0, dtype=np.float64)
    shift = mean.astype(np.float32)
    scatter = np.zeros((d, d))
    for start in range(0, n, chunk):
        block = x[start : start + chunk] - shift
        scatter += block.T @ block
    # the rows were centred on the float32-rounded mean: remove that offset's n * delta delta^T
    delta = mean - shift
    scatter -= n * np.outer(delta, delta)
    variances, vectors = np.linalg.eigh(scatter)
    order = np.argsort(variances)[::-1]
    variances = np.clip(variances[order], 0.0, None)
    _, components = svd_flip(None, np.ascontiguousarray(vectors[:, order].T), u_based_decision=False)
    total = variances.sum()
    ratio = variances / total if total > 0 else np.zeros_like(variances)
    return mean, ratio, components


def project(x: np.ndarray, mean: np.ndarray, components: np.ndarray) -> np.ndarray:
    """PCA projection, written out so that fit and a loaded file run the same arithmetic."""
    return np.ascontiguousarray((x - mean) @ components.T, dtype=np.float32)
