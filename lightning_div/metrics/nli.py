"""NLI Diversity (Stasaski & Hearst, 2022) of one response set from its pairwise NLI predictions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

LABELS = ("entailment", "neutral", "contradiction")
# Value of each predicted class, per variant. "confidence" uses the baseline signs,
# multiplied by the probability of the predicted class.
_WEIGHTS = {
    "baseline": {"contradiction": 1.0, "neutral": 0.0, "entailment": -1.0},
    "neutral": {"contradiction": 1.0, "neutral": 1.0, "entailment": -1.0},
    "confidence": {"contradiction": 1.0, "neutral": 0.0, "entailment": -1.0},
}
VARIANTS = tuple(_WEIGHTS)


def normalise_label(label: object, where: str = "label") -> str:
    """Map ``'CONTRADICTION'``, ``'Contradiction'``, ... to the canonical lower-case names.

    Args:
        label: an NLI class name, in any case.
        where: how the error message names the label.

    Returns:
        ``"entailment"``, ``"neutral"`` or ``"contradiction"``.

    Raises:
        ValueError: anything else.

    Examples:
        >>> normalise_label(" CONTRADICTION")
        'contradiction'
    """
    if isinstance(label, str):
        name = label.strip().lower()
        if name in LABELS:
            return name
    raise ValueError(f"{where} = {label!r} is not one of {LABELS}")


def checked_labels(labels: Any, expected: int, who: str = "scorer.score_pairs") -> list[str]:
    """The labels an NLI scorer returned for ``expected`` pairs, checked and in the canonical names.

    Every reader of a scorer's labels goes through this: a duck-typed scorer that answers
    ``'ENTAILMENT'`` is read as ``'entailment'``; one that answers ``'yes'``, or returns fewer
    or more labels than pairs, is an error naming it, not a silent "nothing is equivalent" or an
    ``IndexError``.

    Args:
        labels: what the scorer returned (one label per pair).
        expected: how many pairs it was given.
        who: the scorer's call, named in the errors.

    Returns:
        ``"entailment"``, ``"neutral"`` or ``"contradiction"``, one per pair.

    Raises:
        ValueError: not one label per pair, or a label that is not an NLI class (named by index).

    Examples:
        >>> checked_labels(("ENTAILMENT", " Neutral"), 2)
        ['entailment', 'neutral']
    """
    if isinstance(labels, (str, bytes)) or not isinstance(labels, Sequence):
        raise ValueError(f"{who} must return a list of labels, one per pair, got {labels!r:.80}")
    if len(labels) != expected:
        raise ValueError(f"{who} returned {len(labels)} labels for {expected} pairs: it must return one per pair")
    return [normalise_label(label, f"{who} label [{i}]") for i, label in enumerate(labels)]


def check_pair_scorer(scorer: Any, name: str = "nli") -> Any:
    """An NLI scorer as given: None, or an object with ``score_pairs(premises, hypotheses, show_progress)``.

    Args:
        scorer: an :class:`~lightning_div.nli.scorer.NLIScorer` or any object with its ``score_pairs``.
        name: the argument, named in the errors.

    Returns:
        ``scorer``, unchanged.

    Raises:
        ValueError: a model name (a string) or anything else without ``score_pairs``.
    """
    if scorer is None or callable(getattr(scorer, "score_pairs", None)):
        return scorer
    if isinstance(scorer, str):
        raise ValueError(
            f"{name}={scorer!r} is a model name, not an NLI scorer: pass {name}=NLIScorer({scorer!r}) "
            "(from lightning_div.nli.scorer)"
        )
    raise ValueError(
        f"{name} must be an NLIScorer or any object with score_pairs(premises, hypotheses, show_progress), "
        f"got {type(scorer).__name__}"
    )


def nli_diversity(
    labels: Sequence[str], variant: str = "baseline", confidences: Sequence[float] | np.ndarray | None = None
) -> float:
    """NLI Diversity of one response set (Stasaski & Hearst, 2022).

    The sum over the n(n-1) ordered pairs of each pair's value. ``baseline``: contradiction
    +1, neutral 0, entailment -1; ``neutral``: contradiction and neutral +1, entailment -1;
    ``confidence``: the predicted class's probability with the baseline sign.

    Args:
        labels: the predicted class of each ordered pair (any case).
        variant: ``"baseline"``, ``"neutral"`` or ``"confidence"``.
        confidences: the predicted class's probability of each pair; required by ``confidence``.

    Returns:
        The diversity, between -n(n-1) and n(n-1); 0.0 for no pairs.

    Raises:
        ValueError: an unknown variant or label, a missing or wrong-length ``confidences``,
            or a confidence outside [0, 1] (named by index).

    Examples:
        The paper's Figure 1: 2 contradictions, 3 neutral, 1 entailment among 3 responses:

        >>> labels = ["contradiction", "contradiction", "neutral", "neutral", "neutral", "entailment"]
        >>> nli_diversity(labels)
        1.0
        >>> nli_diversity(labels, "neutral")
        4.0
        >>> nli_diversity(labels, "confidence", [0.75, 0.75, 0.5, 0.5, 0.5, 0.5])  # 0.75 + 0.75 - 0.5
        1.0
    """
    if variant not in _WEIGHTS:
        raise ValueError(f"variant={variant!r} is unknown; use one of {VARIANTS}")
    names = [normalise_label(lab, f"labels[{i}]") for i, lab in enumerate(labels)]
    weights = np.array([_WEIGHTS[variant][n] for n in names], dtype=np.float64)
    if variant == "confidence":
        if confidences is None:
            raise ValueError("variant='confidence' needs confidences (the predicted class probability of each pair)")
        conf = np.asarray(confidences, dtype=np.float64)
        if conf.shape != (len(names),):
            raise ValueError(f"confidences has {conf.size} values but labels has {len(names)} pairs")
        bad = np.flatnonzero(~np.isfinite(conf) | (conf < 0) | (conf > 1))
        if bad.size:
            raise ValueError(f"confidences[{bad[0]}] = {conf[bad[0]]} is not a probability in [0, 1]")
        weights = weights * conf
    elif confidences is not None and len(confidences) != len(names):
        raise ValueError(f"confidences has {len(confidences)} values but labels has {len(names)} pairs")
    return float(weights.sum())
