"""What a Lightning callback is built from and what it checkpoints, written once for every callback.

* :func:`common_settings`: the :class:`~lightning_div.settings.ModelAccess`, :class:`~lightning_div.settings.Generation`
  and :class:`~lightning_div.settings.Outputs` of a callback, from the objects given and the 0.2 flat keyword
  arguments still accepted (deprecated);
* :func:`nested_state` / :func:`upgrade_flat_state`: the checkpoint layout, one nested entry per part a callback
  owns (``{"samples": ..., "measure": ..., "space": ..., "alert": ...}``), and the flat layout of 0.2 read into it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from lightning_div._internal.deprecation import merged, regrouped_into, take_deprecated
from lightning_div.settings import Generation, ModelAccess, Outputs

__all__ = [
    "COMMON_REGROUPED",
    "SHARED",
    "common_settings",
    "nested_state",
    "init_depth",
    "part_owners",
    "take_own",
    "upgrade_flat_state",
]

#: The 0.2 keyword arguments of every Lightning callback, now a field of a settings object.
COMMON_REGROUPED: dict[str, tuple[str, str]] = {
    **regrouped_into("model", "model_attr", "tokenizer_attr", format="layout"),
    **regrouped_into("generation", "batch_size", "max_new_tokens", generation_kwargs="options"),
    **regrouped_into("outputs", "dirpath", "show_progress", "log_samples", "cluster_views"),
}

#: The key a callback writes in place of a part's state that another callback of the Trainer owns.
SHARED = "owner"


def init_depth(obj: Any) -> int:
    """How many frames above the caller the user's call of ``obj``'s constructor is (through a subclass's ``__init__``
    and its parents'), so that a deprecation warning points at the user's line, however deep the class."""
    here = inspect.currentframe()  # this function's frame (public API; sys._getframe is CPython's private one)
    frame, distance = (here.f_back if here is not None else None), 0
    while frame is not None and not (frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is obj):
        frame, distance = frame.f_back, distance + 1
    while frame is not None and frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is obj:
        frame, distance = frame.f_back, distance + 1
    return distance


def take_own(
    obj: Any,
    kwargs: dict[str, Any],
    renamed: Mapping[str, str] | None = None,
    regrouped: Mapping[str, tuple[str, str]] | None = None,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A subclass's deprecated 0.2 keyword arguments, taken out of ``kwargs`` (the rest goes on to its parent),
    each warning once at the user's call (:func:`~lightning_div._internal.deprecation.take_deprecated`)."""
    names = set(renamed or {}) | set(regrouped or {})
    own = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
    return take_deprecated(type(obj).__name__, own, renamed, regrouped, stacklevel=3 + init_depth(obj))


def common_settings(
    obj: Any,
    kwargs: dict[str, Any],
    model: ModelAccess | None,
    generation: Generation | None,
    outputs: Outputs | None,
) -> tuple[ModelAccess, Generation, Outputs]:
    """The callback's settings objects: those given, else the defaults, with the 0.2 flat arguments in ``kwargs``.

    Args:
        obj: the callback being built (warnings and errors name its class).
        kwargs: what the signature did not take: the deprecated :data:`COMMON_REGROUPED` (each warns); anything
            else is an error, as Python's own.
        model, generation, outputs: the objects given, or None.

    Raises:
        TypeError: an unknown keyword argument.
        ValueError: an object together with its deprecated flat fields.
    """
    owner = type(obj).__name__
    for arg, given, cls in (
        ("model", model, ModelAccess),
        ("generation", generation, Generation),
        ("outputs", outputs, Outputs),
    ):
        if given is not None and not isinstance(given, cls):
            raise TypeError(f"{owner}: {arg} must be a lightning_div.{cls.__name__} or None, got {given!r:.80}")
    _, groups = take_deprecated(owner, kwargs, regrouped=COMMON_REGROUPED, stacklevel=3 + init_depth(obj))
    return (
        merged(owner, "model", model, ModelAccess(), groups.get("model", {})),
        merged(owner, "generation", generation, Generation(), groups.get("generation", {})),
        merged(owner, "outputs", outputs, Outputs(), groups.get("outputs", {})),
    )


def nested_state(
    history: list[dict[str, float]], settings: Any, samples: Any, parts: Mapping[str, Any]
) -> dict[str, Any]:
    """The checkpoint layout of every Lightning callback: its history, settings and samples, and one entry per part."""
    return {"history": list(history), "settings": settings, "samples": samples, **parts}


def upgrade_flat_state(state: Mapping[str, Any], parts: Mapping[str, Any], legacy: Mapping[str, Any]) -> dict[str, Any]:
    """A checkpoint state of lightning-div 0.2 (flat: ``indices``, the space's and the measure's fields side by side)
    in the nested layout of :func:`nested_state`; a nested one is returned as it is.

    Args:
        state: the state Lightning hands ``load_state_dict``.
        parts: the callback's parts by name; a part without a ``legacy`` entry read its fields from the flat
            state itself in 0.2 (the space's ``clusters_path``, the measure's ``share_history`` ...).
        legacy: part name -> the 0.2 key its state was under (RUQ's alert: ``"last_val_ruq"``).
    """
    if "samples" in state or "indices" not in state:  # every 0.2 state has "indices" (None before a draw)
        return dict(state)
    out = {k: state[k] for k in ("history", "settings", "validated_epoch") if k in state}
    out["samples"] = state.get("indices")
    for name in parts:
        out[name] = state.get(legacy[name]) if name in legacy else dict(state)
    return out


def part_owners(callback: Any, callbacks: Sequence[Any]) -> dict[str, str]:
    """Which of ``callback``'s parts another callback of the Trainer checkpoints: part name -> its state key.

    A part given to several callbacks (one ``SemanticSpace`` object) is owned by the first of them in
    ``trainer.callbacks`` that checkpoints parts (:meth:`~lightning_div.callbacks.base.DiversityCallback.state_parts`);
    the others write ``{"owner": <its state key>}`` in its place, so the state is written and restored once.
    """
    mine = callback.state_parts() or {}
    owners: dict[str, str] = {}
    for name, part in mine.items():
        for other in callbacks:
            theirs = other.state_parts() if callable(getattr(other, "state_parts", None)) else None
            if theirs and any(p is part for p in theirs.values()):
                if other is not callback:
                    owners[name] = other.state_key
                break
    return owners
