"""The embedded Chit-Chat corpus (:mod:`lightning_div.chitchat`) as pairs: ``read_pairs("chitchat")``."""

from __future__ import annotations

from lightning_div.chitchat import chitchat_conversations
from lightning_div.datamodules.formats.records import ReadResult, _Collector, conversation_to_pairs
from lightning_div.pairs import DialoguePair


def read_chitchat(
    split: str = "train", max_history: int | None = 3, max_conversations: int | None = None
) -> list[DialoguePair]:
    """The embedded corpus as pairs (see :func:`chitchat_conversations`).

    With ``max_history=3``: 118,529 / 6,025 / 7,003 train / validation / test examples.

    Args:
        split: ``"train"``, ``"validation"`` or ``"test"``.
        max_history: context turns kept per example (None = all).
        max_conversations: read at most this many conversations (None = all).

    Returns:
        The pairs, with ``.stats``.

    Raises:
        ValueError: an unknown split, or ``max_conversations`` < 1.
    """
    pairs: list[DialoguePair] = []
    for conv_id, turns in chitchat_conversations(split, max_conversations):
        pairs.extend(conversation_to_pairs(turns, max_history, source=f"chitchat:{conv_id}"))
    return pairs


def read_chitchat_pairs(
    split: str = "train", max_history: int | None = None, dedupe: bool = False, max_conversations: int | None = None
) -> ReadResult:
    """The embedded corpus (see :func:`chitchat_conversations`) with statistics."""
    out = _Collector(f"chitchat:{split}", max_history)
    for conv_id, turns in chitchat_conversations(split, max_conversations):
        out.conversation(turns, f"chitchat:{conv_id}")
        out.stats.records += 1
    return out.result(dedupe)
