"""The data side's 0.2 names (issue 61): each still works for one release, warns naming the 1.0 form, and
gives the same object or result as the new form."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from datamodule_setup import TinyLM
from helpers import chitchat_pairs, quiet_trainer, tokenizer

from lightning_div.datamodules import Chunks, DialogueDataModule, Examples
from lightning_div.model.formatting import DialogueLayout

PAIRS = [(["a", "b", "c", "d"], "e"), (["f"], "g"), (["a", "b", "c", "d"], "e"), (["h", "i"], "j")]


def old(match: str):
    return pytest.warns(DeprecationWarning, match=rf"^DialogueDataModule\({match}")


def test_each_old_keyword_warns_naming_its_new_place_and_builds_the_same_module():
    cases = {
        "format": ("file_format=...", "file_format", "jsonl"),
        "max_history": (r"layout=...\(max_turns=...\)", "layout", DialogueLayout(max_turns=2)),
        "turn_separator": (
            r"layout=...\(turn_separator=...\)",
            "layout",
            DialogueLayout(max_turns=3, turn_separator="|"),
        ),
        "max_context_tokens": (
            r"layout=...\(max_context_tokens=...\)",
            "layout",
            DialogueLayout(max_turns=3, max_context_tokens=7),
        ),
        "max_response_tokens": (
            r"layout=...\(max_response_tokens=...\)",
            "layout",
            DialogueLayout(max_turns=3, max_response_tokens=5),
        ),
        "max_train_examples": (r"examples=...\(max_train=...\)", "examples", Examples(max_train=2)),
        "max_val_examples": (r"examples=...\(max_val=...\)", "examples", Examples(max_val=2)),
        "max_test_examples": (r"examples=...\(max_test=...\)", "examples", Examples(max_test=2)),
        "train_examples_per_epoch": (r"examples=...\(train_per_epoch=...\)", "examples", Examples(train_per_epoch=2)),
        "dedupe": (r"examples=...\(dedupe=...\)", "examples", Examples(dedupe=True)),
    }
    values = {
        "format": "jsonl",
        "turn_separator": "|",
        "max_context_tokens": 7,
        "max_response_tokens": 5,
        "dedupe": True,
    }
    for name, (new_form, attribute, expected) in cases.items():
        with old(rf"{name}=\.\.\.\) is deprecated .* use {new_form}"):
            dm = DialogueDataModule(train=PAIRS, val=None, **{name: values.get(name, 2)})
        assert getattr(dm, attribute) == expected, name


def test_old_keywords_merge_into_a_given_object_and_unknown_ones_are_still_errors():
    with old(r"max_history=\.\.\.\)") as caught:
        dm = DialogueDataModule(train=PAIRS, val=None, layout=DialogueLayout(turn_separator="|"), max_history=2)
    assert caught[0].filename == __file__  # the user's line: Python shows it there by default
    assert dm.layout == DialogueLayout(turn_separator="|", max_turns=2)
    with pytest.raises(TypeError, match=r"^DialogueDataModule\(\) got an unexpected keyword argument 'max_histroy'"):
        DialogueDataModule(train=PAIRS, val=None, max_histroy=2)


def test_old_keywords_read_the_same_examples_as_the_new_objects():
    pairs = list(chitchat_pairs("train", 6))[:20]
    common = dict(train=pairs, val=None, tokenizer=tokenizer(), seed=3, show_progress=False)
    with pytest.warns(DeprecationWarning):
        before = DialogueDataModule(**common, max_history=1, max_train_examples=7, dedupe=True, max_context_tokens=9)
    after = DialogueDataModule(
        **common,
        layout=DialogueLayout(max_turns=1, max_context_tokens=9),
        examples=Examples(max_train=7, dedupe=True),
    )
    assert after.train_pairs() == before.train_pairs() and len(after.train_pairs()) == 7
    assert all(len(p.context) == 1 for p in after.train_pairs())
    before.setup("fit"), after.setup("fit")
    ids = [list(map(list, after.train_dataset().encoded.parts[0][i])) for i in range(7)]
    assert ids == [list(map(list, before.train_dataset().encoded.parts[0][i])) for i in range(7)]
    assert max(len(c) for c, _ in ids) == 9  # the token limit applied


def test_old_attributes_warn_and_read_the_new_ones():
    dm = DialogueDataModule(
        train=PAIRS,
        val=None,
        file_format="jsonl",
        layout=DialogueLayout(max_turns=2, max_response_tokens=4),
        examples=Examples(train_per_epoch=3, dedupe=True),
    )
    for name, new, value in (
        ("format", "file_format", "jsonl"),
        ("max_history", "layout.max_turns", 2),
        ("dialogue_format", "layout", dm.layout),
        ("max_response_tokens", "layout.max_response_tokens", 4),
        ("dedupe", "examples.dedupe", True),
        ("train_examples_per_epoch", "examples.train_per_epoch", 3),
    ):
        with pytest.warns(DeprecationWarning, match=rf"^DialogueDataModule\.{name} is deprecated .* use {new}$"):
            assert getattr(dm, name) == value


def test_streaming_old_keywords_and_attributes(tmp_path):
    pytest.importorskip("litdata")
    from lightning_div.datamodules.streaming import StreamingDialogueDataModule

    given = {"stream_dir": tmp_path, "optimize_workers": 2, "chunk_bytes": "4kb", "optimize_start_method": "fork"}
    with pytest.warns(
        DeprecationWarning, match=r"^StreamingDialogueDataModule\(stream_dir=\.\.\.\) .* chunks=\.\.\.\(dir="
    ):
        dm = StreamingDialogueDataModule(train=PAIRS, val=None, **given)
    assert dm.chunks == Chunks(dir=str(tmp_path), workers=2, chunk_bytes="4kb", start_method="fork")
    for name, new in (("stream_dir", "dir"), ("optimize_workers", "workers"), ("chunk_bytes", "chunk_bytes")):
        with pytest.warns(
            DeprecationWarning, match=rf"^StreamingDialogueDataModule\.{name} is deprecated .* chunks\.{new}$"
        ):
            assert getattr(dm, name) == getattr(dm.chunks, new)
    # a keyword of the parent's, old too, reaches it; each warning points at the user's line, not at ours
    with pytest.warns(DeprecationWarning, match=r"max_history=\.\.\.\) is deprecated") as caught:
        assert (
            StreamingDialogueDataModule(train=PAIRS, val=None, max_history=1, chunk_bytes="4kb").layout.max_turns == 1
        )
    assert [w.filename for w in caught] == [__file__, __file__]


def test_the_settings_objects_are_checked_and_named():
    with pytest.raises(
        ValueError, match=r"^DialogueLayout.max_response_tokens must be an integer >= 1 \(or None\), got 0"
    ):
        DialogueLayout(max_response_tokens=0)
    with pytest.raises(ValueError, match=r"^Examples.dedupe must be true or false, got 'yes'"):
        Examples(dedupe="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^Chunks.workers must be an integer >= 1, got 0"):
        Chunks(workers=0)
    with pytest.raises(TypeError, match=r"^layout: unknown field\(s\) \['max_history'\] of DialogueLayout"):
        DialogueDataModule(layout={"max_history": 2})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^examples must be Examples\(...\) or a mapping of its fields, got int"):
        DialogueDataModule(examples=3)  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'max_turns'"):
        DialogueLayout().max_turns = 2  # type: ignore[misc]


def test_a_checkpoint_keeps_the_objects_as_plain_values_and_rebuilds_them(tmp_path):
    layout = DialogueLayout(max_turns=2, max_context_tokens=32, max_response_tokens=8)
    examples = Examples(max_train=6, train_per_epoch=3)
    dm = DialogueDataModule(
        train=list(chitchat_pairs("train", 3))[:12], val=None, tokenizer=tokenizer(), layout=layout, examples=examples
    )
    trainer = quiet_trainer(max_steps=1, limit_val_batches=0)
    trainer.fit(TinyLM(), datamodule=dm)
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    saved = torch.load(tmp_path / "last.ckpt", weights_only=True)["datamodule_hyper_parameters"]  # no class of ours
    assert saved["layout"] == {
        "turn_separator": None,
        "max_turns": 2,
        "max_context_tokens": 32,
        "max_response_tokens": 8,
    }
    assert saved["examples"] == {
        "max_train": 6,
        "max_val": None,
        "max_test": None,
        "train_per_epoch": 3,
        "dedupe": False,
    }
    assert saved["file_format"] == "auto" and not {"max_history", "format", "dedupe"} & set(saved)
    restored = DialogueDataModule.load_from_checkpoint(
        tmp_path / "last.ckpt", train=dm.train_pairs(), tokenizer=tokenizer()
    )
    assert (restored.layout, restored.examples) == (layout, examples)
