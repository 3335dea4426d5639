"""The trackers' private state, read in one place (see :mod:`lightning_div._internal.compat`).

Checked on Lightning 2.4.0 and 2.6.6, each with W&B 0.31.0.
"""

from __future__ import annotations

from typing import Any

__all__ = ["drop_wandb_anonymous"]


def drop_wandb_anonymous(logger: Any) -> None:
    """Leave ``anonymous=None`` out of the arguments a Lightning ``WandbLogger`` will pass to ``wandb.init``.

    Reads (and edits) ``WandbLogger._wandb_init``. No public API serves: Lightning passes
    ``anonymous=None`` whatever the user gave, and W&B >= 0.22 then prints "The anonymous setting
    has no effect" (with ``wandb.termwarn``, not a Python warning a filter could catch).
    """
    init = getattr(logger, "_wandb_init", None)
    if isinstance(init, dict) and "anonymous" in init and init["anonymous"] is None:
        del init["anonymous"]
