"""The datamodules' settings objects, and the 0.2 keyword arguments they replace.

Each groups what travels together and has defaults, as :mod:`lightning_div.settings` does for the
front ends: frozen dataclasses, checked when built, configured from LightningCLI (or a YAML file)
as nested mappings (``examples: {max_train: 4800}``). The token layout, the third object a
datamodule takes, is :class:`~lightning_div.model.formatting.DialogueLayout`.

* :class:`Examples`: which of the examples read are used (subsets, the epoch's window, dedupe);
* :class:`Chunks`: where and how the streaming datamodule writes its LitData chunks.

A checkpoint keeps each as plain values (:func:`plain`; checkpoints load with ``weights_only=True``)
and :func:`settings_of` reads them back.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from lightning_div._internal.counts import check_count
from lightning_div._internal.deprecation import warn_deprecated
from lightning_div.model.formatting import DialogueLayout

__all__ = ["DEFAULT_LAYOUT", "Chunks", "DeprecatedAttributes", "Examples", "moved_property", "plain", "settings_of"]

#: A datamodule's layout when none is given: the last 3 turns of a context (0.2's ``max_history=3``).
DEFAULT_LAYOUT = DialogueLayout(max_turns=3)

START_METHODS = ("spawn", "fork", "forkserver")


def _into(argument: str, **fields: str) -> dict[str, tuple[str, str]]:
    """0.2's keyword -> ``(argument, field)``, for the keywords now fields of one settings argument."""
    return {old: (argument, field) for old, field in fields.items()}


#: 0.2's keyword arguments of DialogueDataModule: renamed (old -> new) and regrouped (old -> (argument, field)).
DATAMODULE_RENAMED = {"format": "file_format"}
DATAMODULE_REGROUPED = {
    **_into(
        "layout",
        max_history="max_turns",
        turn_separator="turn_separator",
        max_context_tokens="max_context_tokens",
        max_response_tokens="max_response_tokens",
    ),
    **_into(
        "examples",
        max_train_examples="max_train",
        max_val_examples="max_val",
        max_test_examples="max_test",
        train_examples_per_epoch="train_per_epoch",
        dedupe="dedupe",
    ),
}
#: 0.2's keyword arguments of StreamingDialogueDataModule's own.
STREAMING_REGROUPED = _into(
    "chunks",
    stream_dir="dir",
    optimize_workers="workers",
    chunk_bytes="chunk_bytes",
    optimize_start_method="start_method",
)


@dataclass(frozen=True)
class Examples:
    """Which of the examples read are used.

    Attributes:
        max_train: keep a random training subset of this size (seeded by the datamodule's ``seed``),
            e.g. for demos; None: all.
        max_val: the same for the validation data.
        max_test: the same for the test data.
        train_per_epoch: train on only this many of the training examples each epoch, a different
            window of them every epoch (seeded by ``seed``; see
            :func:`~lightning_div.datamodules.samplers.epoch_window`), so that consecutive epochs see
            examples not seen before until all are used; DRESS's negatives are trained whole. In
            ``"sampler"`` mode an epoch draws this many. None: every example every epoch.
        dedupe: drop exact duplicate examples (same context, response and references) when reading.

    Raises:
        ValueError: a size that is not an integer >= 1 or None (named).
    """

    max_train: int | None = None
    max_val: int | None = None
    max_test: int | None = None
    train_per_epoch: int | None = None
    dedupe: bool = False

    def __post_init__(self) -> None:
        for name in ("max_train", "max_val", "max_test", "train_per_epoch"):
            object.__setattr__(self, name, check_count(f"Examples.{name}", getattr(self, name)))
        if not isinstance(self.dedupe, bool):
            raise ValueError(f"Examples.dedupe must be true or false, got {self.dedupe!r}")

    def limit(self, split: str) -> int | None:
        """The subset size of ``split`` (``"train"``, ``"val"`` or ``"test"``)."""
        return {"train": self.max_train, "val": self.max_val, "test": self.max_test}[split]


@dataclass(frozen=True)
class Chunks:
    """Where and how :class:`~lightning_div.datamodules.streaming.StreamingDialogueDataModule` writes its chunks.

    Attributes:
        dir: where the chunk folders go (one per content hash).
        workers: processes :func:`litdata.optimize` writes with.
        chunk_bytes: the size of one chunk file (LitData's ``chunk_bytes``, e.g. ``"32MB"`` or bytes).
        start_method: how those processes start (LitData's ``start_method``): None is LitData's
            choice (``"spawn"``, ``"fork"`` in a notebook); ``"forkserver"`` starts them from a server
            whose imports are done once. The process's own start method is left as it was (LitData
            sets it for the whole process; it is put back after writing).

    Raises:
        ValueError: fewer than one worker, or an unknown start method.
    """

    dir: str = "runs/stream"
    workers: int = 1
    chunk_bytes: str | int = "32MB"
    start_method: Literal["spawn", "fork", "forkserver"] | None = None

    def __post_init__(self) -> None:
        # a str, not a Path: the checkpoint keeps it, and checkpoints load with weights_only=True
        object.__setattr__(self, "dir", os.fspath(self.dir))
        if isinstance(self.workers, bool) or not isinstance(self.workers, numbers.Integral) or self.workers < 1:
            raise ValueError(f"Chunks.workers must be an integer >= 1, got {self.workers!r}")
        object.__setattr__(self, "workers", int(self.workers))
        if self.start_method not in (None, *START_METHODS):
            raise ValueError(
                f"Chunks.start_method must be None, 'spawn', 'fork' or 'forkserver', got {self.start_method!r}"
            )


_Settings = TypeVar("_Settings", DialogueLayout, Examples, Chunks)


def settings_of(cls: type[_Settings], value: Any, argument: str, changes: Mapping[str, Any] | None = None) -> _Settings:
    """``value`` as a ``cls``: itself, or built from a mapping (a checkpoint's plain values), with ``changes`` applied.

    Raises:
        TypeError: neither a ``cls`` nor a mapping, or a mapping with a key that is not a field (named).
    """
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            fields = [f.name for f in dataclasses.fields(cls)]
            raise TypeError(f"{argument}: unknown field(s) {unknown} of {cls.__name__}; its fields are {fields}")
        value = cls(**value)
    if not isinstance(value, cls):
        raise TypeError(
            f"{argument} must be {cls.__name__}(...) or a mapping of its fields, got {type(value).__name__}"
        )
    return dataclasses.replace(value, **changes) if changes else value


def plain(settings: DialogueLayout | Examples | Chunks) -> dict[str, Any]:
    """The fields as plain values, as a checkpoint's hyperparameters keep them."""
    return dataclasses.asdict(settings)


def moved_property(owner: str, old: str, path: str) -> property:
    """A read-only attribute of 0.2 that now lives at ``path`` (e.g. ``"layout.max_turns"``), with a warning."""

    def get(self: Any) -> Any:
        warn_deprecated(f"{owner}.{old}", path)
        value = self
        for part in path.split("."):
            value = getattr(value, part)
        return value

    return property(get, doc=f"Deprecated: ``{path}`` (0.2's name; removed in the release after 1.0).")


class DeprecatedAttributes:
    """0.2's attributes of :class:`~lightning_div.datamodules.DialogueDataModule`, read-only, each warning with its 1.0 place."""

    format = moved_property("DialogueDataModule", "format", "file_format")
    max_history = moved_property("DialogueDataModule", "max_history", "layout.max_turns")
    dialogue_format = moved_property("DialogueDataModule", "dialogue_format", "layout")
    max_response_tokens = moved_property("DialogueDataModule", "max_response_tokens", "layout.max_response_tokens")
    dedupe = moved_property("DialogueDataModule", "dedupe", "examples.dedupe")
    train_examples_per_epoch = moved_property(
        "DialogueDataModule", "train_examples_per_epoch", "examples.train_per_epoch"
    )
