"""DRESS negatives: the two losses on hand-computed logits, separate batches, and the authors' mining schedule."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from monitor_setup import count_mining, datamodule, dress, fit, minilm, tiny_lm, trainer
from pytorch_lightning import Callback
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_div.callbacks.dress import DRESSReweighting
from lightning_div.datamodules.encoding import DialogueCollator, EncodedDialogues
from lightning_div.datamodules.samplers import SeparateBatchSampler
from lightning_div.dress.losses import weighted_lm_loss
from lightning_div.dress.weights import head_clusters, negative_weights
from lightning_div.semantic.clusters import SemanticClusters
from lightning_div.settings import Mining

IGNORE = -100


def two_class_logits(p_targets):
    """Seq2seq-layout logits of one target token per example: class 0 has probability p."""
    z = torch.tensor([[math.log(p / (1 - p)), 0.0] for p in p_targets]).unsqueeze(1)  # (batch, 1, 2)
    return z.clone().requires_grad_(True)


# ---------------------------------------------------------------------------------------------
# The loss


def test_nll_and_unlikelihood_on_hand_computed_logits():
    # A gold example (w=1, p=0.75), a negative (w=-1, p=0.8) and a zero-weight generation (p=0.5);
    # every one has one target token, so the denominator is 3 tokens.
    logits, labels, w = (
        two_class_logits([0.75, 0.8, 0.5]),
        torch.zeros(3, 1, dtype=torch.long),
        torch.tensor([1.0, -1.0, 0.0]),
    )
    nll = weighted_lm_loss(logits, labels, w, causal=False, negative_loss="nll")
    assert nll.item() == pytest.approx((-math.log(0.75) + math.log(0.8)) / 3, rel=1e-6)
    nll.backward()
    # d(w * -log p)/dz_0 = -w (1 - p): the negative pushes its logit down by (1 - p) / 3
    np.testing.assert_allclose(logits.grad[:, 0, 0].numpy(), [-(1 - 0.75) / 3, (1 - 0.8) / 3, 0.0], rtol=1e-5)

    logits = two_class_logits([0.75, 0.8, 0.5])
    ul = weighted_lm_loss(logits, labels, w, causal=False, negative_loss="unlikelihood")
    assert ul.item() == pytest.approx((-math.log(0.75) - math.log(1 - 0.8)) / 3, rel=1e-6)
    ul.backward()
    # d(-log(1 - p))/dz_0 = p
    np.testing.assert_allclose(logits.grad[:, 0, 0].numpy(), [-(1 - 0.75) / 3, 0.8 / 3, 0.0], rtol=1e-5)


def test_negative_nll_pushes_at_full_strength_on_an_already_unlikely_token_unlikelihood_stops():
    labels, w = torch.zeros(1, 1, dtype=torch.long), torch.tensor([-1.0])
    for p in (1e-2, 1e-4):
        logits = two_class_logits([p])
        nll = weighted_lm_loss(logits, labels, w, causal=False, negative_loss="nll")
        nll.backward()
        assert nll.item() == pytest.approx(math.log(p), rel=1e-5)  # -> -inf as p -> 0: no bound
        assert logits.grad[0, 0, 0].item() == pytest.approx(1 - p, rel=1e-5)  # gradient does not vanish
        logits = two_class_logits([p])
        ul = weighted_lm_loss(logits, labels, w, causal=False, negative_loss="unlikelihood")
        ul.backward()
        # float32 cross-entropy carries ~1e-7 absolute error, ~1e-3 relative on a loss of 1e-4
        assert ul.item() == pytest.approx(-math.log(1 - p), rel=1e-3)  # -> 0
        assert logits.grad[0, 0, 0].item() == pytest.approx(p, rel=1e-3)  # gradient -> 0
    # a token the model is sure of costs at most -log(1e-5) under unlikelihood
    logits = two_class_logits([1 - 1e-9])
    assert weighted_lm_loss(logits, labels, w, causal=False, negative_loss="unlikelihood").item() == pytest.approx(
        -math.log(1e-5), rel=1e-4
    )


def test_unlikelihood_leaves_positive_weights_and_padding_alone_causal_layout():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 7)
    labels = torch.tensor(
        [[IGNORE, 2, 3, IGNORE, IGNORE], [IGNORE, IGNORE, 1, 4, 5], [IGNORE, 6, IGNORE, IGNORE, IGNORE]]
    )
    w = torch.tensor([0.5, 2.0, 1.0])  # no negative weight: both losses are the weighted NLL
    assert torch.equal(
        weighted_lm_loss(logits, labels, w, negative_loss="unlikelihood"),
        weighted_lm_loss(logits, labels, w, negative_loss="nll"),
    )
    w = torch.tensor([0.5, -1.0, 0.0])
    logp = torch.log_softmax(logits[:, :-1], -1)
    tgt = labels[:, 1:]
    mask = tgt != IGNORE
    p = logp.gather(-1, tgt.clamp(min=0).unsqueeze(-1)).squeeze(-1).exp()
    expected = (0.5 * -(torch.log(p) * mask)[0].sum() + -(torch.log(1 - p) * mask)[1].sum()) / mask.sum()
    got = weighted_lm_loss(logits, labels, w, negative_loss="unlikelihood")
    assert got.item() == pytest.approx(expected.item(), rel=1e-5)
    with pytest.raises(ValueError, match="negative_loss must be one of"):
        weighted_lm_loss(logits, labels, w, negative_loss="ul")


def test_dialogue_lm_trains_negatives_with_the_loss_the_batch_names_never_the_datamodules():
    lm = tiny_lm()
    labels = torch.tensor([[IGNORE, IGNORE, 7, 8], [IGNORE, 10, 11, 12]])
    batch = {
        "input_ids": torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]]),
        "attention_mask": torch.ones(2, 4, dtype=torch.long),
        "labels": labels,
        "sample_weight": torch.tensor([1.0, -1.0]),
        "negative": torch.tensor([False, True]),
    }
    # a datamodule that says otherwise is not asked (issue 33: the loss kind travels with the batch)
    lm.trainer = SimpleNamespace(datamodule=SimpleNamespace(negative_loss="nll", negatives=None))
    logits = lm(batch)
    for name in ("nll", "unlikelihood"):
        parts = lm.loss({**batch, "negative_loss": name}, weighted=True)
        expected = weighted_lm_loss(logits, labels, batch["sample_weight"], negative_loss=name)
        assert parts.loss.item() == pytest.approx(expected.item(), rel=1e-6)
        # each part over its own rows and their tokens: the gold row (2 targets), the negative row (3)
        gold = weighted_lm_loss(logits[:1], labels[:1], torch.tensor([1.0]))
        negative = weighted_lm_loss(logits[1:], labels[1:], torch.tensor([-1.0]), negative_loss=name)
        assert parts.gold.item() == pytest.approx(gold.item(), rel=1e-6)
        assert parts.negative.item() == pytest.approx(negative.item(), rel=1e-6)
        # the whole loss is the token-weighted mean of the two parts (after the causal shift: 2 and 3 targets)
        assert parts.loss.item() == pytest.approx((2 * gold.item() + 3 * negative.item()) / 5, rel=1e-6)
    with pytest.raises(ValueError, match="negative_loss must be one of"):
        lm.loss({**batch, "negative_loss": "bounded"}, weighted=True)
    # validation and test weigh every example alike, whatever the batch carries
    plain = lm.loss({**batch, "negative_loss": "unlikelihood"}, weighted=False)
    assert plain.loss.item() == pytest.approx(weighted_lm_loss(logits, labels).item(), rel=1e-6)


# ---------------------------------------------------------------------------------------------
# Separate batches


@pytest.mark.parametrize("replicas", [1, 2])
def test_separate_batches_never_mix_groups_and_see_every_example_once(replicas):
    n_gold, n_neg, bs = 7, 3, 2
    data = list(range(n_gold + n_neg))
    samplers = [
        SeparateBatchSampler(data, [n_gold, n_neg], bs, num_replicas=replicas, rank=r, seed=3) for r in range(replicas)
    ]
    seen = []
    for epoch in (0, 1):
        streams = []
        for s in samplers:
            s.set_epoch(epoch)
            streams.append(list(s))
            assert len(streams[-1]) == len(s)
        # global batch b = batch b of every rank: one group only (padding 2n + i belongs to example i's group)
        group = [(lambda i: (i % len(data)) >= n_gold)]
        for b in range(len(streams[0]) // bs):
            members = [i for st in streams for i in st[b * bs : (b + 1) * bs]]
            kinds = {group[0](i) for i in members}
            assert len(kinds) == 1, members
        real = sorted(i for st in streams for i in st if i < len(data))
        assert real == data  # every example exactly once
        pads = [i for st in streams for i in st if i >= len(data)]
        assert all(2 * len(data) <= i < 3 * len(data) for i in pads)
        # gold: ceil(7 / (2R)) batches, negatives: ceil(3 / (2R)) batches
        global_batch = bs * replicas
        assert len(pads) == (-n_gold % global_batch) + (-n_neg % global_batch)
        seen.append(streams[0])
    assert seen[0] != seen[1]  # reshuffled per epoch
    with pytest.raises(ValueError, match="add up"):
        SeparateBatchSampler(data, [n_gold, n_neg + 1], bs, num_replicas=1, rank=0)


def test_target_less_padding_rows_add_no_tokens():
    ds = EncodedDialogues([([1, 2], [3, 4, 5]), ([6], [7])], np.array([1.0, -1.0]))
    batch = DialogueCollator(pad_token_id=0)([ds[1], ds[2 * 2 + 0]])
    assert batch["index"].tolist() == [1, -1] and batch["sample_weight"].tolist() == [-1.0, 0.0]
    assert (batch["labels"][1] != IGNORE).sum() == 0  # the padding row: context only, no target
    assert batch["input_ids"][1, :2].tolist() == [1, 2]
    with pytest.raises(IndexError, match=r"^index 6 out of range for 2 examples$"):
        ds[3 * 2]


# ---------------------------------------------------------------------------------------------
# Mining with a real Trainer


class BatchSpy(Callback):
    def __init__(self):
        self.batches = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batches.append(
            (
                trainer.current_epoch,
                batch["index"].tolist(),
                batch["sample_weight"].tolist(),
                int((batch["labels"] != IGNORE).sum()),
            )
        )


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The authors' schedule over 3 epochs, uninterrupted: what the start-schedule test asserts on, and what
    the resume test's resumed run must match bit for bit (one run for both: it was trained twice)."""
    root = tmp_path_factory.mktemp("full")
    cb = dress(root, mining={"at": "start", "batches": "separate", "loss": "unlikelihood", "num_contexts": 16})
    calls, spy, model, dm = count_mining(cb), BatchSpy(), tiny_lm(), datamodule()
    generated_with = []
    original_mine = cb.miner.measure

    def record_generate(adapter, contexts, **kwargs):
        generated_with.append(dict(kwargs["generation_kwargs"]))
        return original_mine(adapter, contexts, **kwargs)

    cb.miner.measure = record_generate
    trainer(root, [cb, spy], max_epochs=3, limit_train_batches=None, limit_val_batches=1).fit(model, datamodule=dm)
    return SimpleNamespace(root=root, cb=cb, calls=calls, spy=spy, model=model, dm=dm, generated_with=generated_with)


#: One worker runs the two tests of the uninterrupted run (a module fixture), so it is trained once.
RESUME = "dress_negatives_resume"


@pytest.mark.slow
@pytest.mark.xdist_group(RESUME)
def test_start_mines_before_epoch_0_greedy_unblocked_in_separate_batches(uninterrupted):
    run = uninterrupted
    cb, calls, spy, dm, generated_with = run.cb, run.calls, run.spy, run.dm, run.generated_with
    # rounds start at epochs 0, 1, 2: epoch 0's at fit start (current epoch 0), the others at the end of the previous
    assert calls == [(0, 0), (0, 1), (1, 2)]
    assert generated_with and all(
        k["no_repeat_ngram_size"] == 0 and k["do_sample"] is False and k["num_beams"] == 1 for k in generated_with
    )
    n = len(dm.train_pairs())
    # separate: all 16 generations kept (weights 0 outside the head clusters, -1 inside)
    assert len(cb.state.negative_pairs) == 16 and set(cb.state.negative_weights.tolist()) <= {0.0, -1.0}
    assert (cb.state.negative_weights == -1).any()
    # the weights are those of the head clusters of the generations' own assignment
    clusters = SemanticClusters.load(next((run.root / "cache").glob("clusters-*.npz")))
    ids = clusters.assign(minilm().encode([p.response for p in cb.state.negative_pairs]))
    heads = head_clusters(ids, 4, 0.1)
    np.testing.assert_array_equal(cb.state.heads, heads)
    np.testing.assert_array_equal(cb.state.negative_weights, negative_weights(ids, heads))
    assert cb.state.head_share == pytest.approx(float(np.isin(ids, heads).mean()))
    for epoch in (0, 1, 2):
        batches = [b for b in spy.batches if b[0] == epoch]
        neg = [b for b in batches if any(i >= n for i in b[1])]
        gold = [b for b in batches if all(0 <= i < n for i in b[1])]
        assert len(neg) + len(gold) == len(batches) and neg  # epoch 0 already trains against negatives
        assert all(all(i >= n or i == -1 for i in b[1]) for b in neg)  # never mixed with gold
        assert sorted(i - n for b in neg for i in b[1] if i >= n) == list(range(16))  # every generation once
    # the logged summary describes what each epoch trained with: negatives from epoch 0 on
    assert len(cb.history) == 3 and all(r["dress/negatives"] > 0 and r["dress/weight_min"] == -1.0 for r in cb.history)
    assert cb.history[-1]["dress/negatives"] == float((cb.state.negative_weights == -1).sum())


@pytest.mark.slow
def test_every_n_epochs_mines_at_round_starts_only(tmp_path):
    cb = dress(tmp_path, mining={"at": "start", "num_contexts": 12}, every_n_epochs=2)
    calls = count_mining(cb)
    trainer(tmp_path, [cb], max_epochs=4, limit_train_batches=2, limit_val_batches=1).fit(
        tiny_lm(), datamodule=datamodule()
    )
    assert calls == [(0, 0), (1, 2)]  # no round starts at epoch 4 (never trained)


# Today's end-of-epoch schedule (mixed batches): asserted on test_dress_callback.py's uninterrupted run, which
# uses those settings (test_weights_reach_the_batches_and_negatives_join_the_next_epoch).


@pytest.mark.slow
@pytest.mark.xdist_group(RESUME)
def test_resume_mines_each_round_once_and_ends_bit_identical(uninterrupted, tmp_path):
    """Interrupted after 2 of 3 epochs and resumed; the uninterrupted run is the start-schedule test's."""

    def run(root, max_epochs, ckpt_path=None, checkpoint=False):
        cb = dress(root, mining={"at": "start", "batches": "separate", "loss": "unlikelihood", "num_contexts": 16})
        calls = count_mining(cb)
        callbacks = [cb]
        if checkpoint:
            callbacks.append(ModelCheckpoint(dirpath=root / "ckpt", save_last=True, every_n_epochs=1))
        model, dm = tiny_lm(), datamodule()
        trainer(
            root,
            callbacks,
            max_epochs=max_epochs,
            limit_train_batches=None,
            limit_val_batches=1,
            enable_checkpointing=checkpoint,
        ).fit(model, datamodule=dm, ckpt_path=ckpt_path)
        return cb, calls, model, dm

    full_cb, full_calls, full_model, full_dm = (
        uninterrupted.cb,
        uninterrupted.calls,
        uninterrupted.model,
        uninterrupted.dm,
    )
    _part_cb, part_calls, _, _ = run(tmp_path / "part", 2, checkpoint=True)
    res_cb, res_calls, res_model, res_dm = run(tmp_path / "part", 3, ckpt_path=tmp_path / "part" / "ckpt" / "last.ckpt")
    assert full_calls == [(0, 0), (0, 1), (1, 2)]
    assert part_calls == [(0, 0), (0, 1)]  # no mining for epoch 2, which this run does not train
    assert [for_epoch for _, for_epoch in res_calls] == [2]  # the resumed run mines the round it trains, once
    assert res_cb.state.negative_pairs == full_cb.state.negative_pairs
    np.testing.assert_array_equal(res_cb.state.negative_weights, full_cb.state.negative_weights)
    # the gold weights: the one way the clusters reach training (the mined generations may all be empty)
    np.testing.assert_array_equal(res_cb.state.weights, full_cb.state.weights)
    assert res_dm.negatives == full_dm.negatives
    assert {b["negative_loss"] for b in res_dm.train_dataloader()} == {"unlikelihood"}  # with every batch
    assert res_dm.negative_batches == "separate"
    for (name, a), (_, b) in zip(full_model.state_dict().items(), res_model.state_dict().items()):
        assert torch.equal(a, b), name


def test_bad_arguments_are_named():
    for field, value in (("at", "middle"), ("loss", "ul"), ("batches", "own")):
        with pytest.raises(ValueError, match=rf"^Mining\.{field} must be one of \[.+\], got '{value}'$"):
            DRESSReweighting(mining=Mining(**{field: value}))


def test_resume_with_another_lambda_recomputes_the_weights(tmp_path):
    from monitor_setup import datamodule, dress, tiny_lm, trainer
    from pytorch_lightning.callbacks import ModelCheckpoint

    from lightning_div.dress.weights import dress_weights

    first = dress(tmp_path, mining=None, lam=2.0)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    tr = trainer(
        tmp_path, [first, ckpt], max_epochs=1, limit_train_batches=1, limit_val_batches=0, enable_checkpointing=True
    )
    tr.fit(tiny_lm(), datamodule=datamodule())
    with np.load(next((tmp_path / "cache").glob("assignments-*.npz"))) as stored:
        ids = stored["ids"]
    np.testing.assert_array_equal(first.state.weights, dress_weights(ids, 4, lam=2.0, normalize=True))  # the default

    second = dress(tmp_path, mining=None, lam=30.0)
    tr = trainer(tmp_path, [second], max_epochs=2, limit_train_batches=1, limit_val_batches=0)
    with pytest.warns(
        RuntimeWarning,
        match=r"DRESSReweighting: the checkpoint was made with other settings "
        r"\(lam 2\.0 -> 30\.0\): the weights are recomputed",
    ):
        tr.fit(tiny_lm(), datamodule=datamodule(), ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    np.testing.assert_array_equal(second.state.weights, dress_weights(ids, 4, lam=30.0, normalize=True))


def test_dress_mines_no_negatives_from_a_diverged_model(tmp_path):
    from monitor_setup import datamodule, dress, tiny_lm

    lm = tiny_lm(learning_rate=0.0)
    with torch.no_grad():
        lm.model.transformer.ln_f.weight.fill_(float("nan"))
    cb = dress(tmp_path, mining={"num_contexts": 8})
    with pytest.warns(RuntimeWarning, match=r"DRESSReweighting: the model has diverged"):
        fit(tmp_path, [cb], module=lm, datamodule=datamodule(), limit_val_batches=0)
    assert cb.state.negative_pairs == [] and len(cb.state.weights) == 160
