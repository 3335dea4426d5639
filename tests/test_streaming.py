"""StreamingDialogueDataModule: the training split in LitData chunks, with the in-memory path's guarantees.

The modules written in this process start LitData's writer from a forkserver (``fast()``:
``Chunks(start_method="forkserver")``, torch and lightning_div imported once by the server,
tests/ddp_utils.py) instead of LitData's default, a spawned interpreter that imports them again for
every folder written (most of each test's time). What is written and checked is the same; LitData's
default start method writes in the DDP test and fails, as it should, in the main-guard test's script.
The two-writer and killed-writer tests' writers are processes forked from that server too
(tests/streaming_writer.py says why).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from datamodule_setup import AddNegatives, TinyLM, seen_by_epoch
from ddp_utils import forkserver_ddp
from helpers import chitchat_pairs, quiet_trainer, tokenizer

from lightning_div import DialoguePair
from lightning_div.datamodules import Chunks, DialogueDataModule, Examples
from lightning_div.model.formatting import DialogueLayout

litdata = pytest.importorskip("litdata")

from lightning_div.datamodules.streaming import ChunkedPairs, StreamingDialogueDataModule  # noqa: E402


def plain(value):
    """A batch field as plain Python: tensors as lists, the per-batch strings (negative_loss) as they are."""
    return value.tolist() if hasattr(value, "tolist") else value


def fast(stream_dir, **kw):
    """How the modules of this process write their chunks (the module docstring says why)."""
    return Chunks(**{"dir": stream_dir, "start_method": "forkserver", **kw})


def gold_ids(dm):
    """The token ids of ``dm``'s gold training examples, as its training dataset holds them (negatives after)."""
    return dm.train_dataset().encoded.parts[0]


def pair_modules(tmp_path, pairs, **kw):
    args = dict(train=pairs, val=None, tokenizer=tokenizer(), batch_size=4, show_progress=False, **kw)
    return DialogueDataModule(**args), StreamingDialogueDataModule(chunks=fast(tmp_path / "stream"), **args)


def test_same_ids_and_batches_as_the_in_memory_path(tmp_path):
    pairs = list(chitchat_pairs("train", 6))[:30]
    memory, stream = pair_modules(tmp_path, pairs, layout=DialogueLayout(max_turns=3, max_context_tokens=24))
    memory.setup("fit")
    stream.prepare_data()
    stream.setup("fit")
    chunks = gold_ids(stream)
    assert isinstance(chunks, ChunkedPairs) and len(chunks) == len(pairs)
    encoded = gold_ids(memory)
    assert [chunks[i] for i in range(len(pairs))] == [encoded[i] for i in range(len(pairs))]
    assert chunks[-1] == encoded[len(pairs) - 1]
    # the text is kept too: the monitors sample training pairs, DRESS embeds the gold responses
    assert [stream.train_pairs()[i] for i in (0, 7, 29)] == [memory.train_pairs()[i] for i in (0, 7, 29)]
    assert stream.train_responses() == memory.train_responses()
    assert stream.train_contexts() == memory.train_contexts()
    # the same sampler over the same indices: the very same batches, tensor by tensor
    for a, b in zip(memory.train_dataloader(), stream.train_dataloader(), strict=True):
        assert a.keys() == b.keys()
        for key in a:
            assert plain(a[key]) == plain(b[key]), key


def test_train_examples_per_epoch_takes_the_same_windows_as_in_memory(tmp_path):
    # the option is DialogueDataModule's, inherited: the same window of the chunks each epoch
    pairs = list(chitchat_pairs("train", 6))[:30]
    memory, stream = pair_modules(
        tmp_path, pairs, layout=DialogueLayout(max_turns=3, max_context_tokens=24), examples=Examples(train_per_epoch=8)
    )
    memory.setup("fit")
    stream.prepare_data()
    stream.setup("fit")
    seen = []
    for epoch in range(2):
        batches = {}
        for name, dm in (("memory", memory), ("stream", stream)):
            loader = dm.train_dataloader()
            loader.sampler.set_epoch(epoch)
            batches[name] = [b["index"].tolist() for b in loader]
        assert batches["stream"] == batches["memory"] and len(batches["stream"]) == 2  # 8 examples, batch 4
        seen.append({i for b in batches["stream"] for i in b})
    assert len(seen[0]) == len(seen[1]) == 8 and not seen[0] & seen[1]


def test_chunks_are_written_once_per_content(tmp_path, monkeypatch):
    pairs = list(chitchat_pairs("train", 4))[:12]
    _, first = pair_modules(tmp_path, pairs)
    written = first.chunk_dir()
    assert (written / "index.json").is_file()
    assert [p.name for p in written.parent.iterdir()] == [written.name]  # nothing half-written left behind

    def no_rewrite(*args, **kwargs):
        raise AssertionError("the chunks were written again")

    monkeypatch.setattr(litdata, "optimize", no_rewrite)
    _, again = pair_modules(tmp_path, pairs)
    assert again.chunk_dir() == written  # same data, tokenizer and settings: reused
    monkeypatch.undo()
    _, other = pair_modules(tmp_path, pairs, layout=DialogueLayout(max_turns=3, max_response_tokens=5))
    assert other.chunk_dir() != written  # a setting the ids depend on: a folder of its own
    _, fewer = pair_modules(tmp_path, pairs[:-1])
    assert fewer.chunk_dir() not in (written, other.chunk_dir())


def test_a_file_source_is_hashed_by_its_bytes(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"context": ["Hi"], "response": "Hello"}\n{"context": ["Bye"], "response": "See you"}\n')
    dm = StreamingDialogueDataModule(
        train=str(path), val=None, tokenizer=tokenizer(), show_progress=False, chunks=fast(tmp_path / "s")
    )
    first = dm.chunk_dir()
    path.write_text('{"context": ["Hi"], "response": "Hello!"}\n{"context": ["Bye"], "response": "See you"}\n')
    changed = StreamingDialogueDataModule(
        train=str(path), val=None, tokenizer=tokenizer(), show_progress=False, chunks=fast(tmp_path / "s")
    )
    assert changed.chunk_dir() != first
    assert changed.train_pairs()[0].response == "Hello!"


def test_weights_negatives_and_sampler_mode_as_in_memory(tmp_path):
    """DRESS's protocol on the streaming path: loss weights by index, negatives appended, weighted draws."""
    from lightning_div.reweighting import Negatives

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
@pytest.mark.xdist_group("two_processes")
def test_ddp_every_example_exactly_once_per_epoch(tmp_path):
    pairs = list(chitchat_pairs("train", 5))[:13]
    n = len(pairs)  # 13 on 2 ranks: one padding row; 15 with the negatives: again one
    negatives = [(pairs[0].context, "generated one"), (pairs[3].context, "generated two")]
    dm = StreamingDialogueDataModule(
        train=pairs,
        val=None,
        batch_size=3,
        show_progress=False,
        layout=DialogueLayout(max_turns=3, max_context_tokens=32),
        chunks=Chunks(dir=tmp_path / "s"),
    )
    dm.apply_weights(1.0 + np.arange(n) / 10)
    record = tmp_path / "record"
    record.mkdir()
    model = TinyLM(record_dir=str(record), lr=1e-3)
    trainer = quiet_trainer(
        strategy=forkserver_ddp(),  # ddp_spawn's processes, forked from a server with torch imported
        devices=2,
        max_epochs=2,
        # the negatives added at epoch 0's end reach epoch 1 through a rebuilt train dataloader
        reload_dataloaders_every_n_epochs=1,
        callbacks=[AddNegatives(0, negatives, [-1.0, -1.0])],
    )
    trainer.fit(model, dm)
    seen = seen_by_epoch(record)
    for epoch, size in ((0, n), (1, n + 2)):
        assert sorted(i for i, _ in seen[epoch] if i >= 0) == list(range(size))
        assert [(i, w) for i, w in seen[epoch] if i < 0] == [(-1, 0.0)]
    assert len(list((tmp_path / "s").glob("train-*"))) == 1  # written once, by one process


def test_the_process_start_method_is_left_as_it_was(tmp_path):
    """LitData sets the start method of the whole process (``force=True``); a user's process keeps its own."""
    import multiprocessing

    before = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("spawn", force=True)  # the user's, other than the one LitData is given
    try:
        small_module(tmp_path / "stream", list(chitchat_pairs("train", 2))[:6]).chunk_dir()  # LitData: forkserver
        assert multiprocessing.get_start_method(allow_none=True) == "spawn"
    finally:
        multiprocessing.set_start_method(before, force=True)
    with pytest.raises(ValueError, match=r"Chunks.start_method must be None, 'spawn', 'fork' or 'forkserver'"):
        small_module(tmp_path / "stream", [("a", "b")], start_method="threads")


def test_missing_litdata_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "litdata", None)
    with pytest.raises(ImportError, match=r"lightning-div\[stream\]"):
        StreamingDialogueDataModule(train=[("a", "b")], val=None)


# ------------------------------------------------------------------------------------------------
# Issue 31: chunk folders that are damaged, written twice at once, killed mid-write, or on a full disk


def small_module(stream_dir, pairs, **kw):
    return StreamingDialogueDataModule(
        train=pairs,
        val=None,
        tokenizer=tokenizer(),
        show_progress=False,
        chunks=fast(stream_dir, **{"chunk_bytes": "4kb", **kw}),
    )


def ids_of(dm):
    chunks = gold_ids(dm)
    return [chunks[i] for i in range(len(chunks))]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """``small_module``'s folder of 40 pairs, written once: the damage tests each damage a copy of it, and
    the module then writes it again for real (a write of its own for each test's undamaged folder was half
    of each test's time)."""
    return small_module(tmp_path_factory.mktemp("written"), list(chitchat_pairs("train", 6))[:40]).chunk_dir()


def copy_of(written, stream_dir):
    """A copy of the ``written`` folder in ``stream_dir``, where ``small_module(stream_dir, ...)`` looks for it."""
    return Path(shutil.copytree(written, stream_dir / written.name))


def expected_ids(pairs):
    memory = DialogueDataModule(train=pairs, val=None, tokenizer=tokenizer(), show_progress=False)
    encoded = gold_ids(memory)
    return [encoded[i] for i in range(len(pairs))]


@pytest.mark.xdist_group("streaming_written")  # one worker writes `written` once
def test_a_damaged_chunk_is_named_when_read_and_written_again_next_run(tmp_path, written):
    """Issue 31 S1: 16 XOR-ed bytes in a chunk gave token id 1515870997 (vocabulary 800) and no error."""
    from lightning_div._internal.io import StaleCacheError

    pairs = list(chitchat_pairs("train", 6))[:40]
    folder = copy_of(written, tmp_path)
    chunk = sorted(folder.glob("chunk-*.bin"))[1]
    data = bytearray(chunk.read_bytes())
    for j in range(200, 216):
        data[j] ^= 0x5A
    chunk.write_bytes(bytes(data))
    dm = small_module(tmp_path, pairs)
    with pytest.raises(StaleCacheError, match=rf"{chunk.name}.*do not match the sha256 recorded when it was written"):
        ids_of(dm)
    with pytest.warns(UserWarning, match=rf"LitData chunks in '{folder}' cannot be used \(.*{chunk.name}"):
        again = small_module(tmp_path, pairs)
        assert again.chunk_dir() == folder
    assert ids_of(again) == expected_ids(pairs)


@pytest.mark.xdist_group("streaming_written")  # one worker writes `written` once
@pytest.mark.parametrize("damage", ["a deleted chunk", "a truncated index.json"])
def test_a_folder_missing_a_chunk_or_its_index_is_written_again(tmp_path, written, damage):
    """Issue 31 S2 / S7: ChunkWaitTimeoutError or JSONDecodeError on every run."""
    pairs = list(chitchat_pairs("train", 6))[:40]
    folder = copy_of(written, tmp_path)
    if damage == "a deleted chunk":
        victim = sorted(folder.glob("chunk-*.bin"))[2]
        victim.unlink()
    else:
        victim = folder / "index.json"
        victim.write_text(victim.read_text()[:50])
    with pytest.warns(UserWarning, match=rf"cannot be used \(.*{victim.name}") as record:
        dm = small_module(tmp_path, pairs)
        assert dm.chunk_dir() == folder
    assert len([w for w in record if "cannot be used" in str(w.message)]) == 1
    assert ids_of(dm) == expected_ids(pairs)
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name]  # nothing else left beside it


def _edit_index(folder: Path) -> str:
    index = json.loads((folder / "index.json").read_text())
    index["chunks"][0]["chunk_size"] += 8  # 40 -> 48 items in one chunk: LitData's header check failed every run
    (folder / "index.json").write_text(json.dumps(index))
    return "index.json does not match the sha256 recorded"


def _edit_checksums(folder: Path, how: str) -> str:
    record = json.loads((folder / "lightning_div.json").read_text())
    name = sorted(record["chunks"])[0]
    if how == "bytes -> cytes":
        record["chunks"][name] = {"cytes" if k == "bytes" else k: v for k, v in record["chunks"][name].items()}
    else:
        record["chunks"][name] = 7
    (folder / "lightning_div.json").write_text(json.dumps(record))
    return rf"lightning_div\.json: the entry of {name} is not"


@pytest.mark.xdist_group("streaming_written")  # one worker writes `written` once
@pytest.mark.parametrize("damage", ["an edited chunk_size", "bytes -> cytes", "an int entry"])
def test_edited_folder_metadata_is_one_warning_and_a_rewrite(tmp_path, written, damage):
    """Issue 44 M4 / M5: an edited index.json failed every run inside LitData (header item count); a damaged
    lightning_div.json gave KeyError / TypeError in prepare_data, every run."""
    pairs = list(chitchat_pairs("train", 6))[:40]
    folder = copy_of(written, tmp_path)
    message = _edit_index(folder) if damage == "an edited chunk_size" else _edit_checksums(folder, damage)
    with pytest.warns(UserWarning, match=rf"LitData chunks in '{folder}' cannot be used \(.*{message}") as record:
        dm = small_module(tmp_path, pairs)
        dm.prepare_data()
    assert len([w for w in record if "cannot be used" in str(w.message)]) == 1
    assert ids_of(dm) == expected_ids(pairs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # written again whole: the next run uses it silently
        assert small_module(tmp_path, pairs).chunk_dir() == folder


UNGUARDED = """
import sys

from lightning_div.datamodules import Chunks, StreamingDialogueDataModule

stream_dir, train, tokenizer = sys.argv[1:]
StreamingDialogueDataModule(
    train=train, val=None, tokenizer=tokenizer, chunks=Chunks(dir=stream_dir), show_progress=False
).prepare_data()
"""


def test_a_script_without_a_main_guard_is_told_what_to_do(tmp_path):
    """Issue 44 L6: the parent failed with LitData's `AssertionError: No chunks found`.

    A user's script, run as a user runs it (``python unguarded.py``): a data file, a saved tokenizer, the
    library's import only (LitData's spawned worker imports the script again, so it pays every import twice).
    """
    import os
    import subprocess

    root = Path(__file__).resolve().parent.parent
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED)
    train = tmp_path / "train.jsonl"
    pairs = list(chitchat_pairs("train", 6))[:40]
    train.write_text("".join(json.dumps({"context": list(p.context), "response": p.response}) + "\n" for p in pairs))
    tokenizer().save_pretrained(tmp_path / "tokenizer")
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "stream"), str(train), str(tmp_path / "tokenizer")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode != 0
    # the exception the script died of: the last line of the form "SomeError: ..." (multiprocessing's
    # resource tracker may still print a warning about LitData's queues after it)
    raised = [line for line in proc.stderr.splitlines() if re.match(r"\w+(Error|Exception): ", line)]
    assert raised, proc.stderr[-3000:]
    last = raised[-1]
    assert last.startswith("RuntimeError: LitData wrote no chunks to ") and 'if __name__ == "__main__":' in last, (
        proc.stderr[-3000:]
    )


def start_writers(tmp_path, mode, count):
    """``count`` processes writing the same chunks to ``tmp_path / "stream"`` (tests/streaming_writer.py)."""
    import multiprocessing

    from streaming_writer import write

    pairs = list(chitchat_pairs("train", 6))[:40]
    args = (str(tmp_path / "stream"), str(tmp_path / "written"), mode, tokenizer(), pairs)
    writers = [multiprocessing.get_context("forkserver").Process(target=write, args=args) for _ in range(count)]
    for writer in writers:
        writer.start()
    return writers


def said(tmp_path, writer, what):
    """What ``writer`` wrote to its ``.out`` (the folder) or ``.err`` (a traceback) file; "" if nothing."""
    path = tmp_path / f"written.{writer.pid}.{what}"
    return path.read_text() if path.exists() else ""


def test_two_processes_writing_one_folder_keep_the_first(tmp_path):
    """Issue 31 S5: the second writer died with OSError: [Errno 39] Directory not empty."""
    writers = start_writers(tmp_path, "meet", 2)
    try:
        for writer in writers:
            writer.join(300)
    finally:
        for writer in writers:
            if writer.is_alive():
                writer.kill()
    for writer in writers:
        assert writer.exitcode == 0, said(tmp_path, writer, "err")[-3000:]
    folders = {said(tmp_path, writer, "out") for writer in writers}
    assert len(folders) == 1  # both use the one folder
    stream = tmp_path / "stream"
    assert [p.name for p in stream.iterdir()] == [Path(folders.pop()).name]  # and nothing else is left
    pairs = list(chitchat_pairs("train", 6))[:40]
    assert ids_of(small_module(stream, pairs)) == expected_ids(pairs)


def test_a_writer_killed_mid_write_leaves_no_folder_for_long(tmp_path):
    """Issue 31 S6: a corpus-sized ``train-<h>.tmp-<pid>`` folder was left forever after SIGKILL."""
    import os
    import signal
    import time

    (writer,) = start_writers(tmp_path, "kill", 1)
    try:
        start = time.monotonic()
        while not list(tmp_path.glob("written-*")):
            assert writer.is_alive(), said(tmp_path, writer, "err")[-3000:]
            assert time.monotonic() - start < 300, "the writer never wrote its chunks"
            time.sleep(0.1)
        os.killpg(writer.pid, signal.SIGKILL)
        writer.join(30)
    finally:
        if writer.is_alive():
            writer.kill()
    assert writer.exitcode == -signal.SIGKILL
    stream = tmp_path / "stream"
    (left,) = stream.iterdir()  # the killed writer's temporary folder, chunks in it
    assert list(left.glob("chunk-*.bin"))
    pairs = list(chitchat_pairs("train", 6))[:40]
    folder = small_module(stream, pairs).chunk_dir()  # the next run writes and cleans up after the dead one
    assert [p.name for p in stream.iterdir()] == [folder.name]


LITDATA_FULL_DISK = (
    "We found the following error Traceback (most recent call last):\n"
    '  File "litdata/streaming/writer.py", line 753, in write_chunk_to_file\n'
    "    out.write(raw_data)\n"
    "OSError: [Errno 28] No space left on device\n\n"
    "The above exception was the direct cause of the following exception:\n\n"
    "RuntimeError: Failed processing item=451; index=451\n."
)


def test_a_full_disk_is_an_oserror_naming_enospc_and_the_folder(tmp_path, monkeypatch):
    """Issue 31 S8: LitData's RuntimeError carried the traceback as text; the errno and the path are ours to say."""
    import errno

    def full_disk(**kwargs):
        (Path(kwargs["output_dir"]) / "chunk-0-0.bin").write_bytes(b"half")
        raise RuntimeError(LITDATA_FULL_DISK)  # what litdata.optimize raises, its worker's traceback as text

    monkeypatch.setattr(litdata, "optimize", full_disk)
    dm = small_module(tmp_path / "stream", list(chitchat_pairs("train", 2))[:6])
    with pytest.raises(OSError, match=r"cannot write '.*train-[0-9a-f]+': No space left on device") as caught:
        dm.chunk_dir()
    assert caught.value.errno == errno.ENOSPC
    assert not list((tmp_path / "stream").iterdir())  # nothing half-written left


def test_a_real_full_disk_is_an_oserror_naming_enospc(tmp_path):
    """The same on a real full file system (a 256 KiB tmpfs; needs root to mount it)."""
    import errno
    import os
    import subprocess

    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)]).returncode:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        dm = small_module(mount / "stream", list(chitchat_pairs("train", 40)))
        with pytest.raises(OSError, match=r"cannot write '.*train-[0-9a-f]+': No space left on device") as caught:
            dm.chunk_dir()
        assert caught.value.errno == errno.ENOSPC
        assert not list((mount / "stream").iterdir())
    finally:
        subprocess.run(["umount", str(mount)])
