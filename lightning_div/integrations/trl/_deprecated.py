"""The 0.2 keyword arguments of the GRPO/RLOO monitor and reward, read into their 1.0 arguments (one release, warning).

:class:`~lightning_div.integrations.trl.GroupDiversityMonitor` takes composed settings
(``alert=GroupAlert(...)``, ``lexical=Lexical(...)``, ``outputs=Outputs(...)``) and TRL's words
(``ref_model``); what 0.2 took flat is translated here, each keyword warning once with its 1.0 form.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lightning_div._internal.deprecation import regrouped_into, take_deprecated
from lightning_div.measure.alerts import GroupAlert
from lightning_div.settings import Lexical, Outputs

__all__ = ["GROUP_LEXICAL", "monitor_legacy", "reward_legacy"]

#: The lexical metrics the GRPO/RLOO monitor measures over a whole batch by default.
GROUP_LEXICAL = ("distinct_1", "distinct_2", "ead")

_RENAMED = {
    "reference_responses": "cluster_texts",
    "reference_column": "cluster_column",
    "reference_model": "ref_model",
    "reference_tokenizer": "ref_tokenizer",
}
#: 0.2's flat alert arguments -> GroupAlert's own (the reasons of an alert built from them keep 0.2's names).
_ALERT = {
    "warn_drop": "warn_drop",
    "warn_below": "warn_below",
    "alert_start_steps": "start_steps",
    "breakdown_top_word": "top_word_share",
    "breakdown_cut_rise": "cut_rise",
    "breakdown_nll_rise": "nll_rise",
}
_REGROUPED = {
    **regrouped_into("alert", **_ALERT),
    **regrouped_into("lexical", "vocab_size", lexical_metrics="metrics", lexical_options="options"),
    **regrouped_into("outputs", "dirpath", "log_samples"),
    "batch_size": ("space", "batch_size"),
}


def monitor_legacy(owner: str, kwargs: dict[str, Any], arguments: dict[str, Any]) -> int | None:
    """Read the monitor's 0.2 keywords left in ``kwargs`` into ``arguments`` (its 1.0 arguments as given).

    Renamed keywords fill their 1.0 argument; regrouped ones fill a field of the settings object given
    (or of a new one with the monitor's defaults). An alert built from 0.2's keywords names them in its reasons.

    Returns:
        0.2's ``batch_size`` (of the private space), or None.

    Raises:
        TypeError: an argument that is neither a 1.0 nor a 0.2 one, or one given in both forms.
        ValueError: a value its settings object refuses.
    """
    renamed, groups = take_deprecated(owner, kwargs, _RENAMED, _REGROUPED, stacklevel=5)
    for new, value in renamed.items():
        if arguments.get(new) is not None:
            raise TypeError(f"{owner}() got {new}= and its 0.2 name: give {new}= alone")
        arguments[new] = value
    if "alert" in groups:
        given = arguments.get("alert")
        base = {new: getattr(given, new) for new in _ALERT.values()} if given is not None else {}
        names = dict(given.names) if given is not None else {v: k for k, v in _ALERT.items() if k != v}
        arguments["alert"] = GroupAlert(**{**base, **groups["alert"]}, names=names)
    if "lexical" in groups:
        given = arguments.get("lexical") or Lexical(metrics=GROUP_LEXICAL)
        arguments["lexical"] = replace(given, **groups["lexical"])
    if "outputs" in groups:
        fields = dict(groups["outputs"])
        if isinstance(fields.get("log_samples"), bool):  # 0.2's switch: one table a step, or none
            fields["log_samples"] = int(fields["log_samples"])
        given = arguments.get("outputs")
        arguments["outputs"] = replace(given, **fields) if given is not None else Outputs(**fields)
    return groups.get("space", {}).get("batch_size")


def reward_legacy(owner: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The reward's 0.2 keywords left in ``kwargs``, by their 1.0 names (``reference_responses`` -> ``cluster_texts``).

    Raises:
        TypeError: an argument that is neither a 1.0 nor a 0.2 one.
    """
    renamed, _ = take_deprecated(owner, kwargs, {"reference_responses": "cluster_texts"}, stacklevel=5)
    return renamed
