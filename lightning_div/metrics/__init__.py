"""Diversity metrics as pure functions (no Lightning); 0.2's torchmetrics states are deprecated."""

from typing import Any

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

# 0.2's torchmetrics states (DistinctN, SemanticEntropy, RUQ, ...) are deprecated: no measure used them
# (docs/measure.md). Each name still works for one release, with a warning; imported when asked for, as
# they import torch and torchmetrics and the pure functions above need numpy only.


def __getattr__(name: str) -> Any:
    from lightning_div.metrics.states import deprecated_state

    return deprecated_state(__name__, name)


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
]
