"""Dialogue readers: every format becomes a list of :class:`DialoguePair`.

A conversation of turns t0..tm becomes one example per response turn: for i >= 1,
(context = t0..t(i-1), response = ti), the history cut to the last ``max_turns``
turns when that is set (0.2 said ``max_history=``; like ``format=``, now ``file_format=``,
it is still accepted for one release with a ``DeprecationWarning``). Formats that already hold (context, response) records keep
one example per record, their context cut the same way.

Every ``read_*`` function returns a :class:`ReadResult`: the list of pairs, with the
reader's counts in ``.stats``. Malformed
input raises :class:`DataFormatError` whose message starts with ``file:line``.
:func:`read_pairs` picks the reader from a path's extension, a file format name, a
``datasets.Dataset``, the word ``"chitchat"`` or an in-memory list.

One module a job: ``records`` (the pairs and their statistics, the field names), ``files``
(a data file as text), one module a format (``dailydialog``, ``json_records``,
``csv_records``, ``parlai``, ``hf``, ``chitchat``: the embedded corpus, ``items``: pairs
given in memory), ``dispatch`` (:func:`read_pairs`) and ``responses`` (:func:`read_responses`).
The names below are the readers' API, imported from here.
"""

from lightning_div.datamodules.formats.chitchat import read_chitchat, read_chitchat_pairs
from lightning_div.datamodules.formats.csv_records import read_csv
from lightning_div.datamodules.formats.dailydialog import EOU, read_dailydialog
from lightning_div.datamodules.formats.dispatch import FORMATS, detect_format, read_pairs
from lightning_div.datamodules.formats.hf import read_hf
from lightning_div.datamodules.formats.items import pairs_from_items
from lightning_div.datamodules.formats.json_records import TOO_DEEP, read_json
from lightning_div.datamodules.formats.parlai import read_parlai
from lightning_div.datamodules.formats.records import (
    CONTEXT_SEPARATOR,
    REFERENCES_SEPARATOR,
    Fields,
    ReaderOptions,
    ReadResult,
    ReadStats,
    check_text,
    conversation_to_pairs,
    iter_texts,
)
from lightning_div.datamodules.formats.responses import RESPONSE_FIELDS, read_responses
from lightning_div.pairs import DataFormatError, DialoguePair, as_pair

__all__ = [
    "CONTEXT_SEPARATOR",
    "EOU",
    "FORMATS",
    "REFERENCES_SEPARATOR",
    "RESPONSE_FIELDS",
    "TOO_DEEP",
    "DataFormatError",
    "DialoguePair",
    "Fields",
    "ReadResult",
    "ReadStats",
    "ReaderOptions",
    "as_pair",
    "check_text",
    "conversation_to_pairs",
    "detect_format",
    "iter_texts",
    "pairs_from_items",
    "read_chitchat",
    "read_chitchat_pairs",
    "read_csv",
    "read_dailydialog",
    "read_hf",
    "read_json",
    "read_pairs",
    "read_parlai",
    "read_responses",
]
