"""Several instances of one callback in one Trainer: own logged keys (``name``), own checkpoint state (``state_key``)."""

from __future__ import annotations

import math

import pytest
import torch
from monitor_setup import TRAIN, VAL, TinyChat, fit, trainer
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger

from lightning_div.callbacks import NLIDiversityMonitor, RUQMonitor, SemanticDiversityMonitor
from lightning_div.semantic.space import SemanticSpace
from lightning_div.settings import Generation, Outputs

SHORT = ["I don't know."]
LONG = ["I have no idea what you are talking about, sorry."]


def two_ruq_monitors():
    common = {
        "train_pairs": TRAIN,
        "val_pairs": VAL,
        "plot": None,
        "outputs": Outputs(show_progress=False),
        "generation": Generation(batch_size=8),
        "on_error": "raise",
    }
    # different sample sizes too, so that a state restored into the wrong instance shows
    return (
        RUQMonitor(idk_responses=SHORT, name="idk_short", num_train_contexts=4, num_contexts=6, **common),
        RUQMonitor(idk_responses=LONG, name="idk_long", num_train_contexts=5, num_contexts=7, **common),
    )


def fit_with_checkpoints(root, callbacks, max_epochs, ckpt_path=None):
    """``monitor_setup.fit`` of 2 training batches an epoch, checkpointed (``last.ckpt``) and logged to CSV."""
    ckpt = ModelCheckpoint(dirpath=root / "ckpt", save_last=True)
    return fit(
        root,
        [*callbacks, ckpt],
        loggers=[CSVLogger(root, name="csv")],
        max_epochs=max_epochs,
        enable_checkpointing=True,
        limit_train_batches=2,
        ckpt_path=ckpt_path,
    )


def test_two_ruq_monitors_keep_their_own_keys_and_state_across_a_resume(tmp_path):
    short, long = two_ruq_monitors()
    assert short.state_key == "RUQMonitor{'name': 'idk_short', 'idk_responses': (\"I don't know.\",)}"
    assert long.state_key != short.state_key
    tr = fit_with_checkpoints(tmp_path, [short, long], max_epochs=1)
    keys = set(tr.callback_metrics)
    for name in ("idk_short", "idk_long"):
        assert {
            f"{name}/train/ruq",
            f"{name}/val/ruq",
            f"{name}/val/ruq_idk1",
            f"{name}/val/ruq_alert",
            f"{name}/timing/ruq_s",
        } <= keys
    assert "val/ruq" not in keys  # nothing logged under the shared, unprefixed names
    first = {cb.name: dict(cb.history[-1]) for cb in (short, long)}
    assert set(first["idk_short"]) - {"epoch"} == {k for k in first["idk_short"] if k.startswith("idk_short/")}

    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)["callbacks"]
    assert saved[short.state_key]["samples"] == short.sample_state() and len(short.sample_state()["val"]) == 6
    assert saved[long.state_key]["samples"] == long.sample_state() and len(long.sample_state()["val"]) == 7

    # stopped after epoch 0; fresh instances resume from the checkpoint and each gets its own state back
    short2, long2 = two_ruq_monitors()
    tr2 = fit_with_checkpoints(
        tmp_path / "resumed", [long2, short2], max_epochs=2, ckpt_path=tmp_path / "ckpt" / "last.ckpt"
    )
    for before, after in ((short, short2), (long, long2)):
        n = len(before.history)  # one entry per measurement: train RUQ, validation RUQ
        assert n == 2 and after.history[:n] == before.history  # restored, then epoch 1 appended
        assert [h["epoch"] for h in after.history[n:]] == [1.0, 1.0]
        assert after.sample_state() == before.sample_state()
        assert (
            after.last_val_ruq
            == [h for h in after.history if f"{after.name}/val/ruq" in h][-1][f"{after.name}/val/ruq"]
        )
    assert math.isfinite(tr2.callback_metrics["idk_short/val/ruq"])
    assert {"idk_short/val/ruq", "idk_long/val/ruq"} <= set(tr2.callback_metrics)


def test_a_checkpoint_with_the_bare_class_name_key_of_0_1_is_said_not_restored(tmp_path):
    short, _ = two_ruq_monitors()
    fit_with_checkpoints(tmp_path, [short], max_epochs=1)
    path = tmp_path / "ckpt" / "last.ckpt"
    checkpoint = torch.load(path, weights_only=False)
    checkpoint["callbacks"] = {
        "RUQMonitor": checkpoint["callbacks"].pop(short.state_key),
        **checkpoint["callbacks"],
    }  # lightning-div 0.1's layout: state under the class name (0.2 carries no code to read it)
    torch.save(checkpoint, path)
    short2, _ = two_ruq_monitors()
    with pytest.warns(RuntimeWarning, match=r"under the key 'RUQMonitor', which lightning-div 0.1 wrote.*not restored"):
        fit_with_checkpoints(tmp_path / "resumed", [short2], max_epochs=2, ckpt_path=path)
    assert short.history and short2.history[0]["epoch"] == 1.0  # started afresh: epoch 0's history is not there


def test_same_class_without_distinct_names_is_a_clear_error(tmp_path):
    common = {"train_pairs": TRAIN, "val_pairs": VAL, "plot": None, "outputs": Outputs(show_progress=False)}
    a, b = RUQMonitor(idk_responses=SHORT, **common), RUQMonitor(idk_responses=LONG, **common)
    assert a.state_key != b.state_key  # their states would not collide, but their metric names would
    with pytest.raises(ValueError, match=r"2 RUQMonitors in this Trainer have name=None.*give each its own name"):
        trainer(tmp_path, [a, b], max_epochs=1).fit(TinyChat())


def test_state_keys_are_built_from_identifying_arguments():
    sem = SemanticDiversityMonitor(SemanticSpace("enc-a", num_clusters=8), name="a")
    assert sem.state_key == "SemanticDiversityMonitor{'name': 'a', 'encoder': 'enc-a'}"
    assert SemanticDiversityMonitor(SemanticSpace("enc-b", num_clusters=8), name="a").state_key != sem.state_key
    # a setting is not identity: a resume with num_clusters changed finds its state and says so (issue 21)
    assert SemanticDiversityMonitor(SemanticSpace("enc-a", num_clusters=4), name="a").state_key == sem.state_key
    nli = NLIDiversityMonitor(scorer="roberta-large-mnli", n=5)
    assert nli.state_key == "NLIDiversityMonitor{'name': None, 'scorer': 'roberta-large-mnli'}"
    assert (
        sem.log_key("val/sem_ent") == "a/val/sem_ent" and nli.log_key("val/nli_div_baseline") == "val/nli_div_baseline"
    )
    with pytest.raises(ValueError, match="name must be None or a non-empty string"):
        RUQMonitor(name=" ")
    with pytest.raises(ValueError, match="without surrounding spaces and without '/'"):
        RUQMonitor(name="a/b")  # one rule on every front end: '/' separates the keys' parts


def test_a_name_with_a_control_character_is_refused_where_it_is_given():
    """Issue 64 L13: "a\\x00b" passed, and the settings record then failed with "embedded null byte"."""
    from lightning_div.keys import check_name

    for bad in ("a\x00b", "a\nb", "tab\there", "bell\x07"):
        with pytest.raises(ValueError, match=r"without '/' or control characters .*got '"):
            check_name(bad)
    with pytest.raises(ValueError, match=r"or control characters"):
        RUQMonitor(name="a\x00b")
    assert check_name("run-1 (ε)") == "run-1 (ε)"  # any printable text stays a name
