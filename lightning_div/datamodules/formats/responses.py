"""Response lists: generated outputs to score, gold responses to fit clusters on."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lightning_div.datamodules.formats.csv_records import _csv_rows
from lightning_div.datamodules.formats.dispatch import read_pairs
from lightning_div.datamodules.formats.files import _read_text
from lightning_div.datamodules.formats.json_records import _json_records
from lightning_div.datamodules.formats.records import check_text
from lightning_div.pairs import DataFormatError, DialoguePair, as_pair

RESPONSE_FIELDS = ("response", "generated", "prediction", "text")


def read_responses(source: Any, field: str | None = None, delimiter: str | None = None) -> list[str]:
    """A list of responses: a list of strings, a ``.txt`` file with one response a line (a blank
    line is an empty response), JSON/JSONL (strings, or records whose ``field`` — default the
    first of response/generated/prediction/text present — holds the response), CSV/TSV (column
    ``field``, default ``response``), or any source :func:`read_pairs` reads (its gold responses).

    Args:
        source: a list of strings, a file, or a source :func:`read_pairs` reads.
        field: the record field / column holding the responses.
        delimiter: CSV/TSV delimiter (None = from the extension).

    Returns:
        The responses, in order.

    Raises:
        DataFormatError: a file or record that cannot be read, naming file and line.
    """
    if isinstance(source, (list, tuple)):
        out = []
        for i, item in enumerate(source):
            if isinstance(item, (tuple, list)):  # a (context, response[, references]) pair
                item = as_pair(item, f"responses[{i}]")
            if isinstance(item, DialoguePair):
                item = item.response
            if not isinstance(item, str):
                raise DataFormatError(f"responses[{i}]", f"expected a string, got {type(item).__name__}")
            out.append(check_text(item, f"responses[{i}]", "the response"))
        return out
    if not isinstance(source, (str, os.PathLike)) or str(source).startswith("chitchat"):
        return [p.response for p in read_pairs(source)]
    path = Path(source)
    suffix = path.suffix.lower()
    if path.is_dir():  # a saved dataset is read as pairs; any other folder is named for what it is
        return [p.response for p in read_pairs(source)]
    if suffix in (".txt", ".text", ""):
        lines = _response_lines(path)
        if lines and lines[-1] == "":
            lines.pop()  # the final newline ends the last line; it does not add an empty response
        return [line.rstrip("\r") for line in lines]
    if suffix in (".json", ".jsonl"):
        out = []
        for number, record in _json_records(path, _read_text(path)):
            out.append(check_text(_response_of(record, field, f"{path}:{number}"), f"{path}:{number}", "the response"))
        return out
    if suffix in (".csv", ".tsv"):
        return _csv_column(path, field or "response", delimiter or ("\t" if suffix == ".tsv" else ","))
    return [p.response for p in read_pairs(path)]


def _response_lines(path: Path) -> list[str]:
    """The lines of a response file. A blank line is an empty response, so a file of blank lines is that
    many empty responses (what a model that generated nothing writes), not an empty file: only a file
    without a single byte is one."""
    try:
        return _read_text(path).split("\n")
    except DataFormatError:
        data = path.read_bytes()
        if not data or data.strip():  # empty, or not valid UTF-8: the error stands
            raise
        return data.decode("ascii").replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _csv_column(path: Path, name: str, delimiter: str) -> list[str]:
    """Column ``name`` of every row of a CSV / TSV file (rows checked as :func:`read_csv` checks them)."""
    rows = _csv_rows(path, _read_text(path), delimiter)
    line, header = next(((n, r) for n, r in rows if any(cell.strip() for cell in r)), (1, []))
    header = [h.strip() for h in header]
    if name not in header:
        raise DataFormatError(
            f"{path}:{line}", f"no {name!r} column in the header (columns: {', '.join(header)}); pass field="
        )
    column = header.index(name)
    out = []
    for line, row in rows:
        if len(row) != len(header):
            raise DataFormatError(f"{path}:{line}", f"{len(row)} fields but the header has {len(header)}")
        out.append(row[column])
    return out


def _response_of(record: Any, field: str | None, where: str) -> str:
    if isinstance(record, str):
        return record
    if isinstance(record, dict):
        names = [field] if field else [n for n in RESPONSE_FIELDS if n in record]
        if names and names[0] in record:
            value = record[names[0]]
            if isinstance(value, str):
                return value
            raise DataFormatError(where, f"field {names[0]!r} is {type(value).__name__}, expected a string")
    if isinstance(record, dict) and field:
        raise DataFormatError(where, f"missing field {field!r}")
    wanted = repr(field) if field else " / ".join(RESPONSE_FIELDS)
    raise DataFormatError(where, f"expected a string or a record with a {wanted} field, got {type(record).__name__}")
