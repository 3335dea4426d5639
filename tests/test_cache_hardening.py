"""Issue 31, round three: the clusters' disk cache under damage, kills and umasks.

A cache entry that cannot be loaded *for any reason* is a cache miss (rebuilt, said once),
never a traceback on every later run; temporary files a killed writer left are cleaned up;
what lightning-div writes is as readable as the umask allows.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from lightning_div.semantic.cache import load_or_fit_clusters
from lightning_div.semantic.clusters import SemanticClusters

TEXTS = [f"response number {i}" for i in range(60)]
VECTORS = {t: np.random.default_rng(i).normal(size=8).astype(np.float32) for i, t in enumerate(TEXTS)}


class Encoder:
    """Fixed 8-d embeddings of TEXTS (no model), counting its calls."""

    name, fingerprint = "enc", "w1"

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, texts):
        self.calls += 1
        return np.stack([VECTORS[t] for t in texts])


def load(cache: Path, encoder: Encoder | None = None):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*faiss recommends")
        return load_or_fit_clusters(
            cache,
            TEXTS,
            encoder or Encoder(),
            with_assignments=True,
            num_clusters=3,
            niter=10,
            nredo=1,
            show_progress=False,
        )


def cache_warnings(record) -> list[str]:
    return [str(w.message) for w in record if "cannot be used" in str(w.message)]


@pytest.mark.parametrize("which", ["clusters", "assignments"])
def test_random_byte_flips_in_a_cache_entry_never_crash(tmp_path, which):
    """Issue 31 C13: one flipped byte gave NotImplementedError / RuntimeError('encrypted') / TokenError on every fit."""
    first = load(tmp_path)
    (victim,) = tmp_path.glob("assignments-*.npz" if which == "assignments" else "clusters-*.npz")
    good = victim.read_bytes()
    rng = np.random.default_rng(31)
    warned = 0
    for trial in range(150):
        data = bytearray(good)
        position = int(rng.integers(len(data)))
        data[position] ^= int(rng.integers(1, 256))
        victim.write_bytes(bytes(data))
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            again = load(tmp_path)
        said = cache_warnings(record)
        assert len(said) <= 1, (trial, position, said)  # said once, naming the file
        assert all(victim.name in s for s in said), said
        warned += len(said)
        np.testing.assert_array_equal(again.clusters.centroids, first.clusters.centroids)
        np.testing.assert_array_equal(again.assignments, first.assignments)
        victim.write_bytes(good)
    assert warned > 100  # most flips are caught (the zip's CRC); the rest hit bytes no reader uses


def without_niter(path: Path) -> None:
    """Rewrite a clusters file with ``niter`` taken out of its config (its hash made to match, as an older writer's)."""
    from lightning_div.semantic.clusters import _hash_config

    with np.load(path) as data:
        arrays = {name: np.array(data[name]) for name in data.files}
    config = json.loads(str(arrays["config"]))
    del config["niter"]
    arrays["config"] = np.array(json.dumps(config))
    arrays["config_hash"] = np.array(_hash_config(config))
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def test_a_clusters_file_without_niter_is_named_and_a_cache_entry_heals(tmp_path):
    """Issue 31 C15: ``KeyError: 'niter'`` with no file name, on every run."""
    first = load(tmp_path)
    without_niter(first.path)
    with pytest.raises(ValueError, match=rf"{first.path.name}': its config has no niter \(written by another"):
        SemanticClusters.load(first.path)
    with pytest.warns(UserWarning, match=rf"cached clusters '.*{first.path.name}' cannot be used") as record:
        again = load(tmp_path)
    assert len(cache_warnings(record)) == 1
    np.testing.assert_array_equal(again.clusters.centroids, first.clusters.centroids)
    assert SemanticClusters.load(first.path).niter == 10  # rewritten: the next run reads it without a word
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load(tmp_path)


def test_a_damaged_clusters_file_is_a_value_error_naming_it(tmp_path):
    """A file the user names (clusters=, --clusters) that is damaged: one error naming it, whatever broke."""
    first = load(tmp_path)
    data = bytearray(first.path.read_bytes())
    data[data.rfind(b"PK\x01\x02") + 10] ^= 0x55  # the last member's compression method, in the central directory
    first.path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"'{first.path}' is not a SemanticClusters file \("):
        SemanticClusters.load(first.path)


def test_a_writer_killed_mid_write_leaves_no_temporary_file_for_long(tmp_path):
    """Issue 31 CB7: SIGKILL during a cache write left ``.clusters-<h>.npz.*.tmp`` forever."""
    from helpers import kill_when_ready

    probe, cache, ready = tmp_path / "probe", tmp_path / "cache", tmp_path / "ready"
    probe.mkdir()
    cache.mkdir()
    name = load(probe).path.name  # the cache entry's name (the same in any cache directory)
    # a writer of this very cache entry, killed after writing half of it
    child = (
        "import time, pathlib\n"
        "from lightning_div._internal.io import atomic_write\n"
        f"with atomic_write({str(cache / name)!r}) as f:\n"
        "    f.write(b'half'); f.flush()\n"
        f"    pathlib.Path({str(ready)!r}).touch(); time.sleep(600)\n"
    )
    kill_when_ready(child, ready)
    (left,) = cache.glob(".clusters-*.npz.*.tmp")  # what the killed writer left
    first = load(cache)  # the next run fits, writes and cleans up after the dead writer
    assert not list(cache.glob(".*.tmp")), list(cache.iterdir())
    assert sorted(p.name for p in cache.iterdir()) == sorted([first.path.name, f"assignments-{first.path.stem}.npz"])
    # a writer killed while rewriting an entry the next run finds whole: cleaned up on that hit too
    host = left.name.split(".")[-3].split("-")[0]  # .clusters-<h>.npz.<host>-<pid>.<random>.tmp
    dead = cache / f".{first.path.name}.{host}-999999999.0a1b.tmp"
    dead.write_bytes(b"half")
    load(cache)
    assert not dead.exists()


def test_only_temporary_files_of_dead_writers_or_old_ones_are_removed(tmp_path):
    from lightning_div._internal.io import atomic_write, remove_stale_temporaries

    target = tmp_path / "scores.json"
    with atomic_write(target, "w") as f:  # a live writer (this process) holds a temporary file
        f.write("{}")
        (live,) = tmp_path.glob(".scores.json.*.tmp")
        dead = tmp_path / live.name.replace(f"-{os.getpid()}.", "-999999999.")  # this host, no such process
        dead.write_text("half")
        other_host = tmp_path / ".scores.json.0badc0de-1.abcd.tmp"  # another machine's writer, on shared storage
        other_host.write_text("half")
        old = tmp_path / ".scores.json.f00dd00d-2.efgh.tmp"
        old.write_text("half")
        two_days_ago = time.time() - 2 * 86400
        os.utime(old, (two_days_ago, two_days_ago))
        before = tmp_path / ".scores.json.tf6c_7hp.tmp"  # mkstemp's name, before writers were named: by age
        before.write_text("half")
        os.utime(before, (two_days_ago, two_days_ago))
        unrelated = tmp_path / ".other.tmp"  # not a name atomic_write makes
        unrelated.write_text("keep")
        os.utime(unrelated, (two_days_ago, two_days_ago))
        removed = remove_stale_temporaries(tmp_path)
        assert sorted(removed) == sorted([dead, old, before])
        assert live.exists() and other_host.exists() and unrelated.exists()
    assert target.read_text() == "{}" and not live.exists()


def test_files_written_honour_the_umask(tmp_path):
    """Issue 31 CB8: every file lightning-div wrote was 0600 (mkstemp), whatever the umask."""
    from lightning_div._internal.io import atomic_directory, atomic_write_text

    old = os.umask(0o022)
    try:
        file = atomic_write_text(tmp_path / "report.html", "<html></html>")
        folder = atomic_directory(tmp_path / "tokenizer", lambda d: (d / "tokenizer.json").write_text("{}"))
        (tmp_path / "cache").mkdir()
        cached = load(tmp_path / "cache")
        os.umask(0o077)
        private = atomic_write_text(tmp_path / "private.txt", "secret")
    finally:
        os.umask(old)
    assert file.stat().st_mode & 0o777 == 0o644  # as Lightning's own metrics.csv
    assert cached.path.stat().st_mode & 0o777 == 0o644
    assert folder.stat().st_mode & 0o777 == 0o755 and (folder / "tokenizer.json").stat().st_mode & 0o777 == 0o644
    assert private.stat().st_mode & 0o777 == 0o600  # a stricter umask is honoured too
