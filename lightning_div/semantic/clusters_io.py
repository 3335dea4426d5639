"""A SemanticClusters file: what :meth:`SemanticClusters.save` writes and :meth:`SemanticClusters.load` reads.

One ``.npz`` file holds the PCA, the centroids and the config the clusters were fitted with
(encoder name and weights fingerprint, k, seed, variance kept, niter, nredo, sampling, data
fingerprint) with the config's hash, and the cluster cards when there are any. It is written
atomically (a kill mid-write leaves no partial file). Reading it checks everything: a file that
cannot be read for any reason is a ValueError naming it, and ``expected`` names each config
field that differs from what a run asks for.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_div._internal.io import atomic_write

if TYPE_CHECKING:
    from lightning_div.semantic.clusters import SemanticClusters

__all__ = [
    "CONFIG_FIELDS",
    "FORMAT_VERSION",
    "fingerprint_texts",
    "hash_config",
    "read_clusters_file",
    "write_clusters_file",
]

FORMAT_VERSION = 1
CONFIG_FIELDS = (
    "encoder_name",
    "encoder_fingerprint",
    "num_clusters",
    "seed",
    "variance_kept",
    "niter",
    "nredo",
    "max_points_per_centroid",
    "data_fingerprint",
)


def fingerprint_texts(texts: Sequence[str]) -> str:
    """Stable, order-sensitive hash of a list of texts (same list -> same hex string, in any process).

    Args:
        texts: the texts, in order.

    Returns:
        A hex digest (part of the clusters' config).
    """
    if isinstance(texts, (str, bytes)):
        raise TypeError("texts must be a sequence of strings, not a single string")
    h = hashlib.blake2b(digest_size=16)
    n = 0
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] is {type(text).__name__}, expected str")
        data = text.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))  # length prefix: ["ab", "c"] != ["a", "bc"]
        h.update(data)
        n += 1
    h.update(n.to_bytes(8, "little"))
    return h.hexdigest()


def hash_config(config: dict[str, Any]) -> str:
    """16 hex characters identifying a clusters config (its JSON with sorted keys, SHA-256)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def write_clusters_file(clusters: SemanticClusters, path: str | os.PathLike) -> Path:
    """Write fitted ``clusters`` to ``path`` (.npz, atomically); see :meth:`SemanticClusters.save`.

    Raises:
        RuntimeError: the clusters are not fitted.
        OSError: the path cannot be written (naming it; no temporary file is left behind).
    """
    path = Path(path)
    mean, components, centroids = clusters._arrays()
    extra: dict[str, Any] = (
        {}
        if clusters.cards is None  # optional: files without cards still load
        else {"cards": np.array(json.dumps([c.to_dict() for c in clusters.cards]))}
    )
    try:
        # a file object: np.savez would otherwise append ".npz"; atomic: a kill mid-write leaves no partial file
        with atomic_write(path, "wb") as f:
            np.savez(
                f,
                format_version=np.int64(FORMAT_VERSION),
                config=np.array(json.dumps(clusters.config)),
                config_hash=np.array(clusters.config_hash),
                pca_mean=mean,
                pca_components=components,
                centroids=centroids,
                explained_variance=np.float64(clusters.explained_variance),
                inertia=np.float64(np.nan if clusters.inertia is None else clusters.inertia),
                **extra,
            )
    except OSError as e:
        message = f"cannot save SemanticClusters to {str(path)!r}: {e.strerror or e}"
        raise (type(e)(e.errno, message) if e.errno is not None else type(e)(message)) from e
    return path


def read_clusters_file(
    cls: type[SemanticClusters], path: str | os.PathLike, expected: dict[str, Any] | None = None
) -> SemanticClusters:
    """The clusters a file holds, as a ``cls``; see :meth:`SemanticClusters.load`.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: a damaged or foreign file, or one fitted under another config than ``expected``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no SemanticClusters file at {str(path)!r}")
    where = repr(str(path))
    contents = _read_contents(path)
    config = contents["config"]
    if hash_config(config) != contents["config_hash"]:
        raise ValueError(f"{where}: its config does not match its config hash (edited or corrupted)")
    if expected is not None:
        unknown = sorted(set(expected) - set(CONFIG_FIELDS))
        if unknown:
            raise ValueError(f"unknown config fields {unknown}; known: {list(CONFIG_FIELDS)}")
        diffs = [
            f"{name}: file has {config.get(name)!r}, requested {value!r}"
            for name, value in expected.items()
            if not _equal_as_numbers(config.get(name), value)
        ]
        if diffs:
            raise ValueError(f"{where} was fitted with a different config — " + "; ".join(diffs))
    # the encoder's fingerprint is the one field a file may lack: a file of this format version without it
    # still loads
    missing = [name for name in CONFIG_FIELDS if name not in config and name != "encoder_fingerprint"]
    if missing:
        raise ValueError(
            f"{where}: its config has no {', '.join(missing)} (written by another version, or edited); "
            "fit the clusters again"
        )
    try:
        return _from_contents(cls, contents)
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # a config value of the wrong type
        raise ValueError(f"{where} is not a usable SemanticClusters file ({type(e).__name__}: {e})") from e


def _from_contents(cls: type[SemanticClusters], contents: dict[str, Any]) -> SemanticClusters:
    """The clusters :func:`_read_contents` read, checked for shape (the file's name added by the caller)."""
    config = contents["config"]
    out = cls(
        num_clusters=config["num_clusters"],
        variance_kept=config["variance_kept"],
        niter=config["niter"],
        nredo=config["nredo"],
        seed=config["seed"],
        encoder_name=config["encoder_name"],
        max_points_per_centroid=config["max_points_per_centroid"],
    )
    out.data_fingerprint = config["data_fingerprint"]
    out.encoder_fingerprint = config.get("encoder_fingerprint")
    out.pca_mean, out.pca_components = contents["pca_mean"], contents["pca_components"]
    out.centroids = contents["centroids"]
    inertia = contents["inertia"]
    out.explained_variance, out.inertia = contents["explained_variance"], (None if np.isnan(inertia) else inertia)
    if out.pca_mean.ndim != 1 or out.pca_components.shape[1:] != out.pca_mean.shape:
        raise ValueError(f"PCA mean {out.pca_mean.shape} and components {out.pca_components.shape} do not fit")
    if out.centroids.shape != (out.num_clusters, out.n_components):
        raise ValueError(
            f"centroids have shape {out.centroids.shape}, expected ({out.num_clusters}, {out.n_components})"
        )
    if contents["cards"] is not None:
        from lightning_div.semantic.cards import cards_from_dicts

        loaded = cards_from_dicts(contents["cards"]) or []
        if len(loaded) != out.num_clusters:
            raise ValueError(f"{len(loaded)} cluster cards for {out.num_clusters} clusters")
        out.cards = loaded
    return out


def _read_contents(path: Path) -> dict[str, Any]:
    """Everything a clusters file holds, as plain values; any failure is a ValueError naming the file.

    A damaged zip fails in many ways (``BadZipFile``, a "compression method not supported"
    ``NotImplementedError``, an "encrypted" ``RuntimeError``, a ``tokenize.TokenError`` from a
    garbled array header, ...), none of them a bug of ours: every one means "not a usable file".
    """
    try:
        with np.load(path, allow_pickle=False) as data:
            version = int(data["format_version"])
            if version != FORMAT_VERSION:
                raise ValueError(f"it has format version {version}; this version reads {FORMAT_VERSION}")
            contents: dict[str, Any] = {
                "config": json.loads(str(data["config"])),
                "config_hash": str(data["config_hash"]),
                **{name: np.array(data[name]) for name in ("pca_mean", "pca_components", "centroids")},
                "explained_variance": float(data["explained_variance"]),
                "inertia": float(data["inertia"]),
                "cards": json.loads(str(data["cards"])) if "cards" in data.files else None,
            }
    except Exception as e:  # any failure to parse is a damaged file (see above)
        raise ValueError(f"{str(path)!r} is not a SemanticClusters file ({type(e).__name__}: {e})") from e
    if not isinstance(contents["config"], dict):
        raise ValueError(f"{str(path)!r} is not a SemanticClusters file (its config is not a JSON object)")
    return contents


def _equal_as_numbers(a: Any, b: Any) -> bool:
    """``a == b``, with an int and a float of the same value equal (a config's ``0.9`` and ``0.90``, ``10`` and ``10.0``)."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b
