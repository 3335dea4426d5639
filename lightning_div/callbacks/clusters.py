"""The semantic space shared by SemanticDiversityMonitor and DRESSReweighting.

Both need an encoder and k-means clusters fitted on the gold training responses.
:meth:`SemanticClusters.load_or_fit` caches the clusters (and the gold responses'
cluster ids) under a name derived from (encoder, clustering config, fingerprint of
the gold texts), so two callbacks, a resumed run or the next run reuse them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl


def describe(value: Any) -> str | None:
    """A stable text for a checkpoint state key: the name/path given, else the object's ``name``, else its type.

    Never ``repr`` of an object (it holds a memory address, which would change between the
    run that saved a checkpoint and the run that resumes from it).
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Path):
        return str(value)
    name = getattr(value, "name", None)
    return name if isinstance(name, str) and name else type(value).__name__


@dataclass
class ClusterSpec:
    """Which encoder and clusters a callback uses; builds and caches them lazily."""

    encoder: Any = "microsoft/DialoGPT-large"  # typed where users give it: the callbacks' EncoderSource
    clusters: Any = None
    num_clusters: int = 20
    variance_kept: float = 0.9
    kmeans_seed: int = 27
    encoder_kwargs: dict[str, Any] | None = None
    clusters_path: str | None = None
    _encoder: Any = field(default=None, repr=False)
    _clusters: Any = field(default=None, repr=False)

    def identity(self) -> dict[str, Any]:
        """What tells two callbacks' semantic spaces apart, for their checkpoint state keys.

        Settings such as ``num_clusters`` are left out on purpose: a resume with a changed setting
        must find its state, so that the change is detected and said (see ``settings``).
        """
        out: dict[str, Any] = {"encoder": describe(self.encoder)}
        if isinstance(self.clusters, (str, Path)):
            out["clusters"] = describe(self.clusters)
        return out

    def get_encoder(self, pl_module: pl.LightningModule, batch_size: int, show_progress: bool) -> Any:
        """The ResponseEncoder (a name/path is loaded once, on the module's device)."""
        if self._encoder is None:
            from lightning_div.embedding import ResponseEncoder

            if isinstance(self.encoder, (str, Path)):
                kw = {"batch_size": batch_size, "show_progress": show_progress, **(self.encoder_kwargs or {})}
                self._encoder = ResponseEncoder(str(self.encoder), device=pl_module.device, **kw)
            else:
                self._encoder = self.encoder
        return self._encoder

    def _given(self) -> Any:
        """Clusters given by the user, or a file a restored checkpoint points at; None = fit/cache."""
        from lightning_div.clustering import SemanticClusters

        given = self.clusters
        if given is None and self.clusters_path and Path(self.clusters_path).is_file():
            try:  # the cache file a checkpoint points at: a damaged one is refitted like any cache entry
                return SemanticClusters.load(self.clusters_path)
            except ValueError as e:
                warnings.warn(
                    f"the cached clusters {self.clusters_path!r} the checkpoint points at cannot be used "
                    f"({e}); fitting them again",
                    stacklevel=2,
                )
                self.clusters_path = None
                return None
        if given is None or isinstance(given, SemanticClusters):
            return given
        self.clusters_path = str(given)
        return SemanticClusters.load(given)

    def _given_checked(self, pl_module: pl.LightningModule, batch_size: int, show_progress: bool) -> Any:
        """:meth:`_given`, checked against the encoder (dimension): a misfit is a configuration error at fit start."""
        given = self._given()
        if given is not None:
            source = f"the clusters in {self.clusters_path!r}" if self.clusters_path else "the given clusters"
            given.check_encoder(self.get_encoder(pl_module, batch_size, show_progress), source)
        return given

    def get_clusters(
        self,
        pl_module: pl.LightningModule,
        gold_texts: list[str] | None,
        cache_dir: Path,
        batch_size: int,
        show_progress: bool,
    ) -> Any:
        """The fitted clusters: given object or file, cache hit, or fitted now on ``gold_texts``."""
        if self._clusters is None:
            self._clusters = self._given_checked(pl_module, batch_size, show_progress)
        if self._clusters is None:
            self._clusters, _ = self.gold_assignments(pl_module, gold_texts, cache_dir, batch_size, show_progress)
        return self._clusters

    def gold_assignments(
        self,
        pl_module: pl.LightningModule,
        gold_texts: list[str] | None,
        cache_dir: Path,
        batch_size: int,
        show_progress: bool,
    ) -> tuple[Any, np.ndarray]:
        """(clusters, cluster id of every gold text); fitted clusters and ids are cached on disk."""
        from lightning_div.clustering import SemanticClusters

        if not gold_texts:
            raise ValueError("no gold training responses to fit the semantic clusters on")
        encoder = self.get_encoder(pl_module, batch_size, show_progress)
        # self._clusters, when set, was checked on entry or fitted with this very encoder
        given = (
            self._clusters if self._clusters is not None else self._given_checked(pl_module, batch_size, show_progress)
        )
        if given is not None:
            self._clusters = given
            embeddings = encoder.encode(gold_texts)
            if given.cards is None:  # the embeddings are at hand: describing costs no second pass
                given.describe(gold_texts, embeddings)
            return given, given.assign(embeddings)
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        clusters, ids = SemanticClusters.load_or_fit(
            cache_dir,
            gold_texts,
            encoder,
            with_assignments=True,
            num_clusters=self.num_clusters,
            variance_kept=self.variance_kept,
            seed=self.kmeans_seed,
            show_progress=show_progress,
        )
        self.clusters_path = str(Path(cache_dir) / f"clusters-{clusters.config_hash}.npz")
        self._clusters = clusters
        self.ensure_cards(pl_module, gold_texts, batch_size, show_progress, save=True)
        return clusters, ids

    def ensure_cards(
        self,
        pl_module: pl.LightningModule,
        gold_texts: list[str] | None,
        batch_size: int,
        show_progress: bool,
        save: bool = False,
    ) -> list[Any] | None:
        """The clusters' cards; computed from ``gold_texts`` when the clusters have none (a file saved
        before cards existed, or clusters given without them). Every rank must call it (embedding is
        sharded); ``save=True`` writes them into our own cache file (rank 0), never into a user's file.
        """
        from lightning_div.distributed import rank_and_world

        clusters = self._clusters
        if clusters is None or clusters.cards is not None or not gold_texts:
            return None if clusters is None else clusters.cards
        encoder = self.get_encoder(pl_module, batch_size, show_progress)
        clusters.describe(gold_texts, encoder.encode(gold_texts))
        if save and self.clusters_path and rank_and_world()[0] == 0:
            clusters.save(self.clusters_path)
        return clusters.cards
