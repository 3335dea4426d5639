"""decTest and conTest (Tevet & Berant, 2021): Spearman's ρ with a bootstrap CI, and OCA.

Undefined is not zero: Spearman's ρ of a constant series is undefined, so it is NaN (as
scipy returns it), with p and the bootstrap CI NaN too and one warning; a bootstrap
resample in which either side is constant has no ρ and is left out of the percentiles
(a warning gives how many). JSON reports write NaN as ``null``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy.stats import rankdata, spearmanr

from lightning_div.meta_eval.set_metrics import mapping_of, metric_name, score_sets
from lightning_div.metrics.sets import SetMetric

#: Numbers as a list or an array (scores, parameters, labels).
Values = Sequence[Any] | np.ndarray

# Bootstrap resamples are ranked in chunks of at most this many values (bounded memory for big tests).
_CHUNK_VALUES = 4_000_000


def _as_values(values: Any, name: str) -> np.ndarray:
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be numbers") from None
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {x.shape}")
    bad = np.flatnonzero(~np.isfinite(x))
    if bad.size:
        raise ValueError(f"{name}[{bad[0]}] = {x[bad[0]]} is not finite")
    return x


def _paired(x: Any, y: Any, x_name: str, y_name: str, minimum: int = 3) -> tuple[np.ndarray, np.ndarray]:
    x, y = _as_values(x, x_name), _as_values(y, y_name)
    if len(x) != len(y):
        raise ValueError(f"{x_name} has {len(x)} values but {y_name} has {len(y)}")
    if len(x) < minimum:
        raise ValueError(f"a rank correlation needs at least {minimum} sets, got {len(x)}")
    return x, y


def spearman(x: Values, y: Values, name: str = "metric") -> tuple[float, float]:
    """Spearman's ρ and its two-sided p-value (scipy); both NaN, with one warning, if either side is constant.

    Args:
        x: the metric's values.
        y: the parameters.
        name: how the warning names the metric.

    Returns:
        ``(rho, p_value)``.

    Examples:
        >>> spearman([1, 2, 3, 4], [10, 20, 30, 40])
        (1.0, 0.0)
    """
    x, y = _paired(x, y, "x", "y")
    for values, which in ((x, name), (y, "the diversity parameter")):
        if np.ptp(values) == 0:
            warnings.warn(
                f"{which} is constant over all {len(x)} sets: Spearman's rho is undefined, "
                "reported as NaN (p-value and bootstrap CI too)",
                stacklevel=2,
            )
            return math.nan, math.nan
    result = spearmanr(x, y)
    return float(result.statistic), float(result.pvalue)


def _spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman's ρ of each row pair (average ranks for ties); NaN where a row is constant (undefined)."""
    rx, ry = rankdata(x, axis=-1), rankdata(y, axis=-1)
    rx -= rx.mean(axis=-1, keepdims=True)
    ry -= ry.mean(axis=-1, keepdims=True)
    den = np.sqrt((rx * rx).sum(axis=-1) * (ry * ry).sum(axis=-1))
    num = (rx * ry).sum(axis=-1)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def bootstrap_spearman_ci(
    x: Values, y: Values, n_boot: int = 1000, seed: int = 0, confidence: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap CI of Spearman's ρ: sets resampled with replacement ``n_boot`` times (seeded).

    (NaN, NaN) when x or y is constant (ρ is undefined; :func:`spearman` warns). A resample
    in which either side happens to be constant has no ρ: it is left out of the percentiles,
    with a warning giving how many were; if none is left, the CI is (NaN, NaN).

    Args:
        x: the metric's values.
        y: the parameters.
        n_boot: resamples.
        seed: the resampling seed.
        confidence: the interval's level.

    Returns:
        ``(low, high)``.
    """
    x, y = _paired(x, y, "x", "y")
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be an integer >= 1, got {n_boot!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    n = len(x)
    idx = np.random.default_rng(seed).integers(0, n, size=(n_boot, n))
    step = max(1, _CHUNK_VALUES // n)
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan, math.nan
    rhos = np.concatenate([_spearman_rows(x[idx[i : i + step]], y[idx[i : i + step]]) for i in range(0, n_boot, step)])
    defined = rhos[np.isfinite(rhos)]
    if len(defined) < len(rhos):
        warnings.warn(
            f"{len(rhos) - len(defined)} of {n_boot} bootstrap resamples have a constant side (rho "
            "undefined) and are left out of the CI",
            stacklevel=2,
        )
    if not len(defined):
        return math.nan, math.nan
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(defined, [alpha, 1.0 - alpha])
    return float(low), float(high)


def check_binary_labels(labels: Values, name: str = "labels") -> np.ndarray:
    """Labels as 0 (low content diversity) / 1 (high); bools, ints or 0.0/1.0 floats; both classes present."""
    y = _as_values(labels, name)
    bad = np.flatnonzero((y != 0) & (y != 1))
    if bad.size:
        raise ValueError(
            f"{name}[{bad[0]}] = {labels[bad[0]]!r}: conTest labels must be 0 (low content diversity) or 1 (high)"
        )
    if y.min() == y.max():
        raise ValueError(f"all {len(y)} {name} are {int(y[0])}: conTest needs sets of both classes")
    return y.astype(np.int64)


def optimal_classification_accuracy(scores: Values, labels: Values) -> dict[str, Any]:
    """OCA: the best accuracy of a single threshold η on the metric (Tevet & Berant, section 6.4).

    The classifier says "high content diversity" (label 1) when score > η, else "low" (0);
    η ranges over every cut between consecutive distinct scores and above the largest
    (everything low). Equal scores fall on the same side: ties cannot be split, so tied
    sets of different classes cost accuracy at every η. An accuracy a < 0.5 is flipped to
    1 − a (the metric ranks the classes backwards: high when score ≤ η); ``flipped`` tells.
    A constant metric gets the trivial classifier's accuracy, max(#high, #low) / n.

    Returns ``oca``, ``threshold`` (midway between the two scores the cut separates; the
    largest score for the everything-one-class cut) and ``flipped``. On equal accuracies
    the lowest threshold wins, unflipped before flipped.

    Args:
        scores: the metric's value of each set.
        labels: 1 (high) or 0 (low) per set.

    Returns:
        ``{"oca": ..., "threshold": ..., "flipped": ...}``.

    Raises:
        ValueError: labels other than 0/1, one class only, or lengths that differ.

    Examples:
        The tied 0.2s cannot be split, so one of them is always misclassified:

        >>> optimal_classification_accuracy([0.1, 0.2, 0.2, 0.3], [0, 0, 1, 1])["oca"]
        0.75
        >>> optimal_classification_accuracy([0.1, 0.2, 0.3, 0.4], [0, 0, 1, 1])
        {'oca': 1.0, 'threshold': 0.25, 'flipped': False}
    """
    s = _as_values(scores, "scores")
    y = check_binary_labels(labels)
    if len(s) != len(y):
        raise ValueError(f"scores has {len(s)} values but labels has {len(y)}")
    order = np.argsort(s, kind="stable")
    s, y = s[order], y[order]
    # Cut k puts the sorted scores up to and including the k-th distinct value on the low side.
    ends = np.append(np.flatnonzero(np.diff(s) != 0), len(s) - 1)
    low_correct = np.cumsum(y == 0)[ends]
    high_correct = (y == 1).sum() - np.cumsum(y == 1)[ends]
    accuracy = (low_correct + high_correct) / len(s)
    candidates = np.stack([accuracy, 1.0 - accuracy], axis=1)  # [cut, (unflipped, flipped)]
    # Exact fractions with denominator n: round away float noise so ties compare equal.
    flat = int(np.argmax(np.round(candidates * len(s)).ravel()))
    cut, flipped = divmod(flat, 2)
    threshold = (s[ends[cut]] + s[ends[cut] + 1]) / 2.0 if cut < len(ends) - 1 else s[-1]
    return {"oca": float(candidates[cut, flipped]), "threshold": float(threshold), "flipped": bool(flipped)}


def _correlation(
    scores: np.ndarray, parameter: np.ndarray, name: str, n_boot: int, seed: int, confidence: float
) -> dict[str, Any]:
    rho, p = spearman(scores, parameter, name)
    low, high = bootstrap_spearman_ci(scores, parameter, n_boot, seed, confidence)
    return {
        "metric": name,
        "n_sets": len(scores),
        "spearman": rho,
        "p_value": p,
        "ci_low": low,
        "ci_high": high,
        "confidence": confidence,
        "n_boot": n_boot,
        "seed": seed,
        "scores": scores.tolist(),
    }


def dec_test_from_scores(
    scores: Values,
    parameters: Values,
    name: str = "metric",
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """decTest on metric values already computed: Spearman's ρ with the diversity parameter, p, bootstrap CI.

    Args:
        scores: the metric's value of each set.
        parameters: each set's diversity parameter.
        name: the metric's name in the result.
        n_boot: bootstrap resamples.
        seed: the bootstrap's seed.
        confidence: the interval's level.

    Returns:
        The same dict as :func:`dec_test`.

    Raises:
        ValueError: fewer than 3 sets, lengths that differ, or a constant parameter.
    """
    x, d = _paired(scores, parameters, "scores", "parameters")
    if np.ptp(d) == 0:
        raise ValueError(
            f"all {len(d)} parameters are {d[0]}: decTest needs at least 2 distinct values (e.g. a temperature sweep)"
        )
    return {"test": "dec", **_correlation(x, d, name, n_boot, seed, confidence), "parameters": d.tolist()}


def con_test_from_scores(
    scores: Values,
    labels: Values,
    name: str = "metric",
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """conTest on metric values already computed: OCA, and Spearman's ρ with the labels (with CI).

    Args:
        scores: the metric's value of each set.
        labels: 1 (high content diversity) or 0 (low) per set.
        name: the metric's name in the result.
        n_boot: bootstrap resamples.
        seed: the bootstrap's seed.
        confidence: the interval's level.

    Returns:
        The same dict as :func:`con_test`.

    Raises:
        ValueError: labels other than 0/1 or of one class, fewer than 3 sets, or lengths that differ.
    """
    y = check_binary_labels(labels)
    x, _ = _paired(scores, y, "scores", "labels")
    result = {"test": "con", **_correlation(x, y.astype(np.float64), name, n_boot, seed, confidence)}
    result.update(optimal_classification_accuracy(x, y))
    result.update({"n_high": int(y.sum()), "n_low": int(len(y) - y.sum()), "labels": y.tolist()})
    return result


def dec_test(
    metric: SetMetric,
    sets: Sequence[Sequence[str]],
    parameters: Values,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    show_progress: bool = True,
) -> dict[str, Any]:
    """decTest: Spearman's ρ between ``metric`` of each set and its diversity parameter (e.g. temperature).

    Returns ``spearman``, ``p_value``, ``ci_low`` / ``ci_high`` (percentile bootstrap over sets,
    ``n_boot`` resamples, seeded), ``scores`` and ``parameters``.

    Args:
        metric: a set metric ``list[str] -> float`` (or one with ``score_many``).
        sets: the response sets.
        parameters: each set's diversity parameter; at least 2 distinct values.
        n_boot: bootstrap resamples.
        seed: the bootstrap's seed.
        confidence: the interval's level.
        show_progress: a tqdm bar over the sets.

    Returns:
        A JSON-ready dict (keys listed on the meta-evaluation page).

    Raises:
        ValueError: fewer than 3 sets, lengths that differ, a constant parameter, or a
            non-finite metric value (named by set).
    """
    if len(sets) != len(parameters):
        raise ValueError(f"{len(sets)} sets but {len(parameters)} parameters")
    scores = score_sets(metric, sets, show_progress)
    return dec_test_from_scores(scores, parameters, metric_name(metric), n_boot, seed, confidence)


def con_test(
    metric: SetMetric,
    sets: Sequence[Sequence[str]],
    labels: Values,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    show_progress: bool = True,
) -> dict[str, Any]:
    """conTest: OCA (see :func:`optimal_classification_accuracy`) and Spearman's ρ with the 0/1 labels.

    Args:
        metric: a set metric ``list[str] -> float`` (or one with ``score_many``).
        sets: the response sets.
        labels: 1 (high content diversity) or 0 (low) per set, both present.
        n_boot: bootstrap resamples.
        seed: the bootstrap's seed.
        confidence: the interval's level.
        show_progress: a tqdm bar over the sets.

    Returns:
        A JSON-ready dict: ``oca``, ``threshold``, ``flipped``, ``spearman``, ``p_value``,
        ``ci_low``, ``ci_high``, ... (listed on the meta-evaluation page).

    Raises:
        ValueError: labels other than 0/1 or of one class only (named by index), fewer than
            3 sets, or a non-finite metric value.
    """
    if len(sets) != len(labels):
        raise ValueError(f"{len(sets)} sets but {len(labels)} labels")
    check_binary_labels(labels)  # before the (possibly expensive) scoring
    scores = score_sets(metric, sets, show_progress)
    return con_test_from_scores(scores, labels, metric_name(metric), n_boot, seed, confidence)


def infer_test(parameters: Values) -> str:
    """``"con"`` when every parameter is 0 or 1 (conTest labels), else ``"dec"``.

    Args:
        parameters: the sets' parameters.

    Returns:
        ``"con"`` or ``"dec"``.

    Examples:
        >>> infer_test([0, 1, 1]), infer_test([0.5, 1.0])
        ('con', 'dec')
    """
    return "con" if set(np.asarray(parameters, dtype=np.float64).tolist()) <= {0.0, 1.0} else "dec"


def meta_evaluate(
    metrics: SetMetric | Sequence[SetMetric] | Mapping[str, SetMetric],
    sets: Sequence[Sequence[str]],
    parameters: Values,
    test: str = "auto",
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    show_progress: bool = True,
) -> dict[str, dict[str, Any]]:
    """:func:`dec_test` or :func:`con_test` (``test="auto"``: :func:`infer_test`) of several metrics, by name.

    Args:
        metrics: ``{name: set metric}``, e.g. from :func:`~lightning_div.meta_eval.set_metrics.make_metrics`.
        sets: the response sets.
        parameters: the diversity parameter (decTest) or 0/1 label (conTest) of each set.
        test: ``"auto"``, ``"dec"`` or ``"con"``.
        n_boot: bootstrap resamples.
        seed: the bootstrap's seed.
        confidence: the interval's level.
        show_progress: tqdm bars.

    Returns:
        ``{name: result dict}``.
    """
    if test == "auto":
        test = infer_test(parameters)
    if test not in ("dec", "con"):
        raise ValueError(f"test={test!r} is unknown; use 'dec', 'con' or 'auto'")
    run = dec_test if test == "dec" else con_test
    return {
        name: {**run(m, sets, parameters, n_boot, seed, confidence, show_progress), "metric": name}
        for name, m in mapping_of(metrics).items()
    }
