"""DRESS's degeneration guard: has training with DRESS collapsed the generations?

The rule of :class:`~lightning_div.measure.alerts.DRESSAlert` (numbers in, reasons out): DRESS's
negatives push the model away from its own generations. The paper's −1 × NLL has no
bound, and a run can go from fluent replies to ``'asd f asd f f …'`` within an epoch (the collapsed
fine-tuning runs at a high learning rate in ``docs/callbacks/dress.md``, 'Degeneration guard').
:func:`collapse_reasons` reads what a run has logged (``trainer.callback_metrics``: the
:class:`~lightning_div.callbacks.SemanticDiversityMonitor`'s ``val/sem_ent``,
``val/sem_ent_gold`` and ``val/top_cluster_share``, the module's ``train/loss`` and
``train/negative_loss``) and says, in words, which of three signs of collapse it shows:

* **Sem-Ent far below the gold's**: ``val/sem_ent`` < ``sem_ent_ratio`` (0.5) × ``val/sem_ent_gold``.
  Fine-tuning the base model, healthy runs stayed at 0.80–0.97 of the gold's (every setting of
  ``docs/results/dress_vs_baseline.md``, 31 runs, 500 contexts); the collapsed high-learning-rate
  runs were at 0.0 and 0.09.
* **One cluster takes the generations**: ``val/top_cluster_share`` > max(``top_share_floor`` (0.8),
  ``top_share_factor`` (2) × the gold training responses' top share). The collapsed runs:
  0.97 and 1.0; healthy fine-tuning runs: 0.09–0.23 (k = 20, 500 contexts), 0.28 (the same high learning
  rate with unlikelihood negatives, k = 10), and up to 0.67 in ``tests/test_dress_guard.py``'s tiny setting
  (k = 8, 48 contexts, 8 new tokens: short generic replies crowd one cluster without any collapse),
  which is why the floor sits at 0.8 and not at one half.
* **The negatives' loss runs away from the gold loss**: ``train/negative_loss`` < −
  ``negative_loss_ratio`` (1) × ``train/loss`` (epoch means). Only −1 × NLL can do this
  (unlikelihood is ≥ 0): the negatives' term then outweighs the gold term of the update.
  Fine-tuning with normalised weights it stayed at 0.04–0.43 of the gold loss (all 15 epochs of
  ``dress_nll``); from scratch, where −1 × NLL hurt every seed, 0.9–1.8; the collapsed run, −29.6.

Needs no model and no trainer: the logged values are passed in as numbers.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from lightning_div._internal.deprecation import warn_deprecated
from lightning_div.keys import SEM_ENT, SEM_ENT_GOLD, TOP_CLUSTER_SHARE, TRAIN_LOSS, TRAIN_NEGATIVE_LOSS

__all__ = [
    "DRESS_COLLAPSE_ALERT",
    "DRESS_NEGATIVES_STOPPED",
    "ON_COLLAPSE",
    "OnCollapse",
    "Thresholds",
    "collapse_reasons",
]

#: Logged by DRESSReweighting at every epoch's end: 1.0 when the logged metrics show a collapse, else 0.0.
DRESS_COLLAPSE_ALERT = "dress/collapse_alert"
#: Logged by DRESSReweighting with negatives: 1.0 once the guard stopped mining them (``on_collapse="stop_negatives"``).
DRESS_NEGATIVES_STOPPED = "dress/negatives_stopped"

#: What :class:`~lightning_div.callbacks.DRESSReweighting` does when the guard fires: always log
#: ``dress/collapse_alert`` and warn once; ``"stop_negatives"`` also stops mining negatives for the rest of the fit.
OnCollapse = Literal["warn", "stop_negatives"]
#: The values ``on_collapse`` takes (:data:`OnCollapse`).
ON_COLLAPSE: tuple[str, ...] = get_args(OnCollapse)


@dataclass(frozen=True)
class Thresholds:
    """When :func:`collapse_reasons` calls the generations collapsed (the module docstring says why these values).

    What a :class:`~lightning_div.measure.alerts.DRESSAlert` is constructed from (0.2's public
    ``CollapseThresholds``, still importable under that name with a warning).

    Attributes:
        sem_ent_ratio: collapse when Sem-Ent < this × the gold responses' Sem-Ent (0 turns the sign off).
        top_share_factor: collapse when the top cluster's share > this × the gold's top share ...
        top_share_floor: ... and > this (a share in [0, 1]; 1 turns the sign off).
        negative_loss_ratio: collapse when the negatives' loss < −this × the gold loss (inf turns it off).

    Raises:
        ValueError: a value that is negative, not a number, or a share above 1.
    """

    sem_ent_ratio: float = 0.5
    top_share_factor: float = 2.0
    top_share_floor: float = 0.8
    negative_loss_ratio: float = 1.0

    def __post_init__(self) -> None:
        for name in ("sem_ent_ratio", "top_share_factor", "top_share_floor", "negative_loss_ratio"):
            value = getattr(self, name)
            # any real number (numpy's float32 too), stored as a float; a bool or a string is not a threshold
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value) or value < 0:
                raise ValueError(f"DRESSAlert.{name} must be a number >= 0, got {value!r}")
            object.__setattr__(self, name, float(value))  # frozen: set once, here
        if self.top_share_floor > 1:
            raise ValueError(f"DRESSAlert.top_share_floor is a share in [0, 1], got {self.top_share_floor}")


def _value(metrics: Mapping[str, Any], *keys: str) -> float | None:
    """The first of ``keys`` logged with a finite value (a tensor or a number), else None."""
    for key in keys:
        if key in metrics:
            value = float(metrics[key])
            if math.isfinite(value):
                return value
    return None


def _percent(share: float) -> str:
    return f"{100 * share:.0f} %"


def collapse_reasons(
    metrics: Mapping[str, Any],
    gold_top_share: float | None = None,
    thresholds: Thresholds | None = None,
    monitor: str | None = None,
) -> list[str]:
    """The signs of collapse the logged ``metrics`` show, in words; empty when none (or nothing to read).

    A sign whose metrics were not logged is not checked: without a
    :class:`~lightning_div.callbacks.SemanticDiversityMonitor` only the loss sign is, and without
    negatives (or with unlikelihood negatives, ≥ 0) only the monitor's.

    Args:
        metrics: what the run logged, e.g. ``trainer.callback_metrics`` (numbers or 0-d tensors).
        gold_top_share: the largest cluster's share of the gold training responses (None: the floor alone).
        thresholds: when to call it a collapse (default :class:`Thresholds`).
        monitor: the ``name`` of the SemanticDiversityMonitor to read (its keys are ``<name>/val/...``).

    Returns:
        One sentence per sign that holds.

    Examples:
        >>> collapse_reasons({"val/sem_ent": 0.14, "val/sem_ent_gold": 1.52, "val/top_cluster_share": 0.97})
        ['Sem-Ent 0.14 < 0.5 x the gold responses 1.52', 'the top cluster holds 97 % of the generations (> 80 %)']
        >>> collapse_reasons({"train/loss_epoch": 4.1, "train/negative_loss_epoch": -29.6})
        ['the negatives loss -29.6 < -1 x the gold loss 4.1: the negatives outweigh the gold examples']
        >>> collapse_reasons({"val/sem_ent": 2.6, "val/sem_ent_gold": 2.95, "val/top_cluster_share": 0.16}, 0.12)
        []
    """
    t = thresholds or Thresholds()
    prefix = f"{monitor}/" if monitor else ""
    reasons: list[str] = []
    sem_ent, gold = _value(metrics, prefix + SEM_ENT), _value(metrics, prefix + SEM_ENT_GOLD)
    if sem_ent is not None and gold is not None and sem_ent < t.sem_ent_ratio * gold:
        reasons.append(f"Sem-Ent {sem_ent:.3g} < {t.sem_ent_ratio:g} x the gold responses {gold:.3g}")
    top = _value(metrics, prefix + TOP_CLUSTER_SHARE)
    limit = max(t.top_share_floor, t.top_share_factor * gold_top_share if gold_top_share is not None else 0.0)
    if top is not None and top > limit:
        gold_part = f"; the gold's: {_percent(gold_top_share)}" if gold_top_share is not None else ""
        reasons.append(f"the top cluster holds {_percent(top)} of the generations (> {_percent(limit)}{gold_part})")
    gold_loss = _value(metrics, TRAIN_LOSS + "_epoch", TRAIN_LOSS)
    negative = _value(metrics, TRAIN_NEGATIVE_LOSS + "_epoch", TRAIN_NEGATIVE_LOSS)
    if gold_loss is not None and negative is not None and negative < -t.negative_loss_ratio * abs(gold_loss):
        reasons.append(
            f"the negatives loss {negative:.3g} < -{t.negative_loss_ratio:g} x the gold loss {gold_loss:.3g}: "
            "the negatives outweigh the gold examples"
        )
    return reasons


def __getattr__(name: str) -> Any:
    """0.2's ``CollapseThresholds``: the thresholds a :class:`~lightning_div.measure.alerts.DRESSAlert` takes, with a warning."""
    if name == "CollapseThresholds":
        # the new form is one layer up (measure/), so it is named here and not imported
        warn_deprecated(f"{__name__}.CollapseThresholds", "lightning_div.measure.alerts.DRESSAlert(...) (alert=)")
        return Thresholds
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
