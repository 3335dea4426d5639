"""What the front ends show of the semantic clusters: cards, collapse over epochs, DRESS rounds.

Called by SemanticDiversityMonitor, DRESSReweighting and the Hugging Face
TrainerDiversityMonitor on rank 0 only, after every number has been computed on all ranks:
nothing here calls a collective (no ``trainer.log_dir``, no gathering), so rank 0 cannot wait
here for ranks that are not. Everything goes through the front end's
:class:`~lightning_div.measure.reporting.Reporter`; nothing here imports Lightning or knows a trainer.
Figures come from :mod:`lightning_div.semantic.plots`, logging from :mod:`lightning_div._internal.tracking`.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lightning_div._internal.io import atomic_write_with
from lightning_div._internal.tracking import _safe_name
from lightning_div.dress.state import DressState
from lightning_div.keys import CLUSTER_CARDS_FILE, CLUSTER_SHARES_FILE
from lightning_div.measure.reporting import Reporter
from lightning_div.semantic.cards import CARD_COLUMNS, cluster_labels


def artifact_file(filename: str, log_key: Callable[[str], str] = str) -> str:
    """A once-per-run file as the calling callback names it: ``<name>_<filename>`` for a callback with a
    ``name`` (as its keys are ``<name>/...``), ``filename`` itself without one. So two monitors with
    ``name="a"`` and ``name="b"`` write ``a_cluster_cards.csv`` and ``b_cluster_cards.csv``."""
    return _safe_name(log_key(filename))


def log_cards_once(reporter: Reporter, clusters: Any, log_key: Callable[[str], str] = str) -> Path | None:
    """Log the clusters' cards as the table ``clusters/cards`` (and ``cluster_cards.csv``) once per run and key.

    The key and the file carry the calling callback's name (``log_key``): ``<name>/clusters/cards``
    and ``<name>_cluster_cards.csv``. Whether they were logged is the reporter's run memory
    (:meth:`~lightning_div.measure.reporting.Reporter.once`, keyed by the clusters' hash): other
    clusters under a key already logged are said in a warning (give the callbacks names), not
    written over it.
    """
    cards = getattr(clusters, "cards", None)
    if not cards:
        return None
    key = log_key("clusters/cards")
    if not reporter.once(key, str(clusters.config_hash)):
        return None
    return reporter.table(
        key, CARD_COLUMNS, [c.row() for c in cards], filename=artifact_file(CLUSTER_CARDS_FILE, log_key)
    )


def cluster_shares(clusters: Any, ids: Sequence[int] | np.ndarray) -> list[float]:
    """Each cluster's share of the responses with cluster ids ``ids`` (all 0 for no response)."""
    return (clusters.histogram(ids) / max(len(ids), 1)).tolist()


SAMPLE_COLUMNS = ("context (last turn)", "generated", "cluster", "gold", "gold cluster")


def log_samples_table(
    reporter: Reporter,
    key: str,
    sample: Sequence[Any],
    responses: Sequence[str],
    ids: Sequence[int] | np.ndarray,
    gold_ids: Sequence[int] | np.ndarray,
    n: int,
) -> Path | None:
    """The first ``n`` generated responses beside their contexts' gold ones, with both clusters, as table ``key``."""
    rows = [
        [p.context[-1] if p.context else "", r, int(c), p.response, int(g)]
        for p, r, c, g in list(zip(sample, responses, ids, gold_ids))[:n]
    ]
    return reporter.table(key, SAMPLE_COLUMNS, rows)


def labels_of(clusters: Any) -> list[str]:
    return cluster_labels(getattr(clusters, "cards", None), clusters.num_clusters)


def log_collapse(
    reporter: Reporter,
    clusters: Any,
    history: Sequence[tuple[int, Sequence[float]]],
    gold_share: Sequence[float],
    heatmap: bool = True,
    log_key: Callable[[str], str] = str,
    unit: str = "epoch",
) -> None:
    """This epoch's labelled share histogram (``val/cluster_histogram``); with ``heatmap``, the epochs x
    clusters heatmap of generated shares (``val/cluster_shares``) and ``cluster_shares.csv`` (every
    measured epoch). ``log_key`` names the keys and the file as the calling callback logs them (its
    ``name`` prefix: ``<name>/val/...``, ``<name>_cluster_shares.csv``). ``unit`` is what ``history``
    counts: ``"epoch"`` (Lightning) or ``"step"`` (a Hugging Face Trainer)."""
    from lightning_div.semantic.plots import collapse_heatmap, share_histogram

    labels = labels_of(clusters)
    epoch, generated = history[-1]
    reporter.figure(
        log_key("val/cluster_histogram"),
        share_histogram(generated, gold_share, labels, f"Semantic clusters, {unit} {epoch}"),
    )
    if not heatmap:
        return
    epochs = [e for e, _ in history]
    shares = np.array([s for _, s in history], dtype=np.float64)
    reporter.figure(log_key("val/cluster_shares"), collapse_heatmap(epochs, shares, gold_share, labels, unit=unit))

    def write(f: Any) -> None:
        w = csv.writer(f)
        w.writerow([unit, "cluster", "label", "generated_share", "gold_share"])
        for e, s in history:
            w.writerows(
                [e, j, labels[j], round(float(s[j]), 6), round(float(gold_share[j]), 6)] for j in range(len(labels))
            )

    try:
        atomic_write_with(Path(reporter.out_dir) / artifact_file(CLUSTER_SHARES_FILE, log_key), write)
    except OSError:  # the figures above already warned about this directory; training goes on
        pass


def dress_cluster_view(
    clusters: Any,
    weights: np.ndarray | None,
    lam: float,
    heads: Sequence[int],
    negative_clusters: Sequence[int] | np.ndarray,
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


def log_dress_round(
    reporter: Reporter,
    state: DressState,
    clusters: Any,
    lam: float,
    epoch: int,
    log_key: Callable[[str], str] = str,
    cards: bool = True,
) -> None:
    """DRESS this round, from its :class:`~lightning_div.dress.state.DressState`: the figure ``dress/clusters``
    (gold weight and negatives per cluster, head clusters in red, the effective sample size in the title)
    and the table ``dress/head_clusters`` (each head cluster by its card, with its negatives).

    Args:
        reporter: the front end's reporter (its trackers get the figure and the table).
        state: what DRESS decided this round.
        clusters: the clusters the weights and negatives were computed in.
        lam: DRESS's lambda (the gold weight per cluster is drawn from it).
        epoch: the round's epoch, in the title.
        log_key: the calling callback's key naming (its ``name`` prefix).
        cards: log the cluster cards too (once), when no monitor of the same name logs them.
    """
    from lightning_div.dress.weights import effective_sample_size
    from lightning_div.semantic.plots import dress_round

    if state.weights is None:
        return
    if cards:
        log_cards_once(reporter, clusters, log_key)
    heads = [int(h) for h in state.heads]
    gold_weight, negatives = dress_cluster_view(clusters, state.weights, lam, heads, state.trained_negative_clusters())
    all_w = state.all_weights()
    labels = labels_of(clusters)
    title = f"DRESS, epoch {epoch} (lambda={lam:g}, effective sample size {effective_sample_size(all_w):.0f} of {all_w.size})"
    reporter.figure(log_key("dress/clusters"), dress_round(gold_weight, negatives, heads, labels, title))
    described = getattr(clusters, "cards", None) or []
    rows = [
        [
            j,
            labels[j],
            int(negatives[j]),
            round(float(gold_weight[j]), 6),
            " | ".join(described[j].examples[:3]) if j < len(described) else "",
        ]
        for j in heads
    ]
    reporter.table(
        log_key("dress/head_clusters"), ["cluster", "label", "negatives", "gold weight", "nearest gold"], rows
    )
