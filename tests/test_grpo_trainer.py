"""GroupDiversityCallback with TRL: a stub trainer (fast), a real GRPOTrainer (docs/grpo.md's script, verbatim) and RLOOTrainer."""

from __future__ import annotations

import json
import math
import re
import warnings
from collections import defaultdict, deque
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import report_of_hugging_face_run
from test_grpo_reward import BATCH, REFERENCES, TOPICS, TopicEncoder, _reward, _space

from lightning_div.integrations.trl import (
    GroupDiversityCallback,
    SemanticGroupReward,
    completion_text,
    group_metrics,
    rollouts_of,
)
from lightning_div.model.scoring import token_logprobs_batched
from lightning_div.semantic.space import SemanticSpace

PAGE = Path(__file__).resolve().parents[1] / "docs" / "grpo.md"
# logged beside group_metrics' values: the timing and the alert
NOT_METRICS = ("diversity/runtime", "diversity/collapse_alert", "diversity/breakdown_alert")


class StubTrainer:
    """What the callback reads of a TRL GRPO/RLOO trainer: the gathered rollouts, G, the metric buffer."""

    def __init__(self, completions, g=4):
        self._logs = {
            "prompt": deque([f"p{i // g}" for i in range(len(completions))]),
            "completion": deque(completions),
        }
        self.num_generations = g
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        self.callback_handler = SimpleNamespace(callbacks=[])
        self.state = SimpleNamespace(global_step=1)

    def add_callback(self, cb):
        self.callback_handler.callbacks.append(cb)


def _step(cb, trainer, tmp_path, step=1, should_log=True):
    args = SimpleNamespace(output_dir=str(tmp_path))
    state = SimpleNamespace(global_step=step, is_world_process_zero=True)
    cb.on_step_end(args, state, SimpleNamespace(should_log=should_log))


def test_the_callback_adds_the_group_metrics_to_the_steps_log(tmp_path):
    trainer = StubTrainer(BATCH)
    # a TRL prompt ends with the EOS the base model reads after a turn: the sample table showed `<|endoftext|>`
    trainer._logs["prompt"] = deque(f"turn {i // 4}<|endoftext|>" for i in range(len(BATCH)))
    trainer.processing_class = SimpleNamespace(all_special_tokens=["<|endoftext|>", "<pad>"])
    space = SemanticSpace(encoder=TopicEncoder(), num_clusters=4, dirpath=tmp_path, show_progress=False)
    cb = GroupDiversityCallback(space=space, reference_responses=REFERENCES, log_samples=True).attach(trainer)
    assert trainer.callback_handler.callbacks == [cb]
    cb.on_train_begin(SimpleNamespace(output_dir=str(tmp_path)), None, None)
    assert space.fitted  # on the references, before the first step
    _step(cb, trainer, tmp_path, should_log=False)
    assert not trainer._metrics["train"]  # not a logging step: nothing measured
    _step(cb, trainer, tmp_path)
    logged = {k: v[0] for k, v in trainer._metrics["train"].items()}
    expected = {
        "diversity/" + k: v
        for k, v in group_metrics(BATCH, space.assign(BATCH), 4, 4, vocab_size=cb.vocab_size).items()
    }
    assert {k: v for k, v in logged.items() if k not in NOT_METRICS} == expected
    assert logged["diversity/collapse_alert"] == logged["diversity/breakdown_alert"] == 0.0
    # groups: clusters 3, 2, 1 -> 2 per group; the last group collapsed
    assert logged["diversity/group_clusters"] == 2.0
    assert logged["diversity/collapsed_groups"] == pytest.approx(1 / 3)
    assert cb.vocab_size == 4 + 12  # counted once from the references: 4 topic words and the numbers 0..11
    # the sample table: the group with the fewest clusters, the collapsed third one
    rows = (tmp_path / "lightning_div" / "diversity_group_sample_step1.csv").read_text().splitlines()
    record = json.loads((tmp_path / "lightning_div" / "settings" / "GroupDiversityCallback.json").read_text())
    assert record["measures"] == [{"measure": "GroupMeasure", "settings": cb.group.settings()}]
    assert "callback" not in record  # the rollouts are the trainer's: nothing of its own around the measure
    assert record["measures"][0]["settings"]["space"]["num_clusters"] == 4  # what the numbers were measured with
    assert rows[0] == "step,group,prompt,completion,cluster"
    assert [r.split(",")[3] for r in rows[1:]] == BATCH[8:]
    assert [r.split(",")[2] for r in rows[1:]] == ["turn 2"] * 4  # the prompt without its special tokens
    from lightning_div._internal.tracking import shown_text

    assert shown_text("first<|endoftext|>second<|endoftext|>", ["<|endoftext|>"]) == "first / second"  # two turns
    # the same generation batch at the next logging step (steps_per_generation > 1): measured once, logged again
    calls = []
    cb.measure = lambda *a, **k: calls.append(1)  # type: ignore[method-assign]
    _step(cb, trainer, tmp_path, step=2)
    assert (
        calls == [] and trainer._metrics["train"]["diversity/group_sem_ent"] == [logged["diversity/group_sem_ent"]] * 2
    )


def test_without_references_the_clusters_are_fitted_on_the_first_steps_completions(tmp_path):
    completions = [f"{t} {i}" for t in ("yes", "no", "maybe", "hello") for i in range(4)]
    trainer = StubTrainer(completions)
    space = SemanticSpace(encoder=TopicEncoder(), num_clusters=4, dirpath=tmp_path, show_progress=False)
    cb = GroupDiversityCallback(space=space, name="run").attach(trainer)
    cb.on_train_begin(SimpleNamespace(output_dir=str(tmp_path)), None, None)
    assert not space.fitted
    _step(cb, trainer, tmp_path)
    assert space.fitted
    # every group is one topic: all collapsed, one cluster each, entropy 0; the step as a whole has 4 clusters
    assert trainer._metrics["train"]["diversity/run/collapsed_groups"] == [1.0]
    assert trainer._metrics["train"]["diversity/run/group_sem_ent"] == [0.0]
    assert trainer._metrics["train"]["diversity/run/sem_ent"] == [pytest.approx(math.log(4))]


def test_the_callback_reuses_the_rewards_cluster_ids_of_the_same_space(tmp_path):
    space = SemanticSpace(encoder=TopicEncoder(), num_clusters=4, dirpath=tmp_path, show_progress=False)
    reward = SemanticGroupReward(num_generations=4, space=space, reference_responses=REFERENCES)
    other = SemanticGroupReward(num_generations=4, space=SemanticSpace(encoder=TopicEncoder(), dirpath=tmp_path))
    trainer = StubTrainer(BATCH)
    trainer.reward_funcs = [other, reward]
    reward(completions=BATCH)  # the step's reward call: the whole batch assigned once
    expected = {"diversity/" + k: v for k, v in group_metrics(BATCH, space.assign(BATCH), 4, 4, vocab_size=16).items()}
    cb = GroupDiversityCallback(space=space, reference_responses=REFERENCES).attach(trainer)
    space.assign = None  # type: ignore[assignment,method-assign]  # a second embedding pass would fail
    _step(cb, trainer, tmp_path)
    assert cb.reused_reward_ids
    logged = {k: v[0] for k, v in trainer._metrics["train"].items() if k not in NOT_METRICS}
    assert logged == expected
    # other texts than the reward's: not reused
    assert reward.cluster_ids(BATCH[:8], space) is None and reward.cluster_ids(BATCH, other.space) is None


def test_reference_column_of_the_training_dataset(tmp_path):
    datasets = pytest.importorskip("datasets")
    trainer = StubTrainer(BATCH)
    conversational = [[{"role": "assistant", "content": t}] for t in REFERENCES]
    trainer.train_dataset = datasets.Dataset.from_dict({"prompt": ["p"] * len(REFERENCES), "reply": conversational})
    space = SemanticSpace(encoder=TopicEncoder(), num_clusters=4, dirpath=tmp_path, show_progress=False)
    cb = GroupDiversityCallback(space=space, reference_column="reply").attach(trainer)
    assert cb.references() == REFERENCES
    cb.on_train_begin(SimpleNamespace(output_dir=str(tmp_path)), None, None)
    assert space.fitted and cb.vocab_size == 16
    cb.reference_column = "missing"
    cb.vocab_size = None
    with pytest.raises(ValueError, match="reference_column='missing' is not a column of the training dataset"):
        cb.prepare(None, tmp_path)


def test_bad_trainers_and_batches(tmp_path):
    with pytest.raises(TypeError, match="keeps no rollouts"):
        GroupDiversityCallback(space=SemanticSpace(encoder=TopicEncoder())).attach(
            SimpleNamespace(callback_handler=None)
        )
    trainer = StubTrainer(BATCH[:10], g=4)
    space = SemanticSpace(encoder=TopicEncoder(), num_clusters=4, dirpath=tmp_path, show_progress=False)
    cb = GroupDiversityCallback(space=space, reference_responses=REFERENCES).attach(trainer)
    with pytest.warns(RuntimeWarning, match="10 completions cannot be cut into groups of num_generations=4"):
        _step(cb, trainer, tmp_path)
    assert not trainer._metrics["train"]
    shuffled = StubTrainer(BATCH)
    shuffled._logs["prompt"].rotate(1)  # a batch in another order than TRL's samplers lay it out
    other = GroupDiversityCallback(space=space, reference_responses=REFERENCES).attach(shuffled)
    with pytest.warns(RuntimeWarning, match="completion 1 answers another prompt than completion 0"):
        _step(other, shuffled, tmp_path)
    assert not shuffled._metrics["train"]
    strict = GroupDiversityCallback(space=space, on_error="raise", name="strict").attach(trainer)
    with pytest.raises(ValueError, match="is not a multiple of 4"):
        _step(strict, trainer, tmp_path)
    with pytest.raises(ValueError, match="two GroupDiversityCallbacks in this trainer have name='strict'"):
        GroupDiversityCallback(space=space, name="strict").attach(trainer)
    with pytest.raises(ValueError, match="on_error"):
        GroupDiversityCallback(on_error="ignore")
    with pytest.raises(TypeError, match="space must be a lightning_div.SemanticSpace, got str"):
        GroupDiversityCallback(space="minilm")
    with pytest.raises(ValueError, match="name must be None or a non-empty string"):
        GroupDiversityCallback(space=space, name="a/b")
    assert rollouts_of(trainer)[2] == 4


# -- a real GRPOTrainer and RLOOTrainer ----------------------------------------------------------------


def _page_script() -> str:
    section = PAGE.read_text(encoding="utf-8").split("\n## A whole script\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "docs/grpo.md's 'A whole script' has no python block"
    return match.group(1)


@pytest.mark.slow
def test_the_pages_grpo_script_runs_verbatim(tmp_path, monkeypatch, capsys):
    pytest.importorskip("trl")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__main__"}
    exec(compile(_page_script(), str(PAGE), "exec"), namespace)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in lines] == ["step 1", "step 2", "step 3"]
    for line in lines:
        sem_ent, clusters, collapsed = (
            float(x) for x in re.findall(r"(?:Sem-Ent|clusters per group|collapsed groups) ([\d.]+)", line)
        )
        assert 0.0 <= sem_ent <= math.log(4) + 1e-9 and 1.0 <= clusters <= 4.0 and 0.0 <= collapsed <= 1.0
    trainer, space = namespace["trainer"], namespace["space"]
    # the last log holds the metrics of the trainer's own last rollouts, in the same entry as TRL's reward
    last = [log for log in trainer.state.log_history if "diversity/group_sem_ent" in log][-1]
    assert "reward" in last and "entropy" in last
    _, completions, g = rollouts_of(trainer)
    assert g == 4 and len(completions) == 8
    ids = space.assign(completions)
    cb = trainer.callback_handler.callbacks[-1]
    assert isinstance(cb, GroupDiversityCallback)
    expected = {"diversity/" + k: v for k, v in group_metrics(completions, ids, 4, 8, vocab_size=cb.vocab_size).items()}
    for key, value in expected.items():
        assert last[key] == pytest.approx(value, abs=1e-12), key
    # the reward the trainer logged is (quality - its group's least) x DARLING's floored rarity of those completions
    reward = namespace["reward"]
    quality = np.array(namespace["about_eight_words"](completions)).reshape(-1, 4)
    shifted = (quality - quality.min(axis=1, keepdims=True)).reshape(-1)
    diversity = np.array(reward.diversity(completions))
    assert diversity.min() >= 0.1
    assert last["reward"] == pytest.approx(float(np.mean(shifted * diversity)), abs=1e-6)
    assert "rewards/about_eight_words_x_semantic_diversity/mean" in last
    assert (tmp_path / "grpo_run" / "lightning_div" / "diversity_group_sample_step3.csv").is_file()
    # `lightning-div report grpo_run`, as the page says: the diversity/* curves of these very logs, the table
    logs = [log for log in trainer.state.log_history if "diversity/group_sem_ent" in log]
    tags = {f"train/{k}": [log[k] for log in logs] for k in ("diversity/group_sem_ent", "diversity/group_clusters")}
    report_of_hugging_face_run(tmp_path / "grpo_run", tags, "diversity_group_sample_step3.csv", tmp_path / "r.html")


def _rloo_script() -> str:
    section = PAGE.read_text(encoding="utf-8").split("\n## RLOO\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "docs/grpo.md's 'RLOO' has no whole script (a python block)"
    return match.group(1)


@pytest.mark.slow
def test_the_pages_rloo_script_runs_verbatim_and_its_run_reports(tmp_path, monkeypatch, capsys):
    """docs/grpo.md's RLOO script as printed (it was one sentence; the config had to be guessed): the callback
    measures RLOOTrainer's own rollouts, the reward is the group diversity, and `lightning-div report rloo_run`
    charts the diversity/* curves and shows the group sample table."""
    trl = pytest.importorskip("trl")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__main__"}
    exec(compile(_rloo_script(), str(PAGE), "exec"), namespace)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in lines] == ["step 1", "step 2"]
    trainer, space, reward = namespace["trainer"], namespace["space"], namespace["reward"]
    assert isinstance(trainer, trl.RLOOTrainer)
    logs = [log for log in trainer.state.log_history if "diversity/group_sem_ent" in log]
    assert [log["step"] for log in logs] == [1, 2]
    cb = trainer.callback_handler.callbacks[-1]
    _, completions, g = rollouts_of(trainer)
    assert g == 4 and len(completions) == 8
    expected = {
        "diversity/" + k: v
        for k, v in group_metrics(completions, space.assign(completions), g, 4, vocab_size=cb.vocab_size).items()
    }
    assert {k: logs[-1][k] for k in expected} == pytest.approx(expected)
    assert logs[-1]["reward"] == pytest.approx(float(np.mean(reward.diversity(completions))), abs=1e-6)
    # the degeneration signals of the same rollouts: TRL's own clipped ratio, and the NLL under the frozen base model
    assert logs[-1]["diversity/length_cut_share"] == pytest.approx(logs[-1]["completions/clipped_ratio"])
    rollout_prompts = rollouts_of(trainer)[0]
    frozen, tokenizer = namespace["frozen"], namespace["tokenizer"]
    logprobs = token_logprobs_batched(frozen, tokenizer, rollout_prompts, completions, show_progress=False)
    nll = float(np.mean([-lp.mean().item() for lp in logprobs]))
    assert logs[-1]["diversity/reference_nll"] == pytest.approx(nll, rel=1e-5) and nll > 0
    tags = {f"train/{k}": [log[k] for log in logs] for k in ("diversity/group_sem_ent", "diversity/collapsed_groups")}
    report_of_hugging_face_run(tmp_path / "rloo_run", tags, "diversity_group_sample_step2.csv", tmp_path / "r.html")


# Bad input and odd runs (each case failed before its fix)


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
