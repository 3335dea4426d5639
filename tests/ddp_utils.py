"""Run a function on N CPU processes joined by torch.distributed (gloo) and collect results."""

from __future__ import annotations

import datetime
import os
import pickle
import socket
import tempfile
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(
    rank: int, world_size: int, port: int, out_dir: str, fn: Callable, args: tuple, timeout_s: float | None = None
) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    timeout = {} if timeout_s is None else {"timeout": datetime.timedelta(seconds=timeout_s)}
    dist.init_process_group("gloo", rank=rank, world_size=world_size, **timeout)
    try:
        result = fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"{rank}.pkl"), "wb") as f:
        pickle.dump(result, f)


def run_distributed(
    fn: Callable[..., Any], world_size: int = 2, *args: Any, timeout_s: float | None = None
) -> list[Any]:
    """fn(rank, world_size, *args) on every rank; returns the per-rank results in rank order.

    ``timeout_s``: a collective that waits longer raises (gloo's timeout), so a hang fails the test.
    """
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(_worker, args=(world_size, free_port(), out_dir, fn, args, timeout_s), nprocs=world_size, join=True)
        results = []
        for rank in range(world_size):
            with open(os.path.join(out_dir, f"{rank}.pkl"), "rb") as f:
                results.append(pickle.load(f))
    return results
