"""SemanticGroupReward: DARLING's group diversity as a TRL reward, by hand-computed values, on 1 and 2 processes."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from ddp_utils import run_distributed

from lightning_div.integrations.trl import (
    SemanticGroupReward,
    completion_text,
    gather_batch,
    group_labels,
    group_metrics,
)
from lightning_div.semantic.space import SemanticSpace

TOPICS = ("yes", "no", "maybe", "hello")


class TopicEncoder:
    """A text's first word as a topic direction, plus a little noise seeded by the text (distinct directions)."""

    name = "topic-encoder"

    def encode(self, texts):
        rows = []
        for text in texts:
            rng = np.random.default_rng(int(hashlib.sha256(text.encode()).hexdigest()[:8], 16))
            v = rng.normal(scale=0.01, size=len(TOPICS))
            word = text.split()[0] if text.split() else "hello"
            v[TOPICS.index(word)] += 1.0
            rows.append(v)
        return np.asarray(rows, dtype=np.float32)


REFERENCES = [f"{t} {i}" for t in TOPICS for i in range(12)]

# three groups of G = 4; with 2 processes of 6 completions each, the second group straddles them
BATCH = ["yes a", "yes b", "no c", "maybe d", "hello e", "hello f", "yes g", "yes h", "no i", "no j", "no k", "no l"]
# group 1: the two "yes" each have 2 of 3 others elsewhere, "no" and "maybe" 3 of 3; group 2: 2 + 2 -> 2/3 each;
# group 3: all alike -> 0
EXPECTED = [2 / 3, 2 / 3, 1.0, 1.0] + [2 / 3] * 4 + [0.0] * 4


def _space(tmp_path) -> SemanticSpace:
    return SemanticSpace(encoder=TopicEncoder(), num_clusters=4, dirpath=tmp_path, show_progress=False)


def _reward(tmp_path, **kwargs) -> SemanticGroupReward:
    kwargs.setdefault("space", _space(tmp_path))
    return SemanticGroupReward(num_generations=4, reference_responses=REFERENCES, **kwargs)


def test_clusters_rarity_by_hand(tmp_path):
    reward = _reward(tmp_path)
    assert reward(prompts=["p"] * 12, completions=BATCH) == pytest.approx(EXPECTED)
    assert reward.space.fitted  # fitted once, on the references
    assert reward.__name__ == "semantic_group_diversity"


def test_classes_score_by_hand(tmp_path):
    reward = _reward(tmp_path, score="classes")
    assert reward(completions=BATCH) == pytest.approx([3 / 4] * 4 + [2 / 4] * 4 + [1 / 4] * 4)


def test_cosine_threshold_by_hand(tmp_path):
    reward = SemanticGroupReward(num_generations=4, equivalence="cosine", threshold=0.9, space=_space(tmp_path))
    assert reward(completions=BATCH) == pytest.approx(EXPECTED)
    assert not reward.space.fitted  # cosine needs the encoder only
    # a threshold above every pair's similarity: every completion is its own class
    strict = SemanticGroupReward(num_generations=4, equivalence="cosine", threshold=1.01, space=_space(tmp_path))
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
    reward = _reward(tmp_path)
    assert reward(completions=conversational) == pytest.approx(EXPECTED)

    def quality(prompts, completions, **kwargs):
        return [None if i == 0 else float(i) for i in range(len(completions))]

    combined = _reward(tmp_path, quality=quality)
    out = combined(prompts=["p"] * 12, completions=BATCH, trainer_state=None)
    assert out[0] is None
    assert out[1:] == pytest.approx([i * e for i, e in zip(range(1, 12), EXPECTED[1:])])


def test_bad_input(tmp_path):
    reward = _reward(tmp_path)
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
    single = SemanticGroupReward(num_generations=1, space=_space(tmp_path), reference_responses=REFERENCES)
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
    space = _space(tmp_path).fit(REFERENCES)
    labels = group_labels(BATCH, 4, space=space)
    assert labels[0] == labels[1] == labels[6] == labels[7]  # "yes" is one cluster everywhere
    assert len(set(labels[8:].tolist())) == 1


def _on_two_processes(rank, world, cache):
    local = BATCH[6 * rank : 6 * (rank + 1)]
    everything, offset = gather_batch(local)
    space = SemanticSpace(encoder=TopicEncoder(), num_clusters=4, dirpath=cache, show_progress=False)
    clusters = SemanticGroupReward(num_generations=4, space=space, reference_responses=REFERENCES)
    cosine = SemanticGroupReward(num_generations=4, equivalence="cosine", space=space)
    nli = SemanticGroupReward(num_generations=4, equivalence="nli", nli=OneWayNLI())
    conversational = [[{"role": "assistant", "content": t}] for t in local]
    scores = clusters(completions=local)
    return {
        "gathered": everything,
        "offset": offset,
        # the callback's metrics of the gathered batch, regrouped (every process measures the whole batch)
        "metrics": group_metrics(everything, space.assign(everything), 4, 4, vocab_size=10),
        "clusters": scores,
        "cosine": cosine(completions=conversational),
        "nli": nli(completions=local),
    }


@pytest.mark.slow
def test_two_processes_get_what_one_process_gives_for_the_whole_batch(tmp_path):
    results = run_distributed(_on_two_processes, 2, str(tmp_path), timeout_s=120)
    for rank, result in enumerate(results):
        assert result["gathered"] == BATCH
        assert result["offset"] == 6 * rank
        for kind in ("clusters", "cosine", "nli"):
            assert result[kind] == pytest.approx(EXPECTED[6 * rank : 6 * (rank + 1)]), (rank, kind)
    # the slices put together are exactly one process's answer for the whole batch
    one_reward = _reward(tmp_path / "one")
    one = one_reward(completions=BATCH)
    assert results[0]["clusters"] + results[1]["clusters"] == one
    metrics = group_metrics(BATCH, one_reward.space.assign(BATCH), 4, 4, vocab_size=10)
    assert results[0]["metrics"] == results[1]["metrics"] == metrics
    # group 1: 3 clusters (2 + 1 + 1), group 2: 2 (2 + 2), group 3: 1
    assert metrics["diversity/group_clusters"] == pytest.approx(2.0)
    assert metrics["diversity/collapsed_groups"] == pytest.approx(1 / 3)
    h1 = -(0.5 * np.log(0.5) + 2 * 0.25 * np.log(0.25))
    assert metrics["diversity/group_sem_ent"] == pytest.approx((h1 + np.log(2) + 0.0) / 3)
