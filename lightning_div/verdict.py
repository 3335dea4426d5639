"""A run's state in one line, the same for every front end: healthy, or which alert since when, and why.

The summary (:func:`lightning_div.summary.print_summary`) and the report (``lightning-div report``)
open with it. It is read from what the run logged, whatever trainer logged it:

* a GRPO / RLOO run's ``diversity/breakdown_alert`` and ``diversity/collapse_alert``
  (:class:`~lightning_div.integrations.trl.GroupDiversityMonitor`), with the numbers that say it:
  group Sem-Ent, the NLL under the reference model, the length-cut share, the top-word share, each
  beside its first logged value;
* RUQ's alert (``val/ruq_alert`` of the Lightning monitor, ``eval_ruq_alert`` of the Hugging Face
  callback), with Sem-Ent and RUQ beside their first values;
* the share of empty replies (``*empty_share``): from :data:`~lightning_div.keys.MOSTLY_EMPTY` on,
  the lexical metrics describe almost nothing.

An alert's reasons in words are the front end's own (its record, ``alerts/<who>.json`` in the run's
files, :func:`alert_record`); without a record the numbers alone are shown.

Only the standard library and :mod:`lightning_div.keys` (the summary and the report import it without torch).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightning_div.keys import EMPTY_SHARE, MOSTLY_EMPTY

__all__ = ["ALERT_KINDS", "Verdict", "alert_record", "next_alert_record", "verdict", "verdict_lines"]

#: The alert keys' last parts, the state each names, most severe first.
ALERT_KINDS: tuple[tuple[str, str], ...] = (
    ("breakdown_alert", "breakdown"),
    ("collapse_alert", "collapse"),
    ("ruq_alert", "RUQ alert"),
)
#: The numbers beside a group alert (GroupDiversityMonitor's), in words, by metric name.
GROUP_SIGNALS: tuple[tuple[str, str], ...] = (
    ("group_sem_ent", "group Sem-Ent"),
    ("reference_nll", "NLL under the reference"),
    ("length_cut_share", "length-cut share"),
    ("group_top_word_share", "top-word share"),
)
#: The numbers beside RUQ's alert, by metric name.
RUQ_SIGNALS: tuple[tuple[str, str], ...] = (("sem_ent", "Sem-Ent"), ("ruq", "RUQ"))
#: The numbers beside DRESS's degeneration guard (``dress/collapse_alert``), by their whole keys.
DRESS_SIGNALS: tuple[tuple[str, str], ...] = (
    ("val/sem_ent", "Sem-Ent"),
    ("val/top_cluster_share", "top-cluster share"),
    ("train/negative_loss", "negative loss"),
)


def _signals_of(prefix: str, name: str) -> tuple[str, Sequence[tuple[str, str]]]:
    """The prefix and the numbers that say an alert: DRESS's guard reads the monitors' keys, not its own."""
    if prefix.endswith("dress/"):
        return "", DRESS_SIGNALS
    return prefix, RUQ_SIGNALS if name == "ruq_alert" else GROUP_SIGNALS


#: One logged row: the step (or epoch) it was logged at (None: unknown) and its values by key.
Row = tuple[float | None, Mapping[str, float]]


def alert_record(
    who: str, kind: str | None, since: int | None, unit: str, reasons: Sequence[str], key: str
) -> dict[str, Any]:
    """What a front end writes about its alert (``alerts/<who>.json``) and keeps as ``alert_record``.

    Args:
        who: the front end's label (its class, and its ``name`` when it has one).
        kind: ``"breakdown"``, ``"collapse"``, ``"RUQ alert"``; None when the alert is off.
        since: the step or epoch from which it is on (None when off).
        unit: ``"step"`` or ``"epoch"``.
        reasons: the alert's reasons in words (the signal, its start, its now, the argument).
        key: the logged 0/1 key of the alert (``diversity/breakdown_alert``, ``val/ruq_alert``).
    """
    return {"who": who, "kind": kind, "since": since, "unit": unit, "reasons": list(reasons), "key": key}


def next_alert_record(
    before: Mapping[str, Any] | None,
    who: str,
    kind: str | None,
    at: int | None,
    unit: str,
    reasons: Sequence[str],
    key: str,
) -> dict[str, Any]:
    """The alert record after one more measurement: ``since`` kept while the same kind stays on.

    Args:
        before: the record so far (None at the first measurement).
        who: the front end's label.
        kind: the kind on now (None: off).
        at: this measurement's step or epoch.
        unit: ``"step"`` or ``"epoch"``.
        reasons: why it is on (empty when off).
        key: the logged 0/1 key of the kind now on.

    Examples:
        >>> first = next_alert_record(None, "X", "breakdown", 9, "step", ["why"], "diversity/breakdown_alert")
        >>> next_alert_record(first, "X", "breakdown", 12, "step", ["why"], "diversity/breakdown_alert")["since"]
        9
        >>> next_alert_record(first, "X", None, 15, "step", [], "")["since"] is None
        True
    """
    if kind is None:
        return alert_record(who, None, None, unit, [], "")
    same = before is not None and before.get("kind") == kind
    return alert_record(who, kind, before.get("since") if same and before else at, unit, reasons, key)


@dataclass
class Verdict:
    """A run's state.

    Attributes:
        state: ``"healthy"``, ``"breakdown"``, ``"collapse"``, ``"RUQ alert"``, ``"mostly empty replies"``,
            or ``"no alert measured"`` (no front end that raises one logged).
        key: the logged key that says it (when healthy: the alert keys that were checked, all off).
        since: the step or epoch from which it holds (None: unknown or healthy).
        unit: ``"step"`` or ``"epoch"``.
        reasons: why, in words.
        numbers: the numbers that say it, in words, each beside its first value.
        others: further alerts that are on at the same time, one line each.
    """

    state: str
    key: str = ""
    since: float | None = None
    unit: str = "step"
    reasons: list[str] = field(default_factory=list)
    numbers: list[str] = field(default_factory=list)
    others: list[str] = field(default_factory=list)

    def headline(self) -> str:
        """The state in one line: ``breakdown since step 9 (diversity/breakdown_alert)``."""
        text = self.state
        if self.since is not None:
            text += f" since {self.unit} {_num(self.since)}"
        if self.state == "healthy":  # healthy by the alerts that were measured, no more: they are named
            return f"{text} ({self.key} off)" if self.key else text
        return f"{text} ({self.key})" if self.key else text


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _prefix_and_name(key: str) -> tuple[str, str]:
    """``diversity/big/breakdown_alert`` -> (``diversity/big/``, ``breakdown_alert``); ``eval_ruq`` -> (``eval_``, ``ruq``)."""
    if "/" in key:
        head, _, last = key.rpartition("/")
        return head + "/", last
    if key.startswith("eval_"):
        return "eval_", key[len("eval_") :]
    return "", key


def _trailing_run(rows: Sequence[Row], key: str) -> tuple[float | None, bool]:
    """(the first step of the last unbroken run of ``key`` = 1, whether ``key`` is 1 at its last value)."""
    seen = [(step, values[key]) for step, values in rows if key in values and math.isfinite(values[key])]
    if not seen or seen[-1][1] < 0.5:
        return None, False
    since = seen[-1][0]
    for step, value in reversed(seen):
        if value < 0.5:
            break
        since = step
    return since, True


def _first_last(rows: Sequence[Row], key: str) -> tuple[float, float] | None:
    seen = [values[key] for _, values in rows if key in values and math.isfinite(values[key])]
    return (seen[0], seen[-1]) if seen else None


def _numbers(rows: Sequence[Row], prefix: str, signals: Sequence[tuple[str, str]]) -> list[str]:
    out = []
    for name, words in signals:
        pair = _first_last(rows, prefix + name)
        if pair is None:
            continue
        first, last = pair
        if len([1 for _, v in rows if prefix + name in v]) > 1:
            out.append(f"{words} {last:.4g} (first {first:.4g})")
        else:
            out.append(f"{words} {last:.4g}")
    return out


def verdict(rows: Sequence[Row], records: Sequence[Mapping[str, Any]] = (), unit: str = "step") -> Verdict:
    """The run's state from its logged rows (oldest first) and the front ends' alert records.

    Args:
        rows: ``(step, values)`` pairs in logging order (a Lightning run's last values: one row).
        records: :func:`alert_record` dicts (the callbacks' own, or read from ``alerts/*.json``).
        unit: what a row's step counts (``"step"``, ``"epoch"``).

    Returns:
        The most severe alert that is on at the last logged value (its start, its reasons, its
        numbers; the other alerts on beside it), else mostly empty replies, else healthy; "no alert
        measured" when no alert key was logged.

    Examples:
        >>> rows = [(1, {"diversity/breakdown_alert": 0.0}), (2, {"diversity/breakdown_alert": 1.0}),
        ...         (3, {"diversity/breakdown_alert": 1.0})]
        >>> verdict(rows).headline()
        'breakdown since step 2 (diversity/breakdown_alert)'
        >>> verdict(rows[:1]).headline()
        'healthy (diversity/breakdown_alert off)'
    """
    keys = list(dict.fromkeys(k for _, values in rows for k in values))
    by_key = {r.get("key"): r for r in records if isinstance(r, Mapping)}
    on: list[Verdict] = []
    measured = False
    for suffix, state in ALERT_KINDS:
        for key in keys:
            prefix, name = _prefix_and_name(key)
            if name != suffix:
                continue
            measured = True
            since, active = _trailing_run(rows, key)
            if not active:
                continue
            record = by_key.get(key) or {}
            where, signals = _signals_of(prefix, name)
            recorded_since = record.get("since")
            if len(rows) == 1:  # the last values only (a Lightning trainer's): since when is not known from them
                since = None
            on.append(
                Verdict(
                    state,
                    key,
                    recorded_since if isinstance(recorded_since, (int, float)) else since,
                    str(record.get("unit", unit)),
                    [str(r) for r in record.get("reasons", []) if record.get("kind") == state],
                    _numbers(rows, where, signals),
                )
            )
    empty = [k for k in keys if _prefix_and_name(k)[1] == EMPTY_SHARE]
    on += _mostly_empty(rows, empty, unit)
    if on:
        first, rest = on[0], on[1:]
        first.others = [v.headline() for v in rest]
        return first
    if not measured and not empty:
        return Verdict("no alert measured")
    checked = [k for k in keys if _prefix_and_name(k)[1] in {suffix for suffix, _ in ALERT_KINDS}]
    healthy = Verdict("healthy", ", ".join(checked))
    for key in keys:
        prefix, name = _prefix_and_name(key)
        if name in ("breakdown_alert", "ruq_alert") or (name == "collapse_alert" and prefix.endswith("dress/")):
            healthy.numbers += _numbers(rows, *_signals_of(prefix, name))
    return healthy


def _mostly_empty(rows: Sequence[Row], empty: Sequence[str], unit: str) -> list[Verdict]:
    """A "mostly empty replies" verdict for each ``empty_share`` key at or above :data:`MOSTLY_EMPTY` now."""
    on: list[Verdict] = []
    for key in empty:
        pair = _first_last(rows, key)
        if pair is not None and pair[1] >= MOSTLY_EMPTY:
            since: float | None = None
            for step, values in reversed(rows):
                if key in values:
                    if values[key] < MOSTLY_EMPTY:
                        break
                    since = step
            since = since if len(rows) > 1 else None
            on.append(
                Verdict(
                    "mostly empty replies",
                    key,
                    since,
                    unit,
                    [
                        f"{pair[1]:.0%} of the replies are empty (from {MOSTLY_EMPTY:.0%} on, the lexical metrics "
                        "describe almost nothing)"
                    ],
                )
            )
    return on


def verdict_lines(v: Verdict, indent: str = "  ") -> list[str]:
    """The verdict as the summary prints it: the headline, then why, the numbers and other alerts, indented."""
    head = f"{indent}verdict: {v.headline()}"
    if v.state == "no alert measured":
        head += " (no collapse, breakdown or RUQ alert is logged, and no empty-reply share)"
    lines = [head]
    lines += [f"{indent}  why: {r}" for r in v.reasons]
    if v.numbers:
        lines.append(f"{indent}  numbers: {'; '.join(v.numbers)}")
    lines += [f"{indent}  also: {o}" for o in v.others]
    return lines
