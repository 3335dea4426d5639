"""DRESS's alert in a Lightning run: which monitor it reads, and what it does when it fires.

What counts as a collapse is :class:`~lightning_div.measure.alerts.DRESSAlert` (values in, kind
and reasons out); this module feeds it the Trainer's metrics at every epoch's end, logs ``dress/collapse_alert``,
keeps the run's alert record, warns once and, with ``on_collapse="stop_negatives"``, stops the
negatives of a :class:`~lightning_div.callbacks.dress.DRESSReweighting`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_div._internal.lightning import TrainerFn, pl
from lightning_div.callbacks.base import _callbacks
from lightning_div.dress.degeneration import DRESS_COLLAPSE_ALERT, DRESS_NEGATIVES_STOPPED
from lightning_div.keys import SEM_ENT, SEM_ENT_GOLD, TOP_CLUSTER_SHARE, TRAIN_LOSS, TRAIN_NEGATIVE_LOSS
from lightning_div.verdict import next_alert_record

if TYPE_CHECKING:
    from lightning_div.callbacks.dress import DRESSReweighting

__all__ = ["alert_values", "find_guard_monitor", "run_guard"]


def find_guard_monitor(dress: DRESSReweighting, trainer: pl.Trainer) -> str | None:
    """The ``name`` of the SemanticDiversityMonitor whose keys the guard reads (None: the unnamed one).

    See :meth:`DRESSReweighting.guard_monitor <lightning_div.callbacks.dress.DRESSReweighting.guard_monitor>`.
    """
    from lightning_div.callbacks.semantic_diversity import SemanticDiversityMonitor

    monitors = [cb for cb in _callbacks(trainer) if isinstance(cb, SemanticDiversityMonitor)]
    names = [cb.name for cb in monitors]
    shown = ", ".join(repr(n) for n in names) or "none"
    if isinstance(dress.monitor, SemanticDiversityMonitor):
        if not any(cb is dress.monitor for cb in monitors):
            raise ValueError(
                f"{type(dress).__name__}(monitor=...): that SemanticDiversityMonitor (name {dress.monitor.name!r}) "
                f"is not one of this Trainer's callbacks (their monitors' names: {shown}), so its metrics are never "
                "logged: pass the same object in Trainer(callbacks=[...]) (in a YAML file, give its name: monitor: <name>)"
            )
        return dress.monitor.name
    if dress.monitor is not None:
        if dress.monitor not in names:
            raise ValueError(
                f"{type(dress).__name__}(monitor={dress.monitor!r}) names no "
                f"SemanticDiversityMonitor of this Trainer (their names: {shown}): the alert "
                "would read nothing of it. Pass the name of one (or None for the one without a name)"
            )
        return dress.monitor
    if not names or None in names:
        return None
    if len(names) == 1:
        return names[0]
    dress.memory.warn_once(
        f"dress-guard-monitor:{dress.name}",
        f"{type(dress).__name__}: {len(names)} SemanticDiversityMonitors with names ({shown}) and none "
        "without: the alert reads none of their metrics, only the losses. Pass "
        "monitor=<the one to read, or its name>",
    )
    return None


def alert_values(
    metrics: dict[str, Any], monitor: str | None, gold_top_share: float | None, negatives_trained: bool
) -> dict[str, Any]:
    """What :meth:`DRESSAlert.update <lightning_div.measure.alerts.DRESSAlert.update>` reads of a run's metrics.

    The monitor's values without its name's prefix, the losses (the negatives' only when this
    epoch trained negatives: one still logged is an earlier epoch's), and the gold training
    responses' top cluster share.
    """
    prefix = f"{monitor}/" if monitor else ""
    values = {
        key: metrics[prefix + key] for key in (SEM_ENT, SEM_ENT_GOLD, TOP_CLUSTER_SHARE) if prefix + key in metrics
    }
    losses = (TRAIN_LOSS, TRAIN_NEGATIVE_LOSS) if negatives_trained else (TRAIN_LOSS,)
    values.update({key + end: metrics[key + end] for key in losses for end in ("", "_epoch") if key + end in metrics})
    if gold_top_share is not None:
        values["gold_top_share"] = gold_top_share
    return values


def run_guard(dress: DRESSReweighting, trainer: pl.Trainer, m: dict[str, float], monitor: str | None) -> None:
    """The alert at an epoch's end: log it into ``m``, warn once, stop mining if asked.

    ``monitor`` is the one :func:`find_guard_monitor` chose at setup.
    """
    if trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:
        return
    state = dress.state
    trained = bool(np.any(state.negative_weights != 0))
    values = alert_values(dict(trainer.callback_metrics), monitor, state.gold_top_share, trained)
    kind, reasons = dress.alert.update(values, trainer.current_epoch)
    # rank 0's reading decides, so every rank mines (or stops) alike
    collapsed = bool(trainer.strategy.broadcast(kind is not None, src=0))
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
            f"{'; '.join(reasons)} (Mining.loss={dress.negative_loss!r}, normalize={dress.normalize}). {then}. "
            "The paper's -1 x NLL negatives are unbounded; Mining(loss='unlikelihood') with normalize=True "
            "(the defaults) stayed healthy where they did not (docs: callbacks/dress, 'Degeneration guard')",
        )
