"""DRESSReweighting with DialogueDataModule + DialogueLM in a real Trainer: weights, negatives, resume."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from monitor_setup import count_mining, datamodule, dress, tiny_lm, trainer
from pytorch_lightning import Callback
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger

from lightning_div.callbacks.dress import DRESSReweighting
from lightning_div.dress.weights import dress_weights
from lightning_div.settings import Mining

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
    """Two epochs with DRESS's defaults here, uninterrupted (with a CSV logger, a batch spy and a count of the
    mining calls, which change no training): what the weights test asserts on and what the resume test's resumed
    run must match bit for bit (one run for both: it was trained twice)."""
    root = tmp_path_factory.mktemp("full")
    cb, spy, model, dm = dress(root), BatchSpy(), tiny_lm(), datamodule()
    calls = count_mining(cb)
    # every epoch's checkpoint kept: the resume test resumes from epoch 0's (the state a run stopped there saves)
    ckpt = ModelCheckpoint(dirpath=root / "ckpt", save_top_k=-1, every_n_epochs=1)
    tr = trainer(
        root,
        [cb, spy, ckpt],
        loggers=[CSVLogger(root)],
        max_epochs=2,
        limit_train_batches=None,
        limit_val_batches=1,
        enable_checkpointing=True,
    )
    tr.fit(model, datamodule=dm)
    return SimpleNamespace(root=root, cb=cb, spy=spy, model=model, dm=dm, trainer=tr, calls=calls)


@pytest.mark.slow
def test_weights_reach_the_batches_and_negatives_join_the_next_epoch(uninterrupted):
    """Also today's end-of-epoch schedule with mixed batches (was test_dress_negatives' test_end_schedule_is_todays,
    a run of its own with the same settings): mined at each epoch's end for the next, none trained in epoch 0,
    and only the head-cluster generations kept."""
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
    assert run.calls == [(0, 1), (1, 2)]  # at each epoch's end, for the next (also after the last: today's)
    assert set(cb.state.negative_weights.tolist()) == {-1.0}  # mixed keeps only the head-cluster generations
    assert cb.history[0]["dress/head_clusters"] >= 1
    assert cb.history[0]["dress/weight_min"] == -1.0
    assert tr.log_dir and (tmp_path / "lightning_logs").exists()
    assert list((tmp_path / "lightning_logs").rglob("dress_weight_histogram_epoch1.png"))


@pytest.mark.slow
def test_resumed_run_ends_bit_identical(uninterrupted, tmp_path):
    """Interrupted after 1 of 2 epochs and resumed; the uninterrupted run is the weights test's. The interrupted
    run is the uninterrupted one's first epoch: it resumes from that run's checkpoint of epoch 0, the state a run
    stopped after epoch 0 saves (the end schedule mines the next round at every epoch's end, the last too), and
    reads its clusters (content-addressed, the same gold responses) instead of embedding and fitting them again."""
    full_cb, full_model, full_dm = uninterrupted.cb, uninterrupted.model, uninterrupted.dm
    resumed_cb = dress(tmp_path, dirpath=str(uninterrupted.root / "cache"))
    resumed_model, resumed_dm = tiny_lm(), datamodule()
    trainer(tmp_path, [resumed_cb], max_epochs=2, limit_train_batches=None, limit_val_batches=1).fit(
        resumed_model, datamodule=resumed_dm, ckpt_path=next((uninterrupted.root / "ckpt").glob("epoch=0-*.ckpt"))
    )
    np.testing.assert_array_equal(resumed_cb.state.weights, full_cb.state.weights)
    np.testing.assert_array_equal(resumed_cb.state.negative_weights, full_cb.state.negative_weights)
    assert resumed_cb.state.negative_pairs == full_cb.state.negative_pairs
    np.testing.assert_array_equal(resumed_dm.sample_weights, full_dm.sample_weights)
    for (name, a), (_, b) in zip(full_model.state_dict().items(), resumed_model.state_dict().items()):
        assert torch.equal(a, b), name


def test_sampler_mode_refuses_negatives():
    with pytest.raises(ValueError, match="cannot use negatives"):
        DRESSReweighting(mode="sampler", mining=Mining())
    with pytest.raises(ValueError, match="mode must be one of"):
        DRESSReweighting(mode="weighted")


def test_a_loss_that_ignores_the_weights_is_an_error_not_an_unweighted_run(tmp_path):
    """Issue 63: a module calling self.model(**batch) hands sample_weight to the model's forward, which ignores it
    (or refuses it): the run trained unweighted and DRESS changed nothing, silently. The first backward says so."""
    cb = dress(tmp_path)
    x = torch.ones(2, requires_grad=True)
    batch = {"input_ids": torch.zeros(2, 3, dtype=torch.long), "sample_weight": torch.tensor([1.0, 0.5])}
    cb.on_train_batch_start(None, None, batch, 0)
    assert batch["sample_weight"].requires_grad  # watched until the backward
    with pytest.raises(
        ValueError, match=r"the training loss does not depend on the batch's 'sample_weight'.*dress_loss"
    ):
        cb.on_before_backward(None, None, (x * 2).sum())
    # a weighted loss (as dress_loss computes it) passes, and the weights are plain again
    batch = {"sample_weight": torch.tensor([1.0, 0.5])}
    cb._weights_used = None
    cb.on_train_batch_start(None, None, batch, 0)
    cb.on_before_backward(None, None, (x * batch["sample_weight"].to(torch.float64)).sum())
    assert cb._weights_used is True and not batch["sample_weight"].requires_grad
    cb.on_train_batch_start(None, None, later := {"sample_weight": torch.tensor([2.0])}, 1)
    assert not later["sample_weight"].requires_grad  # checked once a fit: later batches are not watched


def test_settings_that_cannot_work_are_refused_at_construction():
    """Issue 54 H6 and L7: negative_weight=+1.0 (1.0: Mining.weight) trained the head clusters' generations as gold
    examples; lam=-5 or NaN, head_threshold=1.5 and num_negative_contexts=0 were accepted and failed later, or never."""
    for bad in (1.0, 0.0, True, float("nan"), -math.inf, "-1"):  # refused by Mining itself, naming its field
        with pytest.raises(ValueError, match=r"Mining\.weight must be a finite number < 0"):
            Mining(weight=bad)
    for bad in (-5, float("nan"), math.inf, "30", None):
        with pytest.raises(ValueError, match="lam must be a finite number >= 0"):
            DRESSReweighting(lam=bad)
    for bad in (1.0, 1.5, -0.1, "0.1"):
        with pytest.raises(ValueError, match=r"Mining\.head_threshold must be a share in \[0, 1\)"):
            Mining(head_threshold=bad)
    for bad in (0, -3, 2.5, None, "64"):
        with pytest.raises(ValueError, match="Mining.num_contexts must be an integer >= 1"):
            Mining(num_contexts=bad)
    ok = DRESSReweighting(lam=np.float32(2), mining=Mining(weight=-0.5, head_threshold=0, num_contexts=np.int64(8)))
    assert (ok.lam, ok.negative_weight, ok.head_threshold, ok.num_contexts) == (2.0, -0.5, 0.0, 8)
