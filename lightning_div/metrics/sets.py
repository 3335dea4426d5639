"""Diversity of one response set: the set-metric type and the Sent-BERT metric.

These serve the meta-evaluation (:mod:`lightning_div.meta_eval`) and are also the criteria
of Diversity Threshold Generation (:mod:`lightning_div.nli.threshold`). They live here, below
both, because ``meta_eval.set_metrics`` already imports ``threshold`` (its Sent-BERT and
decTest pieces): had they moved into ``meta_eval/``, ``threshold`` importing them back
would close an import cycle through ``meta_eval/__init__``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

SetMetric = Callable[[list[str]], float]
"""A set metric: one response set in, one diversity value out."""


def fewer_than_two(n: int, what: str) -> float:
    """NaN, with a warning: a pairwise diversity of a set of ``n`` < 2 responses has no pairs, so is undefined.

    Args:
        n: the number of responses in the set.
        what: the metric's name, for the warning.

    Returns:
        ``math.nan``.
    """
    warnings.warn(
        f"{what} of a set of {n} response(s) is undefined (it needs at least 2 responses to form a pair): NaN",
        RuntimeWarning,
        stacklevel=3,
    )
    return math.nan


class NegativeMeanCosine:
    """Sent-BERT diversity of a set: minus the mean cosine similarity over its response pairs.

    ``encode(texts) -> array [len(texts), d]`` is any sentence encoder (e.g.
    ``lightning_div.semantic.encoder.ResponseEncoder`` or a sentence-transformers model's
    ``encode``). Embeddings are cached by text, so threshold generation encodes each
    response once. A set of fewer than 2 responses has no pairs: its diversity is
    undefined, NaN with a warning (Diversity Threshold Generation then stops with an error
    naming the set; use n >= 3 so that its (n-1)-subsets have pairs).

    Args:
        encode: ``list[str] -> array [len(texts), d]``.
    """

    def __init__(self, encode: Callable[[list[str]], Any]) -> None:
        self.encode = encode
        self._cache: dict[str, np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> float:
        """The negative mean pairwise cosine of ``texts``' embeddings (NaN with a warning below 2 texts)."""
        texts = list(texts)
        if len(texts) < 2:
            return fewer_than_two(len(texts), "the negative mean cosine similarity")
        new = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if new:
            vectors = np.asarray(self.encode(new), dtype=np.float64)
            if vectors.ndim != 2 or vectors.shape[0] != len(new):
                raise ValueError(f"encode({len(new)} texts) returned shape {vectors.shape}, expected ({len(new)}, dim)")
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            if not np.all(np.isfinite(vectors)) or np.any(norms == 0):
                raise ValueError("encode returned a zero or non-finite embedding; cosine similarity is undefined")
            self._cache.update(zip(new, vectors / norms))
        unit = np.stack([self._cache[t] for t in texts])
        sims = unit @ unit.T
        n = len(texts)
        return -float((sims.sum() - np.trace(sims)) / (n * (n - 1)))
