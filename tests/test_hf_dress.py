"""DRESS in a Hugging Face Trainer (DressTrainerMixin): the sampler's draws and the loss equal the Lightning path's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import TrainingArguments

from lightning_div.datamodules import read_pairs
from lightning_div.datamodules.dialogue import DialogueDataModule
from lightning_div.dress.state import DressState
from lightning_div.dress.weights import dress_weights
from lightning_div.integrations.transformers import DressTrainer, dress_dataset, gold_dress_state
from lightning_div.model.base import BASE_MODEL
from lightning_div.model.dialogue_lm import DialogueLM
from lightning_div.model.formatting import DialogueLayout
from lightning_div.pairs import DialoguePair
from lightning_div.reweighting import Negatives
from lightning_div.semantic.space import SemanticSpace


def _pairs(n=24):
    return list(read_pairs("chitchat:finetune", max_turns=2)[:n])


def _args(tmp_path, **kwargs):
    return TrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        report_to="none",
        use_cpu=True,
        remove_unused_columns=False,
        save_strategy="no",
        disable_tqdm=True,
        seed=7,
        **kwargs,
    )


def _datamodule(pairs, tokenizer):
    return DialogueDataModule(
        train=pairs,
        val=None,
        tokenizer=tokenizer,
        batch_size=4,
        layout=DialogueLayout(max_turns=2),
        seed=7,
        show_progress=False,
    )


def _indices(loader):
    return [int(i) for batch in loader for i in batch["index"]]


def test_the_weighted_sampler_draws_what_the_lightning_datamodule_draws(tmp_path):
    pairs = _pairs()
    lm = DialogueLM(BASE_MODEL)
    weights = np.linspace(0.05, 1.0, len(pairs)) ** 2
    state = DressState(weights=weights)
    dm = _datamodule(pairs, lm.tokenizer)
    dm.apply_weights(weights, mode="sampler")
    lightning = _indices(dm.train_dataloader())

    dataset, collator = dress_dataset(pairs, lm.tokenizer, lm.model, state, mode="sampler")
    trainer = DressTrainer(model=lm.model, args=_args(tmp_path), train_dataset=dataset, data_collator=collator)
    trainer.set_dress(state, mode="sampler")
    hf = _indices(trainer.get_train_dataloader())
    assert len(hf) == len(pairs) and hf == lightning  # the same weighted draws, in the same order
    assert len(set(hf)) < len(pairs)  # drawn with replacement: not a permutation
    batch = next(iter(trainer.get_train_dataloader()))
    assert batch["sample_weight"].tolist() == [1.0] * 4  # the weights decide the draws, the loss is unweighted


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_the_loss_is_dialoguelms_on_the_same_batch(tmp_path, smoothing):
    pairs = _pairs(12)
    lm = DialogueLM(BASE_MODEL, label_smoothing=smoothing)
    weights = np.linspace(0.2, 1.0, len(pairs))
    negatives = (DialoguePair(pairs[0].context, "i don't know"), DialoguePair(pairs[1].context, "i don't know."))
    dm = _datamodule(pairs, lm.tokenizer)
    dm.apply_weights(weights, Negatives(negatives, np.array([-1.0, 0.0]), "mixed", "unlikelihood"), mode="loss")
    batches = list(dm.train_dataloader())
    assert any(bool(b["negative"].any()) for b in batches) and any(not bool(b["negative"].all()) for b in batches)

    state = DressState(weights=weights, negative_loss="unlikelihood", negative_batches="mixed")
    state.set_negatives(negatives, np.array([-1.0, 0.0]), np.array([0, 1]), np.array([0]), 0.5, 0)
    dataset, collator = dress_dataset(pairs, lm.tokenizer, lm.model, state, mode="loss")
    args = _args(tmp_path, label_smoothing_factor=smoothing)
    trainer = DressTrainer(model=lm.model, args=args, train_dataset=dataset, data_collator=collator)
    trainer.set_dress(state, mode="loss")
    # the same examples, tokenised alike: the Trainer's dataset item i is the datamodule's
    assert [dataset[i] for i in range(len(dataset))] == [dm.train_dataset()[i] for i in range(len(dataset))]
    torch.manual_seed(0)
    lm.model.train()  # dropout is on in training: run both under one seed
    for batch in batches:
        torch.manual_seed(1)
        expected = lm.loss(batch, weighted=True).loss
        torch.manual_seed(1)
        got = trainer.compute_loss(lm.model, dict(batch))
        assert torch.allclose(got, expected, rtol=1e-6, atol=1e-7), (float(got), float(expected))
    lm.model.eval()  # evaluation: the plain NLL, unweighted, as DialogueLM's validation_step
    batch = batches[0]
    assert torch.allclose(trainer.compute_loss(lm.model, dict(batch)), lm.loss(batch, weighted=False).loss)
    # the same before set_dress (an evaluate() first): it was the Trainer's own loss, with the DRESS fields
    # passed into the model's forward, another number than the NLL the Lightning path validates with
    fresh = DressTrainer(model=lm.model, args=args, train_dataset=dataset, data_collator=collator)
    assert torch.allclose(fresh.compute_loss(lm.model, dict(batch)), lm.loss(batch, weighted=False).loss)


def test_gold_dress_state_holds_dressreweightings_weights(tmp_path):
    gold = [p.response for p in _pairs(40)]
    space = SemanticSpace(encoder="minilm", num_clusters=4, show_progress=False)
    state = gold_dress_state(space, gold, lam=2.0, cache_dir=tmp_path)
    ids = space.gold_assignments(gold)
    # DRESSReweighting's formula, clusters and default (mean-1 weights); the paper's raw ones one argument away
    assert np.array_equal(state.weights, dress_weights(ids, 4, 2.0, normalize=True))
    raw = gold_dress_state(space, gold, lam=2.0, normalize=False, cache_dir=tmp_path)
    assert np.array_equal(raw.weights, dress_weights(ids, 4, 2.0)) and state.weights.mean() == pytest.approx(1.0)
    assert len(set(state.weights.tolist())) > 1 and state.negative_pairs == []


def test_set_dress_refuses_what_it_cannot_train(tmp_path):
    pairs = _pairs(8)
    lm = DialogueLM(BASE_MODEL)
    state = DressState(weights=np.ones(len(pairs)), negative_batches="mixed")
    dataset, collator = dress_dataset(pairs, lm.tokenizer, lm.model, state)
    trainer = DressTrainer(model=lm.model, args=_args(tmp_path), train_dataset=dataset, data_collator=collator)
    with pytest.raises(ValueError, match="no weights"):
        trainer.set_dress(DressState())
    with pytest.raises(ValueError, match="mode must be one of"):
        trainer.set_dress(state, mode="both")
    negative = DressState(weights=np.ones(len(pairs)), negative_batches="mixed")
    negative.set_negatives([DialoguePair(("a",), "b")], np.array([-1.0]), np.array([0]), np.array([0]), 1.0, 0)
    with pytest.raises(ValueError, match="use mode='loss'"):
        trainer.set_dress(negative, mode="sampler")
    with pytest.raises(ValueError, match="negative_batches='mixed'"):
        separate = DressState(weights=np.ones(len(pairs)))
        separate.set_negatives([DialoguePair(("a",), "b")], np.array([-1.0]), np.array([0]), np.array([0]), 1.0, 0)
        dress_dataset(pairs, lm.tokenizer, lm.model, separate)
    with pytest.raises(ValueError, match="remove_unused_columns=False"):
        args = _args(tmp_path)
        args.remove_unused_columns = True
        DressTrainer(model=lm.model, args=args, train_dataset=dataset, data_collator=collator).set_dress(state)


@pytest.mark.slow
def test_a_dress_trainer_trains_in_both_modes(tmp_path):
    pairs = _pairs(16)
    for mode in ("loss", "sampler"):
        lm = DialogueLM(BASE_MODEL)
        state = DressState(weights=np.linspace(0.1, 1.0, len(pairs)), negative_batches="mixed")
        dataset, collator = dress_dataset(pairs, lm.tokenizer, lm.model, state, mode=mode)
        trainer = DressTrainer(
            model=lm.model, args=_args(tmp_path, max_steps=2), train_dataset=dataset, data_collator=collator
        )
        trainer.set_dress(state, mode=mode)
        before = [p.detach().clone() for p in lm.model.parameters()]
        trainer.train()
        losses = [r["train_loss"] for r in trainer.state.log_history if "train_loss" in r]
        assert losses and np.isfinite(losses[0])
        assert any(not torch.equal(a, b) for a, b in zip(before, lm.model.parameters())), mode


@pytest.mark.slow
def test_the_pages_dress_script_runs_verbatim(tmp_path, monkeypatch, capsys):
    import math
    import re

    from docs_blocks import ROOT, run_page_script

    monkeypatch.chdir(tmp_path)
    run_page_script(ROOT / "docs" / "hugging-face.md", "DRESS in a Trainer")
    out = capsys.readouterr().out.splitlines()
    sizes = [re.fullmatch(r"effective sample size ([\d.]+) of 64", line) for line in out]
    size = float(next(m for m in sizes if m).group(1))
    assert 1.0 <= size < 64.0  # the weights differ between clusters
    steps = [line for line in out if line.startswith("step ")]
    assert [s.split(":")[0] for s in steps] == ["step 4", "step 8"]
    assert all(0.0 <= float(s.rsplit(" ", 1)[1]) <= math.log(4) + 1e-3 for s in steps)
    assert len(list((tmp_path / "dress-cache").glob("clusters-*.npz"))) == 1  # fitted once for both


def test_the_loss_of_a_seq2seq_model_is_dialoguelms(tmp_path):
    """Encoder-decoder layout: the decoder reads the labels shifted right (DialogueLM.forward), logits aligned to them."""
    from helpers import seq2seq_model, tokenizer

    from lightning_div.dress.losses import dress_loss

    pairs = _pairs(8)
    tok, model = tokenizer(True), seq2seq_model()
    state = DressState(weights=np.linspace(0.2, 1.0, len(pairs)), negative_batches="mixed")
    dataset, collator = dress_dataset(pairs, tok, model, state, mode="loss")
    assert collator.seq2seq
    trainer = DressTrainer(model=model, args=_args(tmp_path), train_dataset=dataset, data_collator=collator)
    trainer.set_dress(state, mode="loss")
    batch = collator([dataset[i] for i in range(len(dataset))])
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels=batch["labels"])
    model.train()  # the weights apply in training: both forwards under one seed (dropout)
    with torch.no_grad():
        torch.manual_seed(1)
        logits = model(batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=decoder_input_ids)
        weighted = dress_loss(logits.logits, batch["labels"], batch, causal=False).loss
        plain = dress_loss(logits.logits, batch["labels"], {}, causal=False).loss
        torch.manual_seed(1)
        got = trainer.compute_loss(model, dict(batch))
    assert torch.allclose(got, weighted, rtol=1e-6) and not torch.allclose(weighted, plain, rtol=1e-3)


def test_set_dress_refuses_a_dataset_built_for_another_mode_or_state(tmp_path):
    """Issue 44 H1: a mode that does not match the dataset applied the weights twice, or not at all."""
    pairs = _pairs(8)
    lm = DialogueLM(BASE_MODEL)
    state = DressState(weights=np.linspace(0.25, 2.0, len(pairs)))

    def trainer(dataset_state, dataset_mode):
        dataset, collator = dress_dataset(pairs, lm.tokenizer, lm.model, dataset_state, mode=dataset_mode)
        return DressTrainer(model=lm.model, args=_args(tmp_path), train_dataset=dataset, data_collator=collator)

    with pytest.raises(ValueError, match="carries the DRESS weights.*a second time"):
        trainer(state, "loss").set_dress(state, "sampler")
    for built_state, built_mode in ((state, "sampler"), (None, "loss")):
        with pytest.raises(ValueError, match="does not carry this DressState's weights.*without DRESS"):
            trainer(built_state, built_mode).set_dress(state, "loss")
    with pytest.raises(ValueError, match="holds 4 weights .* dataset of 8 examples"):
        trainer(state, "loss").set_dress(DressState(weights=np.ones(4)), "loss")
    nan = DressState(weights=np.array([1.0, float("nan"), *[1.0] * 6]))
    with pytest.raises(ValueError, match="weight 1 is nan, not a finite number"):
        trainer(state, "loss").set_dress(nan, "loss")
    trainer(state, "loss").set_dress(state, "loss")  # the matching pairs are accepted
    trainer(state, "sampler").set_dress(state, "sampler")


def test_a_dress_trainer_without_set_dress_refuses_to_train():
    """Issue 54 H5: without set_dress() the batches carried weights and the run trained the unweighted loss, silently."""
    # train() refuses before it reads anything Trainer.__init__ sets up: an instance without a model and data
    # (built in microseconds, not the seconds a Trainer takes) shows the refusal as a real one meets it
    trainer = DressTrainer.__new__(DressTrainer)
    with pytest.raises(ValueError, match=r"DressTrainer.train\(\): set_dress\(state, mode=...\) was never called"):
        trainer.train()


def test_gold_dress_state_checks_lam_before_fitting_the_clusters():
    """Issue 54 L8: lam='30' failed with numpy's ufunc error, after the clusters were fitted."""

    class NoSpace:
        def fit(self, *args, **kwargs):
            raise AssertionError("the clusters must not be fitted for a lam that cannot be used")

    for bad in ("30", float("nan"), -1):
        with pytest.raises(ValueError, match="lam must be a finite number >= 0"):
            gold_dress_state(NoSpace(), ["a reply"], lam=bad)  # type: ignore[arg-type]
