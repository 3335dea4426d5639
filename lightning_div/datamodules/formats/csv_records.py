"""CSV and TSV files with a header row: one pair (or one conversation) a row."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterator
from typing import Any

from lightning_div.datamodules.formats.files import _read_text
from lightning_div.datamodules.formats.records import (
    CONTEXT_SEPARATOR,
    REFERENCES_SEPARATOR,
    Fields,
    ReadResult,
    _add_record,
    _Collector,
    _max_turns,
    _split_cell,
)
from lightning_div.pairs import DataFormatError


def read_csv(
    path: str | os.PathLike,
    max_turns: int | None = None,
    dedupe: bool = False,
    fields: Fields = Fields(),
    delimiter: str | None = None,
    context_separator: str = CONTEXT_SEPARATOR,
    references_separator: str = REFERENCES_SEPARATOR,
    **deprecated: Any,
) -> ReadResult:
    """CSV / TSV with a header row.

    The context cell holds the turns joined by ``context_separator`` (default ``" __eou__ "``),
    the optional references cell holds references joined by ``references_separator``
    (default ``" ||| "``, which ordinary sentences do not contain). A ``dialog`` column
    (turns joined by ``context_separator``) is read as a whole conversation. The delimiter
    is ``","`` for ``.csv`` and a tab for ``.tsv`` unless given. ``max_turns`` keeps that many
    context turns per example (None = all); 0.2's ``max_history=`` still works for one release,
    with a ``DeprecationWarning``.
    """
    max_turns = _max_turns("read_csv", max_turns, deprecated)
    text = _read_text(path)
    if delimiter is None:
        delimiter = "\t" if str(path).lower().endswith(".tsv") else ","
    out = _Collector(str(path), max_turns)
    header: list[str] | None = None
    for line, row in _csv_rows(path, text, delimiter):
        if not any(cell.strip() for cell in row):
            continue
        if header is None:
            header = [h.strip() for h in row]
            if fields.dialog not in header:
                for name in (fields.context, fields.response):
                    if name not in header:
                        raise DataFormatError(
                            f"{path}:{line}", f"no '{name}' column in the header (columns: {', '.join(header)})"
                        )
            continue
        where = f"{path}:{line}"
        if len(row) != len(header):
            raise DataFormatError(where, f"{len(row)} fields but the header has {len(header)}")
        cells = dict(zip(header, row))
        record: dict[str, Any] = {}
        if fields.response in cells and fields.context in cells:
            record[fields.context] = _split_cell(cells[fields.context], context_separator)
            record[fields.response] = cells[fields.response].strip()
            if cells.get(fields.references, "").strip():
                record[fields.references] = _split_cell(cells[fields.references], references_separator)
        else:
            record[fields.dialog] = _split_cell(cells[fields.dialog], context_separator)
        _add_record(out, record, where, fields)
    if header is None:
        raise DataFormatError(f"{path}:1", "the file has no header row")
    return out.result(dedupe)


# a quoted cell spanning lines of which this many read as complete rows: a stray quote swallowed them
_ROWS_IN_A_CELL = 2


_UNBALANCED_HINT = 'close the quote where the cell ends, or double a quote inside a quoted cell ("")'


def _csv_rows(path: str | os.PathLike, text: str, delimiter: str) -> Iterator[tuple[int, list[str]]]:
    """(first line, cells) of each row of a CSV text (blank lines skipped); the first row is the header.

    The csv module reads one unbalanced quote as a cell running to the next quote or to the end
    of the file, silently swallowing the rows between. Both are refused at the line the quote
    opened: a cell still open at the end of the file, and a cell spanning lines of which
    :data:`_ROWS_IN_A_CELL` or more read as rows of the header's width on their own. A quoted
    cell over a few lines (a response with a line break) still reads. Text after a closing quote
    (``"a"b``) is invalid CSV (``strict``), not silently joined.

    Raises:
        DataFormatError: naming ``path`` and the line.
    """
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    start, width = 1, 0
    try:
        for row in reader:
            line, start = start, reader.line_num + 1
            if not row:
                continue
            if width and reader.line_num > line:
                _check_spanning_row(path, line, row, width, delimiter)
            if not width and any(cell.strip() for cell in row):
                width = len(row)  # the header's
            yield line, row
    except csv.Error as e:
        if "end of data" in str(e):  # CPython's "unexpected end of data": EOF inside a quoted cell
            raise DataFormatError(
                f"{path}:{start}",
                f"a quoted cell opened on this line is never closed: lines {start}-{reader.line_num} would be "
                f"one cell; {_UNBALANCED_HINT}",
            ) from None
        if reader.line_num > start:  # the row began lines earlier: most likely at a stray quote there
            raise DataFormatError(
                f"{path}:{start}",
                f"invalid CSV in the row from this line to line {reader.line_num} ({e}): an unbalanced quote? "
                f"{_UNBALANCED_HINT}",
            ) from None
        raise DataFormatError(f"{path}:{reader.line_num}", f"invalid CSV ({e})") from None


def _check_spanning_row(path: str | os.PathLike, line: int, row: list[str], width: int, delimiter: str) -> None:
    """Refuse a row whose quoted cell swallowed lines that read as rows of their own (see :func:`_csv_rows`)."""
    for cell in row:
        later = cell.split("\n")[1:]
        looks_like_rows = [
            i for i, text in enumerate(later, 1) if len(next(csv.reader([text], delimiter=delimiter), [])) == width
        ]
        if len(looks_like_rows) >= _ROWS_IN_A_CELL:
            first = looks_like_rows[0]
            raise DataFormatError(
                f"{path}:{line}",
                f"a quoted cell opened on this line spans lines {line}-{line + len(later)}, and "
                f"{len(looks_like_rows)} of them read as rows of their own (line {line + first}: "
                f"{later[first - 1][:40]!r}): an unbalanced quote? {_UNBALANCED_HINT}",
            )
