"""SemanticClusters: the authors' pipeline exactly, planted clusters recovered, persistence, bad input."""

import logging
import os
import re
import warnings

import faiss
import numpy as np
import pytest
from fakes import CountingEncoder
from helpers import causal_model, chitchat_pairs, tokenizer
from sklearn.decomposition import PCA
from sklearn.metrics import adjusted_rand_score
from sklearn.preprocessing import normalize
from threadpoolctl import threadpool_limits

from lightning_div.semantic.cache import load_or_fit_clusters
from lightning_div.semantic.clusters import SemanticClusters, fingerprint_texts
from lightning_div.semantic.encoder import ResponseEncoder
from lightning_div.semantic.geometry import pca as _pca


@pytest.fixture(autouse=True, scope="module")
def single_threaded():
    # Tiny problems: OpenMP threads buy nothing here, and on a busy 2-core runner their
    # spin-waiting turned 20 ms faiss fits into 6 s and a 2 s MiniLM test into 15 s.
    with threadpool_limits(limits=1):
        yield


def blobs(k=6, d=32, per=200, noise=0.3, seed=0):
    """k Gaussian blobs around orthonormal directions (+ a shared offset): every blob is as far from the others."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    centers = q[:k] * 4 + rng.normal(size=d)
    labels = np.repeat(np.arange(k), per)
    x = centers[labels] + rng.normal(size=(k * per, d)) * noise * 4 / np.sqrt(d)
    return x.astype(np.float32), labels


def quiet(**kw):
    return SemanticClusters(show_progress=False, **kw)


def test_planted_blobs_are_recovered_exactly():
    x, labels = blobs()
    sc = quiet(num_clusters=6).fit(x)
    ids = sc.assign(x)
    assert adjusted_rand_score(labels, ids) == 1.0
    assert ids.dtype == np.int64 and ids.min() == 0 and ids.max() == 5
    # 6 equidistant centres span 5 directions of equal variance: 4 explain ~4/5 < 90 %, so PCA keeps >= 5
    assert sc.n_components >= 5 and sc.explained_variance >= 0.9
    assert sc.histogram(ids).tolist() == [200] * 6


def test_same_pipeline_as_the_authors_mauve_code():
    """L2-normalise -> sklearn PCA(random_state=seed-1) -> first components reaching 90 % -> faiss.Kmeans(seed)."""
    x, _ = blobs(k=4, d=16, per=400, noise=1.0, seed=3)  # 1,600 > 256*4 points: faiss's sub-sampling is exercised
    sc = quiet(num_clusters=4, seed=27).fit(x)
    xn = normalize(x, axis=1)
    pca = PCA(n_components=None, random_state=26).fit(xn)
    m = int(np.argmax(np.cumsum(pca.explained_variance_ratio_) >= 0.9)) + 1
    reduced = pca.transform(xn)[:, :m].astype(np.float32)
    km = faiss.Kmeans(m, 4, niter=500, nredo=5, seed=27)
    km.train(reduced)
    ref = km.index.search(reduced, 1)[1].ravel()
    assert sc.n_components == m
    # centroids compared in the embedding space: coordinates along a PCA direction carry its sign
    # and, for close eigenvalues, its arbitrary rotation; the lifted points do not
    ours = sc.centroids.astype(np.float64) @ sc.pca_components + sc.pca_mean
    theirs = km.centroids.astype(np.float64) @ pca.components_[:m] + pca.mean_
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5 * np.abs(theirs).max())
    assert (sc.assign(x) == ref).all()


# float32 data summed in float64: the covariance's entries are off by a few float32 roundings,
# so ||E|| is about 1e-7 of the largest eigenvalue (measured at 5000 x 96: 1.2e-7 on the
# eigenvalues, 6e-8 for sin(angle) x gap); 1e-6 leaves room for other BLAS builds.
PCA_TOL = 1e-6


def assert_same_pca(mean, ratio, components, ref, r):
    """Compare a PCA with a reference on what is defined, with tolerances that follow the conditioning.

    Eigenvalues are well conditioned (Weyl: |error| <= ||E||), so they get a tolerance relative to
    the largest. An eigenvector is determined only up to sign, and where its eigenvalue has close
    neighbours only as part of a subspace: by Davis-Kahan its angle to the reference is at most
    ||E|| / gap, where gap is the distance to the nearest other eigenvalue. Each of the first r
    components must be within that angle; where the bound is tight enough to fix a direction, the
    sign must agree too (scikit-learn's convention).
    """
    lam = np.asarray(ref.explained_variance_ratio_, dtype=np.float64)
    err = PCA_TOL * lam[0]
    np.testing.assert_allclose(mean, ref.mean_, rtol=0, atol=PCA_TOL * max(1.0, float(np.abs(ref.mean_).max())))
    np.testing.assert_allclose(ratio[:r], lam[:r], rtol=0, atol=err)
    for i in range(r):
        others = np.delete(lam, i)
        gap = float(np.abs(others - lam[i]).min())
        u, v = ref.components_[i], components[i]
        cos = float(u @ v)
        sin = float(np.linalg.norm(v - cos * u))
        bound = err / gap if gap > 0 else np.inf
        assert sin <= bound, f"component {i}: sin(angle) {sin:.3g} to the reference > Davis-Kahan bound {bound:.3g}"
        if bound < 0.5:
            assert cos > 0, f"component {i}: opposite sign to the reference"


@pytest.mark.parametrize("n, d", [(5000, 96), (40, 96)])
def test_pca_matches_scikit_learn_in_float64(n, d):
    """The chunked float32 covariance (n >= d) and the SVD path (n < d) give sklearn's float64 PCA."""
    x = pca_data(n, d)
    mean, ratio, components = _pca(x, seed=26, chunk=1000)  # several chunks
    ref = PCA(n_components=None, svd_solver="full").fit(x.astype(np.float64))
    r = min(n, d) - 1  # the last direction of a rank-deficient (n < d) fit is arbitrary
    assert_same_pca(mean, ratio, components, ref, r)
    assert ratio.sum() == pytest.approx(1.0)


def pca_data(n, d):
    rng = np.random.default_rng(4)
    x = (rng.normal(size=(n, d)) * np.linspace(3.0, 0.1, d) + 5.0).astype(np.float32)  # large offset: centring matters
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _rotated(components, i, j, angle):
    out = components.copy()
    c, s = np.cos(angle), np.sin(angle)
    out[i], out[j] = c * components[i] + s * components[j], -s * components[i] + c * components[j]
    return out


@pytest.mark.parametrize("wrong", ["uncentred", "swapped", "rotated", "sign", "ratio"])
def test_pca_comparison_fails_on_a_wrong_pca(wrong):
    """The comparison above is not vacuous: a deliberately wrong PCA fails it."""
    x = pca_data(5000, 96)
    ref = PCA(n_components=None, svd_solver="full").fit(x.astype(np.float64))
    mean, ratio, components = _pca(x, seed=26, chunk=1000)
    lam = ref.explained_variance_ratio_
    gaps = np.abs(np.diff(lam[:20]))
    i = int(np.argmax(gaps))  # a well-separated pair (i, i + 1)
    if wrong == "uncentred":
        raw = x.astype(np.float64).T @ x.astype(np.float64)
        vals, vecs = np.linalg.eigh(raw)
        components = vecs[:, ::-1].T
    elif wrong == "swapped":
        components = components.copy()
        components[[i, i + 1]] = components[[i + 1, i]]
    elif wrong == "rotated":  # 1e-3 rad: far above the bound for a well-separated pair
        components = _rotated(components, i, i + 1, 1e-3)
    elif wrong == "sign":
        components = components.copy()
        components[i] *= -1
    elif wrong == "ratio":
        ratio = ratio.copy()
        ratio[[i, i + 1]] = ratio[[i + 1, i]]
    failed = {  # the check each wrong PCA fails
        "uncentred": r"component 0: sin\(angle\) .* > Davis-Kahan bound",
        "swapped": rf"component {i}: sin\(angle\) .* > Davis-Kahan bound",
        "rotated": rf"component {i}: sin\(angle\) .* > Davis-Kahan bound",
        "sign": rf"component {i}: opposite sign to the reference",
        "ratio": r"Not equal to tolerance",
    }[wrong]
    with pytest.raises(AssertionError, match=failed):
        assert_same_pca(mean, ratio, components, ref, 95)


def test_same_seed_same_centroids_and_save_load_round_trip(tmp_path):
    x, _ = blobs(noise=1.5, seed=1)  # overlapping blobs: the partition depends on the seed
    a = quiet(num_clusters=6, seed=5).fit(x, data_fingerprint="abc")
    b = quiet(num_clusters=6, seed=5).fit(x, data_fingerprint="abc")
    assert np.array_equal(a.centroids, b.centroids)
    path = a.save(tmp_path / "c.npz")
    loaded = SemanticClusters.load(path, expected=a.config)
    assert loaded.config == a.config and loaded.config_hash == a.config_hash
    queries = np.random.default_rng(9).normal(size=(300, 32)).astype(np.float32)
    assert np.array_equal(loaded.assign(queries), a.assign(queries))
    assert np.array_equal(loaded.assign(x), a.assign(x))
    assert loaded.inertia == pytest.approx(a.inertia)


def test_inertia_is_the_full_data_k_means_objective():
    x, _ = blobs(k=3, d=8, per=50)
    sc = quiet(num_clusters=3).fit(x)
    reduced = sc.transform(x)
    ids = sc.assign(x)
    # sum over points of the squared distance to their own centroid
    expected = float(((reduced - sc.centroids[ids]) ** 2).sum())
    assert sc.inertia == pytest.approx(expected, rel=1e-4)


def test_load_names_every_field_that_differs(tmp_path):
    x, _ = blobs(k=3, d=8, per=50)
    sc = quiet(num_clusters=3, encoder_name="enc-a").fit(x, data_fingerprint="f1")
    path = sc.save(tmp_path / "c.npz")
    wanted = dict(sc.config, num_clusters=20, data_fingerprint="f2")
    with pytest.raises(ValueError, match=rf"^'{re.escape(str(path))}' was fitted with a different config — ") as err:
        SemanticClusters.load(path, expected=wanted)
    msg = str(err.value)
    assert "num_clusters: file has 3, requested 20" in msg
    assert "data_fingerprint: file has 'f1', requested 'f2'" in msg
    assert "seed" not in msg and "encoder_name" not in msg
    with pytest.raises(ValueError, match="unknown config fields \\['k'\\]"):
        SemanticClusters.load(path, expected={"k": 3})
    assert SemanticClusters.load(path, expected={"num_clusters": 3, "variance_kept": 0.9}).num_clusters == 3
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        SemanticClusters.load(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="junk.npz.*not a SemanticClusters file"):
        SemanticClusters.load(tmp_path / "junk.npz")


def test_config_hash_follows_every_field():
    base = quiet(encoder_name="e")
    hashes = {base.config_hash}
    for change in (
        dict(num_clusters=10),
        dict(seed=1),
        dict(variance_kept=0.8),
        dict(niter=20),
        dict(nredo=1),
        dict(encoder_name="other"),
        dict(max_points_per_centroid=None),
    ):
        hashes.add(quiet(**{"encoder_name": "e", **change}).config_hash)
    other_data = quiet(encoder_name="e")
    other_data.data_fingerprint = "x"
    hashes.add(other_data.config_hash)
    assert len(hashes) == 9
    assert quiet(encoder_name="e").config_hash == base.config_hash
    assert len(base.config_hash) == 16


def test_fingerprint_is_stable_order_sensitive_and_unambiguous():
    # a fixed value: the fingerprint names cache files, so it must not change between versions or processes
    assert fingerprint_texts(["hello", "world"]) == fingerprint_texts(("hello", "world"))
    assert fingerprint_texts(["hello", "world"]) == "ea92bddee6cf3f16010180ecfbcb7a02"
    assert fingerprint_texts(["world", "hello"]) != fingerprint_texts(["hello", "world"])
    assert fingerprint_texts(["ab", "c"]) != fingerprint_texts(["a", "bc"])
    assert fingerprint_texts([]) != fingerprint_texts([""])
    with pytest.raises(TypeError, match="texts\\[1\\] is int"):
        fingerprint_texts(["a", 3])


def test_one_pca_component_still_clusters():
    # points at angles +-0.3 rad around the x axis: after L2 normalisation the spread is along y only
    rng = np.random.default_rng(0)
    angles = np.concatenate([rng.normal(0.3, 0.01, 60), rng.normal(-0.3, 0.01, 60)])
    x = np.stack([np.cos(angles), np.sin(angles)], axis=1) * rng.uniform(1, 5, size=(120, 1))
    sc = quiet(num_clusters=2).fit(x)
    assert sc.n_components == 1
    assert adjusted_rand_score(np.repeat([0, 1], 60), sc.assign(x)) == 1.0


def test_degenerate_inputs_fail_clearly():
    x, _ = blobs(k=3, d=8, per=50)
    with pytest.raises(ValueError, match="num_clusters=20 needs at least 20 embeddings, got 5"):
        quiet(num_clusters=20).fit(x[:5])
    # 30 points but only 3 distinct directions (scaling does not make a point distinct)
    repeated = np.repeat(x[[0, 60, 120]], 10, axis=0) * np.arange(1, 31)[:, None]
    with pytest.raises(ValueError, match="only 3 distinct embeddings .* num_clusters=4"):
        quiet(num_clusters=4).fit(repeated)
    with pytest.raises(ValueError, match="all 40 embeddings point in the same direction"):
        quiet(num_clusters=2).fit(np.ones((40, 8)))
    bad = x.copy()
    bad[7, 2] = np.nan
    bad[9, 0] = np.inf
    with pytest.raises(ValueError, match="embeddings\\[7\\] contains NaN or inf \\(2 such rows\\)"):
        quiet(num_clusters=3).fit(bad)
    zero = x.copy()
    zero[4] = 0
    with pytest.raises(ValueError, match="embeddings\\[4\\] is the zero vector"):
        quiet(num_clusters=3).fit(zero)
    with pytest.raises(ValueError, match="2-D"):
        quiet(num_clusters=3).fit(x[0])
    with pytest.raises(ValueError, match="variance_kept"):
        quiet(variance_kept=0)
    with pytest.raises(ValueError, match="num_clusters"):
        quiet(num_clusters=0)
    with pytest.raises(RuntimeError, match="not fitted"):
        quiet().assign(x)
    sc = quiet(num_clusters=3).fit(x)
    with pytest.raises(ValueError, match="dimension 5, but the clusters were fitted on dimension 8"):
        sc.assign(x[:, :5])
    with pytest.raises(ValueError, match="embeddings\\[1\\] contains NaN"):
        sc.assign(np.array([x[0], [np.nan] * 8]))


def test_few_points_per_cluster_warn_like_faiss():
    x, labels = blobs(k=3, d=8, per=20)  # 60 points < 39 * 3 = 117
    with pytest.warns(UserWarning, match="clustering 60 points into 3 clusters; faiss recommends at least 117"):
        sc = quiet(num_clusters=3).fit(x)
    assert adjusted_rand_score(labels, sc.assign(x)) == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet(num_clusters=3).fit(blobs(k=3, d=8, per=40)[0])  # 120 >= 117: no warning


def test_save_to_unwritable_path_names_it(tmp_path):
    x, _ = blobs(k=3, d=8, per=50)
    sc = quiet(num_clusters=3).fit(x)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(OSError, match="cannot save SemanticClusters to .*a-file/c.npz"):
        sc.save(blocker / "c.npz")
    with pytest.raises(OSError, match="no-such-dir/c.npz"):
        sc.save(tmp_path / "no-such-dir" / "c.npz")
    assert sorted(os.listdir(tmp_path)) == ["a-file"]  # no temporary file left behind


@pytest.mark.skipif(faiss.get_num_gpus() > 0, reason="needs a machine without GPU")
def test_use_gpu_true_without_gpu_is_an_error():
    x, _ = blobs(k=3, d=8, per=50)
    with pytest.raises(RuntimeError, match="use_gpu=True but faiss sees no GPU"):
        quiet(num_clusters=3, use_gpu=True).fit(x)
    assert quiet(num_clusters=3, use_gpu="auto").fit(x).fitted


def test_load_or_fit_clusters_fits_once_then_loads(tmp_path, caplog):
    texts = [p.response for p in chitchat_pairs("train", 60)][:120]
    enc = CountingEncoder(ResponseEncoder.from_model(causal_model(), tokenizer(), show_progress=False))
    with caplog.at_level(logging.INFO, logger="lightning_div.semantic.cache"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 120 points < 39*4: the warning is tested above
        first = load_or_fit_clusters(tmp_path, texts, enc, num_clusters=4, show_progress=False).clusters
        assert "fitted on 120 texts" in caplog.text and enc.calls == 1
        caplog.clear()
        second = load_or_fit_clusters(tmp_path, texts, enc, num_clusters=4, show_progress=False).clusters
        assert "loaded" in caplog.text and enc.calls == 1  # a cache hit embeds nothing
        direct = quiet(num_clusters=4).fit_texts(texts, enc)
    assert first.config == second.config
    assert first.config["encoder_name"] == enc.name
    assert first.config["data_fingerprint"] == fingerprint_texts(texts)
    assert (tmp_path / f"clusters-{first.config_hash}.npz").is_file()
    assert np.array_equal(first.centroids, second.centroids)
    # fit_texts gives the clusters that were cached
    assert direct.config == first.config and np.array_equal(direct.centroids, first.centroids)
    # an explicit file path fitted on other texts is refused, naming the field
    with pytest.raises(ValueError, match="data_fingerprint: file has"):
        load_or_fit_clusters(
            tmp_path / f"clusters-{first.config_hash}.npz", texts[:-1], enc, num_clusters=4, show_progress=False
        )


def test_load_or_fit_clusters_caches_the_training_assignments(tmp_path):
    texts = [p.response for p in chitchat_pairs("train", 60)][:120]
    enc = CountingEncoder(ResponseEncoder.from_model(causal_model(), tokenizer(), show_progress=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 120 points < 39*4
        cached = load_or_fit_clusters(tmp_path, texts, enc, with_assignments=True, num_clusters=4, show_progress=False)
        clusters, ids = cached.clusters, cached.assignments
        assert enc.calls == 1  # fit and assignments share one embedding pass
        ids_again = load_or_fit_clusters(
            tmp_path, texts, enc, with_assignments=True, num_clusters=4, show_progress=False
        ).assignments
    assert enc.calls == 1  # both come from disk
    assert ids.shape == (120,) and np.array_equal(ids, ids_again)
    assert np.array_equal(ids, clusters.assign(enc.encode(texts)))
    assert (tmp_path / f"assignments-clusters-{clusters.config_hash}.npz").is_file()
