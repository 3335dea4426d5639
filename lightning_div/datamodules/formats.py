"""Dialogue readers: every format becomes a list of :class:`DialoguePair`.

A conversation of turns t0..tm becomes one example per response turn: for i >= 1,
(context = t0..t(i-1), response = ti), the history cut to the last ``max_history``
turns when that is set.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

SPLITS = ("train", "validation", "test")


@dataclass(frozen=True)
class DialoguePair:
    """One example: the context turns (oldest first), the gold response, extra references."""

    context: tuple[str, ...]
    response: str
    references: tuple[str, ...] = ()
    source: str = field(default="", compare=False)  # "file:line" for error messages

    @property
    def all_references(self) -> tuple[str, ...]:
        """The gold response followed by any extra references."""
        return (self.response, *self.references)


def conversation_to_pairs(turns: Sequence[str], max_history: int | None = None, source: str = "") -> list[DialoguePair]:
    """One pair per response turn; the first turn only ever serves as context."""
    if max_history is not None and max_history < 1:
        raise ValueError(f"max_history must be >= 1 or None, got {max_history}")
    pairs = []
    for i in range(1, len(turns)):
        start = 0 if max_history is None else max(0, i - max_history)
        pairs.append(DialoguePair(tuple(turns[start:i]), turns[i], source=source))
    return pairs


def split_of(key: str, fractions: tuple[float, float, float] = (0.9, 0.05, 0.05)) -> str:
    """Deterministic split of a conversation by a hash of its id (independent of file order)."""
    u = int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little") / 2.0 ** 64
    if u < fractions[0]:
        return "train"
    return "validation" if u < fractions[0] + fractions[1] else "test"


def _check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is unknown; use one of {SPLITS}")
    return split


def chitchat_conversations(split: str = "train", max_conversations: int | None = None) -> list[tuple[str, list[str]]]:
    """(conversation id, turns) of the embedded Chit-Chat corpus (BYU PCC lab; PyPI ``chitchat-dataset``).

    7,168 real open-domain conversations (138,737 turns). Consecutive messages of one
    speaker form one turn. Split by a hash of the conversation id: about 90/5/5 %.
    """
    import chitchat_dataset

    _check_split(split)
    data = chitchat_dataset.Dataset()
    out = []
    for conv_id in sorted(data):
        if split_of(conv_id) != split:
            continue
        turns = [" ".join(u["text"].strip() for u in message if u["text"].strip())
                 for message in data[conv_id]["messages"]]
        turns = [t for t in turns if t]
        if len(turns) >= 2:
            out.append((conv_id, turns))
        if max_conversations is not None and len(out) >= max_conversations:
            break
    return out


def read_chitchat(split: str = "train", max_history: int | None = 3,
                  max_conversations: int | None = None) -> list[DialoguePair]:
    """The embedded corpus as pairs (see :func:`chitchat_conversations`)."""
    pairs: list[DialoguePair] = []
    for conv_id, turns in chitchat_conversations(split, max_conversations):
        pairs.extend(conversation_to_pairs(turns, max_history, source=f"chitchat:{conv_id}"))
    return pairs


def iter_texts(pairs: Iterable[DialoguePair]) -> Iterable[str]:
    """Every context turn and response of some pairs (e.g. to train a tokenizer)."""
    for p in pairs:
        yield from p.context
        yield p.response
