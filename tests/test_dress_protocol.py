"""DRESS <-> datamodule through one protocol: the docs' own datamodule runs, DRESS owns and checks.

* The ``ReweightableDataModule`` example on the DRESS docs page runs as printed, and DRESS
  reweights it: the gold rows carry exactly the callback's weights, the next epoch's rows the
  negatives it mined.
* DRESS's checks run in ``setup``, before any work: a Trainer that never rebuilds the train
  dataloader (with negatives) and a datamodule without the protocol are refused with the fix.
* The weights have one owner: after a DRESS fit the DialogueDataModule's checkpoint state is
  empty and the checkpoint holds them once, under the callback.
* The setters the protocol replaces still work, with a DeprecationWarning.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from monitor_setup import TRAIN, TinyChat, collate, datamodule, dress, tiny_lm, trainer

from lightning_div import ReweightableDataModule as TopLevelProtocol
from lightning_div.datamodules import DialogueDataModule, DialoguePair, Negatives, ReweightableDataModule
from lightning_div.dress.losses import weighted_lm_loss

DOCS = Path(__file__).resolve().parents[1] / "docs" / "callbacks" / "dress.md"


def docs_example() -> dict:
    """Run the python block of the DRESS page's 'Your own datamodule' section as printed."""
    text = DOCS.read_text(encoding="utf-8")
    section = text.split("\n## Your own datamodule\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)
    namespace: dict = {"__name__": "docs_example"}
    exec(compile(block, f"{DOCS}: Your own datamodule", "exec"), namespace)
    return namespace


class WeightedChat(TinyChat):
    """A user's module for the docs' datamodule: tokenises (pair, weight) rows, weighted loss."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, list[DialoguePair], list[float]]] = []

    def training_step(self, batch, batch_idx):
        pairs = [DialoguePair(tuple(context), response) for context, response, _ in batch]
        weights = [w for _, _, w in batch]
        self.seen.append((self.current_epoch, pairs, weights))
        enc = collate(pairs, self.tokenizer, self.model)
        logits = self.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
        return weighted_lm_loss(
            logits,
            enc["labels"],
            torch.tensor(weights, dtype=torch.float32),
            negative_loss=self.trainer.datamodule.negatives.loss,
        )


def test_the_docs_datamodule_is_reweighted_by_dress(tmp_path):
    ns = docs_example()
    MyDialogueData = ns["MyDialogueData"]
    pairs = TRAIN[:48]
    dm = MyDialogueData(pairs, batch_size=8)
    assert isinstance(dm, ReweightableDataModule) and isinstance(dm, TopLevelProtocol)
    cb = dress(
        tmp_path, mine_at="start", num_negative_contexts=16, negative_loss="unlikelihood", negative_batches="separate"
    )  # every generation kept (zero weights too): 16 rows a round
    model = WeightedChat()
    tr = trainer(tmp_path, [cb], max_epochs=2, limit_train_batches=None, limit_val_batches=0)
    assert tr.reload_dataloaders_every_n_epochs == 1  # what DRESS with negatives asks for (checked in setup)
    tr.fit(model, datamodule=dm)

    key = {(p.context, p.response): i for i, p in enumerate(pairs)}
    assert len(key) == len(pairs)  # no duplicate examples: each row maps back to one index
    for epoch in (0, 1):
        rows = [(p, w) for e, ps, ws in model.seen if e == epoch for p, w in zip(ps, ws)]
        gold = [(key[(p.context, p.response)], w) for p, w in rows if (p.context, p.response) in key]
        assert sorted(i for i, _ in gold) == list(range(len(pairs)))  # every gold example once an epoch
        assert [w for _, w in sorted(gold)] == pytest.approx(cb.weights.tolist())  # DRESS's weights
        assert len(rows) == len(pairs) + 16  # mined at the start of every round: 16 generations each
    # the last epoch trained on what the callback mined at the end of epoch 0 for it, with its weights
    last = sorted((p.response, w) for e, ps, ws in model.seen if e == 1 for p, w in zip(ps, ws))
    expected = sorted(
        [(p.response, w) for p, w in zip(pairs, cb.weights.tolist())]
        + list(zip((p.response for p in cb.negative_pairs), cb.negative_weights.tolist()))
    )
    assert [r for r, _ in last] == [r for r, _ in expected]
    assert [w for _, w in last] == pytest.approx([w for _, w in expected])
    assert dm.negatives.loss == "unlikelihood" and dm.negatives.batches == "separate"
    assert set(np.unique(cb.negative_weights)) <= {-1.0, 0.0} and cb.weights.min() < cb.weights.max()


def test_setup_refuses_a_trainer_that_never_rebuilds_the_train_dataloader(tmp_path):
    cb = dress(tmp_path, mine_at="start", num_negative_contexts=8)
    tr = trainer(tmp_path, [cb], max_epochs=1, reload_dataloaders_every_n_epochs=0)
    with pytest.raises(
        ValueError,
        match=r"reload_dataloaders_every_n_epochs=0: create the Trainer with "
        r"reload_dataloaders_every_n_epochs=1 \(or use negatives=False\)",
    ):
        tr.fit(tiny_lm(), datamodule=datamodule())
    assert cb.weights is None and not (tmp_path / "cache").exists()  # refused before any work
    # not even a divisor of every_n_epochs: a resumed run counts Lightning's reloads from its first epoch
    tr = trainer(tmp_path, [dress(tmp_path, every_n_epochs=4)], reload_dataloaders_every_n_epochs=2)
    with pytest.raises(ValueError, match="every 4 epoch.*reload_dataloaders_every_n_epochs=2: create"):
        tr.fit(tiny_lm(), datamodule=datamodule())
    # without negatives the weights are applied once, before the first dataloader: no reload needed
    dress(tmp_path, negatives=False).check_trainer(trainer(tmp_path, []))


def test_setup_refuses_a_datamodule_without_the_protocol(tmp_path):
    class NoProtocol(pl.LightningDataModule):
        def gold_train_responses(self):
            return [p.response for p in TRAIN]

    cb = dress(tmp_path, negatives=False)
    with pytest.raises(
        ValueError,
        match=r"needs a datamodule that implements lightning_div.datamodules."
        r"ReweightableDataModule .*got NoProtocol",
    ):
        trainer(tmp_path, [cb], max_epochs=1).fit(TinyChat(), datamodule=NoProtocol())
    with pytest.raises(ValueError, match="got none"):  # the module's own dataloaders: nothing to reweight
        trainer(tmp_path, [dress(tmp_path, negatives=False)], max_epochs=1).fit(TinyChat())


def test_dress_is_the_single_owner_of_weights_and_negatives(tmp_path):
    dm = datamodule()
    cb = dress(tmp_path, mine_at="start", num_negative_contexts=8)
    ckpt = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    tr = trainer(
        tmp_path, [cb, ckpt], max_epochs=1, limit_train_batches=2, limit_val_batches=0, enable_checkpointing=True
    )
    tr.fit(tiny_lm(), datamodule=dm)
    assert dm.state_dict() == {}  # applied, not owned
    assert dm.sample_weights.tolist() == cb.weights.tolist() and dm.negatives == cb.negative_pairs
    checkpoint = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert "DialogueDataModule" not in checkpoint
    assert checkpoint["callbacks"][cb.state_key]["weights"] == cb.weights.tolist()


def test_apply_weights_validates_and_refuses_a_change_that_would_be_lost():
    from helpers import tokenizer

    pairs = TRAIN[:6]
    dm = DialogueDataModule(train=pairs, val=None, tokenizer=tokenizer(), batch_size=4, show_progress=False)
    negatives = Negatives((DialoguePair(pairs[0].context, "i don't know"),), np.array([-1.0]), "separate")
    dm.apply_weights(np.arange(1.0, 7.0), negatives, "loss")
    assert dm.sample_weights.tolist() == [1, 2, 3, 4, 5, 6] and dm.negative_batches == "separate"
    with pytest.raises(ValueError, match=r"need one weight per example \(6,\)"):
        dm.apply_weights(np.ones(5), Negatives(), "loss")
    with pytest.raises(ValueError, match="use mode='loss'"):  # a negative weight cannot be a draw probability
        dm.apply_weights(np.ones(6), negatives, "sampler")
    with pytest.raises(ValueError, match=r"mode must be one of \('loss', 'sampler'\), got 'both'"):
        dm.apply_weights(np.ones(6), Negatives(), "both")
    assert dm.sample_weights.tolist() == [1, 2, 3, 4, 5, 6] and len(dm.negatives) == 1  # refused: unchanged
    with pytest.raises(ValueError, match=r"weights\[1\] = nan is not finite"):
        Negatives((DialoguePair(("a",), "b"), DialoguePair(("c",), "d")), np.array([-1.0, np.nan]))
    with pytest.raises(ValueError, match="2 pairs but 1 weights"):
        Negatives((DialoguePair(("a",), "b"), DialoguePair(("c",), "d")), np.array([-1.0]))
    with pytest.raises(ValueError, match="negative_batches must be one of"):
        Negatives(batches="own")

    class NeverReloads:
        reload_dataloaders_every_n_epochs = 0
        current_epoch, global_rank, world_size = 0, 0, 1

    dm.trainer = NeverReloads()
    dm.train_dataloader()
    with pytest.raises(ValueError, match="create the Trainer with reload_dataloaders_every_n_epochs=1"):
        dm.apply_weights(np.ones(6), Negatives(), "loss")


def test_the_old_setters_still_work_with_a_deprecation_warning():
    from helpers import tokenizer

    pairs = TRAIN[:4]
    dm = DialogueDataModule(train=pairs, val=None, tokenizer=tokenizer(), batch_size=4, show_progress=False)
    with pytest.warns(DeprecationWarning, match="set_sample_weights is deprecated: use apply_weights"):
        dm.set_sample_weights(np.array([1.0, 2.0, 3.0, 4.0]))
    with pytest.warns(DeprecationWarning, match="set_negatives is deprecated"):
        dm.set_negatives([(pairs[0].context, "x")], np.array([-1.0]), batches="separate")
    with pytest.warns(DeprecationWarning, match="set_negative_loss is deprecated"):
        dm.set_negative_loss("unlikelihood")
    with pytest.warns(DeprecationWarning, match="set_sampling is deprecated"):
        dm.set_sampling("loss")
    assert dm.sample_weights.tolist() == [1, 2, 3, 4] and [p.response for p in dm.negatives] == ["x"]
    assert (dm.negative_batches, dm.negative_loss) == ("separate", "unlikelihood")
    # nobody else owns what they set, so the datamodule checkpoints it (as before the protocol)
    restored = DialogueDataModule(train=pairs, val=None, tokenizer=tokenizer(), show_progress=False)
    restored.load_state_dict(dm.state_dict())
    assert restored.sample_weights.tolist() == [1, 2, 3, 4] and restored.negative_loss == "unlikelihood"
    assert restored.state_dict().keys() == dm.state_dict().keys()
