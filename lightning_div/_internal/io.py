"""Atomic writes and checked reads: every file lightning-div writes is either complete or absent.

A file is written to a temporary file in the same directory, flushed and ``fsync``-ed,
then renamed over the target with :func:`os.replace` (atomic on POSIX and Windows within
one file system). A process killed mid-write, a full disk or a reader arriving during a
slow write therefore never sees a half-written file: it sees the old file or the new one.
The temporary file is removed when the write fails, and the error names the target path.

:func:`save_assignments` / :func:`load_assignments` store the gold responses' cluster ids
together with what ties them to their clusters file (its config hash, the number of texts
and the id range), so a stale or foreign assignments file is detected on read.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

__all__ = [
    "StaleCacheError",
    "atomic_directory",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "file_digest",
    "load_assignments",
    "save_assignments",
]


class StaleCacheError(ValueError):
    """A cache file that cannot be used (truncated, corrupted, or written for other inputs)."""


def _named(e: OSError, target: Path) -> OSError:
    """The same kind of OSError (errno kept: ENOSPC stays ENOSPC), its message naming ``target``."""
    message = f"cannot write {str(target)!r}: {e.strerror or e}"
    return type(e)(e.errno, message) if e.errno is not None else type(e)(message)


def file_digest(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes (hex), read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_dir(directory: Path) -> None:
    # the rename itself is durable only once the directory entry is on disk (POSIX); best effort elsewhere
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike,
    mode: str = "wb",
    encoding: str | None = None,
    newline: str | None = None,
    make_parents: bool = False,
) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; on a clean exit it replaces ``path`` atomically.

    Args:
        path: the file to (re)write.
        mode: ``"wb"`` or ``"w"``.
        encoding: as for :func:`open` in text mode.
        newline: as for :func:`open` in text mode.
        make_parents: create missing parent directories (else a missing directory is an error).

    Raises:
        OSError: of the original kind (``ENOSPC`` for a full disk, ...), with a message
            naming ``path``; nothing is left at ``path`` or beside it.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write mode must be 'w' or 'wb', got {mode!r}")
    target = Path(path)
    tmp: Path | None = None
    try:
        if make_parents:
            target.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        tmp = Path(name)
        with os.fdopen(fd, mode, encoding=encoding, newline=newline) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
        tmp = None
        _fsync_dir(target.parent)
    except OSError as e:
        raise _named(e, target) from e
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns the path."""
    with atomic_write(path, "wb") as f:
        f.write(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically; returns the path."""
    return atomic_write_bytes(path, text.encode(encoding))


def atomic_directory(path: str | os.PathLike, fill: Callable[[Path], Any]) -> Path:
    """Build a directory with ``fill(tmp_dir)`` beside ``path``, then rename it into place.

    For multi-file caches (a saved tokenizer): a reader sees the complete directory or none.
    If another process put a complete directory there first, theirs is kept.
    """
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    except OSError as e:
        raise _named(e, target) from e
    try:
        fill(tmp)
        for f in tmp.iterdir():
            if f.is_file():
                with open(f, "rb") as handle:
                    os.fsync(handle.fileno())
        if target.exists():  # an invalid old entry (the caller decided so) or a concurrent writer's
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.replace(tmp, target)
        except OSError:
            if not target.is_dir():
                raise
        _fsync_dir(target.parent)
    except OSError as e:
        raise _named(e, target) from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


# ------------------------------------------------------------------------------------ assignments


def save_assignments(path: str | os.PathLike, ids: np.ndarray, clusters_hash: str, num_clusters: int) -> Path:
    """Cluster ids of the gold texts, with the clusters file's hash (:func:`file_digest`) and k, written atomically."""
    ids = np.asarray(ids, dtype=np.int64)
    buffer = io.BytesIO()
    np.savez(
        buffer,
        ids=ids,
        clusters_hash=np.array(clusters_hash),
        num_clusters=np.int64(num_clusters),
        length=np.int64(len(ids)),
    )
    return atomic_write_bytes(path, buffer.getvalue())


def load_assignments(path: str | os.PathLike, clusters_hash: str, num_clusters: int, length: int) -> np.ndarray:
    """Read :func:`save_assignments`'s file and check it belongs to these clusters and texts.

    Raises:
        StaleCacheError: naming the file and what does not match (truncated or not ours,
            another clusters file, another number of texts, an id outside ``[0, num_clusters)``).
    """
    where = str(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            ids = np.array(data["ids"])
            stored_hash, stored_k = str(data["clusters_hash"]), int(data["num_clusters"])
            stored_len = int(data["length"])
    except (KeyError, OSError, ValueError, EOFError, TypeError, AttributeError, zipfile.BadZipFile) as e:
        # TypeError/AttributeError: a bare .npy array where the archive should be
        raise StaleCacheError(f"{where!r} is not a complete assignments file ({type(e).__name__}: {e})") from e
    if stored_hash != clusters_hash or stored_k != num_clusters:
        raise StaleCacheError(
            f"{where!r} belongs to clusters {stored_hash} (k={stored_k}), not to {clusters_hash} (k={num_clusters})"
        )
    if ids.ndim != 1 or len(ids) != stored_len or stored_len != length:
        raise StaleCacheError(f"{where!r} holds {len(ids)} ids (header: {stored_len}) for {length} texts")
    if not np.issubdtype(ids.dtype, np.integer):
        raise StaleCacheError(f"{where!r} holds {ids.dtype} ids, expected integers")
    if len(ids) and (ids.min() < 0 or ids.max() >= num_clusters):
        raise StaleCacheError(f"{where!r} holds ids in [{ids.min()}, {ids.max()}], outside [0, {num_clusters})")
    return ids.astype(np.int64)
