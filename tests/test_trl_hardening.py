"""The TRL front end against bad input and odd runs: each case failed before its fix (no training)."""

from __future__ import annotations

import json
import warnings
from collections import deque
from types import SimpleNamespace

import numpy as np
import pytest
from test_grpo_reward import BATCH, REFERENCES, TOPICS, TopicEncoder
from test_grpo_trainer import StubTrainer, _step

from lightning_div.integrations.trl import GroupDiversityCallback, SemanticGroupReward, completion_text
from lightning_div.semantic.space import SemanticSpace

PROMPTS = [f"p{i // 4}" for i in range(12)]


def _space(tmp_path, **kwargs) -> SemanticSpace:
    return SemanticSpace(encoder=TopicEncoder(), num_clusters=4, dirpath=tmp_path, show_progress=False, **kwargs)


def _reward(tmp_path, **kwargs) -> SemanticGroupReward:
    return SemanticGroupReward(num_generations=4, space=_space(tmp_path), reference_responses=REFERENCES, **kwargs)


def test_a_group_must_answer_one_prompt(tmp_path):
    reward = _reward(tmp_path)
    assert len(reward(prompts=PROMPTS, completions=BATCH)) == 12
    # num_generations=8 on 2 prompts x 4 completions: the groups would mix prompts
    eight = SemanticGroupReward(num_generations=8, space=_space(tmp_path), reference_responses=REFERENCES)
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
        _reward(tmp_path, quality=bad)(prompts=PROMPTS, completions=BATCH)


def test_a_quality_may_return_an_array(tmp_path):
    def arrays(prompts, completions, **kwargs):
        return np.arange(12, dtype=np.float32)

    out = _reward(tmp_path, quality=arrays, diversity_floor=0.0)(prompts=PROMPTS, completions=BATCH)
    assert out[:4] == pytest.approx([0.0, 2 / 3, 2.0, 3.0])  # shifted by 0: 0, 1 x 2/3, 2 x 1, 3 x 1


def test_the_cosine_threshold_is_checked_and_identical_completions_reach_1(tmp_path):
    for bad in (1.5, -2, float("nan"), "0.9", True):
        with pytest.raises(ValueError, match=r"threshold must be a cosine similarity, a number in \[-1, 1\]"):
            SemanticGroupReward(num_generations=4, equivalence="cosine", threshold=bad, space=_space(tmp_path))

    class OneDirection:
        """Every text the same direction, whose normalised self-cosine rounds to 0.9999999999999998."""

        name = "one-direction"

        def encode(self, texts):
            return np.tile(np.asarray([1.0, 2.0, 3.0, 4.0], dtype=np.float32), (len(texts), 1))

    space = SemanticSpace(encoder=OneDirection(), dirpath=tmp_path, show_progress=False)
    reward = SemanticGroupReward(num_generations=4, equivalence="cosine", threshold=1.0, space=space)
    # one class: a collapsed group, DARLING's floor for everyone (was 1.0 each: rounding split identical texts)
    assert reward(completions=["same"] * 4) == pytest.approx([0.1] * 4)


def test_bad_completions_are_named_and_the_callback_only_warns(tmp_path):
    calls = [[{"role": "assistant", "tool_calls": [{"function": {"name": n, "arguments": "{}"}}]}] for n in "ab"]
    assert completion_text(calls[0]) != completion_text(calls[1])  # two different tool calls, two texts
    with pytest.raises(TypeError, match=r"completions\[2\] has a message .* with no 'content' and no 'tool_calls'"):
        completion_text([{"role": "assistant"}], 2)
    surrogate = ["yes a", "yes \ud800 b", "no c", "no d"]
    with pytest.raises(ValueError, match=r"completions\[1\] holds a lone surrogate '\\ud800' at character 4"):
        _reward(tmp_path)(completions=surrogate)
    # in the callback the same data is a failed measurement: a warning (on_error="warn"), training goes on
    for bad in (surrogate, [[{"role": "assistant", "content": 5}]] + [[{"role": "assistant", "content": "x"}]] * 3):
        trainer = StubTrainer(bad)
        cb = GroupDiversityCallback(space=_space(tmp_path), reference_responses=REFERENCES).attach(trainer)
        with pytest.warns(RuntimeWarning, match=r"completions\[[01]\]"):
            _step(cb, trainer, tmp_path)
        assert not trainer._metrics["train"]


def test_the_rewards_default_cache_is_not_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LIGHTNING_DIV_CACHE", str(tmp_path / "user_cache"))
    completions = [f"{t} {i}" for t in TOPICS for i in range(4)]
    reward = SemanticGroupReward(num_generations=4, space=SemanticSpace(encoder=TopicEncoder(), num_clusters=4))
    reward(completions=completions)
    assert not (tmp_path / "lightning_div_cache").exists()
    assert {p.parent for p in (tmp_path / "user_cache").rglob("*.npz")} == {tmp_path / "user_cache" / "clusters"}
    # beside a GroupDiversityCallback of the same trainer: the run's own folder, as the callbacks use
    shared = SemanticGroupReward(num_generations=4, space=SemanticSpace(encoder=TopicEncoder(), num_clusters=3))
    trainer = StubTrainer(completions)
    trainer.reward_funcs = [shared]
    cb = GroupDiversityCallback(space=_space(tmp_path / "cb")).attach(trainer)
    cb.on_train_begin(SimpleNamespace(output_dir=str(tmp_path / "run")), SimpleNamespace(global_step=0), None)
    assert shared.cache_dir() == tmp_path / "run" / "lightning_div_cache"


def test_the_rewards_defaults_refuse_to_fit_k_20_on_one_batch():
    with pytest.raises(ValueError, match=r"the default num_clusters=20 needs at least that many distinct ones: give"):
        SemanticGroupReward(num_generations=4)
    # any of the remedies is accepted
    SemanticGroupReward(num_generations=4, space=SemanticSpace(num_clusters=4))
    SemanticGroupReward(num_generations=4, reference_responses=REFERENCES)
    SemanticGroupReward(num_generations=4, equivalence="cosine")


def test_a_callback_given_in_callbacks_says_it_measures_nothing(tmp_path):
    cb = GroupDiversityCallback(space=_space(tmp_path))
    args = SimpleNamespace(output_dir=str(tmp_path))
    with pytest.warns(RuntimeWarning, match=r"given to the trainer in callbacks=\[...\].*attach\(trainer\)"):
        cb.on_train_begin(args, SimpleNamespace(global_step=0), None)
    cb.on_step_end(args, SimpleNamespace(global_step=1), SimpleNamespace(should_log=True))  # nothing, no error
    assert cb.history == []


def test_evaluation_rollouts_are_not_logged_as_training(tmp_path):
    trainer = StubTrainer(BATCH)
    cb = GroupDiversityCallback(space=_space(tmp_path), reference_responses=REFERENCES).attach(trainer)
    args = SimpleNamespace(output_dir=str(tmp_path))
    cb.on_train_begin(args, SimpleNamespace(global_step=0), None)
    _step(cb, trainer, tmp_path, step=1)
    trained = trainer._metrics["train"]["diversity/group_sem_ent"][0]
    # an evaluation fills the buffer with its own rollouts (every group collapsed), then a step that reuses
    # the generation batch made before it (num_iterations=2) logs: the training batch's values again
    trainer._logs["completion"] = deque(["no x"] * 12)
    cb.on_evaluate(args, SimpleNamespace(global_step=1), None)
    _step(cb, trainer, tmp_path, step=2)
    assert trainer._metrics["train"]["diversity/group_sem_ent"] == [trained, trained]
    # a new training generation is measured
    trainer._logs["completion"] = deque(["no y"] * 12)
    _step(cb, trainer, tmp_path, step=3)
    assert trainer._metrics["train"]["diversity/group_sem_ent"][-1] == 0.0


def test_a_resumed_run_measures_in_the_interrupted_runs_clusters(tmp_path):
    """No references: the clusters are fitted on the first step's completions, and a resume must not refit them."""
    first_batch = [f"{t} {i}" for t in TOPICS for i in range(3)]
    resumed_batch = ["yes z"] * 4 + ["no z"] * 8  # fitted on, these would make other clusters

    def run(batch, state, cache):
        space = SemanticSpace(encoder=TopicEncoder(), num_clusters=4, dirpath=cache, show_progress=False)
        trainer = StubTrainer(batch)
        cb = GroupDiversityCallback(space=space, log_samples=False, alert_start_steps=1).attach(trainer)
        cb.on_train_begin(SimpleNamespace(output_dir=str(tmp_path)), state, None)
        state.global_step += 1
        trainer.state = state
        cb.on_step_end(SimpleNamespace(output_dir=str(tmp_path)), state, SimpleNamespace(should_log=True))
        return cb, space

    state = SimpleNamespace(global_step=0, is_world_process_zero=True, stateful_callbacks={})
    interrupted, space = run(first_batch, state, tmp_path / "cache")
    (start,) = interrupted.alert.values["group_sem_ent"]
    assert start > 0
    # trainer_state.json, written at the checkpoint and read back at the resume
    saved = json.loads(json.dumps(state.stateful_callbacks))
    assert saved["lightning_div.GroupDiversityCallback"]["vocab_size"] == interrupted.vocab_size
    resumed_state = SimpleNamespace(global_step=1, is_world_process_zero=True, stateful_callbacks=saved)
    with pytest.warns(RuntimeWarning, match="step 2: group diversity collapsed"):
        resumed, resumed_space = run(resumed_batch, resumed_state, tmp_path / "cache")
    assert resumed_space.clusters_path == space.clusters_path
    assert resumed.group.last_ids.tolist() == space.assign(resumed_batch).tolist()
    assert resumed.vocab_size == interrupted.vocab_size  # counted on the first batch, not the resumed one
    assert resumed.alert.values["group_sem_ent"] == [start, 0.0]  # the alert's start carried over
    assert resumed.history[-1]["diversity/collapse_alert"] == 1.0
    # a state saved with other settings is said, and the run starts afresh
    other = GroupDiversityCallback(space=_space(tmp_path, kmeans_seed=7))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        other.load_state_dict(saved["lightning_div.GroupDiversityCallback"])
    assert any("was saved with other settings" in str(w.message) for w in caught)
    with pytest.warns(RuntimeWarning, match=r"is damaged \(vocab_size 'x' is not an integer >= 1\)"):
        GroupDiversityCallback(space=_space(tmp_path)).load_state_dict(
            {**saved["lightning_div.GroupDiversityCallback"], "vocab_size": "x"}
        )


@pytest.mark.parametrize("cls", [SemanticGroupReward, GroupDiversityCallback])
def test_empty_or_one_string_reference_responses_are_named(cls):
    # reference_responses=[] failed at the first fit with "no gold training responses", naming no argument;
    # one string was taken as a list of its characters
    build = (
        (lambda refs: cls(num_generations=4, reference_responses=refs))
        if cls is SemanticGroupReward
        else (lambda refs: cls(reference_responses=refs))
    )
    with pytest.raises(ValueError, match=rf"{cls.__name__}\(reference_responses=\[\]\) has no texts to fit"):
        build([])
    with pytest.raises(ValueError, match=r"reference_responses=\.\.\.\) must be a list of texts, got one string"):
        build("I like tea.")
    assert build(("a", "b")).reference_responses == ["a", "b"]
