"""Diversity metrics as pure functions (no Lightning) and DDP-exact torchmetrics states."""

from typing import TYPE_CHECKING, Any

from lightning_div.metrics.group import (
    collapsed_share,
    group_classes,
    group_distinct_n,
    group_diversity_scores,
    group_semantic_entropy,
)
from lightning_div.metrics.lexical import (
    DEFAULT_LEXICAL,
    LEXICAL_NAMES,
    averaged_distinct,
    check_lexical_names,
    check_lexical_options,
    count_vocab,
    distinct_n,
    distinct_n_utterance,
    empty_share,
    expectation_adjusted_distinct,
    lexical_scores,
    ngram_entropy,
)
from lightning_div.metrics.nli import nli_diversity
from lightning_div.metrics.ruq import ruq_margin, ruq_score
from lightning_div.metrics.semantic import cluster_histogram, cluster_js_divergence, semantic_entropy, top_cluster_share
from lightning_div.metrics.sets import NegativeMeanCosine

if TYPE_CHECKING:
    from lightning_div.metrics.states import (
        RUQ,
        AveragedDistinct,
        DistinctN,
        ExpectationAdjustedDistinct,
        NGramEntropy,
        SemanticEntropy,
    )

# The torchmetrics states import torch and torchmetrics (most of a fresh interpreter's 9 s to import this
# package's clusters, datamodules or DRESS weights): imported when one is asked for, as the pure functions
# above need numpy only.
_STATES = ("RUQ", "AveragedDistinct", "DistinctN", "ExpectationAdjustedDistinct", "NGramEntropy", "SemanticEntropy")


def __getattr__(name: str) -> Any:
    if name in _STATES:
        from lightning_div.metrics import states

        return getattr(states, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "distinct_n",
    "distinct_n_utterance",
    "empty_share",
    "averaged_distinct",
    "ngram_entropy",
    "expectation_adjusted_distinct",
    "count_vocab",
    "lexical_scores",
    "check_lexical_names",
    "check_lexical_options",
    "DEFAULT_LEXICAL",
    "LEXICAL_NAMES",
    "semantic_entropy",
    "cluster_histogram",
    "cluster_js_divergence",
    "top_cluster_share",
    "group_semantic_entropy",
    "group_classes",
    "collapsed_share",
    "group_distinct_n",
    "group_diversity_scores",
    "ruq_score",
    "ruq_margin",
    "nli_diversity",
    "NegativeMeanCosine",
    "DistinctN",
    "AveragedDistinct",
    "NGramEntropy",
    "ExpectationAdjustedDistinct",
    "SemanticEntropy",
    "RUQ",
]
