"""Process-group helpers that degrade to no-ops in a single process.

Work is sharded by *batch*, not by item: items are sorted once (e.g. by length),
cut into batches, and rank r runs batches r, r+W, ... Every batch therefore has the
same composition whatever the number of processes, so padding — and with it every
generated token and score — is identical on 1 and N processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch.distributed as dist
from tqdm.auto import tqdm

T = TypeVar("T")
R = TypeVar("R")


def is_distributed() -> bool:
    """True inside an initialised process group of more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank_and_world() -> tuple[int, int]:
    """(rank, world size); (0, 1) outside a process group."""
    if is_distributed():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj`` in rank order (``[obj]`` in a single process)."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """``obj`` of rank ``src`` on every rank."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def batch_plan(n_items: int, batch_size: int, sort_key: Sequence[Any] | None = None) -> list[list[int]]:
    """Item indices cut into batches, items sorted by ``sort_key`` (longest first) when given."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = list(range(n_items))
    if sort_key is not None:
        order.sort(key=lambda i: sort_key[i], reverse=True)
    return [order[i : i + batch_size] for i in range(0, n_items, batch_size)]


def distributed_map(
    fn: Callable[[list[T]], list[R]],
    items: Sequence[T],
    batch_size: int,
    sort_key: Sequence[Any] | None = None,
    show_progress: bool = True,
    desc: str = "lightning-div",
) -> list[R]:
    """``fn`` over batches of ``items``, split across ranks, gathered back in the original order.

    ``fn`` maps a list of items to a list of results of the same length. Every rank
    must call this with the same ``items``; every rank returns the full result list.
    """
    rank, world = rank_and_world()
    batches = batch_plan(len(items), batch_size, sort_key)
    mine = batches[rank::world]
    local: list[tuple[int, R]] = []
    error: str | None = None
    try:
        for batch in tqdm(mine, desc=desc, disable=not show_progress or rank != 0, leave=False):
            results = fn([items[i] for i in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"{desc}: a batch of {len(batch)} items returned {len(results)} results")
            local.extend(zip(batch, results))
    except Exception as err:
        if world == 1:
            raise
        # Still reach the gather below: a rank that skipped it would leave the others waiting forever.
        error = f"rank {rank}: {err!r}"
    parts = gather_objects((local, error))
    errors = [e for _, e in parts if e is not None]
    if errors:
        raise RuntimeError(f"{desc} failed on {len(errors)} of {world} processes: " + "; ".join(errors))
    out: list[Any] = [None] * len(items)
    for part, _ in parts:
        for i, r in part:
            out[i] = r
    return out
