"""The semantic space callbacks share: which encoder and clusters (ClusterSpec), loaded once per process.

SemanticDiversityMonitor and DRESSReweighting both need an encoder and k-means clusters
fitted on the gold training responses. A :class:`ClusterSpec` names them; the clusters come
from the user (an object or a file) or from the disk cache
(:func:`lightning_div.semantic.cache.load_or_fit_clusters`: named by content hash, fitted on
rank 0, broadcast).

Two callbacks that name the same encoder (a Hub id or path, with the same arguments, on the
same device) share one :class:`~lightning_div.semantic.encoder.ResponseEncoder`, and with the same
clustering settings, gold texts and cache directory one set of clusters: a process-level
cache keyed by (name, arguments, device) loads the encoder once and fits or reads the clusters
once. Its entries are weak references: they live as long as a callback holds them, so a
finished run's encoder is freed with its callbacks and a later run in the same process (a
notebook, a test) starts afresh; :func:`clear_shared_cache` empties it at once. An encoder
*object* passed by the user is already shared by whoever holds it and is not cached here.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pytorch_lightning is a heavy import, and only named in annotations here
    import pytorch_lightning as pl

# one process-level cache for each kind of object, both weak: a callback's strong reference keeps an entry
_ENCODERS: weakref.WeakValueDictionary[Hashable, Any] = weakref.WeakValueDictionary()
_CLUSTERS: weakref.WeakValueDictionary[Hashable, Any] = weakref.WeakValueDictionary()


def clear_shared_cache() -> None:
    """Forget every shared encoder and set of clusters (callbacks holding one keep theirs)."""
    _ENCODERS.clear()
    _CLUSTERS.clear()


def shared_cache_size() -> tuple[int, int]:
    """(encoders, sets of clusters) the process-level cache holds now."""
    return len(_ENCODERS), len(_CLUSTERS)


def encoder_key(name: str | Path, device: Any, **kwargs: Any) -> tuple[str, str, str]:
    """What makes two named encoders the same: (name, arguments, device).

    Args:
        name: the Hub id, alias or path.
        device: where it runs (``pl_module.device``).
        **kwargs: the :class:`~lightning_div.semantic.encoder.ResponseEncoder` arguments.

    Returns:
        A hashable key (arguments in a canonical order).
    """
    arguments = repr(sorted((k, repr(v)) for k, v in kwargs.items()))
    return str(name), arguments, str(device)


def shared_encoder(name: str | Path, device: Any, **kwargs: Any) -> Any:
    """The process's ResponseEncoder for (name, arguments, device), created on first use.

    Args:
        name: the Hub id, alias or path.
        device: where it runs.
        **kwargs: the :class:`~lightning_div.semantic.encoder.ResponseEncoder` arguments.

    Returns:
        The same object for the same key while someone holds it.
    """
    from lightning_div.semantic.encoder import ResponseEncoder

    key = encoder_key(name, device, **kwargs)
    encoder = _ENCODERS.get(key)
    if encoder is None:
        encoder = ResponseEncoder(str(name), device=device, **kwargs)
        _ENCODERS[key] = encoder
    return encoder


def shared_clusters(key: Hashable, make: Callable[[], Any]) -> Any:
    """The cached value for ``key`` (e.g. a :class:`~lightning_div.semantic.cache.CachedClusters`), or ``make()``.

    Under DDP every rank must call it with the same keys in the same order (the callbacks do):
    the ranks agree whether all of them hold the value, and otherwise all of them call ``make``,
    so a ``make`` that holds collectives stays in step across ranks.

    Args:
        key: what identifies the value.
        make: builds it on a miss.

    Returns:
        The shared value.
    """
    from lightning_div._internal.distributed import gather_objects, is_distributed

    value = _CLUSTERS.get(key)
    # make() holds collectives: every rank must take the same branch, whatever its garbage collector has
    # freed so far (a weak entry of an earlier run may be gone on one rank and not yet on another)
    if is_distributed() and not all(gather_objects(value is not None)):
        value = None
    if value is None:
        value = make()
        _CLUSTERS[key] = value
    return value


def describe(value: Any) -> str | None:
    """A stable text for a checkpoint state key: the name/path given, else the object's ``name``, else its type.

    Never ``repr`` of an object (it holds a memory address, which would change between the
    run that saved a checkpoint and the run that resumes from it).

    Args:
        value: an encoder or clusters as given to a callback.

    Returns:
        The text, or None for None.
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Path):
        return str(value)
    name = getattr(value, "name", None)
    return name if isinstance(name, str) and name else type(value).__name__


def _device_of(pl_module: Any) -> Any:
    """The module's device; None without a module (the encoder then picks: CUDA if there is one, else CPU)."""
    return None if pl_module is None else pl_module.device


def _broadcast_of(pl_module: Any) -> Callable[[Any, int], Any] | None:
    """The Trainer's own broadcast when the module is attached to one (None: the package's)."""
    trainer = getattr(pl_module, "_trainer", None)
    strategy = getattr(trainer, "strategy", None)
    return getattr(strategy, "broadcast", None)


@dataclass
class ClusterSpec:
    """Which encoder and clusters a callback uses; builds them lazily, shared with callbacks that name the same.

    Attributes:
        encoder: a Hub id, alias or path (loaded on the module's device, shared per process), or
            an encoder object (used as it is).
        clusters: a SemanticClusters object or file; None = fit (or read from the cache) on the
            gold training responses.
        num_clusters: k.
        variance_kept: PCA variance kept.
        kmeans_seed: k-means seed.
        encoder_kwargs: more ResponseEncoder arguments (e.g. ``pooling``).
        clusters_path: the clusters file in use (checkpointed by the callbacks).
    """

    encoder: Any = "microsoft/DialoGPT-large"  # typed where users give it: the callbacks' EncoderSource
    clusters: Any = None
    num_clusters: int = 20
    variance_kept: float = 0.9
    kmeans_seed: int = 27
    encoder_kwargs: dict[str, Any] | None = None
    clusters_path: str | None = None
    _encoder: Any = field(default=None, repr=False)
    _clusters: Any = field(default=None, repr=False)
    _cached: Any = field(default=None, repr=False)  # the shared cache entry: held, so that it lives with us

    def identity(self) -> dict[str, Any]:
        """What tells two callbacks' semantic spaces apart, for their checkpoint state keys.

        Settings such as ``num_clusters`` are left out on purpose: a resume with a changed setting
        must find its state, so that the change is detected and said (see ``settings``).
        """
        out: dict[str, Any] = {"encoder": describe(self.encoder)}
        if isinstance(self.clusters, (str, Path)):
            out["clusters"] = describe(self.clusters)
        return out

    def _encoder_arguments(self, batch_size: int, show_progress: bool) -> dict[str, Any]:
        return {"batch_size": batch_size, "show_progress": show_progress, **(self.encoder_kwargs or {})}

    def get_encoder(self, pl_module: pl.LightningModule | None, batch_size: int, show_progress: bool) -> Any:
        """The ResponseEncoder: a name/path is loaded once per process and device, shared between callbacks."""
        if self._encoder is None:
            if isinstance(self.encoder, (str, Path)):
                arguments = self._encoder_arguments(batch_size, show_progress)
                self._encoder = shared_encoder(self.encoder, _device_of(pl_module), **arguments)
            else:
                self._encoder = self.encoder
        return self._encoder

    def _given(self) -> Any:
        """Clusters given by the user, or a file a restored checkpoint points at; None = fit/cache."""
        from lightning_div.semantic.clusters import SemanticClusters

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

    def _given_checked(self, pl_module: pl.LightningModule | None, batch_size: int, show_progress: bool) -> Any:
        """:meth:`_given`, checked against the encoder (dimension): a misfit is a configuration error at fit start."""
        given = self._given()
        if given is not None:
            source = f"the clusters in {self.clusters_path!r}" if self.clusters_path else "the given clusters"
            given.check_encoder(self.get_encoder(pl_module, batch_size, show_progress), source)
        return given

    def get_clusters(
        self,
        pl_module: pl.LightningModule | None,
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
        pl_module: pl.LightningModule | None,
        gold_texts: list[str] | None,
        cache_dir: Path,
        batch_size: int,
        show_progress: bool,
    ) -> tuple[Any, np.ndarray]:
        """(clusters, cluster id of every gold text); fitted clusters and ids are cached on disk and per process."""
        from lightning_div.semantic.cache import cache_file, load_or_fit_clusters
        from lightning_div.semantic.clusters import fingerprint_texts

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
        config = {"num_clusters": self.num_clusters, "variance_kept": self.variance_kept, "seed": self.kmeans_seed}

        def make() -> Any:
            return load_or_fit_clusters(
                cache_dir,
                gold_texts,
                encoder,
                with_assignments=True,
                broadcast=_broadcast_of(pl_module),
                show_progress=show_progress,
                **config,
            )

        if isinstance(self.encoder, (str, Path)):  # a shared encoder: share its clusters too
            key = (
                encoder_key(self.encoder, _device_of(pl_module), **self._encoder_arguments(batch_size, show_progress)),
                str(Path(cache_dir).resolve()),
                tuple(sorted(config.items())),
                fingerprint_texts(gold_texts),
            )
            self._cached = shared_clusters(key, make)
            if self._cached.assignments is not None:  # one array for every callback: an edit in place is an error
                self._cached.assignments.setflags(write=False)
        else:
            self._cached = make()
        clusters = self._cached.clusters
        self.clusters_path = str(cache_file(cache_dir, clusters))
        self._clusters = clusters
        self.ensure_cards(pl_module, gold_texts, batch_size, show_progress, save=True)
        return clusters, self._cached.assignments

    def ensure_cards(
        self,
        pl_module: pl.LightningModule | None,
        gold_texts: list[str] | None,
        batch_size: int,
        show_progress: bool,
        save: bool = False,
    ) -> list[Any] | None:
        """The clusters' cards; computed from ``gold_texts`` when the clusters have none (a file saved
        before cards existed, or clusters given without them). Every rank must call it (embedding is
        sharded); ``save=True`` writes them into our own cache file (rank 0), never into a user's file.
        """
        from lightning_div._internal.distributed import rank_and_world

        clusters = self._clusters
        if clusters is None or clusters.cards is not None or not gold_texts:
            return None if clusters is None else clusters.cards
        encoder = self.get_encoder(pl_module, batch_size, show_progress)
        clusters.describe(gold_texts, encoder.encode(gold_texts))
        if save and self.clusters_path and rank_and_world()[0] == 0:
            clusters.save(self.clusters_path)
        return clusters.cards
