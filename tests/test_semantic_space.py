"""One semantic space: ClusterSpec's new home, the process-level cache of encoders and clusters, the disk cache's one return type."""

import gc
import warnings

import numpy as np
import pytest
import torch
from helpers import chitchat_pairs

from lightning_div.semantic import space as semantic_space
from lightning_div.semantic.cache import CachedClusters, cache_file, load_or_fit_clusters
from lightning_div.semantic.clusters import SemanticClusters
from lightning_div.semantic.space import ClusterSpec, clear_shared_cache, shared_cache_size, shared_encoder


class Module:
    """The part of a LightningModule ClusterSpec reads."""

    def __init__(self, device="cpu"):
        self.device = torch.device(device)


def gold_texts(n=80):
    return [p.response for p in chitchat_pairs("train", 40)][:n]


def test_same_name_arguments_and_device_share_one_encoder_others_do_not():
    a = shared_encoder("minilm", torch.device("cpu"), batch_size=8, show_progress=False)
    assert shared_encoder("minilm", torch.device("cpu"), show_progress=False, batch_size=8) is a  # any argument order
    assert shared_encoder("minilm", torch.device("cuda", 0), batch_size=8, show_progress=False) is not a
    assert shared_encoder("minilm", torch.device("cpu"), batch_size=16, show_progress=False) is not a
    assert (
        shared_encoder("minilm", torch.device("cpu"), batch_size=8, show_progress=False, pooling="last_token") is not a
    )
    assert a._model is None  # sharing decides nothing about loading: still lazy
    # through specs, as the callbacks ask
    one, two = ClusterSpec(encoder="minilm"), ClusterSpec(encoder="minilm")
    assert one.get_encoder(Module(), 8, False) is two.get_encoder(Module(), 8, False) is a
    assert ClusterSpec(encoder="minilm").get_encoder(Module("meta"), 8, False) is not a
    mine = object()  # an encoder object given by the user is used as it is, never replaced
    assert ClusterSpec(encoder=mine).get_encoder(Module(), 8, False) is mine


def test_the_monitor_and_dress_with_one_spec_get_one_encoder_and_one_set_of_clusters(tmp_path, monkeypatch):
    from lightning_div.callbacks import DRESSReweighting, SemanticDiversityMonitor
    from lightning_div.semantic import cache as cluster_cache

    calls = []
    real = cluster_cache.load_or_fit_clusters

    def counting(*args, **kwargs):
        calls.append(kwargs["num_clusters"])
        return real(*args, **kwargs)

    monkeypatch.setattr(cluster_cache, "load_or_fit_clusters", counting)
    common = dict(encoder="minilm", num_clusters=3, batch_size=16, show_progress=False)
    monitor = SemanticDiversityMonitor(**common)
    dress = DRESSReweighting(**common)
    texts = gold_texts()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 80 points < 39 per cluster: tested in test_clustering
        clusters = monitor.spec.get_clusters(Module(), texts, tmp_path, monitor.batch_size, monitor.show_progress)
        same, ids = dress.spec.gold_assignments(Module(), texts, tmp_path, dress.batch_size, dress.show_progress)
        assert calls == [3]  # fitted (or read) once for both callbacks
        assert same is clusters and dress.spec._encoder is monitor.spec._encoder
        assert monitor.spec.clusters_path == dress.spec.clusters_path == str(cache_file(tmp_path, clusters))
        # the shared ids are the clusters' own assignment of the gold texts, and read-only (one array for all)
        np.testing.assert_array_equal(ids, clusters.assign(monitor.spec._encoder.encode(texts)))
        with pytest.raises(ValueError, match="read-only"):
            ids[0] = 1
        # another k, or other gold texts, is another semantic space: fitted on its own
        other_k = ClusterSpec(encoder="minilm", num_clusters=4)
        assert other_k.get_clusters(Module(), texts, tmp_path, 16, False) is not clusters
        other_texts = ClusterSpec(encoder="minilm", num_clusters=3)
        assert other_texts.get_clusters(Module(), texts[:-1], tmp_path, 16, False) is not clusters
    assert calls == [3, 4, 3]
    assert shared_cache_size() == (1, 3)


def test_the_cache_holds_nothing_nobody_uses_and_clear_forgets_at_once():
    gc.collect()
    spec = ClusterSpec(encoder="minilm")
    first = spec.get_encoder(Module(), 8, False)
    assert shared_cache_size() == (1, 0)
    del spec, first
    gc.collect()
    assert shared_cache_size() == (0, 0)  # weak entries: a finished run's encoder goes with its callbacks
    keep = ClusterSpec(encoder="minilm")
    held = keep.get_encoder(Module(), 8, False)
    clear_shared_cache()
    assert shared_cache_size() == (0, 0)
    assert ClusterSpec(encoder="minilm").get_encoder(Module(), 8, False) is not held  # a fresh one after clear()
    assert keep.get_encoder(Module(), 8, False) is held  # a spec keeps what it already has


def test_the_disk_cache_returns_one_type_whatever_it_found(tmp_path):
    from lightning_div.semantic.encoder import ResponseEncoder

    enc = ResponseEncoder("minilm", batch_size=16, show_progress=False)
    texts = gold_texts()
    config = dict(num_clusters=3, niter=20, nredo=1, show_progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted = load_or_fit_clusters(tmp_path, texts, enc, **config)  # a miss: fitted
        read = load_or_fit_clusters(tmp_path, texts, enc, **config)  # a hit, clusters only
        with_ids = load_or_fit_clusters(tmp_path, texts, enc, with_assignments=True, **config)  # ids computed
        cached_ids = load_or_fit_clusters(tmp_path, texts, enc, with_assignments=True, **config)  # ids read
    for result in (fitted, read, with_ids, cached_ids):
        assert type(result) is CachedClusters and isinstance(result.clusters, SemanticClusters)
        assert result.path == cache_file(tmp_path, fitted.clusters) and result.path.is_file()
        np.testing.assert_array_equal(result.clusters.centroids, fitted.clusters.centroids)
    assert fitted.assignments is None and read.assignments is None
    np.testing.assert_array_equal(with_ids.assignments, cached_ids.assignments)
    np.testing.assert_array_equal(with_ids.assignments, fitted.clusters.assign(enc.encode(texts)))
    # the old entry point keeps its two return types, from the same cache
    old = SemanticClusters.load_or_fit(tmp_path, texts, enc, **config)
    old_clusters, old_ids = SemanticClusters.load_or_fit(tmp_path, texts, enc, with_assignments=True, **config)
    assert isinstance(old, SemanticClusters) and old.config == old_clusters.config == fitted.clusters.config
    np.testing.assert_array_equal(old_ids, cached_ids.assignments)


def test_ranks_agree_on_a_hit_before_skipping_the_collectives(monkeypatch):
    from lightning_div._internal import distributed

    made = []
    first = semantic_space.shared_clusters("key", lambda: made.append(1) or CachedClusters(None, None))
    assert semantic_space.shared_clusters("key", lambda: made.append(2)) is first and made == [1]
    # under DDP another rank's garbage collector may have freed its entry: then every rank makes it again
    monkeypatch.setattr(distributed, "is_distributed", lambda: True)
    monkeypatch.setattr(distributed, "gather_objects", lambda held: [held, False])
    again = semantic_space.shared_clusters("key", lambda: made.append(3) or CachedClusters(None, None))
    assert made == [1, 3] and again is not first
    monkeypatch.setattr(distributed, "gather_objects", lambda held: [held, True])
    assert semantic_space.shared_clusters("key", lambda: made.append(4)) is again and made == [1, 3]


def _two_callbacks_on_ranks(rank, world, texts, cache_dir):
    import faiss

    from lightning_div.semantic import cache as cluster_cache

    if world > 1:  # two processes on a 2-core runner: one thread each
        torch.set_num_threads(1)
        faiss.omp_set_num_threads(1)
    calls = []
    real = cluster_cache.load_or_fit_clusters
    cluster_cache.load_or_fit_clusters = lambda *a, **k: calls.append(1) or real(*a, **k)
    try:
        monitor, dress = ClusterSpec(encoder="minilm", num_clusters=3), ClusterSpec(encoder="minilm", num_clusters=3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # few points per cluster
            clusters = monitor.get_clusters(Module(), texts, cache_dir, 16, False)
            same, ids = dress.gold_assignments(Module(), texts, cache_dir, 16, False)
    finally:
        cluster_cache.load_or_fit_clusters = real
    return same is clusters, len(calls), clusters.centroids, np.asarray(ids)


@pytest.mark.slow
def test_two_processes_share_within_each_and_agree_with_one(tmp_path):
    from ddp_utils import run_distributed

    texts = gold_texts()
    (tmp_path / "single").mkdir()
    (tmp_path / "ddp").mkdir()
    shared, calls, centroids, ids = _two_callbacks_on_ranks(0, 1, texts, tmp_path / "single")
    assert shared and calls == 1
    for shared, calls, rank_centroids, rank_ids in run_distributed(_two_callbacks_on_ranks, 2, texts, tmp_path / "ddp"):
        assert shared and calls == 1  # each process fits (rank 0) or receives (rank 1) once, for both callbacks
        np.testing.assert_allclose(rank_centroids, centroids, atol=1e-5)
        np.testing.assert_array_equal(rank_ids, ids)
    assert len(list((tmp_path / "ddp").glob("clusters-*.npz"))) == 1
