"""Run a function on N CPU processes joined by torch.distributed (gloo) and collect results."""

from __future__ import annotations

import datetime
import itertools
import multiprocessing
import os
import pickle
import socket
import tempfile
import zlib
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp

#: Ports handed to the tests' process groups: blocks of this many, below Linux's ephemeral range
#: (32768-60999), so no socket the kernel hands out (an "any free port" probe included) lands in one.
PORT_BLOCK = 400
FIRST_PORT, LAST_PORT = 20000, 32000


def _worker_index() -> int:
    """0, 1, ... for pytest-xdist's workers gw0, gw1, ...; 0 in a run without xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker[2:]) if worker[2:].isdigit() else 0


@cache
def _ports() -> Iterator[int]:
    """This process's block of ports, each handed out once (in turn, wrapping round).

    Each xdist worker has its own block (the workers of one run take consecutive blocks), so two
    workers never race for one port, as "bind port 0, close, pass the number on" lets them. The
    run's id (or the pid without xdist) picks where the blocks start, so two test sessions on
    one machine rarely share a block; a port some other program holds is stepped over.
    """
    blocks = (LAST_PORT - FIRST_PORT) // PORT_BLOCK
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or str(os.getpid())
    block = (zlib.crc32(run.encode()) + _worker_index()) % blocks
    start = FIRST_PORT + block * PORT_BLOCK
    return itertools.cycle(range(start, start + PORT_BLOCK))


def free_port() -> int:
    """A port for a process group's rendezvous (MASTER_PORT), from this worker's own block."""
    for _ in range(PORT_BLOCK):
        port = next(_ports())
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # another program's (or a closing socket's): the next one
                continue
        return port
    raise RuntimeError(f"no free port among this worker's {PORT_BLOCK}")


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


#: What the forkserver imports once, before it forks the ranks: a rank then starts without importing torch,
#: transformers and Lightning again (a spawned rank spent most of a two-process test doing that: 38 s of
#: a 40 s launch on the loaded 2-core machine, against 2 s forked once the server is up).
PRELOAD = ["torch", "torch.distributed", "transformers", "pytorch_lightning", "lightning_div", "helpers"]
# the streaming tests' LitData writers and workers are forked from it too (an ImportError here is ignored)
PRELOAD += ["litdata", "lightning_div.datamodules.streaming"]
# read when the forkserver starts (the first forkserver launch: run_distributed's or forkserver_ddp()'s)
multiprocessing.set_forkserver_preload(PRELOAD)


def forkserver_ddp() -> Any:
    """Lightning's DDP with its processes forked from the forkserver: ``ddp_spawn``'s fresh processes, given
    the pickled trainer and module as ``ddp_spawn``'s are, minus the imports (``PRELOAD``)."""
    from pytorch_lightning.strategies import DDPStrategy

    return DDPStrategy(start_method="forkserver")


def run_distributed(
    fn: Callable[..., Any], world_size: int = 2, *args: Any, timeout_s: float | None = None
) -> list[Any]:
    """fn(rank, world_size, *args) on every rank; returns the per-rank results in rank order.

    The ranks are forked from this process's forkserver (started at the first call, with ``PRELOAD``
    imported and nothing run), so each is a fresh process, as spawned ones are, minus the imports.
    ``timeout_s``: a collective that waits longer raises (gloo's timeout), so a hang fails the test.
    """
    with tempfile.TemporaryDirectory() as out_dir:
        mp.start_processes(
            _worker,
            args=(world_size, free_port(), out_dir, fn, args, timeout_s),
            nprocs=world_size,
            join=True,
            start_method="forkserver",
        )
        results = []
        for rank in range(world_size):
            with open(os.path.join(out_dir, f"{rank}.pkl"), "rb") as f:
                results.append(pickle.load(f))
    return results
