"""DRESS's degeneration guard: the collapsing run of issue 43, made small and seeded, and a healthy run.

Issue 43: the base model fine-tuned with DRESS at its old defaults (the paper's: raw gold weights,
negatives as -1 x NLL) at the quick start's learning rate went to 'asd f asd f f f …' within an
epoch, with no warning. Here: 64 Chit-Chat ``finetune`` examples, batch 16, learning rate 1e-3,
2 epochs, seed 0, k = 8, the SemanticDiversityMonitor on 48 validation contexts beside DRESS. Each
run took 38-41 CPU-seconds (about 2 minutes of wall time on the 2-core machine at a load average
of 12-13; most of it loading the models, clustering and generating). With the paper's settings the negatives'
loss outruns the gold loss in the first epoch (and the validation loss rises by nats); the guard
must say so, and with ``on_collapse="stop_negatives"`` train the second epoch without
negatives. With the defaults (unlikelihood negatives, normalised weights) it must stay quiet.
"""

import dataclasses
import math
import time
import warnings

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from helpers import quiet_trainer
from monitor_setup import minilm

from lightning_div.callbacks import DRESSReweighting, SemanticDiversityMonitor
from lightning_div.datamodules import DialogueDataModule, Examples
from lightning_div.dress.degeneration import Thresholds, collapse_reasons
from lightning_div.measure.alerts import DRESSAlert
from lightning_div.model.dialogue_lm import DialogueLM
from lightning_div.model.formatting import DialogueLayout
from lightning_div.semantic.space import SemanticSpace
from lightning_div.settings import Generation, Lexical, Mining, Outputs

# Chosen once (issue 43's run, made small): 64 training examples, 48 validation contexts, k = 8, learning rate 1e-3.
N, VAL, K, LR = 64, 48, 8, 1e-3


class Spy(pl.Callback):
    """Per epoch: the negative rows trained, and the logged metrics at the epoch's end."""

    def __init__(self):
        self.negative_rows, self.metrics = {}, {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        rows = int((batch["negative"] & (batch["sample_weight"] != 0)).sum())
        self.negative_rows[trainer.current_epoch] = self.negative_rows.get(trainer.current_epoch, 0) + rows

    def on_train_epoch_end(self, trainer, pl_module):
        self.metrics[trainer.current_epoch] = {k: float(v) for k, v in trainer.callback_metrics.items()}


def fit(tmp_path, dress: DRESSReweighting):
    """The issue's run, small: the base model, N examples, 2 epochs, seed 0; returns (spy, warnings, time taken)."""
    start, cpu = time.perf_counter(), time.process_time()
    pl.seed_everything(0)
    lm = DialogueLM("local:chitchat-gpt2", learning_rate=LR)
    dm = DialogueDataModule(
        train="chitchat:finetune",
        val="chitchat:validation",
        layout=DialogueLayout(max_turns=2),
        examples=Examples(max_train=N, max_val=VAL),
        batch_size=16,
        seed=0,
        show_progress=False,
    )
    sem = SemanticDiversityMonitor(
        SemanticSpace(minilm(), num_clusters=K, batch_size=32, show_progress=False),
        lexical=Lexical(metrics=()),
        generation=Generation(batch_size=32, max_new_tokens=8),
        outputs=Outputs(log_samples=0, cluster_views=False, show_progress=False, dirpath=str(tmp_path / "cache")),
    )
    spy = Spy()
    trainer = quiet_trainer(
        max_epochs=2,
        reload_dataloaders_every_n_epochs=1,
        callbacks=[sem, dress, spy],
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(lm, datamodule=dm)
    collapse = [str(w.message) for w in caught if "generations look collapsed" in str(w.message)]
    return spy, collapse, f"wall {time.perf_counter() - start:.1f} s, CPU {time.process_time() - cpu:.1f} s"


def dress_args(tmp_path):
    return dict(
        space=SemanticSpace(minilm(), num_clusters=K, batch_size=32, show_progress=False),
        mining=Mining(num_contexts=N),
        generation=Generation(batch_size=32, max_new_tokens=8),
        outputs=Outputs(show_progress=False, dirpath=str(tmp_path / "cache")),
    )


@pytest.mark.slow
def test_the_paper_settings_collapse_is_caught_and_stop_negatives_stops_them(tmp_path):
    paper_mining = dataclasses.replace(DRESSReweighting.PAPER_MINING, num_contexts=N)
    dress = DRESSReweighting.paper(on_collapse="stop_negatives", **{**dress_args(tmp_path), "mining": paper_mining})
    spy, collapse, seconds = fit(tmp_path, dress)
    print(f"collapsing run: {seconds}")
    first = spy.metrics[0]
    assert first["val/loss"] > 6.0  # measured 7.57: the base model's is about 4.5 (the healthy run's 4.56)
    # the sign that fired: the negatives' -1 x NLL outweighs the (raw-weighted) gold loss in the first epoch
    assert first["train/negative_loss_epoch"] < -first["train/loss_epoch"] < 0
    assert dress.history[0]["dress/collapse_alert"] == 1.0
    assert len(collapse) == 1 and "negatives loss" in collapse[0] and "mining negatives stopped" in collapse[0]
    # epoch 0 trained negatives; the guard stopped them at its end: epoch 1 trains none, and none are mined again
    assert spy.negative_rows[0] > 0 and spy.negative_rows.get(1, 0) == 0
    assert dress.state.negatives_stopped_at == 0 and dress.state.negative_pairs == []
    assert dress.history[0]["dress/negatives"] > 0  # what epoch 0 trained, logged before the stop cleared it
    assert dress.history[1]["dress/negatives_stopped"] == 1.0 and dress.history[1]["dress/negatives"] == 0.0
    assert (
        "train/negative_loss_epoch" not in spy.metrics[1]
        or spy.metrics[1]["train/negative_loss_epoch"] == first["train/negative_loss_epoch"]
    )


@pytest.mark.slow
def test_a_healthy_run_with_the_defaults_does_not_trigger_the_guard(tmp_path):
    dress = DRESSReweighting(on_collapse="stop_negatives", **dress_args(tmp_path))
    assert (dress.negative_loss, dress.normalize) == ("unlikelihood", True)
    spy, collapse, seconds = fit(tmp_path, dress)
    print(f"healthy run: {seconds}")
    assert collapse == []
    assert [h["dress/collapse_alert"] for h in dress.history] == [0.0, 0.0]
    assert spy.negative_rows[0] > 0 and spy.negative_rows[1] > 0  # negatives trained in both epochs
    for metrics in spy.metrics.values():
        assert metrics["train/negative_loss_epoch"] >= 0  # unlikelihood is bounded below by 0
        assert metrics["val/sem_ent"] >= 0.5 * metrics["val/sem_ent_gold"]
        assert metrics["val/top_cluster_share"] <= 0.8
        assert metrics["val/loss"] < 5.0  # measured 4.56, 4.75


def test_collapse_reasons_thresholds_by_hand():
    healthy = {"val/sem_ent": 2.6, "val/sem_ent_gold": 2.95, "val/top_cluster_share": 0.16}
    assert collapse_reasons(healthy, gold_top_share=0.12) == []
    # exactly at a threshold is not past it
    assert collapse_reasons({"val/sem_ent": 1.0, "val/sem_ent_gold": 2.0}) == []
    assert collapse_reasons({"val/sem_ent": 0.99, "val/sem_ent_gold": 2.0}) == [
        "Sem-Ent 0.99 < 0.5 x the gold responses 2"
    ]
    # the top share's limit: the floor, or twice the gold's top share when that is higher
    assert collapse_reasons({"val/top_cluster_share": 0.81}) != []
    assert collapse_reasons({"val/top_cluster_share": 0.81}, gold_top_share=0.45) == []  # limit 0.9
    assert collapse_reasons({"val/top_cluster_share": 0.91}, gold_top_share=0.45) == [
        "the top cluster holds 91 % of the generations (> 90 %; the gold's: 45 %)"
    ]
    # the loss sign: epoch means preferred; unlikelihood (>= 0) never fires; a tensor value reads as a number
    assert collapse_reasons({"train/loss_epoch": 4.0, "train/negative_loss_epoch": -4.0}) == []
    assert len(collapse_reasons({"train/loss_epoch": 4.0, "train/negative_loss_epoch": torch.tensor(-4.01)})) == 1
    assert collapse_reasons({"train/loss": 4.0, "train/negative_loss": 11.5}) == []
    assert collapse_reasons({"train/loss": 4.0, "train/negative_loss_epoch": -1.0, "train/negative_loss": -9.0}) == []
    # a monitor with a name logs <name>/val/...; NaN is not read
    named = {"sem/val/sem_ent": 0.1, "sem/val/sem_ent_gold": 2.0, "val/sem_ent": float("nan")}
    assert collapse_reasons(named) == [] and len(collapse_reasons(named, monitor="sem")) == 1
    # thresholds switch signs off
    off = Thresholds(sem_ent_ratio=0.0, top_share_floor=1.0, negative_loss_ratio=math.inf)
    assert (
        collapse_reasons(
            {**named, "val/top_cluster_share": 1.0, "train/loss": 1, "train/negative_loss": -99}, None, off, "sem"
        )
        == []
    )


@pytest.mark.parametrize("field", ["sem_ent_ratio", "top_share_factor", "top_share_floor", "negative_loss_ratio"])
def test_alert_thresholds_refuse_bad_values(field):
    for bad in (-0.1, float("nan"), "0.5"):
        with pytest.raises(ValueError, match=f"DRESSAlert.{field} must be a number >= 0"):
            DRESSAlert(**{field: bad})
    with pytest.raises(ValueError, match="DRESSAlert.top_share_floor is a share in"):
        DRESSAlert(top_share_floor=1.5)


def test_defaults_are_the_safe_ones_and_paper_is_one_call_away():
    default = DRESSReweighting()
    assert (default.negative_loss, default.normalize, default.on_collapse) == ("unlikelihood", True, "warn")
    assert default.mining == Mining() and repr(default.alert) == repr(DRESSAlert())
    paper = DRESSReweighting.paper(mining=dataclasses.replace(DRESSReweighting.PAPER_MINING, num_contexts=64))
    assert (paper.negative_loss, paper.normalize, paper.lam, paper.negative_weight) == ("nll", False, 30.0, -1.0)
    assert (paper.mine_at, paper.negative_batches, paper.head_threshold) == ("start", "separate", 0.1)
    assert paper.num_contexts == 64  # an override wins
    assert DRESSReweighting.paper().num_contexts == 5000
    with pytest.raises(ValueError, match="on_collapse must be one of"):
        DRESSReweighting(on_collapse="stop")


def test_alert_thresholds_take_any_real_number():
    """Issue 54 L8: numpy's float32 was refused as "must be a number"."""
    alert = DRESSAlert(np.float32(0.5), top_share_floor=np.float64(0.9))
    assert (alert.sem_ent_ratio, alert.top_share_floor) == (0.5, 0.9) and type(alert.sem_ent_ratio) is float
    with pytest.raises(ValueError, match=r"DRESSReweighting\(alert=...\) must be a DRESSAlert or None, got 0.5"):
        DRESSReweighting(alert=0.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"DRESSReweighting\(mining=...\) must be a Mining or None"):
        DRESSReweighting(mining={"num_contexts": 8})  # type: ignore[arg-type]


def test_the_alert_reads_values_by_hand_and_keeps_since_when():
    """DRESSAlert has the shape of every alert: update(values, step) -> (kind, reasons), state_dict / load_state_dict."""
    alert = DRESSAlert(sem_ent_ratio=0.6)
    assert alert.update({"val/sem_ent": 1.3, "val/sem_ent_gold": 2.0}, 0) == (None, [])
    assert alert.update({"val/sem_ent": 1.1, "val/sem_ent_gold": 2.0}, 1) == (
        "collapse",
        ["Sem-Ent 1.1 < 0.6 x the gold responses 2"],
    )
    # the top share's limit is twice the gold's top share when that is above the floor
    kind, reasons = alert.update({"val/top_cluster_share": 0.85, "gold_top_share": 0.45}, 2)
    assert (kind, reasons) == (None, [])
    kind, reasons = alert.update({"val/top_cluster_share": 0.95, "gold_top_share": 0.45}, 3)
    assert reasons == ["the top cluster holds 95 % of the generations (> 90 %; the gold's: 45 %)"]
    assert kind == "collapse" and alert.state_dict() == {"since": 3, "warned": []}
    alert.update({"train/loss_epoch": 4.0, "train/negative_loss_epoch": torch.tensor(-9.0)}, 4)
    restored = DRESSAlert()
    restored.load_state_dict(alert.state_dict())
    assert restored.since == 3
    with pytest.raises(ValueError, match="a DRESSAlert state must be a dict with an integer"):
        restored.load_state_dict({"since": "3"})


def test_the_guard_finds_a_named_monitor_or_says_why_it_cannot():
    """Issue 54 L9 and L7: a monitor with a name logs <name>/val/...; without collapse_monitor= (1.0: monitor=) the guard
    read nothing, silently, and collapse_monitor='a/b' naming no monitor was accepted."""
    from types import SimpleNamespace

    def guard_reads(*callbacks, **kwargs):
        dress = DRESSReweighting(**kwargs)
        return dress.guard_monitor(SimpleNamespace(callbacks=[*callbacks, dress]))

    named, other, unnamed = (SemanticDiversityMonitor(name=n) for n in ("sem", "other", None))
    assert guard_reads(named) == "sem"  # the only monitor: its keys
    assert guard_reads(named, unnamed) is None  # the one without a name
    assert guard_reads() is None  # no monitor: the losses alone, as documented
    assert guard_reads(named, other, monitor="other") == "other"  # by name: the YAML form
    assert guard_reads(named, other, monitor=other) == "other"  # the object: the Python form
    with pytest.warns(RuntimeWarning, match=r"2 SemanticDiversityMonitors with names \('sem', 'other'\).*monitor="):
        assert guard_reads(named, other) is None
    with pytest.raises(ValueError, match=r"monitor='a/b'\) names no SemanticDiversityMonitor .*'sem', 'other'"):
        guard_reads(named, other, monitor="a/b")
    stranger = SemanticDiversityMonitor(name="sem")  # same name, another object: not the Trainer's
    with pytest.raises(ValueError, match=r"monitor=...\): that SemanticDiversityMonitor \(name 'sem'\) is not one of"):
        guard_reads(named, monitor=stranger)
    for bad in ("", " sem", 5):
        with pytest.raises(ValueError, match=r"monitor=...\) must be a SemanticDiversityMonitor, the name of one"):
            DRESSReweighting(monitor=bad)


def test_the_guard_keeps_why_and_since_when_for_the_summary_and_the_report(tmp_path):
    """Issue 63: the guard's reasons went to stderr only; its alert record keeps them with the run."""
    from types import SimpleNamespace

    from lightning_div._internal.lightning import TrainerFn
    from lightning_div.verdict import verdict

    dress = DRESSReweighting(**dress_args(tmp_path))
    metrics = {"val/sem_ent": 0.1, "val/sem_ent_gold": 2.9, "val/top_cluster_share": 0.95}
    trainer = SimpleNamespace(
        sanity_checking=False,
        state=SimpleNamespace(fn=TrainerFn.FITTING),
        callback_metrics=metrics,
        strategy=SimpleNamespace(broadcast=lambda value, src=0: value),
        current_epoch=1,
    )
    with pytest.warns(RuntimeWarning, match="the generations look collapsed at epoch 1"):
        dress._guard(trainer, m := {})
    trainer.current_epoch = 2
    dress._guard(trainer, m)  # still collapsed: since epoch 1, warned once
    assert m["dress/collapse_alert"] == 1.0
    record = dress.alert_record
    assert (record["kind"], record["since"], record["unit"], record["key"]) == (
        "collapse",
        1,
        "epoch",
        "dress/collapse_alert",
    )
    assert record["reasons"] == [
        "Sem-Ent 0.1 < 0.5 x the gold responses 2.9",
        "the top cluster holds 95 % of the generations (> 80 %)",
    ]
    rows = [(0, {"dress/collapse_alert": 0.0, "val/sem_ent": 2.5}), (1, {"dress/collapse_alert": 1.0, **metrics})]
    v = verdict(rows, [record], "epoch")
    assert v.headline() == "collapse since epoch 1 (dress/collapse_alert)" and v.reasons == record["reasons"]
    assert v.numbers == ["Sem-Ent 0.1 (first 2.5)", "top-cluster share 0.95"]
