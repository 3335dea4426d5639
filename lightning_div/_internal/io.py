"""Atomic writes and checked reads: every file lightning-div writes is either complete or absent.

A file is written to a temporary file in the same directory, flushed and ``fsync``-ed,
then renamed over the target with :func:`os.replace` (atomic on POSIX and Windows within
one file system). A process killed mid-write, a full disk or a reader arriving during a
slow write therefore never sees a half-written file: it sees the old file or the new one.
The temporary file is removed when the write fails, and the error names the target path.

A writer killed outright (``SIGKILL``, a lost node) cannot remove its temporary file. Its name
says who wrote it (``.<target>.<host>-<pid>.<random>.tmp``, the host as a short hash), so the
next write of the same target, and :func:`remove_stale_temporaries`, remove it once that
process is gone from this host, or once it is :data:`STALE_AFTER_S` old (a writer on another
host sharing the storage, whose process cannot be checked from here).

Files and folders are created with the mode the umask gives (``0644`` / ``0755`` under the usual
``022``), as ``open`` would, not ``mkstemp``'s private ``0600``: a team's runs, caches and
reports are readable where the umask says so.

:func:`save_assignments` / :func:`load_assignments` store the gold responses' cluster ids
together with what ties them to their clusters file (its config hash, the number of texts
and the id range), so a stale or foreign assignments file is detected on read.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import secrets
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is imported by the two functions that use it: the command line's --help stays light
    import numpy as np

__all__ = [
    "StaleCacheError",
    "atomic_directory",
    "atomic_write",
    "atomic_write_with",
    "atomic_write_bytes",
    "atomic_write_text",
    "file_digest",
    "load_assignments",
    "remove_stale_temporaries",
    "save_assignments",
]

# a temporary file or folder nobody has touched for this long is a dead writer's, wherever it ran
STALE_AFTER_S = 24 * 3600.0
_HOST = hashlib.blake2b(socket.gethostname().encode(), digest_size=4).hexdigest()
_TEMPORARY = re.compile(r"^\.(?P<target>.+)\.(?P<host>[0-9a-f]{8})-(?P<pid>\d+)\.[^.]+\.tmp$")
# what tempfile.mkstemp / mkdtemp made before (no writer in the name): removed by age alone
_OLD_TEMPORARY = re.compile(r"^\.(?P<target>.+)\.[a-z0-9_]{8}\.tmp$")


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


def _temporary_name(target: Path) -> Path:
    """A fresh name beside ``target`` that says which host and process writes it (see the module doc)."""
    return target.with_name(f".{target.name}.{_HOST}-{os.getpid()}.{secrets.token_hex(4)}.tmp")


def _create_temporary(target: Path, directory: bool = False) -> tuple[Path, int | None]:
    """Create a temporary file (opened: its descriptor) or folder beside ``target``, with the umask's mode.

    ``os.open(..., 0o666)`` / ``os.mkdir(..., 0o777)`` let the umask (and a default ACL) decide the
    mode, as ``open`` does; ``O_EXCL`` makes the name ours alone, as ``mkstemp`` does.
    """
    remove_stale_temporaries(target.parent, target.name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = _temporary_name(target)
        try:
            if directory:
                os.mkdir(tmp, 0o777)
                return tmp, None
            return tmp, os.open(tmp, flags, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {str(target)!r}")


def _writer_is_gone(host: str, pid: int) -> bool:
    """Whether process ``pid`` of host ``host`` (its hash) has certainly ended; unknown for other hosts."""
    if host != _HOST:
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return True
    except OSError:  # it exists, run by another user (PermissionError)
        return False
    return False


def remove_stale_temporaries(directory: str | os.PathLike, prefix: str = "") -> list[Path]:
    """Remove the temporary files and folders killed writers left in ``directory``; returns what was removed.

    Only names :func:`atomic_write` / :func:`atomic_directory` make (``.<target>.<host>-<pid>.<random>.tmp``,
    and the ``.<target>.<8 characters>.tmp`` of versions before 0.2), for targets whose name starts
    with ``prefix``. One is removed when its writer's process is gone from this host, or when it has
    not been modified for :data:`STALE_AFTER_S` (a writer on another host, a reused process id, an
    old name without a writer). A live writer's temporary file is never touched; failures are
    ignored (another process may remove or rename the same file at the same time).

    Args:
        directory: where to look (not recursively).
        prefix: only temporaries of targets whose name starts with this ("" = all).

    Returns:
        The paths removed.
    """
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(os.fspath(directory)):
            match = _TEMPORARY.match(entry.name) or _OLD_TEMPORARY.match(entry.name)
            if not match or not match["target"].startswith(prefix):
                continue
            path = Path(entry.path)
            with contextlib.suppress(OSError):
                stale = time.time() - entry.stat(follow_symlinks=False).st_mtime > STALE_AFTER_S
                writer = match.groupdict().get("pid")
                if stale or (writer is not None and _writer_is_gone(match["host"], int(writer))):
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(path)
                    else:
                        path.unlink()
                    removed.append(path)
    return removed


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
        tmp, fd = _create_temporary(target)
        assert fd is not None  # a file's descriptor
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


def atomic_write_with(path: str | os.PathLike, write: Callable[[IO[Any]], Any], mode: str = "w") -> Path:
    """Call ``write(file)`` on an :func:`atomic_write` file: for callers that hold a writer function.

    Text mode (``"w"``) writes UTF-8 with ``newline=""`` (what :mod:`csv` wants); ``"wb"`` writes
    bytes. The missing parent directories are created. Returns the path.
    """
    text = "b" not in mode
    with atomic_write(
        path,
        "w" if text else "wb",
        encoding="utf-8" if text else None,
        newline="" if text else None,
        make_parents=True,
    ) as f:
        write(f)
    return Path(path)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns the path."""
    with atomic_write(path, "wb") as f:
        f.write(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically; returns the path."""
    return atomic_write_bytes(path, text.encode(encoding))


def atomic_directory(
    path: str | os.PathLike, fill: Callable[[Path], Any], valid: Callable[[Path], bool] | None = None
) -> Path:
    """Build a directory with ``fill(tmp_dir)`` beside ``path``, then rename it into place.

    For multi-file caches (a saved tokenizer, LitData chunks): a reader sees the complete directory
    or none. With ``valid``, a directory it accepts that another process put at ``path`` while ours
    was being built is kept and ours discarded (two writers of one content: the first complete one
    wins, and its readers are never disturbed); one it refuses is replaced. Without ``valid`` an
    existing directory (an invalid old entry: the caller decided so) is replaced, unless a concurrent
    writer puts one back before our rename.

    Raises:
        OSError: of the original kind (``ENOSPC`` kept), naming ``path``; no temporary folder is left.
    """
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = _create_temporary(target, directory=True)[0]
    except OSError as e:
        raise _named(e, target) from e
    try:
        fill(tmp)
        for f in tmp.iterdir():
            if f.is_file():
                with open(f, "rb") as handle:
                    os.fsync(handle.fileno())
        if target.exists():
            if valid is not None and valid(target):
                return target  # another writer's complete directory came first: theirs is kept
            shutil.rmtree(target, ignore_errors=True)
        try:
            os.replace(tmp, target)
        except OSError:  # a directory appeared meanwhile (ENOTEMPTY / EEXIST): a concurrent writer's
            if not target.is_dir() or (valid is not None and not valid(target)):
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
    import numpy as np

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
    import numpy as np

    where = str(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            ids = np.array(data["ids"])
            stored_hash, stored_k = str(data["clusters_hash"]), int(data["num_clusters"])
            stored_len = int(data["length"])
    except Exception as e:  # a damaged zip fails in many ways; each means "not a usable file"
        # (BadZipFile, NotImplementedError for a garbled compression method, RuntimeError "encrypted",
        # tokenize.TokenError from a garbled array header, TypeError for a bare .npy array, ...)
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
