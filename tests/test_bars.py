"""lightning-div's progress bars draw on a terminal and never into a log file (issue 43 item 3: a log
file held carriage-return streams of "Embedding responses", "generating", "RUQ scoring" ...)."""

from __future__ import annotations

import io
import sys

from lightning_div._internal.distributed import distributed_map


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run(stream, monkeypatch, show_progress=True) -> str:
    monkeypatch.setattr(sys, "stderr", stream)
    out = distributed_map(
        lambda batch: [x * 2 for x in batch],
        list(range(6)),
        2,
        show_progress=show_progress,
        desc="RUQ scoring (6 pairs)",
    )
    assert out == [0, 2, 4, 6, 8, 10]
    return stream.getvalue()


def test_a_log_file_gets_no_bar(monkeypatch):
    assert _run(io.StringIO(), monkeypatch) == ""


def test_a_terminal_gets_the_bar_and_show_progress_false_none(monkeypatch):
    assert "RUQ scoring (6 pairs)" in _run(Terminal(), monkeypatch)
    assert _run(Terminal(), monkeypatch, show_progress=False) == ""
