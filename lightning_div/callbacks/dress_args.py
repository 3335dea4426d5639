"""DRESSReweighting's arguments: the 1.0 objects checked, and 0.2's flat keywords read into them with a warning.

0.2 took the space, the mining and the guard's thresholds one keyword at a time (``encoder=``,
``num_negative_contexts=``, ``collapse_thresholds=``, ...). They are still accepted for one
release: each warns (``DeprecationWarning``) naming its 1.0 form and builds the very object the 1.0
form gives, so a 0.2 call trains with the same weights and negatives.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lightning_div._internal.deprecation import regrouped_into
from lightning_div.dress.degeneration import Thresholds
from lightning_div.measure.alerts import DRESSAlert
from lightning_div.semantic.space import SPACE_ARGUMENTS, SemanticSpace, space_from_arguments
from lightning_div.settings import Mining

if TYPE_CHECKING:
    from lightning_div.callbacks.semantic_diversity import SemanticDiversityMonitor

__all__ = ["REGROUPED", "RENAMED", "DressArguments", "check_monitor", "dress_arguments"]

#: 0.2's keywords that only changed name (``negatives=False`` is ``mining=None``).
RENAMED = {"negatives": "mining", "collapse_thresholds": "alert", "collapse_monitor": "monitor"}
#: 0.2's space and mining keywords -> the field of the :class:`~lightning_div.semantic.space.SemanticSpace`
#: or :class:`~lightning_div.settings.Mining` each became.
REGROUPED = {
    **regrouped_into("space", *SPACE_ARGUMENTS),
    **regrouped_into(
        "mining",
        "head_threshold",
        num_negative_contexts="num_contexts",
        negative_weight="weight",
        mine_at="at",
        negative_loss="loss",
        negative_batches="batches",
    ),
}


@dataclass
class DressArguments:
    """What DRESSReweighting is built from, 0.2's keywords read in.

    Attributes:
        space: the semantic space (the given one, or a private one from 0.2's space keywords).
        mining: the mining settings, also when mining is off (their ``head_threshold`` and
            ``weight`` are in the checkpointed settings, as in 0.2).
        negatives: whether negatives are mined (``mining=None`` or 0.2's ``negatives=False``: not).
        alert: the degeneration guard.
        monitor: the SemanticDiversityMonitor the guard reads, its name, or None (found at setup).
    """

    space: SemanticSpace
    mining: Mining
    negatives: bool
    alert: DRESSAlert
    monitor: SemanticDiversityMonitor | str | None


def check_monitor(monitor: Any) -> SemanticDiversityMonitor | str | None:
    """``monitor`` as given: None, a SemanticDiversityMonitor, or the ``name`` of one (the YAML form).

    Raises:
        ValueError: anything else, or a name that is empty or has surrounding spaces.
    """
    from lightning_div.callbacks.semantic_diversity import SemanticDiversityMonitor

    if monitor is None or isinstance(monitor, SemanticDiversityMonitor):
        return monitor
    if not isinstance(monitor, str) or not monitor.strip() or monitor != monitor.strip():
        raise ValueError(
            "DRESSReweighting(monitor=...) must be a SemanticDiversityMonitor, the name of one (a non-empty "
            f"string without surrounding spaces) or None, got {monitor!r:.80}"
        )
    return monitor


def _alert(alert: DRESSAlert | None, thresholds: Any) -> DRESSAlert:
    """``alert``, or the one 0.2's ``collapse_thresholds`` (None, the thresholds, or a dict of them) describes."""
    if alert is not None and not isinstance(alert, DRESSAlert):
        raise ValueError(f"DRESSReweighting(alert=...) must be a DRESSAlert or None, got {alert!r:.80}")
    if thresholds is None:
        return alert or DRESSAlert()
    if alert is not None:
        raise ValueError("DRESSReweighting: alert= and collapse_thresholds= were both given: pass alert= alone")
    if isinstance(thresholds, DRESSAlert):
        return thresholds
    if isinstance(thresholds, Thresholds):
        return DRESSAlert(**dataclasses.asdict(thresholds))
    if isinstance(thresholds, Mapping):
        fields = [f.name for f in dataclasses.fields(Thresholds)]
        unknown = sorted(str(k) for k in thresholds if k not in fields)
        if unknown:
            raise ValueError(f"collapse_thresholds has no field {unknown[0]!r}; its fields are {', '.join(fields)}")
        return DRESSAlert(**thresholds)
    raise ValueError(
        f"collapse_thresholds must be a CollapseThresholds (or a dict of its fields, or None), got {thresholds!r:.80}"
    )


def dress_arguments(
    old: dict[str, Any],
    groups: dict[str, dict[str, Any]],
    space: SemanticSpace | None,
    mining: Mining | None,
    alert: DRESSAlert | None,
    monitor: Any,
    batch_size: int,
    show_progress: bool,
) -> DressArguments:
    """DRESSReweighting's arguments, with 0.2's keywords read in (``take_own(self, kwargs, RENAMED, REGROUPED)``).

    Args:
        old: 0.2's keywords that changed name, by their new name (:data:`RENAMED`).
        groups: 0.2's space and mining keywords, by object and field (:data:`REGROUPED`).
        space, mining, alert, monitor: as given in the 1.0 form.
        batch_size, show_progress: the base's, for a private space.

    Raises:
        ValueError: a 1.0 argument together with its 0.2 form, or a value out of range (the error names it).
    """
    if mining is not None and not isinstance(mining, Mining):
        raise ValueError(f"DRESSReweighting(mining=...) must be a Mining or None, got {mining!r:.80}")
    if old.get("monitor") is not None and monitor is not None:
        raise ValueError("DRESSReweighting: monitor= and collapse_monitor= were both given: pass monitor= alone")
    negatives = old.get("mining")  # 0.2's negatives=True/False
    return DressArguments(
        # None was 0.2's "not given" for a space keyword: the space's default
        space=space_from_arguments(
            "DRESSReweighting", space, **groups.get("space", {}), batch_size=batch_size, show_progress=show_progress
        ),
        mining=dataclasses.replace(mining or Mining(), **groups.get("mining", {})),
        negatives=bool(negatives) if negatives is not None else mining is not None,
        alert=_alert(alert, old.get("alert")),
        monitor=check_monitor(monitor if monitor is not None else old.get("monitor")),
    )
