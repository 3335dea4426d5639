"""The training split as LitData chunks on disk, read by index: corpora larger than memory.

:class:`StreamingDialogueDataModule` is a :class:`~lightning_div.datamodules.dialogue.DialogueDataModule`
whose training examples are tokenised once, with the same :class:`~lightning_div.model.formatting.DialogueLayout`,
and written by :func:`litdata.optimize` into chunk files under ``chunks.dir``, in a folder named by a
content hash of everything the ids depend on (the data's bytes, the tokenizer, the layout and every
reading and format setting). Later runs find the folder and skip the work; the folder appears whole
or not at all (written under a temporary name, verified, then renamed).

Verified when read: beside LitData's ``index.json`` the folder holds ``lightning_div.json``, each
chunk file's size and sha256 as written. A run checks the sizes before using a folder (a deleted or
truncated chunk, a truncated index: the folder is written again, with one warning), and a process
checks a chunk's sha256 the first time it reads from it; a chunk whose bytes changed on disk is an
error naming it, and the folder is marked so that the next run writes it again. Two processes
writing one folder at once keep the first complete one; a writer killed mid-write leaves a
temporary folder that the next writer removes (:mod:`lightning_div._internal.io`).

Training reads the examples by index from the chunks (:class:`litdata.StreamingDataset`'s random
access), so the process holds token ids of the current batches only, and everything the in-memory
path guarantees holds unchanged, because the same samplers run over the same indices: every example
exactly once per epoch over any number of processes, mid-epoch resume equal to an uninterrupted run,
DRESS's weights by index in loss mode and its weighted draws in sampler mode, negatives appended
after the gold examples. Validation and test sets stay in memory (they are small).

LitData is an optional dependency: ``pip install "lightning-div[stream]"``.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lightning_div._internal.deprecation import take_deprecated
from lightning_div._internal.io import (
    STALE_AFTER_S,
    StaleCacheError,
    atomic_directory,
    atomic_write_text,
    file_digest,
    remove_stale_temporaries,
)
from lightning_div.datamodules.dialogue import DialogueDataModule, _info
from lightning_div.datamodules.encoding import EncodedPairs
from lightning_div.datamodules.options import STREAMING_REGROUPED, Chunks, moved_property, plain, settings_of
from lightning_div.pairs import DialoguePair

__all__ = ["ChunkedPairs", "StreamingDialogueDataModule", "require_litdata"]

# bump when the item or folder layout changes: old folders are then not reused (2: checksums; 3: index.json's too)
_FORMAT_VERSION = 3
CHECKSUMS = "lightning_div.json"  # each chunk file's size and sha256, written with the chunks
DAMAGED = "damaged"  # left by a reader that found a chunk's bytes changed: the next run writes the folder again
_DEFAULT_CHUNKS = Chunks()


def require_litdata() -> Any:
    """Import :mod:`litdata`, or raise ``ImportError`` naming the extra that installs it."""
    try:
        import litdata
    except ImportError as err:
        raise ImportError(
            'the streaming datamodule needs LitData: pip install "lightning-div[stream]" (or pip install litdata)'
        ) from err
    return litdata


class _Items:
    """The function :func:`litdata.optimize` maps over example indices (picklable for its workers)."""

    def __init__(self, encoded: EncodedPairs, pairs: Sequence[DialoguePair]) -> None:
        self.encoded, self.pairs = encoded, pairs

    def __call__(self, i: int) -> dict[str, Any]:
        context_ids, response_ids = self.encoded[i]
        pair = self.pairs[i]
        return {
            "index": int(i),
            "context_ids": np.asarray(context_ids, dtype=np.int32),
            "response_ids": np.asarray(response_ids, dtype=np.int32),
            # one string each: LitData needs the same structure in every item, a context's turn count varies
            "context": json.dumps(list(pair.context)),
            "response": pair.response,
        }


class ChunkedPairs(Sequence):
    """(context ids, response ids) of the examples in a folder of LitData chunks, read by index.

    Item ``i`` is example ``i`` of the data the folder was written from. :meth:`pair` gives its
    text, :meth:`iter_items` reads all items in order (sequentially, LitData's fast path). Each
    chunk's sha256 is checked against the folder's ``lightning_div.json`` the first time this
    process reads from it.

    Raises:
        StaleCacheError: a chunk whose bytes do not match its recorded sha256 (the folder is
            marked, and the next run writes it again).
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = str(directory)
        folder = Path(self.directory)
        # The total from LitData's index: len(StreamingDataset) is this process's share under DDP.
        index = json.loads((folder / "index.json").read_text(encoding="utf-8"))
        self._files = [str(chunk["filename"]) for chunk in index["chunks"]]
        self._ends = np.cumsum([int(chunk["chunk_size"]) for chunk in index["chunks"]]).tolist()
        self._n = self._ends[-1] if self._ends else 0
        self._sha256 = {name: entry["sha256"] for name, entry in _read_checksums(folder)["chunks"].items()}
        self._verified: set[int] = set()
        self._dataset = self._open(batch_decode=False)  # random access: decode one item, not a page

    def _open(self, batch_decode: bool) -> Any:
        litdata = require_litdata()
        return litdata.StreamingDataset(self.directory, batch_decode=batch_decode)

    def __len__(self) -> int:
        return self._n

    def _check_chunk_of(self, i: int) -> None:
        """Check the sha256 of the chunk holding item ``i`` (in ``[0, n)``), once per chunk and process."""
        chunk = bisect.bisect_right(self._ends, i)
        if chunk in self._verified:
            return
        name = self._files[chunk]
        path = Path(self.directory) / name
        if file_digest(path) != self._sha256.get(name):
            message = (
                f"{str(path)!r}: its bytes do not match the sha256 recorded when it was written (changed or "
                "damaged on disk); the next run writes the folder again"
            )
            try:  # best effort: a read-only folder still gets the error
                atomic_write_text(Path(self.directory) / DAMAGED, message + "\n")
            except OSError:
                pass
            raise StaleCacheError(message)
        self._verified.add(chunk)

    def _item(self, i: int) -> dict[str, Any]:
        if not -self._n <= i < self._n:
            raise IndexError(f"index {i} out of range for {self._n} examples")
        i = int(i) % self._n  # LitData takes Python ints only (not numpy integers)
        self._check_chunk_of(i)
        return self._dataset[i]

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:  # type: ignore[override]
        item = self._item(i)
        return item["context_ids"].tolist(), item["response_ids"].tolist()

    def pair(self, i: int) -> DialoguePair:
        """Example ``i``'s text."""
        item = self._item(i)
        return DialoguePair(tuple(json.loads(item["context"])), item["response"])

    def iter_items(self) -> Iterator[dict[str, Any]]:
        """Every item, in index order."""
        dataset = self._open(batch_decode=True)
        for i in range(self._n):
            self._check_chunk_of(i)
            yield dataset[i]

    def __getstate__(self) -> dict[str, Any]:  # DataLoader workers reopen the folder themselves
        return {"directory": self.directory}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["directory"])  # type: ignore[misc]


def _read_checksums(folder: Path) -> dict[str, Any]:
    """``lightning_div.json``, every entry checked for its kind (an edited file is a ValueError, not a KeyError later)."""
    data = json.loads((folder / CHECKSUMS).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("chunks"), dict):
        raise ValueError(f"{CHECKSUMS} holds no chunk checksums")
    if not isinstance(data.get("index_sha256"), str):
        raise ValueError(f"{CHECKSUMS} holds no checksum of index.json")
    for name, entry in data["chunks"].items():
        if (
            not isinstance(entry, dict)
            or isinstance(entry.get("bytes"), bool)
            or not isinstance(entry.get("bytes"), int)
            or not isinstance(entry.get("sha256"), str)
        ):
            raise ValueError(
                f"{CHECKSUMS}: the entry of {name} is not {{'bytes': <int>, 'sha256': <str>}}: {entry!r:.80}"
            )
    return data


def _write_checksums(folder: Path) -> None:
    """Record index.json's sha256 and each chunk file's size and sha256 in ``folder/lightning_div.json``
    (before the folder is renamed)."""
    index = json.loads((folder / "index.json").read_text(encoding="utf-8"))
    files = [folder / str(chunk["filename"]) for chunk in index["chunks"]]
    chunks = {p.name: {"bytes": p.stat().st_size, "sha256": file_digest(p)} for p in files}
    record = {"version": _FORMAT_VERSION, "index_sha256": file_digest(folder / "index.json"), "chunks": chunks}
    (folder / CHECKSUMS).write_text(json.dumps(record), encoding="utf-8")


def _folder_problem(folder: Path) -> str | None:
    """Why a chunk folder cannot be used, or None: its index, checksums, files and their sizes (not their bytes)."""
    if (folder / DAMAGED).is_file():
        return (folder / DAMAGED).read_text(encoding="utf-8", errors="replace").strip()
    try:
        index = json.loads((folder / "index.json").read_text(encoding="utf-8"))
        files = [str(chunk["filename"]) for chunk in index["chunks"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"index.json cannot be read: {type(e).__name__}: {e}"
    try:
        checksums = _read_checksums(folder)
    except (OSError, ValueError) as e:
        return f"{CHECKSUMS} cannot be read: {type(e).__name__}: {e}"
    recorded = checksums["chunks"]
    # index.json's own bytes: LitData reads each chunk's item count from it, so an edited count
    # ("chunk_size": 40 -> 48) fails every run inside LitData ("header item count (40) does not match")
    if file_digest(folder / "index.json") != checksums["index_sha256"]:
        return "index.json does not match the sha256 recorded when it was written (edited or damaged)"
    for name in files:
        if name not in recorded:
            return f"{name} is listed in index.json but has no checksum"
        try:
            size = (folder / name).stat().st_size
        except OSError:
            return f"{name} is missing"
        if size != recorded[name]["bytes"]:
            return f"{name} has {size:,} bytes, {recorded[name]['bytes']:,} when written"
    return None


def _usable(folder: Path) -> bool:
    return _folder_problem(folder) is None


def _named_failure(err: Exception) -> OSError | None:
    """The OSError inside LitData's RuntimeError, whose worker's traceback arrives as text (``[Errno 28] …``)."""
    found = re.search(r"\[Errno (\d+)\]", str(err))
    if found is None:
        return None
    code = int(found.group(1))
    return OSError(code, os.strerror(code))


def _remove_old_temporaries(stream_dir: Path, name: str) -> None:
    """Remove ``<name>.tmp-<pid>`` folders (the temporary name before 0.2) nobody touched for a day."""
    for old in stream_dir.glob(f"{name}.tmp-*"):
        try:
            if old.is_dir() and time.time() - old.stat().st_mtime > STALE_AFTER_S:
                shutil.rmtree(old)
        except OSError:
            pass


class _LazyPairs(Sequence):
    """The training pairs as a sequence read from the chunks on demand (the monitors sample a few)."""

    def __init__(self, chunks: ChunkedPairs) -> None:
        self.chunks = chunks

    def __len__(self) -> int:
        return len(self.chunks)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self.chunks.pair(j) for j in range(*i.indices(len(self)))]
        return self.chunks.pair(i)


class StreamingDialogueDataModule(DialogueDataModule):
    """A :class:`~lightning_div.datamodules.dialogue.DialogueDataModule` whose training split lives in LitData chunks.

    Takes every argument of ``DialogueDataModule`` plus ``chunks``. The training data is
    read, tokenised and written once (``prepare_data``, on one process per node); every
    process then reads examples by index from the chunks. It implements the DRESS protocol
    (:class:`~lightning_div.reweighting.ReweightableDataModule`): weights stay one
    float per example in memory (8 bytes), negatives are tokenised in memory and appended.

    Args:
        *args: as for ``DialogueDataModule``.
        chunks: where and how the chunks are written (:class:`~lightning_div.datamodules.options.Chunks`:
            the folder, the writing processes, a chunk's size, their start method); default ``runs/stream``.
        **kwargs: as for ``DialogueDataModule``; 0.2's ``stream_dir``, ``optimize_workers``,
            ``chunk_bytes`` and ``optimize_start_method`` are accepted for one release with a
            ``DeprecationWarning`` naming their ``Chunks`` field.

    Raises:
        ImportError: LitData is not installed (the message names the ``stream`` extra).

    Examples:
        >>> dm = StreamingDialogueDataModule(train="train.jsonl", val="valid.jsonl", chunks=Chunks(dir="runs/stream"))
        ...     # doctest: +SKIP
    """

    stream_dir = moved_property("StreamingDialogueDataModule", "stream_dir", "chunks.dir")
    optimize_workers = moved_property("StreamingDialogueDataModule", "optimize_workers", "chunks.workers")
    chunk_bytes = moved_property("StreamingDialogueDataModule", "chunk_bytes", "chunks.chunk_bytes")
    optimize_start_method = moved_property(
        "StreamingDialogueDataModule", "optimize_start_method", "chunks.start_method"
    )

    def __init__(self, *args: Any, chunks: Chunks = _DEFAULT_CHUNKS, **kwargs: Any) -> None:
        require_litdata()
        old = {name: kwargs.pop(name) for name in STREAMING_REGROUPED if name in kwargs}
        _, groups = take_deprecated(type(self).__name__, old, regrouped=STREAMING_REGROUPED)
        self.chunks = settings_of(Chunks, chunks, "chunks", groups.get("chunks"))
        super().__init__(*args, **kwargs)
        self.save_hyperparameters({"chunks": plain(self.chunks)})  # plain values: weights_only=True checkpoints

    # ------------------------------------------------------------------------------------------
    # Writing the chunks (once per content)

    def _source_digest(self, name: str) -> str:
        """A hash of the data itself: a file's or folder's bytes, else the text of the pairs read."""
        source = self._sources[name]
        h = hashlib.sha256()
        if isinstance(source, (str, os.PathLike)) and Path(source).exists():
            path = Path(source)
            files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
            for f in files:
                h.update(str(f.relative_to(path) if path.is_dir() else f.name).encode())
                with f.open("rb") as fh:
                    for block in iter(lambda: fh.read(1 << 20), b""):
                        h.update(block)
        else:  # 'chitchat', a datasets.Dataset or pairs in memory: hash what the reader returns
            for p in self._read(name):
                h.update(json.dumps([list(p.context), p.response, list(p.all_references)]).encode())
        return h.hexdigest()

    def _tokenizer_digest(self) -> str:
        tok = self._tokenizer
        backend = getattr(tok, "backend_tokenizer", None)
        if backend is not None:
            state = json.loads(backend.to_str())
            # Truncation and padding are call-time settings the tokenizer keeps from its last call: not its content.
            state.pop("truncation", None)
            state.pop("padding", None)
            text = json.dumps(state, sort_keys=True)
        else:
            text = json.dumps(sorted(tok.get_vocab().items()))
        special = json.dumps(getattr(tok, "special_tokens_map", {}), sort_keys=True, default=str)
        return hashlib.sha256((text + special + type(tok).__name__).encode()).hexdigest()

    def _content_key(self, name: str) -> str:
        self._ensure_model()
        settings = {
            "version": _FORMAT_VERSION,
            "source": self._source_digest(name),
            "tokenizer": self._tokenizer_digest(),
            "model": [self.seq2seq, self._layout()[2]],
            "layout": plain(self.layout),
            "reader": [self.file_format, self.examples.dedupe, self.reader.as_dict()],
            "subset": [self.examples.limit(name), self.seed],
        }
        return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:20]

    def chunk_dir(self, name: str = "train") -> Path:
        """The folder of ``name``'s chunks, written first if no run wrote it before (or it cannot be used).

        Raises:
            OSError: the chunks cannot be written (``ENOSPC`` for a full disk), naming the folder;
                nothing is left behind.
        """
        stream_dir = Path(self.chunks.dir)
        out = stream_dir / f"{name}-{self._content_key(name)}"
        # killed writers' temporary folders (corpus-sized), also when the folder itself is found whole
        remove_stale_temporaries(stream_dir, out.name)
        _remove_old_temporaries(stream_dir, out.name)
        if out.exists():
            problem = _folder_problem(out)
            if problem is None:
                return out
            warnings.warn(
                f"the LitData chunks in {str(out)!r} cannot be used ({problem}); writing them again", stacklevel=2
            )
        pairs = self._read(name)
        encoded = self._encode(pairs, f"tokenising {name}")
        _info(f"writing {len(encoded):,} {name} examples as LitData chunks to {out}")
        atomic_directory(out, lambda tmp: self._write_chunks(tmp, pairs, encoded), valid=_usable)
        return out

    def _write_chunks(self, folder: Path, pairs: Sequence[DialoguePair], encoded: EncodedPairs) -> None:
        """LitData chunks of ``encoded`` in ``folder``, with their checksums, verified item by item.

        Raises:
            RuntimeError: LitData wrote no chunks, as when the script has no ``if __name__ == "__main__":``
                guard (its spawned workers import the script again); the message says so.
        """
        try:
            self._optimize(folder, pairs, encoded)
            _write_checksums(folder)
            self._verify(ChunkedPairs(folder), encoded)
        except AssertionError as e:  # LitData's own check, deep in its index reader
            if "No chunks found" not in str(e):
                raise
            raise RuntimeError(
                f"LitData wrote no chunks to {str(folder)!r}: its worker processes start by importing your script "
                "again (the 'spawn' start method), so a script that writes streaming chunks must run its code under "
                '`if __name__ == "__main__":` (the workers\' own errors are printed above)'
            ) from e

    def _optimize(self, folder: Path, pairs: Sequence[DialoguePair], encoded: EncodedPairs) -> None:
        litdata = require_litdata()
        # LitData sets the start method of the whole process (force=True); the user's stays theirs
        start_method = multiprocessing.get_start_method(allow_none=True)
        try:
            litdata.optimize(
                fn=_Items(encoded, pairs),
                inputs=list(range(len(encoded))),
                output_dir=str(folder),
                chunk_bytes=self.chunks.chunk_bytes,
                num_workers=self.chunks.workers,
                keep_data_ordered=True,
                verbose=self.show_progress and self._rank() == 0,
                start_method=self.chunks.start_method,
            )
        except RuntimeError as e:  # its worker's OSError as text: said as an OSError of that kind, with the path
            failure = _named_failure(e)
            if failure is None:
                raise
            raise failure from e
        finally:
            multiprocessing.set_start_method(start_method, force=True)

    @staticmethod
    def _verify(chunks: ChunkedPairs, encoded: EncodedPairs) -> None:
        """Every item where it belongs, with the ids it was given: checked once, before the folder is used."""
        if len(chunks) != len(encoded):
            raise OSError(f"{chunks.directory}: LitData wrote {len(chunks)} items for {len(encoded)} examples")
        for i, item in enumerate(chunks.iter_items()):
            context_ids, response_ids = encoded[i]
            if (
                item["index"] != i
                or item["context_ids"].tolist() != context_ids
                or item["response_ids"].tolist() != response_ids
            ):
                raise OSError(f"{chunks.directory}: item {i} does not hold example {i} as written")

    def prepare_data(self) -> None:
        """Write the training chunks (Lightning calls this on one process per node, before ``setup``)."""
        if self._sources["train"] is not None:
            self.chunk_dir("train")
            self._pairs.pop("train", None)  # the text is in the chunks now; do not hold it

    # ------------------------------------------------------------------------------------------
    # Reading

    def _encoded_split(self, name: str) -> Any:
        if name != "train":
            return super()._encoded_split(name)
        self._ensure_model()
        if name not in self._encoded:
            self._encoded[name] = ChunkedPairs(self.chunk_dir(name))  # type: ignore[assignment]
            self._pairs.pop("train", None)
        return self._encoded[name]

    def _chunks(self) -> ChunkedPairs:
        return self._encoded_split("train")

    def train_pairs(self) -> list[DialoguePair]:
        """The gold training examples, read from the chunks on demand (a sequence, not a list in memory)."""
        return _LazyPairs(self._chunks())  # type: ignore[return-value]

    def train_responses(self) -> list[str]:
        """The gold response of every training example, in index order (one sequential pass over the chunks)."""
        return [item["response"] for item in self._chunks().iter_items()]

    def train_contexts(self) -> list[tuple[str, ...]]:
        """The context turns of every training example, in index order (one sequential pass over the chunks)."""
        return [tuple(json.loads(item["context"])) for item in self._chunks().iter_items()]

    def _num_train(self) -> int:
        # Before the chunks are open (weights set before fit, the model not known yet) count what the reader gives.
        if "train" in self._encoded:
            return len(self._encoded["train"])
        return super()._num_train()
