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

import numbers
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from lightning_div.metrics import check_lexical_names, check_lexical_options

__all__ = ["LexicalSettings", "Measure", "Stateless", "check_vocab_size", "plain", "restored_vocab_size"]


def plain(value: Any) -> Any:
    """``value`` as JSON can hold it: mappings and sequences kept, numbers, strings and None as they
    are (a numpy number as the Python number, a numpy array as a list), a path as its text, any other
    object as its ``name`` or type (never its ``repr``, which holds a memory address).

    Examples:
        >>> plain({"tokenizer": "13a", "k": (1, 2), "fn": len})
        {'tokenizer': '13a', 'k': [1, 2], 'fn': 'builtin_function_or_method'}
    """
    if isinstance(value, (np.generic, np.ndarray)):  # a numpy number (a k from np.arange) is a number
        return plain(value.tolist())
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


def check_vocab_size(vocab_size: Any) -> int | None:
    """EAD's V as given: an integer >= 1 (a numpy integer becomes a Python int), or None (counted later).

    Raises:
        ValueError: anything else.
    """
    if vocab_size is not None and (
        isinstance(vocab_size, bool) or not isinstance(vocab_size, numbers.Integral) or vocab_size < 1
    ):
        raise ValueError(f"vocab_size must be an integer >= 1 (EAD's vocabulary size) or None, got {vocab_size!r}")
    return None if vocab_size is None else int(vocab_size)


def restored_vocab_size(given: int | None, saved: int | None, who: str) -> int | None:
    """The V a resumed measure computes EAD with: a V the user gave is a setting, a counted one is state.

    A V counted by the interrupted run (none given) is restored, so that EAD stays comparable across
    the resume. A V given now is kept: a checkpoint that measured with another V is warned about, never
    silently used in its place (as a changed clustering setting is).

    Args:
        given: the V given to the measure (None: it is counted).
        saved: the checkpoint's V (checked by the caller; None: none saved).
        who: the measure, named in the warning.

    Returns:
        The V to measure with from now on.
    """
    if given is None or saved is None or saved == given:
        return given if given is not None else saved
    warnings.warn(
        f"{who}: vocab_size={given} was given, but the checkpoint measured EAD with vocab_size={saved}: the given "
        f"{given} is kept (EAD before and after the resume is not comparable)",
        RuntimeWarning,
        stacklevel=3,
    )
    return given


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


class LexicalSettings:
    """The lexical metrics a measure computes beside its own, their options, and EAD's vocabulary size.

    Shared by the measures that report the lexical metrics of what they measured
    (:class:`~lightning_div.measure.semantic.SemanticMeasure`, :class:`~lightning_div.measure.group.GroupMeasure`),
    so that both check and keep them alike.
    """

    lexical_metrics: list[str]
    lexical_options: dict[str, Any]
    vocab_size: int | None
    #: V as given (a setting: a checkpoint of another V does not replace it); None: counted.
    given_vocab_size: int | None

    def _init_lexical(
        self, lexical_metrics: Sequence[str], lexical_options: Mapping[str, Any] | None, vocab_size: Any
    ) -> None:
        """Check and keep the lexical settings.

        Raises:
            ValueError: unknown lexical names or options, or a ``vocab_size`` that is not an integer >= 1 or None.
        """
        self.lexical_metrics = check_lexical_names(lexical_metrics)
        self.lexical_options = check_lexical_options(lexical_options)
        self.vocab_size = check_vocab_size(vocab_size)
        self.given_vocab_size = self.vocab_size

    def _lexical_settings(self) -> dict[str, Any]:
        """The lexical part of a measure's :meth:`~Measure.settings` (JSON-ready)."""
        return {
            "lexical_metrics": list(self.lexical_metrics),
            "lexical_options": plain(self.lexical_options),
            "vocab_size": self.vocab_size,
        }
