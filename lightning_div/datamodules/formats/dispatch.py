""":func:`read_pairs`: the reader a source names (its extension, a format name, a dataset, ``"chitchat"``, a list)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lightning_div._internal.deprecation import renamed_value, take_deprecated
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

#: :func:`read_pairs`'s 0.2 keywords -> their 1.0 names (accepted for one release, with a DeprecationWarning)
READ_PAIRS_RENAMED = {"format": "file_format", "max_history": "max_turns"}


def detect_format(path: str | os.PathLike) -> str:
    """The format name of a path: a directory is a saved HF dataset, else by extension (``.txt`` by content)."""
    p = Path(path)
    if p.is_dir():
        return "hf"
    suffix = p.suffix.lower()
    if suffix not in _EXTENSIONS:
        raise ValueError(
            f"{path}: cannot tell the format from the extension {suffix!r}; pass file_format= one of {FORMATS}"
        )
    known = _EXTENSIONS[suffix]
    if known is not None:
        return known
    first = next((line for _, line in _lines(_read_text(p))), "")
    if first.startswith("text:"):
        return "parlai"
    if EOU in first:
        return "dailydialog"
    raise ValueError(
        f"{path}:1: a .txt file that is neither ParlAI ('text:...') nor DailyDialog ('... __eou__'); pass file_format="
    )


def read_pairs(
    source: Any,
    file_format: str = "auto",
    *,
    split: str = "train",
    max_turns: int | None = None,
    dedupe: bool = False,
    fields: Fields | None = None,
    delimiter: str | None = None,
    context_separator: str = CONTEXT_SEPARATOR,
    references_separator: str = REFERENCES_SEPARATOR,
    max_conversations: int | None = None,
    **field_names: Any,
) -> ReadResult:
    """Read dialogue pairs from anything the project accepts.

    ``source`` is a file path (its file format from the extension or ``file_format``), a saved
    ``datasets`` directory, ``"chitchat"`` / ``"chitchat:<split>"`` (the embedded corpus),
    a ``datasets.Dataset`` / ``DatasetDict``, or a list of DialoguePairs / tuples / dicts.
    ``split`` picks the chitchat split and the DatasetDict split. Field names may be
    given as a :class:`Fields` or as keywords (``context="history"``, ``response="reply"``).

    Args:
        source: what to read, as above.
        file_format: how the file is written: ``"auto"`` (from the extension) or one of ``FORMATS``
            (``dailydialog``, ``dailydialog++``, ``json``, ``jsonl``, ``csv``, ``tsv``, ``parlai``, ``hf``).
        split: the chitchat / DatasetDict split.
        max_turns: context turns kept per example (None = all).
        dedupe: drop exact duplicate examples (counted in the statistics).
        fields: record field / column names.
        delimiter: CSV/TSV delimiter (None = from the extension).
        context_separator: CSV/TSV: separator of the turns in a context cell.
        references_separator: CSV/TSV: separator of the references in a references cell.
        max_conversations: read at most this many chitchat conversations.
        **field_names: field names as keywords (``context=``, ``response=``, ``references=``,
            ``dialog=``, ``positive_responses=``); 0.2's ``format=`` and ``max_history=`` are still
            read here for one release, with a ``DeprecationWarning`` naming ``file_format=`` / ``max_turns=``.

    Returns:
        The list of :class:`DialoguePair`; its ``.stats`` (:class:`ReadStats`) says what was
        read, dropped, truncated and deduplicated.

    Raises:
        DataFormatError: a record, line or file that cannot be read, naming file and line
            (or the list index).
        ValueError: an unknown ``file_format`` or split, or a keyword given by its 1.0 and its 0.2 name at once.

    Examples:
        >>> pairs = read_pairs([(["Hi!", "Hello, how are you?"], "Fine, thanks.")])
        >>> pairs[0].context, pairs[0].response
        (('Hi!', 'Hello, how are you?'), 'Fine, thanks.')
        >>> pairs.stats.summary()
        'pairs: 1 examples from 1 records; dropped: none; contexts truncated: 0; duplicates removed: 0'
    """
    # 0.2's keywords arrive among the field names (a function has one **): taken out before those are checked
    given_old = {name: field_names.pop(name) for name in READ_PAIRS_RENAMED if name in field_names}
    old, _ = take_deprecated("read_pairs", given_old, READ_PAIRS_RENAMED)
    file_format = renamed_value("read_pairs", "format", "file_format", file_format, "auto", old)
    max_turns = renamed_value("read_pairs", "max_history", "max_turns", max_turns, None, old)
    if file_format != "auto" and file_format not in FORMATS:
        raise ValueError(f"file_format={file_format!r} is unknown; use 'auto' or one of {FORMATS}")
    fields = _fields(fields, field_names)
    common: dict[str, Any] = dict(max_turns=max_turns, dedupe=dedupe)
    if isinstance(source, str) and (source == "chitchat" or source.startswith("chitchat:")):
        chosen = source.partition(":")[2] or split
        return read_chitchat_pairs(check_split(chosen), max_conversations=max_conversations, **common)
    if _is_hf_dataset(source):
        return read_hf(source, split=split, fields=fields, **common)
    if isinstance(source, (str, os.PathLike)):
        csv_options = dict(
            delimiter=delimiter, context_separator=context_separator, references_separator=references_separator
        )
        return _read_path(source, file_format, split, fields, csv_options, **common)
    if isinstance(source, Iterable) and not isinstance(source, (bytes, dict)):
        return pairs_from_items(source, fields=fields, **common)
    raise TypeError(
        f"cannot read dialogue pairs from {type(source).__name__}; give a path, 'chitchat', "
        "a datasets.Dataset or a list of pairs"
    )


def _read_path(
    path: str | os.PathLike,
    file_format: str,
    split: str,
    fields: Fields,
    csv_options: dict[str, Any],
    max_turns: int | None,
    dedupe: bool,
) -> ReadResult:
    """:func:`read_pairs` of a file or a saved dataset directory: the reader its file format names."""
    common: dict[str, Any] = dict(max_turns=max_turns, dedupe=dedupe)
    kind = detect_format(path) if file_format == "auto" else file_format
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
