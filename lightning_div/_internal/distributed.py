"""The one distributed layer: every collective of the package goes through this module.

Helpers degrade to no-ops in a single process. Work is sharded by *batch*, not by item:
items are sorted once (by length, :func:`batch_plan`), cut into batches, and rank r runs
batches r, r+W, ... Every batch therefore has the same composition whatever the number of
processes, so padding — and with it every generated token, embedding and score — is
identical on 1 and N processes. :func:`batch_plan` is also the one "sort by length, cut
into batches" helper of single-process code (generation, NLI, embedding).

Inside a callback, where a Trainer is at hand, pass ``trainer.strategy.broadcast`` as
``broadcast`` to :func:`on_rank_zero` so that the strategy's own collective is used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from lightning_div._internal.bars import bar_disabled

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
    """Wait for every rank (a no-op in a single process)."""
    if is_distributed():
        dist.barrier()


def on_rank_zero(fn: Callable[[], T], what: str, broadcast: Callable[[Any, int], Any] | None = None) -> T:
    """``fn()`` run on rank 0 only; its result (or its error) reaches every rank.

    A rank-0 failure is re-raised on rank 0 and raised as a RuntimeError naming it on the
    others, instead of leaving them waiting forever at the broadcast.

    Args:
        fn: the work (e.g. fitting clusters); its result must be picklable.
        what: names the work in the other ranks' error.
        broadcast: ``(obj, src) -> obj`` collective, e.g. ``trainer.strategy.broadcast``;
            None = :func:`broadcast_object`.

    Returns:
        Rank 0's ``fn()`` on every rank.
    """
    rank, world = rank_and_world()
    if world == 1:
        return fn()
    outcome: tuple[str, Any] = ("error", "rank 0 sent nothing")
    error: Exception | None = None
    if rank == 0:
        try:
            outcome = ("ok", fn())
        except Exception as e:  # re-raised below, after the other ranks are told
            error, outcome = e, ("error", f"{type(e).__name__}: {e}")
    outcome = (broadcast or broadcast_object)(outcome, 0)
    if error is not None:
        raise error
    status, payload = outcome
    if status == "error":
        raise RuntimeError(f"{what} failed on rank 0: {payload}")
    return payload


def check_same_on_all_ranks(value: Any, what: str) -> None:
    """Raise ValueError on every rank when ranks hold different ``value`` s (e.g. list lengths)."""
    values = gather_objects(value)
    if any(v != values[0] for v in values):
        raise ValueError(f"{what} must be the same on every rank; got {values} per rank")


def all_gather_rows(rows: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's ``rows`` [n_r, ...] (n_r may differ between ranks), in rank order, on this rank's device.

    Only tensors travel (no pickling): the rows are padded to the longest rank's count, gathered
    on the backend's device (NCCL: the current GPU) and trimmed again.
    """
    if not is_distributed():
        return [rows]
    world = dist.get_world_size()
    counts = gather_objects(int(rows.shape[0]))
    device = _collective_device()
    padded = torch.zeros((max(counts), *rows.shape[1:]), dtype=rows.dtype, device=device)
    padded[: rows.shape[0]] = rows.to(device)
    gathered = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded)
    return [g[:n].to(rows.device) for g, n in zip(gathered, counts)]


def _collective_device() -> torch.device:
    """Where tensors for the default group's collectives must live (NCCL: the current GPU)."""
    backend = str(dist.get_backend()).lower()
    if "nccl" in backend and "gloo" not in backend:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def batch_plan(n_items: int, batch_size: int, sort_key: Sequence[Any] | None = None) -> list[list[int]]:
    """Item indices cut into batches, items sorted by ``sort_key`` (largest first, ties in input order) when given.

    Largest (longest) first: similar lengths share a batch (little padding) and a batch that
    does not fit in memory fails at once, not at the end. The one such helper of the package:
    generation, NLI scoring, embedding and :func:`distributed_map` all cut their batches here.

    Args:
        n_items: how many items.
        batch_size: items per batch, >= 1.
        sort_key: one key per item (e.g. its length in tokens); None keeps the input order.

    Returns:
        Lists of item indices, one per batch.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if sort_key is not None and len(sort_key) != n_items:
        raise ValueError(f"sort_key has {len(sort_key)} keys for {n_items} items")
    order = list(range(n_items))
    if sort_key is not None:
        order.sort(key=lambda i: sort_key[i], reverse=True)  # a stable sort: ties keep their order
    return [order[i : i + batch_size] for i in range(0, n_items, batch_size)]


def length_batches(lengths: Sequence[int], batch_size: int, max_padding: float | None = None) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest first: :func:`batch_plan` keyed by ``lengths``.

    ``max_padding`` also ends a batch early, before the next item would make its padding (every
    item padded to the batch's longest) exceed ``max_padding`` x its items' total length: fewer
    padded positions in more, smaller batches (for work that costs per position, e.g. on a CPU).

    Examples:
        >>> length_batches([1, 3, 3, 2, 5], 2)
        [[4, 1], [2, 3], [0]]
        >>> length_batches([10, 9, 2, 2, 1], 4, max_padding=0.25)
        [[0, 1], [2, 3, 4]]
    """
    batches = batch_plan(len(lengths), batch_size, lengths)
    if max_padding is None:
        return batches
    if max_padding < 0:
        raise ValueError(f"max_padding must be >= 0 or None, got {max_padding}")
    cut: list[list[int]] = []
    current: list[int] = []
    total = 0
    for i in (i for batch in batches for i in batch):  # longest first
        if current and (
            len(current) == batch_size
            or (len(current) + 1) * lengths[current[0]] > (1 + max_padding) * (total + lengths[i])
        ):
            cut.append(current)
            current, total = [], 0
        current.append(i)
        total += lengths[i]
    if current:
        cut.append(current)
    return cut


def distributed_map(
    fn: Callable[[list[T]], list[R]],
    items: Sequence[T],
    batch_size: int,
    sort_key: Sequence[Any] | None = None,
    show_progress: bool = True,
    desc: str = "lightning-div",
    split: bool = True,
) -> list[R]:
    """``fn`` over batches of ``items``, split across ranks, gathered back in the original order.

    ``fn`` maps a list of items to a list of results of the same length. Every rank
    must call this with the same ``items``; every rank returns the full result list.
    ``split=False``: every rank runs every batch itself (the same calls in the same order on
    each, for an ``fn`` whose model talks to the other ranks at every call) and nothing is gathered.
    """
    rank, world = rank_and_world()
    batches = batch_plan(len(items), batch_size, sort_key)
    shares = world if split else 1  # how many ranks the batches are dealt to
    mine = batches[rank::shares] if split else batches
    local: list[tuple[int, R]] = []
    error: str | None = None
    try:
        for batch in tqdm(mine, desc=desc, disable=bar_disabled(show_progress and rank == 0), leave=False):
            results = fn([items[i] for i in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"{desc}: a batch of {len(batch)} items returned {len(results)} results")
            local.extend(zip(batch, results))
    except Exception as err:
        if shares == 1:
            raise
        # Still reach the gather below: a rank that skipped it would leave the others waiting forever.
        error = f"rank {rank}: {err!r}"
    parts = gather_objects((local, error)) if shares > 1 else [(local, None)]
    errors = [e for _, e in parts if e is not None]
    if errors:
        raise RuntimeError(f"{desc} failed on {len(errors)} of {world} processes: " + "; ".join(errors))
    out: list[Any] = [None] * len(items)
    for part, _ in parts:
        for i, r in part:
            out[i] = r
    return out
