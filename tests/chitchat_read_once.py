"""The embedded chitchat corpus read once per test module, for modules that build many datamodules.

``monitor_setup.datamodule()`` reads the whole corpus (every line checked) to keep 160 examples: 2-4 s
of CPU per datamodule, about as much as a short fit. The corpus is part of the package and never
changes, so a module's datamodules may share one reading; each gets its own copy of the result.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import pytest

from lightning_div.datamodules import formats
from lightning_div.datamodules.formats import dispatch


@contextmanager
def chitchat_read_once() -> Iterator[None]:
    """Within it, ``read_pairs("chitchat...")`` reads each (split, settings) once (this process only)."""
    read = cache(formats.read_chitchat_pairs)

    def a_copy(*args, **kwargs) -> formats.ReadResult:
        pairs = read(*args, **kwargs)
        return formats.ReadResult(pairs, copy.deepcopy(pairs.stats))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dispatch, "read_chitchat_pairs", a_copy)  # where read_pairs looks it up
        yield
