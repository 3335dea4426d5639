"""Distributed samplers for dialogue training: exactly-once epochs and weight-proportional draws.

Both subclass :class:`torch.utils.data.DistributedSampler`, so Lightning keeps them as
they are instead of wrapping them, and both take ``num_replicas`` / ``rank`` explicitly
(defaults read the initialised process group, or 1 / 0 without one).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence, Sized

import numpy as np
import torch
from torch.utils.data import DistributedSampler

from lightning_div.distributed import rank_and_world


def _replicas(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    """(num_replicas, rank), read from the process group where not given (1, 0 without one)."""
    group_rank, group_size = rank_and_world()
    return (group_size if num_replicas is None else num_replicas), (group_rank if rank is None else rank)


class ExactDistributedSampler(DistributedSampler):
    """Every index in ``range(len(dataset))`` exactly once per epoch over all ranks.

    ``DistributedSampler`` evens out the shards by repeating examples, so some are
    trained on twice. Here the shards are evened out with *virtual* indices
    ``len(dataset) + i`` (a repeat of example ``i``) which the dataset must serve as a
    padding row with weight 0 (see :class:`lightning_div.datamodules.dialogue.EncodedDialogues`).
    The order is a permutation seeded by ``seed + epoch`` (call :meth:`set_epoch`), the
    same on every rank; rank ``r`` takes positions ``r, r + R, r + 2R, ...``.
    """

    def __init__(self, dataset: Sized, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0) -> None:
        num_replicas, rank = _replicas(num_replicas, rank)
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=False)

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(n, generator=g).tolist()
        else:
            order = list(range(n))
        order += [n + order[k % n] for k in range(self.total_size - n)] if n else []
        return iter(order[self.rank:self.total_size:self.num_replicas])


def check_sampling_weights(weights: np.ndarray | Sequence[float], what: str = "weights") -> np.ndarray:
    """Weights usable as draw probabilities: finite, >= 0, not all 0 (a ValueError says which rule failed)."""
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(w)):
        bad = int(np.flatnonzero(~np.isfinite(w))[0])
        raise ValueError(f"{what}[{bad}] = {w[bad]} is not finite")
    if np.any(w < 0):
        bad = int(np.flatnonzero(w < 0)[0])
        raise ValueError(f"{what}[{bad}] = {w[bad]} is negative: a sampler draws examples with probability "
                         "proportional to their weight, which cannot be negative. Negative weights (DRESS's "
                         "negatives, -1) only work when the loss multiplies by them: use mode='loss'")
    if w.size and w.sum() <= 0:
        raise ValueError(f"all {what} are 0, so there is nothing to draw")
    return w


class WeightedDistributedSampler(DistributedSampler):
    """Draws indices with replacement, with probability proportional to ``weights``.

    Each epoch draws ``num_samples`` indices in total (default ``len(dataset)``, rounded up
    to a multiple of the number of ranks) from a generator seeded by ``seed + epoch``;
    the stream is the same on every rank and rank ``r`` takes draws ``r, r + R, ...``,
    so the ranks share one weighted sample instead of drawing overlapping ones.
    """

    def __init__(self, dataset: Sized, weights: np.ndarray | Sequence[float], num_samples: int | None = None,
                 num_replicas: int | None = None, rank: int | None = None, seed: int = 0) -> None:
        num_replicas, rank = _replicas(num_replicas, rank)
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed, drop_last=False)
        w = check_sampling_weights(weights)
        if len(w) != len(dataset):
            raise ValueError(f"got {len(w)} weights for {len(dataset)} examples")
        self.weights = torch.from_numpy(w)
        total = len(dataset) if num_samples is None else int(num_samples)
        if total < 0:
            raise ValueError(f"num_samples must be >= 0, got {num_samples}")
        self.num_samples = math.ceil(total / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self) -> Iterator[int]:
        if self.total_size == 0:
            return iter([])
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        draws = torch.multinomial(self.weights, self.total_size, replacement=True, generator=g)
        return iter(draws[self.rank::self.num_replicas].tolist())
