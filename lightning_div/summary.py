"""What the monitors measured, as a short ordered table with units: ``print_summary(trainer)``.

A Lightning run leaves its last values in ``trainer.callback_metrics``: an unordered dict that
repeats the loss (``train/loss``, ``_step``, ``_epoch``), lists every per-IDK variant of RUQ and gives
no units. :func:`summary` keeps the headline numbers (:data:`lightning_div.keys.SUMMARY_KEYS`, the
losses, the callbacks' own time), in that order, each with its unit: RUQ is a percentage, Sem-Ent and
the losses are in nats, the cluster distance in bits. ``lightning-div fit`` prints the same numbers
at the end of a run.

A Hugging Face ``Trainer``'s evaluation metrics (``eval_sem_ent`` ...) are summarised in the same order,
and a GRPO / RLOO run's group diversity (:class:`~lightning_div.integrations.trl.GroupDiversityMonitor`'s
``diversity/*`` keys) is summarised too: pass the Hugging Face / TRL trainer (its
``state.log_history`` is read, the last value of each key) or a row of it.

The table opens with the run's verdict (:mod:`lightning_div.verdict`: healthy, or which alert since
when and why), the same for every front end; the lexical metrics of mostly empty replies are marked.

Only the standard library, :mod:`lightning_div.keys` and :mod:`lightning_div.verdict`: it imports neither torch nor Lightning, and
takes a trainer (anything with ``callback_metrics``, or a Hugging Face trainer's ``state.log_history``)
or a plain mapping of names to numbers.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from lightning_div._internal.deprecation import moved_names
from lightning_div.keys import (
    EMPTY_SHARE,
    LEXICAL_PATTERN,
    MOSTLY_EMPTY,
    SUMMARY_KEYS,
    TRAIN_LOSS,
    TRAIN_NEGATIVE_LOSS,
    VAL_LOSS,
)
from lightning_div.verdict import Row, Verdict, verdict, verdict_lines

__all__ = ["SummaryLine", "empty_shares", "measurements", "mostly_empty", "print_summary", "run_verdict", "summary"]

#: The unit of each metric, by its name after the split (``val/ruq`` -> ``ruq``); "" for a share (0 to 1).
UNITS: dict[str, str] = {
    "loss": "nats/token",
    "negative_loss": "nats/token",
    "sem_ent": "nats",
    "sem_ent_gold": "nats",
    "ent_4": "nats",
    "cluster_js": "bits",
    "ruq": "%",
    "ruq_margin": "nats/token",
    "head_clusters": "clusters",
    "group_sem_ent": "nats",
    "group_clusters": "clusters",
    "runtime": "s",
    "reference_nll": "nats",
    "effective_sample_size": "examples",
}
#: What a number means, where its name does not say it.
NOTES: dict[str, str] = {
    "sem_ent": "entropy of the generated responses' clusters",
    "sem_ent_gold": "the same for the gold responses",
    "distinct_1": "share of distinct 1-grams",
    "distinct_2": "share of distinct 2-grams",
    "distinct_3": "share of distinct 3-grams",
    "avg_distinct": "mean of distinct-1 to distinct-5 (not of the lines above)",
    EMPTY_SHARE: f"share of empty replies (from {MOSTLY_EMPTY:.0%} on, the lexical metrics are marked)",
    "cluster_js": "0 = the gold's spread over clusters, 1 = disjoint",
    "top_cluster_share": "share of responses in the largest cluster",
    "ruq": 'prompts whose reference beats "I don\'t know."',
    "ruq_margin": "reference minus IDK log-likelihood",
    "ruq_alert": "1 = RUQ fell (warn_below / warn_drop)",
    "head_share": "share of generated responses in the head clusters",
    "group_sem_ent": "entropy of each group's clusters, averaged over groups",
    "group_clusters": "distinct clusters per group, averaged",
    "collapsed_groups": "share of groups whose completions are all in one cluster",
    "group_distinct_2": "distinct 2-grams within each group, averaged",
    "group_top_word_share": "the most frequent word's share of a group's words, averaged over groups",
    "length_cut_share": "share of completions cut at the length limit",
    "reference_nll": "mean NLL of the completions under the reference model",
    "collapse_alert": "1 = group Sem-Ent fell against its start (warn_drop / warn_below)",
    "breakdown_alert": "1 = the text broke down (breakdown_top_word / _cut_rise / _nll_rise)",
}

_SECTIONS = ("val", "train", "dress", "timing")
_ORDER: tuple[str, ...] = (VAL_LOSS, TRAIN_LOSS, TRAIN_NEGATIVE_LOSS) + tuple(k for k in SUMMARY_KEYS if k != VAL_LOSS)
#: What GroupDiversityMonitor logs at a GRPO / RLOO step (``diversity/<metric>``; with a name
#: ``diversity/<name>/<metric>``), in summary order.
_GROUP = "diversity"
_GROUP_ORDER: tuple[str, ...] = (
    "group_sem_ent",
    "group_clusters",
    "collapsed_groups",
    "collapse_alert",
    "breakdown_alert",
    "reference_nll",
    "length_cut_share",
    "group_top_word_share",
    "group_distinct_2",
    "sem_ent",
    EMPTY_SHARE,
    "distinct_1",
    "distinct_2",
    "distinct_3",
    "avg_distinct",
    "ead",
    "runtime",
)
#: ``Measurement`` (0.2) is :class:`SummaryLine`, importable for one release with a ``DeprecationWarning``.
__getattr__ = moved_names(__name__, {"Measurement": ("lightning_div.summary", "SummaryLine")})


#: What a Hugging Face evaluation logs (``eval_<metric>``), in summary order: the Lightning order's metrics.
_EVAL = "eval_"
_EVAL_ORDER: tuple[str, ...] = tuple(k.split("/", 1)[1] for k in _ORDER if k.startswith("val/"))


@dataclass(frozen=True)
class SummaryLine:
    """One line of the summary (``Measurement`` in 0.2: the name of :mod:`lightning_div.measure.errors`' result too).

    Attributes:
        key: the logged name (``val/sem_ent``; ``<name>/val/sem_ent`` for a callback with a ``name``).
        value: its last value.
        unit: what the value is measured in (``"%"`` for RUQ, ``"s"`` for a callback's time, ``"nats"``
            for Sem-Ent; ``""`` for a share between 0 and 1).
        note: what the number means, where its name does not say it (``""`` if it does).
    """

    key: str
    value: float
    unit: str
    note: str = ""

    def shown(self) -> str:
        """The value as printed with its unit: RUQ to 0.1 %, times to 0.1 s (under 0.1 s: 2 digits), the rest
        to 4 decimals."""
        if not math.isfinite(self.value):
            return f"{self.value} {self.unit}".rstrip()
        if self.unit == "s" and 0 < abs(self.value) < 0.1:  # 0.028 s is not "0.0 s"
            return f"{self.value:.2g} s"
        if self.unit in ("%", "s"):
            return f"{self.value:.1f} {self.unit}"
        if self.unit in ("clusters", "examples") and self.value == int(self.value):
            return f"{int(self.value)} {self.unit}"
        return f"{self.value:.4f} {self.unit}".rstrip()


def _as_float(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of more than one element
        return None


def _log_history(source: Any) -> dict[str, Any] | None:
    """A Hugging Face / TRL trainer's ``state.log_history`` as one mapping: each key's last logged value."""
    history = getattr(getattr(source, "state", None), "log_history", None)
    if not isinstance(history, list):
        return None
    merged: dict[str, Any] = {}
    for row in history:
        if isinstance(row, Mapping):
            merged.update(row)
    return merged


def _rows(source: Any) -> tuple[list[Row], str]:
    """The logged rows, oldest first, and what their step counts: a Hugging Face / TRL trainer's
    ``state.log_history`` row by row (steps); a Lightning trainer's monitors' histories (a row per
    measured epoch), then its last values; a mapping as one row."""
    history = getattr(getattr(source, "state", None), "log_history", None)
    if (
        not isinstance(source, Mapping)
        and getattr(source, "callback_metrics", None) is None
        and isinstance(history, list)
    ):
        rows: list[Row] = []
        for row in history:
            if isinstance(row, Mapping):
                step = _as_float(row.get("step"))
                values = {
                    k: v for k, v in ((k, _as_float(v)) for k, v in row.items()) if isinstance(k, str) and v is not None
                }
                rows.append((step, values))
        return rows, "step"
    if isinstance(source, Mapping):
        return [(None, _metrics(source))], "epoch"
    # a Lightning trainer: the monitors' own histories (a row per measured epoch), then the last values
    by_epoch: dict[float, dict[str, float]] = {}
    for cb in _callbacks(source):
        history = getattr(cb, "history", None)
        for row in history if isinstance(history, list) else []:
            epoch = _as_float(row.get("epoch")) if isinstance(row, Mapping) else None
            if epoch is not None:
                numbers = {k: _as_float(v) for k, v in row.items() if k != "epoch" and isinstance(k, str)}
                by_epoch.setdefault(epoch, {}).update({k: v for k, v in numbers.items() if v is not None})
    measured: list[Row] = [(e, by_epoch[e]) for e in sorted(by_epoch)]
    return measured + [(_as_float(getattr(source, "current_epoch", None)), _metrics(source))], "epoch"


def _callbacks(source: Any) -> list[Any]:
    """A trainer's callbacks: Lightning's ``callbacks``, a Hugging Face trainer's ``callback_handler.callbacks``."""
    found = getattr(source, "callbacks", None)
    if not isinstance(found, list):
        found = getattr(getattr(source, "callback_handler", None), "callbacks", None)
    return list(found) if isinstance(found, list) else []


def _metrics(source: Any) -> dict[str, float]:
    raw = source if isinstance(source, Mapping) else getattr(source, "callback_metrics", None)
    if not isinstance(raw, Mapping):
        raw = _log_history(source)
    if not isinstance(raw, Mapping):
        raise TypeError(
            f"summary() takes a Lightning Trainer (its callback_metrics), a Hugging Face / TRL trainer (its "
            f"state.log_history) or a mapping of names to numbers, got {type(source).__name__}"
        )
    out = {}
    for key, value in raw.items():
        number = _as_float(value)
        if isinstance(key, str) and number is not None:
            out[key] = number
    return out


def _name(key: str) -> str:
    """The metric's name in a key: ``val/ruq`` -> ``ruq``, ``eval_ruq`` -> ``ruq``, ``eval_my/ruq`` -> ``ruq``."""
    last = key.split("/")[-1]
    return last[len(_EVAL) :] if "/" not in key and last.startswith(_EVAL) else last


def _unit(key: str) -> str:
    parts = key.split("/")
    if "timing" in parts[:-1]:
        return "s"
    return UNITS.get(_name(key), "")


def _note(key: str) -> str:
    return "" if "timing" in key.split("/")[:-1] else NOTES.get(_name(key), "")


def measurements(source: Any) -> list[SummaryLine]:
    """The headline numbers of a run, in a fixed order, each with its unit.

    The losses first (``val/loss``, then the training loss's epoch mean as ``train/loss``), then the
    monitors' :data:`~lightning_div.keys.SUMMARY_KEYS` in that order, then those of callbacks with a
    ``name`` (``<name>/val/sem_ent``), then each callback's time (``timing/*``, seconds), then a GRPO /
    RLOO run's group diversity (``diversity/group_sem_ent`` ..., ``diversity/<name>/...``); a Hugging Face
    evaluation's ``eval_<metric>`` in the order of the ``val/`` ones. Left out:
    per-step values, the per-IDK variants of RUQ (``val/ruq_idk2``), and names this package does not log.

    Args:
        source: a Lightning ``Trainer`` (its ``callback_metrics`` are read), a Hugging Face / TRL
            trainer (the last value of each key in its ``state.log_history``) or a mapping of names
            to numbers (tensors, floats).

    Returns:
        One :class:`SummaryLine` per logged headline number, in summary order.

    Raises:
        TypeError: ``source`` is neither a trainer nor a mapping.

    Examples:
        >>> [(m.key, m.shown()) for m in measurements({"val/ruq_idk2": 3.0, "val/ruq": 12.5, "val/loss": 4.0})]
        [('val/loss', '4.0000 nats/token'), ('val/ruq', '12.5 %')]
    """
    metrics = _metrics(source)
    # the training loss logged per step and per epoch: its epoch mean under the plain name
    for loss in (TRAIN_LOSS, TRAIN_NEGATIVE_LOSS):
        if f"{loss}_epoch" in metrics:
            metrics[loss] = metrics[f"{loss}_epoch"]
    named = sorted(
        {k.split("/", 1)[0] for k in metrics if k.count("/") >= 2 and k.split("/")[1] in _SECTIONS} - set(_SECTIONS)
    )
    keys = [k for k in _ORDER if k in metrics]
    keys += [f"{n}/{k}" for n in named for k in _ORDER if f"{n}/{k}" in metrics]
    keys += sorted(k for k in metrics if k.startswith("timing/") or any(k.startswith(f"{n}/timing/") for n in named))
    # a Hugging Face evaluation's: eval_<metric> in the same order, then each named callback's eval_<name>/<metric>
    keys += [_EVAL + k for k in _EVAL_ORDER if _EVAL + k in metrics]
    evals = sorted({k.split("/")[0] for k in metrics if k.startswith(_EVAL) and k.count("/") == 1})
    keys += [f"{e}/{k}" for e in evals for k in _EVAL_ORDER if f"{e}/{k}" in metrics]
    # a GRPO / RLOO run's group diversity: the unnamed callback's keys, then each named one's
    groups = sorted({k.split("/")[1] for k in metrics if k.startswith(f"{_GROUP}/") and k.count("/") == 2})
    for prefix in (f"{_GROUP}/", *(f"{_GROUP}/{g}/" for g in groups)):
        keys += [prefix + k for k in _GROUP_ORDER if prefix + k in metrics]
    rows = [SummaryLine(k, metrics[k], _unit(k), _note(k)) for k in keys]
    if any(k.startswith(f"{_GROUP}/") or f"/{_GROUP}/" in k for k in metrics):
        # a GRPO / RLOO run's training loss is its policy-gradient objective, not an NLL: no unit to claim
        rows = [
            SummaryLine(r.key, r.value, "", "the trainer's policy loss (not an NLL)")
            if _name(r.key) == "loss" and not r.key.startswith(("val", "test"))
            else r
            for r in rows
        ]
    return rows


def _clusters(source: Any) -> int | None:
    """k of the trainer's unnamed Sem-Ent monitor, when there is exactly one (for the "at most ln k" note)."""
    ks = {
        getattr(getattr(cb, "space", None), "num_clusters", None)
        for cb in getattr(source, "callbacks", None) or []
        if getattr(cb, "kind", None) == "semantic_diversity" and getattr(cb, "name", None) in (None, "")
    }
    ks.discard(None)
    return ks.pop() if len(ks) == 1 and isinstance(next(iter(ks)), int) else None


def run_verdict(source: Any) -> Verdict:
    """The run's verdict (:func:`lightning_div.verdict.verdict`) from a trainer or a mapping: its logged rows
    (a Hugging Face / TRL trainer's log history; a Lightning trainer's monitors' histories and last values)
    and its callbacks' alert records.

    Raises:
        TypeError: ``source`` is neither a trainer nor a mapping.
    """
    rows, unit = _rows(source)
    records = [r for r in (getattr(cb, "alert_record", None) for cb in _callbacks(source)) if isinstance(r, Mapping)]
    return verdict(rows, records, unit)


def empty_shares(found: list[SummaryLine]) -> dict[str, float]:
    """Each front end's share of empty replies, by its keys' prefix (``val/``, ``eval_``, ``diversity/``).

    Args:
        found: :func:`measurements` of a run.
    """
    out = {}
    for m in found:
        head, _, last = m.key.rpartition("/")
        if last == EMPTY_SHARE:
            out[head + "/"] = m.value
        elif m.key.startswith(_EVAL) and m.key.endswith(EMPTY_SHARE) and "/" not in m.key:
            out[_EVAL] = m.value
    return out


def mostly_empty(key: str, shares: dict[str, float]) -> float | None:
    """The share of empty replies behind a lexical metric's key when they are mostly empty (else None): a
    metric to mark as computed on mostly empty text.

    Args:
        key: the metric's key (``val/distinct_2``, ``eval_distinct_2``, ``diversity/distinct_2``).
        shares: :func:`empty_shares` of the run's measurements.
    """
    head, _, last = key.rpartition("/")
    prefix = head + "/" if head else (_EVAL if key.startswith(_EVAL) else "")
    name = last[len(_EVAL) :] if not head and key.startswith(_EVAL) else last
    share = shares.get(prefix)
    if share is None or share < MOSTLY_EMPTY:
        return None
    return share if LEXICAL_PATTERN.match(name) or name == "group_distinct_2" else None


def summary(source: Any, title: str | None = None) -> str:
    """The run's verdict and headline numbers as a short table: one line each, ``key  value  unit``.

    The verdict comes first (:func:`lightning_div.verdict.verdict`: healthy, or the alert that is on,
    since when, why and the numbers that say it), the same for a Lightning, a Hugging Face and a TRL
    run; a lexical metric computed on mostly empty replies is marked as such.

    Args:
        source: a Lightning ``Trainer``, a Hugging Face / TRL trainer or a mapping of names to numbers (see :func:`measurements`).
        title: the first line; default ``"lightning-div: <epochs> epoch(s), <steps> steps"`` for a
            Lightning trainer, ``"lightning-div: <steps> steps"`` for a Hugging Face / TRL one,
            ``"lightning-div"`` for a mapping.

    Returns:
        The table as one string (no trailing newline); a line saying nothing was measured when no
        headline number was logged.

    Raises:
        TypeError: ``source`` is neither a trainer nor a mapping.

    Examples:
        >>> print(summary({"val/sem_ent": 2.1, "val/distinct_2": 0.25, "val/ruq": 8.0, "val/ruq_alert": 0.0}))
        lightning-div
          verdict: healthy (val/ruq_alert off)
            numbers: Sem-Ent 2.1; RUQ 8
          val/sem_ent     2.1000 nats  entropy of the generated responses' clusters
          val/distinct_2  0.2500       share of distinct 2-grams
          val/ruq         8.0 %        prompts whose reference beats "I don't know."
          val/ruq_alert   0.0000       1 = RUQ fell (warn_below / warn_drop)
    """
    found = measurements(source)
    if title is None:
        title = "lightning-div"
        if not isinstance(source, Mapping) and hasattr(source, "current_epoch"):
            title += f": {getattr(source, 'current_epoch', 0)} epoch(s), {getattr(source, 'global_step', 0)} steps"
        elif not isinstance(source, Mapping) and isinstance(
            getattr(getattr(source, "state", None), "global_step", None), int
        ):
            title += f": {source.state.global_step} steps"
    if not found:
        return f"{title}\n  nothing measured yet (no headline metric in callback_metrics)"
    k = _clusters(source)
    shares = empty_shares(found)
    width = max(len(m.key) for m in found)
    value_width = max(len(m.shown()) for m in found)
    lines = [title, *verdict_lines(run_verdict(source))]
    for m in found:
        note = m.note
        if k is not None and m.key in ("val/sem_ent", "val/sem_ent_gold"):
            note += f" (0 to ln {k} = {math.log(k):.2f})"
        share = mostly_empty(m.key, shares)
        if share is not None:
            note = f"[of mostly empty replies: {share:.0%} empty] {note}"
        lines.append(f"  {m.key.ljust(width)}  {m.shown().ljust(value_width)}  {note}".rstrip())
    return "\n".join(lines)


def print_summary(source: Any, title: str | None = None, file: TextIO | None = None) -> None:
    """Print :func:`summary` (to ``file``, default stdout): the last lines of a training script.

    Args:
        source: a Lightning ``Trainer``, a Hugging Face / TRL trainer or a mapping of names to numbers.
        title: the first line (see :func:`summary`).
        file: where to print (default ``sys.stdout``).

    Raises:
        TypeError: ``source`` is neither a trainer nor a mapping.
    """
    print(summary(source, title), file=file or sys.stdout, flush=True)
