"""JSON Lines and JSON lists of records (DailyDialog++ files included)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from lightning_div.datamodules.formats.files import _lines, _read_text
from lightning_div.datamodules.formats.records import Fields, ReadResult, _add_record, _Collector, _max_turns
from lightning_div.pairs import DataFormatError

# Python's JSON decoder recurses once per nesting level: "[" x 100,000 raises RecursionError, said as this line
TOO_DEEP = (
    "invalid JSON (nested deeper than Python's JSON decoder can read; no record of ours nests more than 3 levels)"
)


def _json_records(path: str | os.PathLike, text: str) -> Iterator[tuple[int, Any]]:
    """(line, value) of a JSON list of records or of JSON Lines (one value a line)."""
    decoder = json.JSONDecoder()
    stripped = text.lstrip()
    if not stripped.startswith("["):
        for number, line in _lines(text):
            try:
                value = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataFormatError(f"{path}:{number}", f"invalid JSON ({e.msg} at column {e.colno})") from None
            except RecursionError:
                raise DataFormatError(f"{path}:{number}", TOO_DEEP) from None
            yield number, value
        return

    def line_of(pos: int) -> int:
        return text.count("\n", 0, pos) + 1

    def skip(pos: int) -> int:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        return pos

    pos = skip(len(text) - len(stripped) + 1)
    if pos < len(text) and text[pos] == "]":
        raise DataFormatError(f"{path}:{line_of(pos)}", "the JSON list is empty (no dialogues)")
    while True:
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise DataFormatError(f"{path}:{e.lineno}", f"invalid JSON ({e.msg} at column {e.colno})") from None
        except RecursionError:
            raise DataFormatError(f"{path}:{line_of(pos)}", TOO_DEEP) from None
        yield line_of(pos), value
        pos = skip(end)
        if pos < len(text) and text[pos] == ",":
            pos = skip(pos + 1)
            continue
        if pos < len(text) and text[pos] == "]" and not text[pos + 1 :].strip():
            return
        raise DataFormatError(f"{path}:{line_of(pos)}", "invalid JSON (expected ',' or the closing ']' of the list)")


def read_json(
    path: str | os.PathLike,
    max_turns: int | None = None,
    dedupe: bool = False,
    fields: Fields = Fields(),
    **deprecated: Any,
) -> ReadResult:
    """JSON Lines or a JSON list of records (see :class:`Fields`); DailyDialog++ files included.

    ``max_turns``: the context turns kept per example (None = all; 0.2's ``max_history=`` warns).
    """
    max_turns = _max_turns("read_json", max_turns, deprecated)
    text = _read_text(path)
    out = _Collector(str(path), max_turns)
    for number, record in _json_records(path, text):
        _add_record(out, record, f"{path}:{number}", fields)
    return out.result(dedupe)
