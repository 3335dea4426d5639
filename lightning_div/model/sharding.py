"""Sharded parameters: the full model for a measurement under FSDP, a clear refusal where we cannot have it.

Every lightning-div measurement generates and scores with the user's model through ordinary
``forward`` / ``generate`` calls, each rank on its own share of the batches
(:func:`lightning_div._internal.distributed.distributed_map`), so ranks make *different* numbers of model
calls. Under a sharded strategy a module's forward would all-gather its parameters at every
call: ranks calling it a different number of times would wait on each other forever. So a
measurement runs inside :func:`full_parameters`, which gathers the full parameters once on
every rank (the same collectives in the same order everywhere), keeps FSDP from touching them
until the block ends, and then restores the sharded state exactly (nothing written back).

- FSDP1 (``torch.distributed.fsdp.FullyShardedDataParallel``, Lightning's ``FSDPStrategy``):
  ``FSDP.summon_full_params(writeback=False)`` on the outermost FSDP units, their own forward
  bypassed inside the block (it would reshard and all-gather again).
- FSDP2 (``fully_shard``, Lightning's ``ModelParallelStrategy`` with data parallelism only):
  ``unshard()`` of every ``FSDPModule``, resharding after forward switched off inside the
  block; afterwards each parameter group returns to the state it was in.
- Anything else: a no-op.

:func:`check_strategy` refuses, at setup, the strategies whose parameters this does not gather
(DeepSpeed ZeRO stage 3, tensor parallelism), naming the strategy and what to use instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from lightning_div._internal.compat.torch import fsdp1_call_inner, fsdp2_held_unsharded

#: What a user of a refused strategy can use instead (part of every refusal).
SUPPORTED = (
    "lightning-div measures through ordinary forward/generate calls and supports single-device, DDP, "
    "DeepSpeed ZeRO stage 1-2, FSDP (strategy='fsdp', FSDPStrategy) and FSDP2 data parallelism "
    "(ModelParallelStrategy(data_parallel_size=N, tensor_parallel_size=1) with fully_shard in configure_model)"
)


def _deepspeed_zero_stage(strategy: Any) -> int | None:
    """The ZeRO stage of a DeepSpeed strategy (read without importing deepspeed), None for other strategies."""
    names = [cls.__name__ for cls in type(strategy).__mro__]
    if not any("deepspeed" in name.lower() for name in names):
        return None
    if getattr(strategy, "zero_stage_3", False) is True:
        return 3
    config = getattr(strategy, "config", None)
    zero = config.get("zero_optimization") if isinstance(config, dict) else None
    stage = zero.get("stage") if isinstance(zero, dict) else None
    return int(stage) if isinstance(stage, int) else 0


def _tensor_parallel_size(strategy: Any) -> int:
    """Processes per tensor-parallel group of a ModelParallelStrategy (1 for any other strategy).

    Read from the strategy's public ``device_mesh`` (set in ``setup_environment``, before the
    callbacks' ``setup``, where this is called); a strategy without one is not tensor parallel.
    """
    try:
        mesh: Any = getattr(strategy, "device_mesh", None)
    except RuntimeError:  # ModelParallelStrategy before setup_environment: no mesh yet
        return 1
    names = getattr(mesh, "mesh_dim_names", None) or ()
    if mesh is not None and "tensor_parallel" in names:
        return int(mesh["tensor_parallel"].size())
    return 1


def check_strategy(trainer: Any) -> None:
    """Raise when the Trainer's strategy shards parameters in a way the callbacks cannot gather.

    DDP, single-device, DeepSpeed ZeRO stage 1-2, FSDP and FSDP2 data parallelism pass (see
    :func:`full_parameters`). Refused, with the strategy named:

    - DeepSpeed ZeRO stage 3: its partitioned parameters are gathered by DeepSpeed's own hooks
      at every forward, a collective per call, and ranks measure different numbers of batches.
    - tensor parallelism (``ModelParallelStrategy`` with ``tensor_parallel_size`` > 1): each rank
      holds a slice of every layer and must run every forward in lockstep with its group.

    Args:
        trainer: the Trainer (its ``strategy`` is read; nothing is run).

    Raises:
        ValueError: an unsupported strategy; the message names it, says why and what to use.
    """
    strategy = getattr(trainer, "strategy", None)
    if strategy is None:
        return
    name = type(strategy).__name__
    stage = _deepspeed_zero_stage(strategy)
    if stage == 3:
        raise ValueError(
            f"lightning-div cannot measure under {name} with ZeRO stage 3: the parameters are partitioned "
            "across processes and gathered by DeepSpeed at every forward call, a collective each time, while "
            "the callbacks' processes generate and score different numbers of batches (they would hang). Use "
            "ZeRO stage 1 or 2 (deepspeed_stage_2), or FSDP (strategy='fsdp'), whose parameters lightning-div "
            f"gathers once per measurement. {SUPPORTED}."
        )
    tp = _tensor_parallel_size(strategy)
    if tp > 1:
        raise ValueError(
            f"lightning-div cannot measure under {name} with tensor_parallel_size={tp}: tensor parallelism "
            "splits every layer across processes, which must run every forward in lockstep, while the "
            "callbacks' processes generate and score different batches. Use tensor_parallel_size=1 with "
            f"data_parallel_size=<number of processes> (FSDP2 via fully_shard). {SUPPORTED}."
        )


# -- FSDP1 ---------------------------------------------------------------------------------------


def _outermost(module: torch.nn.Module, cls: type) -> list[torch.nn.Module]:
    """The instances of ``cls`` in ``module``'s tree that are not inside another one (``module`` included)."""
    if isinstance(module, cls):
        return [module]
    found: list[torch.nn.Module] = []
    for child in module.children():
        found.extend(_outermost(child, cls))
    return found


def _root_of(pl_module: torch.nn.Module) -> torch.nn.Module:
    """The module the strategy runs: Lightning's FSDPStrategy wraps the LightningModule *from outside*."""
    try:
        trainer = getattr(pl_module, "trainer", None)  # a LightningModule's: raises when it has no Trainer
    except RuntimeError:
        trainer = None
    wrapped = getattr(getattr(trainer, "strategy", None), "model", None)
    if isinstance(wrapped, torch.nn.Module) and any(m is pl_module for m in wrapped.modules()):
        return wrapped
    return pl_module


@contextlib.contextmanager
def _fsdp1_full_parameters(roots: list[torch.nn.Module]) -> Iterator[None]:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    units = [m for root in roots for m in root.modules() if isinstance(m, FSDP)]
    with contextlib.ExitStack() as stack:
        for root in roots:  # the same roots, in module order, on every rank: the same all-gathers
            stack.enter_context(FSDP.summon_full_params(root, recurse=True, writeback=False))
        # FSDP's own forward, called inside the block, would reshard a nested unit after its forward and
        # all-gather it again at the next call: a collective per model call, which hangs when ranks make
        # different numbers of calls. Inside the block every unit already holds its full parameters, so
        # the wrapped module is called directly: an instance attribute shadows FSDP.forward (a bound method,
        # not the module itself, which nn.Module.__setattr__ would register as a submodule named "forward").
        for unit in units:
            unit.forward = fsdp1_call_inner(unit)  # type: ignore[method-assign]
        try:
            yield
        finally:
            for unit in units:
                del unit.forward
    # summon_full_params(writeback=False) has restored the sharded parameters; no collective on exit


# -- FSDP2 ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def _fsdp2_full_parameters(modules: list[torch.nn.Module]) -> Iterator[None]:
    with fsdp2_held_unsharded(modules):
        _refuse_distributed_tensors(modules, "after every fully_shard module was unsharded")
        yield


def forward_communicates(module: Any) -> bool:
    """Whether a forward of ``module`` talks to the other processes: FSDP1 units, FSDP2 (DTensor)
    or DeepSpeed ZeRO-3 parameters in it. Such a module must run the same number of forwards on
    every process, so its work cannot be split into uneven shares."""
    if not isinstance(module, torch.nn.Module):
        return False
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.tensor import DTensor

    if any(isinstance(m, FullyShardedDataParallel) for m in module.modules()):
        return True
    # DeepSpeed marks the parameters it partitions with ds_id (ZeRO-3); fully_shard makes them DTensors
    return any(isinstance(p, DTensor) or hasattr(p, "ds_id") for p in module.parameters())


def _refuse_distributed_tensors(modules: list[torch.nn.Module], when: str) -> None:
    """Raise when parameters are still DTensors (tensor parallelism): no process holds the whole model."""
    from torch.distributed.tensor import DTensor

    leftover = sorted(
        {type(p.placements[0]).__name__ for m in modules for p in m.parameters() if isinstance(p, DTensor)}
    )
    if leftover:
        raise RuntimeError(
            f"lightning-div: parameters are distributed tensors ({', '.join(leftover)} placements) {when}: "
            "tensor parallelism is not supported (each process must hold the whole model to measure it). "
            f"{SUPPORTED}."
        )


def _fsdp2_modules(root: torch.nn.Module) -> list[torch.nn.Module]:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover - torch < 2.6 has no public FSDP2
        return []
    return [m for m in root.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def full_parameters(pl_module: torch.nn.Module) -> Iterator[None]:
    """Inside the block the module's parameters are full on every rank; afterwards sharded exactly as before.

    Under FSDP1 (a ``FullyShardedDataParallel`` around or inside ``pl_module``) the outermost FSDP
    units are summoned with ``writeback=False``; under FSDP2 (``fully_shard``) every
    ``FSDPModule`` is unsharded. Entering is collective (all-gathers, identical on every rank),
    so every rank must enter; inside, no model call communicates, so ranks may run different
    numbers of forwards; leaving is local. Changes made to the parameters inside are
    discarded. A no-op for a module without sharded parameters (single device, DDP).

    Args:
        pl_module: the LightningModule (or any module); when a Trainer's strategy wraps it from
            outside (Lightning's ``FSDPStrategy``), the wrapper is what is gathered.

    Yields:
        Nothing; the block runs with the full parameters.

    Raises:
        RuntimeError: parameters still distributed after unsharding (tensor parallelism).
    """
    if not torch.distributed.is_available():  # a torch build without distributed has nothing sharded
        yield
        return
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    root = _root_of(pl_module)
    fsdp1 = _outermost(root, FSDP)
    fsdp2 = _fsdp2_modules(root)
    if fsdp1:
        with _fsdp1_full_parameters(fsdp1):
            yield
    elif fsdp2:
        with _fsdp2_full_parameters(fsdp2):
            yield
    else:
        _refuse_distributed_tensors([root], "and no fully_shard module holds them")
        yield


__all__ = ["check_strategy", "full_parameters"]
