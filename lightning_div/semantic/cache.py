"""The clusters' disk cache: file naming by content hash, fit on rank 0, broadcast.

:class:`~lightning_div.semantic.clusters.SemanticClusters` is the algorithm (``fit`` / ``assign`` /
``save`` / ``load``); this module decides *whether* to fit. :func:`load_or_fit_clusters`
names a cache file by the hash of everything that decides the clusters (encoder name and
weights, k, seed, PCA variance, k-means settings, fingerprint of the gold texts), reads it
on rank 0, fits there when it is missing or unusable, and sends the result to the other
ranks. It always returns one type, :class:`CachedClusters`.

A cache entry that is truncated, corrupted or stale is refitted (or reassigned) with one
warning naming the file, never a crash; a file the user names is theirs: one fitted under
another config is an error naming the fields.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lightning_div._internal.distributed import on_rank_zero, rank_and_world
from lightning_div._internal.io import (
    StaleCacheError,
    file_digest,
    load_assignments,
    remove_stale_temporaries,
    save_assignments,
)
from lightning_div.semantic.clusters import SemanticClusters
from lightning_div.semantic.clusters_io import fingerprint_texts

log = logging.getLogger(__name__)

# names the work in the other ranks' error when rank 0's fails
_WHAT = "load_or_fit_clusters"


@dataclass(eq=False)  # compared by identity: a field-wise == would compare the assignments' arrays
class CachedClusters:
    """What :func:`load_or_fit_clusters` returns, whatever the cache held.

    Attributes:
        clusters: the fitted clusters.
        path: the clusters file they were read from or saved to.
        assignments: the cluster id of every text (``with_assignments=True``), else None.
    """

    clusters: SemanticClusters
    path: Path
    assignments: np.ndarray | None = None


#: The folder of a run's cached clusters, under its output directory (every front end's default).
RUN_CACHE = "lightning_div_cache"


def run_cache_dir(root: str | os.PathLike | None, dirpath: str | os.PathLike | None = None) -> Path:
    """Where a front end caches its clusters: ``dirpath`` when given, else ``<root>/lightning_div_cache``
    (``root``: the run's output directory, the Lightning trainer's ``default_root_dir``; None: the current one)."""
    return Path(dirpath) if dirpath else Path(root or ".") / RUN_CACHE


def cache_file(directory: str | os.PathLike, clusters: SemanticClusters) -> Path:
    """The cache file of clusters with this config in ``directory``: ``clusters-<config_hash>.npz``."""
    return Path(directory) / f"clusters-{clusters.config_hash}.npz"


def assignments_path(clusters_path: str | os.PathLike) -> Path:
    """Where the gold texts' cluster ids are cached beside a clusters file."""
    path = Path(clusters_path)
    # not "<stem>.assignments.npz": a glob for the clusters files (clusters-*.npz) must not match it
    return path.with_name(f"assignments-{path.stem}.npz")


def load_or_fit_clusters(
    path: str | os.PathLike,
    texts: Sequence[str],
    encoder: Any,
    with_assignments: bool = False,
    broadcast: Callable[[Any, int], Any] | None = None,
    **config: Any,
) -> CachedClusters:
    """Load the clusters saved at ``path`` if there are any, else embed ``texts``, fit and save.

    A directory ``path`` stores ``clusters-<config_hash>.npz`` inside it (:func:`cache_file`).
    Under DDP every rank must call this: rank 0 reads the cache, all ranks embed (sharded),
    rank 0 fits and saves, and the others receive rank 0's clusters (or its error).

    ``with_assignments=True`` also gives the cluster id of every text, cached beside the
    clusters (:func:`assignments_path`, holding the clusters file's sha256, the number of
    texts and the ids, all checked on read) so that a later run needs neither the embedding
    nor the fit. Both files are written atomically (:mod:`lightning_div._internal.io`).

    Args:
        path: a directory (the cache) or an ``.npz`` file.
        texts: the gold responses the clusters are (or were) fitted on.
        encoder: a :class:`~lightning_div.semantic.encoder.ResponseEncoder`.
        with_assignments: also compute (or read) the cluster id of every text.
        broadcast: ``(obj, src) -> obj`` collective, e.g. ``trainer.strategy.broadcast``;
            None = :func:`lightning_div._internal.distributed.broadcast_object`.
        **config: :class:`~lightning_div.semantic.clusters.SemanticClusters` constructor arguments.

    Returns:
        A :class:`CachedClusters`.

    Raises:
        ValueError: a file fitted under another config (each differing field named), or a fit
            that fails (as :meth:`SemanticClusters.fit`).
    """
    texts = list(texts)
    wanted = SemanticClusters(encoder_name=encoder.name, **config)
    wanted.encoder_fingerprint = getattr(encoder, "fingerprint", None)
    wanted.data_fingerprint = fingerprint_texts(texts)
    path = Path(path)
    cache = path.is_dir()  # a file named by its config hash: ours to refit when it is unusable
    if cache:
        path = cache_file(path, wanted)
    ids_path = assignments_path(path)
    rank = rank_and_world()[0]
    # one decision for all ranks (encode() below is a collective): rank 0 reads, the others follow
    status, payload = on_rank_zero(
        lambda: _read_cache(path, ids_path, wanted, len(texts), cache, with_assignments), _WHAT, broadcast
    )
    if status in ("hit", "clusters"):
        loaded = SemanticClusters.load(path, expected=wanted.config)
        loaded.use_gpu, loaded.show_progress = wanted.use_gpu, wanted.show_progress
        log.info("SemanticClusters: loaded %s", path)
        if not with_assignments:
            return CachedClusters(loaded, path)
        if status == "hit":
            return CachedClusters(loaded, path, np.asarray(payload, dtype=np.int64))
        ids = loaded.assign(encoder.encode(texts))
        if rank == 0:
            save_assignments(ids_path, ids, file_digest(path), loaded.num_clusters)
        return CachedClusters(loaded, path, ids)

    embeddings = encoder.encode(texts)  # every rank holds all embeddings (encode gathers)
    state = on_rank_zero(lambda: _fit_and_save(wanted, embeddings, path, texts)._state(), _WHAT, broadcast)
    if rank != 0:
        wanted._set_state(state)
    if not with_assignments:
        return CachedClusters(wanted, path)
    ids = wanted.assign(embeddings)
    if rank == 0:
        save_assignments(ids_path, ids, file_digest(path), wanted.num_clusters)
    return CachedClusters(wanted, path, ids)


def _fit_and_save(
    clusters: SemanticClusters, embeddings: np.ndarray, path: Path, texts: Sequence[str] | None = None
) -> SemanticClusters:
    clusters.fit(embeddings, data_fingerprint=clusters.data_fingerprint)
    if texts is not None:  # the file carries its cards: describing needs the texts and embeddings at hand now
        clusters.describe(texts, embeddings)
    clusters.save(path)
    log.info("SemanticClusters: fitted on %d texts and saved %s", len(embeddings), path)
    return clusters


def _read_cache(
    path: Path, ids_path: Path, wanted: SemanticClusters, n_texts: int, cache: bool, with_assignments: bool
) -> tuple[str, Any]:
    """What :func:`load_or_fit_clusters` can reuse: ("hit", ids), ("clusters", None) or ("miss", None).

    A cache entry (``cache=True``: a file named by its config hash in the cache directory)
    that is truncated, corrupted or written for other inputs is a miss, with one warning
    naming the file: it is refitted and rewritten, never a crash. A file the user named
    that was fitted under another config is an error (it is theirs, not a cache). Temporary
    files that killed writers left in the cache directory are removed here, also on a hit.
    """
    if cache:
        for prefix in ("clusters-", "assignments-"):
            remove_stale_temporaries(path.parent, prefix)
    if not path.is_file():
        return "miss", None
    try:
        loaded = SemanticClusters.load(path, expected=wanted.config)
    except ValueError as e:
        if not cache:
            raise
        warnings.warn(
            f"SemanticClusters: the cached clusters {str(path)!r} cannot be used ({e}); fitting them "
            "again and replacing the file",
            stacklevel=3,
        )
        return "miss", None
    if not with_assignments or not ids_path.is_file():
        return "clusters", None
    try:
        return "hit", load_assignments(ids_path, file_digest(path), loaded.num_clusters, n_texts)
    except StaleCacheError as e:
        warnings.warn(
            f"SemanticClusters: the cached assignments cannot be used ({e}); assigning the texts again "
            "and replacing the file",
            stacklevel=3,
        )
        return "clusters", None
