"""RUQ (Khayrallah & Sedoc, 2021): how often the reference beats "I don't know.", and by how much."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, Union

import numpy as np

Scores = Union[Sequence[float], Sequence[Sequence[float]], np.ndarray]
ReferenceChoice = Literal["lowest", "first"]
REFERENCE_CHOICES = ("lowest", "first")


def _finite(value: float, where: str) -> float:
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{where} = {value!r} is not a finite log-likelihood")
    return v


def check_reference(reference: str) -> str:
    """``reference`` itself after checking it is ``"lowest"`` or ``"first"``."""
    if reference not in REFERENCE_CHOICES:
        raise ValueError(f"reference must be 'lowest' (the paper's recommendation) or 'first' (the single "
                         f"original reference of the paper's tables), got {reference!r}")
    return reference


def reference_scores_of(reference_scores: Scores, reference: ReferenceChoice = "lowest") -> list[float]:
    """One score per prompt: the score itself, or one of a prompt's several references.

    Args:
        reference_scores: per prompt a score, or a list of scores (one per reference).
        reference: ``"lowest"`` takes the lowest-scoring reference (Khayrallah & Sedoc's
            recommendation for multi-reference data); ``"first"`` takes the first one (the
            single original reference their tables use).
    """
    check_reference(reference)
    out = []
    for i, s in enumerate(reference_scores):
        if isinstance(s, (str, bytes)):
            raise TypeError(f"reference_scores[{i}] is a string, expected a number or a list of numbers")
        if np.ndim(s) == 0:
            out.append(_finite(s, f"reference_scores[{i}]"))
        else:
            # every reference is checked, also those "first" does not use: a NaN is a bug upstream
            values = [_finite(v, f"reference_scores[{i}][{j}]") for j, v in enumerate(s)]
            if not values:
                raise ValueError(f"reference_scores[{i}] is an empty list of references")
            out.append(min(values) if reference == "lowest" else values[0])
    return out


def lowest_reference_scores(reference_scores: Scores) -> list[float]:
    """One score per prompt: the score itself, or the lowest of a prompt's several references."""
    return reference_scores_of(reference_scores, "lowest")


def _paired(reference_scores: Scores, idk_scores: Sequence[float],
            reference: ReferenceChoice) -> tuple[list[float], list[float]]:
    refs = reference_scores_of(reference_scores, reference)
    idk = [_finite(v, f"idk_scores[{i}]") for i, v in enumerate(idk_scores)]
    if len(refs) != len(idk):
        raise ValueError(f"reference_scores has {len(refs)} prompts but idk_scores has {len(idk)}")
    return refs, idk


def preferred_count(reference_scores: Scores, idk_scores: Sequence[float],
                    reference: ReferenceChoice = "lowest") -> tuple[int, int]:
    """(#prompts whose reference scores strictly above the IDK response, #prompts)."""
    refs, idk = _paired(reference_scores, idk_scores, reference)
    return sum(r > k for r, k in zip(refs, idk)), len(refs)


def ruq_score(reference_scores: Scores, idk_scores: Sequence[float], reference: ReferenceChoice = "lowest") -> float:
    """RUQ = 100 * #(reference preferred) / #prompts.

    Scores are length-normalised log-likelihoods (see :func:`lightning_div.scoring.response_scores`).
    A tie does not count as preferred.

    Args:
        reference_scores: per prompt the reference's score, or a list of scores of its references.
        idk_scores: per prompt the score of the IDK string.
        reference: which of several references counts: ``"lowest"`` (default) or ``"first"``.
    """
    preferred, total = preferred_count(reference_scores, idk_scores, reference)
    if total == 0:
        raise ValueError("ruq_score needs at least one prompt (reference_scores is empty)")
    return 100.0 * preferred / total


def ruq_margin(reference_scores: Scores, idk_scores: Sequence[float], reference: ReferenceChoice = "lowest") -> float:
    """Mean over prompts of (reference score - IDK score), in length-normalised log-likelihood (nats per token).

    The continuous companion of :func:`ruq_score`: RUQ counts the prompts where this
    difference is positive, so it can sit at 0 while the margin climbs towards 0 from below.
    The reference is chosen per prompt as in :func:`ruq_score`.
    """
    refs, idk = _paired(reference_scores, idk_scores, reference)
    if not refs:
        raise ValueError("ruq_margin needs at least one prompt (reference_scores is empty)")
    return math.fsum(r - k for r, k in zip(refs, idk)) / len(refs)
