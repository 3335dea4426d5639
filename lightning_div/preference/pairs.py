"""Preference pairs from pools: DivPO's rule (diverse chosen, common rejected) or the standard DPO pair.

**DivPO** (Lanchantin et al., 2025, arXiv 2501.18101), per pool of N responses with quality
scores q and a diversity score d per response (:mod:`lightning_div.preference.criteria`):

1. A quality threshold ``rho`` (the paper's ρ) gives two bands. With ``split="range"`` (default,
   the paper's "within ρ of the highest / lowest reward"): the chosen band is every response with
   ``q >= max q - rho * (max q - min q)``, the rejected band every response with
   ``q <= min q + rho * (max q - min q)``. With ``split="rank"``: the ``ceil(rho * N)`` best and
   worst responses by quality (every response tied with the last one in is in too). A response
   exactly at a threshold is inside its band. Scores so far apart that ``max q - min q``
   overflows (``1e308`` and ``-1e308``) get the same thresholds written as weighted means,
   ``(1 - rho) max q + rho min q``, which stay finite.
2. *Chosen*: the most diverse response of the chosen band.
3. *Rejected*: the least diverse response of the rejected band among those of lower quality
   than the chosen one and with a different text (a pair must prefer something; with
   ``rho > 0.5`` the bands overlap, and this keeps the chosen above the rejected).

**DPO** (``rule="dpo"``): chosen = the best quality, rejected = the worst with a different text.

**Ties**, documented and seeded: among equally diverse candidates the chosen is the one of
higher quality and the rejected the one of lower quality; what is still tied (and, for
``rule="dpo"``, equal quality) goes by a random order of the pool drawn from
``numpy.random.default_rng([seed, pool index])``: the same seed gives the same pairs.

**Skipped pools**, counted and warned about, never dropped silently: a pool whose responses all
have the same quality (no preference to learn), or whose lower-quality responses all repeat the
chosen text. :attr:`PairSelection.skipped` names each with its reason.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, Union

import numpy as np
from typing_extensions import Unpack

from lightning_div.preference.criteria import Criterion, diversity_scores
from lightning_div.preference.pools import Pool, Prompt, as_pool, check_one_form, check_quality

__all__ = [
    "RULES",
    "SPLITS",
    "PairOptions",
    "PairSelection",
    "PreferencePair",
    "diverse_preference_pairs",
    "quality_bands",
    "select_preference_pairs",
]

RULES = ("divpo", "dpo")
"""The pair rules: DivPO's and the standard DPO pair (best vs worst quality)."""
SPLITS = ("range", "rank")
"""How ``rho`` cuts a pool's quality: a share of its range of scores, or of its responses by rank."""
Rule = Literal["divpo", "dpo"]
Split = Literal["range", "rank"]
#: Quality: a TRL-style reward function ``f(prompts=..., completions=...) -> list[float]`` over all
#: the pools' responses at once, or one list of scores per pool.
Quality = Union[Callable[..., Sequence[float]], Sequence[Sequence[float]]]

SAME_QUALITY = "every response has the same quality"
NOTHING_BELOW = "no response of lower quality differs from the chosen one"


@dataclass(frozen=True)
class PreferencePair:
    """One pair and why: which responses of which pool, with their quality and diversity.

    Args:
        pool: the pool's index.
        prompt: the pool's prompt.
        chosen: the chosen response.
        rejected: the rejected response.
        chosen_index: the chosen response's index in its pool.
        rejected_index: the rejected response's index.
        chosen_quality: its quality.
        rejected_quality: the rejected one's quality.
        chosen_diversity: its diversity (None under ``rule="dpo"``).
        rejected_diversity: the rejected one's diversity (None under ``rule="dpo"``).
    """

    pool: int
    prompt: Prompt
    chosen: str
    rejected: str
    chosen_index: int
    rejected_index: int
    chosen_quality: float
    rejected_quality: float
    chosen_diversity: float | None = None
    rejected_diversity: float | None = None

    def record(self) -> dict[str, Any]:
        """``prompt`` / ``chosen`` / ``rejected`` as TRL's ``DPOTrainer`` reads them.

        Text for a text prompt; for a prompt of chat messages the conversational form (each
        reply one assistant message).
        """
        if isinstance(self.prompt, str):
            return {"prompt": self.prompt, "chosen": self.chosen, "rejected": self.rejected}
        return {
            "prompt": [dict(m) for m in self.prompt],
            "chosen": [{"role": "assistant", "content": self.chosen}],
            "rejected": [{"role": "assistant", "content": self.rejected}],
        }


@dataclass
class PairSelection:
    """The pairs of a set of pools, the pools skipped (index -> reason) and the settings used.

    ``diversity`` holds every pool's diversity score per response (under ``rule="divpo"``; empty under
    ``"dpo"``): the rarity of each reply, not only of the two chosen.
    """

    pairs: list[PreferencePair]
    skipped: dict[int, str] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    diversity: dict[int, list[float]] = field(default_factory=dict)

    @property
    def stats(self) -> dict[str, Any]:
        """Pools, pairs, skipped pools and the count of each reason."""
        return {
            "pools": len(self.pairs) + len(self.skipped),
            "pairs": len(self.pairs),
            "skipped": len(self.skipped),
            "skipped_by_reason": dict(Counter(self.skipped.values())),
        }

    def records(self) -> list[dict[str, Any]]:
        """One ``{"prompt", "chosen", "rejected"}`` per pair (:meth:`PreferencePair.record`)."""
        return [p.record() for p in self.pairs]

    def dataset(self) -> Any:
        """The pairs as a ``datasets.Dataset`` with the columns ``prompt``, ``chosen``, ``rejected``."""
        from datasets import Dataset

        if not self.pairs:
            return Dataset.from_dict({"prompt": [], "chosen": [], "rejected": []})
        return Dataset.from_list(self.records())


def _check_rho(rho: float) -> float:
    if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not 0.0 < float(rho) < 1.0:
        raise ValueError(f"rho (the quality threshold) must be a number in (0, 1), got {rho!r}")
    return float(rho)


def quality_bands(
    quality: Sequence[float] | np.ndarray, rho: float, split: Split = "range"
) -> tuple[np.ndarray, np.ndarray]:
    """The chosen and rejected bands of one pool: two boolean masks (a response at a threshold is inside).

    Args:
        quality: the pool's scores.
        rho: the threshold, in (0, 1).
        split: ``"range"`` (a share of the range of scores) or ``"rank"`` (a share of the responses).

    Returns:
        ``(chosen, rejected)`` masks.

    Raises:
        ValueError: ``rho`` outside (0, 1) or an unknown ``split``.

    Examples:
        Scores 0, 1, 2, 3, 4 with rho = 0.25: chosen from 4 - 0.25 * 4 = 3, rejected up to 1:

        >>> [m.astype(int).tolist() for m in quality_bands([0, 1, 2, 3, 4], 0.25)]
        [[0, 0, 0, 1, 1], [1, 1, 0, 0, 0]]
        >>> [m.astype(int).tolist() for m in quality_bands([0, 1, 2, 3, 4], 0.25, split="rank")]
        [[0, 0, 0, 1, 1], [1, 1, 0, 0, 0]]
    """
    rho = _check_rho(rho)
    q = np.asarray(quality, dtype=np.float64)
    if split == "range":
        lo, hi = float(q.min()), float(q.max())
        span = hi - lo
        if math.isfinite(span):
            return q >= hi - rho * span, q <= lo + rho * span
        # the span of finite scores overflows (1e308 - -1e308 = inf; every reply was then in both bands): the
        # same thresholds as weighted means of the ends, which stay finite, kept within [lo, hi]
        top = min(max((1 - rho) * hi + rho * lo, lo), hi)
        bottom = min(max(rho * hi + (1 - rho) * lo, lo), hi)
        return q >= top, q <= bottom
    if split == "rank":
        k = max(1, math.ceil(round(rho * len(q), 9)))
        ordered = np.sort(q)
        return q >= ordered[-k], q <= ordered[k - 1]
    raise ValueError(f"split must be one of {SPLITS}, got {split!r}")


def _pick(candidates: np.ndarray, keys: list[np.ndarray]) -> int:
    """The candidate smallest by ``keys`` (the first key first)."""
    order = np.lexsort([k[candidates] for k in reversed(keys)])
    return int(candidates[order[0]])


def _select(
    responses: list[str],
    q: np.ndarray,
    d: np.ndarray | None,
    rule: Rule,
    rho: float,
    split: Split,
    tiebreak: np.ndarray,
) -> tuple[int, int] | str:
    if q.max() == q.min():
        return SAME_QUALITY
    everyone = np.arange(len(q))
    if rule == "dpo":
        chosen = _pick(everyone, [-q, tiebreak])
        below = everyone[(q < q[chosen]) & np.array([r != responses[chosen] for r in responses])]
        if below.size == 0:
            return NOTHING_BELOW
        return chosen, _pick(below, [q, tiebreak])
    assert d is not None
    up, down = quality_bands(q, rho, split)
    chosen = _pick(everyone[up], [-d, -q, tiebreak])
    below = everyone[down & (q < q[chosen]) & np.array([r != responses[chosen] for r in responses])]
    if below.size == 0:
        return NOTHING_BELOW
    return chosen, _pick(below, [d, q, tiebreak])


def _qualities(pools: list[Pool], quality: Quality | None) -> list[list[float]]:
    if quality is None:
        missing = [i for i, p in enumerate(pools) if p.quality is None]
        if missing:
            raise ValueError(
                f"pools[{missing[0]}] has no quality scores and no quality= was given: give quality= "
                "(a reward function or one list of scores per pool) or pools with a 'quality' list"
            )
        return [list(p.quality or []) for p in pools]
    if callable(quality):
        prompts = [p.prompt for p in pools for _ in p.responses]
        completions: list[Any] = [
            r if isinstance(p.prompt, str) else [{"role": "assistant", "content": r}]
            for p in pools
            for r in p.responses
        ]
        flat = list(quality(prompts=prompts, completions=completions))
        if len(flat) != len(completions):
            raise ValueError(
                f"quality= returned {len(flat)} scores for the pools' {len(completions)} responses; give one per response"
            )
        out, at = [], 0
        for i, p in enumerate(pools):
            n = len(p.responses)
            out.append(check_quality(flat[at : at + n], n, f"pools[{i}]"))
            at += n
        return out
    if isinstance(quality, np.ndarray):  # one row per pool
        if quality.ndim != 2:
            raise ValueError(f"quality= as an array must have one row per pool (2-D), got shape {quality.shape}")
        quality = list(quality)
    if isinstance(quality, (str, bytes)) or not isinstance(quality, Sequence):
        raise ValueError(f"quality= must be a reward function or one list of scores per pool, got {quality!r}")
    if len(quality) != len(pools):
        raise ValueError(f"quality= has {len(quality)} score lists for {len(pools)} pools; give one per pool")
    return [check_quality(q, len(p.responses), f"pools[{i}]") for i, (p, q) in enumerate(zip(pools, quality))]


def select_preference_pairs(
    pools: Sequence[Pool | Mapping[str, Any]],
    quality: Quality | None = None,
    *,
    rule: Rule = "divpo",
    criterion: Criterion = "semantic",
    rho: float = 0.5,
    split: Split = "range",
    space: Any = None,
    model: Any = None,
    tokenizer: Any = None,
    seed: int = 0,
) -> PairSelection:
    """One preference pair per pool by DivPO's rule (or the DPO pair), with the why of every pair.

    See the module documentation for the rule, the ties and the skipped pools.

    Args:
        pools: :class:`~lightning_div.preference.pools.Pool` objects or mappings
            (``prompt``, ``responses``, ``quality``); every pool needs at least two responses.
        quality: a reward function called once as ``quality(prompts=[...], completions=[...])``
            with one entry per response of every pool (as TRL calls a reward function:
            completions as text, or as ``[{"role": "assistant", "content": ...}]`` for a prompt
            of chat messages), or one list of scores per pool (a 2-D array: one row per pool);
            None = the pools' own ``quality``.
        rule: ``"divpo"`` or ``"dpo"`` (best vs worst quality; no diversity is computed).
        criterion: the diversity criterion: ``"semantic"`` (default), ``"likelihood"``,
            ``"frequency"`` or a callable (:mod:`lightning_div.preference.criteria`).
        rho: the quality threshold, in (0, 1) (the paper's ρ).
        split: ``"range"`` or ``"rank"`` (:func:`quality_bands`).
        space: the :class:`~lightning_div.semantic.space.SemanticSpace` of ``criterion="semantic"``.
        model: the policy of ``criterion="likelihood"``.
        tokenizer: its tokenizer.
        seed: the seed of the tie-breaking order.

    Returns:
        The :class:`PairSelection`.

    Raises:
        ValueError: a pool of fewer than two responses, quality of the wrong length or not
            finite, ``rho`` outside (0, 1), an unknown rule, split or criterion, or pools whose
            prompts mix text and chat messages (the dataset is in one form).
        TypeError: a ``space`` that is not a semantic space (``space="minilm"``).
    """
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    rho = _check_rho(rho)
    if isinstance(pools, (str, bytes, Mapping)):
        raise ValueError("pools must be a list of pools (read a file with read_pools(path))")
    checked = [as_pool(p, f"pools[{i}]") for i, p in enumerate(pools)]
    check_one_form([p.prompt for p in checked], [f"pools[{i}]" for i in range(len(checked))])
    for i, p in enumerate(checked):
        if len(p.responses) < 2:
            raise ValueError(f"pools[{i}] has {len(p.responses)} response(s); a preference pair needs at least 2")
    qualities = _qualities(checked, quality)
    diversity = None
    if rule == "divpo":
        diversity = diversity_scores(checked, criterion, space=space, model=model, tokenizer=tokenizer)
    pairs: list[PreferencePair] = []
    skipped: dict[int, str] = {}
    for i, p in enumerate(checked):
        q = np.asarray(qualities[i], dtype=np.float64)
        d = None if diversity is None else np.asarray(diversity[i], dtype=np.float64)
        perm = np.random.default_rng([int(seed), i]).permutation(len(q))
        tiebreak = np.empty(len(q), dtype=np.int64)
        tiebreak[perm] = np.arange(len(q))
        picked = _select(p.responses, q, d, rule, rho, split, tiebreak)
        if isinstance(picked, str):
            skipped[i] = picked
            continue
        c, r = picked
        pairs.append(
            PreferencePair(
                pool=i,
                prompt=p.prompt,
                chosen=p.responses[c],
                rejected=p.responses[r],
                chosen_index=c,
                rejected_index=r,
                chosen_quality=float(q[c]),
                rejected_quality=float(q[r]),
                chosen_diversity=None if d is None else float(d[c]),
                rejected_diversity=None if d is None else float(d[r]),
            )
        )
    settings = {
        "rule": rule,
        "criterion": criterion if isinstance(criterion, str) else getattr(criterion, "__name__", "callable"),
        "rho": rho,
        "split": split,
        "seed": int(seed),
    }
    every = {} if diversity is None else {i: [float(v) for v in diversity[i]] for i in range(len(checked))}
    selection = PairSelection(pairs, skipped, settings, every)
    if skipped:
        reasons = "; ".join(f"{n} x {why}" for why, n in selection.stats["skipped_by_reason"].items())
        first = ", ".join(str(i) for i in list(skipped)[:10]) + (", ..." if len(skipped) > 10 else "")
        warnings.warn(
            f"{len(skipped)} of {len(checked)} pools gave no preference pair and were skipped ({reasons}): "
            f"pools {first}",
            UserWarning,
            stacklevel=2,
        )
    return selection


class PairOptions(TypedDict, total=False):
    """The keyword options of :func:`select_preference_pairs`, passed on as they are by :func:`diverse_preference_pairs`.

    Their meaning and defaults are :func:`select_preference_pairs`'s; every key is optional.
    """

    rule: Rule
    criterion: Criterion
    rho: float
    split: Split
    space: Any
    model: Any
    tokenizer: Any
    seed: int


def diverse_preference_pairs(
    pools: Sequence[Pool | Mapping[str, Any]],
    quality: Quality | None = None,
    **options: Unpack[PairOptions],
) -> Any:
    """Preference pairs for TRL's ``DPOTrainer``: a ``datasets.Dataset`` of ``prompt`` / ``chosen`` / ``rejected``.

    :func:`select_preference_pairs` with the same arguments, as a dataset (text columns, or the
    conversational form for prompts of chat messages). Pools that give no pair are skipped with a
    warning; :func:`select_preference_pairs` returns which and why, and each pair's scores.

    Args:
        pools: as :func:`select_preference_pairs`.
        quality: as :func:`select_preference_pairs`.
        **options: :func:`select_preference_pairs`'s keyword arguments (:class:`PairOptions`):
            ``rule``, ``criterion``, ``rho``, ``split``, ``space``, ``model``, ``tokenizer``, ``seed``.

    Returns:
        A ``datasets.Dataset`` with one row per pair.

    Raises:
        ValueError: as :func:`select_preference_pairs`.
        TypeError: a keyword argument :func:`select_preference_pairs` does not take.

    Examples:
        >>> pools = [{"prompt": "Hi!", "responses": ["ok", "ok", "good thanks", "hm"], "quality": [1, 1, 1, 0]}]
        >>> diverse_preference_pairs(pools, criterion="frequency")[0]
        {'prompt': 'Hi!', 'chosen': 'good thanks', 'rejected': 'hm'}
        >>> diverse_preference_pairs(pools, rule="dpo")[0]["rejected"]
        'hm'
    """
    return select_preference_pairs(pools, quality, **options).dataset()
