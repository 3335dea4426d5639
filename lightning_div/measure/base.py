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

import copy
import functools
import inspect
import numbers
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lightning_div.metrics import check_lexical_names, check_lexical_options

__all__ = ["LexicalSettings", "Measure", "State", "Stateless", "check_vocab_size", "plain", "restored_vocab_size"]


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


#: Constructor arguments that change how a measure runs, never what it measures: left out of its settings.
NOT_SETTINGS = ("show_progress", "device")


@dataclass(frozen=True)
class State:
    """One declared piece of a measure's state (:meth:`Measure.add_state`).

    Attributes:
        default: the value at construction and after :meth:`Measure.reset` (copied, never shared).
        check: what a checkpoint's value must be: takes it, returns the value to restore, raises
            ValueError (or TypeError) for a damaged one; None: any value JSON can hold.
        required: whether a checkpoint without it is damaged (else the default is restored).
    """

    default: Any
    check: Callable[[Any], Any] | None = None
    required: bool = False


def _setting(value: Any) -> Any:
    """A constructor argument as a setting: a space as the settings in use, a measure as its settings, else ``plain``."""
    if callable(getattr(value, "settings_in_use", None)):  # a SemanticSpace: the k measured with, the clusters file
        return value.settings_in_use()
    if isinstance(value, Measure):
        return value.settings()
    return plain(value)


class Measure:
    """A measurement: made ready once, measured many times, its state checkpointed and its settings recorded.

    The base class of every measure of the core (torchmetrics' ``Metric`` is the model). A measure is
    written as its computation; the machinery comes from here:

    * **state** declared once, in ``__init__``, with :meth:`add_state` (name, default, a check of
      what a checkpoint may hold), gives :meth:`state_dict`, a validating :meth:`load_state_dict`
      (a damaged state raises ValueError naming the field, and nothing of it is restored) and
      :meth:`reset`;
    * **settings** are its constructor's arguments, recorded when it is built: :meth:`settings`
      gives each (its current attribute of that name when it has one, so a changed ``batch_size``
      is what is recorded), JSON-ready through :func:`plain`; a space gives its settings in use.

    What ``prepare`` and ``measure`` take depends on what is measured (a model adapter and a sample,
    a batch of completions, a pool of candidates): the shape is the steps, not their arguments.
    Values are returned unprefixed (``sem_ent``, ``ruq``, ``group_sem_ent``): the front end names the keys.
    """

    #: Constructor arguments left out of :meth:`settings` (they change how it runs, not what it measures).
    not_settings: tuple[str, ...] = NOT_SETTINGS

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Record the constructor's arguments of every measure class (the outermost ``__init__`` records)."""
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return
        signature = inspect.signature(init)

        @functools.wraps(init)
        def recording_init(self: Measure, *args: Any, **kw: Any) -> None:
            if "_arguments" not in self.__dict__:
                try:
                    bound = signature.bind(self, *args, **kw)
                except TypeError:  # the constructor says what is wrong, in its own words
                    bound = None
                if bound is not None:
                    bound.apply_defaults()
                    self.__dict__["_arguments"] = {
                        name: value
                        for i, (name, value) in enumerate(bound.arguments.items())
                        if i > 0 and signature.parameters[name].kind not in _VARIADIC
                    }
            init(self, *args, **kw)

        setattr(cls, "__init__", recording_init)  # noqa: B010 - a method assigned to a class: mypy refuses the plain form

    # -- state ---------------------------------------------------------------------------------------

    def add_state(
        self, name: str, default: Any, check: Callable[[Any], Any] | None = None, *, required: bool = False
    ) -> None:
        """Declare one piece of state, set to (a copy of) ``default``; call it in ``__init__``.

        Args:
            name: the attribute and the checkpoint's key.
            default: its value now and after :meth:`reset`; JSON-ready (or made so by :func:`plain`).
            check: takes a checkpoint's value and returns the value to restore; raises ValueError for a
                damaged one (its message should name the field; it is prefixed with it if not).
            required: a checkpoint without it is damaged (else the default is restored).
        """
        self.__dict__.setdefault("_states", {})[name] = State(copy.deepcopy(default), check, required)
        setattr(self, name, copy.deepcopy(default))

    def add_part(self, name: str) -> None:
        """Declare an attribute that checkpoints itself (a space): its ``state_dict()`` is this measure's field
        ``name``, and a checkpoint must hold it (a dict, given to its ``load_state_dict``). Call it in ``__init__``."""
        self.__dict__.setdefault("_parts", []).append(name)

    @property
    def declared_states(self) -> dict[str, State]:
        """The declared state, by name, in the order declared."""
        return dict(self.__dict__.get("_states", {}))

    def _parts_declared(self) -> list[str]:
        return list(self.__dict__.get("_parts", []))

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to continue as the uninterrupted one (JSON-ready): every declared state and part."""
        out: dict[str, Any] = {name: getattr(self, name).state_dict() for name in self._parts_declared()}
        out.update({name: plain(getattr(self, name)) for name in self.declared_states})
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`: every field checked first, then all restored (a damaged state changes nothing).

        A field the checkpoint lacks gets its default, through its check (a measure that gained state
        reads older checkpoints), unless it is required; a field it has that is not declared is ignored. A part
        (:meth:`add_part`) is given its field with its own ``load_state_dict``.

        Raises:
            ValueError: a state that is not a dict, or a damaged or missing field (named).
        """
        who = type(self).__name__
        if not isinstance(state, dict):
            raise ValueError(f"a {who} state must be a dict, got {state!r:.80}")
        for name in self._parts_declared():
            if not isinstance(state.get(name), dict):
                raise ValueError(f"a {who} state must hold a {name!r} dict, got {state.get(name)!r:.80}")
        restored: dict[str, Any] = {}
        for name, spec in self.declared_states.items():
            if name not in state and spec.required:
                raise ValueError(f"a {who} state must hold {name!r}, got the fields {sorted(state)}")
            # a field the checkpoint lacks is its default, through the check too (which may keep what is at hand)
            value = state[name] if name in state else copy.deepcopy(spec.default)
            try:
                restored[name] = value if spec.check is None else spec.check(value)
            except (TypeError, ValueError) as err:
                text = str(err)
                raise ValueError(text if name in text else f"{who} state field {name!r}: {text}") from err
        for name in self._parts_declared():
            getattr(self, name).load_state_dict(state[name])
        for name, value in restored.items():
            setattr(self, name, value)

    def reset(self) -> None:
        """Every declared state back to its default (a part, such as a space, is kept as it is)."""
        for name, spec in self.declared_states.items():
            setattr(self, name, copy.deepcopy(spec.default))

    # -- settings ------------------------------------------------------------------------------------

    def settings(self) -> dict[str, Any]:
        """The measurement's configuration as a plain, JSON-serialisable dict (for the run's record).

        Each constructor argument (but :attr:`not_settings`), as the measure holds it now: its attribute
        of the same name when it has one (checked and normalised), else the value given.
        """
        arguments: dict[str, Any] = self.__dict__.get("_arguments", {})
        return {
            name: _setting(self.__dict__.get(name, given))
            for name, given in arguments.items()
            if name not in self.not_settings
        }

    # -- the steps -----------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Whether :meth:`prepare` has made everything ready (a measure with nothing to prepare always is)."""
        return True

    def prepare(self, *args: Any, **kwargs: Any) -> None:
        """Make the measurement ready (fit or read clusters, load a scorer); later calls do nothing new."""

    def measure(self, *args: Any, **kwargs: Any) -> Any:
        """One measurement (the values by unprefixed name, or a result holding them)."""
        raise NotImplementedError(f"{type(self).__name__} does not define measure()")


_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


class Stateless(Measure):
    """A measure that keeps nothing between measurements (0.2's base of the state part; :class:`Measure` now
    does it: a measure with no declared state has an empty ``state_dict`` and accepts any dict)."""


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

    def _restored_vocab(self, saved: Any) -> int | None:
        """The ``vocab_size`` state's check: a checkpoint's V, and the V to measure with after it.

        A V given to this measure is kept (a checkpoint of another one is warned about); a counted one is
        restored (none saved: the V at hand is kept).

        Raises:
            ValueError: a V that is not an integer >= 1 or None.
        """
        if saved is not None and (isinstance(saved, bool) or not isinstance(saved, int) or saved < 1):
            raise ValueError(f"vocab_size {saved!r} is not an integer >= 1")
        restored = restored_vocab_size(self.given_vocab_size, saved, type(self).__name__)
        return self.vocab_size if restored is None else restored
