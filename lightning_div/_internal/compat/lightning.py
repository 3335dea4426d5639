"""Lightning's private state, read in two places (see :mod:`lightning_div._internal.compat`).

Checked on pytorch-lightning 2.4.0 (the oldest supported, ``.ci/minimums.txt``) and 2.6.6.
"""

from __future__ import annotations

from typing import Any

__all__ = ["batches_that_stepped", "loaded_checkpoint"]


def loaded_checkpoint(trainer: Any) -> dict[str, Any] | None:
    """The checkpoint a resumed fit is loading, also in ``on_fit_start``; None without one.

    Reads ``trainer._checkpoint_connector._loaded_checkpoint``. No public API serves: Lightning
    restores its loops only after ``on_fit_start``, and ``Callback.on_load_checkpoint`` comes after
    ``on_fit_start`` too under strategies that restore after setup (FSDP, DeepSpeed), while DRESS
    must know the epoch it resumes in before its first round is mined there.
    """
    loaded: Any = getattr(getattr(trainer, "_checkpoint_connector", None), "_loaded_checkpoint", None)
    return loaded if isinstance(loaded, dict) and loaded else None  # {} when the fit loads no checkpoint


def batches_that_stepped(trainer: Any) -> int | None:
    """The counter Lightning logs scalars at; None without a fit loop.

    Reads ``trainer.fit_loop.epoch_loop._batches_that_stepped``. No public API serves:
    ``trainer.global_step`` is one ahead of it during the validation that ends an epoch, so
    figures logged at ``global_step`` would sit one step right of their scalars.
    """
    loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    stepped = getattr(loop, "_batches_that_stepped", None)
    return stepped if isinstance(stepped, int) else None
