"""torchmetrics wrappers whose states merge exactly across processes (deprecated in 1.0; gone in the next release).

The implementation behind :mod:`lightning_div.metrics.states`, whose names warn: no measure and no
front end uses these states (a measure gathers the responses and computes once, see
``docs/measure.md``). Kept for one release, with its tests, for the users who import them.

Lexical metrics keep every n-gram as a 64-bit id (BLAKE2b of the n-gram) in a
``cat`` list state, so a DDP sync yields the union of all processes' n-grams and
unique counts are exact: never an average of per-process ratios. The chance that
two different n-grams share an id is about m^2 / 2^65 (1e-8 for a million distinct
n-grams). Sem-Ent and RUQ keep integer counts with a ``sum`` reduction.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torchmetrics import Metric

from lightning_div._internal.text import TokenizerSpec, tokenize_all
from lightning_div.metrics.lexical import (
    _check_n,
    distinct_from_counts,
    ead_from_counts,
    entropy_from_counts,
    iter_ngrams,
)
from lightning_div.metrics.ruq import ReferenceChoice, Scores, check_reference, preferred_count
from lightning_div.metrics.semantic import cluster_histogram

_SEP = "\x1f"  # unit separator: cannot appear inside a token produced by the tokenisers


@lru_cache(maxsize=1 << 18)
def _ngram_id(ngram: tuple[str, ...]) -> int:
    digest = hashlib.blake2b(_SEP.join(ngram).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def ngram_ids(token_lists: Sequence[Sequence[str]], n: int) -> torch.Tensor:
    """Stable (process-independent) int64 id of every n-gram occurrence."""
    ids = [_ngram_id(g) for tokens in token_lists for g in iter_ngrams(tokens, n)]
    return torch.tensor(ids, dtype=torch.int64)


def _cat(state: Any) -> torch.Tensor:
    if isinstance(state, torch.Tensor):
        return state
    parts = [s.reshape(-1) for s in state]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)


class _NGramState(Metric):
    """Holds the n-gram ids of every order in ``orders``."""

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(
        self, orders: Sequence[int], tokenizer: TokenizerSpec = "13a", lowercase: bool | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.orders = tuple(_check_n(n) for n in orders)
        self.tokenizer = tokenizer
        self.lowercase = lowercase
        for n in self.orders:
            self.add_state(f"ngrams_{n}", default=[], dist_reduce_fx="cat")

    def update(self, texts: Sequence[str]) -> None:
        """Add a batch of responses."""
        tokens = tokenize_all(texts, self.tokenizer, self.lowercase)
        for n in self.orders:
            getattr(self, f"ngrams_{n}").append(ngram_ids(tokens, n).to(self.device))

    def _unique_total(self, n: int) -> tuple[torch.Tensor, int]:
        ids = _cat(getattr(self, f"ngrams_{n}"))
        _, counts = torch.unique(ids, return_counts=True)
        return counts, int(ids.numel())

    def _distinct(self, n: int) -> float:
        counts, total = self._unique_total(n)
        return distinct_from_counts(int(counts.numel()), total)


class DistinctN(_NGramState):
    """Corpus distinct-n, exact under DDP: the n-gram ids of all processes are gathered.

    Args:
        n: the n-gram order.
        tokenizer: as :func:`~lightning_div.metrics.distinct_n`.
        lowercase: lowercase before tokenising; None (default) = the tokenizer's own setting.
        **kwargs: torchmetrics ``Metric`` arguments (e.g. ``sync_on_compute``).

    Examples:
        >>> metric = DistinctN(2)
        >>> metric.update(["I do not know."])
        >>> metric.update(["I do not care!"])
        >>> metric.compute()
        tensor(0.7500, dtype=torch.float64)
    """

    def __init__(
        self, n: int = 1, tokenizer: TokenizerSpec = "13a", lowercase: bool | None = None, **kwargs: Any
    ) -> None:
        super().__init__((n,), tokenizer, lowercase, **kwargs)
        self.n = self.orders[0]

    def compute(self) -> torch.Tensor:
        return torch.tensor(self._distinct(self.n), dtype=torch.float64)


class AveragedDistinct(_NGramState):
    """Averaged distinct (mean of distinct-n for n = 1..max_n), exact under DDP.

    Args:
        max_n: the highest n-gram order.
        tokenizer: as :func:`~lightning_div.metrics.distinct_n`.
        lowercase: lowercase before tokenising; None (default) = the tokenizer's own setting.
        **kwargs: torchmetrics ``Metric`` arguments (e.g. ``sync_on_compute``).

    Examples:
        >>> metric = AveragedDistinct(max_n=2)
        >>> metric.update(["a b", "a c"])
        >>> metric.compute()
        tensor(0.8750, dtype=torch.float64)
    """

    def __init__(
        self, max_n: int = 5, tokenizer: TokenizerSpec = "13a", lowercase: bool | None = None, **kwargs: Any
    ) -> None:
        super().__init__(range(1, _check_n(max_n) + 1), tokenizer, lowercase, **kwargs)

    def compute(self) -> torch.Tensor:
        return torch.tensor(float(np.mean([self._distinct(n) for n in self.orders])), dtype=torch.float64)


class NGramEntropy(_NGramState):
    """Ent-n over the n-gram frequency distribution gathered from all processes.

    Args:
        n: the n-gram order.
        base: the logarithm's base (e: nats; 2: bits).
        tokenizer: as :func:`~lightning_div.metrics.distinct_n`.
        lowercase: lowercase before tokenising; None (default) = the tokenizer's own setting.
        **kwargs: torchmetrics ``Metric`` arguments (e.g. ``sync_on_compute``).

    Examples:
        >>> metric = NGramEntropy(1, base=2)
        >>> metric.update(["a b", "a c"])
        >>> metric.compute()
        tensor(1.5000, dtype=torch.float64)
    """

    def __init__(
        self,
        n: int = 4,
        base: float = math.e,
        tokenizer: TokenizerSpec = "13a",
        lowercase: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__((n,), tokenizer, lowercase, **kwargs)
        self.n = self.orders[0]
        self.base = base

    def compute(self) -> torch.Tensor:
        counts, _ = self._unique_total(self.n)
        return torch.tensor(entropy_from_counts(counts.cpu().numpy(), self.base), dtype=torch.float64)


class ExpectationAdjustedDistinct(_NGramState):
    """EAD over the unigrams gathered from all processes, with a fixed vocabulary size V.

    Args:
        vocab_size: V (e.g. ``count_vocab(gold_training_responses)``); checked at once.
        tokenizer: as :func:`~lightning_div.metrics.distinct_n`.
        lowercase: lowercase before tokenising; None (default) = the tokenizer's own setting.
        **kwargs: torchmetrics ``Metric`` arguments (e.g. ``sync_on_compute``).

    Examples:
        >>> metric = ExpectationAdjustedDistinct(vocab_size=2)
        >>> metric.update(["a b"])
        >>> metric.compute()
        tensor(1.3333, dtype=torch.float64)
    """

    def __init__(
        self, vocab_size: int, tokenizer: TokenizerSpec = "13a", lowercase: bool | None = None, **kwargs: Any
    ) -> None:
        ead_from_counts(0, 0, vocab_size)  # validates vocab_size now, not at the first compute
        super().__init__((1,), tokenizer, lowercase, **kwargs)
        self.vocab_size = int(vocab_size)

    def compute(self) -> torch.Tensor:
        counts, total = self._unique_total(1)
        return torch.tensor(ead_from_counts(int(counts.numel()), total, self.vocab_size), dtype=torch.float64)


class SemanticEntropy(Metric):
    """Sem-Ent from a cluster histogram summed across processes.

    Args:
        num_clusters: k; checked at once.
        **kwargs: torchmetrics ``Metric`` arguments.

    Examples:
        >>> metric = SemanticEntropy(num_clusters=20)
        >>> metric.update([0, 0])
        >>> metric.update([1, 1])
        >>> metric.compute()  # ln 2
        tensor(0.6931, dtype=torch.float64)
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    counts: torch.Tensor  # a torchmetrics state (add_state), typed for the checker

    def __init__(self, num_clusters: int = 20, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        cluster_histogram([], num_clusters)  # validates num_clusters
        self.num_clusters = int(num_clusters)
        self.add_state("counts", default=torch.zeros(self.num_clusters, dtype=torch.int64), dist_reduce_fx="sum")

    def update(self, cluster_ids: Sequence[int] | np.ndarray | torch.Tensor) -> None:
        """Add the cluster ids of a batch of responses."""
        if isinstance(cluster_ids, torch.Tensor):
            cluster_ids = cluster_ids.detach().cpu().numpy()
        hist = cluster_histogram(cluster_ids, self.num_clusters)
        self.counts += torch.from_numpy(hist).to(self.counts.device)

    def compute(self) -> torch.Tensor:
        return torch.tensor(entropy_from_counts(self.counts.cpu().numpy()), dtype=torch.float64)


class RUQ(Metric):
    """RUQ (percent of prompts whose reference beats the IDK response) from summed counts.

    Args:
        reference: with several references per prompt, ``"lowest"`` (default) or ``"first"``
            (see :func:`lightning_div.metrics.ruq_score`).
        **kwargs: torchmetrics ``Metric`` arguments.

    Examples:
        >>> metric = RUQ()
        >>> metric.update([-1.0, -3.0], [-2.0, -2.0])
        >>> metric.update([[-0.5, -1.5]], [-2.0])
        >>> metric.compute()
        tensor(66.6667, dtype=torch.float64)
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    preferred: torch.Tensor  # torchmetrics states (add_state), typed for the checker
    total: torch.Tensor

    def __init__(self, reference: ReferenceChoice = "lowest", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reference = check_reference(reference)
        self.add_state("preferred", default=torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")

    def update(self, reference_scores: Scores, idk_scores: Sequence[float]) -> None:
        """Add per-prompt scores (a list of references per prompt: the one ``reference`` names)."""
        if isinstance(idk_scores, torch.Tensor):
            idk_scores = idk_scores.tolist()
        if isinstance(reference_scores, torch.Tensor):
            reference_scores = reference_scores.tolist()
        preferred, total = preferred_count(reference_scores, idk_scores, self.reference)
        self.preferred += preferred
        self.total += total

    def compute(self) -> torch.Tensor:
        if int(self.total) == 0:
            raise ValueError("RUQ.compute() has no prompts: call update() with at least one prompt first")
        return torch.tensor(100.0 * int(self.preferred) / int(self.total), dtype=torch.float64)
