"""A data file as text: missing, empty, a folder or not UTF-8 is a :class:`DataFormatError` naming the file and line."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from lightning_div.pairs import DataFormatError


def _read_text(path: str | os.PathLike) -> str:
    """The file as text; empty files and non-UTF-8 bytes raise a DataFormatError with the line."""
    path = Path(path)
    if path.is_dir():  # not "no such file": it is there, and the reader would only doubt their eyes
        raise DataFormatError(
            str(path), "a directory, but not a saved Hugging Face dataset (save_to_disk's folder): give a file"
        )
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    data = path.read_bytes()
    if not data.strip():
        raise DataFormatError(f"{path}:1", "the file is empty (no dialogues)")
    try:
        # universal newlines, as open() reads text: a file with CR-only (old Mac) line ends has lines too
        return data.decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise DataFormatError(
            f"{path}:{line}",
            f"not valid UTF-8 (byte 0x{data[e.start]:02x} at column {column}); re-encode the file as UTF-8",
        ) from None


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of the non-blank lines."""
    for number, line in enumerate(text.split("\n"), 1):
        line = line.rstrip("\r")
        if line.strip():
            yield number, line
