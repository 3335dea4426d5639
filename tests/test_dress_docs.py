"""docs/callbacks/dress.md's own-datamodule script runs as printed; the batch layouts it yields; the layout checks.

Also: the configs and the experiment that claim the paper's DRESS settings pass them explicitly,
so the change of the defaults (issue 43) does not change them.
"""

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from docs_blocks import snippet_block

from lightning_div import DialoguePair
from lightning_div.callbacks import DRESSReweighting, SemanticDiversityMonitor
from lightning_div.datamodules import Negatives
from lightning_div.settings import Mining

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "callbacks" / "dress.md"


def script() -> str:
    return snippet_block(PAGE.read_text(encoding="utf-8"), "own-datamodule")


def definitions() -> dict:
    """The script's imports, data and classes, without building the Trainer (everything before it)."""
    code = script()
    head = code[: code.index("space = SemanticSpace(")]
    namespace: dict = {"__name__": "docs"}
    exec(compile(head, "docs/callbacks/dress.md", "exec"), namespace)
    return namespace


@pytest.mark.slow
def test_the_own_datamodule_script_runs_as_printed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(script(), "docs/callbacks/dress.md", "exec"), namespace)
    trainer = namespace["trainer"]
    assert trainer.current_epoch == trainer.max_epochs == 2
    dress = next(cb for cb in trainer.callbacks if isinstance(cb, DRESSReweighting))
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    # the batches carried DRESS's fields: negatives were trained (as unlikelihood: >= 0) beside the gold loss
    assert metrics["train/negative_loss_epoch"] >= 0.0 and metrics["train/loss_epoch"] > 0.0
    assert len(dress.state.negative_pairs) == 64 and metrics["dress/negatives"] > 0
    assert [h["dress/collapse_alert"] for h in dress.history] == [0.0, 0.0]
    assert 0.0 < metrics["val/sem_ent"] and 0.0 < metrics["val/sem_ent_gold"]
    # the callback found nothing wrong with the batches it was given
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "DRESSReweighting" in m and ("batch" in m or "collapsed" in m)], messages


def test_the_scripts_datamodule_honours_both_batch_layouts():
    ns = definitions()
    pairs = [DialoguePair((f"context {i}",), f"reply {i}") for i in range(20)]
    negatives = [DialoguePair((f"context {i}",), "i don't know") for i in range(6)]
    for layout in ("separate", "mixed"):
        dm = ns["MyDialogueData"](pairs, batch_size=4)
        weights = np.linspace(0.5, 1.5, 20)
        dm.apply_weights(weights, Negatives(negatives, np.full(6, -1.0), layout, "unlikelihood"), "loss")
        batches = list(dm.train_dataloader())
        flags = [b["negative"] for b in batches]
        assert sum(int(f.sum()) for f in flags) == 6 and sum(len(f) for f in flags) == 26  # every row once
        assert all(b["negative_loss"] == "unlikelihood" for b in batches)
        by_reply = {r: float(w) for b in batches for (_, r), w in zip(b["pairs"], b["sample_weight"])}
        assert by_reply["reply 0"] == 0.5 and by_reply["reply 19"] == 1.5 and by_reply["i don't know"] == -1.0
        if layout == "separate":
            assert all(bool(f.all()) or not bool(f.any()) for f in flags)  # no batch mixes the two
            assert sum(bool(f.all()) for f in flags) == 2  # 6 negatives in batches of 4: 4 + 2
    with pytest.raises(ValueError, match="weights the loss only"):
        ns["MyDialogueData"](pairs).apply_weights(np.ones(20), Negatives(), "sampler")


def batch(negative, weights, loss="unlikelihood", **fields):
    return {
        "sample_weight": torch.tensor(weights, dtype=torch.float32),
        "negative": torch.tensor(negative),
        "negative_loss": loss,
        **fields,
    }


def layout_warnings(dress, batches):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, b in enumerate(batches):
            dress.on_train_batch_start(None, None, b, i)
    return [str(w.message) for w in caught]


def with_negatives(**kwargs) -> DRESSReweighting:
    dress = DRESSReweighting(**kwargs)
    dress.state.set_negatives(
        [DialoguePair(("c",), "r")] * 2, np.array([-1.0, 0.0]), np.array([0, 1]), np.array([0]), 0.5, 0
    )
    return dress


def test_the_callback_warns_about_batches_that_cannot_carry_its_negatives():
    # negatives mixed into gold batches under "separate": said once, naming the fix
    got = layout_warnings(with_negatives(name="a"), [batch([False, False], [1.0, 1.0]), batch([True, False], [-1, 1])])
    assert len(got) == 1 and "mixes them" in got[0] and "negative_batches='mixed'" in got[0]
    # a separate negatives' batch filled with a weight-0 padding row is not a mix; "mixed" accepts a mix
    assert layout_warnings(with_negatives(name="b"), [batch([True, False], [-1.0, 0.0])]) == []
    assert (
        layout_warnings(with_negatives(name="c", mining=Mining(batches="mixed")), [batch([True, False], [-1, 1])]) == []
    )
    # another loss, or none, in the batch
    got = layout_warnings(with_negatives(name="d"), [batch([True, True], [-1, -1], loss="nll")])
    assert len(got) == 1 and "carries 'nll'" in got[0]
    got = layout_warnings(
        with_negatives(name="e"), [{k: v for k, v in batch([True], [-1]).items() if k != "negative_loss"}]
    )
    assert len(got) == 1 and "no 'negative_loss' field" in got[0]
    # batches without DRESS's fields: the issue's docs datamodule read by a loss snippet that wanted input_ids
    got = layout_warnings(with_negatives(name="f"), [{"input_ids": torch.zeros(2, 3)}])
    assert len(got) == 1 and "carries no 'sample_weight' and 'negative'" in got[0]
    # no negatives trained yet: nothing to check
    assert layout_warnings(DRESSReweighting(name="g"), [{"input_ids": torch.zeros(2, 3)}]) == []


def test_configs_and_the_experiment_that_claim_the_paper_settings_pass_them_explicitly():
    paper = DRESSReweighting.PAPER_SETTINGS
    for name in ("configs/paper/sem-ent-dailydialog.yaml", "configs/dialogpt-dailydialog.yaml"):
        config = yaml.safe_load((ROOT / name).read_text(encoding="utf-8"))
        (dress,) = [
            c["init_args"] for c in config["trainer"]["callbacks"] if c["class_path"].endswith("DRESSReweighting")
        ]
        for key in ("normalize", "lam"):
            assert dress[key] == paper[key], (name, key)
        assert Mining(**dress["mining"]) == paper["mining"], name
    # the committed DRESS results were run with these arguments spelled out: the new defaults do not move them
    source = (ROOT / "experiments" / "dress_vs_baseline.py").read_text(encoding="utf-8")
    assert all(arg in source for arg in ("normalize=True,", 'at="start"', 'batches="separate"'))
    assert '"dress_nll": ({"mining": "nll"}, 30.0)' in source
    assert '"dress_unlikelihood": ({"mining": "unlikelihood"}, 30.0)' in source


def test_a_yaml_file_gives_dress_its_objects_and_names_the_monitor_it_reads(tmp_path):
    """LightningCLI: the space by class_path, the mining as a mapping, the alert by class_path; a callback cannot refer
    to another object in YAML, so the monitor is named (``monitor: <its name>``) and found in the Trainer."""
    from helpers import parse_fit_config

    sem = {"class_path": "lightning_div.callbacks.SemanticDiversityMonitor", "init_args": {"name": "sem"}}
    dress = {
        "class_path": "lightning_div.callbacks.DRESSReweighting",
        "init_args": {
            "space": {"class_path": "lightning_div.semantic.space.SemanticSpace", "init_args": {"num_clusters": 7}},
            "mining": {"num_contexts": 16, "loss": "nll"},
            "alert": {"class_path": "lightning_div.measure.alerts.DRESSAlert", "init_args": {"sem_ent_ratio": 0.3}},
            "monitor": "sem",
        },
    }
    model = {
        "class_path": "lightning_div.model.dialogue_lm.DialogueLM",
        "init_args": {"model_name_or_path": None, "tokenizer": "local:chitchat", "from_scratch": {"n_layer": 1}},
    }
    data = {"class_path": "lightning_div.datamodules.DialogueDataModule", "init_args": {"train": "chitchat:finetune"}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cli = parse_fit_config(tmp_path, model, data, {"callbacks": [sem, dress], "logger": False})
    assert not [str(w.message) for w in caught if "DRESSReweighting(" in str(w.message)]  # the 1.0 form: no 0.2 keyword
    (monitor,) = [c for c in cli.trainer.callbacks if isinstance(c, SemanticDiversityMonitor)]
    (built,) = [c for c in cli.trainer.callbacks if isinstance(c, DRESSReweighting)]
    assert built.mining == Mining(num_contexts=16, loss="nll") and built.space.settings()["num_clusters"] == 7
    assert built.alert.sem_ent_ratio == 0.3 and built.monitor == "sem"
    assert built.guard_monitor(cli.trainer) == "sem" == monitor.name
