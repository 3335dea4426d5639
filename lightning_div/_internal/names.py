"""Stable texts for objects a user gives (an encoder, clusters, a scorer): what checkpoints and records hold."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["describe"]


def describe(value: Any) -> str | None:
    """A stable text for a checkpoint: the name/path given, else the object's ``name``, else its type.

    Never ``repr`` of an object (it holds a memory address, which would change between the
    run that saved a checkpoint and the run that resumes from it).

    Args:
        value: an encoder, clusters or scorer as given to a callback.

    Returns:
        The text, or None for None.
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return str(os.fspath(value))
    name = getattr(value, "name", None)
    return name if isinstance(name, str) and name else type(value).__name__
