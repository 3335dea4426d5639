"""The semantic space shared by SemanticDiversityMonitor and DRESSReweighting.

Both need an encoder and k-means clusters fitted on the gold training responses.
The clusters (and the gold responses' cluster ids) are cached under one file name
derived from (encoder, clustering config, fingerprint of the gold texts), so two
callbacks, a resumed run or the next run reuse them instead of recomputing.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl

from lightning_div.distributed import broadcast_object, is_distributed, rank_and_world

log = logging.getLogger("lightning_div")


@dataclass
class ClusterSpec:
    """Which encoder and clusters a callback uses; builds and caches them lazily."""

    encoder: Any = "microsoft/DialoGPT-large"
    clusters: Any = None
    num_clusters: int = 20
    variance_kept: float = 0.9
    kmeans_seed: int = 27
    encoder_kwargs: dict[str, Any] | None = None
    clusters_path: str | None = None
    _encoder: Any = field(default=None, repr=False)
    _clusters: Any = field(default=None, repr=False)

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

    def _cache_key(self, encoder_name: str, gold_texts: list[str]) -> str:
        from lightning_div.clustering import fingerprint_texts

        blob = json.dumps({"encoder": encoder_name, "k": self.num_clusters, "variance": self.variance_kept,
                           "seed": self.kmeans_seed, "data": fingerprint_texts(gold_texts)}, sort_keys=True)
        return hashlib.blake2b(blob.encode(), digest_size=8).hexdigest()

    def get_clusters(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gold_texts: list[str] | None,
                     cache_dir: Path, batch_size: int, show_progress: bool) -> Any:
        """The fitted clusters: given object, saved file, cache hit, or fitted now on ``gold_texts``."""
        if self._clusters is None:
            self._clusters, _ = self._resolve(trainer, pl_module, gold_texts, cache_dir, batch_size, show_progress,
                                              want_gold_ids=False)
        return self._clusters

    def gold_assignments(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gold_texts: list[str],
                         cache_dir: Path, batch_size: int, show_progress: bool) -> tuple[Any, np.ndarray]:
        """(clusters, cluster id of every gold text), both cached on disk."""
        clusters, ids = self._resolve(trainer, pl_module, gold_texts, cache_dir, batch_size, show_progress,
                                      want_gold_ids=True)
        self._clusters = clusters
        return clusters, ids

    def _resolve(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gold_texts: list[str] | None,
                 cache_dir: Path, batch_size: int, show_progress: bool, want_gold_ids: bool) -> tuple[Any, Any]:
        from lightning_div.clustering import SemanticClusters, fingerprint_texts

        encoder = self.get_encoder(pl_module, batch_size, show_progress)
        given = self.clusters if self.clusters is not None else self._clusters
        if given is None and self.clusters_path and Path(self.clusters_path).exists() and not want_gold_ids:
            given = self.clusters_path  # restored from a checkpoint
        if given is not None:
            clusters = given if isinstance(given, SemanticClusters) else SemanticClusters.load(given)
            if isinstance(given, (str, Path)):
                self.clusters_path = str(given)
            ids = clusters.assign(encoder.encode(gold_texts)) if want_gold_ids else None
            return clusters, ids
        if not gold_texts:
            raise ValueError("no gold training responses to fit the semantic clusters on")

        key = self._cache_key(encoder.name, gold_texts)
        path = Path(cache_dir) / f"clusters-{key}.npz"
        ids_path = Path(cache_dir) / f"clusters-{key}.gold_ids.npy"
        self.clusters_path = str(path)
        if path.exists() and ids_path.exists():
            log.info("lightning-div: reusing semantic clusters %s", path)
            return SemanticClusters.load(path), np.load(ids_path)

        # Cache miss: every process embeds its shard (the encoder gathers), rank 0 fits and saves, the others load.
        log.info("lightning-div: fitting %d semantic clusters on %d gold responses -> %s",
                 self.num_clusters, len(gold_texts), path)
        embeddings = encoder.encode(gold_texts)
        clusters, ids, error = None, None, None
        if rank_and_world()[0] == 0:
            try:
                clusters = SemanticClusters(num_clusters=self.num_clusters, variance_kept=self.variance_kept,
                                            seed=self.kmeans_seed, encoder_name=encoder.name,
                                            show_progress=show_progress)
                clusters.fit(embeddings, data_fingerprint=fingerprint_texts(gold_texts))
                ids = clusters.assign(embeddings)
                path.parent.mkdir(parents=True, exist_ok=True)
                clusters.save(path)
                np.save(ids_path, ids)
            except Exception as err:
                error = err
        # Rank 0's failure must reach every rank, or the others would wait for the file forever.
        error = broadcast_object(error)
        if error is not None:
            raise error
        if is_distributed():  # every rank uses the very same saved clusters
            return SemanticClusters.load(path), np.load(ids_path)
        return clusters, ids
