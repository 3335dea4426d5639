"""What the Hugging Face and TRL front ends share: attaching to a trainer, the name, the cache, the reporter, the state.

:class:`~lightning_div.integrations.transformers.TrainerDiversityMonitor` and
:class:`~lightning_div.integrations.trl.GroupDiversityMonitor` are thin loops of the Trainer's
hooks around :mod:`lightning_div.measure`; the scaffolding around those loops is here, once.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightning_div._internal.distributed import rank_and_world
from lightning_div._internal.tracking import hugging_face_destination
from lightning_div.measure.reporting import RunMemory, TrackerReporter

__all__ = ["attach", "run_output_dir", "stateful", "tracker_reporter", "warn_fresh_start"]


def attach(callback: Any, trainer: Any) -> None:
    """Add ``callback`` to ``trainer`` and remember the trainer (``callback.trainer``).

    Raises:
        ValueError: ``callback`` attached to another trainer already, or another callback of its type
            with the same ``name`` in this trainer (they would log over each other's keys).
    """
    who = type(callback).__name__
    if callback.trainer is not None and callback.trainer is not trainer:
        raise ValueError(f"{who} is already attached to another trainer")
    for cb in trainer.callback_handler.callbacks:
        if isinstance(cb, type(callback)) and cb is not callback and cb.name == callback.name:
            raise ValueError(
                f"two {who}s in this trainer have name={callback.name!r}, so they would log the same keys: give "
                "each its own name=..."
            )
    if callback not in trainer.callback_handler.callbacks:
        trainer.add_callback(callback)
    callback.trainer = trainer


def run_output_dir(args: Any) -> Path:
    """The run's output directory (``args.output_dir``; the current directory when it is unset)."""
    return Path(getattr(args, "output_dir", None) or ".")


def tracker_reporter(
    trainer: Any, out: str | Path, log: Callable[[dict[str, float]], None], memory: RunMemory
) -> TrackerReporter:
    """A front end's reporter: the trainer's ``report_to`` trackers at its global step, files in
    ``<out>/lightning_div/``, scalars through ``log``, this run's memory."""
    return TrackerReporter(
        hugging_face_destination(trainer), Path(out) / "lightning_div", log, memory, rank_and_world()[0] == 0
    )


def stateful(state: Any) -> dict[str, Any]:
    """``state.stateful_callbacks``: typed as a list, a dict once the state exists (``TrainerState.__post_init__``).

    The front ends keep their state there: the Trainer writes the whole dict into every later
    checkpoint's ``trainer_state.json``. Not an ExportableState: ``restore_callback_states_from_checkpoint``
    would rebuild the callback from saved constructor arguments, and pairs and spaces are no JSON.
    """
    held: Any = getattr(state, "stateful_callbacks", None)
    if not isinstance(held, dict):
        held = {}
        state.stateful_callbacks = held
    return held


def warn_fresh_start(who: str, reason: str) -> None:
    """Say that a checkpoint's state was not restored, and why (a resume happens once per run: each one says it)."""
    warnings.warn(f"{who}: the checkpoint's state {reason}; it starts afresh", RuntimeWarning, stacklevel=3)
