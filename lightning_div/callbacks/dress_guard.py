"""DRESS's degeneration guard in a Lightning run: which monitor it reads, and what it does when it fires.

What counts as a collapse is :mod:`lightning_div.dress.degeneration` (numbers in, reasons out);
this module reads the Trainer's metrics for it at every epoch's end, logs ``dress/collapse_alert``,
keeps the run's alert record, warns once and, with ``on_collapse="stop_negatives"``, stops the
negatives of a :class:`~lightning_div.callbacks.dress.DRESSReweighting`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_div._internal.lightning import TrainerFn, pl
from lightning_div.callbacks.base import _callbacks
from lightning_div.dress.degeneration import DRESS_COLLAPSE_ALERT, DRESS_NEGATIVES_STOPPED, collapse_reasons
from lightning_div.keys import TRAIN_NEGATIVE_LOSS
from lightning_div.verdict import next_alert_record

if TYPE_CHECKING:
    from lightning_div.callbacks.dress import DRESSReweighting

__all__ = ["check_collapse_monitor", "find_guard_monitor", "run_guard"]


def check_collapse_monitor(collapse_monitor: Any) -> str | None:
    """``collapse_monitor`` as given when it is None or a name (a non-empty string without surrounding spaces).

    Raises:
        ValueError: anything else.
    """
    if collapse_monitor is not None and (
        not isinstance(collapse_monitor, str)
        or not collapse_monitor.strip()
        or collapse_monitor != collapse_monitor.strip()
    ):
        raise ValueError(
            "collapse_monitor must be None or the name of a SemanticDiversityMonitor (a non-empty string "
            f"without surrounding spaces), got {collapse_monitor!r}"
        )
    return collapse_monitor


def find_guard_monitor(dress: DRESSReweighting, trainer: pl.Trainer) -> str | None:
    """The ``name`` of the SemanticDiversityMonitor whose keys the guard reads (None: the unnamed one).

    See :meth:`DRESSReweighting.guard_monitor <lightning_div.callbacks.dress.DRESSReweighting.guard_monitor>`.
    """
    from lightning_div.callbacks.semantic_diversity import SemanticDiversityMonitor

    names = [cb.name for cb in _callbacks(trainer) if isinstance(cb, SemanticDiversityMonitor)]
    shown = ", ".join(repr(n) for n in names) or "none"
    if dress.collapse_monitor is not None:
        if dress.collapse_monitor not in names:
            raise ValueError(
                f"{type(dress).__name__}(collapse_monitor={dress.collapse_monitor!r}) names no "
                f"SemanticDiversityMonitor of this Trainer (their names: {shown}): the degeneration guard "
                "would read nothing of it. Pass the name of one (or None for the one without a name)"
            )
        return dress.collapse_monitor
    if not names or None in names:
        return None
    if len(names) == 1:
        return names[0]
    dress.memory.warn_once(
        f"dress-guard-monitor:{dress.name}",
        f"{type(dress).__name__}: {len(names)} SemanticDiversityMonitors with names ({shown}) and none "
        "without: the degeneration guard reads none of their metrics, only the losses. Pass "
        "collapse_monitor=<the name of the one to read>",
    )
    return None


def run_guard(dress: DRESSReweighting, trainer: pl.Trainer, m: dict[str, float], monitor: str | None) -> None:
    """The guard at an epoch's end: log the alert into ``m``, warn once, stop mining if asked.

    ``monitor`` is the one :func:`find_guard_monitor` chose at setup.
    """
    if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:
        return
    state = dress.state
    metrics = dict(trainer.callback_metrics)
    if not np.any(state.negative_weights != 0):
        # no negative trained this epoch: a train/negative_loss still logged is an earlier epoch's
        metrics = {k: v for k, v in metrics.items() if not k.startswith(TRAIN_NEGATIVE_LOSS)}
    reasons = collapse_reasons(metrics, state.gold_top_share, dress.collapse_thresholds, monitor)
    # rank 0's reading decides, so every rank mines (or stops) alike
    collapsed = bool(trainer.strategy.broadcast(bool(reasons), src=0))
    m[DRESS_COLLAPSE_ALERT] = float(collapsed)
    dress.alert_record = next_alert_record(  # the run's files keep why, for the summary and the report
        dress.alert_record,
        dress.label,
        "collapse" if collapsed else None,
        trainer.current_epoch,
        "epoch",
        reasons,
        dress.log_key(DRESS_COLLAPSE_ALERT),
    )
    stop = collapsed and dress.on_collapse == "stop_negatives" and dress._mining()
    if stop:
        state.negatives_stopped_at = trainer.current_epoch
        state.clear_negatives()
        dress._apply(dress._datamodule(trainer))  # the next epoch trains the gold examples alone
    if dress.negatives:
        m[DRESS_NEGATIVES_STOPPED] = float(state.negatives_stopped_at is not None)
    if collapsed and reasons:
        then = (
            f"mining negatives stopped (on_collapse='stop_negatives'): from epoch {trainer.current_epoch + 1} "
            "on the gold weights alone are trained"
            if stop
            else "training goes on unchanged; on_collapse='stop_negatives' stops mining negatives when this happens"
        )
        dress.memory.warn_once(
            f"dress-collapse:{dress.name}",
            f"{type(dress).__name__}: the generations look collapsed at epoch {trainer.current_epoch}: "
            f"{'; '.join(reasons)} (negative_loss={dress.negative_loss!r}, normalize={dress.normalize}). {then}. "
            "The paper's -1 x NLL negatives are unbounded; negative_loss='unlikelihood' with normalize=True "
            "(the defaults) stayed healthy where they did not (docs: callbacks/dress, 'Degeneration guard')",
        )
