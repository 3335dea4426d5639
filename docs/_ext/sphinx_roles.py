"""Griffe extension for the API reference: Sphinx roles in docstrings become code spans.

The docstrings cross-reference with Sphinx roles (``:func:`x```, ``:class:`~a.b.C```),
which mkdocstrings would print literally. They become ```x``` / ```C``` (``~`` keeps the
last component, as in Sphinx); the object itself is one search away in the reference.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")


def _plain(match: re.Match) -> str:
    tilde, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if tilde else target}`"


class SphinxRoles(griffe.Extension):
    """Rewrites every docstring of every loaded object."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(_plain, obj.docstring.value)
