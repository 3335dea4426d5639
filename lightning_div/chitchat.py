"""The embedded Chit-Chat corpus (BYU PCC lab; PyPI ``chitchat-dataset``): its conversations and splits.

The data side reads it as pairs (``read_pairs("chitchat")``) and the model side trains the
``"local:chitchat"`` tokenizer on it, so it sits below both. It needs only the standard library
and, when first read, the ``chitchat-dataset`` package of the ``demo`` extra.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

from lightning_div._internal.extras import missing_extra

__all__ = ["FINETUNE_FRACTION", "SPLITS", "check_split", "chitchat_conversations", "in_split", "split_of"]

SPLITS = ("train", "validation", "test", "pretrain", "finetune")
# Chit-Chat's training split is cut in two: "pretrain", the conversations the shipped base model
# (lightning_div.model.base) learned from, and "finetune", a held-out slice it never saw, on which
# the demo and the experiments fine-tune it. "train" is still the whole training split.
FINETUNE_FRACTION = 0.1


def _unit_hash(key: str) -> float:
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little") / 2.0**64


def split_of(key: str, fractions: tuple[float, float, float] = (0.9, 0.05, 0.05)) -> str:
    """Deterministic split of a conversation by a hash of its id (independent of file order)."""
    u = _unit_hash(key)
    if u < fractions[0]:
        return "train"
    return "validation" if u < fractions[0] + fractions[1] else "test"


def in_split(key: str, split: str) -> bool:
    """Whether conversation ``key`` belongs to ``split`` (``pretrain`` and ``finetune`` cut ``train`` apart).

    ``finetune`` is a second, independent hash of the id below :data:`FINETUNE_FRACTION`, so the
    three original splits are unchanged.
    """
    base = split_of(key)
    if split in ("pretrain", "finetune"):
        return base == "train" and (_unit_hash("finetune:" + key) < FINETUNE_FRACTION) == (split == "finetune")
    return base == split


def check_split(split: str) -> str:
    """``split`` if it is one of :data:`SPLITS`, else a ValueError listing them."""
    if split not in SPLITS:
        raise ValueError(f"split={split!r} is unknown; use one of {SPLITS}")
    return split


@lru_cache(maxsize=1)
def _chitchat_corpus() -> dict:
    try:
        import chitchat_dataset
    except ModuleNotFoundError as err:
        raise missing_extra("chitchat-dataset", 'the Chit-Chat corpus (train="chitchat")') from err

    return chitchat_dataset.Dataset()


def chitchat_conversations(split: str = "train", max_conversations: int | None = None) -> list[tuple[str, list[str]]]:
    """(conversation id, turns) of the embedded Chit-Chat corpus (BYU PCC lab; PyPI ``chitchat-dataset``).

    7,168 real open-domain conversations (138,737 turns), of which 4,017 have at least two
    turns and are kept: 3,610 / 190 / 217 in train / validation / test. Consecutive
    messages of one speaker form one turn. Split by a hash of the conversation id
    (about 90/5/5 %), so the split does not depend on file order. The training split is
    also cut into ``pretrain`` (about 90 %, what the shipped base model learned from) and
    ``finetune`` (about 10 %, held out from it): see :func:`in_split`.
    """
    check_split(split)
    if max_conversations is not None and (
        isinstance(max_conversations, bool) or not isinstance(max_conversations, int) or max_conversations < 1
    ):
        # checked before reading: the limit is tested after a conversation is kept, so 0 would keep one
        raise ValueError(f"max_conversations must be an int >= 1 or None, got {max_conversations!r}")
    data = _chitchat_corpus()
    out = []
    for conv_id in sorted(data):
        if not in_split(conv_id, split):
            continue
        turns = [
            " ".join(u["text"].strip() for u in message if u["text"].strip()) for message in data[conv_id]["messages"]
        ]
        turns = [t for t in turns if t]
        if len(turns) >= 2:
            out.append((conv_id, turns))
        if max_conversations is not None and len(out) >= max_conversations:
            break
    return out
