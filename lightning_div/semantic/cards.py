"""Cluster cards: what each semantic cluster holds, in words a person can read.

A card describes one cluster of :class:`~lightning_div.semantic.clusters.SemanticClusters` from
the gold responses it was fitted on: the cluster's share of them, the gold responses
nearest its centroid, and its most distinctive words and 2-grams against the other
clusters. Distinctiveness is the weighted log-odds ratio with an informative Dirichlet
prior (Monroe, Colaresi & Quinn, 2008, "Fightin' Words", eq. 22): for term w and
cluster j against all other clusters,

    delta_w = log((y_jw + a_w) / (n_j + a_0 - y_jw - a_w)) - log((y_rw + a_w) / (n_r + a_0 - y_rw - a_w))
    z_w = delta_w / sqrt(1 / (y_jw + a_w) + 1 / (y_rw + a_w))

with y the term counts of the cluster (j) and of the rest (r), n their totals, and the
prior a_w = a_0 * (corpus count of w) / (corpus total). Unlike raw frequency it does not
rank "you" or "the" first in every cluster; unlike tf-idf over k "documents" it does not
favour terms seen once. The counts come from scikit-learn's ``CountVectorizer``.

On small data the log-odds still lets function words through ("0: the, i, it"): a cluster of
short replies uses "i" and "it" more than the rest. So English stopwords (scikit-learn's list,
``ENGLISH_STOP_WORDS``) are left out of the distinctive words by default, and 2-grams made of
stopwords only ("it was"); a 2-gram with one content word ("the pizza") stays. They are still
counted, so the other terms' scores do not change. ``stop_words=None`` keeps them all.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CARD_COLUMNS = ["cluster", "share", "responses", "top words", "top 2-grams", "nearest gold responses"]
# words keep their apostrophes ("don't", "i'm"), and one-letter words count ("i", "u")
TOKEN_PATTERN = r"(?u)\b\w[\w']*\b"
PRIOR_STRENGTH = 10.0  # a_0: how many pseudo-counts the corpus-frequency prior is worth


def stop_word_set(stop_words: str | Collection[str] | None) -> frozenset[str]:
    """The words ``stop_words`` names: ``"english"`` (scikit-learn's list), your own words, or None (none)."""
    if stop_words is None:
        return frozenset()
    if isinstance(stop_words, str):
        if stop_words != "english":
            raise ValueError(f"stop_words must be 'english', a collection of words or None, got {stop_words!r}")
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

        return frozenset(ENGLISH_STOP_WORDS)
    return frozenset(w.lower() for w in stop_words)


@dataclass
class ClusterCard:
    """One cluster described by its gold responses.

    Attributes:
        cluster: the cluster id.
        share: fraction of the gold responses assigned to it.
        size: number of gold responses assigned to it.
        words: most distinctive words, most distinctive first.
        bigrams: most distinctive 2-grams, most distinctive first.
        examples: distinct gold responses nearest the centroid, nearest first.
    """

    cluster: int
    share: float
    size: int
    words: list[str] = field(default_factory=list)
    bigrams: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """A short name for plots: ``"7: lol, haha, lmao"`` (the id alone for an empty cluster)."""
        return f"{self.cluster}: {', '.join(self.words[:3])}" if self.words else str(self.cluster)

    def row(self) -> list[Any]:
        """The card as a table row in the order of :data:`CARD_COLUMNS`."""
        return [
            self.cluster,
            round(self.share, 4),
            self.size,
            ", ".join(self.words),
            ", ".join(self.bigrams),
            " | ".join(self.examples),
        ]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterCard:
        return cls(
            cluster=int(data["cluster"]),
            share=float(data["share"]),
            size=int(data["size"]),
            words=list(data.get("words", [])),
            bigrams=list(data.get("bigrams", [])),
            examples=list(data.get("examples", [])),
        )


def distinctive_terms(
    texts: Sequence[str],
    ids: np.ndarray,
    num_clusters: int,
    ngram: int,
    top_n: int,
    min_count: int = 2,
    stop_words: Collection[str] = frozenset(),
) -> list[list[str]]:
    """The ``top_n`` most distinctive ``ngram``-grams of each cluster (weighted log-odds, see the module doc).

    A term must occur at least ``min_count`` times in the cluster and have a positive
    z-score (be over-represented there); clusters with fewer such terms get fewer. A term
    whose every word is in ``stop_words`` (lower case) is never listed; it is still counted.
    """
    from scipy import sparse
    from sklearn.feature_extraction.text import CountVectorizer

    # min_df=2: a term in a single response can never be distinctive, and the [clusters, terms]
    # count matrix below stays small on large corpora (bigrams seen once are most of them)
    vectorizer = CountVectorizer(ngram_range=(ngram, ngram), token_pattern=TOKEN_PATTERN, lowercase=True, min_df=2)
    try:
        counts = vectorizer.fit_transform(texts)  # [texts, terms]
    except ValueError:  # no ngram-gram occurs in two texts ("empty vocabulary" / "no terms remain")
        return [[] for _ in range(num_clusters)]
    terms = vectorizer.get_feature_names_out()
    membership = sparse.csr_matrix((np.ones(len(ids)), (ids, np.arange(len(ids)))), shape=(num_clusters, len(ids)))
    y = np.asarray((membership @ counts).todense(), dtype=np.float64)  # [clusters, terms]
    corpus = y.sum(axis=0)
    prior = PRIOR_STRENGTH * corpus / corpus.sum()
    n = y.sum(axis=1, keepdims=True)
    rest, n_rest = corpus[None, :] - y, n.sum() - n
    # a term that is every counted term (one word alone occurs twice, on small data) has no other terms to
    # be set against: its odds are x / 0 in the cluster and in the rest alike, its log-odds inf - inf.
    # It tells no cluster apart: z = 0, quietly (numpy would warn of the division and the NaN).
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = np.log((y + prior) / (n + PRIOR_STRENGTH - y - prior)) - np.log(
            (rest + prior) / (n_rest + PRIOR_STRENGTH - rest - prior)
        )
        z = delta / np.sqrt(1.0 / (y + prior) + 1.0 / (rest + prior))
    z = np.where(np.isfinite(z), z, 0.0)
    stop = frozenset(stop_words)
    listed = [not stop.issuperset(str(term).split(" ")) for term in terms]
    out = []
    for j in range(num_clusters):
        order = np.lexsort((terms, -z[j]))  # ties broken alphabetically: the same cards on every machine
        out.append([str(terms[t]) for t in order if listed[t] and y[j, t] >= min_count and z[j, t] > 0][:top_n])
    return out


def nearest_examples(
    texts: Sequence[str], ids: np.ndarray, distances: np.ndarray, num_clusters: int, num_examples: int
) -> list[list[str]]:
    """Per cluster, the ``num_examples`` distinct texts nearest its centroid (ties by text)."""
    out: list[list[str]] = [[] for _ in range(num_clusters)]
    for i in np.lexsort((np.asarray(texts, dtype=object).astype(str), distances)):
        chosen = out[int(ids[i])]
        if len(chosen) < num_examples and texts[i].strip() and texts[i] not in chosen:
            chosen.append(texts[i])
    return out


def cluster_cards(
    texts: Sequence[str],
    ids: Sequence[int] | np.ndarray,
    num_clusters: int,
    distances: Sequence[float] | np.ndarray | None = None,
    top_n: int = 8,
    num_examples: int = 5,
    stop_words: str | Collection[str] | None = "english",
) -> list[ClusterCard]:
    """Describe each of ``num_clusters`` clusters from the texts assigned to them.

    Args:
        texts: the gold responses the clusters were fitted on (or any texts assigned to them).
        ids: the cluster id of each text.
        num_clusters: k (clusters no text fell into get an empty card with share 0).
        distances: each text's distance to its cluster's centroid (nearest examples
            first); None keeps the texts' order.
        top_n: words and 2-grams per card.
        num_examples: example responses per card.
        stop_words: words never listed as distinctive (nor 2-grams of them only):
            ``"english"`` (scikit-learn's list), a collection of your own, or None to list
            every word.
    """
    texts = [str(t) for t in texts]
    ids = np.asarray(ids, dtype=np.int64)
    if ids.shape != (len(texts),):
        raise ValueError(f"cluster_cards: {len(texts)} texts but {ids.shape} cluster ids")
    if ids.size and (ids.min() < 0 or ids.max() >= num_clusters):
        raise ValueError(f"cluster_cards: cluster ids must be in [0, {num_clusters}), got {ids.min()}..{ids.max()}")
    dist = np.arange(len(texts), dtype=np.float64) if distances is None else np.asarray(distances, dtype=np.float64)
    if dist.shape != (len(texts),):
        raise ValueError(f"cluster_cards: {len(texts)} texts but {dist.shape} distances")
    sizes = np.bincount(ids, minlength=num_clusters)
    stop = stop_word_set(stop_words)
    words = distinctive_terms(texts, ids, num_clusters, 1, top_n, stop_words=stop)
    bigrams = distinctive_terms(texts, ids, num_clusters, 2, top_n, stop_words=stop)
    examples = nearest_examples(texts, ids, dist, num_clusters, num_examples)
    total = max(len(texts), 1)
    return [
        ClusterCard(
            cluster=j,
            share=float(sizes[j] / total),
            size=int(sizes[j]),
            words=words[j],
            bigrams=bigrams[j],
            examples=examples[j],
        )
        for j in range(num_clusters)
    ]


def describe_clusters(clusters: Any, texts: Sequence[str], embeddings: Any, **kwargs: Any) -> list[ClusterCard]:
    """Cards of fitted ``clusters`` from the texts and their embeddings (distances in the PCA space).

    ``kwargs`` go to :func:`cluster_cards` (``top_n``, ``num_examples``, ``stop_words``).
    """
    reduced = clusters.transform(embeddings)
    ids = clusters.assign(embeddings)
    distances = ((reduced - clusters.centroids[ids]) ** 2).sum(axis=1)
    return cluster_cards(texts, ids, clusters.num_clusters, distances, **kwargs)


def cards_from_dicts(data: Sequence[dict[str, Any]] | None) -> list[ClusterCard] | None:
    return None if data is None else [ClusterCard.from_dict(d) for d in data]


def cluster_labels(cards: Sequence[ClusterCard] | None, num_clusters: int) -> list[str]:
    """Axis labels: each cluster's card label, or its id when there are no cards."""
    if not cards:
        return [str(j) for j in range(num_clusters)]
    return [c.label for c in cards]


def write_cards_csv(cards: Sequence[ClusterCard], path: str | os.PathLike) -> Path:
    """Write the cards as CSV (:data:`CARD_COLUMNS`) atomically: a temporary file renamed into place."""
    from lightning_div._internal.io import atomic_write_with
    from lightning_div._internal.tracking import csv_safe

    def write(f: Any) -> None:  # gold text in a spreadsheet: formula-like cells neutralised
        writer = csv.writer(f)
        writer.writerow(CARD_COLUMNS)
        writer.writerows([csv_safe(v) for v in c.row()] for c in cards)

    atomic_write_with(Path(path), write)
    return Path(path)


def format_cards(cards: Sequence[ClusterCard], width: int = 100) -> str:
    """The cards as a plain-text table for a terminal, largest cluster first."""
    lines = []
    for c in sorted(cards, key=lambda c: (-c.share, c.cluster)):
        lines.append(f"cluster {c.cluster:>3}  {100 * c.share:5.1f} %  ({c.size} responses)")
        lines.append(f"  words:   {', '.join(c.words) or '-'}")
        lines.append(f"  2-grams: {', '.join(c.bigrams) or '-'}")
        for e in c.examples:
            lines.append(f"  - {e if len(e) <= width else e[: width - 3] + '...'}")
    return "\n".join(lines)
