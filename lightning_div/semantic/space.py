"""SemanticSpace: one response encoder and its k-means clusters, with their disk cache and cards.

Sem-Ent (:class:`~lightning_div.callbacks.SemanticDiversityMonitor`) and DRESS
(:class:`~lightning_div.callbacks.DRESSReweighting`) measure in the same space: an encoder
that turns responses into vectors, and clusters fitted on the gold training responses. A
:class:`SemanticSpace` is that space as one object you can hold, pass and share:

```python
space = SemanticSpace(encoder="minilm", num_clusters=20)
monitor = SemanticDiversityMonitor(space=space)
dress = DRESSReweighting(space=space)  # the same encoder and clusters: loaded and fitted once
```

Two callbacks given the same object share its encoder and clusters by identity; there is no
process-wide cache behind it. A callback built without ``space=`` (its ``encoder=``,
``num_clusters=`` ... arguments) builds a private one. Fitted clusters are cached on disk by
content hash (:func:`lightning_div.semantic.cache.load_or_fit_clusters`: read or fitted on
rank 0, sent to the other ranks), so a later run, or another space with the same settings,
reads them back instead of fitting again.

Nothing here needs Lightning: where the encoder runs (``device``) and how rank 0's clusters
reach the other ranks (``broadcast``) are arguments, which the callbacks fill from their
``LightningModule`` and the Trainer's strategy.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lightning_div._internal.deprecation import take_deprecated, warn_deprecated
from lightning_div._internal.names import describe
from lightning_div.keys import DEFAULT_ENCODER
from lightning_div.semantic.clusters import ClustersSource, SemanticClusters
from lightning_div.semantic.clusters_io import fingerprint_texts
from lightning_div.semantic.encoder import EncoderSource
from lightning_div.types import Options

__all__ = [
    "Broadcast",
    "SPACE_ARGUMENTS",
    "SemanticSpace",
    "describe",
    "given_space",
    "identity_of",
    "space_from_arguments",
]

#: ``(obj, src) -> obj``: a collective that sends rank ``src``'s object to every rank (e.g.
#: ``trainer.strategy.broadcast``).
Broadcast = Callable[[Any, int], Any]

#: The callbacks' arguments that build a private space (an error beside ``space=``).
SPACE_ARGUMENTS = ("encoder", "clusters", "num_clusters", "variance_kept", "kmeans_seed", "encoder_kwargs")


class SemanticSpace:
    """An encoder and the k-means clusters of its embeddings of the gold responses, as one object.

    Args:
        encoder: a Hub id, alias (``"minilm"``: the offline all-MiniLM-L6-v2) or path, loaded on
            first use on the device the first call asks for; or an encoder object (a
            :class:`~lightning_div.semantic.encoder.ResponseEncoder`), used as it is.
        clusters: fitted :class:`~lightning_div.semantic.clusters.SemanticClusters` or a saved
            file; None = fit them on the gold responses given to :meth:`fit`.
        num_clusters: k (the paper: 20).
        variance_kept: PCA variance kept (the paper: 0.9).
        kmeans_seed: the faiss k-means seed (the paper: 27).
        encoder_kwargs: more ResponseEncoder arguments (``pooling``, ``max_length``, ``dtype``, ...).
        dirpath: the cache directory of fitted clusters; None = the directory the caller of
            :meth:`fit` gives (the callbacks: their ``dirpath``, default
            ``<default_root_dir>/lightning_div_cache``).
        batch_size: texts per encoder forward pass.
        show_progress: progress bars while embedding and fitting.

    Raises:
        ValueError: a setting :class:`~lightning_div.semantic.clusters.SemanticClusters` refuses
            (k < 1, ``variance_kept`` outside (0, 1], a negative seed).
    """

    def __init__(
        self,
        encoder: EncoderSource = DEFAULT_ENCODER,
        clusters: ClustersSource | None = None,
        num_clusters: int = 20,
        variance_kept: float = 0.9,
        kmeans_seed: int = 27,
        encoder_kwargs: Options | None = None,
        dirpath: str | Path | None = None,
        batch_size: int = 32,
        show_progress: bool = True,
    ) -> None:
        # checked now, where the callback is built, by the class that uses them (one set of rules)
        SemanticClusters(num_clusters=num_clusters, variance_kept=variance_kept, seed=kmeans_seed)
        self.encoder_source = encoder
        self.clusters_source = clusters
        # plain Python numbers (a k from np.arange): the settings go into JSON checkpoints and records
        self.num_clusters = int(num_clusters)
        self.variance_kept = float(variance_kept)
        self.kmeans_seed = int(kmeans_seed)
        self.encoder_kwargs: dict[str, Any] = dict(encoder_kwargs or {})
        self.dirpath = dirpath
        self.batch_size = batch_size
        self.show_progress = show_progress
        #: The clusters file in use: the user's, our cache entry, or the one a checkpoint pointed at.
        self.clusters_path: str | None = str(clusters) if isinstance(clusters, (str, os.PathLike)) else None
        self._encoder: Any = None
        self._clusters: SemanticClusters | None = None
        self._own_file = False  # clusters_path is our cache entry (cards may be written into it), not the user's
        self._gold_fingerprint: str | None = None
        self._fitted_text_ids: np.ndarray | None = None  # the cluster id of each text fit() was given, once known

    def __repr__(self) -> str:
        state = "fitted" if self._clusters is not None else "not fitted"
        return f"SemanticSpace(encoder={describe(self.encoder_source)!r}, num_clusters={self.num_clusters}, {state})"

    # -- the encoder -------------------------------------------------------------------------------

    def get_encoder(self, device: Any = None) -> Any:
        """The encoder: a name or path is loaded once, on ``device`` (None: CUDA if there is one, else CPU).

        Args:
            device: where a named encoder runs; only the first call's counts (the callbacks pass
                their module's device, the same every time).

        Returns:
            The :class:`~lightning_div.semantic.encoder.ResponseEncoder` (or the object given).
        """
        if self._encoder is None:
            if isinstance(self.encoder_source, (str, os.PathLike)):
                from lightning_div.semantic.encoder import ResponseEncoder

                self._encoder = ResponseEncoder(
                    os.fspath(self.encoder_source),
                    device=device,
                    batch_size=self.batch_size,
                    show_progress=self.show_progress,
                    **self.encoder_kwargs,
                )
            else:
                self._encoder = self.encoder_source
        return self._encoder

    def encode(self, texts: Sequence[str], device: Any = None) -> np.ndarray:
        """Embeddings of ``texts`` (under DDP: sharded over the ranks, every rank gets all rows).

        Args:
            texts: the responses.
            device: see :meth:`get_encoder`.

        Returns:
            float32 array, one row per text.
        """
        return np.asarray(self.get_encoder(device).encode(list(texts)))

    # -- the clusters ------------------------------------------------------------------------------

    @property
    def fitted(self) -> bool:
        """Whether the clusters are at hand (given and loaded, read from the cache, or fitted)."""
        return self._clusters is not None

    @property
    def clusters(self) -> SemanticClusters:
        """The clusters in use.

        Raises:
            RuntimeError: before :meth:`fit`.
        """
        if self._clusters is None:
            raise RuntimeError("SemanticSpace: no clusters yet: call fit(gold_texts) first (or give clusters=)")
        return self._clusters

    @property
    def cards(self) -> list[Any] | None:
        """The clusters' cards (:mod:`lightning_div.semantic.cards`), or None before :meth:`fit`."""
        return None if self._clusters is None else self._clusters.cards

    def _fit_config(self) -> dict[str, Any]:
        """The clustering settings that decide a fit, as the clusters file and its cache name hold them (``seed``)."""
        return {"num_clusters": self.num_clusters, "variance_kept": self.variance_kept, "seed": self.kmeans_seed}

    def config(self) -> dict[str, Any]:
        """Deprecated in 1.0 (a space describes itself one way): :meth:`settings`, whose key is ``kmeans_seed``."""
        warn_deprecated("SemanticSpace.config()", "SemanticSpace.settings() (its seed is kmeans_seed)")
        return self._fit_config()

    def fit(
        self,
        cluster_texts: Sequence[str] | None = None,
        *,
        device: Any = None,
        broadcast: Broadcast | None = None,
        cache_dir: str | Path | None = None,
        **deprecated: Any,
    ) -> SemanticSpace:
        """Make the clusters ready: the given ones (checked against the encoder), or cached-or-fitted on ``cluster_texts``.

        Fitting names a cache file by the hash of everything that decides the clusters (encoder
        name and weights, settings, the texts): a later call with the same inputs, in this or a
        later run, reads it back. The texts' cluster ids come with the fit (and are cached
        beside it); for given clusters :meth:`gold_assignments` computes them when first asked.
        Cards come with the clusters file, or are computed from ``cluster_texts`` when the clusters have
        none. Calling again with the same texts (a second callback sharing this space) does
        nothing. Under DDP every rank must call it (rank 0 reads or fits, the others receive).

        Args:
            cluster_texts: the texts to fit the clusters on (the training responses; ``texts=`` in 0.2); may
                be None when clusters were given.
            device: where the encoder runs (see :meth:`get_encoder`).
            broadcast: how rank 0's clusters reach the other ranks (e.g. ``trainer.strategy.broadcast``;
                None: :func:`lightning_div._internal.distributed.broadcast_object`).
            cache_dir: the cache directory when the space has no ``dirpath`` of its own.

        Returns:
            This space.

        Raises:
            ValueError: no texts to fit on, no cache directory, texts other than those this space
                was fitted on, or clusters that do not fit the encoder.
        """
        renamed, _ = take_deprecated("SemanticSpace.fit", deprecated, renamed={"texts": "cluster_texts"})
        texts = renamed.get("cluster_texts", cluster_texts)
        gold = None if texts is None else list(texts)
        fingerprint = None if gold is None else fingerprint_texts(gold)
        if fingerprint is not None and self._gold_fingerprint is not None:
            if fingerprint != self._gold_fingerprint:
                raise ValueError(
                    f"this SemanticSpace was fitted on other gold responses than the {len(gold or [])} given now: "
                    "one space serves one set of gold responses (give each set its own SemanticSpace)"
                )
            return self
        if self._clusters is None:
            self._clusters = self._given(device)
        if self._clusters is None:
            if not gold:
                raise ValueError("no gold training responses to fit the semantic clusters on")
            self._fit_cached(gold, device, broadcast, cache_dir)
        if gold is not None:
            self._gold_fingerprint = fingerprint
            if self.clusters.cards is None:  # a file saved without cards, or clusters given without them
                self._describe(gold, device)
        return self

    def gold_assignments(self, texts: Sequence[str], *, device: Any = None) -> np.ndarray:
        """The cluster id of every gold response the space was fitted on (read-only; computed once).

        Args:
            texts: the texts given to :meth:`fit` (checked: the ids are theirs).
            device: see :meth:`get_encoder`.

        Returns:
            int64 array, one id per text.

        Raises:
            ValueError: texts other than those :meth:`fit` was given.
        """
        gold = list(texts)
        if self._gold_fingerprint is None or fingerprint_texts(gold) != self._gold_fingerprint:
            raise ValueError(
                "gold_assignments(texts) needs the texts this SemanticSpace was fitted on: fit(texts) first"
            )
        if self._fitted_text_ids is None:
            return self._keep_ids(self.clusters.assign(self.encode(gold, device)))
        return self._fitted_text_ids

    def assign(self, texts: Sequence[str], device: Any = None) -> np.ndarray:
        """The cluster id of each text (embedded, then nearest centroid).

        Args:
            texts: the responses.
            device: see :meth:`get_encoder`.

        Returns:
            int64 array, one id per text.
        """
        return self.clusters.assign(self.encode(texts, device))

    def save(self, path: str | Path) -> Path:
        """Save the clusters (with their cards) to ``path``; :meth:`load` reads them back.

        Args:
            path: an ``.npz`` file (written atomically).

        Returns:
            The path written.
        """
        self.clusters.save(path)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path, encoder: EncoderSource | None = None, **kwargs: Any) -> SemanticSpace:
        """A space around saved clusters; read and checked at once.

        Args:
            path: a clusters file written by :meth:`save` (or ``lightning-div clusters fit``).
            encoder: the encoder they were fitted with; None = the one the file names (its
                ``encoder_name``, ``<model>@<pooling>``).
            **kwargs: the other constructor arguments (``dirpath``, ``batch_size``, ...).

        Returns:
            A fitted SemanticSpace.
        """
        clusters = SemanticClusters.load(path)
        if encoder is None:
            if not clusters.encoder_name:
                raise ValueError(f"{str(path)!r} does not name the encoder it was fitted with: pass encoder=")
            name, _, pooling = clusters.encoder_name.partition("@")
            encoder = name
            if pooling:
                kwargs["encoder_kwargs"] = {"pooling": pooling, **(kwargs.get("encoder_kwargs") or {})}
        space = cls(encoder=encoder, clusters=clusters, num_clusters=clusters.num_clusters, **kwargs)
        space.clusters_path = str(path)
        space._clusters = clusters
        return space

    # -- what the callbacks store ------------------------------------------------------------------

    def identity(self) -> dict[str, Any]:
        """Deprecated in 1.0 (a space describes itself one way: :meth:`settings`): :func:`identity_of`."""
        warn_deprecated("SemanticSpace.identity()", "lightning_div.semantic.space.identity_of(space)")
        return identity_of(self)

    def settings(self) -> dict[str, Any]:
        """What a callback's checkpointed state depends on in this space: a change makes it stale on resume."""
        return {
            "encoder": describe(self.encoder_source),
            "num_clusters": self.num_clusters,
            "variance_kept": self.variance_kept,
            "kmeans_seed": self.kmeans_seed,
        }

    def settings_in_use(self) -> dict[str, Any]:
        """What a measurement in this space was made with, for the run's record: :meth:`settings`, with the
        k, variance and seed of the clusters in use once there are any (clusters given as a file or an object
        hold their own k, whatever ``num_clusters`` says), and ``clusters``: the clusters given, when given.

        :meth:`settings` stays what was asked for: a resumed run compares it before its clusters are read.
        """
        out = self.settings()
        if self._clusters is not None:
            clusters = self._clusters
            out.update(
                num_clusters=clusters.num_clusters, variance_kept=clusters.variance_kept, kmeans_seed=clusters.seed
            )
        if self.clusters_source is not None:
            out["clusters"] = describe(self.clusters_source)
        return out

    def state_dict(self) -> dict[str, Any]:
        """The clusters file in use, so that a resumed run reads the very same clusters."""
        return {"clusters_path": self.clusters_path}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Point a space that holds no clusters yet at the file a checkpoint names (read at :meth:`fit`).

        The file is read only when it was fitted with this space's :meth:`settings` (k, variance kept,
        seed): one of other settings is warned about at :meth:`fit` and the clusters are fitted again,
        as the settings now say.
        """
        path = state.get("clusters_path")
        if self._clusters is None and self.clusters_source is None and path:
            self.clusters_path, self._own_file = str(path), True

    # -- inside ------------------------------------------------------------------------------------

    def _given(self, device: Any) -> SemanticClusters | None:
        """Clusters given by the user, or the file a checkpoint points at, checked against the encoder; None = fit."""
        source = self.clusters_source
        if isinstance(source, SemanticClusters):
            clusters = source
        elif source is not None:
            clusters = SemanticClusters.load(source)
        elif self.clusters_path and Path(self.clusters_path).is_file():
            try:  # the cache file a checkpoint points at: a damaged one, or one of other settings, is refitted
                # (checked here, where every space that restores a checkpoint reads it: a resumed run that asks
                # for another k must never measure in the interrupted run's k)
                clusters = SemanticClusters.load(self.clusters_path, expected=self._fit_config())
            except ValueError as e:
                warnings.warn(
                    f"the cached clusters {self.clusters_path!r} the checkpoint points at cannot be used "
                    f"({e}); fitting them again",
                    stacklevel=3,
                )
                self.clusters_path, self._own_file = None, False
                return None
        else:
            return None
        where = f"the clusters in {self.clusters_path!r}" if self.clusters_path else "the given clusters"
        clusters.check_encoder(self.get_encoder(device), where)
        return clusters

    def _fit_cached(
        self, gold: list[str], device: Any, broadcast: Broadcast | None, cache_dir: str | Path | None
    ) -> None:
        from lightning_div.semantic.cache import load_or_fit_clusters

        directory = self.dirpath or cache_dir
        if directory is None:
            raise ValueError(
                "SemanticSpace.fit needs a cache directory for the fitted clusters: SemanticSpace(dirpath=...) "
                "or fit(texts, cache_dir=...)"
            )
        Path(directory).mkdir(parents=True, exist_ok=True)
        cached = load_or_fit_clusters(
            directory,
            gold,
            self.get_encoder(device),
            with_assignments=True,
            broadcast=broadcast,
            show_progress=self.show_progress,
            **self._fit_config(),
        )
        self._clusters, self.clusters_path, self._own_file = cached.clusters, str(cached.path), True
        if cached.assignments is not None:
            self._keep_ids(cached.assignments)

    def _describe(self, gold: list[str], device: Any) -> None:
        """Cards from the gold responses (every rank: embedding is sharded); saved into our own cache file only."""
        from lightning_div._internal.distributed import rank_and_world

        clusters = self.clusters
        embeddings = self.encode(gold, device)
        clusters.describe(gold, embeddings)
        if self._fitted_text_ids is None:  # the embeddings are at hand: the ids cost no second pass
            self._keep_ids(clusters.assign(embeddings))
        if self._own_file and self.clusters_path and rank_and_world()[0] == 0:
            clusters.save(self.clusters_path)

    def _keep_ids(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        ids.setflags(write=False)  # one array for every callback sharing the space: an edit in place is an error
        self._fitted_text_ids = ids
        return ids


def identity_of(space: SemanticSpace) -> dict[str, Any]:
    """What tells two front ends' spaces apart in their checkpoint state keys: the encoder, and the clusters file given.

    Settings such as ``num_clusters`` are left out on purpose: a resume with a changed setting must
    find its state, so that the change is detected and said (see :meth:`SemanticSpace.settings`).
    """
    out: dict[str, Any] = {"encoder": describe(space.encoder_source)}
    if isinstance(space.clusters_source, (str, os.PathLike)):
        out["clusters"] = describe(space.clusters_source)
    return out


def given_space(owner: str, space: SemanticSpace | None, **private: Any) -> SemanticSpace:
    """The space a front end that takes only ``space=`` measures in: ``space``, or a private one.

    Args:
        owner: the front end's class name (for the error).
        space: a space given by the user, or None.
        **private: ``batch_size`` / ``show_progress`` of a private space (the space's defaults otherwise).

    Raises:
        TypeError: ``space`` is not a SemanticSpace.
    """
    if space is None:
        return SemanticSpace(**private)
    if not isinstance(space, SemanticSpace):
        raise TypeError(f"{owner}: space must be a lightning_div.SemanticSpace, got {type(space).__name__}")
    return space


def space_from_arguments(owner: str, space: SemanticSpace | None, **arguments: Any) -> SemanticSpace:
    """The space of a Lightning callback, which takes the space's settings flat (``LightningCLI`` needs
    them there): ``space`` itself, or a private one built from the settings.

    Args:
        owner: the callback's class name (for the error).
        space: a space given by the user, or None.
        **arguments: the :data:`SPACE_ARGUMENTS`, by explicit keyword (None = not given: the space's
            default), and ``batch_size`` / ``show_progress`` (used only for a private space).

    Returns:
        The SemanticSpace.

    Raises:
        ValueError: ``space`` and any space argument given together.
        TypeError: ``space`` is not a SemanticSpace.
    """
    given = {k: arguments[k] for k in SPACE_ARGUMENTS if arguments.get(k) is not None}
    private = {k: v for k, v in arguments.items() if k not in SPACE_ARGUMENTS}
    if space is not None and given:
        raise ValueError(
            f"{owner}: space= and {', '.join(f'{k}=' for k in given)} were both given: the space's "
            "settings live on the SemanticSpace (SemanticSpace(encoder=..., num_clusters=...)); pass them "
            "there, or drop space= for a space of this callback's own"
        )
    return given_space(owner, space, **private) if space is not None else SemanticSpace(**given, **private)
