"""Meta-evaluation of diversity metrics: Tevet & Berant's decTest and conTest.

Does a metric track diversity? decTest correlates it (Spearman's ρ, bootstrap CI) with a
decoding parameter such as the temperature; conTest asks how well one threshold on it
separates sets of high and low content diversity (OCA). Any ``list[str] -> float`` works,
our metrics come by name (:func:`make_metrics`), and the paper's released CSV files,
our JSONL or a freshly generated decTest (:func:`build_dec_test`) supply the sets.
"""

from lightning_div.meta_eval.data import (
    DEC_TEST_SAMPLING,
    MetaEvalData,
    ResponseSet,
    build_dec_test,
    read_released_csv,
    read_sets,
    read_sets_jsonl,
    write_sets_jsonl,
)
from lightning_div.meta_eval.set_metrics import (
    METRIC_NAMES,
    CachedEncoder,
    LexicalMetric,
    NegativeMeanCosine,
    NLIMetric,
    SemEntMetric,
    SentBertMetric,
    SetMetric,
    SimilarityDiversity,
    check_metric_names,
    make_metrics,
    metric_name,
    ngram_cosine_similarity,
    nli_metrics,
    score_sets,
    similarity_to_diversity,
)
from lightning_div.meta_eval.stats import (
    bootstrap_spearman_ci,
    con_test,
    con_test_from_scores,
    dec_test,
    dec_test_from_scores,
    infer_test,
    meta_evaluate,
    optimal_classification_accuracy,
    spearman,
)

__all__ = [
    "dec_test",
    "con_test",
    "dec_test_from_scores",
    "con_test_from_scores",
    "meta_evaluate",
    "infer_test",
    "spearman",
    "bootstrap_spearman_ci",
    "optimal_classification_accuracy",
    "score_sets",
    "SetMetric",
    "NegativeMeanCosine",
    "metric_name",
    "make_metrics",
    "check_metric_names",
    "METRIC_NAMES",
    "LexicalMetric",
    "SimilarityDiversity",
    "similarity_to_diversity",
    "ngram_cosine_similarity",
    "SemEntMetric",
    "SentBertMetric",
    "NLIMetric",
    "nli_metrics",
    "CachedEncoder",
    "ResponseSet",
    "MetaEvalData",
    "read_released_csv",
    "read_sets_jsonl",
    "write_sets_jsonl",
    "read_sets",
    "build_dec_test",
    "DEC_TEST_SAMPLING",
]
