"""SemanticClusters: the persistent k-means partition of response embeddings behind Sem-Ent and DRESS.

Pipeline (the Sem-Ent authors' k-means, which is MAUVE's ``cluster_feats``):
L2-normalise -> PCA keeping the fewest components that explain >= ``variance_kept`` of
the variance -> ``faiss.Kmeans(d, k, niter, nredo, seed)`` -> nearest centroid.

Fitting sub-samples like faiss (and so MAUVE and the authors) does by default: when
there are more than ``max_points_per_centroid * k`` points (256 * 20 = 5,120 for the
defaults), the centroids are trained on that many points drawn with ``seed``; every
point is still assigned to its nearest centroid. ``max_points_per_centroid=None``
trains on all points (slower on CPU, same partition quality in our benchmark).

A fitted object is saved with its PCA, centroids and a config (encoder name and weights
fingerprint, k, seed, variance kept, niter, nredo, sampling, data fingerprint), so a resumed or later run
reuses identical clusters; ``load(path, expected=...)`` refuses a file fitted under a
different config and names each differing field. The file itself (its fields, its checks) is
:mod:`lightning_div.semantic.clusters_io`.

This module is the algorithm (``fit`` / ``assign``; ``save`` / ``load`` through the file module). Whether to fit
(a cache file named by content hash, fitted on rank 0 and broadcast) is decided in
:mod:`lightning_div.semantic.cache`; the encoder and clusters a callback measures in are one
:class:`~lightning_div.semantic.space.SemanticSpace`.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from lightning_div._internal.bars import bar_disabled
from lightning_div.metrics import cluster_histogram
from lightning_div.semantic.clusters_io import fingerprint_texts as fingerprint_texts  # its import path of 0.1
from lightning_div.semantic.clusters_io import hash_config, read_clusters_file, write_clusters_file
from lightning_div.semantic.geometry import check_rows, count_distinct, pca, project

log = logging.getLogger(__name__)

# faiss's own advice: fewer than this many points per centroid gives unreliable centroids
MIN_POINTS_PER_CENTROID = 39


class SemanticClusters:
    """k-means clusters of L2-normalised, PCA-reduced response embeddings (fit once, assign many times).

    Args:
        num_clusters: k.
        variance_kept: PCA keeps the fewest components whose explained variance reaches this, in (0, 1].
        niter: faiss k-means iterations.
        nredo: faiss k-means restarts (the best objective is kept).
        seed: faiss k-means seed; seed=27 with the PCA seed 26 reproduces the Sem-Ent
            authors' clusters.
        use_gpu: True, False, or "auto" (faiss GPU when ``faiss.get_num_gpus() > 0``).
        encoder_name: name of the encoder that produced the embeddings (part of the config).
        show_progress: a tqdm bar over the fitting stages.
        max_points_per_centroid: faiss's training sub-sample per centroid (256 as faiss, MAUVE
            and the authors); None trains on every point.
    """

    def __init__(
        self,
        num_clusters: int = 20,
        variance_kept: float = 0.9,
        niter: int = 500,
        nredo: int = 5,
        seed: int = 27,
        use_gpu: bool | str = "auto",
        encoder_name: str | None = None,
        show_progress: bool = True,
        max_points_per_centroid: int | None = 256,
    ) -> None:
        for field, value, low in (
            ("num_clusters", num_clusters, 1),
            ("niter", niter, 1),
            ("nredo", nredo, 1),
            ("seed", seed, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise ValueError(f"{field} must be an integer >= {low}, got {value!r}")
        if isinstance(variance_kept, bool) or not isinstance(variance_kept, (int, float)) or not 0 < variance_kept <= 1:
            raise ValueError(f"variance_kept must be in (0, 1], got {variance_kept!r}")
        if use_gpu not in (True, False, "auto"):
            raise ValueError(f"use_gpu must be True, False or 'auto', got {use_gpu!r}")
        if max_points_per_centroid is not None and (
            isinstance(max_points_per_centroid, bool)
            or not isinstance(max_points_per_centroid, int)
            or max_points_per_centroid < 1
        ):
            raise ValueError(
                f"max_points_per_centroid must be an integer >= 1 or None, got {max_points_per_centroid!r}"
            )
        self.num_clusters = int(num_clusters)
        self.variance_kept = float(variance_kept)
        self.niter, self.nredo, self.seed = int(niter), int(nredo), int(seed)
        self.use_gpu = use_gpu
        self.encoder_name = encoder_name
        self.show_progress = show_progress
        self.max_points_per_centroid = max_points_per_centroid
        self.data_fingerprint: str | None = None
        # identifies the encoder's weights (ResponseEncoder.fingerprint): same name, other weights = other clusters
        self.encoder_fingerprint: str | None = None
        self.pca_mean: np.ndarray | None = None  # [input_dim]
        self.pca_components: np.ndarray | None = None  # [n_components, input_dim]
        self.explained_variance: float | None = None  # fraction explained by the kept components
        self.centroids: np.ndarray | None = None  # [num_clusters, n_components]
        self.inertia: float | None = None  # sum of squared distances to the nearest centroid, fit data
        self.fit_seconds: dict[str, float] = {}  # wall time of the last fit: pca, kmeans, total
        self.cards: list[Any] | None = None  # ClusterCards of the gold texts (lightning_div.semantic.cards)

    # ------------------------------------------------------------------ config
    @property
    def config(self) -> dict[str, Any]:
        """Everything that decides the clusters; equal configs on equal data give equal clusters."""
        return {
            "encoder_name": self.encoder_name,
            "encoder_fingerprint": self.encoder_fingerprint,
            "num_clusters": self.num_clusters,
            "seed": self.seed,
            "variance_kept": self.variance_kept,
            "niter": self.niter,
            "nredo": self.nredo,
            "max_points_per_centroid": self.max_points_per_centroid,
            "data_fingerprint": self.data_fingerprint,
        }

    @property
    def config_hash(self) -> str:
        """16 hex characters identifying ``config`` (e.g. for a cache file name)."""
        return hash_config(self.config)

    @property
    def fitted(self) -> bool:
        return self.centroids is not None

    @property
    def input_dim(self) -> int | None:
        return None if self.pca_mean is None else int(self.pca_mean.shape[0])

    @property
    def n_components(self) -> int | None:
        return None if self.pca_components is None else int(self.pca_components.shape[0])

    # --------------------------------------------------------------------- fit
    def _faiss_gpu(self) -> int:
        import faiss

        available = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
        if self.use_gpu is True and available == 0:
            raise RuntimeError(
                "use_gpu=True but faiss sees no GPU: install faiss-gpu "
                "(lightning-div[gpu]) on a CUDA machine, or use use_gpu='auto'"
            )
        return 1 if self.use_gpu is True or (self.use_gpu == "auto" and available > 0) else 0

    def fit(self, embeddings: Any, data_fingerprint: str | None = None) -> SemanticClusters:
        """Fit PCA and k-means on ``embeddings`` [n, dim]; returns self.

        Args:
            embeddings: float array ``[n, dim]``, n >= ``num_clusters``.
            data_fingerprint: :func:`fingerprint_texts` of the embedded texts, stored in the config.

        Returns:
            ``self``, fitted.

        Raises:
            ValueError: too few points or distinct directions for k, NaN / inf or zero rows
                (named by index); see the semantic-space page for the full table.
        """
        k = self.num_clusters
        gpus = self._faiss_gpu()
        x = self._checked_fit_input(embeddings)
        n = x.shape[0]
        clock = time.perf_counter()
        stages = tqdm(total=3, desc="Fitting semantic clusters", disable=bar_disabled(self.show_progress), unit="stage")
        stages.set_postfix_str("PCA")
        mean, components, explained = self._fit_pca(x)
        m = components.shape[0]
        times = {"pca": time.perf_counter() - clock}
        stages.update()

        stages.set_postfix_str(f"k-means (d={m}, {'GPU' if gpus else 'CPU'})")
        reduced = project(x, mean, components)
        centroids = self._fit_kmeans(reduced, gpus)
        times["kmeans"] = time.perf_counter() - clock - times["pca"]
        stages.update()

        stages.set_postfix_str("assign")
        self.pca_mean, self.pca_components = mean, components
        self.explained_variance = explained
        self.centroids = centroids
        self.data_fingerprint = data_fingerprint
        self.cards = None  # cards describe the previous fit; describe() or fit_texts() makes new ones
        distances, ids = self._search(reduced)
        self.inertia = float(distances.sum())
        times["total"] = time.perf_counter() - clock
        self.fit_seconds = times
        stages.update()
        stages.close()
        empty = int((np.bincount(ids, minlength=k) == 0).sum())
        if empty:
            warnings.warn(
                f"SemanticClusters: {empty} of {k} clusters received no training point (duplicate "
                "centroids from heavily repeated embeddings); fewer clusters would describe this data",
                stacklevel=2,
            )
        log.info(
            "SemanticClusters: fitted k=%d on %d points, %d PCA components (%.1f%% variance), inertia %.4g",
            k,
            n,
            m,
            100 * self.explained_variance,
            self.inertia,
        )
        return self

    def _checked_fit_input(self, embeddings: Any) -> np.ndarray:
        """The L2-normalised rows :meth:`fit` clusters, refused when they cannot make ``num_clusters`` clusters.

        Warns (at :meth:`fit`'s caller) when there are fewer points than faiss recommends per cluster.
        """
        k = self.num_clusters
        x = check_rows(embeddings)
        n = x.shape[0]
        if n < k:
            raise ValueError(f"num_clusters={k} needs at least {k} embeddings, got {n}")
        distinct = count_distinct(x)
        if distinct == 1:
            raise ValueError(
                f"all {n} embeddings point in the same direction (identical after L2 normalisation): "
                "there is nothing to cluster"
            )
        if distinct < k:
            raise ValueError(
                f"only {distinct} distinct embeddings (after L2 normalisation) for num_clusters={k}; "
                f"use num_clusters <= {distinct} or more varied data"
            )
        if n < MIN_POINTS_PER_CENTROID * k:
            warnings.warn(
                f"SemanticClusters: clustering {n} points into {k} clusters; faiss recommends at least "
                f"{MIN_POINTS_PER_CENTROID * k} ({MIN_POINTS_PER_CENTROID} per cluster) for stable "
                "centroids",
                stacklevel=3,
            )
        return x

    def _fit_pca(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """(mean, components, explained variance) of the PCA keeping the fewest components reaching ``variance_kept``."""
        mean64, ratio, all_components = pca(x, seed=max(self.seed - 1, 0))
        cumulative = np.cumsum(ratio)
        reached = np.flatnonzero(cumulative >= self.variance_kept)
        m = int(reached[0]) + 1 if reached.size else len(cumulative)  # 1.0 may be missed by rounding
        if m == 1:
            log.info(
                "SemanticClusters: one PCA component explains %.1f%% of the variance; clustering on a line",
                100 * cumulative[0],
            )
        components = np.ascontiguousarray(all_components[:m], dtype=np.float32)
        return mean64.astype(np.float32), components, float(cumulative[m - 1])

    def _fit_kmeans(self, reduced: np.ndarray, gpus: int) -> np.ndarray:
        """faiss k-means centroids ``[num_clusters, d]`` of the PCA-reduced points (sub-sampled as faiss does)."""
        import faiss

        n, m = reduced.shape
        k = self.num_clusters
        kmeans = faiss.Kmeans(
            m,
            k,
            niter=self.niter,
            nredo=self.nredo,
            seed=self.seed,
            gpu=gpus,
            max_points_per_centroid=self.max_points_per_centroid or max(n // k + 1, 1),
            min_points_per_centroid=1,  # the < 39*k warning is ours, as a Python warning
            verbose=False,
        )
        kmeans.train(reduced)
        return np.ascontiguousarray(kmeans.centroids, dtype=np.float32)

    def fit_texts(self, texts: Sequence[str], encoder: Any) -> SemanticClusters:
        """Embed ``texts`` with ``encoder`` (a ResponseEncoder), fit and describe them (``cards``).

        Records the encoder's name, its weights' fingerprint and the texts' fingerprint.

        Args:
            texts: the gold responses.
            encoder: a :class:`~lightning_div.semantic.encoder.ResponseEncoder`.

        Returns:
            ``self``, fitted.
        """
        texts = list(texts)
        fingerprint = fingerprint_texts(texts)
        self.encoder_name = encoder.name
        self.encoder_fingerprint = getattr(encoder, "fingerprint", None)
        embeddings = encoder.encode(texts)
        self.fit(embeddings, data_fingerprint=fingerprint)
        self.describe(texts, embeddings)
        return self

    # ------------------------------------------------------------------ assign
    def _search(self, reduced: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        import faiss

        # k centroids: an exact CPU search is instant, and the same on every machine
        centroids = self._arrays()[2]
        index = faiss.IndexFlatL2(centroids.shape[1])
        index.add(centroids)
        distances, ids = index.search(np.ascontiguousarray(reduced, dtype=np.float32), 1)
        return distances.ravel(), ids.ravel().astype(np.int64)

    def transform(self, embeddings: Any) -> np.ndarray:
        """L2-normalised, PCA-reduced float32 features [n, n_components].

        Args:
            embeddings: float array ``[n, dim]`` of the fitted dimension.

        Returns:
            float32 array ``[n, n_components]``.

        Raises:
            ValueError: the clusters are not fitted, another dimension, or NaN / inf rows.
        """
        self._require_fitted()
        x = check_rows(embeddings)
        if x.shape[1] != self.input_dim:
            raise ValueError(
                f"embeddings have dimension {x.shape[1]}, but the clusters were fitted on "
                f"dimension {self.input_dim} (encoder {self.encoder_name!r})"
            )
        mean, components, _ = self._arrays()
        return project(x, mean, components)

    def assign(self, embeddings: Any) -> np.ndarray:
        """Nearest-centroid cluster id (int64, in [0, num_clusters)) of each embedding.

        Args:
            embeddings: float array ``[n, dim]`` of the fitted dimension.

        Returns:
            int64 array ``[n]``; empty for no embeddings.

        Raises:
            ValueError: the clusters are not fitted, another dimension, or NaN / inf rows.
        """
        reduced = self.transform(embeddings)
        if reduced.shape[0] == 0:
            return np.zeros(0, dtype=np.int64)
        return self._search(reduced)[1]

    def check_encoder(self, encoder: Any, source: str = "the clusters") -> None:
        """Refuse an encoder whose vectors these clusters cannot place; warn when it has another name.

        Embeds one probe text, so a mismatch is reported where the clusters and the encoder
        meet (at fit start, on the command line), not after the first epoch. ``source`` names
        the clusters in the message (e.g. the file they came from).

        Args:
            encoder: a :class:`~lightning_div.semantic.encoder.ResponseEncoder`.
            source: how the message names the clusters.

        Raises:
            ValueError: the encoder's vectors have another dimension than the clusters'.
        """
        self._require_fitted()
        dim = np.asarray(encoder.encode(["hello"])).shape[-1]
        name = getattr(encoder, "name", None)
        if dim != self.input_dim:
            raise ValueError(
                f"{source} were fitted on {self.input_dim}-dimensional embeddings of encoder "
                f"{self.encoder_name!r}, but encoder {name!r} gives {dim}-dimensional ones: use the "
                "encoder the clusters were fitted with, or fit new clusters"
            )
        if name and self.encoder_name and name != self.encoder_name:
            warnings.warn(
                f"{source} were fitted with encoder {self.encoder_name!r} but are used with {name!r} "
                "(same dimension): Sem-Ent is only comparable under the encoder the clusters were "
                "fitted with",
                stacklevel=2,
            )

    def describe(self, texts: Sequence[str], embeddings: Any, **kwargs: Any) -> list[Any]:
        """Compute (and keep in ``cards``, saved with the clusters) a ClusterCard per cluster from the gold texts.

        ``kwargs`` go to :func:`lightning_div.semantic.cards.cluster_cards` (``top_n``, ``num_examples``,
        ``stop_words``: English stopwords are left out of the distinctive words unless ``stop_words=None``).
        """
        from lightning_div.semantic.cards import describe_clusters

        self.cards = describe_clusters(self, texts, embeddings, **kwargs)
        return self.cards

    def histogram(self, ids: Any) -> np.ndarray:
        """Counts of each cluster id (int64, length num_clusters).

        Args:
            ids: cluster ids, e.g. from :meth:`assign`.

        Returns:
            int64 array ``[num_clusters]``.
        """
        return cluster_histogram(ids, self.num_clusters)

    def _require_fitted(self) -> None:
        if not self.fitted:
            raise RuntimeError("SemanticClusters is not fitted: call fit(), fit_texts() or load() first")

    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(PCA mean, PCA components, centroids) of fitted clusters; RuntimeError before a fit."""
        self._require_fitted()
        mean, components, centroids = self.pca_mean, self.pca_components, self.centroids
        if mean is None or components is None or centroids is None:  # fitted means all three are set
            raise RuntimeError("SemanticClusters is fitted but misses its PCA or centroids")
        return mean, components, centroids

    # --------------------------------------------------------------- persist
    def save(self, path: str | os.PathLike) -> Path:
        """Write PCA, centroids and config to ``path`` (.npz, written atomically); returns the path.

        The file's format is :mod:`lightning_div.semantic.clusters_io`'s.

        Args:
            path: the ``.npz`` file to write.

        Returns:
            The path written.

        Raises:
            OSError: the path cannot be written (no temporary file is left behind).
        """
        self._require_fitted()
        return write_clusters_file(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike, expected: dict[str, Any] | None = None) -> SemanticClusters:
        """Read a saved file; with ``expected`` (a config dict, or part of one) every given field must match.

        Raises ValueError naming each field that differs, e.g.
        ``num_clusters: file has 10, requested 20``. A file that cannot be read for any reason
        (truncated, a flipped byte, a config without a field this version needs) is a
        ValueError naming the file, never another exception: the cache treats it as a miss.

        Args:
            path: a file written by :meth:`save`.
            expected: config fields the file must have.

        Returns:
            The fitted clusters.

        Raises:
            FileNotFoundError: no file at ``path``.
            ValueError: a damaged or foreign file, or one fitted under another config.
        """
        return read_clusters_file(cls, path, expected)

    def _state(self) -> dict[str, Any]:
        return {
            "data_fingerprint": self.data_fingerprint,
            "pca_mean": self.pca_mean,
            "pca_components": self.pca_components,
            "centroids": self.centroids,
            "explained_variance": self.explained_variance,
            "inertia": self.inertia,
            "cards": self.cards,
        }

    def _set_state(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)


ClustersSource = str | Path | SemanticClusters
"""A saved SemanticClusters file, or a fitted SemanticClusters: what a ``clusters=`` argument accepts (see :mod:`lightning_div.types`)."""
