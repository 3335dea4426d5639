"""Renamed public names and keyword arguments, kept working for one release (0.2 -> 1.0).

Users' code of 0.2 keeps running under 1.0: a renamed class or function stays importable under its
old name, and a renamed or regrouped keyword argument is still accepted; each emits a
``DeprecationWarning`` naming the new form and goes in the release after 1.0. Every alias is listed
in ``docs/changelog.md`` and tested (``tests/test_deprecations*.py``).
"""

from __future__ import annotations

import dataclasses
import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = [
    "merged",
    "moved_attribute",
    "moved_names",
    "regrouped_into",
    "renamed_value",
    "take_deprecated",
    "warn_deprecated",
]

_T = TypeVar("_T")


def warn_deprecated(old: str, new: str, stacklevel: int = 3) -> None:
    """One ``DeprecationWarning``: ``old`` is deprecated, use ``new``; it goes in the release after 1.0."""
    warnings.warn(
        f"{old} is deprecated since lightning-div 1.0 and is removed in the next release: use {new}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def take_deprecated(
    owner: str,
    kwargs: dict[str, Any],
    renamed: Mapping[str, str] | None = None,
    regrouped: Mapping[str, tuple[str, str]] | None = None,
    stacklevel: int = 4,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Read the 0.2 keyword arguments left in ``kwargs``, warning once for each.

    Args:
        owner: the class (or function) taking them, named in the warnings and errors.
        kwargs: the keyword arguments the signature did not take (emptied as they are read).
        renamed: old name -> new name of arguments that only changed name.
        regrouped: old name -> ``(argument, field)`` of arguments now a field of a settings object
            (e.g. ``"batch_size": ("generation", "batch_size")``).
        stacklevel: where the warning points (the user's call, through ``__init__``).

    Returns:
        ``(renamed values by new name, {argument: {field: value}})``.

    Raises:
        TypeError: an argument that is neither a current nor a deprecated one (named, as Python does).
    """
    renamed, regrouped = renamed or {}, regrouped or {}
    values: dict[str, Any] = {}
    groups: dict[str, dict[str, Any]] = {}
    for old in list(kwargs):
        if old in renamed:
            warn_deprecated(f"{owner}({old}=...)", f"{renamed[old]}=...", stacklevel)
            values[renamed[old]] = kwargs.pop(old)
        elif old in regrouped:
            arg, field = regrouped[old]
            warn_deprecated(f"{owner}({old}=...)", f"{arg}=...({field}=...)", stacklevel)
            groups.setdefault(arg, {})[field] = kwargs.pop(old)
    if kwargs:
        raise TypeError(f"{owner}() got an unexpected keyword argument {next(iter(kwargs))!r}")
    return values, groups


def merged(owner: str, arg: str, given: _T | None, default: _T, fields: Mapping[str, Any]) -> _T:
    """``given`` (or ``default``) with the deprecated flat ``fields`` (as :func:`take_deprecated` grouped them).

    Raises:
        ValueError: both a settings object and its deprecated fields were given.
    """
    if not fields:
        return default if given is None else given
    if given is not None:
        names = ", ".join(f"{f}=" for f in fields)
        raise ValueError(
            f"{owner}: {arg}= and the deprecated {names} were both given: set them on the object "
            f"({arg}={type(given).__name__}(...)) and drop the flat arguments"
        )
    return dataclasses.replace(default, **fields)  # type: ignore[type-var]


def renamed_value(owner: str, old_name: str, name: str, given: Any, default: Any, renamed: Mapping[str, Any]) -> Any:
    """A renamed keyword's value: as given by its 1.0 ``name``, or by its 0.2 ``old_name`` (``renamed``, the values
    :func:`take_deprecated` returned by new name).

    Raises:
        ValueError: both given (the 1.0 one not at its ``default``), which would leave one silently unused.
    """
    if name not in renamed:
        return given
    if given != default:
        raise ValueError(f"{owner}: {name}= and the deprecated {old_name}= were both given: pass {name}= alone")
    return renamed[name]


def regrouped_into(argument: str, *fields: str, **renamed: str) -> dict[str, tuple[str, str]]:
    """``take_deprecated``'s ``regrouped`` entries of 0.2 keywords now fields of ``argument``.

    ``fields`` kept their name as a field; ``renamed`` maps a 0.2 keyword to the field it became:
    ``regrouped_into("outputs", "dirpath", num_plot_prompts="num_contexts")`` is
    ``{"dirpath": ("outputs", "dirpath"), "num_plot_prompts": ("outputs", "num_contexts")}``.
    """
    return {**{name: (argument, name) for name in fields}, **{old: (argument, new) for old, new in renamed.items()}}


def moved_attribute(module: str, name: str, moved: Mapping[str, tuple[str, str]]) -> Any:
    """A module ``__getattr__``'s answer for a renamed public name: the new object, with a warning.

    Args:
        module: the module asked (its ``__name__``), for the error.
        name: the name asked for.
        moved: old name -> ``(module of the new object, new name)``.

    Raises:
        AttributeError: ``name`` is not a renamed name (as a module without it does).
    """
    if name not in moved:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    where, new = moved[name]
    warn_deprecated(f"{module}.{name}", f"{where}.{new}")
    return getattr(importlib.import_module(where), new)


def moved_names(module: str, moved: Mapping[str, tuple[str, str]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` serving its renamed public names: ``__getattr__ = moved_names(__name__, {...})``.

    Args:
        module: the module's ``__name__``.
        moved: old name -> ``(module of the new object, new name)``, as :func:`moved_attribute`.

    Returns:
        The function to bind as the module's ``__getattr__`` (each old name warns, any other raises
        ``AttributeError``).
    """

    def __getattr__(name: str) -> Any:
        return moved_attribute(module, name, moved)

    return __getattr__
