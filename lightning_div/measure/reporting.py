"""How a measurement reaches the user: the :class:`Reporter` a front end implements and passes down.

The measurement core computes; a reporter says where its scalars, figures and tables go, at
which step, whether this process is the one that writes, and what a run has already shown
(once-only tables, warnings). Each front end builds its reporter from its own trainer
(:meth:`~lightning_div.callbacks.base.DiversityCallback.reporter` in the Lightning callbacks,
:func:`~lightning_div.integrations._frontend.tracker_reporter` in the Hugging Face and TRL ones), and
owns the :class:`RunMemory` it keeps across the run's measurements: nothing is set on the
user's trainer and nothing is kept in a module global.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from lightning_div._internal.tracking import (
    Destination,
    finite_metrics,
    log_figure,
    log_table,
    warn_once,
    warnings_of_run,
)
from lightning_div.measure.base import plain

__all__ = ["RecordingReporter", "Reporter", "RunMemory", "TrackerReporter"]


@runtime_checkable
class Reporter(Protocol):
    """Where a measurement's results go. Front ends implement it; the core only calls it.

    ``step`` is the x of the figures and tables (an epoch in Lightning, a global step in
    Hugging Face), ``is_rank_zero`` whether this process writes figures and tables (every
    process logs the scalars, which are already global).
    """

    @property
    def step(self) -> int:
        """The x of this measurement's figures and tables."""
        ...

    @property
    def is_rank_zero(self) -> bool:
        """Whether this process writes figures and tables."""
        ...

    @property
    def out_dir(self) -> Path:
        """Where the PNG and CSV files go."""
        ...

    def scalars(self, values: Mapping[str, float]) -> dict[str, float]:
        """Log the finite ``values`` (a NaN is never logged: it is warned about); returns what was logged."""
        ...

    def figure(self, key: str, fig: Any) -> Path | None:
        """Send a matplotlib figure to the trackers and save it; returns the PNG's path."""
        ...

    def table(
        self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], filename: str | None = None
    ) -> Path | None:
        """Send a table to the trackers and save it as CSV (``filename`` for a once-per-run table)."""
        ...

    def once(self, key: str, token: str = "") -> bool:
        """True the first time ``key`` is asked in this run; a later ask with another ``token`` warns."""
        ...

    def warn_once(self, key: str, message: str) -> None:
        """A RuntimeWarning shown once per run and key, on the first process only."""
        ...


@dataclass
class RunMemory:
    """What one run has shown so far: warned keys and once-only keys. Owned by a front end, one per run.

    Attributes:
        warned: the keys :meth:`Reporter.warn_once` has warned about.
        shown: once-only key -> the token it was first shown with.
        recorded: ``settings:<who>`` or ``alert:<who>`` -> the record last written for it.
    """

    warned: set[str] = field(default_factory=set)
    shown: dict[str, str] = field(default_factory=dict)
    #: who -> the settings record last written for it (:meth:`TrackerReporter.record_settings`)
    recorded: dict[str, str] = field(default_factory=dict)

    @contextmanager
    def scope(self) -> Iterator[None]:
        """Within the block, every :func:`~lightning_div._internal.tracking.warn_once` of the package
        (in the encoder, the metrics, the trackers) deduplicates in this run's :attr:`warned`."""
        with warnings_of_run(self.warned):
            yield

    def once(self, key: str, token: str = "") -> bool:
        """True the first time ``key`` is asked; a later ask with another ``token`` warns once (two sources, one key)."""
        if key not in self.shown:
            self.shown[key] = token
            return True
        if self.shown[key] != token:
            self.warn_once(
                f"once:{key}",
                f"two callbacks log different {key!r} under one key: the first one's is kept; give the "
                "callbacks distinct name=... so that each logs its own",
            )
        return False

    def warn_once(self, key: str, message: str) -> None:
        """A RuntimeWarning once per run and key (rank 0 only)."""
        with self.scope():
            warn_once(key, message)


class TrackerReporter:
    """A :class:`Reporter` over a tracker :class:`~lightning_div._internal.tracking.Destination`.

    Args:
        destination: the trackers, the step and the files' tag (the front end says which).
        out_dir: where PNG and CSV files go.
        log_scalars: how the front end logs finite scalars (``pl_module.log``, ``trainer.log`` ...).
        memory: the run's :class:`RunMemory` (owned by the front end).
        is_rank_zero: whether this process writes figures and tables.
    """

    def __init__(
        self,
        destination: Destination,
        out_dir: Path,
        log_scalars: Callable[[dict[str, float]], None],
        memory: RunMemory,
        is_rank_zero: bool,
    ) -> None:
        self.destination, self._out_dir, self._log, self.memory = destination, Path(out_dir), log_scalars, memory
        self._rank_zero = is_rank_zero

    @property
    def out_dir(self) -> Path:
        return self._out_dir

    @property
    def step(self) -> int:
        return self.destination.step

    @property
    def is_rank_zero(self) -> bool:
        return self._rank_zero

    def scalars(self, values: Mapping[str, float]) -> dict[str, float]:
        with self.memory.scope():
            clean = finite_metrics(values, "lightning-div")
        self._log(dict(clean))
        return clean

    def figure(self, key: str, fig: Any) -> Path | None:
        with self.memory.scope():
            return log_figure(self.destination, key, fig, self.out_dir)

    def table(
        self, key: str, columns: Sequence[str], rows: Sequence[Sequence[Any]], filename: str | None = None
    ) -> Path | None:
        with self.memory.scope():
            return log_table(self.destination, key, columns, rows, self.out_dir, filename)

    def once(self, key: str, token: str = "") -> bool:
        return self.memory.once(key, token)

    def warn_once(self, key: str, message: str) -> None:
        self.memory.warn_once(key, message)

    def record_settings(
        self, who: str, measures: Sequence[Any], callback: Mapping[str, Any] | None = None
    ) -> Path | None:
        """Write what ``who`` measured with, each measure's ``settings()``, to ``<out_dir>/settings/<who>.json``.

        The run's record of the configuration behind its numbers (the encoder, the clusters, the
        sample, the lexical options ...): written by the first process, atomically, at the first
        measurement and again only when the settings change. A value JSON cannot hold is written as
        :func:`~lightning_div.measure.base.plain` makes it (an object as its name or type, a key as
        text) and a number that is not finite as its text (``"nan"``); a file that cannot be written
        is warned about once and the run goes on.

        Args:
            who: the front end's label, the file's name (its class, and its ``name`` when it has one).
            measures: the :class:`~lightning_div.measure.base.Measure` objects it measured with.
            callback: the front end's own settings around them (its sample size and seed, DRESS's
                lambda ...), recorded as ``"callback"``; None: none.

        Returns:
            The file's path when this call wrote it, else None.
        """
        if not self.is_rank_zero or not measures:
            return None
        record = {
            "lightning_div": _installed_version(),
            "who": who,
            "measures": [{"measure": type(m).__name__, "settings": m.settings()} for m in measures],
            **({"callback": callback} if callback is not None else {}),
        }
        return self._write_record("settings", who, record, f"settings:{who}", "settings record")

    def record_alert(self, who: str, record: Mapping[str, Any]) -> Path | None:
        """Write the front end's alert state, its reasons in words, to ``<out_dir>/alerts/<who>.json``.

        The warnings go to stderr once; this file keeps them with the run, so that its report (and
        anyone reading the run's files) sees why the alert is on and since when. Written by the first
        process, atomically, when the state changes; a file that cannot be written is warned about once.

        Args:
            who: the front end's label, the file's name.
            record: :func:`lightning_div.verdict.alert_record`'s dict (kind, since, unit, reasons, key).

        Returns:
            The file's path when this call wrote it, else None.
        """
        if not self.is_rank_zero:
            return None
        return self._write_record("alerts", who, dict(record), f"alert:{who}", "alert record")

    def _write_record(self, folder: str, who: str, record: dict[str, Any], memo: str, what: str) -> Path | None:
        """Write ``record`` as JSON to ``<out_dir>/<folder>/<who>.json`` when it changed since this run last wrote it.

        ``memo`` keys the text last written in the run's memory and the once-only warning when the
        file cannot be written; ``what`` names the file in that warning.
        """
        from lightning_div._internal.io import atomic_write_text

        text = json.dumps(_finite(plain(record)), indent=1, sort_keys=True, allow_nan=False) + "\n"
        if self.memory.recorded.get(memo) == text:
            return None
        path = self.out_dir / folder / f"{who}.json"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, text)
        except (OSError, ValueError) as err:  # a record that cannot be written must not end the training run
            # (ValueError: a name the file system refuses, e.g. one with a null byte)
            self.memory.warn_once(memo, f"lightning-div: the {what} {path} was not written: {err}")
            return None
        self.memory.recorded[memo] = text
        return path


def _finite(value: Any) -> Any:
    """A :func:`~lightning_div.measure.base.plain` value with every non-finite number as its text (standard JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


@functools.cache
def _installed_version() -> str:
    """The installed lightning-div's version, read once per process ("unknown" from a source tree never installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lightning-div")
    except PackageNotFoundError:
        return "unknown"


class RecordingReporter(TrackerReporter):
    """A :class:`Reporter` without a trainer: it keeps what was reported, and writes figures and tables to ``out_dir``.

    For scripts and tests that measure outside training (see the semantic-space page).

    Args:
        out_dir: where PNG and CSV files go.
        step: the x of the figures and tables.

    Attributes:
        logged: every :meth:`scalars` call's logged values, in order.
    """

    def __init__(self, out_dir: str | Path, step: int = 0) -> None:
        self.logged: list[dict[str, float]] = []
        super().__init__(Destination([], step, f"step_{step}"), Path(out_dir), self.logged.append, RunMemory(), True)
