"""transformers' private API, used in one place (see :mod:`lightning_div._internal.compat`).

Checked on transformers 4.56.2 (the oldest supported, ``.ci/minimums.txt``) and 5.25.0.
"""

from __future__ import annotations

from typing import Any

__all__ = ["train_sampler"]


def train_sampler(subclass: type, trainer: Any, train_dataset: Any) -> Any:
    """The sampler the parent of ``subclass`` (a ``transformers.Trainer``) would train ``trainer`` with.

    Calls ``super(subclass, trainer)._get_train_sampler(train_dataset)``.

    No public API serves: the Trainer builds its training ``DataLoader`` inside ``train()`` and
    takes its sampler from this method only, so DRESS's ``mode="sampler"`` overrides it and falls
    back to it. The ``train_dataset`` argument exists since transformers 4.52.
    """
    parent: Any = super(subclass, trainer)
    return parent._get_train_sampler(train_dataset)
