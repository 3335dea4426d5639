"""The alerts: when GRPO/RLOO rollouts collapse or their text breaks down, when RUQ falls, when DRESS's generations collapse.

:class:`GroupAlert` reads the values :class:`~lightning_div.measure.group.GroupMeasure` gives one
step at a time (unprefixed, the names of :data:`ALERT_SIGNALS`) and says *collapse* when group
Sem-Ent falls against its own start, *breakdown* instead when the degeneration signals say the
text fell apart. Apart from the measure, so that the measure only measures and a front end feeds
the alert what it measured. :class:`RUQAlert` is RUQ's: it says when RUQ falls below a floor or
drops since the last measurement. :class:`DRESSAlert` is DRESS's degeneration guard: it says when
the metrics a DRESS run logged show its generations collapsed
(:func:`~lightning_div.dress.degeneration.collapse_reasons`).

Every alert has one shape: constructed from its thresholds, fed one measurement at a time by
``update(values, step)``, which returns ``(kind, reasons)`` (kind None: no alert; reasons in
words), and keeping the state a resumed run restores (``state_dict()`` / ``load_state_dict()``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from lightning_div._internal.attributes import ReadThrough
from lightning_div._internal.distributed import rank_and_world
from lightning_div.dress.degeneration import Thresholds, collapse_reasons
from lightning_div.keys import SEM_ENT, SEM_ENT_GOLD, TOP_CLUSTER_SHARE, TRAIN_LOSS, TRAIN_NEGATIVE_LOSS

__all__ = ["ALERT_SIGNALS", "DRESS_ALERT_SIGNALS", "DRESSAlert", "GroupAlert", "RUQAlert"]

#: The values :meth:`GroupAlert.update` reads (unprefixed keys); the last three may be missing.
ALERT_SIGNALS = ("group_sem_ent", "group_top_word_share", "length_cut_share", "reference_nll")


def _check_threshold(value: Any, name: str, low: float, high: float | None = None) -> float | None:
    """None, or a finite number in [low, high]."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number or None, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < low or (high is not None and v > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be a finite number {bound} or None, got {value!r}")
    return v


class GroupAlert:
    """Says when group Sem-Ent falls against its own start (collapse), or when the text falls apart (breakdown).

    Each signal's *start* is the mean of its first ``start_steps`` measured values. Group
    Sem-Ent *now* is the mean of its last ``start_steps`` values (one step of a few groups is
    noise); a degeneration signal's now is its latest value (text falls apart abruptly, and the
    thresholds are far from what ordinary text gives). Once a signal's start is complete and a
    later step was measured:

    * **collapse**: group Sem-Ent now is below ``(1 - warn_drop) x`` its start, or below
      ``warn_below`` (nats; checked from the first step);
    * **breakdown** (checked first; a breakdown is not called a collapse): the most frequent
      word's share within groups is at least ``top_word_share`` (from the first step), the
      share of completions cut at the length limit rose by ``cut_rise`` or more over its start,
      or the mean NLL under the reference model rose by ``nll_rise`` nats or more over its start.

    :meth:`update` returns the kind (``"collapse"``, ``"breakdown"`` or None) and its reasons.
    Its state (every signal's values so far, and which kinds were warned of) is
    :meth:`state_dict`, which a resumed run restores.

    Args:
        warn_drop: the relative fall of group Sem-Ent that is a collapse (0.25: a quarter; None: never).
        warn_below: the group Sem-Ent (nats) below which it is a collapse (None: never).
        start_steps: how many first measurements make each signal's start (and the window of "now").
        top_word_share: the within-group top-word share from which the text broke down (None: never).
        cut_rise: the rise of the length-cut share over its start that is a breakdown (None: never).
        nll_rise: the rise of the reference NLL (nats) over its start that is a breakdown (None: never).
        names: what the reasons call each threshold, by its name here: a front end's own argument
            (``{"top_word_share": "breakdown_top_word"}``), so that a warning names what the user set.

    Raises:
        ValueError: a threshold that is not a finite number in its range (or None), or
            ``start_steps`` not an integer >= 1.

    Examples:
        >>> alert = GroupAlert(warn_drop=0.25, start_steps=2)
        >>> [alert.update({"group_sem_ent": v, "group_top_word_share": 0.1})[0] for v in (1.0, 1.0, 0.9, 0.5, 0.3)]
        [None, None, None, 'collapse', 'collapse']
    """

    def __init__(
        self,
        warn_drop: float | None = 0.25,
        warn_below: float | None = None,
        start_steps: int = 5,
        top_word_share: float | None = 0.4,
        cut_rise: float | None = 0.3,
        nll_rise: float | None = 1.0,
        names: Mapping[str, str] | None = None,
    ) -> None:
        #: What the reasons call each threshold (the front end's argument names).
        self.names = dict(names or {})
        self.warn_drop = _check_threshold(warn_drop, "warn_drop", 0.0, 1.0)
        self.warn_below = _check_threshold(warn_below, "warn_below", 0.0)
        if isinstance(start_steps, bool) or not isinstance(start_steps, (int, np.integer)) or start_steps < 1:
            raise ValueError(f"start_steps must be an integer >= 1, got {start_steps!r}")
        self.start_steps = int(start_steps)
        self.top_word_share = _check_threshold(top_word_share, "top_word_share", 0.0, 1.0)
        self.cut_rise = _check_threshold(cut_rise, "cut_rise", 0.0, 1.0)
        self.nll_rise = _check_threshold(nll_rise, "nll_rise", 0.0)
        #: Every signal's measured values, in order (the starts are their first ``start_steps``).
        self.values: dict[str, list[float]] = {k: [] for k in ALERT_SIGNALS}
        #: The kinds already warned of in this run (each is warned of once).
        self.warned: set[str] = set()

    def _called(self, threshold: str) -> str:
        """The name a reason gives a threshold: the front end's argument, else the name here."""
        return self.names.get(threshold, threshold)

    def start(self, signal: str) -> float | None:
        """The signal's start: the mean of its first ``start_steps`` values (None until there are that many)."""
        seen = self.values[signal]
        return float(np.mean(seen[: self.start_steps])) if len(seen) >= self.start_steps else None

    def now(self, signal: str) -> float | None:
        """The signal now: the mean of its last ``start_steps`` values (None before any)."""
        seen = self.values[signal]
        return float(np.mean(seen[-self.start_steps :])) if seen else None

    def latest(self, signal: str) -> float | None:
        """The signal's latest value (None before any)."""
        seen = self.values[signal]
        return seen[-1] if seen else None

    def _risen(self, signal: str, rise: float | None) -> tuple[float, float] | None:
        """(start, latest) when the signal's latest value is ``rise`` or more above its complete start."""
        start, now = self.start(signal), self.latest(signal)
        if rise is None or start is None or now is None or len(self.values[signal]) <= self.start_steps:
            return None
        return (start, now) if now - start >= rise else None

    def update(self, values: Mapping[str, float], step: int | None = None) -> tuple[str | None, list[str]]:
        """Add one step's values and say whether they alert.

        Args:
            values: the step's signals by :data:`ALERT_SIGNALS` name (``group_sem_ent`` required;
                a missing or non-finite other signal is not counted).
            step: the training step measured (the rule counts measurements, not steps: kept for
                the shape every alert shares).

        Returns:
            ``(kind, reasons)``: kind ``"breakdown"``, ``"collapse"`` or None; reasons in words
            (what, now, start, the threshold).

        Raises:
            ValueError: no finite ``group_sem_ent`` >= 0, or a signal given as a boolean or a non-number
                (checked before anything is kept, as :meth:`load_state_dict` checks a state).
        """
        sem = values.get("group_sem_ent")
        number = (int, float, np.integer, np.floating)
        if isinstance(sem, bool) or not isinstance(sem, number) or not math.isfinite(sem) or sem < 0:
            raise ValueError(f"GroupAlert.update needs a finite group_sem_ent >= 0 (an entropy), got {sem!r}")
        for signal in ALERT_SIGNALS:
            v = values.get(signal)
            if v is not None and (isinstance(v, bool) or not isinstance(v, number)):
                raise ValueError(f"GroupAlert.update: {signal} must be a number, got {v!r}")
        for signal in ALERT_SIGNALS:
            v = values.get(signal)
            if v is not None and math.isfinite(float(v)):
                self.values[signal].append(float(v))
        breakdown = []
        top = self.latest("group_top_word_share")
        if self.top_word_share is not None and top is not None and top >= self.top_word_share:
            breakdown.append(
                f"the most frequent word is {top:.0%} of the words within a group, averaged over groups "
                f"({self._called('top_word_share')} = {self.top_word_share})"
            )
        cut = self._risen("length_cut_share", self.cut_rise)
        if cut is not None:
            breakdown.append(
                f"{cut[1]:.0%} of the completions are cut at the length limit, up from {cut[0]:.0%} at the start "
                f"({self._called('cut_rise')} = {self.cut_rise})"
            )
        nll = self._risen("reference_nll", self.nll_rise)
        if nll is not None:
            breakdown.append(
                f"the reference model's NLL is {nll[1]:.2f}, up from {nll[0]:.2f} at the start ({self._called('nll_rise')} = {self.nll_rise})"
            )
        sem_start, sem_now = self.start("group_sem_ent"), self.now("group_sem_ent")
        assert sem_now is not None
        collapse = []
        if (
            self.warn_drop is not None
            and sem_start is not None
            and len(self.values["group_sem_ent"]) > self.start_steps
            and sem_now < (1.0 - self.warn_drop) * sem_start
        ):
            collapse.append(
                f"group Sem-Ent is {sem_now:.3f}, down {1 - sem_now / sem_start:.0%} from {sem_start:.3f} at the start "
                f"({self._called('warn_drop')} = {self.warn_drop})"
            )
        if self.warn_below is not None and sem_now < self.warn_below:
            collapse.append(f"group Sem-Ent is {sem_now:.3f}, below {self._called('warn_below')} = {self.warn_below}")
        if breakdown:
            return "breakdown", breakdown + collapse
        return ("collapse", collapse) if collapse else (None, [])

    def state_dict(self) -> dict[str, Any]:
        """The values so far and the kinds warned of (JSON-ready)."""
        return {"values": {k: list(v) for k, v in self.values.items()}, "warned": sorted(self.warned)}

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`'s values.

        Raises:
            ValueError: anything but a dict of lists of finite numbers by signal, and a list of kinds.
        """
        if not isinstance(state, dict) or not isinstance(state.get("values"), dict):
            raise ValueError(f"a GroupAlert state must be a dict with 'values', got {state!r}")
        values: dict[str, list[float]] = {k: [] for k in ALERT_SIGNALS}
        for key, seen in state["values"].items():
            if key not in values or not isinstance(seen, list):
                raise ValueError(f"a GroupAlert state has an unknown signal or not a list: {key!r}")
            for v in seen:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise ValueError(f"a GroupAlert state's {key} holds {v!r}, not a finite number")
            values[key] = [float(v) for v in seen]
        warned = state.get("warned", [])
        if not isinstance(warned, list) or any(k not in ("collapse", "breakdown") for k in warned):
            raise ValueError(f"a GroupAlert state's 'warned' must list 'collapse' / 'breakdown', got {warned!r}")
        self.values, self.warned = values, set(warned)


def _checked_points(name: str, value: Any, most: float) -> float | None:
    """A RUQ threshold as given: None, or a finite number in [0, ``most``] (RUQ is a percentage)."""
    if value is None:
        return None
    points = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else math.nan
    if not math.isfinite(points):
        raise ValueError(f"{name} must be a number of RUQ points (or None), got {value!r}")
    if not 0.0 <= points <= most:
        span = "a number >= 0" if math.isinf(most) else f"in [0, {most:g}] (RUQ is a percentage)"
        raise ValueError(f"{name} must be {span}, got {value!r}")
    return points


class RUQAlert:
    """Says when RUQ falls below ``warn_below`` or drops by more than ``warn_drop`` points since the last measurement.

    Its state is the last value (:attr:`last`), which a resumed run restores. :meth:`update` is the
    shape every alert shares; :meth:`check` and :meth:`alert` are the same rule for a single value.

    Args:
        warn_below: alert below this RUQ, a percentage in [0, 100] (None: never).
        warn_drop: alert on a drop of more than this many points, a number >= 0 (None: never).

    Raises:
        ValueError: a threshold that is not a number (``"50"``, NaN), a negative ``warn_drop`` or a
            ``warn_below`` outside [0, 100].

    Examples:
        >>> alert = RUQAlert(warn_below=None, warn_drop=10.0)
        >>> alert.check(60.0, "val/ruq"), alert.check(45.0, "val/ruq")
        ([], ['val/ruq dropped from 60.0 to 45.0 (more than warn_drop = 10.0)'])
        >>> alert.update({"ruq": 30.0}, step=3)
        ('RUQ alert', ['ruq dropped from 45.0 to 30.0 (more than warn_drop = 10.0)'])
    """

    #: The kind :meth:`update` returns on an alert (the verdict's name for RUQ's alert).
    KIND = "RUQ alert"

    def __init__(self, warn_below: float | None = None, warn_drop: float | None = 10.0) -> None:
        self.warn_below = _checked_points("warn_below", warn_below, 100.0)
        self.warn_drop = _checked_points("warn_drop", warn_drop, math.inf)
        #: The last measured RUQ (what ``warn_drop`` compares with).
        self.last: float | None = None
        #: The reasons of the last :meth:`check` (empty: no alert), for the run's alert record.
        self.reasons: list[str] = []

    def check(self, value: float, key: str) -> list[str]:
        """The reasons for an alert at ``value`` (none: no alert); ``value`` becomes :attr:`last`.

        Args:
            value: this measurement's RUQ.
            key: its name, in the reasons (``val/ruq``, ``eval_ruq``).
        """
        reasons = []
        if self.warn_below is not None and value < self.warn_below:
            reasons.append(f"{key} = {value:.1f} is below warn_below = {self.warn_below}")
        if self.warn_drop is not None and self.last is not None and self.last - value > self.warn_drop:
            reasons.append(
                f"{key} dropped from {self.last:.1f} to {value:.1f} (more than warn_drop = {self.warn_drop})"
            )
        self.last = float(value)
        self.reasons = reasons
        return reasons

    def update(self, values: Mapping[str, float], step: int | None = None) -> tuple[str | None, list[str]]:
        """:meth:`check` of one measurement's values (:class:`~lightning_div.measure.ruq.RUQMeasure`'s), as every alert.

        Args:
            values: the measurement's values; ``ruq`` is read, or the one key ending in ``ruq``
                (``val/ruq``, ``eval_ruq``), which the reasons then name.
            step: the step or epoch measured (the rule compares with the last measurement, whenever it was).

        Returns:
            ``(kind, reasons)``: kind ``"RUQ alert"`` or None.

        Raises:
            ValueError: no RUQ among ``values``, or several.
        """
        keys = ["ruq"] if "ruq" in values else [k for k in values if k.endswith("ruq")]
        if len(keys) != 1:
            raise ValueError(
                f"RUQAlert.update needs one RUQ value (key 'ruq' or ending in 'ruq'), got {sorted(values)}"
            )
        reasons = self.check(float(values[keys[0]]), keys[0])
        return (self.KIND if reasons else None), reasons

    def alert(self, value: float, key: str, who: str, idk: str) -> float:
        """:meth:`check`, then a RuntimeWarning per reason on the first process; 1.0 on an alert, else 0.0.

        Args:
            value: this measurement's RUQ.
            key: its name (``val/ruq``, ``eval_ruq``).
            who: the callback, in the warning.
            idk: the headline IDK string, in the warning.
        """
        import warnings

        reasons = self.check(value, key)
        if rank_and_world()[0] == 0:
            for reason in reasons:  # every alert is said: not once per run
                warnings.warn(f"{who}: {reason}: the model increasingly prefers {idk!r}", RuntimeWarning, stacklevel=2)
        return 1.0 if reasons else 0.0

    def state_dict(self) -> dict[str, Any]:
        """The last measured RUQ (JSON-ready)."""
        return {"last": self.last}

    def load_state_dict(self, last: Any) -> None:
        """Restore :meth:`state_dict`'s :attr:`last` (or the bare value, as the front ends of 0.2 stored it).

        Raises:
            ValueError: a value that is not a finite number or None (after a NaN no drop would ever be seen).
        """
        if isinstance(last, dict):
            if set(last) != {"last"}:
                raise ValueError(f"a RUQAlert state must be a dict with 'last' alone, got {last!r}")
            last = last["last"]
        if last is not None and (
            isinstance(last, bool) or not isinstance(last, (int, float)) or not math.isfinite(last)
        ):
            raise ValueError(f"the last RUQ must be a finite number or null, got {last!r}")
        self.last = None if last is None else float(last)


#: The values :meth:`DRESSAlert.update` reads, by the keys a run logs them under (unprefixed by a
#: monitor's name); ``gold_top_share`` is the gold training responses' largest cluster share.
#: A loss is read as its epoch mean (``train/loss_epoch``) when that was logged.
DRESS_ALERT_SIGNALS = (SEM_ENT, SEM_ENT_GOLD, TOP_CLUSTER_SHARE, TRAIN_LOSS, TRAIN_NEGATIVE_LOSS, "gold_top_share")


class DRESSAlert:
    """DRESS's degeneration guard: says when a DRESS run's generations collapsed (kind ``"collapse"``).

    The three signs and why the default thresholds sit where they do are in
    :mod:`lightning_div.dress.degeneration`: Sem-Ent far below the gold responses', one cluster
    taking the generations, the negatives' loss running away from the gold loss. A sign whose
    values were not logged is not checked. Its state is the step the alert has held since (None
    when the last update did not alert) and the kinds already warned of, which a resumed run restores.

    Args:
        sem_ent_ratio: collapse when Sem-Ent < this x the gold responses' Sem-Ent (0 turns the sign off).
        top_share_factor: collapse when the top cluster's share > this x the gold's top share ...
        top_share_floor: ... and > this (a share in [0, 1]; 1 turns the sign off).
        negative_loss_ratio: collapse when the negatives' loss < -this x the gold loss (inf turns it off).

    Raises:
        ValueError: a threshold that is negative or not a number, or a floor above 1.

    Examples:
        >>> alert = DRESSAlert()
        >>> alert.update({"val/sem_ent": 0.14, "val/sem_ent_gold": 1.52}, step=3)
        ('collapse', ['Sem-Ent 0.14 < 0.5 x the gold responses 1.52'])
        >>> alert.update({"val/sem_ent": 1.4, "val/sem_ent_gold": 1.52}, step=4)
        (None, [])
    """

    KIND = "collapse"

    def __init__(
        self,
        sem_ent_ratio: float = 0.5,
        top_share_factor: float = 2.0,
        top_share_floor: float = 0.8,
        negative_loss_ratio: float = 1.0,
    ) -> None:
        #: The thresholds, checked (:class:`~lightning_div.dress.degeneration.Thresholds`).
        self.thresholds = Thresholds(sem_ent_ratio, top_share_factor, top_share_floor, negative_loss_ratio)
        #: The step the alert has held since (None: the last update did not alert).
        self.since: int | None = None
        #: The kinds already warned of in this run (a front end warns of each once).
        self.warned: set[str] = set()

    sem_ent_ratio: ReadThrough[float] = ReadThrough(
        "thresholds.sem_ent_ratio", "Collapse below this x the gold Sem-Ent."
    )
    top_share_factor: ReadThrough[float] = ReadThrough(
        "thresholds.top_share_factor", "Collapse when the top cluster's share exceeds this x the gold's ..."
    )
    top_share_floor: ReadThrough[float] = ReadThrough("thresholds.top_share_floor", "... and exceeds this share.")
    negative_loss_ratio: ReadThrough[float] = ReadThrough(
        "thresholds.negative_loss_ratio", "Collapse when the negatives' loss < -this x the gold loss."
    )

    def __repr__(self) -> str:
        t = self.thresholds
        return (
            f"DRESSAlert(sem_ent_ratio={t.sem_ent_ratio}, top_share_factor={t.top_share_factor}, "
            f"top_share_floor={t.top_share_floor}, negative_loss_ratio={t.negative_loss_ratio})"
        )

    def update(self, values: Mapping[str, Any], step: int | None = None) -> tuple[str | None, list[str]]:
        """Read one measurement's values (numbers or 0-d tensors) and say whether they show a collapse.

        Args:
            values: what the run logged by :data:`DRESS_ALERT_SIGNALS` key (``train/loss_epoch`` and
                ``train/negative_loss_epoch`` are read before the step values); a missing or non-finite one is not checked.
            step: the epoch (or step) measured: where :attr:`since` starts.

        Returns:
            ``(kind, reasons)``: kind ``"collapse"`` or None, one sentence per sign that holds.
        """
        gold_top = values.get("gold_top_share")
        gold_top_share = None if gold_top is None or not math.isfinite(float(gold_top)) else float(gold_top)
        reasons = collapse_reasons(values, gold_top_share, self.thresholds)
        if not reasons:
            self.since = None
            return None, []
        if self.since is None:
            self.since = step
        return self.KIND, reasons

    def state_dict(self) -> dict[str, Any]:
        """Since when it alerts and the kinds warned of (JSON-ready)."""
        return {"since": self.since, "warned": sorted(self.warned)}

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`.

        Raises:
            ValueError: anything but a dict with an integer (or null) ``since`` and a list of kinds ``warned``.
        """
        since = state.get("since") if isinstance(state, dict) else "missing"
        if since is not None and (isinstance(since, bool) or not isinstance(since, int)):
            raise ValueError(f"a DRESSAlert state must be a dict with an integer (or null) 'since', got {state!r}")
        warned = state.get("warned", [])
        if not isinstance(warned, list) or any(k != self.KIND for k in warned):
            raise ValueError(f"a DRESSAlert state's 'warned' must list {self.KIND!r} only, got {warned!r}")
        self.since, self.warned = since, set(warned)
