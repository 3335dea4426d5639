"""lightning_div.metrics.group: the group formulas of GRPO/RLOO diversity, by hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lightning_div.metrics import (
    collapsed_share,
    group_classes,
    group_distinct_n,
    group_diversity_scores,
    group_semantic_entropy,
    semantic_entropy,
)
from lightning_div.metrics.group import check_groups, partition_by_similarity, partition_pairs, split_groups

# three groups of G = 4: classes {0,0,1,1}, {2,2,2,2}, {0,1,2,3}
LABELS = [0, 0, 1, 1, 2, 2, 2, 2, 0, 1, 2, 3]


def test_group_sem_ent_is_the_mean_of_the_groups_entropies():
    # ln 2, 0, ln 4 -> (ln 2 + 2 ln 2) / 3 = ln 2
    assert group_semantic_entropy(LABELS, 4) == pytest.approx(math.log(2))
    # one group is the step's Sem-Ent over that group (the ids stand for clusters)
    assert group_semantic_entropy([0, 3, 3, 7], 4) == pytest.approx(semantic_entropy([0, 3, 3, 7], 8))
    # 1 of 3 vs 2 of 3: -(1/3 ln 1/3 + 2/3 ln 2/3)
    assert group_semantic_entropy([4, 4, 9], 3) == pytest.approx(-(1 / 3) * math.log(1 / 3) - (2 / 3) * math.log(2 / 3))


def test_group_sem_ent_differs_from_the_steps_sem_ent():
    # every group collapsed, onto a different class each: the step looks diverse, the groups are not
    labels = [0, 0, 1, 1, 2, 2]
    assert group_semantic_entropy(labels, 2) == 0.0
    assert semantic_entropy(labels, 3) == pytest.approx(math.log(3))


def test_group_classes_and_collapsed_share():
    assert group_classes(LABELS, 4) == pytest.approx((2 + 1 + 4) / 3)
    assert collapsed_share(LABELS, 4) == pytest.approx(1 / 3)
    assert collapsed_share([1, 1, 1, 1], 2) == 1.0
    assert collapsed_share([1, 2, 1, 2], 2) == 0.0


def test_labels_are_compared_within_a_group_only():
    # the same class ids in two groups do not join them; np arrays and lists agree
    assert group_classes(np.array([5, 5, 5, 6]), 2) == 1.5
    assert group_semantic_entropy(np.array([5, 5, 5, 6], dtype=np.int32), 2) == pytest.approx(math.log(2) / 2)


def test_group_distinct_2_within_groups():
    texts = ["a b c", "a b c", "x y", "y x"]
    # group 1: bigrams {a b, b c} twice: 2 / 4; group 2: {x y}, {y x}: 2 / 2
    assert group_distinct_n(texts, 2) == pytest.approx((0.5 + 1.0) / 2)
    # pooled over the step, the repeat across groups would not matter here, but within-group does
    assert group_distinct_n(["a b", "c d", "a b", "c d"], 2) == 1.0
    assert group_distinct_n(["a b", "a b", "c d", "c d"], 2) == 0.5
    assert group_distinct_n(["a b c", "a b c"], 1, n=1) == 1.0  # groups of one: 3 distinct of 3 each
    assert group_distinct_n(["a b c", "a b c"], 2, n=1) == 0.5  # one group: 3 distinct of 6


def test_rarity_is_darlings_per_completion_score():
    # group 1: 0,0,1,1: each has 2 of 3 others in another class; group 2: all alike: 0; group 3: all differ: 1
    scores = group_diversity_scores(LABELS, 4)
    assert scores == pytest.approx([2 / 3] * 4 + [0.0] * 4 + [1.0] * 4)
    # 0,0,0,1 -> the three alike 1/3, the odd one 1
    assert group_diversity_scores([7, 7, 7, 1], 4) == pytest.approx([1 / 3, 1 / 3, 1 / 3, 1.0])


def test_classes_score_is_the_normalised_number_of_classes():
    assert group_diversity_scores(LABELS, 4, score="classes") == pytest.approx([0.5] * 4 + [0.25] * 4 + [1.0] * 4)


def test_empty_and_groups_of_one_have_defined_values():
    for fn in (group_semantic_entropy, group_classes, collapsed_share):
        assert fn([], 4) == 0.0
    assert group_distinct_n([], 4) == 0.0
    assert group_diversity_scores([], 4) == []
    assert group_semantic_entropy([3, 3, 3], 1) == 0.0
    assert group_classes([3, 3, 3], 1) == 1.0
    assert collapsed_share([3, 3, 3], 1) == 0.0
    assert group_diversity_scores([3, 3, 3], 1) == [1.0, 1.0, 1.0]
    assert group_diversity_scores([3, 3, 3], 1, score="classes") == [1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    "call",
    [
        lambda: group_semantic_entropy([0, 1, 2], 2),
        lambda: group_classes([0, 1, 2, 3, 4], 4),
        lambda: collapsed_share([0] * 5, 2),
        lambda: group_distinct_n(["a", "b", "c"], 2),
        lambda: group_diversity_scores([0, 1, 2], 2),
        lambda: split_groups([1, 2, 3], 2),
    ],
)
def test_g_not_dividing_the_batch_is_a_clear_error(call):
    with pytest.raises(ValueError, match="is not a multiple of"):
        call()


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="num_generations must be an integer >= 1, got 0"):
        check_groups(4, 0)
    with pytest.raises(ValueError, match="num_generations must be an integer >= 1, got True"):
        check_groups(4, True)
    with pytest.raises(ValueError, match=r"labels\[1\] = 0.5 is not an integer class id"):
        group_classes([1, 0.5], 2)
    with pytest.raises(ValueError, match="score must be one of"):
        group_diversity_scores([0, 1], 2, score="entropy")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^texts\[1\] is NoneType, expected str$"):
        group_distinct_n(["a", None], 2)  # type: ignore[list-item]


def test_partition_pairs_is_transitive():
    assert partition_pairs(4, []) == [0, 1, 2, 3]
    assert partition_pairs(4, [(3, 1), (1, 0)]) == [0, 0, 1, 0]
    assert partition_pairs(0, []) == []
    with pytest.raises(ValueError, match="pair \\(0, 4\\) names item 4"):
        partition_pairs(4, [(0, 4)])


def test_partition_by_similarity_uses_at_or_above_the_threshold():
    sim = np.array([[1.0, 0.5, 0.1], [0.5, 1.0, 0.5], [0.1, 0.5, 1.0]])
    assert partition_by_similarity(sim, 0.5) == [0, 0, 0]  # 0~1, 1~2: one class although 0, 2 differ
    assert partition_by_similarity(sim, 0.51) == [0, 1, 2]
    with pytest.raises(ValueError, match="square"):
        partition_by_similarity(np.ones((2, 3)), 0.5)
    with pytest.raises(ValueError, match=r"similarity\[0\]\[1\] is NaN"):
        partition_by_similarity([[1.0, float("nan")], [0.0, 1.0]], 0.5)
