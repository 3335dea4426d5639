"""Hugging Face ``datasets``: a ``Dataset``, a ``DatasetDict`` or a ``save_to_disk`` folder, read as records."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lightning_div._internal.extras import missing_extra
from lightning_div.datamodules.formats.records import Fields, ReadResult, _add_record, _Collector, _max_turns
from lightning_div.pairs import DataFormatError


def _is_hf_dataset(obj: Any) -> bool:
    return type(obj).__module__.startswith("datasets.") and hasattr(obj, "column_names")


def read_hf(
    data: Any,
    split: str | None = None,
    max_turns: int | None = None,
    dedupe: bool = False,
    fields: Fields = Fields(),
    name: str | None = None,
    **deprecated: Any,
) -> ReadResult:
    """A ``datasets.Dataset``, a ``DatasetDict`` (pick ``split``) or a ``save_to_disk`` directory.

    Rows are read as records (see :class:`Fields`); errors name the dataset and row.
    ``max_turns``: the context turns kept per example (None = all; 0.2's ``max_history=`` warns).
    """
    max_turns = _max_turns("read_hf", max_turns, deprecated)
    try:
        import datasets
    except ModuleNotFoundError as err:
        raise missing_extra("datasets", "reading a Hugging Face dataset") from err

    if isinstance(data, (str, os.PathLike)):
        name = name or str(data)
        try:
            data = datasets.load_from_disk(str(data))
        except FileNotFoundError as err:
            if not Path(data).is_dir():
                raise
            # datasets says only "<dir>: no such file" (a FileNotFoundError), which the reader can only doubt
            raise DataFormatError(
                str(data), "a directory, but not a saved Hugging Face dataset (save_to_disk's folder): give a file"
            ) from err
    name = name or "dataset"
    if isinstance(data, datasets.DatasetDict):
        available = list(data)
        if split is None and len(available) == 1:
            split = available[0]
        if split not in data:
            raise ValueError(f"{name}: no split {split!r}; the dataset has {available}")
        data = data[split]
        name = f"{name}[{split}]"
    if not isinstance(data, datasets.Dataset):
        raise TypeError(f"{name}: expected a datasets.Dataset or DatasetDict, got {type(data).__name__}")
    columns = set(data.column_names)
    if not ({fields.response, fields.positive_responses, fields.dialog} & columns):
        raise DataFormatError(
            name,
            f"no '{fields.response}', '{fields.positive_responses}' or '{fields.dialog}' "
            f"column (columns: {', '.join(data.column_names)}); set the column names",
        )
    if len(data) == 0:
        raise DataFormatError(name, "the dataset has no rows")
    out = _Collector(name, max_turns)
    for i, row in enumerate(data):
        _add_record(out, row, f"{name} row {i}", fields)
    return out.result(dedupe)
