"""Where a fit is, read from Lightning's loops in one place.

Lightning has no public API for three things lightning-div needs: the epoch a resumed fit
starts with, seen from ``on_fit_start`` (the loops are restored only after it), the
batches of the current epoch already trained on (what a mid-epoch checkpoint has seen),
and the step Lightning logs epoch-end scalars at. Two of them read Lightning internals, through
:mod:`lightning_div._internal.compat.lightning`, and fall back to public values
(``trainer.current_epoch``, None) where the internals are not there.
"""

from __future__ import annotations

from typing import Any

from lightning_div._internal.compat import lightning as compat

__all__ = ["batches_that_stepped", "batches_trained_this_epoch", "starting_epoch"]


def starting_epoch(trainer: Any) -> int:
    """The epoch this fit starts with, also in ``on_fit_start`` of a resumed run.

    Lightning restores its loops only after ``on_fit_start``, so there
    ``trainer.current_epoch`` still says 0 on a resume: read the checkpoint being loaded.
    """
    loaded: Any = compat.loaded_checkpoint(trainer)
    try:
        return int(loaded["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"])
    except (TypeError, KeyError, ValueError):
        return int(getattr(trainer, "current_epoch", 0))


def batches_trained_this_epoch(trainer: Any) -> int:
    """Batches of the current epoch the Trainer has trained on (0 without a Trainer or a fit loop)."""
    loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    return int(loop.batch_progress.current.processed) if loop is not None else 0


def batches_that_stepped(trainer: Any) -> int | None:
    """The counter Lightning logs scalars at; None without one."""
    return compat.batches_that_stepped(trainer)
