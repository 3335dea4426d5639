"""Dialogue data: readers for common file formats, the DialogueDataModule and the DRESS datamodule protocol.

The datamodules' settings objects are here too: :class:`Examples`, :class:`Chunks`, and the token
layout :class:`DialogueLayout` (defined in :mod:`lightning_div.model.formatting`).

The pairs they read are :class:`lightning_div.DialoguePair` (defined in :mod:`lightning_div.pairs`, its one home).
"""

from typing import Any

from lightning_div.datamodules.formats import (
    DataFormatError,
    Fields,
    ReaderOptions,
    ReadResult,
    ReadStats,
    as_pair,
    read_chitchat,
    read_pairs,
    read_responses,
)
from lightning_div.datamodules.options import Chunks, Examples
from lightning_div.model.formatting import DialogueLayout
from lightning_div.reweighting import Negatives, ReweightableDataModule

_LAZY = {
    "DialogueDataModule": "dialogue",
    "DialogueCollator": "encoding",
    "EncodedDialogues": "encoding",
    "encode_pairs": "encoding",
    "StreamingDialogueDataModule": "streaming",  # needs the `stream` extra (LitData) when built
    "ChunkedPairs": "streaming",
}

__all__ = [
    "Chunks",
    "DataFormatError",
    "DialogueLayout",
    "Examples",
    "Fields",
    "Negatives",
    "ReadResult",
    "ReaderOptions",
    "ReadStats",
    "ReweightableDataModule",
    "as_pair",
    "read_chitchat",
    "read_pairs",
    "read_responses",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    # the readers need neither torch nor Lightning; import those only when the datamodule is asked for
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
