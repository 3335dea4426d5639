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
    """One score per prompt: the score itself, or the lowest of a prompt's several references."""
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
    """(#prompts whose reference scores strictly above the IDK response, #prompts)."""
    refs = lowest_reference_scores(reference_scores)
    idk = [_finite(v, f"idk_scores[{i}]") for i, v in enumerate(idk_scores)]
    if len(refs) != len(idk):
        raise ValueError(f"reference_scores has {len(refs)} prompts but idk_scores has {len(idk)}")
    return sum(r > k for r, k in zip(refs, idk)), len(refs)


def ruq_score(reference_scores: Scores, idk_scores: Sequence[float]) -> float:
    """RUQ = 100 * #(reference preferred) / #prompts.

    Scores are length-normalised log-likelihoods (see :func:`lightning_div.scoring.response_scores`).
    With several references per prompt, the lowest-scoring one is used.
    """
    preferred, total = preferred_count(reference_scores, idk_scores)
    if total == 0:
        raise ValueError("ruq_score needs at least one prompt (reference_scores is empty)")
    return 100.0 * preferred / total
