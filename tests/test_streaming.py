"""StreamingDialogueDataModule: the training split in LitData chunks, with the in-memory path's guarantees."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from helpers import chitchat_pairs, tokenizer
from test_datamodule import AddNegatives, TinyLM, _seen_by_epoch, quiet_trainer

from lightning_div.datamodules import DialogueDataModule, DialoguePair

litdata = pytest.importorskip("litdata")

from lightning_div.datamodules.streaming import ChunkedPairs, StreamingDialogueDataModule  # noqa: E402


def plain(value):
    """A batch field as plain Python: tensors as lists, the per-batch strings (negative_loss) as they are."""
    return value.tolist() if hasattr(value, "tolist") else value


def pair_modules(tmp_path, pairs, **kw):
    args = dict(train=pairs, val=None, tokenizer=tokenizer(), batch_size=4, show_progress=False, **kw)
    return DialogueDataModule(**args), StreamingDialogueDataModule(stream_dir=tmp_path / "stream", **args)


def test_same_ids_and_batches_as_the_in_memory_path(tmp_path):
    pairs = list(chitchat_pairs("train", 6))[:30]
    memory, stream = pair_modules(tmp_path, pairs, max_context_tokens=24)
    memory.setup("fit")
    stream.prepare_data()
    stream.setup("fit")
    chunks = stream._encoded_split("train")
    assert isinstance(chunks, ChunkedPairs) and len(chunks) == len(pairs)
    encoded = memory._encoded_split("train")
    assert [chunks[i] for i in range(len(pairs))] == [encoded[i] for i in range(len(pairs))]
    assert chunks[-1] == encoded[len(pairs) - 1]
    # the text is kept too: the monitors sample training pairs, DRESS embeds the gold responses
    assert [stream.train_pairs()[i] for i in (0, 7, 29)] == [memory.train_pairs()[i] for i in (0, 7, 29)]
    assert stream.gold_train_responses() == memory.gold_train_responses()
    assert stream.train_contexts() == memory.train_contexts()
    # the same sampler over the same indices: the very same batches, tensor by tensor
    for a, b in zip(memory.train_dataloader(), stream.train_dataloader(), strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert plain(a[key]) == plain(b[key]), key


def test_chunks_are_written_once_per_content(tmp_path, monkeypatch):
    pairs = list(chitchat_pairs("train", 4))[:12]
    _, first = pair_modules(tmp_path, pairs)
    written = first.chunk_dir()
    assert (written / "index.json").is_file()
    assert not list(written.parent.glob("*.tmp-*"))  # nothing half-written left behind

    def no_rewrite(*args, **kwargs):
        raise AssertionError("the chunks were written again")

    monkeypatch.setattr(litdata, "optimize", no_rewrite)
    _, again = pair_modules(tmp_path, pairs)
    assert again.chunk_dir() == written  # same data, tokenizer and settings: reused
    monkeypatch.undo()
    _, other = pair_modules(tmp_path, pairs, max_response_tokens=5)
    assert other.chunk_dir() != written  # a setting the ids depend on: a folder of its own
    _, fewer = pair_modules(tmp_path, pairs[:-1])
    assert fewer.chunk_dir() not in (written, other.chunk_dir())


def test_a_file_source_is_hashed_by_its_bytes(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"context": ["Hi"], "response": "Hello"}\n{"context": ["Bye"], "response": "See you"}\n')
    dm = StreamingDialogueDataModule(
        train=str(path), val=None, tokenizer=tokenizer(), show_progress=False, stream_dir=tmp_path / "s"
    )
    first = dm.chunk_dir()
    path.write_text('{"context": ["Hi"], "response": "Hello!"}\n{"context": ["Bye"], "response": "See you"}\n')
    changed = StreamingDialogueDataModule(
        train=str(path), val=None, tokenizer=tokenizer(), show_progress=False, stream_dir=tmp_path / "s"
    )
    assert changed.chunk_dir() != first
    assert changed.train_pairs()[0].response == "Hello!"


def test_weights_negatives_and_sampler_mode_as_in_memory(tmp_path):
    """DRESS's protocol on the streaming path: loss weights by index, negatives appended, weighted draws."""
    from lightning_div.dress.protocol import Negatives

    pairs = list(chitchat_pairs("train", 4))[:12]
    memory, stream = pair_modules(tmp_path, pairs)
    weights = 0.5 + np.arange(len(pairs)) / 10
    negatives = Negatives((DialoguePair(pairs[0].context, "generated"),), np.array([-1.0]), batches="mixed")
    for dm in (memory, stream):
        dm.apply_weights(weights, negatives, "loss")
    rows = [{k: plain(v) for k, v in b.items()} for b in stream.train_dataloader()]
    assert rows == [{k: plain(v) for k, v in b.items()} for b in memory.train_dataloader()]
    assert {b["negative_loss"] for b in rows} == {"nll"} and [n for b in rows for n in b["negative"]].count(True) == 1
    seen = {i: w for b in rows for i, w in zip(b["index"], b["sample_weight"])}
    assert sorted(seen) == list(range(len(pairs) + 1)) and seen[len(pairs)] == -1.0
    assert [seen[i] for i in range(len(pairs))] == pytest.approx(weights.tolist())
    draws = {}
    for name, dm in (("memory", memory), ("stream", stream)):
        dm.apply_weights(weights, None, "sampler")
        draws[name] = [b["index"].tolist() for b in dm.train_dataloader()]
    assert draws["stream"] == draws["memory"]  # the same weighted draws (frequencies: test_datamodule)


@pytest.mark.slow
def test_ddp_every_example_exactly_once_per_epoch(tmp_path):
    pairs = list(chitchat_pairs("train", 5))[:13]
    n = len(pairs)  # 13 on 2 ranks: one padding row; 15 with the negatives: again one
    negatives = [(pairs[0].context, "generated one"), (pairs[3].context, "generated two")]
    dm = StreamingDialogueDataModule(
        train=pairs, val=None, batch_size=3, show_progress=False, max_context_tokens=32, stream_dir=tmp_path / "s"
    )
    dm.apply_weights(1.0 + np.arange(n) / 10)
    record = tmp_path / "record"
    record.mkdir()
    model = TinyLM(record_dir=str(record), lr=1e-3)
    trainer = quiet_trainer(
        strategy="ddp_spawn", devices=2, max_epochs=2, callbacks=[AddNegatives(0, negatives, [-1.0, -1.0])]
    )
    trainer.fit(model, dm)
    seen = _seen_by_epoch(record)
    for epoch, size in ((0, n), (1, n + 2)):
        assert sorted(i for i, _ in seen[epoch] if i >= 0) == list(range(size))
        assert [(i, w) for i, w in seen[epoch] if i < 0] == [(-1, 0.0)]
    assert len(list((tmp_path / "s").glob("train-*"))) == 1  # written once, by one process


def test_missing_litdata_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "litdata", None)
    with pytest.raises(ImportError, match=r"lightning-div\[stream\]"):
        StreamingDialogueDataModule(train=[("a", "b")], val=None)
