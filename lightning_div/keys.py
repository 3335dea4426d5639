"""Names defined once: the keys lightning-div logs, the batch fields DRESS adds, the negative losses, the default encoder.

The callbacks and :class:`~lightning_div.model.dialogue_lm.DialogueLM` log under these keys,
the command line prints :data:`SUMMARY_KEYS` after a run and the report
(:mod:`lightning_div.report`) heads its page with :data:`HEADLINE_KEYS`: a key renamed here is
renamed everywhere. A callback with a ``name`` logs ``<name>/<key>``.

Only the standard library: the command line and the report import this without torch or Lightning.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

__all__ = [
    "check_name",
    "CLUSTER_CARDS_FILE",
    "CLUSTER_JS",
    "CLUSTER_SHARES_FILE",
    "DEFAULT_ENCODER",
    "DEFAULT_LEXICAL",
    "DRESS_EFFECTIVE_SAMPLE_SIZE",
    "DRESS_HEAD_CLUSTERS",
    "DRESS_HEAD_SHARE",
    "DRESS_NEGATIVES",
    "DRESS_WEIGHT_MAX",
    "DRESS_WEIGHT_MEAN",
    "DRESS_WEIGHT_MIN",
    "EMPTY_SHARE",
    "HEADLINE_KEYS",
    "LEXICAL_NAMES",
    "LEXICAL_PATTERN",
    "MOSTLY_EMPTY",
    "NEGATIVE",
    "NEGATIVE_LOSS",
    "NEGATIVE_LOSSES",
    "NLI_DIV_BASELINE",
    "NegativeLoss",
    "RUQ_ALERT",
    "SAMPLE_WEIGHT",
    "SEM_ENT",
    "SEM_ENT_GOLD",
    "SUMMARY_KEYS",
    "TEST_LOSS",
    "TOP_CLUSTER_SHARE",
    "TRAIN_LOSS",
    "TRAIN_NEGATIVE_LOSS",
    "VAL_LOSS",
    "train_key",
    "val_key",
]

#: The response encoder of Sem-Ent and DRESS when none is named (the Sem-Ent paper's; ``"minilm"`` works offline).
DEFAULT_ENCODER = "microsoft/DialoGPT-large"

#: How a DRESS negative (weight < 0) is trained: weight x NLL (the paper) or |weight| x unlikelihood (bounded).
NegativeLoss = Literal["nll", "unlikelihood"]
NEGATIVE_LOSSES: tuple[str, ...] = get_args(NegativeLoss)

# -- the fields a DRESS training batch carries (DialogueDataModule's collate adds them) ----------------------
#: Per example: its weight in the loss (float).
SAMPLE_WEIGHT = "sample_weight"
#: Per example: True for a DRESS negative (a generated response trained against), False for a gold one.
NEGATIVE = "negative"
#: Per batch: how the negatives are trained, one of :data:`NEGATIVE_LOSSES`.
NEGATIVE_LOSS = "negative_loss"

# -- losses: gold and negative batches on separate curves ------------------------------------------------------
TRAIN_LOSS = "train/loss"
TRAIN_NEGATIVE_LOSS = "train/negative_loss"
VAL_LOSS = "val/loss"
TEST_LOSS = "test/loss"


def check_name(name: object) -> str | None:
    """A callback's ``name`` (it goes into every key it logs): None, or a non-empty string without
    surrounding spaces, without ``/`` (the keys' separator) and without control characters (it also names
    the run's files, such as the settings record, where a null byte cannot go). The one rule of every
    front end: Lightning, Hugging Face and TRL.

    Raises:
        ValueError: any other value.
    """
    if name is None:
        return None
    if not isinstance(name, str) or not name.strip() or name != name.strip() or "/" in name or not name.isprintable():
        raise ValueError(
            "name must be None or a non-empty string without surrounding spaces and without '/' or control "
            f"characters (it prefixes the logged keys and names the run's files), got {name!r}"
        )
    return name


def val_key(metric: str) -> str:
    """The key of a metric measured on validation data: ``val/<metric>``."""
    return f"val/{metric}"


def train_key(metric: str) -> str:
    """The key of a metric measured on training data: ``train/<metric>``."""
    return f"train/{metric}"


# -- SemanticDiversityMonitor (the lexical metrics log as val_key(name): val/distinct_1, val/ead, ...) ---------
SEM_ENT = val_key("sem_ent")
SEM_ENT_GOLD = val_key("sem_ent_gold")
CLUSTER_JS = val_key("cluster_js")
TOP_CLUSTER_SHARE = val_key("top_cluster_share")

# -- RUQMonitor (train_key / val_key of "ruq" and "ruq_margin") and NLIDiversityMonitor -------------------------
RUQ_ALERT = val_key("ruq_alert")
NLI_DIV_BASELINE = val_key("nli_div_baseline")

# -- DRESSReweighting ---------------------------------------------------------------------------------------
DRESS_HEAD_CLUSTERS = "dress/head_clusters"
DRESS_HEAD_SHARE = "dress/head_share"
DRESS_NEGATIVES = "dress/negatives"
DRESS_WEIGHT_MEAN = "dress/weight_mean"
DRESS_WEIGHT_MIN = "dress/weight_min"
DRESS_WEIGHT_MAX = "dress/weight_max"
DRESS_EFFECTIVE_SAMPLE_SIZE = "dress/effective_sample_size"

# -- the lexical metrics by name (here, not in metrics.lexical: the command line's --help lists them without torch)
#: The lexical metrics the callbacks log unless told otherwise (names as ``lexical_scores`` takes them).
DEFAULT_LEXICAL = ("distinct_1", "distinct_2", "distinct_3", "avg_distinct", "ent_4", "ead")
#: What a lexical metric name looks like (the one definition: the meta-evaluation's names use it too).
LEXICAL_PATTERN = re.compile(r"^(distinct_(\d+)(_utt)?|ent_(\d+)|avg_distinct|ead)$")
#: The lexical metric names, as error messages and ``--help`` list them.
LEXICAL_NAMES = "distinct_<n> (corpus level), distinct_<n>_utt (utterance level), ent_<n>, avg_distinct, ead"

#: The share of empty (or special-token-only) replies, logged beside the lexical metrics: ``val/empty_share``.
EMPTY_SHARE = "empty_share"
#: From this share of empty replies on, every front end warns and the summary marks the metrics of that text.
MOSTLY_EMPTY = 0.5

# -- files written once per run beside the figures (``<name>_<file>`` for a callback with a ``name``) -----------
CLUSTER_CARDS_FILE = "cluster_cards.csv"
CLUSTER_SHARES_FILE = "cluster_shares.csv"

#: What ``lightning-div fit`` prints after a run (those that were logged), in this order.
SUMMARY_KEYS: tuple[str, ...] = (
    VAL_LOSS,
    SEM_ENT,
    SEM_ENT_GOLD,
    val_key(EMPTY_SHARE),
    val_key("distinct_1"),
    val_key("distinct_2"),
    val_key("distinct_3"),
    val_key("avg_distinct"),
    val_key("ent_4"),
    val_key("ead"),
    CLUSTER_JS,
    TOP_CLUSTER_SHARE,
    train_key("ruq"),
    val_key("ruq"),
    train_key("ruq_margin"),
    val_key("ruq_margin"),
    RUQ_ALERT,
    NLI_DIV_BASELINE,
    DRESS_HEAD_CLUSTERS,
    DRESS_HEAD_SHARE,
    DRESS_WEIGHT_MEAN,
    DRESS_EFFECTIVE_SAMPLE_SIZE,
)

#: The summary table at the top of a run's report (those that were logged), in this order.
HEADLINE_KEYS: tuple[str, ...] = (
    VAL_LOSS,
    SEM_ENT,
    SEM_ENT_GOLD,
    CLUSTER_JS,
    TOP_CLUSTER_SHARE,
    val_key(EMPTY_SHARE),
    val_key("distinct_1"),
    val_key("distinct_2"),
    val_key("avg_distinct"),
    val_key("ent_4"),
    val_key("ead"),
    train_key("ruq"),
    val_key("ruq"),
    NLI_DIV_BASELINE,
    DRESS_HEAD_CLUSTERS,
    DRESS_EFFECTIVE_SAMPLE_SIZE,
)
