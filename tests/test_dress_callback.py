"""DRESSReweighting with DialogueDataModule + DialogueLM in a real Trainer: weights, negatives, resume."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from monitor_setup import datamodule, dress, tiny_lm, trainer
from pytorch_lightning import Callback
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger

from lightning_div.callbacks.dress import DRESSReweighting
from lightning_div.dress.weights import dress_weights

#: One worker runs the two tests of the uninterrupted run (a module fixture), so it is trained once.
pytestmark = pytest.mark.xdist_group("dress_callback")


class BatchSpy(Callback):
    """Records (epoch, index, sample_weight) of every training example seen."""

    def __init__(self):
        self.seen = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        for i, w in zip(batch["index"].tolist(), batch["sample_weight"].tolist()):
            self.seen.append((trainer.current_epoch, i, w))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Two epochs with DRESS's defaults here, uninterrupted (with a CSV logger and a batch spy, which change
    no training): what the weights test asserts on and what the resume test's resumed run must match bit for bit
    (one run for both: it was trained twice)."""
    root = tmp_path_factory.mktemp("full")
    cb, spy, model, dm = dress(root), BatchSpy(), tiny_lm(), datamodule()
    tr = trainer(
        root, [cb, spy], loggers=[CSVLogger(root)], max_epochs=2, limit_train_batches=None, limit_val_batches=1
    )
    tr.fit(model, datamodule=dm)
    return SimpleNamespace(root=root, cb=cb, spy=spy, model=model, dm=dm, trainer=tr)


@pytest.mark.slow
def test_weights_reach_the_batches_and_negatives_join_the_next_epoch(uninterrupted):
    run = uninterrupted
    cb, spy, dm, tr, tmp_path = run.cb, run.spy, run.dm, run.trainer, run.root
    n = len(dm.train_pairs())
    # the gold weights are DRESS weights of the cached gold cluster ids
    with np.load(next((tmp_path / "cache").glob("assignments-clusters-*.npz"))) as stored:
        ids = stored["ids"]
    np.testing.assert_array_equal(cb.state.weights, dress_weights(ids, 4, lam=2.0, normalize=True))  # the default
    np.testing.assert_array_equal(dm.sample_weights, cb.state.weights)
    # epoch 0: every gold example exactly once with its DRESS weight, no negatives yet
    epoch0 = [(i, w) for e, i, w in spy.seen if e == 0]
    assert sorted(i for i, _ in epoch0) == list(range(n))
    assert all(w == pytest.approx(cb.state.weights[i]) for i, w in epoch0)
    # epoch 1: the negatives mined at the end of epoch 0 are trained on with weight -1
    neg1 = [(i, w) for e, i, w in spy.seen if e == 1 and i >= n]
    assert neg1 and all(w == -1.0 for _, w in neg1)
    assert cb.history[0]["dress/head_clusters"] >= 1
    assert cb.history[0]["dress/weight_min"] == -1.0
    assert tr.log_dir and (tmp_path / "lightning_logs").exists()
    assert list((tmp_path / "lightning_logs").rglob("dress_weight_histogram_epoch1.png"))


@pytest.mark.slow
def test_resumed_run_ends_bit_identical(uninterrupted, tmp_path):
    """Interrupted after 1 of 2 epochs and resumed; the uninterrupted run is the weights test's."""

    def run(root, max_epochs, ckpt_path=None, checkpoint=False):
        callbacks = [dress(root)]
        if checkpoint:
            callbacks.append(ModelCheckpoint(dirpath=root / "ckpt", save_last=True, every_n_epochs=1))
        model, dm = tiny_lm(), datamodule()
        tr = trainer(
            root,
            callbacks,
            max_epochs=max_epochs,
            limit_train_batches=None,
            limit_val_batches=1,
            enable_checkpointing=checkpoint,
        )
        tr.fit(model, datamodule=dm, ckpt_path=ckpt_path)
        return callbacks[0], model, dm

    full_cb, full_model, full_dm = uninterrupted.cb, uninterrupted.model, uninterrupted.dm
    run(tmp_path / "part", 1, checkpoint=True)
    resumed_cb, resumed_model, resumed_dm = run(
        tmp_path / "part", 2, ckpt_path=tmp_path / "part" / "ckpt" / "last.ckpt"
    )
    np.testing.assert_array_equal(resumed_cb.state.weights, full_cb.state.weights)
    np.testing.assert_array_equal(resumed_cb.state.negative_weights, full_cb.state.negative_weights)
    assert resumed_cb.state.negative_pairs == full_cb.state.negative_pairs
    np.testing.assert_array_equal(resumed_dm.sample_weights, full_dm.sample_weights)
    for (name, a), (_, b) in zip(full_model.state_dict().items(), resumed_model.state_dict().items()):
        assert torch.equal(a, b), name


def test_sampler_mode_refuses_negatives():
    with pytest.raises(ValueError, match="cannot use negatives"):
        DRESSReweighting(mode="sampler", negatives=True)
    with pytest.raises(ValueError, match="mode must be one of"):
        DRESSReweighting(mode="weighted")
