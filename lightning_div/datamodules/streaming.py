"""The training split as LitData chunks on disk, read by index: corpora larger than memory.

:class:`StreamingDialogueDataModule` is a :class:`~lightning_div.datamodules.dialogue.DialogueDataModule`
whose training examples are tokenised once, with the same :class:`~lightning_div.model.formatting.DialogueFormat`,
and written by :func:`litdata.optimize` into chunk files under ``stream_dir``, in a folder named by a
content hash of everything the ids depend on (the data's bytes, the tokenizer, the layout and every
reading and format setting). Later runs find the folder and skip the work; the folder appears whole
or not at all (written under a temporary name, verified, then renamed).

Training reads the examples by index from the chunks (:class:`litdata.StreamingDataset`'s random
access), so the process holds token ids of the current batches only, and everything the in-memory
path guarantees holds unchanged, because the same samplers run over the same indices: every example
exactly once per epoch over any number of processes, mid-epoch resume equal to an uninterrupted run,
DRESS's weights by index in loss mode and its weighted draws in sampler mode, negatives appended
after the gold examples. Validation and test sets stay in memory (they are small).

LitData is an optional dependency: ``pip install "lightning-div[stream]"``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lightning_div.core import DialoguePair
from lightning_div.datamodules.dialogue import DialogueDataModule, _info
from lightning_div.datamodules.encoding import EncodedPairs

__all__ = ["ChunkedPairs", "StreamingDialogueDataModule", "require_litdata"]

_FORMAT_VERSION = 1  # bump when the item layout below changes: old folders are then not reused


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
    text, :meth:`iter_items` reads all items in order (sequentially, LitData's fast path).
    """

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = str(directory)
        self._dataset = self._open(batch_decode=False)  # random access: decode one item, not a page
        # The total from LitData's index: len(StreamingDataset) is this process's share under DDP.
        index = json.loads((Path(self.directory) / "index.json").read_text(encoding="utf-8"))
        self._n = sum(int(chunk["chunk_size"]) for chunk in index["chunks"])

    def _open(self, batch_decode: bool) -> Any:
        litdata = require_litdata()
        return litdata.StreamingDataset(self.directory, batch_decode=batch_decode)

    def __len__(self) -> int:
        return self._n

    def _item(self, i: int) -> dict[str, Any]:
        if not -self._n <= i < self._n:
            raise IndexError(f"index {i} out of range for {self._n} examples")
        return self._dataset[int(i) % self._n]  # LitData takes Python ints only (not numpy integers)

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
            yield dataset[i]

    def __getstate__(self) -> dict[str, Any]:  # DataLoader workers reopen the folder themselves
        return {"directory": self.directory}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["directory"])  # type: ignore[misc]


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

    Takes every argument of ``DialogueDataModule`` plus the three below. The training data is
    read, tokenised and written once (``prepare_data``, on one process per node); every
    process then reads examples by index from the chunks. It implements the DRESS protocol
    (:class:`~lightning_div.dress.protocol.ReweightableDataModule`): weights stay one
    float per example in memory (8 bytes), negatives are tokenised in memory and appended.

    Args:
        *args: as for ``DialogueDataModule``.
        stream_dir: where the chunk folders go (one per content hash).
        optimize_workers: processes :func:`litdata.optimize` writes with.
        chunk_bytes: the size of one chunk file (LitData's ``chunk_bytes``).
        **kwargs: as for ``DialogueDataModule``.

    Raises:
        ImportError: LitData is not installed (the message names the ``stream`` extra).

    Examples:
        >>> dm = StreamingDialogueDataModule(train="train.jsonl", val="valid.jsonl", stream_dir="runs/stream")
        ...     # doctest: +SKIP
    """

    def __init__(
        self,
        *args: Any,
        stream_dir: str | os.PathLike = "runs/stream",
        optimize_workers: int = 1,
        chunk_bytes: str | int = "32MB",
        **kwargs: Any,
    ) -> None:
        require_litdata()
        # A str, not a Path, in the hyperparameters Lightning saves: checkpoints load with weights_only=True.
        stream_dir = os.fspath(stream_dir)
        super().__init__(*args, **kwargs)
        if optimize_workers < 1:
            raise ValueError(f"optimize_workers must be >= 1, got {optimize_workers}")
        self.stream_dir = Path(stream_dir)
        self.optimize_workers = optimize_workers
        self.chunk_bytes = chunk_bytes

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
            "layout": [self.seq2seq, self._layout()[2]],
            "format": repr(self.dialogue_format),
            "reader": [
                self.format,
                self.max_history,
                self.dedupe,
                repr(self.reader.fields),
                sorted(self.reader.csv_options().items()),
            ],
            "subset": [self._limits[name], self.seed],
            "max_response_tokens": self.max_response_tokens,
        }
        return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:20]

    def chunk_dir(self, name: str = "train") -> Path:
        """The folder of ``name``'s chunks, written first if no run wrote it before."""
        out = self.stream_dir / f"{name}-{self._content_key(name)}"
        if (out / "index.json").is_file():
            return out
        litdata = require_litdata()
        pairs = self._read(name)
        encoded = self._encode(pairs, f"tokenising {name}")
        tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        _info(f"writing {len(encoded):,} {name} examples as LitData chunks to {out}")
        try:
            litdata.optimize(
                fn=_Items(encoded, pairs),
                inputs=list(range(len(encoded))),
                output_dir=str(tmp),
                chunk_bytes=self.chunk_bytes,
                num_workers=self.optimize_workers,
                keep_data_ordered=True,
                verbose=self.show_progress and self._rank() == 0,
            )
            self._verify(ChunkedPairs(tmp), encoded)
            os.replace(tmp, out)  # whole or absent
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return out

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

    def gold_train_responses(self) -> list[str]:
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
