"""Checks the callbacks share: missing inputs, a diverged model, optional extras, changed settings on resume.

Each function here says one thing to the user, in one place, so that every callback says it
the same way:

* :func:`require_inputs`: every missing input of a callback in one error, not one per run;
* :func:`optional_part`: an extra (a plot, Diversity Threshold Generation) that fails costs
  a warning; what was measured before it is still logged;
* :func:`settings_changed`: a checkpoint made under other settings is detected on resume.

The checks every front end makes (a diverged model, empty output, the errors a measurement
survives) are :mod:`lightning_div._internal.checks`'s, imported from there alone.
"""

from __future__ import annotations

import os
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from lightning_div._internal.checks import MEASUREMENT_ERRORS
from lightning_div._internal.tracking import warn_once


class MissingInputsError(ValueError):
    """A callback lacks data it needs; the message lists every missing input and how to give it."""


def require_inputs(callback: Any, trainer: Any, needs: Sequence[tuple[str, Any, str]]) -> None:
    """Raise one :class:`MissingInputsError` naming every input that is neither given nor on the datamodule.

    Args:
        callback: the callback (named in the message).
        trainer: its Trainer (``trainer.datamodule`` is searched for each method).
        needs: ``(argument name, value given, datamodule method)`` for each input the callback needs.
    """
    dm = getattr(trainer, "datamodule", None)
    missing = [
        (arg, method)
        for arg, value, method in needs
        if value is None and not (dm is not None and callable(getattr(dm, method, None)))
    ]
    if not missing:
        return
    listed = "; ".join(
        f"{arg}=[{'response' if arg == 'cluster_texts' else '(context, reference)'}, ...] or a path any "
        f"lightning_div reader understands, or use a datamodule with a `{method}()` method"
        for arg, method in missing
    )
    raise MissingInputsError(
        f"{type(callback).__name__} is missing {len(missing)} input(s): {listed} "
        "(lightning_div.datamodules.DialogueDataModule has all of these methods)"
    )


@contextmanager
def optional_part(callback: Any, trainer: Any, what: str) -> Iterator[None]:
    """Run an optional part of a measurement: its failure warns, and the values measured before it stay.

    Only the :data:`MEASUREMENT_ERRORS` are caught; a programming error propagates. With
    ``on_error="raise"`` every error propagates.
    """
    try:
        yield
    except MEASUREMENT_ERRORS as err:
        if getattr(callback, "on_error", "warn") == "raise":
            raise
        warn_once(
            f"{callback.kind}:{callback.name}:{what}:{type(err).__name__}",
            f"{type(callback).__name__}: {what} failed at epoch {trainer.current_epoch}: {err!r}; the values "
            f"measured before it are logged (on_error='raise' to stop)\n{traceback.format_exc(limit=3)}",
        )


def _equal_as_numbers_item_by_item(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return float(a) == float(b)
        except (TypeError, ValueError):
            return False
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal_as_numbers_item_by_item(x, y) for x, y in zip(a, b))
    return a == b


def settings_changed(
    callback: Any, saved: Mapping[str, Any] | None, current: Mapping[str, Any], consequence: str
) -> bool:
    """Compare the settings a checkpoint was made with to the current ones; warn naming each change.

    Returns True when a setting changed (the caller then discards the restored state and
    recomputes it under the current settings). A checkpoint from before settings were saved
    (``saved`` None) is trusted, as before.
    """
    if saved is None:
        return False
    changes = [
        f"{name} {saved.get(name)!r} -> {value!r}"
        for name, value in current.items()
        if name in saved and not _equal_as_numbers_item_by_item(saved.get(name), value)
    ]
    if changes:
        # not warn_once: a resume happens once per run, and each one must say it
        warnings.warn(
            f"{type(callback).__name__}: the checkpoint was made with other settings "
            f"({'; '.join(changes)}): {consequence}",
            RuntimeWarning,
            stacklevel=2,
        )
    return bool(changes)


def encoder_label(encoder: Any) -> str:
    """What identifies an encoder argument in the saved settings: the name or path given, else its ``name``."""
    if isinstance(encoder, (str, os.PathLike)):
        return str(encoder)
    return str(getattr(encoder, "name", type(encoder).__name__))
