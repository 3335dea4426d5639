"""torch's private FSDP state, read in three places (see :mod:`lightning_div._internal.compat`).

Checked on torch 2.13.0 only: the one CPU build CI installs, both the oldest supported release and
the newest CI tests (the development install pins it). The measurement needs the full parameters
of a sharded model for a number of forwards that differs between processes; FSDP's public API
gathers them per forward (a collective each time), so the state that decides when FSDP gathers
and reshards is read and restored here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["fsdp1_call_inner", "fsdp1_flattened", "fsdp2_held_unsharded"]


def fsdp1_flattened(param: torch.nn.Parameter) -> tuple[bool, bool]:
    """``(flat, flattened)``: whether FSDP1 made ``param`` a FlatParameter (``use_orig_params=False``:
    several tensors in one), and whether it flattened it at all (its shape is then not its own).

    Reads ``param._is_flat_param`` and ``param._fsdp_flattened`` (torch's ``_set_fsdp_flattened``).
    No public API serves: ``FlatParameter`` lives in the private ``torch.distributed.fsdp._flat_param``.
    """
    return bool(getattr(param, "_is_flat_param", False)), bool(getattr(param, "_fsdp_flattened", False))


def fsdp1_call_inner(unit: torch.nn.Module) -> Any:
    """The forward of the module an FSDP1 unit wraps, without FSDP's all-gather and reshard around it.

    Reads ``unit._fsdp_wrapped_module``. No public API serves: ``FSDP.module`` returns the same
    module, but is documented to be unwrapped only through ``summon_full_params``, which we are
    inside of; the private name is what ``FullyShardedDataParallel.forward`` itself calls.
    """
    inner: Any = unit._fsdp_wrapped_module
    return inner.__call__


@contextlib.contextmanager
def fsdp2_held_unsharded(modules: list[torch.nn.Module]) -> Iterator[None]:
    """Every ``fully_shard`` module of ``modules`` unsharded for the block, its forwards not resharding,
    and each parameter group returned afterwards to the state it was in (sharded, sharded to the
    post-forward mesh, or unsharded).

    Reads each module's FSDP state (``_get_fsdp_state()``), its ``_fsdp_param_groups``, their
    ``post_forward_mesh_info``, ``is_unsharded`` / ``is_sharded_post_forward`` and ``_to_sharded*``, and
    the state's ``_auto_reshard_after_forward`` / ``_is_root``. No public API serves: ``unshard()`` /
    ``reshard()`` and ``set_reshard_after_forward()`` are public, but nothing public says which state a
    group was in or what resharding the user (or FSDP's lazy root initialisation) chose, so they could
    not be restored.
    """
    groups: list[tuple[Any, Any]] = []
    for module in modules:
        state: Any = module._get_fsdp_state()  # type: ignore[operator]
        groups.extend((state, group) for group in state._fsdp_param_groups)
    # Each group's state before, to return to it: sharded, sharded to the smaller post-forward mesh, or
    # unsharded (the root's parameters stay unsharded after a forward without backward, e.g. validation).
    before = [
        (
            group,
            "unsharded" if group.is_unsharded else "post_forward" if group.is_sharded_post_forward else "sharded",
            group.post_forward_mesh_info,
            state._auto_reshard_after_forward,
            state._is_root,
        )
        for state, group in groups
    ]
    try:
        for module in modules:  # module order, the same on every rank: the same all-gathers everywhere
            module.unshard()  # type: ignore[operator]
        # Inside the block FSDP's forward hooks must not reshard (the next call would all-gather again: a
        # collective per model call, which hangs when ranks make different numbers of calls); with
        # resharding off, their unshard is a no-op on the already unsharded groups.
        for _, group in groups:
            group.post_forward_mesh_info = None
        yield
    finally:
        for (state, _), (group, was, mesh_info, auto, was_root) in zip(groups, before):
            if was_root is None and state._is_root and auto:
                # The first forward ran inside the block: FSDP's lazy initialisation made this the root and
                # set it not to reshard after forward (the default for the root); keep that decision.
                mesh_info = None
            group.post_forward_mesh_info = mesh_info
            state._auto_reshard_after_forward = auto
            if was == "sharded" and not group.is_sharded:
                group._to_sharded()
            elif was == "post_forward" and not group.is_sharded_post_forward:
                group._to_sharded_post_forward()
