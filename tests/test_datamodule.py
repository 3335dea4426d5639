"""DialogueDataModule and the samplers: batch layout, weights, negatives, DDP exactly-once, weighted draws."""

import json
import logging

import numpy as np
import pytest
import torch
from datamodule_setup import AddNegatives, TinyLM, negatives_of, seen_by_epoch
from ddp_utils import forkserver_ddp
from helpers import causal_model, chitchat_pairs, quiet_trainer, seq2seq_model, tokenizer
from scipy.stats import chisquare

from lightning_div import DialoguePair
from lightning_div.datamodules import (
    DialogueDataModule,
    Examples,
    Fields,
    Negatives,
    ReaderOptions,
    as_pair,
    encode_pairs,
)
from lightning_div.datamodules.encoding import EncodedDialogues
from lightning_div.datamodules.samplers import (
    ExactDistributedSampler,
    SeparateBatchSampler,
    WeightedDistributedSampler,
    epoch_window,
)
from lightning_div.model.formatting import DialogueLayout

LAYOUT_32 = DialogueLayout(max_turns=3, max_context_tokens=32)  # 0.2's max_context_tokens=32 (with max_history=3)

PAIRS = [
    (["Hi there", "How are you?"], "Fine"),
    ("Tell me about your weekend plans please", "I will go hiking with my sister and her dog"),
]


def all_batches(loader):
    return list(loader)


# ---------------------------------------------------------------------------------------------- batch layout


def test_causal_batch_layout_token_by_token():
    tok = tokenizer()
    eos = tok.eos_token_id
    dm = DialogueDataModule(train=PAIRS, val=None, tokenizer=tok, batch_size=2, show_progress=False)
    batch = next(iter(dm.train_dataloader()))
    ids = lambda text: tok(text, add_special_tokens=False)["input_ids"]
    # DialoGPT layout: every context turn followed by EOS, then the response and EOS
    expected = {
        0: (ids("Hi there") + [eos] + ids("How are you?") + [eos], ids("Fine") + [eos]),
        1: (ids(PAIRS[1][0]) + [eos], ids(PAIRS[1][1]) + [eos]),
    }
    width = max(len(c) + len(r) for c, r in expected.values())
    assert batch["input_ids"].shape == (2, width)
    for row in range(2):
        ctx, resp = expected[int(batch["index"][row])]
        n = len(ctx) + len(resp)
        pad = width - n
        assert batch["input_ids"][row].tolist() == ctx + resp + [eos] * pad  # GPT-2 has no pad token: EOS pads
        assert batch["labels"][row].tolist() == [-100] * len(ctx) + resp + [-100] * pad
        assert batch["attention_mask"][row].tolist() == [1] * n + [0] * pad
    assert batch["sample_weight"].dtype == torch.float32 and batch["sample_weight"].tolist() == [1.0, 1.0]
    assert sorted(batch["index"].tolist()) == [0, 1]
    assert tok.pad_token_id is None  # the tokenizer was not changed


def test_seq2seq_batch_layout_token_by_token():
    tok = tokenizer(seq2seq=True)
    bos, eos, pad = tok.bos_token_id, tok.eos_token_id, tok.pad_token_id
    dm = DialogueDataModule(train=PAIRS, val=None, tokenizer=tok, seq2seq=True, batch_size=2, show_progress=False)
    assert dm.seq2seq
    batch = next(iter(dm.train_dataloader()))
    ids = lambda text: tok(text, add_special_tokens=False)["input_ids"]
    # encoder: <s> turn1 \n turn2 </s>; decoder target: <s> response </s>
    expected = {
        0: ([bos] + ids("Hi there") + ids("\n") + ids("How are you?") + [eos], [bos] + ids("Fine") + [eos]),
        1: ([bos] + ids(PAIRS[1][0]) + [eos], [bos] + ids(PAIRS[1][1]) + [eos]),
    }
    enc_width = max(len(c) for c, _ in expected.values())
    dec_width = max(len(r) for _, r in expected.values())
    for row in range(2):
        ctx, resp = expected[int(batch["index"][row])]
        assert batch["input_ids"][row].tolist() == ctx + [pad] * (enc_width - len(ctx))
        assert batch["attention_mask"][row].tolist() == [1] * len(ctx) + [0] * (enc_width - len(ctx))
        assert batch["labels"][row].tolist() == resp + [-100] * (dec_width - len(resp))


def test_batch_tokenisation_equals_encode_pair():
    # the cached, batched tokenisation gives exactly DialogueLayout.encode_pair's ids (window truncation included)
    pairs = list(chitchat_pairs("validation", 10))
    for seq2seq in (False, True):
        tok = tokenizer(seq2seq)
        model = seq2seq_model(max_position_embeddings=32) if seq2seq else causal_model(n_positions=32)
        fmt = DialogueLayout(max_turns=2)
        direct = [fmt.encode_pair(p.context, p.response, tok, model) for p in pairs]
        assert list(encode_pairs(pairs, tok, model, fmt, show_progress=False)) == direct
        assert max(len(c) + len(r) for c, r in direct) == 32 or seq2seq  # some example hit the window


# ---------------------------------------------------------------------------------------------- data choices


def test_subset_is_deterministic_and_stats_logged_once(caplog):
    pairs = list(chitchat_pairs("train", 20))
    make = lambda seed: DialogueDataModule(
        train=pairs,
        val=pairs[:5],
        tokenizer=tokenizer(),
        examples=Examples(max_train=10),
        seed=seed,
        show_progress=False,
    )
    a, b, c = make(0), make(0), make(1)
    with caplog.at_level(logging.INFO, logger="lightning_div"):
        a.setup("fit")
        a.setup("fit")
        a.train_responses()
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("train data:")]
    assert len(logged) == 1 and f"{len(pairs):,} examples" in logged[0] and "random 10 of them" in logged[0]
    assert sum("no model with a config" in r.getMessage() for r in caplog.records) == 1
    assert a.train_pairs() == b.train_pairs() != c.train_pairs()
    assert len(a.train_pairs()) == 10
    positions = [pairs.index(p) for p in a.train_pairs()]
    assert positions == sorted(positions)  # a subset in the original order
    assert a.read_stats["train"].examples == len(pairs)
    assert a.train_responses() == [p.response for p in a.train_pairs()]
    assert a.train_contexts() == [p.context for p in a.train_pairs()]


def test_missing_tokenizer_and_data_are_explained():
    with pytest.raises(ValueError, match="needs a tokenizer"):
        DialogueDataModule(train=PAIRS, val=None).setup("fit")
    with pytest.raises(ValueError, match="stage 'test' needs test data: pass test="):
        DialogueDataModule(train=PAIRS, val=None, tokenizer=tokenizer()).setup("test")
    with pytest.raises(ValueError, match="stage 'validate' needs val data"):
        DialogueDataModule(train=PAIRS, val=None, tokenizer=tokenizer()).setup("validate")
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        DialogueDataModule(batch_size=0)


# ---------------------------------------------------------------------------------------------- DRESS hooks


def test_sample_weights_negatives_and_state():
    pairs = list(chitchat_pairs("train", 5))[:9]
    dm = DialogueDataModule(train=pairs, val=None, tokenizer=tokenizer(), batch_size=4, show_progress=False)
    n = len(pairs)
    assert dm.sample_weights.tolist() == [1.0] * n
    w = np.linspace(0.5, 2.0, n)
    dm.apply_weights(w)
    with pytest.raises(ValueError, match=r"need one weight per example \(9,\)"):
        dm.apply_weights(np.ones(n - 1))
    with pytest.raises(ValueError, match=r"sample weights\[2\] = nan is not finite"):
        dm.apply_weights(np.where(np.arange(n) == 2, np.nan, 1.0))
    assert dm.sample_weights.tolist() == w.tolist()  # a refused call changes nothing

    negatives = [(pairs[0].context, "i don't know"), DialoguePair(pairs[1].context, "i don't know either")]
    dm.apply_weights(
        w, Negatives(tuple(as_pair(p) for p in negatives), np.array([-1.0, -0.5]), "mixed", "unlikelihood")
    )
    seen = {}
    for batch in all_batches(dm.train_dataloader()):
        assert batch["negative_loss"] == "unlikelihood"  # how negatives are trained travels with the batch
        for i, weight, negative, labels in zip(
            batch["index"].tolist(), batch["sample_weight"].tolist(), batch["negative"].tolist(), batch["labels"]
        ):
            seen[i] = (weight, [t for t in labels.tolist() if t != -100], negative)
    assert sorted(seen) == list(range(n + 2))  # gold 0..8, then the negatives 9, 10
    assert [seen[i][0] for i in range(n)] == pytest.approx(w.astype(np.float32).tolist())
    assert (seen[n][0], seen[n + 1][0]) == (-1.0, -0.5)
    assert [seen[i][2] for i in range(n + 2)] == [False] * n + [True, True]  # each row says whether it is a negative
    tok = tokenizer()
    assert seen[n][1] == tok("i don't know", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert dm.state_dict() == {}  # applied, not owned: its owner (DRESS) checkpoints it

    dm.apply_weights(w, negatives_of([(pairs[2].context, "new")], [-1.0]))  # replaces, not appends
    assert [p.response for p in dm.negatives] == ["new"] and len(dm.train_dataset()) == n + 1
    dm.apply_weights(w, Negatives())
    assert dm.negatives == [] and len(dm.train_dataset()) == n
    with pytest.raises(ValueError, match=r"Negatives: 2 pairs but 1 weights"):
        negatives_of([(("a",), "b"), (("c",), "d")], [-1.0])


def test_sampler_mode():
    pairs = list(chitchat_pairs("train", 5))[:8]
    dm = DialogueDataModule(train=pairs, val=None, tokenizer=tokenizer(), batch_size=4, show_progress=False)
    one = negatives_of([(pairs[0].context, "x")], [-1.0])
    dm.apply_weights(np.ones(8), one)
    with pytest.raises(ValueError, match="negative: a sampler draws .* use mode='loss'"):
        dm.apply_weights(np.ones(8), one, "sampler")
    assert dm.sampling_mode == "loss"
    weights = np.array([0, 0, 0, 1, 0, 0, 0, 3], dtype=float)
    dm.apply_weights(weights, Negatives(), "sampler")
    loader = dm.train_dataloader()
    assert isinstance(loader.sampler, WeightedDistributedSampler)
    batches = all_batches(loader)
    drawn = [i for b in batches for i in b["index"].tolist()]
    assert len(drawn) == 8 and set(drawn) <= {3, 7}  # only examples with weight > 0 are drawn
    assert all(b["sample_weight"].tolist() == [1.0] * len(b["index"]) for b in batches)
    with pytest.raises(ValueError, match="use mode='loss'"):
        dm.apply_weights(weights, one, "sampler")
    with pytest.raises(ValueError, match=r"mode must be one of \('loss', 'sampler'\), got 'both'"):
        dm.apply_weights(weights, Negatives(), "both")
    with pytest.raises(ValueError, match="all sampling weights are 0"):
        dm.apply_weights(np.zeros(8), Negatives(), "sampler")


# ---------------------------------------------------------------------------------------------- samplers


def test_exact_sampler_every_index_once_with_marked_padding():
    n, world = 11, 3  # 11 examples on 3 ranks: 4 + 4 + 3, so one virtual padding index
    dataset = EncodedDialogues([([i], [i]) for i in range(n)])
    shards = []
    for rank in range(world):
        sampler = ExactDistributedSampler(dataset, num_replicas=world, rank=rank, seed=5)
        sampler.set_epoch(2)
        shards.append(list(sampler))
    assert [len(s) for s in shards] == [4, 4, 4]
    flat = [i for s in shards for i in s]
    assert sorted(i for i in flat if i < n) == list(range(n))
    (virtual,) = [i for i in flat if i >= n]
    item = dataset[virtual]
    assert (item["index"], item["sample_weight"]) == (-1, 0.0)
    assert item["context_ids"] == [virtual - n]  # a copy of a real example, so the batch shapes stay normal
    # deterministic per epoch, different across epochs, in order without shuffle
    again = ExactDistributedSampler(dataset, num_replicas=world, rank=0, seed=5)
    again.set_epoch(2)
    assert list(again) == shards[0]
    again.set_epoch(3)
    assert list(again) != shards[0]
    assert list(ExactDistributedSampler(dataset, 2, 1, shuffle=False)) == [1, 3, 5, 7, 9, 11]
    # more ranks than examples: every rank still gets one row, the real one exactly once
    tiny = EncodedDialogues([([0], [0])])
    rows = [list(ExactDistributedSampler(tiny, 4, r)) for r in range(4)]
    assert rows == [[0], [1], [1], [1]]


def test_weighted_sampler_frequencies_match_weights():
    weights = np.array([1.0, 2.0, 3.0, 4.0, 10.0, 0.0, 5.0])
    dataset = EncodedDialogues([([i], [i]) for i in range(len(weights))])
    counts = np.zeros(len(weights))
    for epoch in range(4):
        streams = []
        for rank in range(2):
            sampler = WeightedDistributedSampler(dataset, weights, num_samples=3000, num_replicas=2, rank=rank, seed=11)
            sampler.set_epoch(epoch)
            draws = list(sampler)
            assert len(draws) == 1500  # each rank draws its share of the epoch's 3000
            streams.append(draws)
            counts += np.bincount(draws, minlength=len(weights))
        # the ranks split one seeded stream: one process drawing 3000 gets the two shares interleaved
        single = WeightedDistributedSampler(dataset, weights, num_samples=3000, num_replicas=1, rank=0, seed=11)
        single.set_epoch(epoch)
        assert list(single)[0::2] == streams[0] and list(single)[1::2] == streams[1]
    assert counts[5] == 0  # weight 0 is never drawn
    keep = weights > 0
    expected = weights[keep] / weights[keep].sum() * counts.sum()
    # 12,000 draws, fixed seed: a true match gives a p-value far above 1e-3 (this one is deterministic)
    assert chisquare(counts[keep], expected).pvalue > 1e-3
    # and the test has power: the same counts are incompatible with uniform draws
    assert chisquare(counts[keep], np.full(keep.sum(), counts.sum() / keep.sum())).pvalue < 1e-12
    with pytest.raises(ValueError, match="is negative"):
        WeightedDistributedSampler(dataset, -weights, num_replicas=1, rank=0)


# ---------------------------------------------------------------------------------------------- real Trainer


@pytest.mark.parametrize("seq2seq", [False, True])
def test_trainer_fits_tiny_model(seq2seq):
    pairs = list(chitchat_pairs("train", 5))[:16]
    model = TinyLM(seq2seq=seq2seq)
    settings = dict(
        train=pairs,
        val=pairs[:4],
        batch_size=8,
        layout=DialogueLayout(max_turns=2, max_context_tokens=32, max_response_tokens=32),
        show_progress=False,
    )
    if seq2seq:  # used on its own first (no model: causal layout), then the Trainer's seq2seq model decides
        dm = DialogueDataModule(**settings, tokenizer=model.tokenizer)
        dm.setup("fit")
        assert not dm.seq2seq
    else:  # the tokenizer comes from the LightningModule
        dm = DialogueDataModule(**settings)
    quiet_trainer(max_epochs=8, num_sanity_val_steps=0, limit_val_batches=0).fit(model, dm)
    assert dm.seq2seq == seq2seq and dm.tokenizer is model.tokenizer
    batch = next(iter(dm.train_dataloader()))
    assert (batch["labels"][:, 0] != -100).all() == seq2seq  # causal labels start on the (masked) context
    assert batch["input_ids"].shape[1] <= (32 if seq2seq else 64)  # the token limits were applied
    assert len(model.losses) == 16  # 8 epochs x 2 batches
    assert np.mean(model.losses[-2:]) < np.mean(model.losses[:2]) - 1.0  # it learns from the labels


def test_negatives_reach_the_next_epoch_and_survive_resume(tmp_path):
    pairs = list(chitchat_pairs("train", 5))[:10]
    n = len(pairs)
    negatives = [(pairs[0].context, "generated one"), (pairs[1].context, "generated two")]
    dm = DialogueDataModule(train=pairs, val=None, batch_size=4, show_progress=False, layout=LAYOUT_32)
    dm_weights = np.arange(1, n + 1) / n
    model = TinyLM(lr=1e-3)
    trainer = quiet_trainer(
        max_epochs=2,
        callbacks=[AddNegatives(0, negatives, [-1.0, -1.0], gold_weights=dm_weights)],
        enable_checkpointing=True,
        default_root_dir=str(tmp_path),
        reload_dataloaders_every_n_epochs=1,  # the new negatives reach training through a rebuilt dataloader
    )
    trainer.fit(model, dm)
    by_epoch = {0: {}, 1: {}}
    for epoch, indices, weights in model.seen:
        by_epoch[epoch].update(zip(indices, weights))
    assert sorted(by_epoch[0]) == list(range(n))
    assert sorted(by_epoch[1]) == list(range(n + 2))  # rebuilt with the 2 negatives
    assert (by_epoch[1][n], by_epoch[1][n + 1]) == (-1.0, -1.0)
    assert [by_epoch[1][i] for i in range(n)] == pytest.approx(dm_weights.tolist())

    (ckpt,) = list(tmp_path.rglob("*.ckpt"))
    fresh = DialogueDataModule(train=pairs, val=None, batch_size=4, show_progress=False, layout=LAYOUT_32)
    resumed = TinyLM(lr=1e-3)
    quiet_trainer(
        max_epochs=3,
        enable_checkpointing=True,
        default_root_dir=str(tmp_path / "r"),
        reload_dataloaders_every_n_epochs=1,
        callbacks=[AddNegatives(0, negatives, [-1.0, -1.0])],  # its checkpointed state is restored and applied
    ).fit(resumed, fresh, ckpt_path=str(ckpt))
    assert fresh.sample_weights.tolist() == dm_weights.tolist()
    assert [p.response for p in fresh.negatives] == ["generated one", "generated two"]
    assert sorted(i for e, idx, _ in resumed.seen for i in idx) == list(range(n + 2))  # epoch 2 only


def test_epochs_of_a_window_each_take_examples_not_taken_before_and_every_negative():
    # 10 gold examples, 4 an epoch, then 2 negatives: the windows of epochs 0 and 1 are disjoint, and
    # epochs 0..4 take every gold example twice (20 places over 10 examples)
    n_gold, per, dataset = 10, 4, list(range(12))
    taken = []
    for epoch in range(5):
        shards = []
        for rank in range(2):
            sampler = ExactDistributedSampler(dataset, 2, rank, seed=3, num_gold=n_gold, gold_per_epoch=per)
            sampler.set_epoch(epoch)
            shards.append(list(sampler))
            assert len(sampler) == 3  # (4 + 2) / 2 ranks
        real = sorted(i for shard in shards for i in shard)
        assert real[-2:] == [10, 11] and len(real) == per + 2  # both negatives, every epoch, once
        assert sorted(epoch_window(n_gold, per, 3, epoch)) == real[:-2]
        taken += real[:-2]
    assert not set(taken[:4]) & set(taken[4:8])
    assert sorted(taken) == sorted(list(range(n_gold)) * 2)
    # without a window: the order the sampler always had, a permutation seeded by seed + epoch
    plain = ExactDistributedSampler(dataset, 1, 0, seed=3)
    plain.set_epoch(2)
    g = torch.Generator()
    g.manual_seed(5)
    assert list(plain) == torch.randperm(12, generator=g).tolist()
    # batches of their own: one group per batch, every negative, 4 gold examples
    separate = SeparateBatchSampler(dataset, [10, 2], 2, 1, 0, seed=3, first_group_per_epoch=per)
    for epoch in range(2):
        separate.set_epoch(epoch)
        batches = separate.batches()
        assert len(separate) == 6 and len(batches) == 3
        assert all(set(b) <= set(range(10)) or set(b) == {10, 11} for b in batches)
        assert sorted(i for b in batches for i in b if i < 10) == sorted(epoch_window(n_gold, per, 3, epoch))
    # one rule for the samplers and the module (check_count): 2.0 is refused as the module refuses it
    for bad, shown in ((0, "0"), (1.5, "1.5"), (2.0, "2.0"), (True, "True"), ("8", "'8'")):
        with pytest.raises(ValueError, match=rf"per_epoch must be an integer >= 1 \(or None\), got {shown}"):
            epoch_window(10, bad, 0, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^first_group_per_epoch must be an integer >= 1 \(or None\), got 2.0"):
        SeparateBatchSampler(dataset, [10, 2], 2, 1, 0, first_group_per_epoch=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^gold_per_epoch must be an integer >= 1 \(or None\), got 0"):
        ExactDistributedSampler(dataset, 1, 0, num_gold=10, gold_per_epoch=0)
    assert epoch_window(6, np.int64(3), 0, 0) == epoch_window(6, 3, 0, 0)  # numpy integers are integers
    # the module refuses what the samplers would, when it is built rather than at its first dataloader
    for bad, shown in ((0, "0"), (1.5, "1.5"), (True, "True"), ("8", "'8'")):
        with pytest.raises(
            ValueError, match=rf"Examples.train_per_epoch must be an integer >= 1 \(or None\), got {shown}"
        ):
            Examples(train_per_epoch=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Examples.max_train must be an integer >= 1 \(or None\), got 2.0"):
        Examples(max_train=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^batch_size must be an integer >= 1 \(or None\), got 0"):
        DialogueDataModule(train=PAIRS, val=None, batch_size=0)
    per_epoch = Examples(train_per_epoch=np.int64(4))  # type: ignore[arg-type]
    assert per_epoch.train_per_epoch == 4 and type(per_epoch.train_per_epoch) is int
    assert DialogueDataModule(train=PAIRS, val=None, examples=per_epoch).examples.train_per_epoch == 4


def test_a_fit_with_examples_per_epoch_trains_a_new_window_each_epoch_and_draws_that_many():
    pairs = list(chitchat_pairs("train", 5))[:12]
    dm = DialogueDataModule(
        train=pairs, val=None, batch_size=2, show_progress=False, layout=LAYOUT_32, examples=Examples(train_per_epoch=4)
    )
    model = TinyLM(lr=1e-3)
    quiet_trainer(max_epochs=3, reload_dataloaders_every_n_epochs=1).fit(model, dm)
    by_epoch = [sorted(i for e, idx, _ in model.seen if e == epoch for i in idx) for epoch in range(3)]
    assert [len(b) for b in by_epoch] == [4, 4, 4]
    assert sorted(i for b in by_epoch for i in b) == list(range(12))  # three windows: each example once
    # the same windows without rebuilding the dataloader: Lightning sets the sampler's epoch itself
    again = TinyLM(lr=1e-3)
    quiet_trainer(max_epochs=3).fit(again, dm)
    assert [sorted(i for e, idx, _ in again.seen if e == epoch for i in idx) for epoch in range(3)] == by_epoch
    # sampler mode draws that many an epoch
    drawn = DialogueDataModule(
        train=pairs, val=None, tokenizer=tokenizer(), show_progress=False, examples=Examples(train_per_epoch=4)
    )
    drawn.apply_weights(np.ones(12), Negatives(), "sampler")
    assert len(drawn.train_dataloader().sampler) == 4


@pytest.mark.xdist_group("two_processes")
def test_ddp_every_example_exactly_once_per_epoch(tmp_path):
    pairs = list(chitchat_pairs("train", 5))[:13]
    n = len(pairs)  # 13 on 2 ranks: 7 + 7, one padding row; with 2 negatives 15: again one padding row
    negatives = [(pairs[0].context, "generated one"), (pairs[3].context, "generated two")]
    gold_weights = 1.0 + np.arange(n) / 10
    dm = DialogueDataModule(train=pairs, val=None, batch_size=3, show_progress=False, layout=LAYOUT_32)
    model = TinyLM(record_dir=str(tmp_path), lr=1e-3)
    trainer = quiet_trainer(
        strategy=forkserver_ddp(),  # ddp_spawn's processes, forked from a server with torch imported
        devices=2,
        max_epochs=2,
        callbacks=[AddNegatives(0, negatives, [-1.0, -1.0], gold_weights=gold_weights)],
        reload_dataloaders_every_n_epochs=1,
    )
    trainer.fit(model, dm)
    seen = seen_by_epoch(tmp_path)
    for epoch, size in ((0, n), (1, n + 2)):
        real = sorted(i for i, w in seen[epoch] if i >= 0)
        assert real == list(range(size))  # every example exactly once over both ranks
        padding = [(i, w) for i, w in seen[epoch] if i < 0]
        assert padding == [(-1, 0.0)]  # the one row that evens out the shards weighs nothing
        weights = {i: w for i, w in seen[epoch] if i >= 0}
        assert [weights[i] for i in range(n)] == pytest.approx(gold_weights.astype(np.float32).tolist())
        assert all(w > 0 for i, w in weights.items() if i < n)
    assert [dict(seen[1])[i] for i in (n, n + 1)] == [-1.0, -1.0]


def test_lightning_cli_builds_the_datamodule(tmp_path, monkeypatch):
    from pytorch_lightning.cli import LightningCLI

    monkeypatch.setattr("sys.argv", ["lightning-div"])

    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"context": ["hi"], "response": "hello"}) + "\n")
    cli = LightningCLI(
        TinyLM,
        DialogueDataModule,
        run=False,
        args=[
            "--data.train",
            str(data),
            "--data.val",
            "null",
            "--data.layout.max_turns",
            "2",
            "--data.batch_size",
            "4",
            "--data.examples.dedupe",
            "true",
            "--trainer.logger",
            "false",
        ],
    )
    dm = cli.datamodule
    assert (dm.batch_size, dm.layout, dm.examples) == (4, DialogueLayout(max_turns=2), Examples(dedupe=True))
    assert dm.train_pairs() == [DialoguePair(("hi",), "hello")]


READER_CSV = "history;reply;extra\nhi // how are you?;fine;a | b\nwhat now?;sleep;\n"
READER_PAIRS = [DialoguePair(("hi", "how are you?"), "fine", ("a", "b")), DialoguePair(("what now?",), "sleep")]
READER = ReaderOptions(
    fields=Fields(context="history", response="reply", references="extra"),
    delimiter=";",
    context_separator=" // ",
    references_separator=" | ",
)


def test_reader_options_from_a_yaml_config(tmp_path, monkeypatch):
    """One `reader:` object in a LightningCLI config: column names, delimiter and separators reach the reader."""
    from pytorch_lightning.cli import LightningCLI

    monkeypatch.setattr("sys.argv", ["lightning-div"])
    data = tmp_path / "train.csv"
    data.write_text(READER_CSV)
    config = tmp_path / "config.yaml"
    config.write_text(
        f"""
data:
  train: {data}
  val: null
  reader:
    fields: {{context: history, response: reply, references: extra}}
    delimiter: ";"
    context_separator: " // "
    references_separator: " | "
trainer:
  logger: false
"""
    )
    dm = LightningCLI(TinyLM, DialogueDataModule, run=False, args=["--config", str(config)]).datamodule
    assert dm.reader == READER
    assert dm.train_pairs() == READER_PAIRS
    # only the options set change; the others keep their defaults (here: the field names not given)
    config.write_text(f"data:\n  train: {data}\n  val: null\n  reader:\n    fields: {{response: reply}}\n")
    dm = LightningCLI(TinyLM, DialogueDataModule, run=False, args=["--config", str(config)]).datamodule
    assert dm.reader == ReaderOptions(fields=Fields(response="reply"))
    # a misspelt option is refused while the config is parsed, before anything runs
    config.write_text(f"data:\n  train: {data}\n  reader:\n    fields: {{contxt: history}}\n")
    with pytest.raises(SystemExit, match=r"^2$"):  # argparse's usage error: exit code 2
        LightningCLI(TinyLM, DialogueDataModule, run=False, args=["--config", str(config)])


def test_reader_options_in_python_and_in_a_checkpoint(tmp_path):
    """The same object from Python; the checkpoint keeps it as plain values (weights_only=True) and loads it back."""
    data = tmp_path / "train.csv"
    data.write_text(READER_CSV)
    dm = DialogueDataModule(train=str(data), val=None, tokenizer=tokenizer(), reader=READER, show_progress=False)
    assert dm.train_pairs() == READER_PAIRS
    assert DialogueDataModule(train=str(data), val=None).reader == ReaderOptions()  # the defaults
    plain = {
        "fields": {
            "context": "history",
            "response": "reply",
            "references": "extra",
            "positive_responses": "positive_responses",
            "dialog": "dialog",
        },
        "delimiter": ";",
        "context_separator": " // ",
        "references_separator": " | ",
    }
    assert dm.hparams["reader"] == plain and dm.hparams_initial["reader"] == plain  # what loggers and checkpoints get
    dm.hparams.pop("show_progress")  # (a restored datamodule would show a bar: the default)
    model = TinyLM()
    trainer = quiet_trainer(max_steps=1, limit_val_batches=0)
    trainer.fit(model, datamodule=dm)
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    checkpoint = torch.load(tmp_path / "last.ckpt", weights_only=True)  # no class of ours in it
    assert checkpoint["datamodule_hyper_parameters"]["reader"] == plain
    restored = DialogueDataModule.load_from_checkpoint(tmp_path / "last.ckpt", tokenizer=tokenizer())
    assert restored.reader == READER and restored.train_pairs() == READER_PAIRS


def test_reader_options_bad_values_are_named():
    with pytest.raises(TypeError, match=r"unknown reader option\(s\) \['delimeter'\]"):
        ReaderOptions.of({"delimeter": ";"})
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['contxt'\]"):
        ReaderOptions.of({"fields": {"contxt": "history"}})
    with pytest.raises(TypeError, match="reader must be a ReaderOptions"):
        DialogueDataModule(reader="history")
    with pytest.raises(ValueError, match=r"ReaderOptions.delimiter must be one character or None, got ';;'"):
        ReaderOptions(delimiter=";;")
    with pytest.raises(ValueError, match=r"ReaderOptions.context_separator must be a non-empty string, got ''"):
        ReaderOptions(context_separator="")
    with pytest.raises(TypeError, match="ReaderOptions.fields must be a Fields, got dict"):
        ReaderOptions(fields={"context": "history"})
    assert ReaderOptions.of(READER.as_dict()) == READER and ReaderOptions.of(None) == ReaderOptions()


@pytest.mark.parametrize(
    "changed, message",
    [
        ({"batch_size": 8}, r"batch_size 4 -> 8"),
        ({"batch_size": 2}, r"batch_size 4 -> 2"),
        ({"examples": Examples(train_per_epoch=16)}, r"train_examples_per_epoch None -> 16"),
    ],
    ids=["batch-8", "batch-2", "per-epoch-16"],
)
def test_a_mid_epoch_resume_under_other_batching_is_refused(changed, message, tmp_path):
    # issue 44 M3: saved after 5 batches of 4 and resumed with batch_size=8, 4 examples of the epoch were never
    # trained; with 2, 10 were trained twice; with 16 examples an epoch, 2 were skipped. No warning.
    from pytorch_lightning.callbacks import ModelCheckpoint

    pairs = list(chitchat_pairs("train", 5))[:40]
    settings = dict(train=pairs, val=None, batch_size=4, show_progress=False)
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=5, save_top_k=-1)
    trainer = quiet_trainer(max_epochs=1, max_steps=5, callbacks=[ckpt], enable_checkpointing=True)
    trainer.fit(TinyLM(), datamodule=DialogueDataModule(**settings))
    path = str(tmp_path / "epoch=0-step=5.ckpt")
    state = torch.load(path, weights_only=False)["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    assert state == {
        "epoch": 0,
        "batches": 5,
        "settings": {"batch_size": 4, "train_examples_per_epoch": None, "world_size": 1},
    }
    with pytest.raises(ValueError, match=rf"cannot resume epoch 0 mid-way: .* after 5 batch\(es\) .*{message}"):
        quiet_trainer(max_epochs=1).fit(
            TinyLM(), datamodule=DialogueDataModule(**{**settings, **changed}), ckpt_path=path
        )
    # the same settings resume the rest of the epoch: 40 - 20 examples, each once
    same = TinyLM()
    quiet_trainer(max_epochs=1).fit(same, datamodule=DialogueDataModule(**settings), ckpt_path=path)
    rest = [i for _, indices, _ in same.seen for i in indices]
    assert len(rest) == len(set(rest)) == 20


def test_the_default_layout_keeps_three_turns_and_is_the_modules_layout():
    """0.2's max_history=3 is 1.0's default layout: a five-turn context is read with its last three turns."""
    pairs = [(["t1", "t2", "t3", "t4", "t5"], "r")]
    dm = DialogueDataModule(train=pairs, val=None)
    assert dm.layout == DialogueLayout(max_turns=3) and dm.examples == Examples()
    assert dm.train_pairs()[0].context == ("t3", "t4", "t5")
    every_turn = DialogueDataModule(train=pairs, val=None, layout=DialogueLayout())
    assert every_turn.train_pairs()[0].context == ("t1", "t2", "t3", "t4", "t5")
