"""DRESS's schedule: at which epochs a round of negatives is mined, from which sample, with which generation.

A round starts every ``every_n_epochs`` epochs. ``mine_at="start"`` (the authors) mines a round's
negatives at its start, greedy and without n-gram blocking; ``mine_at="end"`` mines at an epoch's
end for the epochs after it, with the generation settings as given. Pure functions of the epoch
numbers and the settings, so that the callback's hooks only ask them (and a test can too).
"""

from __future__ import annotations

from typing import Any

__all__ = ["MINE_AT", "mining_generation_kwargs", "mining_seed", "round_starts", "round_to_mine"]

#: When a round's negatives are mined.
MINE_AT = ("start", "end")


def round_starts(epoch: int, every_n_epochs: int) -> bool:
    """Whether a round of DRESS starts at ``epoch`` (every ``every_n_epochs`` epochs, from 0)."""
    return epoch % every_n_epochs == 0


def round_to_mine(
    epoch: int,
    mine_at: str,
    every_n_epochs: int,
    *,
    due: bool,
    max_epochs: int | None,
    mined_for: int | None,
    should_stop: bool,
) -> int | None:
    """At the end of ``epoch``: the epoch to mine negatives for, or None.

    Args:
        epoch: the epoch that ends.
        mine_at: ``"start"`` or ``"end"``.
        every_n_epochs: the length of a round.
        due: whether the callback measures at this epoch's end (what ``mine_at="end"`` follows).
        max_epochs: the Trainer's last epoch + 1 (None or negative: no limit).
        mined_for: the epoch the negatives held were mined for (a resumed run's fit start may
            have mined the next round already: each round is mined once).
        should_stop: the Trainer stops after this epoch.
    """
    if mine_at == "end":
        return epoch + 1 if due else None
    nxt = epoch + 1
    last = max_epochs is not None and max_epochs >= 0 and nxt >= max_epochs
    # No mining for a round that will not be trained (a resumed run with more epochs mines it at fit start).
    if mined_for == nxt:
        return None
    return nxt if round_starts(nxt, every_n_epochs) and not last and not should_stop else None


def mining_seed(seed: int, for_epoch: int, mine_at: str) -> int:
    """The seed of the contexts a round generates for: a fresh sample each round, fixed by (seed, epoch).

    Resumed and uninterrupted runs agree; ``"end"`` keys it by the epoch it is mined at the end
    of, as before ``"start"`` existed.
    """
    key = for_epoch - 1 if mine_at == "end" else for_epoch
    return seed + 1000 * key


def mining_generation_kwargs(mine_at: str, generation_kwargs: dict[str, Any], is_seq2seq: bool) -> dict[str, Any]:
    """What ``generate`` gets when mining: ``mine_at="start"`` turns the n-gram blocking off (greedy, one beam)."""
    if mine_at == "end":
        return dict(generation_kwargs)
    plain: dict[str, Any] = {"do_sample": False, "num_beams": 1, "no_repeat_ngram_size": 0}
    if is_seq2seq:
        plain["encoder_no_repeat_ngram_size"] = 0
    return {**plain, **generation_kwargs}
