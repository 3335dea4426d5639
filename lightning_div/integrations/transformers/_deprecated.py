"""The 0.2 keyword arguments of the Hugging Face monitor, read into its 1.0 arguments (for one release, with warnings).

:class:`~lightning_div.integrations.transformers.TrainerDiversityMonitor` takes composed settings
(``alert=RUQAlert(...)``, ``generation=Generation(...)``, ``outputs=Outputs(...)``) and reads the
seed, batch size, output directory and progress bars from ``TrainingArguments``; what 0.2 took flat
is translated here, each keyword warning once with its 1.0 form.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from lightning_div._internal.deprecation import regrouped_into, take_deprecated
from lightning_div.measure.alerts import RUQAlert
from lightning_div.settings import Generation, Outputs, RUQPlot

__all__ = ["TrainerLegacy", "check_types", "trainer_legacy"]


def check_types(who: str, **given: tuple[Any, type | tuple[type, ...]]) -> None:
    """Check that each settings object given (``name=(value, its class or classes)``) is one of its class, or None.

    Raises:
        TypeError: one that is not, naming the argument.
    """
    for arg, (value, cls) in given.items():
        if value is not None and not isinstance(value, cls):
            names = " or ".join(c.__name__ for c in (cls if isinstance(cls, tuple) else (cls,)))
            raise TypeError(f"{who}: {arg} must be a {names} or None, got {type(value).__name__}")


@dataclass
class TrainerLegacy:
    """What the 0.2 keywords said: the 1.0 arguments they replace, and the settings 1.0 reads from the trainer.

    Attributes:
        renamed: 1.0 argument -> value, of keywords that only changed name (``gold_responses``, ``format``).
        num_ruq_contexts: ``(size,)``: 0.2's ``num_ruq_prompts`` (RUQ's sample size apart from
            ``num_contexts``, None meaning all pairs), when given; ``()`` when not.
        seed: 0.2's ``seed`` (1.0 reads ``args.seed``), if given.
        tokenizer: 0.2's ``tokenizer`` (1.0 reads the trainer's ``processing_class``), if given.
    """

    renamed: dict[str, Any]
    num_ruq_contexts: tuple[int | None, ...] = ()
    seed: int | None = None
    tokenizer: Any = None


_RENAMED = {
    "gold_responses": "cluster_texts",
    "format": "layout",
    "num_train_ruq_prompts": "num_train_contexts",
    "num_ruq_prompts": "num_contexts",
}
_REGROUPED = {
    **regrouped_into("alert", "warn_below", "warn_drop"),
    **regrouped_into("generation", "batch_size", "max_new_tokens"),
    **regrouped_into("outputs", "dirpath", "show_progress", "log_samples", "cluster_views"),
    **regrouped_into("ruq_plot", "num_beams", num_plot_prompts="num_contexts"),
    "seed": ("TrainingArguments", "seed"),
    "tokenizer": ("Trainer", "processing_class"),
}


def trainer_legacy(
    owner: str,
    kwargs: dict[str, Any],
    arguments: dict[str, Any],
) -> TrainerLegacy:
    """Read the 0.2 keywords left in ``kwargs`` into ``arguments`` (the 1.0 arguments as given), warning for each.

    A 0.2 keyword regrouped into a settings object fills that object's field: into the object given
    (``generation=Generation(...)`` and ``batch_size=8``: the 8 wins), else into a new one with the
    defaults. ``alert``, ``generation``, ``outputs`` and ``ruq_plot`` in ``arguments`` are replaced.

    Raises:
        TypeError: an argument that is neither a 1.0 nor a 0.2 one.
        ValueError: a regrouped value its settings object refuses.
    """
    renamed, groups = take_deprecated(owner, kwargs, _RENAMED, _REGROUPED, stacklevel=5)
    legacy = TrainerLegacy({k: v for k, v in renamed.items() if k != "num_contexts"})
    if "num_contexts" in renamed:  # 0.2's separate RUQ sample size: kept apart while it is accepted
        legacy.num_ruq_contexts = (renamed["num_contexts"],)
    legacy.seed = groups.pop("TrainingArguments", {}).get("seed")
    legacy.tokenizer = groups.pop("Trainer", {}).get("processing_class")
    if "alert" in groups:
        given = arguments.get("alert") or RUQAlert()
        fields = {"warn_below": given.warn_below, "warn_drop": given.warn_drop, **groups["alert"]}
        arguments["alert"] = RUQAlert(fields["warn_below"], fields["warn_drop"])
    for name, cls in (("generation", Generation), ("outputs", Outputs)):
        if name in groups:
            given = arguments.get(name)
            arguments[name] = replace(given, **groups[name]) if given is not None else cls(**groups[name])
    plot = arguments.get("ruq_plot")
    if "ruq_plot" in groups and plot:  # 0.2's num_plot_prompts / num_beams: they mattered only with the plot on
        arguments["ruq_plot"] = replace(plot if isinstance(plot, RUQPlot) else RUQPlot(), **groups["ruq_plot"])
    return legacy
