"""Pairs given in memory: DialoguePairs, (context, response) tuples or record dicts, each checked like a file's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lightning_div.datamodules.formats.records import Fields, ReadResult, _add_record, _Collector, _max_turns
from lightning_div.pairs import DataFormatError, as_pair


def pairs_from_items(
    items: Iterable[Any],
    max_turns: int | None = None,
    dedupe: bool = False,
    fields: Fields = Fields(),
    name: str = "pairs",
    **deprecated: Any,
) -> ReadResult:
    """Normalise DialoguePairs, (context, response) / (context, [references]) tuples or record dicts.

    Errors name the index of the bad item, e.g. ``pairs[3]: response must be a string``.
    ``max_turns``: the context turns kept per example (None = all; 0.2's ``max_history=`` warns).
    """
    max_turns = _max_turns("pairs_from_items", max_turns, deprecated)
    out = _Collector(name, max_turns)
    for i, item in enumerate(items):
        where = f"{name}[{i}]"
        if isinstance(item, dict):
            _add_record(out, item, where, fields)
            continue
        pair = as_pair(item, where)
        out.pair(pair.context, pair.response, pair.references, pair.source or where)
        out.stats.records += 1
    if out.stats.records == 0:
        raise DataFormatError(name, "no pairs given")
    return out.result(dedupe)
