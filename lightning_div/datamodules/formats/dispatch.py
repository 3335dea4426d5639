""":func:`read_pairs`: the reader a source names (its extension, a format name, a dataset, ``"chitchat"``, a list)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lightning_div.chitchat import check_split
from lightning_div.datamodules.formats.chitchat import read_chitchat_pairs
from lightning_div.datamodules.formats.csv_records import read_csv
from lightning_div.datamodules.formats.dailydialog import EOU, read_dailydialog
from lightning_div.datamodules.formats.files import _lines, _read_text
from lightning_div.datamodules.formats.hf import _is_hf_dataset, read_hf
from lightning_div.datamodules.formats.items import pairs_from_items
from lightning_div.datamodules.formats.json_records import read_json
from lightning_div.datamodules.formats.parlai import read_parlai
from lightning_div.datamodules.formats.records import (
    CONTEXT_SEPARATOR,
    REFERENCES_SEPARATOR,
    Fields,
    ReadResult,
    _fields,
)

FORMATS = ("dailydialog", "dailydialog++", "json", "jsonl", "csv", "tsv", "parlai", "hf")


_EXTENSIONS = {".txt": None, ".json": "json", ".jsonl": "jsonl", ".csv": "csv", ".tsv": "tsv"}


def detect_format(path: str | os.PathLike) -> str:
    """The format name of a path: a directory is a saved HF dataset, else by extension (``.txt`` by content)."""
    p = Path(path)
    if p.is_dir():
        return "hf"
    suffix = p.suffix.lower()
    if suffix not in _EXTENSIONS:
        raise ValueError(f"{path}: cannot tell the format from the extension {suffix!r}; pass format= one of {FORMATS}")
    known = _EXTENSIONS[suffix]
    if known is not None:
        return known
    first = next((line for _, line in _lines(_read_text(p))), "")
    if first.startswith("text:"):
        return "parlai"
    if EOU in first:
        return "dailydialog"
    raise ValueError(
        f"{path}:1: a .txt file that is neither ParlAI ('text:...') nor DailyDialog ('... __eou__'); pass format="
    )


def read_pairs(
    source: Any,
    format: str = "auto",
    *,
    split: str = "train",
    max_history: int | None = None,
    dedupe: bool = False,
    fields: Fields | None = None,
    delimiter: str | None = None,
    context_separator: str = CONTEXT_SEPARATOR,
    references_separator: str = REFERENCES_SEPARATOR,
    max_conversations: int | None = None,
    **field_names: str,
) -> ReadResult:
    """Read dialogue pairs from anything the project accepts.

    ``source`` is a file path (format from the extension or ``format``), a saved
    ``datasets`` directory, ``"chitchat"`` / ``"chitchat:<split>"`` (the embedded corpus),
    a ``datasets.Dataset`` / ``DatasetDict``, or a list of DialoguePairs / tuples / dicts.
    ``split`` picks the chitchat split and the DatasetDict split. Field names may be
    given as a :class:`Fields` or as keywords (``context="history"``, ``response="reply"``).

    Args:
        source: what to read, as above.
        format: ``"auto"`` or one of ``FORMATS`` (``dailydialog``, ``dailydialog++``, ``json``,
            ``jsonl``, ``csv``, ``tsv``, ``parlai``, ``hf``).
        split: the chitchat / DatasetDict split.
        max_history: context turns kept per example (None = all).
        dedupe: drop exact duplicate examples (counted in the statistics).
        fields: record field / column names.
        delimiter: CSV/TSV delimiter (None = from the extension).
        context_separator: CSV/TSV: separator of the turns in a context cell.
        references_separator: CSV/TSV: separator of the references in a references cell.
        max_conversations: read at most this many chitchat conversations.
        **field_names: field names as keywords (``context=``, ``response=``, ``references=``,
            ``dialog=``, ``positive_responses=``).

    Returns:
        The list of :class:`DialoguePair`; its ``.stats`` (:class:`ReadStats`) says what was
        read, dropped, truncated and deduplicated.

    Raises:
        DataFormatError: a record, line or file that cannot be read, naming file and line
            (or the list index).
        ValueError: an unknown ``format`` or split.

    Examples:
        >>> pairs = read_pairs([(["Hi!", "Hello, how are you?"], "Fine, thanks.")])
        >>> pairs[0].context, pairs[0].response
        (('Hi!', 'Hello, how are you?'), 'Fine, thanks.')
        >>> pairs.stats.summary()
        'pairs: 1 examples from 1 records; dropped: none; contexts truncated: 0; duplicates removed: 0'
    """
    if format != "auto" and format not in FORMATS:
        raise ValueError(f"format={format!r} is unknown; use 'auto' or one of {FORMATS}")
    fields = _fields(fields, field_names)
    common: dict[str, Any] = dict(max_history=max_history, dedupe=dedupe)
    if isinstance(source, str) and (source == "chitchat" or source.startswith("chitchat:")):
        chosen = source.partition(":")[2] or split
        return read_chitchat_pairs(check_split(chosen), max_conversations=max_conversations, **common)
    if _is_hf_dataset(source):
        return read_hf(source, split=split, fields=fields, **common)
    if isinstance(source, (str, os.PathLike)):
        csv_options = dict(
            delimiter=delimiter, context_separator=context_separator, references_separator=references_separator
        )
        return _read_path(source, format, split, fields, csv_options, **common)
    if isinstance(source, Iterable) and not isinstance(source, (bytes, dict)):
        return pairs_from_items(source, fields=fields, **common)
    raise TypeError(
        f"cannot read dialogue pairs from {type(source).__name__}; give a path, 'chitchat', "
        "a datasets.Dataset or a list of pairs"
    )


def _read_path(
    path: str | os.PathLike,
    format: str,
    split: str,
    fields: Fields,
    csv_options: dict[str, Any],
    max_history: int | None,
    dedupe: bool,
) -> ReadResult:
    """:func:`read_pairs` of a file or a saved dataset directory: the reader its format names."""
    common: dict[str, Any] = dict(max_history=max_history, dedupe=dedupe)
    kind = detect_format(path) if format == "auto" else format
    if kind == "hf":
        return read_hf(path, split=split, fields=fields, **common)
    if kind == "dailydialog":
        return read_dailydialog(path, **common)
    if kind == "parlai":
        return read_parlai(path, **common)
    if kind in ("csv", "tsv"):
        if csv_options["delimiter"] is None:
            csv_options = {**csv_options, "delimiter": "\t" if kind == "tsv" else ","}
        return read_csv(path, fields=fields, **csv_options, **common)
    return read_json(path, fields=fields, **common)  # json, jsonl, dailydialog++
