"""A guarded measurement: the error policy (``on_error``) and the timing, the same for every front end."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from lightning_div._internal.checks import MEASUREMENT_ERRORS

__all__ = ["ON_ERROR", "Measurement", "check_on_error", "guarded"]

#: The error policies: ``"warn"`` skips a failed measurement with one warning (training goes on), ``"raise"`` re-raises.
ON_ERROR = ("warn", "raise")


def check_on_error(on_error: str) -> str:
    """``on_error`` if it is one of :data:`ON_ERROR`, else a ValueError naming it."""
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be 'warn' or 'raise', got {on_error!r}")
    return on_error


@dataclass
class Measurement:
    """What a guarded block measured: its values (empty when it failed), its seconds and the error it survived."""

    values: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    error: BaseException | None = None


@contextmanager
def guarded(
    on_error: str,
    warn: Callable[[str, str], None],
    label: str,
    what: str,
    when: str,
) -> Iterator[Measurement]:
    """Run a measurement block: time it, and on a failure it can survive apply the error policy.

    The block fills ``measurement.values``. A failure the model, the data or a tracker can cause
    (:data:`~lightning_div._internal.checks.MEASUREMENT_ERRORS`: RuntimeError, torch's
    out-of-memory included, ValueError, OSError, ...) empties the values, is kept as
    ``measurement.error`` and is said once through ``warn(key, message)`` with ``on_error="warn"``,
    or re-raised with ``"raise"``; a programming error (TypeError, AttributeError, ...) always
    propagates. ``measurement.seconds`` is set either way.

    Args:
        on_error: ``"warn"`` or ``"raise"``.
        warn: how the front end warns once per run and key (its reporter's ``warn_once``).
        label: who measures, in the message (``"SemanticDiversityMonitor"``).
        what: the measurement, in the message and the warning's key (``"semantic diversity"``).
        when: where in training, in the message (``"epoch 3"``, ``"step 200"``).

    Examples:
        >>> said = []
        >>> with guarded("warn", lambda key, msg: said.append(key), "Probe", "a division", "step 0") as m:
        ...     m.values["x"] = 1.0
        ...     m.values["y"] = 1 / 0  # ZeroDivisionError is an ArithmeticError: survived
        >>> m.values, type(m.error).__name__, said
        ({}, 'ZeroDivisionError', ['Probe:a division:ZeroDivisionError'])
    """
    check_on_error(on_error)
    measurement = Measurement()
    start = time.perf_counter()
    try:
        yield measurement
    except MEASUREMENT_ERRORS as err:  # a programming error (TypeError, AttributeError, ...) propagates
        if on_error == "raise":
            raise
        measurement.values.clear()
        measurement.error = err
        warn(
            f"{label}:{what}:{type(err).__name__}",
            f"{label} skipped {what} at {when}: {err!r} (training continues; on_error='raise' to stop)\n"
            f"{traceback.format_exc(limit=3)}",
        )
    finally:
        measurement.seconds = time.perf_counter() - start
