"""DRESS <-> datamodule through one protocol: the docs' own datamodule runs, DRESS owns and checks.

* The ``ReweightableDataModule`` example on the DRESS docs page runs as printed, and DRESS
  reweights it: the gold rows carry exactly the callback's weights, the next epoch's rows the
  negatives it mined.
* Two loss curves: the docs' own LightningModule and DialogueLM log gold batches as
  ``train/loss`` and DRESS's negative batches as ``train/negative_loss``, never one curve over both.
* DRESS's checks run in ``setup``, before any work: a Trainer that never rebuilds the train
  dataloader (with negatives) and a datamodule without the protocol are refused with the fix.
* The weights have one owner: after a DRESS fit the DialogueDataModule's checkpoint state is
  empty and the checkpoint holds them once, under the callback.
* The setters the protocol replaced are gone (0.2.0); a 0.1 checkpoint's datamodule weights are
  not restored, and a warning says so.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from docs_blocks import fenced_blocks, section
from helpers import causal_model, tokenizer
from monitor_setup import TRAIN, TinyChat, collate, datamodule, dress, tiny_lm, trainer
from pytorch_lightning.loggers import CSVLogger

from lightning_div import DialoguePair
from lightning_div import ReweightableDataModule as TopLevelProtocol
from lightning_div.datamodules import DialogueDataModule, Negatives, ReweightableDataModule
from lightning_div.dress.losses import dress_loss

DOCS = Path(__file__).resolve().parents[1] / "docs" / "callbacks" / "dress.md"

#: One worker runs the two tests of the DialogueLM run (a module fixture), so it is trained once.
OWN_RUN = "dress_protocol_own_run"


def docs_example(heading: str = "Your own datamodule") -> dict:
    """Run the python block of one section of the DRESS page as printed (a whole script up to its Trainer)."""
    (block,) = fenced_blocks(section(DOCS.read_text(encoding="utf-8"), heading, str(DOCS)))
    # the own-datamodule page is a whole script: its definitions, not its fit (which would train in the working
    # directory); the script must still have the line the definitions end at
    if heading == "Your own datamodule":
        assert "\nspace = SemanticSpace(" in block, f"{DOCS}: the script's Trainer part no longer starts at 'space = '"
    block = block.split("\nspace = SemanticSpace(", 1)[0]
    namespace: dict = {"__name__": "docs_example"}
    exec(compile(block, f"{DOCS}: {heading}", "exec"), namespace)
    return namespace


class WeightedChat(TinyChat):
    """A user's module for the docs' datamodule: tokenises (pair, weight) rows, weighted loss."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, list[DialoguePair], list[float]]] = []

    def training_step(self, batch, batch_idx):
        pairs = [DialoguePair(tuple(context), response) for context, response in batch["pairs"]]
        weights = batch["sample_weight"].tolist()
        self.seen.append((self.current_epoch, pairs, weights, batch["negative"].tolist(), batch["negative_loss"]))
        enc = collate(pairs, self.tokenizer, self.model)
        logits = self.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
        return dress_loss(logits, enc["labels"], batch).loss  # the batch says how to train its negatives


def test_the_docs_datamodule_is_reweighted_by_dress(tmp_path):
    ns = docs_example()
    MyDialogueData = ns["MyDialogueData"]
    pairs = TRAIN[:48]
    dm = MyDialogueData(pairs, batch_size=8)
    assert isinstance(dm, ReweightableDataModule) and isinstance(dm, TopLevelProtocol)
    cb = dress(
        tmp_path, mining={"at": "start", "num_contexts": 16, "loss": "unlikelihood", "batches": "separate"}
    )  # every generation kept (zero weights too): 16 rows a round
    model = WeightedChat()
    tr = trainer(tmp_path, [cb], max_epochs=2, limit_train_batches=None, limit_val_batches=0)
    assert tr.reload_dataloaders_every_n_epochs == 1  # what DRESS with negatives asks for (checked in setup)
    tr.fit(model, datamodule=dm)

    key = {(p.context, p.response): i for i, p in enumerate(pairs)}
    assert len(key) == len(pairs)  # no duplicate examples: each row maps back to one index
    for epoch in (0, 1):
        rows = [(p, w) for e, ps, ws, _, _ in model.seen if e == epoch for p, w in zip(ps, ws)]
        gold = [(key[(p.context, p.response)], w) for p, w in rows if (p.context, p.response) in key]
        assert sorted(i for i, _ in gold) == list(range(len(pairs)))  # every gold example once an epoch
        assert [w for _, w in sorted(gold)] == pytest.approx(cb.state.weights.tolist())  # DRESS's weights
        assert len(rows) == len(pairs) + 16  # mined at the start of every round: 16 generations each
    # the last epoch trained on what the callback mined at the end of epoch 0 for it, with its weights
    last = sorted((p.response, w) for e, ps, ws, _, _ in model.seen if e == 1 for p, w in zip(ps, ws))
    expected = sorted(
        [(p.response, w) for p, w in zip(pairs, cb.state.weights.tolist())]
        + list(zip((p.response for p in cb.state.negative_pairs), cb.state.negative_weights.tolist()))
    )
    assert [r for r, _ in last] == [r for r, _ in expected]
    assert [w for _, w in last] == pytest.approx([w for _, w in expected])
    assert dm.negatives.loss == "unlikelihood" and dm.negatives.batches == "separate"
    # every batch carried the loss kind and marked the negatives: the training_step read nothing else
    assert {kind for *_, kind in model.seen} == {"unlikelihood"}
    marked = [(p, n) for _, ps, _, ns, _ in model.seen for p, n in zip(ps, ns)]
    assert sum(n for _, n in marked) == 2 * 16  # the 16 generations of each round
    assert all(n == ((p.context, p.response) not in key) for p, n in marked)
    assert set(np.unique(cb.state.negative_weights)) <= {-1.0, 0.0} and cb.state.weights.min() < cb.state.weights.max()


def test_setup_refuses_a_trainer_that_never_rebuilds_the_train_dataloader(tmp_path):
    cb = dress(tmp_path, mining={"at": "start", "num_contexts": 8})
    tr = trainer(tmp_path, [cb], max_epochs=1, reload_dataloaders_every_n_epochs=0)
    with pytest.raises(
        ValueError,
        match=r"reload_dataloaders_every_n_epochs=0: create the Trainer with "
        r"reload_dataloaders_every_n_epochs=1 \(or use mining=None\)",
    ):
        tr.fit(tiny_lm(), datamodule=datamodule())
    assert cb.state.weights is None and not (tmp_path / "cache").exists()  # refused before any work
    # not even a divisor of every_n_epochs: a resumed run counts Lightning's reloads from its first epoch
    tr = trainer(tmp_path, [dress(tmp_path, every_n_epochs=4)], reload_dataloaders_every_n_epochs=2)
    with pytest.raises(ValueError, match="every 4 epoch.*reload_dataloaders_every_n_epochs=2: create"):
        tr.fit(tiny_lm(), datamodule=datamodule())
    # without negatives the weights are applied once, before the first dataloader: no reload needed
    dress(tmp_path, mining=None).check_trainer(trainer(tmp_path, []))


@pytest.mark.parametrize("limit", [5, 0.25])
def test_a_trainer_that_cuts_epochs_is_told_that_part_of_the_negatives_goes_untrained(tmp_path, limit):
    with pytest.warns(RuntimeWarning, match=rf"limit_train_batches={limit} trains only the first batches"):
        dress(tmp_path).check_trainer(
            trainer(tmp_path, [], limit_train_batches=limit, reload_dataloaders_every_n_epochs=1)
        )
    # whole epochs, or no negatives to cut: nothing to say
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dress(tmp_path).check_trainer(
            trainer(tmp_path, [], limit_train_batches=1.0, reload_dataloaders_every_n_epochs=1)
        )
        dress(tmp_path, mining=None).check_trainer(trainer(tmp_path, [], limit_train_batches=5))


def test_setup_refuses_a_datamodule_without_the_protocol(tmp_path):
    class NoProtocol(pl.LightningDataModule):
        def gold_train_responses(self):
            return [p.response for p in TRAIN]

    cb = dress(tmp_path, mining=None)
    with pytest.raises(
        ValueError,
        match=r"needs a datamodule that implements lightning_div.datamodules."
        r"ReweightableDataModule .*got NoProtocol",
    ):
        trainer(tmp_path, [cb], max_epochs=1).fit(TinyChat(), datamodule=NoProtocol())
    with pytest.raises(ValueError, match="got none"):  # the module's own dataloaders: nothing to reweight
        trainer(tmp_path, [dress(tmp_path, mining=None)], max_epochs=1).fit(TinyChat())


@pytest.mark.xdist_group(OWN_RUN)
def test_dress_is_the_single_owner_of_weights_and_negatives(own_run):
    """Asserted on the two-curves test's DialogueLM run (it checkpoints): one fit for both."""
    cb, dm, root = own_run.cb, own_run.dm, own_run.root
    assert dm.state_dict() == {}  # applied, not owned
    assert dm.sample_weights.tolist() == cb.state.weights.tolist() and dm.negatives == cb.state.negative_pairs
    checkpoint = torch.load(root / "ckpt" / "last.ckpt", weights_only=False)
    assert "DialogueDataModule" not in checkpoint
    assert checkpoint["callbacks"][cb.state_key]["reweighting"]["weights"] == cb.state.weights.tolist()


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


def test_the_old_setters_are_gone_and_their_checkpoint_state_is_said_not_restored():
    from helpers import tokenizer

    pairs = TRAIN[:4]
    dm = DialogueDataModule(train=pairs, val=None, tokenizer=tokenizer(), batch_size=4, show_progress=False)
    for name in ("set_sample_weights", "set_negatives", "set_sampling", "set_negative_loss", "negative_loss"):
        assert not hasattr(dm, name), name  # removed in 0.2.0: apply_weights(weights, Negatives(...), mode)
    assert dm.state_dict() == {}
    # what a lightning-div 0.1 datamodule checkpointed after the removed setters: not restored, and said so
    old = {"sample_weights": torch.tensor([1.0, 2.0, 3.0, 4.0]), "negatives": [], "sampling_mode": "loss"}
    with pytest.warns(RuntimeWarning, match=r"DialogueDataModule: the checkpoint holds weights .* not restored"):
        dm.load_state_dict(old)
    assert dm.sample_weights.tolist() == [1.0, 1.0, 1.0, 1.0]


class BatchKinds(pl.Callback):
    """What each training batch was (all gold, all negatives) and the loss its step returned, by batch index."""

    def __init__(self) -> None:
        self.steps: dict[int, tuple[str, float]] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        negative = batch["negative"]
        assert bool(negative.all()) or not bool(negative.any())  # separate batches: never mixed
        self.steps[batch_idx] = ("negative" if bool(negative.all()) else "gold", float(outputs["loss"]))


def two_curves_run(root: Path, model: pl.LightningModule, cache: Path, checkpoint: bool = False) -> SimpleNamespace:
    """One epoch, negatives mined at the start in batches of their own, every step logged to CSV; the clusters
    in ``cache`` (the two runs cluster the same gold responses: the second reads the first's)."""
    kinds = BatchKinds()
    cb = dress(root, mining={"at": "start", "batches": "separate", "num_contexts": 16}, dirpath=str(cache))
    logger = CSVLogger(root, name="csv")
    callbacks: list[pl.Callback] = [cb, kinds]
    if checkpoint:  # changes no training
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=root / "ckpt", save_last=True))
    dm = datamodule()
    tr = trainer(
        root,
        callbacks,
        loggers=[logger],
        max_epochs=1,
        limit_train_batches=None,
        limit_val_batches=0,
        log_every_n_steps=1,
        enable_checkpointing=checkpoint,
    )
    tr.fit(model, datamodule=dm)
    return SimpleNamespace(root=root, cb=cb, kinds=kinds, logger=logger, dm=dm)


@pytest.fixture(scope="module")
def clusters_cache(tmp_path_factory) -> Path:
    """The two-curves runs' clusters cache (content-addressed): one fit for both runs."""
    return tmp_path_factory.mktemp("clusters")


@pytest.fixture(scope="module")
def own_run(tmp_path_factory, clusters_cache) -> SimpleNamespace:
    """DialogueLM + DialogueDataModule + DRESS, checkpointed: the two-curves test's and the single-owner test's."""
    return two_curves_run(tmp_path_factory.mktemp("own"), tiny_lm(), clusters_cache, checkpoint=True)


@pytest.mark.xdist_group(OWN_RUN)
@pytest.mark.parametrize("module", ["docs", "DialogueLM"])
def test_gold_and_negative_batches_are_logged_as_two_curves(tmp_path, module, request, clusters_cache):
    import csv

    if module == "docs":
        MyChatbot = docs_example("Two loss curves: gold and negative")["MyChatbot"]
        run = two_curves_run(tmp_path, MyChatbot(causal_model(), tokenizer()), clusters_cache)
    else:
        run = request.getfixturevalue("own_run")
    kinds, logger = run.kinds, run.logger
    with open(Path(logger.log_dir) / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    by_step = {int(r["step"]): r for r in rows if r["train/loss_step"] or r["train/negative_loss_step"]}

    gold = {i: loss for i, (kind, loss) in kinds.steps.items() if kind == "gold"}
    negative = {i: loss for i, (kind, loss) in kinds.steps.items() if kind == "negative"}
    assert len(gold) == 10 and len(negative) == 1  # 160 gold examples, 16 generations, batches of 16
    for i, loss in gold.items():  # a gold batch's loss on the gold curve
        assert float(by_step[i]["train/loss_step"]) == pytest.approx(loss, rel=1e-6)
    for i, loss in negative.items():  # a negative batch's loss on its own curve
        assert float(by_step[i]["train/negative_loss_step"]) == pytest.approx(loss, rel=1e-6)
    # never one curve over both: no negative loss on the gold curve, no gold loss on the negative one
    # (at a step that does not log a key, Lightning repeats its last value: the same curve, held flat)
    on_gold = {float(r["train/loss_step"]) for r in rows if r["train/loss_step"]}
    on_negative = {float(r["train/negative_loss_step"]) for r in rows if r["train/negative_loss_step"]}

    def among(value, losses):
        return any(value == pytest.approx(loss, rel=1e-6) for loss in losses.values())

    assert on_gold and all(among(v, gold) and not among(v, negative) for v in on_gold)
    assert on_negative and all(among(v, negative) and not among(v, gold) for v in on_negative)
    epoch = [float(r["train/loss_epoch"]) for r in rows if r["train/loss_epoch"]]
    assert epoch == pytest.approx([np.mean(list(gold.values()))], rel=1e-5)  # the gold batches' mean only
