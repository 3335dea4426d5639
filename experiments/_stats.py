"""Statistics the experiments share: a mean over seeds and its 95 % t-interval."""

from __future__ import annotations

import math
from typing import Any


def interval(values: list[float]) -> dict[str, float | int | None]:
    """Mean and 95 % t-interval of per-seed values (None for the interval with fewer than 2 seeds)."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return {"mean": mean, "low": None, "high": None, "n": n}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}


def cell(x: dict[str, Any], digits: int = 3) -> str:
    """An :func:`interval` as a table cell: the mean, and the interval in brackets when there is one."""
    if x["low"] is None:
        return f"{x['mean']:.{digits}f}"
    return f"{x['mean']:.{digits}f} [{x['low']:.{digits}f}, {x['high']:.{digits}f}]"
