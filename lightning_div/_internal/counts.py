"""The one rule for a count given by a user: a batch size, a subset size, a turn or token limit.

No torch here: the settings objects that check their counts (:class:`~lightning_div.model.formatting.DialogueLayout`,
:class:`~lightning_div.datamodules.options.Examples`) stay importable without it.
"""

from __future__ import annotations

import numbers
from typing import Any

__all__ = ["check_count", "check_required_count"]


def check_count(name: str, value: Any) -> int | None:
    """``value`` as an ``int`` when it is an integer >= 1, None for None; else a ValueError naming ``name``.

    An ``int`` or any :class:`numbers.Integral` (``numpy.int64``) passes; ``True``, ``2.0``, ``"8"``
    and 0 do not, so that a value that only looks like a count is refused where it is given rather
    than rounded or compared as text later.
    """
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1):
        raise ValueError(f"{name} must be an integer >= 1 (or None), got {value!r}")
    return None if value is None else int(value)


def check_required_count(name: str, value: Any) -> int:
    """:func:`check_count` for a count that must be given: None is refused too, naming ``name``."""
    if value is None or isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)
