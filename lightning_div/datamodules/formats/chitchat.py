"""The embedded Chit-Chat corpus (:mod:`lightning_div.chitchat`) as pairs: ``read_pairs("chitchat")``."""

from __future__ import annotations

from typing import Any

from lightning_div.chitchat import chitchat_conversations
from lightning_div.datamodules.formats.records import ReadResult, _Collector, _max_turns, conversation_to_pairs
from lightning_div.pairs import DialoguePair


def read_chitchat(
    split: str = "train", max_turns: int | None = 3, max_conversations: int | None = None, **deprecated: Any
) -> list[DialoguePair]:
    """The embedded corpus as pairs (see :func:`chitchat_conversations`).

    With ``max_turns=3``: 118,529 / 6,025 / 7,003 train / validation / test examples.

    Args:
        split: ``"train"``, ``"validation"`` or ``"test"``.
        max_turns: context turns kept per example (None = all).
        max_conversations: read at most this many conversations (None = all).
        **deprecated: 0.2's ``max_history=`` (``max_turns=``), with a ``DeprecationWarning``.

    Returns:
        The pairs, with ``.stats``.

    Raises:
        ValueError: an unknown split, or ``max_conversations`` < 1.
    """
    max_turns = _max_turns("read_chitchat", max_turns, deprecated, default=3)
    pairs: list[DialoguePair] = []
    for conv_id, turns in chitchat_conversations(split, max_conversations):
        pairs.extend(conversation_to_pairs(turns, max_turns, source=f"chitchat:{conv_id}"))
    return pairs


def read_chitchat_pairs(
    split: str = "train",
    max_turns: int | None = None,
    dedupe: bool = False,
    max_conversations: int | None = None,
    **deprecated: Any,
) -> ReadResult:
    """The embedded corpus (see :func:`chitchat_conversations`) with statistics.

    ``max_turns``: the context turns kept per example (None = all; 0.2's ``max_history=`` warns).
    """
    max_turns = _max_turns("read_chitchat_pairs", max_turns, deprecated)
    out = _Collector(f"chitchat:{split}", max_turns)
    for conv_id, turns in chitchat_conversations(split, max_conversations):
        out.conversation(turns, f"chitchat:{conv_id}")
        out.stats.records += 1
    return out.result(dedupe)
