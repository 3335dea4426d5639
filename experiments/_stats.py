"""Statistics the experiments share: a mean over seeds and its 95 % t-interval, a share and its Wilson interval."""

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


def detectable_difference(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true mean difference a two-sided paired t-test on ``n`` pairs detects with ``power``.

    With paired differences of standard deviation ``sd``: delta = nc * sd / sqrt(n), where nc is the
    noncentrality at which P(|T| > t_{1-alpha/2, n-1}) = power for T ~ noncentral t(n - 1, nc). Close to
    the normal-theory (t_{1-alpha/2, n-1} + t_{power, n-1}) * sd / sqrt(n) (5 pairs: 3.72 x sd / sqrt(5)).
    """
    from scipy import optimize, stats

    if n < 2 or sd == 0:
        return 0.0
    crit = float(stats.t.ppf(1 - alpha / 2, n - 1))

    def shortfall(nc: float) -> float:
        # the far tail's share is below 1e-6 here; scipy's nct returns NaN for it at large nc, so it counts as 0
        far = float(stats.nct.cdf(-crit, n - 1, nc))
        return float(stats.nct.sf(crit, n - 1, nc)) + (far if math.isfinite(far) else 0.0) - power

    high = 1.0
    while shortfall(high) < 0:  # widen until the power is reached (scipy's nct turns NaN far out: no fixed bound)
        high *= 1.5
    nc = optimize.brentq(shortfall, 0.0, high)
    return nc * sd / math.sqrt(n)


def paired(values: list[float]) -> dict[str, float | int]:
    """Per-seed paired differences: mean, sd, n, the two-sided one-sample t-test's p, the detectable difference."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    if sd <= 1e-12 * max(1.0, abs(mean)):  # every seed the same difference (up to rounding): no spread to test
        sd = 0.0
        p = 1.0 if abs(mean) <= 1e-12 else 0.0
    else:
        p = float(2 * stats.t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))
    return {"mean": mean, "sd": sd, "n": n, "p": p, "detectable": detectable_difference(sd, n)}


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error), in the order given."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted = [0.0] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def wilson(hits: int, n: int) -> dict[str, float | int | None]:
    """A share and its 95 % Wilson interval (None with n = 0)."""
    if n == 0:
        return {"share": None, "low": None, "high": None, "hits": 0, "n": 0}
    z, p = 1.959964, hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return {"share": p, "low": centre - half, "high": centre + half, "hits": hits, "n": n}
