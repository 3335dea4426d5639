"""RUQ (Khayrallah & Sedoc, 2021): how often the reference beats "I don't know."."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Union

import numpy as np

Scores = Union[Sequence[float], Sequence[Sequence[float]], np.ndarray]


def _finite(value: float, where: str) -> float:
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{where} = {value!r} is not a finite log-likelihood")
    return v


def lowest_reference_scores(reference_scores: Scores) -> list[float]:
    """One score per prompt: the score itself, or the lowest of a prompt's several references.

    Args:
        reference_scores: per prompt a score, or a list of its references' scores.

    Returns:
        One float per prompt.

    Raises:
        ValueError: a non-finite score or an empty list of references (named by index).
        TypeError: a string instead of a score.

    Examples:
        >>> lowest_reference_scores([-1.0, [-0.5, -2.5]])
        [-1.0, -2.5]
    """
    out = []
    for i, s in enumerate(reference_scores):
        if isinstance(s, (str, bytes)):
            raise TypeError(f"reference_scores[{i}] is a string, expected a number or a list of numbers")
        if np.ndim(s) == 0:
            out.append(_finite(s, f"reference_scores[{i}]"))
        else:
            values = [_finite(v, f"reference_scores[{i}][{j}]") for j, v in enumerate(s)]
            if not values:
                raise ValueError(f"reference_scores[{i}] is an empty list of references")
            out.append(min(values))
    return out


def preferred_count(reference_scores: Scores, idk_scores: Sequence[float]) -> tuple[int, int]:
    """How many prompts prefer their reference over the IDK response, and of how many.

    Args:
        reference_scores: per prompt a score, or a list of its references' scores (the lowest counts).
        idk_scores: per prompt the score of the IDK response.

    Returns:
        ``(#prompts whose reference scores strictly above the IDK response, #prompts)``.

    Raises:
        ValueError: different numbers of prompts, or a non-finite score (named by index).

    Examples:
        >>> preferred_count([-1.0, -3.0], [-2.0, -2.0])
        (1, 2)
    """
    refs = lowest_reference_scores(reference_scores)
    idk = [_finite(v, f"idk_scores[{i}]") for i, v in enumerate(idk_scores)]
    if len(refs) != len(idk):
        raise ValueError(f"reference_scores has {len(refs)} prompts but idk_scores has {len(idk)}")
    return sum(r > k for r, k in zip(refs, idk)), len(refs)


def ruq_score(reference_scores: Scores, idk_scores: Sequence[float]) -> float:
    """RUQ: the percentage of prompts whose reference beats "I don't know." (Khayrallah & Sedoc, 2021).

    RUQ = 100 * #(score(reference) > score(IDK)) / #prompts. Scores are length-normalised
    log-likelihoods (see :func:`lightning_div.scoring.response_scores`). With several
    references per prompt, the lowest-scoring one is used: every valid reference should
    beat "I don't know.".

    Args:
        reference_scores: per prompt a score, or a list of its references' scores.
        idk_scores: per prompt the score of the IDK response.

    Returns:
        RUQ in [0, 100].

    Raises:
        ValueError: no prompts, different numbers of prompts, or a non-finite score.

    Examples:
        The second prompt's reference scores below IDK, and so does the third's worse reference:

        >>> ruq_score([-1.2, -3.0, [-0.5, -2.5], -1.0], [-2.0, -2.0, -2.0, -2.0])
        50.0
    """
    preferred, total = preferred_count(reference_scores, idk_scores)
    if total == 0:
        raise ValueError("ruq_score needs at least one prompt (reference_scores is empty)")
    return 100.0 * preferred / total
