"""Distributed samplers for dialogue training: exactly-once epochs and weight-proportional draws.

Both subclass :class:`torch.utils.data.DistributedSampler`, so Lightning keeps them as
they are instead of wrapping them, and both take ``num_replicas`` / ``rank`` explicitly
(defaults read the initialised process group, or 1 / 0 without one). Both can start an
epoch part-way (:meth:`ResumableSampler.skip_at_start`), which :class:`ResumableDataLoader`
uses so that a run resumed from a mid-epoch checkpoint trains on the rest of that epoch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence, Sized
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, DistributedSampler

from lightning_div._internal.counts import check_count
from lightning_div._internal.distributed import rank_and_world
from lightning_div.reweighting import Negatives


def _replicas(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    """(num_replicas, rank), read from the process group where not given (1, 0 without one)."""
    group_rank, group_size = rank_and_world()
    return (group_size if num_replicas is None else num_replicas), (group_rank if rank is None else rank)


def _window_size(pool: int, per_epoch: int | None) -> int:
    """How many examples :func:`epoch_window` returns, without drawing its permutation."""
    per_epoch = check_count("per_epoch", per_epoch)
    return pool if per_epoch is None else min(per_epoch, pool)


def epoch_window(pool: int, per_epoch: int | None, seed: int, epoch: int) -> list[int]:
    """The examples of ``range(pool)`` that epoch ``epoch`` trains when an epoch takes ``per_epoch`` of them.

    Window ``epoch`` of one permutation seeded by ``seed`` (the same for every epoch), wrapping
    around at its end: consecutive epochs take examples not taken before until the pool is used
    up, and over ``pool`` epochs every example is taken ``per_epoch`` times. A function of its
    arguments only, so every process and a resumed run take the same window.

    Args:
        pool: how many examples there are.
        per_epoch: how many an epoch takes; None or >= ``pool``: all of them.
        seed: the permutation's seed.
        epoch: the epoch.

    Returns:
        The indices (unordered; the samplers shuffle them). ``list(range(pool))`` when an epoch takes all.

    Examples:
        >>> sorted(epoch_window(6, 3, seed=0, epoch=0) + epoch_window(6, 3, seed=0, epoch=1))
        [0, 1, 2, 3, 4, 5]
        >>> epoch_window(4, None, seed=0, epoch=7)
        [0, 1, 2, 3]
    """
    per_epoch = check_count("per_epoch", per_epoch)
    if per_epoch is None or per_epoch >= pool:
        return list(range(pool))
    g = torch.Generator()
    g.manual_seed(seed)
    perm = torch.randperm(pool, generator=g).tolist()
    start = (epoch * per_epoch) % pool
    return [perm[(start + k) % pool] for k in range(per_epoch)]


class ResumableSampler(DistributedSampler):
    """A DistributedSampler whose iteration over one given epoch can start part-way.

    Subclasses build the epoch's full index list and pass it through :meth:`_resumed`.
    ``len(sampler)`` stays the full epoch: Lightning counts the batches already trained
    on itself and expects the loader to end where the full epoch ends.
    """

    _skip: tuple[int, int] | None = None  # (epoch, indices to drop at its start)

    def skip_at_start(self, epoch: int, count: int) -> None:
        """Iterating epoch ``epoch`` (as set by :meth:`set_epoch`) starts ``count`` indices in; others are whole."""
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        self._skip = (int(epoch), int(count)) if count else None

    def _resumed(self, indices: list[int]) -> Iterator[int]:
        if self._skip is not None and self._skip[0] == self.epoch:
            indices = indices[self._skip[1] :]
        return iter(indices)


class ExactDistributedSampler(ResumableSampler):
    """Every index in ``range(len(dataset))`` exactly once per epoch over all ranks.

    ``DistributedSampler`` evens out the shards by repeating examples, so some are
    trained on twice. Here the shards are evened out with *virtual* indices
    ``len(dataset) + i`` (a repeat of example ``i``) which the dataset must serve as a
    padding row with weight 0 (see :class:`lightning_div.datamodules.dialogue.EncodedDialogues`).
    The order is a permutation seeded by ``seed + epoch`` (call :meth:`set_epoch`), the
    same on every rank; rank ``r`` takes positions ``r, r + R, r + 2R, ...``.

    With ``gold_per_epoch``, an epoch takes only that many of the first ``num_gold`` indices
    (the gold examples; see :func:`epoch_window`), and every index after them (DRESS's negatives).
    """

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        num_gold: int | None = None,
        gold_per_epoch: int | None = None,
    ) -> None:
        num_replicas, rank = _replicas(num_replicas, rank)
        # torch types `dataset` as Dataset, but only its length is used: any Sized will do
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=False)  # type: ignore[arg-type]
        n = len(dataset)
        self.num_gold = n if num_gold is None else int(num_gold)
        if not 0 <= self.num_gold <= n:
            raise ValueError(f"num_gold={num_gold} for {n} examples")
        self.gold_per_epoch = check_count("gold_per_epoch", gold_per_epoch)
        size = _window_size(self.num_gold, self.gold_per_epoch) + n - self.num_gold
        self.num_samples = math.ceil(size / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)  # type: ignore[arg-type]
        members = epoch_window(self.num_gold, self.gold_per_epoch, self.seed, self.epoch) + list(
            range(self.num_gold, n)
        )
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = [members[i] for i in torch.randperm(len(members), generator=g).tolist()]
        else:
            order = members
        size = len(order)
        order += [n + order[k % size] for k in range(self.total_size - size)] if size else []
        return self._resumed(order[self.rank : self.total_size : self.num_replicas])


class SeparateBatchSampler(ResumableSampler):
    """Shuffled batches that each hold examples of one group only (e.g. gold, then generated negatives).

    The dataset is ``len(groups)`` consecutive ranges of the given sizes. Each epoch
    every group is shuffled and cut into global batches of ``batch_size * num_replicas``
    indices; the last, short batch of a group is filled with *target-less padding* indices
    ``2 * len(dataset) + i`` (see :class:`lightning_div.datamodules.encoding.EncodedDialogues`),
    so no batch mixes groups and no example is repeated or dropped. The order of the batches
    is shuffled too; everything is seeded by ``seed + epoch`` and is the same on every rank,
    and rank ``r`` takes positions ``r, r + R, ...``, i.e. ``batch_size`` indices of each
    global batch, so the DataLoader's batch ``b`` on every rank comes from global batch ``b``.

    Args:
        dataset: the examples (only ``len`` is used).
        groups: the sizes of the consecutive groups; they must add up to ``len(dataset)``.
        batch_size: the DataLoader's batch size (per rank).
        num_replicas: the number of processes (read from the process group if None).
        rank: this process's rank (read from the process group if None).
        seed: the shuffling seed (offset by the epoch).
        first_group_per_epoch: take only this many of the first group's examples each epoch
            (see :func:`epoch_window`); None: all of them.
    """

    def __init__(
        self,
        dataset: Sized,
        groups: Sequence[int],
        batch_size: int,
        num_replicas: int | None = None,
        rank: int | None = None,
        seed: int = 0,
        first_group_per_epoch: int | None = None,
    ) -> None:
        num_replicas, rank = _replicas(num_replicas, rank)
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed, drop_last=False)  # type: ignore[arg-type]
        self.groups = [int(g) for g in groups]
        if any(g < 0 for g in self.groups) or sum(self.groups) != len(dataset):
            raise ValueError(f"group sizes {self.groups} must be >= 0 and add up to the {len(dataset)} examples")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = int(batch_size)
        self.first_group_per_epoch = check_count("first_group_per_epoch", first_group_per_epoch)
        global_batch = self.batch_size * self.num_replicas
        sizes = [_window_size(self.groups[0], self.first_group_per_epoch), *self.groups[1:]] if self.groups else []
        num_batches = sum(math.ceil(size / global_batch) for size in sizes)
        self.total_size = num_batches * global_batch
        self.num_samples = num_batches * self.batch_size

    def _members(self, group: int, epoch: int) -> list[int]:
        """The indices of ``group`` that ``epoch`` trains."""
        start = sum(self.groups[:group])
        per_epoch = self.first_group_per_epoch if group == 0 else None
        return [start + i for i in epoch_window(self.groups[group], per_epoch, self.seed, epoch)]

    def batches(self) -> list[list[int]]:
        """This epoch's global batches (``batch_size * num_replicas`` indices each), in training order."""
        n, global_batch = len(self.dataset), self.batch_size * self.num_replicas  # type: ignore[arg-type]
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        batches = []
        for group in range(len(self.groups)):
            members = self._members(group, self.epoch)
            order = [members[i] for i in torch.randperm(len(members), generator=g).tolist()]
            for b in range(0, len(order), global_batch):
                batch = order[b : b + global_batch]
                batch += [2 * n + batch[k % len(batch)] for k in range(global_batch - len(batch))]
                batches.append(batch)
        return [batches[i] for i in torch.randperm(len(batches), generator=g).tolist()]

    def __iter__(self) -> Iterator[int]:
        flat = [i for batch in self.batches() for i in batch]
        return self._resumed(flat[self.rank : self.total_size : self.num_replicas])


def check_sampling_weights(weights: np.ndarray | Sequence[float], what: str = "weights") -> np.ndarray:
    """Weights usable as draw probabilities: finite, >= 0, not all 0 (a ValueError says which rule failed)."""
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(w)):
        bad = int(np.flatnonzero(~np.isfinite(w))[0])
        raise ValueError(f"{what}[{bad}] = {w[bad]} is not finite")
    if np.any(w < 0):
        bad = int(np.flatnonzero(w < 0)[0])
        raise ValueError(
            f"{what}[{bad}] = {w[bad]} is negative: a sampler draws examples with probability "
            "proportional to their weight, which cannot be negative. Negative weights (DRESS's "
            "negatives, -1) only work when the loss multiplies by them: use mode='loss'"
        )
    if w.size and w.sum() <= 0:
        raise ValueError(f"all {what} are 0, so there is nothing to draw")
    return w


class WeightedDistributedSampler(ResumableSampler):
    """Draws indices with replacement, with probability proportional to ``weights``.

    Each epoch draws ``num_samples`` indices in total (default ``len(dataset)``, rounded up
    to a multiple of the number of ranks) from a generator seeded by ``seed + epoch``;
    the stream is the same on every rank and rank ``r`` takes draws ``r, r + R, ...``,
    so the ranks share one weighted sample instead of drawing overlapping ones.
    """

    def __init__(
        self,
        dataset: Sized,
        weights: np.ndarray | Sequence[float],
        num_samples: int | None = None,
        num_replicas: int | None = None,
        rank: int | None = None,
        seed: int = 0,
    ) -> None:
        num_replicas, rank = _replicas(num_replicas, rank)
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed, drop_last=False)  # type: ignore[arg-type]
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
        return self._resumed(draws[self.rank :: self.num_replicas].tolist())


class ResumableDataLoader(DataLoader):
    """A DataLoader that Lightning checkpoints and restores mid-epoch.

    Lightning 2.x restores a training dataloader's position only when the loader has
    ``state_dict`` / ``load_state_dict``; a plain DataLoader restarts its epoch from the
    first batch, so a run resumed from a mid-epoch checkpoint would train on that epoch's
    first batches twice and never on its last ones. This loader's state is the sampler's
    epoch and ``progress()``, the number of batches of that epoch already trained on (the
    Trainer's count, not the loader's: Lightning fetches a batch ahead); loading it makes
    the next iteration over that epoch skip those batches, exactly, by skipping
    ``batches * batch_size`` indices in a :class:`ResumableSampler`. The sampler's order is
    a function of (seed, epoch), so the batches left are those the uninterrupted run had.

    Batches are counted, not examples, so the position means the same examples only under the same
    batch size, examples per epoch and number of processes: ``settings`` (saved with the position)
    holds them, and a mid-epoch resume under other settings is refused, naming each change (the
    rest of the epoch would skip or repeat examples). A resume at an epoch's end takes any settings.

    Args:
        progress: returns how many batches of the current epoch have been trained on;
            without it the state says 0 (resuming then restarts the epoch, as a DataLoader does).
        settings: what the position depends on besides the sampler's seed (the datamodule gives
            ``batch_size``, ``train_examples_per_epoch`` and ``world_size``); None: not checked.
        *args: as :class:`torch.utils.data.DataLoader`.
        **kwargs: as :class:`torch.utils.data.DataLoader`; ``sampler`` must be a
            :class:`ResumableSampler` for a restored position to take effect.
    """

    def __init__(
        self,
        *args: Any,
        progress: Callable[[], int] | None = None,
        settings: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.progress = progress
        self.settings = None if settings is None else dict(settings)

    def state_dict(self) -> dict[str, Any]:
        """``{"epoch": sampler epoch, "batches": batches of it trained on}``, and ``"settings"`` when given."""
        state: dict[str, Any] = {
            "epoch": int(getattr(self.sampler, "epoch", 0)),
            "batches": int(self.progress()) if self.progress is not None else 0,
        }
        if self.settings is not None:
            state["settings"] = dict(self.settings)
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Make the next iteration over ``state_dict["epoch"]`` skip its first ``state_dict["batches"]`` batches.

        Raises:
            ValueError: a mid-epoch position saved under other ``settings`` (each change named), or a
                loader that cannot start part-way.
        """
        batches = int(state_dict.get("batches", 0))
        if not batches:
            return
        saved = state_dict.get("settings")
        if isinstance(saved, dict) and self.settings is not None:
            changed = [
                f"{k} {saved.get(k)!r} -> {self.settings.get(k)!r}"
                for k in sorted(set(saved) | set(self.settings))
                if saved.get(k) != self.settings.get(k)
            ]
            if changed:
                raise ValueError(
                    f"cannot resume epoch {state_dict.get('epoch')} mid-way: the checkpoint was saved after "
                    f"{batches} batch(es) of it, and since then {', '.join(changed)}; the rest of the epoch would "
                    "skip or repeat examples. Resume with the checkpoint's settings (they may change at the "
                    "next epoch: resume from a checkpoint saved at an epoch's end)"
                )
        if not isinstance(self.sampler, ResumableSampler) or self.batch_size is None:
            raise ValueError(
                f"ResumableDataLoader can resume mid-epoch only with a ResumableSampler and a batch_size, "
                f"got sampler {type(self.sampler).__name__} and batch_size {self.batch_size}"
            )
        self.sampler.skip_at_start(int(state_dict["epoch"]), batches * self.batch_size)


def train_sampler(
    dataset: Sized,
    mode: str,
    negatives: Negatives,
    weights: np.ndarray,
    batch_size: int,
    num_replicas: int,
    rank: int,
    seed: int,
    per_epoch: int | None,
) -> SeparateBatchSampler | ExactDistributedSampler | WeightedDistributedSampler:
    """The training sampler of gold examples followed by ``negatives`` (the last ``len(negatives)`` of ``dataset``).

    ``"loss"`` mode: every example once per epoch, the negatives in batches of their own with
    ``negatives.batches == "separate"``; ``"sampler"`` mode: draws proportional to ``weights`` (gold
    then negatives). ``per_epoch``: the gold examples (or draws) an epoch takes (None: all).
    """
    num_negatives = len(negatives)
    if mode == "loss" and negatives.batches == "separate" and num_negatives:
        return SeparateBatchSampler(
            dataset,
            [len(dataset) - num_negatives, num_negatives],
            batch_size,
            num_replicas,
            rank,
            seed=seed,
            first_group_per_epoch=per_epoch,
        )
    if mode == "loss":
        return ExactDistributedSampler(
            dataset,
            num_replicas,
            rank,
            shuffle=True,
            seed=seed,
            num_gold=len(dataset) - num_negatives,
            gold_per_epoch=per_epoch,
        )
    return WeightedDistributedSampler(
        dataset, weights, num_samples=per_epoch, num_replicas=num_replicas, rank=rank, seed=seed
    )
