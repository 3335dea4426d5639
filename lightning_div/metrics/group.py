"""Group diversity: the completions a GRPO/RLOO trainer samples for one prompt, measured as a group.

GRPO and RLOO sample ``G`` completions per prompt (``num_generations``) and lay them out
consecutively: completions ``0 .. G-1`` answer the first prompt, ``G .. 2G-1`` the second, and
so on. Every function here takes the flat list (one entry per completion) and ``G``, cuts it
into those groups and measures each group on its own.

A completion's *class* is any integer label that says which completions mean the same: a
semantic cluster id (:meth:`lightning_div.semantic.space.SemanticSpace.assign`), or a
partition from pairwise equivalence (:func:`partition_pairs`, :func:`partition_by_similarity`:
DARLING's way, Li et al., 2025, arXiv 2509.02534). Class ids are compared within a group only.

Defined values: no completions give 0.0 (the mean over no groups); a group of one has one
class, entropy 0 and is never counted as collapsed (there is nothing to collapse); ``G`` that
does not divide the number of completions is a ``ValueError``, since the groups could not be
told apart.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, Literal, TypeVar

import numpy as np

from lightning_div._internal.text import TokenizerSpec, tokenize_all
from lightning_div.metrics.lexical import distinct_n, entropy_from_counts

__all__ = [
    "DIVERSITY_SCORES",
    "check_floor",
    "check_groups",
    "collapsed_share",
    "group_classes",
    "group_distinct_n",
    "group_diversity_scores",
    "group_semantic_entropy",
    "group_top_word_share",
    "length_cut_share",
    "partition_by_similarity",
    "partition_pairs",
    "shift_by_group_minimum",
    "split_groups",
]

T = TypeVar("T")

#: The per-completion diversity scores of :func:`group_diversity_scores`.
DIVERSITY_SCORES = ("rarity", "classes")
DiversityScore = Literal["rarity", "classes"]


def check_groups(num_items: int, num_generations: int, what: str = "completions") -> int:
    """The number of groups of ``num_generations`` consecutive items in ``num_items``.

    Args:
        num_items: how many completions.
        num_generations: G, completions per prompt (an integer >= 1).
        what: names the items in the error.

    Returns:
        ``num_items // num_generations``.

    Raises:
        ValueError: G is not an integer >= 1, or does not divide ``num_items``.

    Examples:
        >>> check_groups(8, 4)
        2
        >>> check_groups(6, 4)
        Traceback (most recent call last):
        ...
        ValueError: 6 completions cannot be cut into groups of num_generations=4 (6 is not a multiple of 4)
    """
    if isinstance(num_generations, bool) or not isinstance(num_generations, (int, np.integer)) or num_generations < 1:
        raise ValueError(f"num_generations must be an integer >= 1, got {num_generations!r}")
    if num_items % num_generations:
        raise ValueError(
            f"{num_items} {what} cannot be cut into groups of num_generations={num_generations} "
            f"({num_items} is not a multiple of {num_generations})"
        )
    return num_items // int(num_generations)


def split_groups(items: Sequence[T], num_generations: int) -> list[list[T]]:
    """``items`` cut into consecutive groups of ``num_generations`` (checked by :func:`check_groups`).

    Examples:
        >>> split_groups(["a", "b", "c", "d"], 2)
        [['a', 'b'], ['c', 'd']]
    """
    items = list(items)
    n = check_groups(len(items), num_generations)
    g = int(num_generations)
    return [items[i * g : (i + 1) * g] for i in range(n)]


def _labels(labels: Sequence[int] | np.ndarray, num_generations: int) -> np.ndarray:
    """Integer class labels as a [groups, G] array (checked)."""
    ids = np.asarray(labels)
    if ids.size == 0:
        check_groups(0, num_generations)
        return np.zeros((0, int(num_generations)), dtype=np.int64)
    if ids.ndim != 1:
        raise ValueError(f"labels must be 1-D (one class id per completion), got shape {ids.shape}")
    if not np.issubdtype(ids.dtype, np.integer):
        bad = [i for i, v in enumerate(ids.tolist()) if not (isinstance(v, (int, float)) and float(v).is_integer())]
        if bad:
            raise ValueError(f"labels[{bad[0]}] = {ids[bad[0]].item()!r} is not an integer class id")
        ids = ids.astype(np.int64)
    n = check_groups(ids.size, num_generations)
    return ids.reshape(n, int(num_generations))


def group_classes(labels: Sequence[int] | np.ndarray, num_generations: int) -> float:
    """Mean number of distinct classes per group (between 1 and G; 0.0 for no completions).

    Args:
        labels: one class id per completion (e.g. cluster ids), groups consecutive.
        num_generations: G.

    Returns:
        The mean over groups.

    Raises:
        ValueError: G does not divide the number of completions, or a label that is not an integer.

    Examples:
        Two groups of 4: classes {0, 1} and {5}:

        >>> group_classes([0, 0, 1, 1, 5, 5, 5, 5], 4)
        1.5
    """
    groups = _labels(labels, num_generations)
    if len(groups) == 0:
        return 0.0
    return float(np.mean([len(np.unique(g)) for g in groups]))


def group_semantic_entropy(labels: Sequence[int] | np.ndarray, num_generations: int) -> float:
    """Group Sem-Ent: the mean over groups of the entropy (nats) of the group's class distribution.

    For one group, -sum_c p_c ln p_c with p_c the share of its G completions in class c:
    0 when they all fall in one class, ln G when every completion has a class of its own.

    Args:
        labels: one class id per completion, groups consecutive.
        num_generations: G.

    Returns:
        The mean over groups, in [0, ln G]; 0.0 for no completions.

    Raises:
        ValueError: as :func:`group_classes`.

    Examples:
        A group split 2 + 2 (ln 2) and a collapsed group (0):

        >>> round(group_semantic_entropy([0, 0, 1, 1, 5, 5, 5, 5], 4), 6)  # ln(2) / 2
        0.346574
    """
    groups = _labels(labels, num_generations)
    if len(groups) == 0:
        return 0.0
    return float(np.mean([entropy_from_counts(np.unique(g, return_counts=True)[1]) for g in groups]))


def collapsed_share(labels: Sequence[int] | np.ndarray, num_generations: int) -> float:
    """Share of the groups whose completions all fall in one class.

    A group of one (G = 1) is never collapsed: one completion cannot be less diverse than itself.

    Args:
        labels: one class id per completion, groups consecutive.
        num_generations: G.

    Returns:
        In [0, 1]; 0.0 for no completions or G = 1.

    Raises:
        ValueError: as :func:`group_classes`.

    Examples:
        >>> collapsed_share([0, 0, 1, 1, 5, 5, 5, 5], 4)
        0.5
        >>> collapsed_share([3, 3], 1)
        0.0
    """
    groups = _labels(labels, num_generations)
    if len(groups) == 0 or num_generations < 2:
        return 0.0
    return float(np.mean([len(np.unique(g)) == 1 for g in groups]))


def group_distinct_n(
    texts: Sequence[str],
    num_generations: int,
    n: int = 2,
    tokenizer: TokenizerSpec = "13a",
    lowercase: bool | None = None,
) -> float:
    """Within-group distinct-n: :func:`~lightning_div.metrics.distinct_n` of each group, averaged over groups.

    Unlike distinct-n over all the step's completions, repeats *across* prompts do not count:
    only whether a prompt's G completions repeat one another.

    Args:
        texts: the completions, groups consecutive.
        num_generations: G.
        n: the n-gram order.
        tokenizer: as :func:`~lightning_div.metrics.distinct_n`.
        lowercase: as :func:`~lightning_div.metrics.distinct_n`.

    Returns:
        The mean over groups, in [0, 1]; 0.0 for no completions (and for a group without an n-gram).

    Raises:
        ValueError: G does not divide the number of completions.
        TypeError: a completion that is not a string.

    Examples:
        Group 1 repeats one bigram (1 distinct of 2), group 2 has 2 distinct of 2:

        >>> group_distinct_n(["a b", "a b", "a b", "c d"], 2)
        0.75
    """
    groups = split_groups(texts, num_generations)
    if not groups:
        return 0.0
    return float(np.mean([distinct_n(g, n, tokenizer, lowercase) for g in groups]))


def group_top_word_share(
    texts: Sequence[str],
    num_generations: int,
    tokenizer: TokenizerSpec = "13a",
    lowercase: bool = True,
    min_words: int = 4,
) -> float:
    """The most frequent word's share of a group's words, averaged over groups: a degeneration signal.

    A group's completions of at least ``min_words`` words are pooled; a word is a token with a
    letter or digit in it (punctuation does not count). Ordinary replies keep the share low
    (about 1/8 for distinct 8-word sentences, and the same when the group repeats one sentence:
    a collapse to one fluent answer does not raise it); text that falls apart into one word
    repeated ("you your you your ...", "what what what ...") pushes it towards 1. Shorter
    completions are left out: a reply of one to three words ("Yes.", "I love it") has a high
    share without repeating anything.

    Args:
        texts: the completions, groups consecutive.
        num_generations: G.
        tokenizer: as :func:`~lightning_div.metrics.distinct_n`.
        lowercase: count "What" and "what" as one word (default True).
        min_words: the fewest words a completion needs to count.

    Returns:
        The mean over the groups with a completion that counts, in [0, 1]; 0.0 when none has one
        (and for no completions).

    Raises:
        ValueError: G does not divide the number of completions.
        TypeError: a completion that is not a string.

    Examples:
        Group 1: "you" is 6 of its 8 words; group 2: 8 distinct words; "Yes." is too short to count:

        >>> group_top_word_share(["you your you your", "You you you you!", "we could go there", "I think so too"], 2)
        0.4375
        >>> group_top_word_share(["Yes.", "Yes.", "Yes.", "Yes."], 4)
        0.0
    """
    groups = split_groups(tokenize_all(texts, tokenizer, lowercase, "completions"), num_generations)
    shares = []
    for group in groups:
        words = []
        for tokens in group:
            kept = [w for w in tokens if any(ch.isalnum() for ch in w)]
            if len(kept) >= min_words:
                words += kept
        if words:
            _, counts = np.unique(words, return_counts=True)
            shares.append(float(counts.max()) / len(words))
    return float(np.mean(shares)) if shares else 0.0


def length_cut_share(lengths: Sequence[int] | np.ndarray, max_length: int) -> float:
    """The share of completions cut at the length limit: ``length >= max_length`` tokens.

    Text that falls apart often never ends: every completion runs to the limit.

    Args:
        lengths: each completion's length in tokens.
        max_length: the generation's limit (TRL's ``max_completion_length``), an integer >= 1.

    Returns:
        In [0, 1]; 0.0 for no completions.

    Raises:
        ValueError: a ``max_length`` that is not an integer >= 1, or a negative or non-integer length.

    Examples:
        >>> length_cut_share([16, 3, 16, 9], 16)
        0.5
    """
    if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)) or max_length < 1:
        raise ValueError(f"max_length must be an integer >= 1, got {max_length!r}")
    values = np.asarray(lengths)
    if values.size == 0:
        return 0.0
    if values.ndim != 1 or not np.issubdtype(values.dtype, np.integer) or (values < 0).any():
        raise ValueError(f"lengths must be integers >= 0, one per completion, got {list(lengths)[:5]!r}")
    return float(np.mean(values >= max_length))


def group_diversity_scores(
    labels: Sequence[int] | np.ndarray, num_generations: int, score: DiversityScore = "rarity", floor: float = 0.0
) -> list[float]:
    """A diversity score per completion, from the classes of its group (DARLING's, by default).

    * ``"rarity"`` (default, DARLING's per-response diversity): the share of the *other*
      G - 1 completions of the group that fall in another class,
      ``(G - size of my class) / (G - 1)``: 1 for a completion no other one repeats, 0 for
      a group that all means the same. Completions of one group get different scores, so it
      tells GRPO's advantage *which* completion to prefer.
    * ``"classes"``: the group's normalised number of distinct classes, ``classes / G``, the
      same for every completion of the group (between 1/G and 1): it moves a group's reward
      level, which GRPO's per-group advantage then removes, so it mostly matters multiplied
      into a quality reward.

    A group of one gets 1.0 under either score (nothing repeats it), so that multiplying it
    into a quality reward leaves the quality unchanged.

    ``floor`` raises every score below it to it: DARLING floors its diversity at 0.1
    (``max(d, 0.1)``), so that a collapsed group, multiplied into a quality reward, keeps a
    tenth of its quality signal instead of none.

    Args:
        labels: one class id per completion, groups consecutive.
        num_generations: G.
        score: ``"rarity"`` or ``"classes"``.
        floor: the least score, in [0, 1] (0: no floor).

    Returns:
        One float in [floor, 1] per completion, in input order.

    Raises:
        ValueError: an unknown ``score``, a ``floor`` outside [0, 1], or as :func:`group_classes`.

    Examples:
        One group of 4 with classes 0, 0, 0, 1: the three alike each have 1 of 3 others that
        differs, the odd one out has 3 of 3:

        >>> [round(s, 4) for s in group_diversity_scores([0, 0, 0, 1], 4)]
        [0.3333, 0.3333, 0.3333, 1.0]
        >>> group_diversity_scores([0, 0, 0, 1], 4, score="classes")
        [0.5, 0.5, 0.5, 0.5]

        A collapsed group under DARLING's floor:

        >>> group_diversity_scores([7, 7, 7, 7], 4, floor=0.1)
        [0.1, 0.1, 0.1, 0.1]
    """
    if score not in DIVERSITY_SCORES:
        raise ValueError(f"score must be one of {DIVERSITY_SCORES}, got {score!r}")
    floor = check_floor(floor)
    groups = _labels(labels, num_generations)
    g = int(num_generations)
    out: list[float] = []
    for group in groups:
        if g == 1:
            out.append(1.0)
            continue
        classes, inverse, counts = np.unique(group, return_inverse=True, return_counts=True)
        if score == "classes":
            out.extend([len(classes) / g] * g)
        else:
            out.extend(float((g - counts[k]) / (g - 1)) for k in inverse.reshape(-1))
    return [max(v, floor) for v in out]


def check_floor(floor: Any, name: str = "floor") -> float:
    """``floor`` as a float, checked: a real number in [0, 1] (not a bool or a string).

    Raises:
        ValueError: anything else, naming ``name``.
    """
    if isinstance(floor, bool) or not isinstance(floor, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number in [0, 1], got {floor!r}")
    value = float(floor)
    if not 0.0 <= value <= 1.0:  # NaN fails this too
        raise ValueError(f"{name} must be a number in [0, 1], got {floor!r}")
    return value


def shift_by_group_minimum(quality: Sequence[float | None], num_generations: int) -> list[float | None]:
    """Each quality minus the least quality of its group (DARLING's ``add_bias``): every group's worst is 0.

    Multiplying a diversity into a raw quality rewards a rarer completion *less* when the quality
    is negative (most reward models' scores can be). Shifted, every quality is >= 0, so a higher
    diversity never lowers a reward; within a group the shift is a constant, so the quality's
    own order is kept. A ``None`` quality (no score for that completion) takes no part in the
    minimum and stays ``None``; a group whose qualities are all ``None`` stays so.

    Args:
        quality: one quality per completion (float or None), groups consecutive.
        num_generations: G.

    Returns:
        The shifted qualities, in input order.

    Raises:
        ValueError: G does not divide the number of qualities.

    Examples:
        >>> shift_by_group_minimum([-3.0, -1.0, None, -2.0, 5.0, 5.0, 6.0, 4.0], 4)
        [0.0, 2.0, None, 1.0, 1.0, 1.0, 2.0, 0.0]
    """
    out: list[float | None] = []
    for group in split_groups(quality, num_generations):
        known = [float(q) for q in group if q is not None]
        least = min(known) if known else 0.0
        out.extend(None if q is None else float(q) - least for q in group)
    return out


def partition_pairs(num_items: int, equivalent: Iterable[tuple[int, int]]) -> list[int]:
    """Class labels from equivalent pairs: the connected components (union-find, as DARLING partitions).

    Equivalence is made transitive: if a ~ b and b ~ c, all three share a class even when a
    and c were not judged equivalent. Labels are numbered by first appearance (0, 1, ...).

    Args:
        num_items: how many items.
        equivalent: index pairs ``(i, j)`` judged equivalent.

    Returns:
        One label per item.

    Raises:
        ValueError: an index outside ``[0, num_items)``.

    Examples:
        >>> partition_pairs(5, [(0, 2), (2, 3)])
        [0, 1, 0, 0, 2]
    """
    parent = list(range(num_items))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, j in equivalent:
        for k in (i, j):
            if not 0 <= k < num_items:
                raise ValueError(f"pair ({i}, {j}) names item {k}, outside [0, {num_items})")
        ri, rj = find(i), find(j)
        if ri != rj:
            parent[max(ri, rj)] = min(ri, rj)
    first: dict[int, int] = {}
    return [first.setdefault(find(i), len(first)) for i in range(num_items)]


def partition_by_similarity(similarity: Any, threshold: float) -> list[int]:
    """Class labels of one group from its pairwise similarity matrix: pairs at or above ``threshold`` are equivalent.

    Args:
        similarity: a square [G, G] matrix (e.g. cosine similarities of the completions' embeddings).
        threshold: the similarity from which two completions count as meaning the same.

    Returns:
        One label per row (the connected components, :func:`partition_pairs`).

    Raises:
        ValueError: a matrix that is not square, or NaN in it, or a non-finite threshold.

    Examples:
        >>> partition_by_similarity([[1.0, 0.95, 0.2], [0.95, 1.0, 0.1], [0.2, 0.1, 1.0]], 0.9)
        [0, 0, 1]
    """
    sim = np.asarray(similarity, dtype=np.float64)
    if sim.ndim != 2 or sim.shape[0] != sim.shape[1]:
        raise ValueError(f"similarity must be a square matrix, got shape {sim.shape}")
    if not math.isfinite(threshold):
        raise ValueError(f"threshold must be finite, got {threshold!r}")
    if np.isnan(sim).any():
        i, j = np.argwhere(np.isnan(sim))[0]
        raise ValueError(f"similarity[{i}][{j}] is NaN")
    rows, cols = np.nonzero(np.triu(sim >= threshold, k=1))
    return partition_pairs(sim.shape[0], zip(rows.tolist(), cols.tolist()))
