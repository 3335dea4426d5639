"""The report's Summary section: the run's verdict, then each headline number's last value, as ``print_summary``.

The verdict is :func:`lightning_div.verdict.verdict` of the run's scalars (its rows by step, or by
epoch in a Lightning run) with the alert records the callbacks wrote (``lightning_div/alerts/*.json``:
the reasons in words that otherwise went to stderr only); the table holds
:func:`lightning_div.summary.measurements` of the last values: the same keys, order, units and notes
for a Lightning, a Hugging Face and a TRL run.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning_div.summary import empty_shares, measurements, mostly_empty
from lightning_div.verdict import Row, verdict

Series = dict[str, list[tuple[float, float, float]]]

#: What the page calls each state (the colour of its box): an alert is red, mostly empty replies amber.
_TONE = {"healthy": "good", "no alert measured": "plain", "mostly empty replies": "warn"}


def _logged_name(key: str) -> str:
    """``eval/sem_ent`` (as TensorBoard shows a Hugging Face evaluation) -> ``eval_sem_ent``, as it was logged."""
    return "eval_" + key[len("eval/") :] if key.startswith("eval/") else key


def run_rows(series: Series, unit: str) -> list[Row]:
    """The scalars as logged rows, oldest first: one row per epoch (``unit="epoch"``) or per step."""
    rows: dict[float, dict[str, float]] = {}
    for key, points in series.items():
        for epoch, step, value in points:
            x = epoch if unit == "epoch" else step
            if math.isfinite(x):
                rows.setdefault(x, {})[key] = value
    return [(x, rows[x]) for x in sorted(rows)]


def read_alerts(paths: list[Path], notes: list[str]) -> list[dict[str, Any]]:
    """The alert records; one that cannot be read is a note."""
    out = []
    for path in paths:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
            notes.append(f"alerts/{path.name} could not be read ({type(err).__name__}: {str(err):.300}); left out")
            continue
        if isinstance(record, Mapping):
            out.append(dict(record))
        else:
            notes.append(f"alerts/{path.name} is not an alert record (a JSON object); left out")
    return out


def summary_section(series: Series, alerts: list[dict[str, Any]], unit: str) -> list[str]:
    """The verdict box and the table of last values (empty when nothing was logged)."""
    if not series:
        return []
    v = verdict(run_rows(series, unit), alerts, unit)
    tone = _TONE.get(v.state, "bad")
    parts = [f'<div id="verdict" class="verdict {tone}"><strong>{html.escape(v.headline())}</strong>']
    items = [f"why: {r}" for r in v.reasons] + ([f"numbers: {'; '.join(v.numbers)}"] if v.numbers else [])
    items += [f"also: {o}" for o in v.others]
    if items:
        parts.append("<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>")
    parts.append("</div>")
    # a Hugging Face Trainer's TensorBoard charts eval_sem_ent as eval/sem_ent: the summary's name again
    last = {_logged_name(k): points[-1] for k, points in series.items() if points}
    found = measurements({k: p[2] for k, p in last.items()})
    if found:
        x = 0 if unit == "epoch" else 1
        # train/loss is the epoch mean Lightning logs as train/loss_epoch
        at = {m.key: (last.get(m.key) or last[f"{m.key}_epoch"])[x] for m in found}
        shares = empty_shares(found)

        def note(key: str, text: str) -> str:  # a lexical metric of mostly empty replies says so, as in the summary
            share = mostly_empty(key, shares)
            return text if share is None else f"[of mostly empty replies: {share:.0%} empty] {text}"

        rows = "".join(
            f'<tr><td>{html.escape(m.key)}</td><td class="num">{html.escape(m.shown())}</td>'
            f'<td class="num">{at[m.key]:g}</td><td class="note">{html.escape(note(m.key, m.note))}</td></tr>'
            for m in found
        )
        parts.append(
            f'<table id="summary"><tr><th>metric</th><th>last value</th><th>{unit}</th><th>what it is</th></tr>'
            f"{rows}</table>"
        )
    return ["".join(parts)]
