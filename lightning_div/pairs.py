"""Dialogue pairs: one dialogue example (:class:`DialoguePair`), and the error for malformed dialogue data.

Small and dependency-free on purpose: callbacks, the DRESS protocol and the readers import
these without importing the readers (:mod:`lightning_div.datamodules.formats`, which
re-exports them under their old path).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["DataFormatError", "DialoguePair", "as_pair"]


@dataclass(frozen=True)
class DialoguePair:
    """One example: the context turns (oldest first), the gold response, extra references.

    A context given as one string is one turn, as :func:`as_pair` and the readers take it (a
    string is never split into its characters); a list of turns becomes a tuple.

    Examples:
        >>> DialoguePair("How are you?", "Fine.").context
        ('How are you?',)
    """

    context: tuple[str, ...]
    response: str
    references: tuple[str, ...] = ()
    source: str = field(default="", compare=False)  # "file:line" for error messages

    def __post_init__(self) -> None:
        # One rule for every consumer (as_messages, pairs_from_items, the callbacks' contexts): a string is one turn.
        if isinstance(self.context, str):
            object.__setattr__(self, "context", (self.context,))
        elif isinstance(self.context, list):
            object.__setattr__(self, "context", tuple(self.context))
        if isinstance(self.references, str):
            object.__setattr__(self, "references", (self.references,))
        elif isinstance(self.references, list):
            object.__setattr__(self, "references", tuple(self.references))

    @property
    def all_references(self) -> tuple[str, ...]:
        """The gold response followed by any extra references."""
        return (self.response, *self.references)


class DataFormatError(ValueError):
    """Malformed dialogue data; the message starts with where it is (``file:line`` or ``pairs[i]``)."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


def _str_list(value: Any, where: str, name: str, allow_str: bool = False) -> list[str]:
    """A list of strings (a lone string too when ``allow_str``), or a DataFormatError naming the field."""
    if allow_str and isinstance(value, str):
        return [value]
    if not isinstance(value, (list, tuple)):
        kind = "a string or a list of strings" if allow_str else "a list of strings"
        raise DataFormatError(where, f"field '{name}' must be {kind}, got {type(value).__name__}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise DataFormatError(where, f"{name}[{i}] must be a string, got {type(item).__name__}")
    return list(value)


def as_pair(item: Any, where: str = "pair") -> DialoguePair:
    """One DialoguePair from a DialoguePair, ``(context, response)``, ``(context, [references])`` or
    ``(context, response, [references])``; the context is a list of turns or one string.

    Nothing is dropped or cut here (an empty response stays); errors start with ``where``.

    Args:
        item: the pair in any of the forms above.
        where: how error messages name the item (e.g. ``"val_pairs[3]"``).

    Returns:
        The DialoguePair.

    Raises:
        DataFormatError: an item of another shape, or a non-string turn, response or reference.

    Examples:
        >>> as_pair((["Hi!"], "Hello."))
        DialoguePair(context=('Hi!',), response='Hello.', references=(), source='pair')
    """
    if isinstance(item, DialoguePair):
        return item
    if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
        raise DataFormatError(
            where,
            "expected a DialoguePair, (context, response), (context, [references]) or "
            f"(context, response, [references]); got {type(item).__name__}"
            + (f" of length {len(item)}" if isinstance(item, (tuple, list)) else ""),
        )
    context = tuple(_str_list(item[0], where, "context", allow_str=True))
    if len(item) == 3:
        if not isinstance(item[1], str):
            raise DataFormatError(where, f"response must be a string, got {type(item[1]).__name__}")
        return DialoguePair(context, item[1], tuple(_str_list(item[2], where, "references")), source=where)
    if isinstance(item[1], str):
        return DialoguePair(context, item[1], source=where)
    candidates = _str_list(item[1], where, "references")
    if not candidates:
        raise DataFormatError(where, "the list of references is empty")
    return DialoguePair(context, candidates[0], tuple(candidates[1:]), source=where)
