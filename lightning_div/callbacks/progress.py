"""PlainProgress: plain progress lines when the output is a file (nohup, CI, a cluster's job log).

Lightning's progress bar redraws one line with carriage returns; written to a file it shows
nothing readable until the epoch ends, and a long epoch looks like a hung run. This callback
prints a line every ``every_n_steps`` training steps (epoch, step, loss, speed, time left in
the epoch) and, after each validation, one line per measurement the lightning-div monitors
made, when it starts and when it ends (a measurement can take minutes), with the epoch's headline
numbers at its end. On a terminal it stays silent unless asked (``when="always"``): the progress bar
is there.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from typing import Any, Literal

from lightning_div._internal.lightning import pl, rank_zero
from lightning_div.keys import SUMMARY_KEYS

log = logging.getLogger(__name__)

When = Literal["auto", "always", "never"]
QUIET_ENV = "LIGHTNING_DIV_PROGRESS"  # "0" silences it everywhere (e.g. in a job whose log must stay short)
_TRUE = ("1", "true", "yes", "on", "y", "t")
_FALSE = ("0", "false", "no", "off", "n", "f")


def progress_wanted(value: str | None = None) -> bool:
    """``LIGHTNING_DIV_PROGRESS`` as a boolean, read as the ecosystem reads switches.

    Case and surrounding spaces do not matter: ``1``/``true``/``yes``/``on``/``y``/``t`` and
    ``0``/``false``/``no``/``off``/``n``/``f``, any integer (``00`` is 0: off); unset or empty: on.

    Args:
        value: the value (default: the environment variable's).

    Returns:
        Whether the plain progress lines are wanted.

    Raises:
        ValueError: another value, naming the variable and the values it takes.

    Examples:
        >>> [progress_wanted(v) for v in ("FALSE", "Off", " no ", "00", "1", "")]
        [False, False, False, False, True, True]
    """
    raw = os.environ.get(QUIET_ENV) if value is None else value
    text = (raw or "").strip().lower()
    if not text or text in _TRUE:
        return True
    if text in _FALSE:
        return False
    try:
        return int(text) != 0
    except ValueError:
        raise ValueError(
            f"{QUIET_ENV}={raw!r} is not a switch: use 0/1, false/true, no/yes or off/on (any case)"
        ) from None


def output_is_a_terminal() -> bool:
    """Whether stdout is a terminal (a progress bar can redraw there)."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams (notebooks, captured output)
        return False


def _number(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


class PlainProgress(pl.Callback):
    """Plain progress lines for logs that are files: every N steps and once per measurement.

    Args:
        every_n_steps: a line every this many training steps (0: none; the per-epoch and
            per-measurement lines remain).
        when: ``"auto"`` prints only when stdout is not a terminal, ``"always"`` and ``"never"``
            as they say. The environment variable ``LIGHTNING_DIV_PROGRESS=0`` (or ``false``, ``off``,
            ``no``, any case; see :func:`progress_wanted`) silences it too.
        stream: where to write (default ``sys.stdout``). If writing to it fails (a closed stream, a
            broken pipe, a full disk), it stops printing and logs one warning; training goes on.

    Raises:
        ValueError: ``every_n_steps`` or ``when`` is invalid, or ``LIGHTNING_DIV_PROGRESS`` holds no
            switch value.

    Example:
        ``Trainer(callbacks=[..., PlainProgress(every_n_steps=100)])``; ``lightning-div fit`` adds
        one by itself when its output is not a terminal.
    """

    def __init__(self, every_n_steps: int = 50, when: When = "auto", stream: Any = None) -> None:
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int) or every_n_steps < 0:
            raise ValueError(f"every_n_steps must be an integer >= 0, got {every_n_steps!r}")
        if when not in ("auto", "always", "never"):
            raise ValueError(f"when={when!r} is unknown; use 'auto', 'always' or 'never'")
        progress_wanted()  # a value of LIGHTNING_DIV_PROGRESS that is no switch is said here, not mid-fit
        self.every_n_steps = every_n_steps
        self.when = when
        self.stream = stream
        self._epoch_start = 0.0
        self._fit_start = 0.0
        self._failed = False  # its output failed once: it prints nothing more (training goes on)

    @property
    def active(self) -> bool:
        """Whether it prints (``when``, the terminal check, ``LIGHTNING_DIV_PROGRESS``, an output that failed).

        Raises:
            ValueError: ``LIGHTNING_DIV_PROGRESS`` holds no switch value (see :func:`progress_wanted`).
        """
        if self._failed or not progress_wanted():
            return False
        return self.when == "always" or (self.when == "auto" and not output_is_a_terminal())

    @rank_zero.rank_zero_only
    def _say(self, text: str) -> None:
        if not self.active:
            return
        try:
            print(f"lightning-div: {text}", file=self.stream or sys.stdout, flush=True)
        except (OSError, ValueError) as err:  # a closed stream, a broken pipe, a full disk: never stop training
            self._failed = True
            log.warning(
                "PlainProgress: writing a progress line failed (%s: %s); no more progress lines in this run, "
                "training continues",
                type(err).__name__,
                err,
            )

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # setup, not on_fit_start: it runs for every callback before any on_fit_start, so this line comes
        # before the other callbacks' fit-start work (clustering, mining) wherever this one is in the list
        if stage == "fit":
            self._fit_start = time.monotonic()
            self._say(f"fit started: {trainer.max_epochs} epoch(s)")

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # the number of batches an epoch is known once the train dataloader is built, not at fit start
        batches = trainer.num_training_batches
        self._say("training" + (f": {batches:,} batches an epoch" if isinstance(batches, int) else ""))

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch_start = time.monotonic()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        done = batch_idx + 1
        if not self.every_n_steps or done % self.every_n_steps:
            return
        elapsed = time.monotonic() - self._epoch_start
        total = trainer.num_training_batches
        parts = [
            f"epoch {trainer.current_epoch}",
            f"batch {done:,}" + (f"/{total:,}" if isinstance(total, int) else ""),
        ]
        loss = _number(trainer.callback_metrics.get("train/loss_step", trainer.callback_metrics.get("train/loss")))
        if loss is not None:
            parts.append(f"train/loss {loss:.4f}")
        parts.append(f"{done / max(elapsed, 1e-9):.2f} batches/s")
        if isinstance(total, int) and total > done:
            parts.append(f"epoch ends in ~{_duration((total - done) * elapsed / done)}")
        self._say(", ".join(parts))

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        metrics = trainer.callback_metrics
        shown = [(k, _number(metrics[k])) for k in SUMMARY_KEYS if k in metrics]
        numbers = ", ".join(f"{k} {v:.4f}" for k, v in shown if v is not None)
        took = _duration(time.monotonic() - self._epoch_start)
        self._say(f"epoch {trainer.current_epoch} done in {took}" + (f": {numbers}" if numbers else ""))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._say(f"training ended after {_duration(time.monotonic() - self._fit_start)}")

    def measurement_started(self, who: str, what: str, epoch: int) -> None:
        """Called by a lightning-div callback when one of its measurements begins."""
        self._say(f"epoch {epoch}: {who} measuring {what} ...")

    def measurement_done(self, who: str, what: str, epoch: int, seconds: float, logged: dict[str, float]) -> None:
        """Called by a lightning-div callback when a measurement ends, with what it logged."""
        headline = [(k, v) for k, v in logged.items() if any(k.endswith(s) for s in SUMMARY_KEYS)][:4]
        numbers = ", ".join(f"{k} {v:.4f}" for k, v in headline if _number(v) is not None)
        self._say(f"epoch {epoch}: {who} measured {what} in {_duration(seconds)}" + (f": {numbers}" if numbers else ""))


def find_progress(trainer: Any) -> PlainProgress | None:
    """The trainer's PlainProgress callback, if it has one (the callbacks tell it about their measurements)."""
    return next((cb for cb in getattr(trainer, "callbacks", None) or [] if isinstance(cb, PlainProgress)), None)
