"""Figures of the semantic clusters: shares per cluster, collapse over epochs, what DRESS pushes away from.

Pure matplotlib: each function takes numbers and labels and returns a figure; the
callbacks decide when to draw and where to log (:mod:`lightning_div._internal.tracking`).
Clusters are named by their cards (``"7: lol, haha, lmao"``), so a reader sees which
semantic mode a bar or a row is, not only its id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lightning_div._internal.tracking import new_figure


def _short(label: str, width: int = 38) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"


def share_histogram(generated: Sequence[float], gold: Sequence[float], labels: Sequence[str], title: str) -> Any:
    """Horizontal bars: each cluster's share of the generated and of the gold responses, labelled by card."""
    k = len(labels)
    fig, ax = new_figure(figsize=(7.5, max(3.0, 0.32 * k + 1.2)))
    y = np.arange(k)
    ax.barh(y - 0.2, gold, height=0.4, label="gold", color="#9aa5b1")
    ax.barh(y + 0.2, generated, height=0.4, label="generated", color="#d9534f")
    ax.set_yticks(y, [_short(s) for s in labels], fontsize=8)
    ax.invert_yaxis()  # cluster 0 at the top, like the cards table
    ax.set_xlabel("share of responses")
    ax.set_title(title)
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


def collapse_heatmap(
    epochs: Sequence[int],
    shares: np.ndarray,
    gold: Sequence[float],
    labels: Sequence[str],
    title: str = "Generated share per semantic cluster",
    unit: str = "epoch",
) -> Any:
    """Clusters (rows, labelled by card) x epochs (columns) of generated shares, with the gold share first.

    ``shares`` is [epochs, clusters]; ``unit`` names the columns (a Hugging Face Trainer
    measures at steps). A model collapsing onto a mode shows as one row
    turning dark while the others fade; the gold column is what a diverse model matches.
    """
    shares = np.asarray(shares, dtype=np.float64).reshape(len(epochs), len(labels))
    grid = np.column_stack([np.asarray(gold, dtype=np.float64), shares.T])  # [clusters, 1 + epochs]
    k, cols = grid.shape
    fig, ax = new_figure(figsize=(max(4.5, 2.6 + 0.55 * cols), max(3.0, 0.32 * k + 1.2)))
    image = ax.imshow(grid, aspect="auto", cmap="magma_r", vmin=0.0, vmax=max(float(grid.max()), 1e-9))
    ax.set_xticks(np.arange(cols), ["gold"] + [str(e) for e in epochs], fontsize=8)
    ax.set_yticks(np.arange(k), [_short(s) for s in labels], fontsize=8)
    ax.axvline(0.5, color="white", linewidth=2)
    ax.set_xlabel(unit)
    if cols * k <= 400:  # the numbers stay readable
        for (i, j), v in np.ndenumerate(grid):
            ax.text(
                j,
                i,
                f"{100 * v:.0f}",
                ha="center",
                va="center",
                fontsize=6,
                color="white" if v > 0.6 * grid.max() else "black",
            )
    fig.colorbar(image, ax=ax, label="share of responses")
    ax.set_title(title)
    fig.tight_layout()
    return fig


def dress_round(
    gold_weight: Sequence[float] | np.ndarray,
    negatives: Sequence[int] | np.ndarray,
    heads: Sequence[int],
    labels: Sequence[str],
    title: str,
) -> Any:
    """Two panels per cluster: the DRESS gold weight, and the negatives each head cluster gave."""
    k = len(labels)
    head_set = {int(h) for h in heads}
    colours = ["#d9534f" if j in head_set else "#5b8fd1" for j in range(k)]
    fig, (left, right) = new_figure(1, 2, sharey=True, figsize=(10, max(3.0, 0.32 * k + 1.2)))
    y = np.arange(k)
    left.barh(y, gold_weight, color=colours)
    left.set_yticks(y, [_short(s) for s in labels], fontsize=8)
    left.invert_yaxis()
    left.set_xlabel("gold weight (1 - p_train)^lambda")
    left.set_title("weight of the gold responses")
    right.barh(y, negatives, color=colours)
    right.set_xlabel("generated responses trained away from")
    right.set_title("negatives (red: head clusters)")
    fig.suptitle(title)
    fig.tight_layout()
    return fig
