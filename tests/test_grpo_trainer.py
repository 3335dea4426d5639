"""GroupDiversityMonitor with TRL: called as TRL calls a reward function (fast), a real GRPOTrainer (docs/grpo.md's
script, verbatim) and RLOOTrainer."""

from __future__ import annotations

import json
import math
import re
import warnings
from collections import deque
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from ddp_utils import run_distributed
from docs_blocks import run_page_script
from grpo_setup import (
    BATCH,
    EOS,
    PAD,
    REFERENCES,
    TOPICS,
    StubTrainer,
    begin,
    rollout_step,
    topic_encoder,
    topic_reward,
    topic_space,
)
from helpers import report_of_hugging_face_run

from lightning_div.integrations.trl import (
    GroupDiversityMonitor,
    SemanticGroupReward,
    completion_text,
    cut_share,
    end_token_ids,
    group_metrics,
    rollouts_of,
)
from lightning_div.measure.alerts import GroupAlert
from lightning_div.model.scoring import token_logprobs_batched
from lightning_div.semantic.space import SemanticSpace
from lightning_div.settings import Outputs

PAGE = Path(__file__).resolve().parents[1] / "docs" / "grpo.md"
# logged beside group_metrics' values: the timing and the alert
NOT_METRICS = ("diversity/runtime", "diversity/collapse_alert", "diversity/breakdown_alert")


def test_the_callback_hands_the_group_metrics_to_trls_log_metric(tmp_path):
    trainer = StubTrainer(tmp_path)
    # a TRL prompt ends with the EOS the base model reads after a turn: the sample table showed `<|endoftext|>`
    prompts = [f"turn {i // 4}<|endoftext|>" for i in range(len(BATCH))]
    trainer.processing_class.all_special_tokens = ["<|endoftext|>", "<pad>"]
    trainer.model.generation_config.eos_token_id = [7, 9]  # the model's end-of-turn ids end a completion too
    # completions 0, 5 and 11 end with no end id: cut at the length limit (3 of 12)
    ids = [[4, 5, 6] if i in (0, 5, 11) else [4, (EOS, PAD, 7, 9)[i % 4]] for i in range(len(BATCH))]
    space = SemanticSpace(encoder=topic_encoder(), num_clusters=4, dirpath=tmp_path, show_progress=False)
    cb = GroupDiversityMonitor(space=space, cluster_texts=REFERENCES, outputs=Outputs(log_samples=1))
    assert cb.__name__ == "group_diversity"  # TRL's column: rewards/group_diversity/mean
    trainer.with_callback(cb)
    assert trainer.callback_handler.callbacks == [cb]
    begin(cb, trainer)
    assert space.fitted  # on the references, before the first step
    rollout_step(cb, trainer, BATCH, prompts=prompts, ids=ids)
    logged = {k: v[0] for k, v in trainer.logged.items()}
    expected = {
        "diversity/" + k: v
        for k, v in group_metrics(BATCH, space.assign(BATCH), 4, 4, vocab_size=cb.vocab_size).items()
    }
    assert {k: v for k, v in logged.items() if k not in NOT_METRICS and k != "diversity/length_cut_share"} == expected
    assert logged["diversity/length_cut_share"] == 0.25  # TRL's clipped-ratio rule on the completions' ids
    assert logged["diversity/collapse_alert"] == logged["diversity/breakdown_alert"] == 0.0
    # groups: clusters 3, 2, 1 -> 2 per group; the last group collapsed
    assert logged["diversity/group_clusters"] == 2.0
    assert logged["diversity/collapsed_groups"] == pytest.approx(1 / 3)
    assert cb.vocab_size == 4 + 12  # counted once from the references: 4 topic words and the numbers 0..11
    # the batch it measured, whole, for whoever reads the rollouts (rollouts_of's successor)
    batch = cb.last_batch
    assert batch is not None and (batch.prompts, batch.completions, batch.completion_ids) == (prompts, BATCH, ids)
    assert (batch.num_generations, batch.step) == (4, 1)
    # the sample table: the group with the fewest clusters, the collapsed third one
    rows = (tmp_path / "lightning_div" / "diversity_group_sample_step1.csv").read_text().splitlines()
    record = json.loads((tmp_path / "lightning_div" / "settings" / "GroupDiversityMonitor.json").read_text())
    assert record["measures"] == [{"measure": "GroupMeasure", "settings": cb.group.settings()}]
    assert "callback" not in record  # the rollouts are the trainer's: nothing of its own around the measure
    assert record["measures"][0]["settings"]["space"]["num_clusters"] == 4  # what the numbers were measured with
    assert rows[0] == "step,group,prompt,completion,cluster"
    assert [r.split(",")[3] for r in rows[1:]] == BATCH[8:]
    assert [r.split(",")[2] for r in rows[1:]] == ["turn 2"] * 4  # the prompt without its special tokens
    from lightning_div._internal.tracking import shown_text

    assert shown_text("first<|endoftext|>second<|endoftext|>", ["<|endoftext|>"]) == "first / second"  # two turns
    # every generation batch is measured once, when TRL scores it: the next one is the next value
    collapsed = [f"{TOPICS[i // 4]} {i}" for i in range(12)]
    rollout_step(cb, trainer, collapsed, step=2)
    assert trainer.logged["diversity/group_sem_ent"] == [logged["diversity/group_sem_ent"], 0.0]
    assert [h["step"] for h in cb.history] == [1.0, 2.0] and cb.history[0]["diversity/group_sem_ent"] > 0
    assert "diversity/length_cut_share" not in cb.history[1]  # no completion_ids given: the share is unknown
    assert (tmp_path / "lightning_div" / "diversity_group_sample_step2.csv").is_file()
    assert trainer.state.stateful_callbacks["lightning_div.GroupDiversityMonitor"] == cb.state_dict()


def test_the_length_cut_share_follows_trls_rule():
    # TRL: a completion is cut when its last id is none of the EOS ids (tokenizer's and the model's) nor the pad id
    assert cut_share([[5, 2], [5, 6, 7], [2], [0]], end_ids={2, 0}) == 0.25
    assert cut_share([[5, 9], [9, 9], []], end_ids={9}) == 0.0  # a completion without a token reached no limit
    assert cut_share([], end_ids={2}) == 0.0
    trainer = SimpleNamespace(
        processing_class=SimpleNamespace(tokenizer=SimpleNamespace(eos_token_id=2, pad_token_id=None)),
        model=SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=7)),
    )
    assert end_token_ids(trainer) == {2, 7}  # a processor's tokenizer; the model's EOS as one int
    trainer.model.generation_config.eos_token_id = [7, 8]
    assert end_token_ids(trainer) == {2, 7, 8}
    assert end_token_ids(SimpleNamespace(processing_class=None)) is None


def test_without_references_the_clusters_are_fitted_on_the_first_steps_completions(tmp_path):
    completions = [f"{t} {i}" for t in ("yes", "no", "maybe", "hello") for i in range(4)]
    trainer = StubTrainer(tmp_path)
    space = SemanticSpace(encoder=topic_encoder(), num_clusters=4, dirpath=tmp_path, show_progress=False)
    cb = trainer.with_callback(GroupDiversityMonitor(space=space, name="run"))
    assert cb.__name__ == "group_diversity_run"  # two callbacks, two reward columns
    begin(cb, trainer)
    assert not space.fitted
    rollout_step(cb, trainer, completions)
    assert space.fitted
    # every group is one topic: all collapsed, one cluster each, entropy 0; the step as a whole has 4 clusters
    assert trainer.logged["diversity/run/collapsed_groups"] == [1.0]
    assert trainer.logged["diversity/run/group_sem_ent"] == [0.0]
    assert trainer.logged["diversity/run/sem_ent"] == [pytest.approx(math.log(4))]


def test_the_callback_reuses_the_rewards_cluster_ids_of_the_same_space(tmp_path):
    space = SemanticSpace(encoder=topic_encoder(), num_clusters=4, dirpath=tmp_path, show_progress=False)
    reward = SemanticGroupReward(num_generations=4, space=space, cluster_texts=REFERENCES)
    other = SemanticGroupReward(num_generations=4, space=SemanticSpace(encoder=topic_encoder(), dirpath=tmp_path))
    trainer = StubTrainer(tmp_path)
    trainer.reward_funcs = [other, reward]
    reward(completions=BATCH)  # the step's reward call, before the callback's: the whole batch assigned once
    expected = {"diversity/" + k: v for k, v in group_metrics(BATCH, space.assign(BATCH), 4, 4, vocab_size=16).items()}
    cb = trainer.with_callback(GroupDiversityMonitor(space=space, cluster_texts=REFERENCES))
    space.assign = None  # type: ignore[assignment,method-assign]  # a second embedding pass would fail
    rollout_step(cb, trainer, BATCH)
    assert cb.reused_reward_ids
    logged = {k: v[0] for k, v in trainer.logged.items() if k not in NOT_METRICS}
    assert logged == expected
    # other texts than the reward's: not reused
    assert reward.cluster_ids(BATCH[:8], space) is None and reward.cluster_ids(BATCH, other.space) is None


def test_cluster_column_of_the_training_dataset(tmp_path):
    datasets = pytest.importorskip("datasets")
    trainer = StubTrainer(tmp_path)
    conversational = [[{"role": "assistant", "content": t}] for t in REFERENCES]
    trainer.train_dataset = datasets.Dataset.from_dict({"prompt": ["p"] * len(REFERENCES), "reply": conversational})
    space = SemanticSpace(encoder=topic_encoder(), num_clusters=4, dirpath=tmp_path, show_progress=False)
    cb = trainer.with_callback(GroupDiversityMonitor(space=space, cluster_column="reply"))
    assert cb.references() == REFERENCES
    begin(cb, trainer)
    assert space.fitted and cb.vocab_size == 16
    cb.cluster_column = "missing"
    cb.vocab_size = None
    with pytest.raises(ValueError, match="cluster_column='missing' is not a column of the training dataset"):
        cb.prepare(None, tmp_path)


def test_bad_trainers_and_batches(tmp_path):
    space = SemanticSpace(encoder=topic_encoder(), num_clusters=4, dirpath=tmp_path, show_progress=False)
    lone = GroupDiversityMonitor(space=space)
    with pytest.raises(ValueError, match=r"is not in the trainer's reward_funcs: .*reward_funcs=\[my_reward, divers"):
        lone.attach(StubTrainer(tmp_path))
    with pytest.raises(TypeError, match="SimpleNamespace has no args.num_generations: GroupDiversityMonitor measures"):
        lone.attach(SimpleNamespace(reward_funcs=[lone], callback_handler=SimpleNamespace(callbacks=[])))
    # in reward_funcs, never attached: the first batch says what to do
    with pytest.raises(RuntimeError, match=r"in reward_funcs but not attached: call diversity.attach\(trainer\)"):
        lone(prompts=["p"] * 4, completions=BATCH[:4], log_metric=lambda k, v: None)
    # a TRL older than 1.0 (or a trainer that is not GRPO/RLOO) passes no log_metric: one message, not a KeyError
    with pytest.raises(TypeError, match=r"called without TRL's log_metric=: it needs TRL >= 1.0"):
        lone(prompts=["p"] * 4, completions=BATCH[:4], trainer_state=SimpleNamespace(global_step=0))
    trainer = StubTrainer(tmp_path)
    cb = trainer.with_callback(GroupDiversityMonitor(space=space, cluster_texts=REFERENCES))
    with pytest.warns(RuntimeWarning, match="10 completions cannot be cut into groups of num_generations=4"):
        rollout_step(cb, trainer, BATCH[:10])
    assert not trainer.logged and cb.history == [] and cb.last_batch is None
    shuffled = StubTrainer(tmp_path)
    other = shuffled.with_callback(GroupDiversityMonitor(space=space, cluster_texts=REFERENCES))
    rotated = deque(f"p{i // 4}" for i in range(len(BATCH)))
    rotated.rotate(1)  # a batch in another order than TRL's samplers lay it out
    with pytest.warns(RuntimeWarning, match="completion 1 answers another prompt than completion 0"):
        rollout_step(other, shuffled, BATCH, prompts=list(rotated))
    assert not shuffled.logged
    strict = trainer.with_callback(GroupDiversityMonitor(space=space, on_error="raise", name="strict"))
    with pytest.raises(ValueError, match="is not a multiple of 4"):
        rollout_step(strict, trainer, BATCH[:10])
    with pytest.raises(ValueError, match="two GroupDiversityMonitors in this trainer have name='strict'"):
        trainer.with_callback(GroupDiversityMonitor(space=space, name="strict"))
    with pytest.raises(ValueError, match="on_error"):
        GroupDiversityMonitor(on_error="ignore")
    with pytest.raises(TypeError, match="space must be a lightning_div.SemanticSpace, got str"):
        GroupDiversityMonitor(space="minilm")
    with pytest.raises(ValueError, match="name must be None or a non-empty string"):
        GroupDiversityMonitor(space=space, name="a/b")


# the cut share's test batch: completions 0, 5 and 11 end without an end id (3 of 12); 5 is process 0's, 11 process 1's
CUT_IDS = [[4, 5, 6] if i in (0, 5, 11) else [4, EOS] for i in range(len(BATCH))]


def _callback_on(rank, world, out):
    """TRL's call of the callback on this process's 6 of the 12 completions (group 2 straddles the processes)."""
    trainer = StubTrainer(out)
    trainer.state.is_world_process_zero = rank == 0
    space = SemanticSpace(encoder=topic_encoder(), num_clusters=4, dirpath=out, show_progress=False)
    cb = trainer.with_callback(GroupDiversityMonitor(space=space, cluster_texts=REFERENCES))
    begin(cb, trainer)
    mine = slice(6 * rank, 6 * (rank + 1))
    rollout_step(cb, trainer, BATCH[mine], prompts=[f"p{i // 4}" for i in range(12)][mine], ids=CUT_IDS[mine])
    logged = {k: v for k, v in trainer.logged.items() if k != "diversity/runtime"}
    return logged, cb.last_batch.completions, cb.last_batch.completion_ids


@pytest.mark.slow
@pytest.mark.xdist_group("two_processes")
def test_two_processes_log_what_one_process_logs_for_the_whole_batch(tmp_path):
    """Each process gets its slice from TRL; the callback gathers them and every process logs the whole batch's
    values (TRL then averages equal values across the processes: the one-process value)."""
    results = run_distributed(_callback_on, 2, str(tmp_path / "ddp"), timeout_s=120)
    trainer = StubTrainer(tmp_path / "one")
    cb = trainer.with_callback(GroupDiversityMonitor(space=topic_space(tmp_path / "one"), cluster_texts=REFERENCES))
    begin(cb, trainer)
    rollout_step(cb, trainer, BATCH, ids=CUT_IDS)
    one = {k: v for k, v in trainer.logged.items() if k != "diversity/runtime"}
    assert one["diversity/length_cut_share"] == [0.25] and one["diversity/collapsed_groups"] == [pytest.approx(1 / 3)]
    for logged, completions, ids in results:
        assert logged == one and completions == BATCH and ids == CUT_IDS
    # the sample table is the first process's alone
    assert (tmp_path / "ddp" / "lightning_div" / "diversity_group_sample_step1.csv").is_file()


def test_rollouts_of_is_deprecated_and_names_its_replacement():
    """0.1's public rollouts_of reads TRL's private trainer._logs: kept for one release, with a warning."""
    trainer = SimpleNamespace(_logs={"prompt": deque(["p", "p"]), "completion": deque(["a", "b"])}, num_generations=2)
    with pytest.warns(DeprecationWarning, match=r"rollouts_of is deprecated .*GroupDiversityMonitor\.last_batch"):
        assert rollouts_of(trainer) == (["p", "p"], ["a", "b"], 2)
    with pytest.warns(DeprecationWarning), pytest.raises(TypeError, match="SimpleNamespace keeps no rollouts"):
        rollouts_of(SimpleNamespace())


# -- a real GRPOTrainer and RLOOTrainer ----------------------------------------------------------------


@pytest.mark.slow
def test_the_pages_grpo_script_runs_verbatim(tmp_path, monkeypatch, capsys):
    pytest.importorskip("trl")
    monkeypatch.chdir(tmp_path)
    namespace = run_page_script(PAGE, "A whole script")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in lines] == ["step 1", "step 2", "step 3"]
    for line in lines:
        sem_ent, clusters, collapsed = (
            float(x) for x in re.findall(r"(?:Sem-Ent|clusters per group|collapsed groups) ([\d.]+)", line)
        )
        assert 0.0 <= sem_ent <= math.log(4) + 1e-9 and 1.0 <= clusters <= 4.0 and 0.0 <= collapsed <= 1.0
    trainer, space, cb = namespace["trainer"], namespace["space"], namespace["diversity"]
    assert isinstance(cb, GroupDiversityMonitor) and trainer.callback_handler.callbacks[-1] is cb
    # the last log holds the metrics of the trainer's own last rollouts, in the same entry as TRL's reward
    last = [log for log in trainer.state.log_history if "diversity/group_sem_ent" in log][-1]
    assert "reward" in last and "entropy" in last
    batch = cb.last_batch  # what TRL handed the callback as a reward function: the last generation batch
    completions, g = batch.completions, batch.num_generations
    assert g == 4 and len(completions) == 8 and batch.step == 3
    # the deprecated rollouts_of reads the same batch from TRL's private buffer (on the TRL installed): the same
    # completions and G; the prompts up to the tokenizer's end token, which one of the two carries and not the
    # other (which one differs between TRL 1.0 and 1.16)
    with pytest.warns(DeprecationWarning, match="GroupDiversityMonitor.last_batch"):
        prompts, buffered, g = rollouts_of(trainer)
    assert (buffered, g) == (completions, 4)
    eos = "<|endoftext|>"
    assert [p.removesuffix(eos) for p in prompts] == [p.removesuffix(eos) for p in batch.prompts]
    ids = space.assign(completions)
    expected = {"diversity/" + k: v for k, v in group_metrics(completions, ids, 4, 8, vocab_size=cb.vocab_size).items()}
    for key, value in expected.items():
        assert cb.history[-1][key] == pytest.approx(value, abs=1e-12), key
        # TRL averages what a reward function logs in float32 (a tensor gathered from every process)
        assert last[key] == pytest.approx(value, rel=1e-6, abs=1e-7), key
    # the reward the trainer logged is (quality - its group's least) x DARLING's floored rarity of those completions
    reward = namespace["reward"]
    quality = np.array(namespace["about_eight_words"](completions)).reshape(-1, 4)
    shifted = (quality - quality.min(axis=1, keepdims=True)).reshape(-1)
    diversity = np.array(reward.diversity(completions))
    assert diversity.min() >= 0.1
    assert last["reward"] == pytest.approx(float(np.mean(shifted * diversity)), abs=1e-6)  # the callback adds 0
    assert "rewards/about_eight_words_x_semantic_diversity/mean" in last
    assert last["rewards/group_diversity/mean"] == 0.0
    assert cb.reused_reward_ids  # after the reward in reward_funcs: its cluster ids, no second embedding pass
    # the length-cut share from the completions' ids equals TRL's own clipped ratio of the batch
    assert last["diversity/length_cut_share"] == pytest.approx(last["completions/clipped_ratio"])
    assert (tmp_path / "grpo_run" / "lightning_div" / "diversity_group_sample_step3.csv").is_file()
    # `lightning-div report grpo_run`, as the page says: the diversity/* curves of these very logs, the table
    logs = [log for log in trainer.state.log_history if "diversity/group_sem_ent" in log]
    tags = {f"train/{k}": [log[k] for log in logs] for k in ("diversity/group_sem_ent", "diversity/group_clusters")}
    report_of_hugging_face_run(tmp_path / "grpo_run", tags, "diversity_group_sample_step3.csv", tmp_path / "r.html")


@pytest.mark.slow
def test_the_pages_rloo_script_runs_verbatim_and_its_run_reports(tmp_path, monkeypatch, capsys):
    """docs/grpo.md's RLOO script as printed (it was one sentence; the config had to be guessed): the callback
    measures RLOOTrainer's own rollouts, the reward is the group diversity, and `lightning-div report rloo_run`
    charts the diversity/* curves and shows the group sample table."""
    trl = pytest.importorskip("trl")
    monkeypatch.chdir(tmp_path)
    namespace = run_page_script(PAGE, "RLOO")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in lines] == ["step 1", "step 2"]
    trainer, space, reward, cb = namespace["trainer"], namespace["space"], namespace["reward"], namespace["diversity"]
    assert isinstance(trainer, trl.RLOOTrainer)
    logs = [log for log in trainer.state.log_history if "diversity/group_sem_ent" in log]
    assert [log["step"] for log in logs] == [1, 2] and [h["step"] for h in cb.history] == [1.0, 2.0]
    completions, g = cb.last_batch.completions, cb.last_batch.num_generations
    assert g == 4 and len(completions) == 8
    expected = {
        "diversity/" + k: v
        for k, v in group_metrics(completions, space.assign(completions), g, 4, vocab_size=cb.vocab_size).items()
    }
    assert {k: logs[-1][k] for k in expected} == pytest.approx(expected)
    assert logs[-1]["reward"] == pytest.approx(float(np.mean(reward.diversity(completions))), abs=1e-6)
    # the degeneration signals of the same rollouts: the cut share by TRL's rule (its own clipped ratio), and the
    # NLL under the frozen base model
    assert logs[-1]["diversity/length_cut_share"] == pytest.approx(logs[-1]["completions/clipped_ratio"])
    rollout_prompts = cb.last_batch.prompts
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
        topic_reward(tmp_path)(completions=surrogate)
    # in the callback the same data is a failed measurement: a warning (on_error="warn"), training goes on
    for bad in (surrogate, [[{"role": "assistant", "content": 5}]] + [[{"role": "assistant", "content": "x"}]] * 3):
        trainer = StubTrainer(tmp_path)
        cb = trainer.with_callback(GroupDiversityMonitor(space=topic_space(tmp_path), cluster_texts=REFERENCES))
        with pytest.warns(RuntimeWarning, match=r"completions\[[01]\]"):
            rollout_step(cb, trainer, bad)
        assert not trainer.logged


def test_the_rewards_default_cache_is_not_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LIGHTNING_DIV_CACHE", str(tmp_path / "user_cache"))
    completions = [f"{t} {i}" for t in TOPICS for i in range(4)]
    reward = SemanticGroupReward(num_generations=4, space=SemanticSpace(encoder=topic_encoder(), num_clusters=4))
    reward(completions=completions)
    assert not (tmp_path / "lightning_div_cache").exists()
    assert {p.parent for p in (tmp_path / "user_cache").rglob("*.npz")} == {tmp_path / "user_cache" / "clusters"}
    # a space shared with the monitor (the coupling is the object): the monitor fits it at the start, in the
    # run's own folder, and sets nothing on the reward (0.2's monitor found the reward and set its folder)
    space = SemanticSpace(encoder=topic_encoder(), num_clusters=3, show_progress=False)
    shared = SemanticGroupReward(num_generations=4, space=space, cluster_texts=REFERENCES)
    trainer = StubTrainer(tmp_path / "run")
    trainer.reward_funcs = [shared]
    cb = trainer.with_callback(GroupDiversityMonitor(space=space, cluster_texts=REFERENCES))
    begin(cb, trainer)
    assert space.fitted and Path(str(space.clusters_path)).parent == tmp_path / "run" / "lightning_div_cache"
    assert shared.cache_dir() == tmp_path / "user_cache" / "clusters"  # the reward's own setting, untouched
    shared(completions=completions)  # the reward finds the shared space fitted: nothing fitted again
    assert len(list((tmp_path / "run").rglob("clusters-*.npz"))) == 1


def test_a_callback_given_in_callbacks_says_it_measures_nothing(tmp_path):
    cb = GroupDiversityMonitor(space=topic_space(tmp_path))
    args = SimpleNamespace(output_dir=str(tmp_path))
    with pytest.warns(
        RuntimeWarning, match=r"given to the trainer in callbacks=\[...\].*reward_funcs=.*attach\(trainer\)"
    ):
        cb.on_train_begin(args, SimpleNamespace(global_step=0), None)
    cb.on_step_end(args, SimpleNamespace(global_step=1), SimpleNamespace(should_log=True))  # nothing, no error
    assert cb.history == []


def test_evaluation_rollouts_are_not_measured(tmp_path):
    trainer = StubTrainer(tmp_path)
    cb = trainer.with_callback(GroupDiversityMonitor(space=topic_space(tmp_path), cluster_texts=REFERENCES))
    begin(cb, trainer)
    rollout_step(cb, trainer, BATCH, step=1)
    trained, batch = trainer.logged["diversity/group_sem_ent"][0], cb.last_batch
    assert trained > 0
    # an evaluation's rollouts (every group collapsed): TRL scores them with the model out of training mode
    trainer.model.training = False
    rollout_step(cb, trainer, ["no x"] * 12, step=2)
    assert trainer.logged["diversity/group_sem_ent"] == [trained] and len(cb.history) == 1 and cb.last_batch is batch
    # back in training: the next generation batch is measured
    trainer.model.training = True
    rollout_step(cb, trainer, ["no y"] * 12, step=2)
    assert trainer.logged["diversity/group_sem_ent"] == [trained, 0.0]


def test_a_resumed_run_measures_in_the_interrupted_runs_clusters(tmp_path):
    """No references: the clusters are fitted on the first step's completions, and a resume must not refit them."""
    first_batch = [f"{t} {i}" for t in TOPICS for i in range(3)]
    resumed_batch = ["yes z"] * 4 + ["no z"] * 8  # fitted on, these would make other clusters

    def run(batch, state, cache):
        space = SemanticSpace(encoder=topic_encoder(), num_clusters=4, dirpath=cache, show_progress=False)
        trainer = StubTrainer(tmp_path)
        trainer.state = state
        cb = trainer.with_callback(
            GroupDiversityMonitor(space=space, outputs=Outputs(log_samples=0), alert=GroupAlert(start_steps=1))
        )
        begin(cb, trainer)
        rollout_step(cb, trainer, batch, step=state.global_step + 1)  # the batch that trains the next step
        return cb, space

    state = SimpleNamespace(global_step=0, is_world_process_zero=True, stateful_callbacks={})
    interrupted, space = run(first_batch, state, tmp_path / "cache")
    (start,) = interrupted.alert.values["group_sem_ent"]
    assert start > 0
    # trainer_state.json, written at the checkpoint and read back at the resume
    saved = json.loads(json.dumps(state.stateful_callbacks))
    assert saved["lightning_div.GroupDiversityMonitor"]["measure"]["vocab_size"] == interrupted.vocab_size
    assert set(saved["lightning_div.GroupDiversityMonitor"]) == {"settings", "measure", "alert"}  # nested by part
    resumed_state = SimpleNamespace(global_step=1, is_world_process_zero=True, stateful_callbacks=saved)
    with pytest.warns(RuntimeWarning, match="step 2: group diversity collapsed"):
        resumed, resumed_space = run(resumed_batch, resumed_state, tmp_path / "cache")
    assert resumed_space.clusters_path == space.clusters_path
    assert resumed.group.last_ids.tolist() == space.assign(resumed_batch).tolist()
    assert resumed.vocab_size == interrupted.vocab_size  # counted on the first batch, not the resumed one
    assert resumed.alert.values["group_sem_ent"] == [start, 0.0]  # the alert's start carried over
    assert resumed.history[-1]["diversity/collapse_alert"] == 1.0
    # a state saved with other settings is said, and the run starts afresh
    other = GroupDiversityMonitor(space=topic_space(tmp_path, kmeans_seed=7))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        other.load_state_dict(saved["lightning_div.GroupDiversityMonitor"])
    assert any("was saved with other settings" in str(w.message) for w in caught)
    with pytest.warns(RuntimeWarning, match=r"is damaged \(vocab_size 'x' is not an integer >= 1\)"):
        GroupDiversityMonitor(space=topic_space(tmp_path)).load_state_dict(
            {**saved["lightning_div.GroupDiversityMonitor"], "measure": {"space": {}, "vocab_size": "x"}}
        )
