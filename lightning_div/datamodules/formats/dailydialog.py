"""DailyDialog's text format: one dialogue a line, each turn ended by ``__eou__``."""

from __future__ import annotations

import os
from typing import Any

from lightning_div.datamodules.formats.files import _lines, _read_text
from lightning_div.datamodules.formats.records import ReadResult, _Collector, _max_turns, _split_cell
from lightning_div.pairs import DataFormatError

EOU = "__eou__"


def read_dailydialog(
    path: str | os.PathLike, max_turns: int | None = None, dedupe: bool = False, eou: str = EOU, **deprecated: Any
) -> ReadResult:
    """DailyDialog text (``dialogues_text.txt``): one dialogue a line, each turn ended by ``__eou__``.

    ``max_turns``: the context turns kept per example (None = all; 0.2's ``max_history=`` warns).
    """
    max_turns = _max_turns("read_dailydialog", max_turns, deprecated)
    text = _read_text(path)
    out = _Collector(str(path), max_turns)
    for number, line in _lines(text):
        where = f"{path}:{number}"
        if eou not in line:
            raise DataFormatError(where, f"no '{eou}' turn marker; is this a DailyDialog dialogues_text file?")
        out.conversation(_split_cell(line, eou), where)
        out.stats.records += 1
    return out.result(dedupe)
