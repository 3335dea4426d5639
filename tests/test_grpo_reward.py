"""SemanticGroupReward: DARLING's group diversity as a TRL reward, by hand-computed values, on 1 and 2 processes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from ddp_utils import run_distributed
from grpo_setup import BATCH, REFERENCES, TOPICS, topic_encoder, topic_reward, topic_space

from lightning_div.integrations.trl import (
    GroupDiversityMonitor,
    SemanticGroupReward,
    completion_text,
    gather_batch,
    group_labels,
    group_metrics,
)
from lightning_div.semantic.space import SemanticSpace

# BATCH (grpo_setup): group 1: the two "yes" each have 2 of 3 others elsewhere, "no" and "maybe" 3 of 3; group 2: 2 + 2 -> 2/3 each;
# group 3: all alike -> 0, floored at DARLING's 0.1
RAW = [2 / 3, 2 / 3, 1.0, 1.0] + [2 / 3] * 4 + [0.0] * 4
EXPECTED = RAW[:8] + [0.1] * 4


def test_clusters_rarity_by_hand(tmp_path):
    reward = topic_reward(tmp_path)
    assert reward(prompts=["p"] * 12, completions=BATCH) == pytest.approx(EXPECTED)
    assert reward.space.fitted  # fitted once, on the references
    assert reward.__name__ == "semantic_group_diversity"


def test_classes_score_by_hand(tmp_path):
    reward = topic_reward(tmp_path, score="classes")
    assert reward(completions=BATCH) == pytest.approx([3 / 4] * 4 + [2 / 4] * 4 + [1 / 4] * 4)
    # the floor raises every score below it: 3/4 and 1/2 stay, 1/4 becomes 0.3
    floored = topic_reward(tmp_path, score="classes", diversity_floor=0.3)
    assert floored(completions=BATCH) == pytest.approx([3 / 4] * 4 + [2 / 4] * 4 + [0.3] * 4)


def test_cosine_threshold_by_hand(tmp_path):
    reward = SemanticGroupReward(num_generations=4, equivalence="cosine", threshold=0.9, space=topic_space(tmp_path))
    assert reward(completions=BATCH) == pytest.approx(EXPECTED)
    assert not reward.space.fitted  # cosine needs the encoder only
    # the highest threshold: only identical directions are equivalent, so every (distinct) completion is its own class
    strict = SemanticGroupReward(num_generations=4, equivalence="cosine", threshold=1.0, space=topic_space(tmp_path))
    assert strict(completions=BATCH) == [1.0] * 12


class OneWayNLI:
    """Entailment when both texts start with the same word, and from "yes" to "ok" but not back."""

    def __init__(self):
        self.pairs = 0

    def score_pairs(self, premises, hypotheses, show_progress=None):
        self.pairs += len(premises)
        labels = []
        for p, h in zip(premises, hypotheses):
            a, b = p.split()[0], h.split()[0]
            labels.append("entailment" if a == b or (a, b) == ("yes", "ok") else "neutral")
        return labels, np.zeros((len(labels), 3))


def test_nli_bidirectional_entailment_by_hand():
    nli = OneWayNLI()
    reward = SemanticGroupReward(num_generations=4, equivalence="nli", nli=nli)
    assert reward(completions=BATCH) == pytest.approx(EXPECTED)
    assert nli.pairs == 3 * 4 * 3  # G (G - 1) ordered pairs per group
    # "yes" entails "ok" one way only: not equivalent
    assert reward(completions=["yes x", "ok y", "ok z", "no w"]) == pytest.approx([1.0, 2 / 3, 2 / 3, 1.0])


def test_conversational_completions_and_quality(tmp_path):
    conversational = [[{"role": "assistant", "content": t}] for t in BATCH]
    reward = topic_reward(tmp_path)
    assert reward(completions=conversational) == pytest.approx(EXPECTED)

    def quality(prompts, completions, **kwargs):
        return [None if i == 0 else float(i) for i in range(len(completions))]

    combined = topic_reward(tmp_path, quality=quality)
    out = combined(prompts=["p"] * 12, completions=BATCH, trainer_state=None)
    # a None quality stays None and takes no part in its group's minimum (1 here, not 0)
    shifted = [None, 0.0, 1.0, 2.0] + [0.0, 1.0, 2.0, 3.0] * 2
    assert out[0] is None
    assert out[1:] == pytest.approx([q * e for q, e in zip(shifted[1:], EXPECTED[1:])])
    # the name says it is a product
    assert combined.__name__ == "quality_x_semantic_diversity"
    assert topic_reward(tmp_path, quality=quality, name="mine").__name__ == "mine"


# one quality per completion of BATCH: negative in group 2, whose least (-5.0) is on the first of 2 processes
QUALITY = dict(zip(BATCH, [1.0, 2.0, 0.5, 3.0, -5.0, -1.0, -3.0, -2.0, 4.0, 4.0, 6.0, 5.0]))
# (q - the group's least q) x max(d, 0.1): group 1 least 0.5, group 2 least -5.0, group 3 least 4.0 (collapsed: 0.1)
DARLING = [0.5 * 2 / 3, 1.5 * 2 / 3, 0.0, 2.5] + [0.0, 4 * 2 / 3, 2 * 2 / 3, 3 * 2 / 3] + [0.0, 0.0, 0.2, 0.1]


def table_quality(prompts, completions, **kwargs):
    return [QUALITY[c] for c in completions]


def test_darlings_reward_by_hand(tmp_path):
    reward = topic_reward(tmp_path, quality=table_quality)
    assert reward(prompts=["p"] * 12, completions=BATCH) == pytest.approx(DARLING)
    # floor 0 and no shift: the raw product, as before DARLING's settings were the default
    raw = topic_reward(tmp_path, quality=table_quality, diversity_floor=0.0, shift_quality=False)
    assert raw(completions=BATCH) == pytest.approx([QUALITY[t] * d for t, d in zip(BATCH, RAW)])
    assert topic_reward(tmp_path, diversity_floor=0)(completions=BATCH) == pytest.approx(RAW)


def test_a_collapsed_group_keeps_a_tenth_of_its_quality_signal(tmp_path):
    collapsed = ["no a", "no b", "no c", "no d"]  # one cluster: diversity 0, floored to 0.1

    def quality(prompts, completions, **kwargs):
        return [1.0, 2.0, 3.0, 4.0]

    assert topic_reward(tmp_path, quality=quality)(completions=collapsed) == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert topic_reward(tmp_path)(completions=collapsed) == pytest.approx([0.1] * 4)  # the floor without a quality too
    # without the floor the whole group gets 0: no quality signal left in the group that needs it
    assert topic_reward(tmp_path, quality=quality, diversity_floor=0.0)(completions=collapsed) == [0.0] * 4


def test_a_negative_quality_group_still_prefers_its_rarest_completion(tmp_path):
    group = ["yes a", "yes b", "yes c", "no d"]  # "no d" is the rarest: diversity 1, the others 1/3

    def negative(prompts, completions, **kwargs):
        return [-3.0, -2.0, -2.0, -2.0]  # "no d" is as good as "yes b" and "yes c"

    shifted = topic_reward(tmp_path, quality=negative)(completions=group)
    assert shifted == pytest.approx([0.0, 1 / 3, 1 / 3, 1.0])
    assert shifted[3] > shifted[1] == shifted[2]
    # the raw product inverts the intent: the rarest of the equally good ones gets the lowest reward
    raw = topic_reward(tmp_path, quality=negative, shift_quality=False, diversity_floor=0.0)(completions=group)
    assert raw == pytest.approx([-1.0, -2 / 3, -2 / 3, -2.0])


def test_darlings_settings_are_checked(tmp_path):
    for bad in (-0.1, 1.5, float("nan"), "0.1", True, None):
        with pytest.raises(ValueError, match="diversity_floor must be a number in"):
            SemanticGroupReward(num_generations=4, diversity_floor=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="shift_quality must be True or False"):
        SemanticGroupReward(num_generations=4, shift_quality="yes")  # type: ignore[arg-type]


def test_bad_input(tmp_path):
    reward = topic_reward(tmp_path)
    with pytest.raises(ValueError, match="10 completions cannot be cut into groups of num_generations=4"):
        reward(completions=BATCH[:10])
    with pytest.raises(TypeError, match=r"completions\[1\] is int"):
        reward(completions=["yes", 3, "no", "no"])
    with pytest.raises(TypeError, match="got one str"):
        reward(completions="yes a")
    assert reward(completions=[]) == []
    # empty completions are a defined text (the encoder's empty vector), not an error
    assert len(reward(completions=["", "", "yes a", "no b"])) == 4
    # a group of one: nothing repeats a completion
    single = SemanticGroupReward(num_generations=1, space=topic_space(tmp_path), cluster_texts=REFERENCES)
    assert single(completions=["yes a", "yes b"]) == [1.0, 1.0]
    with pytest.raises(ValueError, match="num_generations must be an integer >= 1"):
        SemanticGroupReward(num_generations=0)
    with pytest.raises(ValueError, match="equivalence='nli' needs an NLI scorer"):
        SemanticGroupReward(num_generations=4, equivalence="nli")
    with pytest.raises(ValueError, match="equivalence must be one of"):
        SemanticGroupReward(num_generations=4, equivalence="jaccard")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="score must be one of"):
        SemanticGroupReward(num_generations=4, score="entropy")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"completions\[0\] has a message"):
        completion_text([{"role": "assistant", "content": 5}])


def test_group_labels_are_compared_within_groups(tmp_path):
    space = topic_space(tmp_path).fit(REFERENCES)
    labels = group_labels(BATCH, 4, space=space)
    assert labels[0] == labels[1] == labels[6] == labels[7]  # "yes" is one cluster everywhere
    assert len(set(labels[8:].tolist())) == 1


def _on_two_processes(rank, world, cache):
    local = BATCH[6 * rank : 6 * (rank + 1)]
    everything, offset = gather_batch(local)
    space = SemanticSpace(encoder=topic_encoder(), num_clusters=4, dirpath=cache, show_progress=False)
    clusters = SemanticGroupReward(num_generations=4, space=space, cluster_texts=REFERENCES)
    cosine = SemanticGroupReward(num_generations=4, equivalence="cosine", space=space)
    nli = SemanticGroupReward(num_generations=4, equivalence="nli", nli=OneWayNLI())
    conversational = [[{"role": "assistant", "content": t}] for t in local]
    scores = clusters(completions=local)
    darling = SemanticGroupReward(num_generations=4, space=space, quality=table_quality)
    return {
        "gathered": everything,
        "offset": offset,
        # the callback's metrics of the gathered batch, regrouped (every process measures the whole batch)
        "metrics": group_metrics(everything, space.assign(everything), 4, 4, vocab_size=10),
        "clusters": scores,
        "cosine": cosine(completions=conversational),
        "nli": nli(completions=local),
        # group 2 straddles the processes: its least quality (-5.0) is on process 0 only
        "darling": darling(prompts=[f"p{(6 * rank + i) // 4}" for i in range(6)], completions=local),
    }


@pytest.mark.slow
def test_two_processes_get_what_one_process_gives_for_the_whole_batch(tmp_path):
    results = run_distributed(_on_two_processes, 2, str(tmp_path), timeout_s=120)
    for rank, result in enumerate(results):
        assert result["gathered"] == BATCH
        assert result["offset"] == 6 * rank
        for kind in ("clusters", "cosine", "nli"):
            assert result[kind] == pytest.approx(EXPECTED[6 * rank : 6 * (rank + 1)]), (rank, kind)
        assert result["darling"] == pytest.approx(DARLING[6 * rank : 6 * (rank + 1)]), rank
    # the slices put together are exactly one process's answer for the whole batch
    one_reward = topic_reward(tmp_path / "one")
    one = one_reward(completions=BATCH)
    assert results[0]["clusters"] + results[1]["clusters"] == one
    metrics = group_metrics(BATCH, one_reward.space.assign(BATCH), 4, 4, vocab_size=10)
    assert results[0]["metrics"] == results[1]["metrics"] == metrics
    # group 1: 3 clusters (2 + 1 + 1), group 2: 2 (2 + 2), group 3: 1
    assert metrics["group_clusters"] == pytest.approx(2.0)
    assert metrics["collapsed_groups"] == pytest.approx(1 / 3)
    h1 = -(0.5 * np.log(0.5) + 2 * 0.25 * np.log(0.25))
    assert metrics["group_sem_ent"] == pytest.approx((h1 + np.log(2) + 0.0) / 3)


PROMPTS = [f"p{i // 4}" for i in range(12)]


# Bad input and odd runs (each case failed before its fix)


def test_a_group_must_answer_one_prompt(tmp_path):
    reward = topic_reward(tmp_path)
    assert len(reward(prompts=PROMPTS, completions=BATCH)) == 12
    # num_generations=8 on 2 prompts x 4 completions: the groups would mix prompts
    eight = SemanticGroupReward(num_generations=8, space=topic_space(tmp_path), cluster_texts=REFERENCES)
    with pytest.raises(ValueError, match="completion 4 answers another prompt than completion 0 of its group"):
        eight(prompts=PROMPTS[:8], completions=BATCH[:8])
    with pytest.raises(ValueError, match="11 prompts for 12 completions"):
        reward(prompts=PROMPTS[:11], completions=BATCH)
    # conversational prompts are compared as they are
    chat = [[{"role": "user", "content": p}] for p in PROMPTS]
    assert len(reward(prompts=chat, completions=BATCH)) == 12


@pytest.mark.parametrize(
    "returned, error, match",
    [
        (None, TypeError, r"quality \(bad\) must return one reward per completion .* got NoneType None"),
        (0.5, TypeError, r"quality \(bad\) must return one reward per completion .* got float 0.5"),
        ("abc", TypeError, r"quality \(bad\) must return one reward per completion .* got str 'abc'"),
        ([1.0] * 11, ValueError, r"quality \(bad\) returned 11 rewards for 12 completions"),
        ([float("nan")] + [1.0] * 11, ValueError, r"returned nan for completion 0: a reward must be a finite number"),
        ([1.0, float("inf")] + [1.0] * 10, ValueError, r"returned inf for completion 1: a reward must be a finite"),
        (["0.5"] * 12, TypeError, r"quality \(bad\) returned '0.5' for completion 0: expected a float or None"),
    ],
)
def test_a_bad_quality_is_named(tmp_path, returned, error, match):
    def bad(prompts, completions, **kwargs):
        return returned

    with pytest.raises(error, match=match):
        topic_reward(tmp_path, quality=bad)(prompts=PROMPTS, completions=BATCH)


def test_a_quality_may_return_an_array(tmp_path):
    def arrays(prompts, completions, **kwargs):
        return np.arange(12, dtype=np.float32)

    out = topic_reward(tmp_path, quality=arrays, diversity_floor=0.0)(prompts=PROMPTS, completions=BATCH)
    assert out[:4] == pytest.approx([0.0, 2 / 3, 2.0, 3.0])  # shifted by 0: 0, 1 x 2/3, 2 x 1, 3 x 1


def test_the_cosine_threshold_is_checked_and_identical_completions_reach_1(tmp_path):
    for bad in (1.5, -2, float("nan"), "0.9", True):
        with pytest.raises(ValueError, match=r"threshold must be a cosine similarity, a number in \[-1, 1\]"):
            SemanticGroupReward(num_generations=4, equivalence="cosine", threshold=bad, space=topic_space(tmp_path))

    class OneDirection:
        """Every text the same direction, whose normalised self-cosine rounds to 0.9999999999999998."""

        name = "one-direction"

        def encode(self, texts):
            return np.tile(np.asarray([1.0, 2.0, 3.0, 4.0], dtype=np.float32), (len(texts), 1))

    space = SemanticSpace(encoder=OneDirection(), dirpath=tmp_path, show_progress=False)
    reward = SemanticGroupReward(num_generations=4, equivalence="cosine", threshold=1.0, space=space)
    # one class: a collapsed group, DARLING's floor for everyone (was 1.0 each: rounding split identical texts)
    assert reward(completions=["same"] * 4) == pytest.approx([0.1] * 4)


def test_the_rewards_defaults_refuse_to_fit_k_20_on_one_batch():
    with pytest.raises(ValueError, match=r"the default num_clusters=20 needs at least that many distinct ones: give"):
        SemanticGroupReward(num_generations=4)
    # any of the remedies is accepted
    SemanticGroupReward(num_generations=4, space=SemanticSpace(num_clusters=4))
    SemanticGroupReward(num_generations=4, cluster_texts=REFERENCES)
    SemanticGroupReward(num_generations=4, equivalence="cosine")


@pytest.mark.parametrize("cls", [SemanticGroupReward, GroupDiversityMonitor])
def test_empty_or_one_string_cluster_texts_are_named(cls):
    # cluster_texts=[] failed at the first fit with "no gold training responses", naming no argument;
    # one string was taken as a list of its characters
    build = (
        (lambda refs: cls(num_generations=4, cluster_texts=refs))
        if cls is SemanticGroupReward
        else (lambda refs: cls(cluster_texts=refs))
    )
    with pytest.raises(ValueError, match=rf"{cls.__name__}\(cluster_texts=\[\]\) has no texts to fit"):
        build([])
    with pytest.raises(ValueError, match=r"cluster_texts=\.\.\.\) must be a list of texts, got one string"):
        build("I like tea.")
    assert build(("a", "b")).cluster_texts == ["a", "b"]


def test_a_resumed_run_does_not_reward_in_the_clusters_of_another_k(tmp_path):
    """Run 1 rewards in k = 3 clusters of the space it shares with the monitor, which checkpoints it; resumed
    with k = 4 the checkpoint is said to hold other settings and the shared space fits k = 4 (issue 64 H1)."""
    space = SemanticSpace(encoder=topic_encoder(), num_clusters=3, dirpath=tmp_path / "run1", show_progress=False)
    first = SemanticGroupReward(num_generations=4, cluster_texts=REFERENCES, space=space)
    first.prepare(BATCH)
    assert first.space.clusters.num_clusters == 3
    saved = GroupDiversityMonitor(space=space).state_dict()
    assert saved["measure"]["space"] == {"clusters_path": space.clusters_path}  # the shared space, saved once

    resumed = topic_reward(tmp_path)  # k = 4 now
    monitor = GroupDiversityMonitor(space=resumed.space)
    with pytest.warns(RuntimeWarning, match=r"was saved with other settings .*'num_clusters': 3"):
        monitor.load_state_dict(saved)
    assert resumed.space.clusters_path is None  # not pointed at the k = 3 file
    resumed.prepare(BATCH)
    assert resumed.space.clusters.num_clusters == 4 == resumed.space.settings()["num_clusters"]
    assert resumed(prompts=PROMPTS, completions=BATCH) == pytest.approx(EXPECTED)


def test_a_space_shared_by_the_reward_and_the_monitor_is_restored_once_for_both(tmp_path):
    """Issue 61 item 5: no reward is found in the trainer; the monitor's checkpoint holds the shared space, and
    the resumed reward rewards in the interrupted run's clusters (fitted on its first batch, not the resumed one)."""
    first_batch = [f"{t} {i}" for t in TOPICS for i in range(3)]
    space = topic_space(tmp_path / "run1")
    reward = SemanticGroupReward(num_generations=4, space=space)
    monitor = GroupDiversityMonitor(space=space)
    reward(completions=first_batch)  # fitted on the first batch's completions
    saved = json.loads(json.dumps(monitor.state_dict()))  # trainer_state.json

    resumed_space = topic_space(tmp_path / "run2")
    resumed_reward = SemanticGroupReward(num_generations=4, space=resumed_space)
    GroupDiversityMonitor(space=resumed_space).load_state_dict(saved)
    collapsed = ["yes z"] * 4 + ["no z"] * 8  # fitted on, these would make other clusters
    assert resumed_reward(completions=collapsed) == reward(completions=collapsed)
    assert resumed_space.clusters_path == space.clusters_path
