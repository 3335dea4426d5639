"""The clusters' disk cache (lightning_div.semantic.cache): damage, kills, umasks, the encoder's weights in the key.

A cache entry that cannot be loaded *for any reason* is a cache miss (rebuilt, said once),
never a traceback on every later run; assignments killed mid-write or of other clusters are
recomputed; temporary files a killed writer left are cleaned up; what lightning-div writes is
as readable as the umask allows; other weights at one encoder path get their own clusters.
"""

from __future__ import annotations

import json
import os
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from fakes import CountingEncoder, VectorEncoder, hashed_encoder
from helpers import kill_when_ready

from lightning_div._internal.io import load_assignments, save_assignments
from lightning_div.semantic.cache import assignments_path, load_or_fit_clusters
from lightning_div.semantic.clusters import SemanticClusters

FIXED_TEXTS = [f"response number {i}" for i in range(60)]
VECTORS = {t: np.random.default_rng(i).normal(size=8).astype(np.float32) for i, t in enumerate(FIXED_TEXTS)}


def fixed_encoder() -> CountingEncoder:
    """Fixed 8-d embeddings of FIXED_TEXTS (no model), counting its calls."""
    return CountingEncoder(VectorEncoder(VECTORS.__getitem__, 8, name="enc", fingerprint="w1"))


def load(cache: Path, encoder: CountingEncoder | None = None):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*faiss recommends")
        return load_or_fit_clusters(
            cache,
            FIXED_TEXTS,
            encoder or fixed_encoder(),
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
    from lightning_div.semantic.clusters_io import hash_config

    with np.load(path) as data:
        arrays = {name: np.array(data[name]) for name in data.files}
    config = json.loads(str(arrays["config"]))
    del config["niter"]
    arrays["config"] = np.array(json.dumps(config))
    arrays["config_hash"] = np.array(hash_config(config))
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


# Atomic writes, verified reads, the encoder's weights in the key


TEXTS = [f"response number {i}" for i in range(120)]


#: What ``fit_cached`` asks the cache for (the killed child of a test asks the same).
FIT = dict(with_assignments=True, num_clusters=4, niter=10, nredo=1, show_progress=False)


def fit_cached(cache: Path, encoder=None, **kw):
    encoder = encoder or hashed_encoder()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*faiss recommends")
        cached = load_or_fit_clusters(cache, TEXTS, encoder, **FIT, **kw)
        return (cached.clusters, cached.assignments), encoder


def test_assignments_killed_mid_write_are_recomputed_not_a_crash(tmp_path):
    """The reported crash: a kill while the assignments were written broke every later run."""
    cache = tmp_path / "cache"
    cache.mkdir()
    ready = tmp_path / "ready"
    child = textwrap.dedent(f"""
        import os, time
        from pathlib import Path
        import lightning_div._internal.io as io
        from fakes import hashed_encoder
        from lightning_div.semantic.cache import load_or_fit_clusters

        real_replace = os.replace
        def slow_replace(src, dst):  # the assignments file is written, not yet in place: killed here
            if Path(dst).name.startswith("assignments-"):
                Path({str(ready)!r}).touch()
                time.sleep(600)
            real_replace(src, dst)
        io.os.replace = slow_replace
        load_or_fit_clusters(Path({str(cache)!r}), {TEXTS!r}, hashed_encoder(), **{FIT!r})
    """)
    kill_when_ready(child, ready)
    assert list(cache.glob("clusters-*.npz")) and not list(cache.glob("assignments-*.npz"))
    (clusters, ids), encoder = fit_cached(cache)  # the next run: clusters from disk, ids assigned again
    assert encoder.calls == 1 and ids.shape == (120,)
    np.testing.assert_array_equal(ids, clusters.assign(hashed_encoder().encode(TEXTS)))


def test_a_truncated_assignments_file_is_refitted_with_one_warning(tmp_path):
    (clusters, ids), _ = fit_cached(tmp_path)
    ids_file = assignments_path(tmp_path / f"clusters-{clusters.config_hash}.npz")
    data = ids_file.read_bytes()
    ids_file.write_bytes(data[: len(data) // 2])  # what a plain np.save left behind when killed
    with pytest.warns(
        UserWarning,
        match=rf"cached assignments cannot be used \('.*{ids_file.name}' is not a "
        "complete assignments file",
    ):
        (_, again), encoder = fit_cached(tmp_path)
    assert encoder.calls == 1
    np.testing.assert_array_equal(again, ids)
    (_, third), encoder = fit_cached(tmp_path)  # rewritten: the next run reads it
    assert encoder.calls == 0 and np.array_equal(third, ids)


def test_assignments_of_other_clusters_are_detected(tmp_path):
    (clusters, ids), _ = fit_cached(tmp_path)
    ids_file = assignments_path(tmp_path / f"clusters-{clusters.config_hash}.npz")
    save_assignments(ids_file, (ids + 1) % 4, "0" * 64, 4)  # another clusters file's ids
    with pytest.warns(UserWarning, match=r"belongs to clusters 0000"):
        (_, again), _ = fit_cached(tmp_path)
    np.testing.assert_array_equal(again, ids)
    with pytest.raises(ValueError, match=r"holds 120 ids .* for 7 texts"):
        load_assignments(ids_file, load_hash(tmp_path, clusters), 4, 7)
    save_assignments(ids_file, np.full(120, 9), load_hash(tmp_path, clusters), 4)
    with pytest.raises(ValueError, match=r"ids in \[9, 9\], outside \[0, 4\)"):
        load_assignments(ids_file, load_hash(tmp_path, clusters), 4, 120)


def load_hash(cache: Path, clusters: SemanticClusters) -> str:
    from lightning_div._internal.io import file_digest

    return file_digest(cache / f"clusters-{clusters.config_hash}.npz")


def test_a_damaged_cached_clusters_file_is_refitted_with_one_warning(tmp_path):
    (clusters, ids), _ = fit_cached(tmp_path)
    path = tmp_path / f"clusters-{clusters.config_hash}.npz"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.warns(UserWarning, match=rf"cached clusters '.*{path.name}' cannot be used") as record:
        (again, again_ids), encoder = fit_cached(tmp_path)
    assert len([w for w in record if "cannot be used" in str(w.message)]) == 1
    assert encoder.calls == 1
    np.testing.assert_array_equal(again.centroids, clusters.centroids)  # same config and seed: same clusters
    np.testing.assert_array_equal(again_ids, ids)


def test_a_users_own_clusters_file_of_another_config_is_still_an_error(tmp_path):
    (clusters, _), _ = fit_cached(tmp_path / "a")
    mine = clusters.save(tmp_path / "mine.npz")
    with pytest.raises(ValueError, match=r"mine\.npz' was fitted with a different config — num_clusters"):
        load_or_fit_clusters(mine, TEXTS, hashed_encoder(), num_clusters=5, show_progress=False)


def test_other_weights_at_the_same_path_get_their_own_clusters(tmp_path):
    from helpers import causal_model, tokenizer

    from lightning_div.semantic.encoder import ResponseEncoder

    path = tmp_path / "encoder"
    tok = tokenizer()
    causal_model(seed=0).save_pretrained(path)
    tok.save_pretrained(path)
    texts = [f"response {i} about topic {i % 5}" for i in range(60)]
    cache = tmp_path / "cache"
    cache.mkdir()

    def clusters():
        enc = ResponseEncoder(str(path), show_progress=False, batch_size=16)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return enc, load_or_fit_clusters(
                cache, texts, enc, num_clusters=3, niter=10, nredo=1, show_progress=False
            ).clusters

    enc_a, a = clusters()
    time.sleep(0.01)
    causal_model(seed=1).save_pretrained(path)  # same name, other weights
    enc_b, b = clusters()
    assert enc_a.name == enc_b.name and enc_a.fingerprint != enc_b.fingerprint
    assert len(list(cache.glob("clusters-*.npz"))) == 2  # not the old cache entry
    assert not np.allclose(a.pca_mean, b.pca_mean)
    _, again = clusters()  # unchanged weights: the cache is reused
    np.testing.assert_array_equal(again.centroids, b.centroids)
