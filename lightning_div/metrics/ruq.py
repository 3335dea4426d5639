"""RUQ (Khayrallah & Sedoc, 2021): how often the reference beats "I don't know.", and by how much."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, Union, cast

import numpy as np

Scores = Union[Sequence[float], Sequence[Sequence[float]], np.ndarray]
ReferenceChoice = Literal["lowest", "first"]
REFERENCE_CHOICES = ("lowest", "first")


def _finite(value: float, where: str) -> float:
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{where} = {value!r} is not a finite log-likelihood")
    return v


def check_reference(reference: str) -> ReferenceChoice:
    """Check a reference choice.

    Args:
        reference: ``"lowest"`` or ``"first"``.

    Returns:
        ``reference`` itself.

    Raises:
        ValueError: any other value.
    """
    if reference not in REFERENCE_CHOICES:
        raise ValueError(
            f"reference must be 'lowest' (the paper's recommendation) or 'first' (the single "
            f"original reference of the paper's tables), got {reference!r}"
        )
    return cast(ReferenceChoice, reference)


def reference_scores_of(reference_scores: Scores, reference: ReferenceChoice = "lowest") -> list[float]:
    """One score per prompt: the score itself, or the chosen one of a prompt's several references.

    Args:
        reference_scores: per prompt a score, or a list of its references' scores.
        reference: ``"lowest"`` takes the lowest-scoring reference (Khayrallah & Sedoc's
            recommendation: every valid reference should beat "I don't know."); ``"first"``
            takes the first one (the single original reference their tables use).

    Returns:
        One float per prompt.

    Raises:
        ValueError: a non-finite score (also in a reference ``"first"`` does not use), an
            empty list of references (named by index), or an unknown ``reference``.
        TypeError: a string instead of a score.

    Examples:
        >>> reference_scores_of([-1.0, [-0.5, -2.5]])
        [-1.0, -2.5]
        >>> reference_scores_of([-1.0, [-0.5, -2.5]], "first")
        [-1.0, -0.5]
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


def _paired(
    reference_scores: Scores, idk_scores: Sequence[float], reference: ReferenceChoice
) -> tuple[list[float], list[float]]:
    refs = reference_scores_of(reference_scores, reference)
    idk = [_finite(v, f"idk_scores[{i}]") for i, v in enumerate(idk_scores)]
    if len(refs) != len(idk):
        raise ValueError(f"reference_scores has {len(refs)} prompts but idk_scores has {len(idk)}")
    return refs, idk


def preferred_count(
    reference_scores: Scores, idk_scores: Sequence[float], reference: ReferenceChoice = "lowest"
) -> tuple[int, int]:
    """How many prompts prefer their reference over the IDK response, and of how many.

    Args:
        reference_scores: per prompt a score, or a list of its references' scores.
        idk_scores: per prompt the score of the IDK response.
        reference: which of several references counts: ``"lowest"`` (default) or ``"first"``.

    Returns:
        ``(#prompts whose reference scores strictly above the IDK response, #prompts)``.

    Raises:
        ValueError: different numbers of prompts, or a non-finite score (named by index).

    Examples:
        >>> preferred_count([-1.0, -3.0], [-2.0, -2.0])
        (1, 2)
    """
    refs, idk = _paired(reference_scores, idk_scores, reference)
    return sum(r > k for r, k in zip(refs, idk)), len(refs)


def ruq_score(reference_scores: Scores, idk_scores: Sequence[float], reference: ReferenceChoice = "lowest") -> float:
    """RUQ: the percentage of prompts whose reference beats "I don't know." (Khayrallah & Sedoc, 2021).

    RUQ = 100 * #(score(reference) > score(IDK)) / #prompts; a tie is not preferred. Scores
    are length-normalised log-likelihoods (see :func:`lightning_div.model.scoring.response_scores`).

    Args:
        reference_scores: per prompt a score, or a list of its references' scores.
        idk_scores: per prompt the score of the IDK response.
        reference: with several references, ``"lowest"`` (default, the paper's recommendation:
            every valid reference should beat "I don't know.") or ``"first"`` (the single
            original reference the paper's tables use).

    Returns:
        RUQ in [0, 100].

    Raises:
        ValueError: no prompts, different numbers of prompts, a non-finite score, or an
            unknown ``reference``.

    Examples:
        The second prompt's reference scores below IDK, and so does the third's worse reference:

        >>> ruq_score([-1.2, -3.0, [-0.5, -2.5], -1.0], [-2.0, -2.0, -2.0, -2.0])
        50.0
        >>> ruq_score([-1.2, -3.0, [-0.5, -2.5], -1.0], [-2.0, -2.0, -2.0, -2.0], reference="first")
        75.0
    """
    preferred, total = preferred_count(reference_scores, idk_scores, reference)
    if total == 0:
        raise ValueError("ruq_score needs at least one prompt (reference_scores is empty)")
    return 100.0 * preferred / total


def ruq_margin(reference_scores: Scores, idk_scores: Sequence[float], reference: ReferenceChoice = "lowest") -> float:
    """The mean over prompts of score(reference) - score(IDK), in nats per token.

    The continuous companion of :func:`ruq_score`, in the same length-normalised
    log-likelihood units: RUQ counts the prompts where this difference is positive, so it
    can sit at 0 while the margin climbs towards 0 from below.

    Args:
        reference_scores: per prompt a score, or a list of its references' scores.
        idk_scores: per prompt the score of the IDK response.
        reference: which of several references counts, as in :func:`ruq_score`.

    Returns:
        The mean difference (negative: "I don't know." is preferred on average).

    Raises:
        ValueError: no prompts, different numbers of prompts, a non-finite score, or an
            unknown ``reference``.

    Examples:
        (-1.2 + 2) + (-3 + 2) + (-2.5 + 2) + (-1 + 2) over 4 prompts:

        >>> round(ruq_margin([-1.2, -3.0, [-0.5, -2.5], -1.0], [-2.0, -2.0, -2.0, -2.0]), 6)
        0.075
    """
    refs, idk = _paired(reference_scores, idk_scores, reference)
    if not refs:
        raise ValueError("ruq_margin needs at least one prompt (reference_scores is empty)")
    return math.fsum(r - k for r, k in zip(refs, idk)) / len(refs)


def ruq_per_idk(
    candidate_scores: Sequence[Sequence[float]],
    num_references: Sequence[int],
    num_idk: int,
    reference: ReferenceChoice = "lowest",
) -> dict[str, float]:
    """RUQ and its margin against each IDK string, from every prompt's candidate scores.

    The monitors score each prompt's references and then its IDK strings in one pass; this
    splits those scores and applies :func:`ruq_score` / :func:`ruq_margin` per IDK string.

    Args:
        candidate_scores: per prompt, the scores of its references followed by those of the
            ``num_idk`` IDK strings.
        num_references: per prompt, how many of its scores are references.
        num_idk: how many IDK strings follow the references (the first is the headline).
        reference: with several references, ``"lowest"`` or ``"first"`` (see :func:`ruq_score`).

    Returns:
        ``ruq_idk<j>`` and ``ruq_margin_idk<j>`` for j = 1..num_idk, and ``ruq`` / ``ruq_margin``
        (the first IDK string's).

    Raises:
        ValueError: a prompt whose number of scores is not its references plus ``num_idk``.
    """
    refs: list[list[float]] = []
    idks: list[list[float]] = [[] for _ in range(num_idk)]
    for i, (scores, k) in enumerate(zip(candidate_scores, num_references, strict=True)):
        if len(scores) != k + num_idk:
            raise ValueError(f"prompt {i}: {len(scores)} scores for {k} references and {num_idk} IDK strings")
        refs.append(list(scores[:k]))
        for j in range(num_idk):
            idks[j].append(scores[k + j])
    out: dict[str, float] = {}
    for j, idk in enumerate(idks):
        out[f"ruq_idk{j + 1}"] = ruq_score(refs, idk, reference)
        out[f"ruq_margin_idk{j + 1}"] = ruq_margin(refs, idk, reference)
    if num_idk:
        out["ruq"], out["ruq_margin"] = out["ruq_idk1"], out["ruq_margin_idk1"]
    return out
