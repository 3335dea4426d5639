"""What the callbacks show of the semantic clusters: cards, collapse over epochs, DRESS rounds.

Called by SemanticDiversityMonitor and DRESSReweighting on rank 0 only, after every
number has been computed on all ranks: nothing here calls a collective (no
``trainer.log_dir``, no gathering), so rank 0 cannot wait here for ranks that are not.
Figures come from :mod:`lightning_div.semantic.plots`, logging from :mod:`lightning_div._internal.tracking`.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lightning_div._internal.tracking import log_figure, log_table, write_atomic
from lightning_div.semantic.cards import CARD_COLUMNS, cluster_labels

CARDS_FILE = "cluster_cards.csv"
SHARES_FILE = "cluster_shares.csv"
DRESS_FILE = "dress_clusters.csv"
_LOGGED_ATTR = "_lightning_div_cards_logged"


def log_cards_once(trainer: Any, clusters: Any, out_dir: Path) -> Path | None:
    """Log the clusters' cards as the table ``clusters/cards`` (and ``cluster_cards.csv``) once per Trainer.

    The monitor and DRESS share the clusters; whichever reaches this first logs them.
    """
    cards = getattr(clusters, "cards", None)
    if not cards or getattr(trainer, _LOGGED_ATTR, False):
        return None
    path = log_table(trainer, "clusters/cards", CARD_COLUMNS, [c.row() for c in cards], out_dir, filename=CARDS_FILE)
    try:
        setattr(trainer, _LOGGED_ATTR, True)
    except AttributeError:  # a Trainer stand-in with __slots__: logging twice is harmless
        pass
    return path


def labels_of(clusters: Any) -> list[str]:
    return cluster_labels(getattr(clusters, "cards", None), clusters.num_clusters)


def log_collapse(
    trainer: Any,
    clusters: Any,
    history: Sequence[tuple[int, Sequence[float]]],
    gold_share: Sequence[float],
    out_dir: Path,
    heatmap: bool = True,
    log_key: Callable[[str], str] = str,
) -> None:
    """This epoch's labelled share histogram (``val/cluster_histogram``); with ``heatmap``, the epochs x
    clusters heatmap of generated shares (``val/cluster_shares``) and ``cluster_shares.csv`` (every
    measured epoch). ``log_key`` names the keys as the calling callback logs them (its ``name`` prefix)."""
    from lightning_div.semantic.plots import collapse_heatmap, share_histogram

    labels = labels_of(clusters)
    epoch, generated = history[-1]
    log_figure(
        trainer,
        log_key("val/cluster_histogram"),
        share_histogram(generated, gold_share, labels, f"Semantic clusters, epoch {epoch}"),
        out_dir,
    )
    if not heatmap:
        return
    epochs = [e for e, _ in history]
    shares = np.array([s for _, s in history], dtype=np.float64)
    log_figure(trainer, log_key("val/cluster_shares"), collapse_heatmap(epochs, shares, gold_share, labels), out_dir)

    def write(f: Any) -> None:
        w = csv.writer(f)
        w.writerow(["epoch", "cluster", "label", "generated_share", "gold_share"])
        for e, s in history:
            w.writerows(
                [e, j, labels[j], round(float(s[j]), 6), round(float(gold_share[j]), 6)] for j in range(len(labels))
            )

    try:
        write_atomic(Path(out_dir) / SHARES_FILE, write)
    except OSError:  # the figures above already warned about this directory; training goes on
        pass


def dress_cluster_view(
    clusters: Any, weights: np.ndarray | None, lam: float, heads: Sequence[int], negative_clusters: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """(gold weight per cluster, negatives per cluster) of a DRESS round.

    The gold weight of cluster c is DRESS's (1 - p_train(c))^lam with p_train the cards' gold
    shares (the cards are computed from the same gold training responses), rescaled like
    the weights in use (``normalize=True`` divides them by their mean).
    """
    k = clusters.num_clusters
    cards = getattr(clusters, "cards", None)
    p = np.array([c.share for c in cards], dtype=np.float64) if cards else np.full(k, np.nan)
    per_cluster = (1.0 - p) ** lam
    raw_mean = float((p * per_cluster).sum())  # the mean raw weight over the gold responses
    if weights is not None and weights.size and raw_mean > 0:
        per_cluster = per_cluster * (float(np.mean(weights)) / raw_mean)
    negatives = np.bincount(np.asarray(negative_clusters, dtype=np.int64), minlength=k)[:k]
    return per_cluster, negatives


def log_dress_round(trainer: Any, callback: Any, out_dir: Path) -> None:
    """DRESS this round: the figure ``dress/clusters`` (gold weight and negatives per cluster, head
    clusters in red, the effective sample size in the title) and the table ``dress/head_clusters``
    (each head cluster by its card, with its negatives) for a DRESSReweighting ``callback``."""
    from lightning_div.dress.weights import effective_sample_size
    from lightning_div.semantic.plots import dress_round

    clusters = getattr(callback.spec, "_clusters", None)
    if clusters is None or callback.weights is None:
        return
    log_cards_once(trainer, clusters, out_dir)  # when no SemanticDiversityMonitor logged them
    heads = [int(h) for h in callback.heads]
    gold_weight, negatives = dress_cluster_view(
        clusters, callback.weights, callback.lam, heads, getattr(callback, "negative_clusters", [])
    )
    all_w = np.concatenate([callback.weights, callback.negative_weights])
    labels = labels_of(clusters)
    epoch = int(getattr(trainer, "current_epoch", 0))
    title = (
        f"DRESS, epoch {epoch} (lambda={callback.lam:g}, "
        f"effective sample size {effective_sample_size(all_w):.0f} of {all_w.size})"
    )
    log_figure(
        trainer, callback.log_key("dress/clusters"), dress_round(gold_weight, negatives, heads, labels, title), out_dir
    )
    cards = getattr(clusters, "cards", None) or []
    rows = [
        [
            j,
            labels[j],
            int(negatives[j]),
            round(float(gold_weight[j]), 6),
            " | ".join(cards[j].examples[:3]) if j < len(cards) else "",
        ]
        for j in heads
    ]
    log_table(
        trainer,
        callback.log_key("dress/head_clusters"),
        ["cluster", "label", "negatives", "gold weight", "nearest gold"],
        rows,
        out_dir,
    )
