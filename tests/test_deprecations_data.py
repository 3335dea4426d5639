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


# ---------------------------------------------------------------------------------------------- the readers


def _reader_cases(tmp_path):
    """(name, reader, its source) of every reader taking ``max_turns``: each source has contexts of 3 turns or more."""
    from lightning_div.datamodules import formats

    files = {
        "d.txt": "a __eou__ b __eou__ c __eou__ d __eou__\n",
        "d.jsonl": '{"dialog": ["a", "b", "c", "d"]}\n',
        "d.csv": "dialog\na __eou__ b __eou__ c __eou__ d\n",
        "p.txt": "text:a\tlabels:b\ntext:c\tlabels:d\tepisode_done:True\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return [
        ("read_dailydialog", formats.read_dailydialog, tmp_path / "d.txt"),
        ("read_json", formats.read_json, tmp_path / "d.jsonl"),
        ("read_csv", formats.read_csv, tmp_path / "d.csv"),
        ("read_parlai", formats.read_parlai, tmp_path / "p.txt"),
        ("pairs_from_items", formats.pairs_from_items, [(["a", "b", "c"], "d")]),
        ("conversation_to_pairs", formats.conversation_to_pairs, ["a", "b", "c", "d"]),
        (
            "read_chitchat_pairs",
            lambda split, **kw: formats.read_chitchat_pairs(split, max_conversations=3, **kw),
            "test",
        ),
        ("read_chitchat", lambda split, **kw: formats.read_chitchat(split, max_conversations=3, **kw), "test"),
    ]


def reader_warns(name: str, old: str, new: str):
    return pytest.warns(
        DeprecationWarning,
        match=rf"^{name}\({old}=\.\.\.\) is deprecated since lightning-div 1\.0 and is removed in the next release: "
        rf"use {new}=\.\.\.$",
    )


def test_every_reader_takes_max_history_as_max_turns_with_a_warning_at_the_callers_line(tmp_path):
    for name, reader, source in _reader_cases(tmp_path):
        new, whole = reader(source, max_turns=1), reader(source, max_turns=None)
        assert max(len(p.context) for p in whole) >= 3, name  # the cut below is real
        assert new != whole and {len(p.context) for p in new} == {1}, name
        with reader_warns(name, "max_history", "max_turns") as caught:
            old = reader(source, max_history=1)
        assert caught[0].filename == __file__, name  # the user's line: Python shows it there by default
        assert old == new, name
        assert getattr(old, "stats", None) == getattr(new, "stats", None), name
        with pytest.raises(
            ValueError,
            match=rf"^{name}: max_turns= and the deprecated max_history= were both given: pass max_turns= alone$",
        ):
            with pytest.warns(DeprecationWarning, match="max_history"):
                reader(source, max_turns=2, max_history=1)
        with pytest.raises(TypeError, match=rf"^{name}\(\) got an unexpected keyword argument 'max_histroy'"):
            reader(source, max_histroy=1)


def test_read_hf_takes_max_history_as_max_turns(tmp_path):
    datasets = pytest.importorskip("datasets")
    from lightning_div.datamodules.formats import read_hf

    data = datasets.Dataset.from_dict({"dialog": [["a", "b", "c", "d"]]})
    with reader_warns("read_hf", "max_history", "max_turns") as caught:
        old = read_hf(data, max_history=2)
    assert caught[0].filename == __file__
    assert old == read_hf(data, max_turns=2) != read_hf(data)
    assert [p.context for p in old] == [("a",), ("a", "b"), ("b", "c")]


def test_read_pairs_old_keywords_warn_and_read_the_same_pairs(tmp_path):
    import warnings

    from lightning_div.datamodules import read_pairs

    path = tmp_path / "dialogues.data"  # an extension no format claims: the file format must be named
    path.write_text('{"context": ["a", "b", "c"], "response": "d"}\n{"dialog": ["e", "f", "g"]}\n')
    with pytest.raises(ValueError, match=r"cannot tell the format from the extension '\.data'; pass file_format="):
        read_pairs(path)
    new = read_pairs(path, file_format="jsonl", max_turns=1)
    assert [(p.context, p.response) for p in new] == [(("c",), "d"), (("e",), "f"), (("f",), "g")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the file format is still the second positional argument, and quiet
        assert read_pairs(path, "jsonl", max_turns=1) == new
    with reader_warns("read_pairs", "format", "file_format") as caught:
        by_format = read_pairs(path, format="jsonl", max_turns=1)
    assert caught[0].filename == __file__ and by_format == new and by_format.stats == new.stats
    with reader_warns("read_pairs", "max_history", "max_turns") as caught:
        by_history = read_pairs(path, "jsonl", max_history=1)
    assert caught[0].filename == __file__ and by_history == new and by_history.stats == new.stats
    with pytest.warns(DeprecationWarning) as caught:  # both at once: one warning each, the same pairs
        assert read_pairs(path, format="jsonl", max_history=1, context="context") == new
    assert sorted(str(w.message).split("(")[1].split("=")[0] for w in caught) == ["format", "max_history"]
    # an unknown old-style value is named by its 1.0 keyword; a keyword given both ways is refused
    with pytest.raises(ValueError, match=r"^file_format='yaml' is unknown"):
        with pytest.warns(DeprecationWarning, match=r"^read_pairs\(format="):
            read_pairs(path, format="yaml")
    with pytest.raises(
        ValueError,
        match=r"^read_pairs: file_format= and the deprecated format= were both given: pass file_format= alone$",
    ):
        with pytest.warns(DeprecationWarning, match=r"^read_pairs\(format="):
            read_pairs(path, "jsonl", format="json")
    with pytest.raises(TypeError, match=r"^unknown option\(s\) \['formt'\]; field names are"):
        read_pairs(path, "jsonl", formt="json")
