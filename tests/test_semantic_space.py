"""One explicit semantic space: SemanticSpace shared by identity, private spaces from the callbacks' arguments.

* Two callbacks given one SemanticSpace hold that very object: one encoder is built and the
  clusters are fitted once, in one process and on each of 2 gloo processes (whose results
  equal the single process's).
* Callbacks without ``space=`` build private spaces from their arguments (as before: a monitor
  alone stays a one-liner); with the same settings the second reads the first one's cache file.
* ``space=`` beside a space argument, or other gold texts for a fitted space, is an error.
* The space needs no Lightning; the disk cache returns one type whatever it found.
"""

import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import chitchat_pairs

from lightning_div import Outputs, SemanticSpace
from lightning_div.semantic import cache as cluster_cache
from lightning_div.semantic import encoder as encoder_module
from lightning_div.semantic.cache import CachedClusters, cache_file, load_or_fit_clusters
from lightning_div.semantic.clusters import SemanticClusters


def gold_texts(n=80):
    return [p.response for p in chitchat_pairs("train", 40)][:n]


class Counting:
    """Counts ResponseEncoder constructions, disk-cache lookups and k-means fits in this process."""

    def __init__(self, monkeypatch):
        self.encoders, self.lookups, self.fits = 0, 0, 0
        real_encoder, real_lookup, real_fit = (
            encoder_module.ResponseEncoder,
            cluster_cache.load_or_fit_clusters,
            SemanticClusters.fit,
        )
        counts = self

        class CountedEncoder(real_encoder):
            def __init__(self, *args, **kwargs):
                counts.encoders += 1
                super().__init__(*args, **kwargs)

        def lookup(*args, **kwargs):
            counts.lookups += 1
            return real_lookup(*args, **kwargs)

        def fit(self, *args, **kwargs):
            counts.fits += 1
            return real_fit(self, *args, **kwargs)

        monkeypatch.setattr(encoder_module, "ResponseEncoder", CountedEncoder)
        monkeypatch.setattr(cluster_cache, "load_or_fit_clusters", lookup)
        monkeypatch.setattr(SemanticClusters, "fit", fit)


def fit_start(callback, texts, tmp_path):
    """What a callback's fit start asks of its space (the monitor: fit; DRESS: fit, then the gold ids)."""
    trainer = SimpleNamespace(default_root_dir=str(tmp_path), strategy=None)
    module = SimpleNamespace(device=torch.device("cpu"))
    context = callback.space_context(trainer, module)
    callback.space.fit(texts, **context)
    return callback.space.gold_assignments(texts, device=context["device"])


def test_one_space_given_to_both_callbacks_is_one_encoder_and_one_fit(tmp_path, monkeypatch):
    from lightning_div.callbacks import DRESSReweighting, SemanticDiversityMonitor
    from lightning_div.callbacks.parts import part_owners

    counts = Counting(monkeypatch)
    space = SemanticSpace(encoder="minilm", num_clusters=3, batch_size=16, show_progress=False)
    monitor = SemanticDiversityMonitor(space=space, outputs=Outputs(show_progress=False))
    dress = DRESSReweighting(space=space, outputs=Outputs(show_progress=False))
    assert monitor.space is dress.space is space  # by identity: no copy, no process-wide cache behind it
    texts = gold_texts()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 80 points < 39 per cluster: tested in test_clustering
        ids = fit_start(monitor, texts, tmp_path)
        same_ids = fit_start(dress, texts, tmp_path)
    assert (counts.encoders, counts.lookups, counts.fits) == (1, 1, 1)  # one encoder built, one fit, for both
    assert same_ids is ids
    clusters = space.clusters
    assert space.clusters_path == str(cache_file(tmp_path / "lightning_div_cache", clusters))
    assert (
        monitor.state_dict()["space"]["clusters_path"]
        == dress.state_dict()["space"]["clusters_path"]
        == space.clusters_path
    )
    # in one Trainer the space is checkpointed once, by the first of the two; the other names it (the loop that
    # writes {"owner": <its state key>} is DiversityCallback's, tested in a fit by test_monitors)
    assert part_owners(dress, [monitor, dress]) == {"space": monitor.state_key}
    assert part_owners(monitor, [monitor, dress]) == {} and part_owners(monitor, [dress, monitor]) == {
        "space": dress.state_key
    }
    assert monitor.state_key == "SemanticDiversityMonitor{'name': None, 'encoder': 'minilm'}"
    # the shared ids are the clusters' own assignment of the gold texts, and read-only (one array for all)
    np.testing.assert_array_equal(ids, clusters.assign(space.get_encoder().encode(texts)))
    with pytest.raises(ValueError, match="read-only"):
        ids[0] = 1
    assert counts.encoders == 1


def test_callbacks_without_a_space_build_private_ones_that_share_the_disk_cache(tmp_path, monkeypatch):
    from lightning_div.callbacks import DRESSReweighting, SemanticDiversityMonitor

    counts = Counting(monkeypatch)
    common = dict(encoder="minilm", num_clusters=3, batch_size=16, show_progress=False)
    monitor = SemanticDiversityMonitor(SemanticSpace(**common))
    dress = DRESSReweighting(SemanticSpace(**common), outputs=Outputs(show_progress=False))  # a space of its own
    assert monitor.space is not dress.space
    assert (monitor.space.num_clusters, monitor.space.encoder_source, monitor.space.batch_size) == (3, "minilm", 16)
    texts = gold_texts()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ids = fit_start(monitor, texts, tmp_path)
        other_ids = fit_start(dress, texts, tmp_path)
        # another k is another semantic space: fitted on its own, in its own file
        other_k = DRESSReweighting(SemanticSpace(**{**common, "num_clusters": 4}), outputs=Outputs(show_progress=False))
        fit_start(other_k, texts, tmp_path)
    assert counts.encoders == 3  # each private space builds its own encoder
    assert counts.lookups == 3 and counts.fits == 2  # DRESS's private space read the monitor's cache file
    assert monitor.space.get_encoder() is not dress.space.get_encoder()
    assert dress.space.clusters is not monitor.space.clusters
    np.testing.assert_array_equal(dress.space.clusters.centroids, monitor.space.clusters.centroids)
    np.testing.assert_array_equal(other_ids, ids)
    assert dress.space.clusters_path == monitor.space.clusters_path != other_k.space.clusters_path
    # defaults when no argument is given: the space's own, defined once
    plain = SemanticDiversityMonitor()
    assert (plain.space.encoder_source, plain.space.num_clusters, plain.space.kmeans_seed) == (
        "microsoft/DialoGPT-large",
        20,
        27,
    )


def test_space_beside_space_arguments_is_an_error():
    from lightning_div.callbacks import DRESSReweighting, SemanticDiversityMonitor

    space = SemanticSpace(encoder="minilm")
    with (
        pytest.warns(DeprecationWarning, match=r"SemanticDiversityMonitor\(num_clusters=\.\.\.\) is deprecated"),
        pytest.raises(ValueError, match=r"SemanticDiversityMonitor: space= and num_clusters= were both given"),
    ):
        SemanticDiversityMonitor(space=space, num_clusters=20)  # even equal to the space's: two sources of truth
    with (
        pytest.warns(DeprecationWarning, match=r"DRESSReweighting\(encoder=\.\.\.\) is deprecated"),
        pytest.raises(ValueError, match=r"DRESSReweighting: space= and encoder=, encoder_kwargs= were both given"),
    ):
        DRESSReweighting(space=space, encoder="minilm", encoder_kwargs={"pooling": "mean"})
    with pytest.raises(TypeError, match="space must be a lightning_div.SemanticSpace, got str"):
        SemanticDiversityMonitor(space="minilm")


def test_a_fitted_space_refuses_other_gold_texts_and_a_missing_cache_dir(tmp_path):
    texts = gold_texts()
    space = SemanticSpace(encoder="minilm", num_clusters=3, batch_size=16, show_progress=False)
    with pytest.raises(ValueError, match=r"needs a cache directory .*SemanticSpace\(dirpath=\.\.\.\)"):
        space.fit(texts)
    with pytest.raises(RuntimeError, match=r"no clusters yet: call fit\(gold_texts\) first"):
        space.clusters  # noqa: B018  (the property raises)
    with pytest.raises(ValueError, match="no gold training responses to fit"):
        space.fit(None, cache_dir=tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        space.fit(texts, cache_dir=tmp_path)
    assert space.fit(texts) is space  # the same texts: nothing to do (no cache directory needed)
    with pytest.raises(ValueError, match="fitted on other gold responses than the 79 given now"):
        space.fit(texts[:-1])
    with pytest.raises(ValueError, match=r"needs the texts this SemanticSpace was fitted on"):
        space.gold_assignments(texts[:-1])


def test_save_load_and_assign_round_trip(tmp_path):
    texts = gold_texts()
    space = SemanticSpace(encoder="minilm", num_clusters=3, batch_size=16, show_progress=False, dirpath=tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        space.fit(texts)
    saved = space.save(tmp_path / "mine.npz")
    loaded = SemanticSpace.load(saved, batch_size=16, show_progress=False)  # the encoder named in the file
    assert loaded.fitted and loaded.clusters_path == str(saved)
    assert loaded.encoder_source == "sentence-transformers/all-MiniLM-L6-v2"
    assert loaded.encoder_kwargs == {"pooling": "mean"}
    assert loaded.cards == space.cards
    np.testing.assert_array_equal(loaded.assign(texts), space.gold_assignments(texts))
    np.testing.assert_allclose(loaded.encode(texts[:3]), space.encode(texts[:3]), atol=1e-6)


# That the space imports no Lightning is checked in the fresh process of
# tests/test_base_model.py::test_load_base_model_in_a_fresh_process_is_fast_and_offline (one interpreter start).


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


def _two_callbacks_on_ranks(rank, world, texts, cache_dir):
    import faiss
    import pytest

    from lightning_div.callbacks import DRESSReweighting, SemanticDiversityMonitor

    if world > 1:  # two processes on a 2-core runner: one thread each
        torch.set_num_threads(1)
        faiss.omp_set_num_threads(1)
    with pytest.MonkeyPatch.context() as monkeypatch:
        counts = Counting(monkeypatch)
        space = SemanticSpace(encoder="minilm", num_clusters=3, dirpath=cache_dir, batch_size=16, show_progress=False)
        monitor, dress = SemanticDiversityMonitor(space=space), DRESSReweighting(space=space)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # few points per cluster
            fit_start(monitor, texts, cache_dir)
            ids = fit_start(dress, texts, cache_dir)
        clusters = space.clusters
        return (
            monitor.space is dress.space,
            (counts.encoders, counts.lookups, counts.fits),
            clusters.centroids,
            np.asarray(ids),
        )


@pytest.mark.slow
@pytest.mark.xdist_group("two_processes")
def test_two_processes_share_within_each_and_agree_with_one(tmp_path):
    from ddp_utils import run_distributed

    texts = gold_texts()
    (tmp_path / "single").mkdir()
    (tmp_path / "ddp").mkdir()
    shared, counts, centroids, ids = _two_callbacks_on_ranks(0, 1, texts, tmp_path / "single")
    assert shared and counts == (1, 1, 1)
    results = run_distributed(_two_callbacks_on_ranks, 2, texts, tmp_path / "ddp")
    # one encoder and one lookup per process, for both callbacks; rank 0 fits, rank 1 receives
    assert [r[1] for r in results] == [(1, 1, 1), (1, 1, 0)]
    for shared, _, rank_centroids, rank_ids in results:
        assert shared
        np.testing.assert_allclose(rank_centroids, centroids, atol=1e-5)
        np.testing.assert_array_equal(rank_ids, ids)
    assert len(list((tmp_path / "ddp").glob("clusters-*.npz"))) == 1
