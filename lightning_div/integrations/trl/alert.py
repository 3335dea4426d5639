"""The GRPO/RLOO monitor's alert: a :class:`~lightning_div.measure.alerts.GroupAlert` fed and said once per kind.

The alert itself (when group diversity collapses, when the text breaks down) is the measurement
core's, given to the monitor as ``alert=GroupAlert(...)``; here it is fed one measurement at a
time and warns once per kind, on the first process.
"""

from __future__ import annotations

import warnings

from lightning_div._internal.distributed import rank_and_world
from lightning_div.measure.alerts import ALERT_SIGNALS, GroupAlert

__all__ = ["alert_values", "feed_alert", "fresh_alert"]


def fresh_alert(alert: GroupAlert) -> GroupAlert:
    """An alert with ``alert``'s thresholds and reasons' names and none of its state (a damaged checkpoint's fresh start)."""
    return GroupAlert(
        alert.warn_drop,
        alert.warn_below,
        alert.start_steps,
        alert.top_word_share,
        alert.cut_rise,
        alert.nll_rise,
        names=alert.names,
    )


def feed_alert(alert: GroupAlert, values: dict[str, float], who: str, step: int | None) -> tuple[str | None, list[str]]:
    """Feed one measurement (unprefixed names) to ``alert``; warn once per kind on the first process.

    Returns:
        ``(kind, reasons)`` as :meth:`GroupAlert.update` says them.
    """
    kind, reasons = alert.update({k: values[k] for k in ALERT_SIGNALS if k in values})
    if kind is not None and kind not in alert.warned:
        alert.warned.add(kind)
        what = (
            "the text broke down (degeneration, not a collapse of diversity among good answers)"
            if kind == "breakdown"
            else "group diversity collapsed"
        )
        if rank_and_world()[0] == 0:
            warnings.warn(f"{who}: step {step}: {what}: {'; '.join(reasons)}", RuntimeWarning, stacklevel=3)
    return kind, reasons


def alert_values(kind: str | None) -> dict[str, float]:
    """``{"collapse_alert": 0/1, "breakdown_alert": 0/1}`` (unprefixed) for the kind an alert said."""
    return {"collapse_alert": float(kind == "collapse"), "breakdown_alert": float(kind == "breakdown")}
