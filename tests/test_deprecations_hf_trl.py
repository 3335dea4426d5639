"""The Hugging Face and TRL front ends' 0.2 names and keyword arguments still work for one release, with a warning."""

from __future__ import annotations

import importlib

import pytest
from grpo_setup import BATCH, REFERENCES, StubTrainer, begin, rollout_step, topic_encoder
from transformers import TrainingArguments

from lightning_div.integrations import transformers as hf
from lightning_div.integrations import trl
from lightning_div.integrations.transformers import RUQPlot, TrainerDiversityMonitor
from lightning_div.integrations.trl import GroupDiversityMonitor, SemanticGroupReward
from lightning_div.measure.alerts import GroupAlert, RUQAlert
from lightning_div.semantic.space import SemanticSpace
from lightning_div.settings import Generation, Lexical, Outputs

PAIRS = [(f"c{i}", f"r{i}") for i in range(30)]


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [
        ("lightning_div.integrations.transformers", "DiversityTrainerCallback", TrainerDiversityMonitor),
        ("lightning_div.integrations.trl", "GroupDiversityCallback", GroupDiversityMonitor),
        ("lightning_div.integrations.trl.callback", "GroupDiversityCallback", GroupDiversityMonitor),
    ],
)
def test_the_0_2_class_names_are_the_monitors_with_a_warning(module, old, new):
    with pytest.warns(DeprecationWarning, match=rf"{module}\.{old} is deprecated .* use .*\.{new.__name__}"):
        cls = getattr(importlib.import_module(module), old)
    assert cls is new
    with pytest.raises(AttributeError, match="has no attribute 'GroupDiversityCallbacks'"):
        trl.GroupDiversityCallbacks  # noqa: B018 - a name that never existed is still an error
    assert "DiversityTrainerCallback" not in hf.__all__ and "GroupDiversityCallback" not in trl.__all__


def test_the_hf_monitors_0_2_keywords_give_the_1_0_settings():
    new = TrainerDiversityMonitor(
        PAIRS,
        cluster_texts=["a", "b"],
        num_contexts=5,
        num_train_contexts=7,
        train_pairs=PAIRS,
        alert=RUQAlert(warn_below=20.0, warn_drop=5.0),
        generation=Generation(batch_size=4, max_new_tokens=9),
        outputs=Outputs(log_samples=2, cluster_views=False, show_progress=False, dirpath="cache"),
        ruq_plot=RUQPlot(num_contexts=3, num_beams=2),
    )
    with pytest.warns(DeprecationWarning) as caught:
        old = TrainerDiversityMonitor(
            PAIRS,
            gold_responses=["a", "b"],
            num_contexts=5,
            num_ruq_prompts=5,
            num_train_ruq_prompts=7,
            train_pairs=PAIRS,
            warn_below=20.0,
            warn_drop=5.0,
            batch_size=4,
            max_new_tokens=9,
            log_samples=2,
            cluster_views=False,
            show_progress=False,
            dirpath="cache",
            ruq_plot=True,
            num_plot_prompts=3,
            num_beams=2,
            seed=3,
        )
    said = {str(w.message).split("(")[1].split("=")[0]: str(w.message) for w in caught}
    assert said["gold_responses"].endswith("use cluster_texts=...")
    assert said["num_ruq_prompts"].endswith("use num_contexts=...")
    assert said["warn_drop"].endswith("use alert=...(warn_drop=...)")
    assert said["batch_size"].endswith("use generation=...(batch_size=...)")
    assert said["dirpath"].endswith("use outputs=...(dirpath=...)")
    assert said["num_beams"].endswith("use ruq_plot=...(num_beams=...)")
    assert said["seed"].endswith("use TrainingArguments=...(seed=...)")
    assert len(caught) == 14  # one warning for each 0.2 keyword
    new.read_arguments(TrainingArguments(output_dir="unused", seed=3))
    old.read_arguments(TrainingArguments(output_dir="unused", seed=42))  # 0.2's seed= still wins for now
    assert old.settings() == new.settings() and old.sample() == new.sample()
    assert old.evaluation.data.cluster_texts() == ["a", "b"]
    for attr in ("batch_size", "max_new_tokens", "dirpath", "plot"):
        assert getattr(old.evaluation, attr) == getattr(new.evaluation, attr), attr
    alerts = [(m.evaluation.alert.warn_below, m.evaluation.alert.warn_drop) for m in (old, new)]
    assert alerts == [(20.0, 5.0)] * 2
    for m in (old, new):
        assert (m.log_samples, m.cluster_views, m.show_progress) == (2, False, False)


def test_the_hf_monitor_reads_what_training_arguments_hold_and_given_settings_win():
    monitor = TrainerDiversityMonitor(PAIRS, num_contexts=5)
    monitor.read_arguments(TrainingArguments(output_dir="o", seed=7, per_device_eval_batch_size=3, disable_tqdm=True))
    assert monitor.evaluation.seed == 7 and monitor.settings()["seed"] == 7
    assert monitor.evaluation.batch_size == 3 == monitor.evaluation.semantic.batch_size == monitor.space.batch_size
    assert not monitor.show_progress and not monitor.evaluation.semantic.show_progress
    explicit = TrainerDiversityMonitor(
        PAIRS, num_contexts=5, generation=Generation(batch_size=16), outputs=Outputs(show_progress=True)
    )
    explicit.read_arguments(TrainingArguments(output_dir="o", per_device_eval_batch_size=3, disable_tqdm=True))
    assert explicit.evaluation.batch_size == 16 and explicit.show_progress
    # a sample drawn before the trainer's seed was known is drawn again with it
    early = TrainerDiversityMonitor(PAIRS, num_contexts=5)
    before = early.sample()
    early.read_arguments(TrainingArguments(output_dir="o", seed=7))
    assert early.sample() == monitor.sample() != before


def test_a_0_2_checkpoint_of_the_hf_callback_resumes_under_1_0():
    from lightning_div.integrations.transformers._evaluation import state_from_0_2

    monitor = TrainerDiversityMonitor(PAIRS, num_contexts=5)
    settings = monitor.settings()
    shares = [0.5, 0.5] + [0.0] * 18
    old = {
        "settings": {**{k: v for k, v in settings.items() if k not in ("num_ruq_contexts", "num_train_contexts")}},
        "gold_logged": True,
        "share_history": [[2, shares]],
        "last_ruq": 40.0,
        "indices": {"eval": [0, 1, 2, 3, 4], "ruq": None, "train": None},
    }
    old["settings"].update(num_ruq_prompts=settings["num_ruq_contexts"], num_train_ruq_prompts=None)
    monitor.load_state_dict(state_from_0_2(old))
    assert monitor.last_ruq == 40.0 and monitor.share_history == [(2, shares)]
    assert [p.response for p in monitor.sample()] == ["r0", "r1", "r2", "r3", "r4"]


def test_the_trl_monitors_0_2_keywords_give_the_1_0_settings(tmp_path):
    space = SemanticSpace(encoder=topic_encoder(), num_clusters=4, dirpath=tmp_path, show_progress=False)
    new = GroupDiversityMonitor(
        space=space,
        cluster_texts=REFERENCES,
        lexical=Lexical(metrics=("distinct_1",), vocab_size=50),
        alert=GroupAlert(warn_drop=0.5, start_steps=2, top_word_share=None),
        ref_model=None,
        outputs=Outputs(log_samples=0, dirpath=str(tmp_path)),
    )
    with pytest.warns(DeprecationWarning) as caught:
        old = GroupDiversityMonitor(
            space=space,
            reference_responses=REFERENCES,
            lexical_metrics=("distinct_1",),
            vocab_size=50,
            warn_drop=0.5,
            alert_start_steps=2,
            breakdown_top_word=None,
            reference_model=None,
            log_samples=False,
            dirpath=str(tmp_path),
        )
    messages = [str(w.message) for w in caught]
    assert len(messages) == 9  # one for each 0.2 keyword
    assert messages[0].startswith("GroupDiversityMonitor(reference_responses=...) is deprecated")
    assert any(m.endswith("use alert=...(start_steps=...)") for m in messages)
    assert any(m.endswith("use ref_model=...") for m in messages)
    assert (old.cluster_texts, old.dirpath, old.log_samples) == (new.cluster_texts, new.dirpath, new.log_samples)
    assert old.group.settings() == new.group.settings()
    for attr in ("warn_drop", "warn_below", "start_steps", "top_word_share", "cut_rise", "nll_rise"):
        assert getattr(old.alert, attr) == getattr(new.alert, attr), attr
    # the same numbers, and an alert built from 0.2's keywords names them in its reasons, as 0.2's did
    for monitor in (old, new):
        trainer = StubTrainer(tmp_path)
        trainer.with_callback(monitor)
        begin(monitor, trainer)
        rollout_step(monitor, trainer, BATCH)
    assert old.history[0].keys() == new.history[0].keys()
    assert {k: v for k, v in old.history[0].items() if k != "diversity/runtime"} == {
        k: v for k, v in new.history[0].items() if k != "diversity/runtime"
    }
    assert old.alert.names["start_steps"] == "alert_start_steps" and new.alert.names == {}
    with (
        pytest.raises(TypeError, match=r"got cluster_texts= and its 0.2 name: give cluster_texts= alone"),
        pytest.warns(DeprecationWarning, match=r"reference_responses=\.\.\.\) is deprecated"),
    ):
        GroupDiversityMonitor(cluster_texts=["a"], reference_responses=["b"])


def test_the_rewards_reference_responses_is_cluster_texts(tmp_path):
    space = SemanticSpace(encoder=topic_encoder(), num_clusters=4, dirpath=tmp_path, show_progress=False)
    with pytest.warns(
        DeprecationWarning,
        match=r"SemanticGroupReward\(reference_responses=\.\.\.\) is deprecated .* use cluster_texts",
    ):
        old = SemanticGroupReward(num_generations=4, reference_responses=REFERENCES, space=space)
    new = SemanticGroupReward(num_generations=4, cluster_texts=REFERENCES, space=space)
    assert old.cluster_texts == new.cluster_texts == list(REFERENCES)
    assert old(completions=BATCH) == new(completions=BATCH)
    with pytest.raises(TypeError, match=r"SemanticGroupReward\(\) got an unexpected keyword argument 'nope'"):
        SemanticGroupReward(num_generations=4, nope=1)  # type: ignore[call-arg]
