"""The one shape every measurement of the core has: :class:`Measure`.

Sem-Ent (:class:`~lightning_div.measure.semantic.SemanticMeasure`), RUQ
(:class:`~lightning_div.measure.ruq.RUQMeasure`), NLI diversity
(:class:`~lightning_div.measure.nli.NLIMeasure`), the GRPO/RLOO group metrics
(:class:`~lightning_div.measure.group.GroupMeasure`) and DRESS's negative mining
(:class:`~lightning_div.measure.dress.NegativeMiner`) follow it, so a front end is a loop of
hooks -> measures -> reporter: it calls :meth:`Measure.prepare` once, :meth:`Measure.measure` at
each measurement and keeps :meth:`Measure.state_dict` in its checkpoint; :meth:`Measure.settings`
says what the measurement was configured with, as plain JSON. No method needs a trainer.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

__all__ = ["Measure", "Stateless", "plain"]


def plain(value: Any) -> Any:
    """``value`` as JSON can hold it: mappings and sequences kept, numbers, strings and None as they
    are, a path as its text, any other object as its ``name`` or type (never its ``repr``, which
    holds a memory address).

    Examples:
        >>> plain({"tokenizer": "13a", "k": (1, 2), "fn": len})
        {'tokenizer': '13a', 'k': [1, 2], 'fn': 'builtin_function_or_method'}
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    name = getattr(value, "name", None)
    return name if isinstance(name, str) and name else type(value).__name__


@runtime_checkable
class Measure(Protocol):
    """A measurement: made ready once, measured many times, its state checkpointed and its settings recorded.

    What ``prepare`` and ``measure`` take depends on what is measured (a model adapter and a sample,
    a batch of completions, a pool of candidates): the shape is the four steps, not their arguments.
    Values are returned unprefixed (``sem_ent``, ``ruq``, ``group_sem_ent``): the front end names the keys.
    """

    def prepare(self, *args: Any, **kwargs: Any) -> None:
        """Make the measurement ready (fit or read clusters, load a scorer); later calls do nothing new."""
        ...

    def measure(self, *args: Any, **kwargs: Any) -> Any:
        """One measurement (the values by unprefixed name, or a result holding them)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to continue as the uninterrupted one (JSON-ready)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`; a damaged state raises ValueError naming the field."""
        ...

    def settings(self) -> dict[str, Any]:
        """The measurement's configuration as a plain, JSON-serialisable dict (for the run's record)."""
        ...


class Stateless:
    """The state part of :class:`Measure` for a measurement that keeps nothing between measurements.

    Its ``state_dict`` is empty and ``load_state_dict`` accepts any dict (the checkpoint's field is
    kept, so a measure that gains state later reads old checkpoints); ``prepare`` has nothing to do.
    """

    def prepare(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to make ready."""

    def state_dict(self) -> dict[str, Any]:
        """Empty: nothing is kept between measurements."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (nothing to restore).

        Raises:
            ValueError: a state that is not a dict.
        """
        if not isinstance(state, dict):
            raise ValueError(f"a {type(self).__name__} state must be a dict, got {state!r:.80}")
