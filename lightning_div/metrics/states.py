"""Deprecated in 1.0, removed in the next release: the torchmetrics states of 0.2.

``DistinctN``, ``AveragedDistinct``, ``NGramEntropy``, ``ExpectationAdjustedDistinct``,
``SemanticEntropy`` and ``RUQ`` merged hashed n-gram ids or counts across DDP processes. No measure
and no front end used them: a measure shards its generation and scoring, gathers the results and
computes once, the same on every process (``docs/measure.md``). In a loop of your own, gather the
texts (``torch.distributed.all_gather_object``) and call :mod:`lightning_div.metrics`' functions
(``distinct_n``, ``semantic_entropy``, ``ruq_score``, ...). Each name still works for this release,
with a ``DeprecationWarning``.
"""

from __future__ import annotations

from typing import Any

from lightning_div._internal.deprecation import warn_deprecated

__all__: list[str] = []

#: The deprecated states, and what replaces each.
STATES = {
    "DistinctN": "lightning_div.metrics.distinct_n",
    "AveragedDistinct": "lightning_div.metrics.averaged_distinct",
    "NGramEntropy": "lightning_div.metrics.ngram_entropy",
    "ExpectationAdjustedDistinct": "lightning_div.metrics.expectation_adjusted_distinct",
    "SemanticEntropy": "lightning_div.metrics.semantic_entropy",
    "RUQ": "lightning_div.metrics.ruq_score",
}


def deprecated_state(module: str, name: str) -> Any:
    """A deprecated state class by name, with a ``DeprecationWarning`` naming the function that replaces it.

    Args:
        module: the module asked (``lightning_div.metrics`` or ``lightning_div.metrics.states``), for the messages.
        name: the name asked for.

    Raises:
        AttributeError: ``name`` is not one of the states.
    """
    if name not in STATES:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warn_deprecated(
        f"{module}.{name} (a torchmetrics state)",
        f"{STATES[name]} on what every process gathered (docs/measure.md)",
        stacklevel=4,
    )
    from lightning_div.metrics import _states

    return getattr(_states, name)


def __getattr__(name: str) -> Any:
    return deprecated_state(__name__, name)
