"""ParlAI's dialog text format: ``text:...<TAB>labels:...[<TAB>episode_done:True]`` a line."""

from __future__ import annotations

import os
from typing import Any

from lightning_div.datamodules.formats.files import _lines, _read_text
from lightning_div.datamodules.formats.records import ReadResult, _Collector, _max_turns
from lightning_div.pairs import DataFormatError


def _parlai_unescape(value: str) -> str:
    return value.replace("\\t", "\t").replace("\\n", "\n").replace("__PIPE__", "|")


def read_parlai(
    path: str | os.PathLike, max_turns: int | None = None, dedupe: bool = False, **deprecated: Any
) -> ReadResult:
    """ParlAI dialog text: ``text:...<TAB>labels:...[<TAB>episode_done:True]`` a line.

    Within an episode every example sees the earlier texts and first labels as history;
    ``\\n`` inside ``text`` separates turns (e.g. persona lines). ``labels`` (or
    ``eval_labels``) may hold several candidates separated by ``|``: the first is the
    response, the rest references. ``\\t``, ``\\n`` and ``__PIPE__`` are unescaped as ParlAI
    does. ``episode_done`` must be True/False (ParlAI reads any non-empty value as True).
    ``max_turns``: the context turns kept per example (None = all; 0.2's ``max_history=`` warns).
    """
    max_turns = _max_turns("read_parlai", max_turns, deprecated)
    text = _read_text(path)
    out = _Collector(str(path), max_turns)
    history: list[str] = []
    for number, line in _lines(text):
        where = f"{path}:{number}"
        message: dict[str, str] = {}
        for part in line.split("\t"):
            if not part:
                continue
            key, colon, value = part.partition(":")
            if not colon:
                raise DataFormatError(where, f"field {part[:40]!r} is not of the form name:value")
            message[key.strip()] = value
        if "text" not in message:
            raise DataFormatError(where, "missing field 'text'")
        labels = message.get("labels", message.get("eval_labels"))
        if labels is None:
            raise DataFormatError(where, "missing field 'labels'")
        done = message.get("episode_done", "False").strip().lower()
        if done not in ("true", "false", "1", "0", ""):
            raise DataFormatError(where, f"episode_done must be True or False, got {message['episode_done']!r}")
        turns = _parlai_unescape(message["text"]).split("\n")
        if turns == [""]:
            turns = []  # an episode may open with the model speaking
        candidates = [_parlai_unescape(c) for c in labels.split("|")]
        context = history + turns
        out.pair(context, candidates[0], candidates[1:], where)
        out.stats.records += 1
        history = context + [candidates[0]]
        if done in ("true", "1"):
            history = []
    return out.result(dedupe)
