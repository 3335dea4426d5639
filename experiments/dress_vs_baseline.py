"""DRESS vs unweighted training (Han et al., 2022) on the embedded Chit-Chat corpus, with the public API.

    python experiments/dress_vs_baseline.py [--quick] [--out DIR] [--seeds 0 1 2] [--threads 2]

The same model (the demo's from-scratch GPT-2), data and schedule are trained

- ``baseline``: no DRESS;
- ``dress_nll``: DRESS gold weights + negatives as the paper trains them (-1 x NLL);
- ``dress_unlikelihood``: DRESS gold weights + bounded negatives (-log(1 - p), Welleck et al. 2020);
- ``dress_no_negatives``: DRESS gold weights only;

for every seed, plus a lambda sweep (0, 10, 30, 60) of DRESS without negatives on the first
seed. Negatives are mined as the authors do (``mine_at="start"``: greedy, no n-gram blocking,
own batches). Every epoch records validation loss and perplexity, Sem-Ent of greedy
generations in the clusters of the gold training responses, distinct-1/2, Ent-4, EAD, the
share of generations in head clusters (clusters holding > 10 % of them), RUQ, and per batch
kind (gold / negative) the mean training loss and gradient norm. Writes
``DIR/results.json`` and PNG figures. Only the package's public API is used: callbacks,
DialogueDataModule, DialogueLM and a Trainer, as a user would.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch

from lightning_div import DialogueDataModule, DialogueLM
from lightning_div._internal.io import atomic_write_text
from lightning_div.callbacks import (
    DRESSReweighting,
    RUQMonitor,
    SemanticDiversityMonitor,
)
from lightning_div.dress.weights import head_clusters
from lightning_div.semantic.encoder import ResponseEncoder

ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
LEXICAL = ("distinct_1", "distinct_2", "ent_4", "ead")
SETTINGS = {  # name -> DRESS arguments (None: no DRESS)
    "baseline": None,
    "dress_nll": {"negatives": True, "negative_loss": "nll"},
    "dress_unlikelihood": {"negatives": True, "negative_loss": "unlikelihood"},
    "dress_no_negatives": {"negatives": False},
}
LAMBDAS = (0.0, 10.0, 30.0, 60.0)

# Sized for a 2-core machine shared by several developers (see docs/results/dress_vs_baseline.md).
FULL = {
    "train_examples": 3000,
    "val_examples": 200,
    "epochs": 3,
    "batch_size": 32,
    "learning_rate": 2e-3,
    "warmup_steps": 50,
    "num_contexts": 128,
    "num_negative_contexts": 150,
    "ruq_prompts": 48,
    "max_new_tokens": 20,
    "lam": 30.0,
    "lambdas": LAMBDAS,
    "model": {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "n_positions": 128},
}
QUICK = dict(
    FULL,
    train_examples=160,
    val_examples=32,
    epochs=2,
    num_contexts=16,
    num_negative_contexts=16,
    ruq_prompts=8,
    max_new_tokens=8,
    warmup_steps=5,
    lambdas=(0.0, 30.0),
    model={"model_type": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": 128},
)


class Recorder(pl.Callback):
    """Per epoch: losses, the monitor's generations' head share and a few samples; per batch kind: loss, grad norm."""

    def __init__(self, sem: SemanticDiversityMonitor, encoder: ResponseEncoder, num_gold: int) -> None:
        self.sem, self.encoder, self.num_gold = sem, encoder, num_gold
        self.epochs: dict[int, dict[str, Any]] = {}
        self._kind = "gold"
        self._batches: dict[str, list[tuple[float, float]]] = {}
        self._loss = 0.0

    def row(self, trainer: pl.Trainer) -> dict[str, Any]:
        return self.epochs.setdefault(trainer.current_epoch, {"epoch": trainer.current_epoch})

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        w, idx = batch["sample_weight"], batch["index"]
        self._kind = "negative" if bool(((idx >= self.num_gold) & (idx >= 0)).any()) else "gold"
        self._negative_rows = int((w < 0).sum())

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        norms = [p.grad.detach().norm() for p in pl_module.parameters() if p.grad is not None]
        self._grad = float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        loss = float(outputs["loss"] if isinstance(outputs, dict) else outputs)
        self._batches.setdefault(self._kind, []).append((loss, getattr(self, "_grad", float("nan"))))

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        row = self.row(trainer)
        row["train_loss"] = float(trainer.callback_metrics.get("train/loss_epoch", float("nan")))
        for kind in ("gold", "negative"):
            stats = np.asarray(self._batches.get(kind, []), dtype=np.float64).reshape(-1, 2)
            row[f"{kind}_batches"] = len(stats)
            row[f"{kind}_batch_loss"] = float(stats[:, 0].mean()) if len(stats) else None
            row[f"{kind}_grad_norm"] = float(stats[:, 1].mean()) if len(stats) else None
        self._batches = {}
        responses = list(getattr(self.sem, "last_responses", []) or [])
        if responses:
            ids = self.sem.clusters.assign(self.encoder.encode(responses))
            heads = head_clusters(ids, self.sem.clusters.num_clusters, 0.1)
            row["head_share"] = float(np.isin(ids, heads).mean())
            row["largest_cluster_share"] = float(np.bincount(ids).max() / len(ids))
            row["samples"] = responses[:6]

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking and "val/loss" in trainer.callback_metrics:
            val_loss = float(trainer.callback_metrics["val/loss"])
            self.row(trainer).update(val_loss=val_loss, perplexity=math.exp(min(val_loss, 50.0)))


def run(
    name: str,
    dress_args: dict[str, Any] | None,
    seed: int,
    cfg: dict[str, Any],
    train_pairs: list,
    val_pairs: list,
    encoder: ResponseEncoder,
    cache: Path,
    lam: float,
) -> dict[str, Any]:
    """One training run; returns its settings and per-epoch numbers."""
    pl.seed_everything(seed, workers=True)
    lm = DialogueLM(
        model_name_or_path=None,
        tokenizer="local:chitchat",
        tokenizer_vocab_size=4000,
        from_scratch=dict(cfg["model"]),
        learning_rate=cfg["learning_rate"],
        warmup_steps=cfg["warmup_steps"],
    )
    dm = DialogueDataModule(
        train=train_pairs, val=val_pairs, max_history=2, batch_size=cfg["batch_size"], seed=seed, show_progress=False
    )
    common = {
        "show_progress": False,
        "batch_size": 64,
        "max_new_tokens": cfg["max_new_tokens"],
        "dirpath": str(cache),
        "seed": seed,
    }
    sem = SemanticDiversityMonitor(
        encoder=encoder,
        num_clusters=20,
        num_contexts=cfg["num_contexts"],
        lexical_metrics=LEXICAL,
        log_samples=0,
        **common,
    )
    ruq = RUQMonitor(
        num_train_prompts=cfg["ruq_prompts"], num_val_prompts=cfg["ruq_prompts"], plot=False, warn_drop=None, **common
    )
    recorder = Recorder(sem, encoder, len(train_pairs))
    callbacks: list[pl.Callback] = [sem, ruq, recorder]
    dress = None
    if dress_args is not None:
        dress = DRESSReweighting(
            encoder=encoder,
            num_clusters=20,
            lam=lam,
            normalize=True,
            num_negative_contexts=cfg["num_negative_contexts"],
            mine_at="start",
            negative_batches="separate",
            **dress_args,
            **common,
        )
        callbacks.append(dress)
    trainer = pl.Trainer(
        max_epochs=cfg["epochs"],
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        reload_dataloaders_every_n_epochs=1,
    )  # DRESS's negatives arrive through a rebuilt dataloader
    start, cpu_start = time.perf_counter(), time.process_time()
    trainer.fit(lm, datamodule=dm)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    epochs = recorder.epochs
    for monitor in (sem, ruq) + ((dress,) if dress is not None else ()):
        for rec in monitor.history:
            e = int(rec["epoch"])
            row = epochs.setdefault(e, {"epoch": e})
            for key, value in rec.items():
                if key == "epoch" or key.startswith("timing/"):
                    continue
                row[key.replace("/", "_")] = float(value)
    return {
        "setting": name,
        "seed": seed,
        "lam": lam if dress_args is not None else None,
        "dress": dress_args,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "epochs": [epochs[e] for e in sorted(epochs)],
    }


def summarise(runs: list[dict[str, Any]], keys: list[str]) -> dict[str, Any]:
    """Mean and standard deviation over seeds, per setting, per epoch, per key."""
    out: dict[str, Any] = {}
    for name in SETTINGS:
        sel = [r for r in runs if r["setting"] == name]
        if not sel:
            continue
        n_epochs = min(len(r["epochs"]) for r in sel)
        out[name] = {}
        for key in keys:
            vals = np.array([[r["epochs"][e].get(key, np.nan) for e in range(n_epochs)] for r in sel], dtype=float)
            out[name][key] = {
                "mean": np.nanmean(vals, axis=0).tolist() if vals.size else [],
                "std": np.nanstd(vals, axis=0).tolist() if vals.size else [],
            }
    return out


KEYS = [
    "val_loss",
    "perplexity",
    "val_sem_ent",
    "val_distinct_1",
    "val_distinct_2",
    "val_ent_4",
    "val_ead",
    "head_share",
    "val_ruq",
    "train_ruq",
    "gold_batch_loss",
    "negative_batch_loss",
    "gold_grad_norm",
    "negative_grad_norm",
]


def figures(results: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    summary = results["summary"]
    panels = [
        "val_loss",
        "val_sem_ent",
        "val_distinct_2",
        "val_ent_4",
        "val_ead",
        "head_share",
        "val_ruq",
        "val_distinct_1",
    ]
    fig, axes = plt.subplots(2, 4, figsize=(16, 7))
    for ax, key in zip(axes.flat, panels):
        for name, per_key in summary.items():
            mean, std = np.array(per_key[key]["mean"]), np.array(per_key[key]["std"])
            x = np.arange(1, len(mean) + 1)
            ax.errorbar(x, mean, yerr=std, marker="o", capsize=3, label=name)
        ax.set_title(key)
        ax.set_xlabel("epoch")
        if key == "val_sem_ent" and results.get("gold_sem_ent") is not None:
            ax.axhline(results["gold_sem_ent"], color="grey", ls="--", lw=1, label="gold responses")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"DRESS vs baseline, mean +- std over seeds {results['seeds']}")
    fig.tight_layout()
    fig.savefig(out / "dress_vs_baseline.png", dpi=110)
    plt.close(fig)
    written.append("dress_vs_baseline.png")

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, per_key in summary.items():
        for ax, kind in zip(axes, ("gold", "negative")):
            mean = np.array(per_key[f"{kind}_batch_loss"]["mean"], dtype=float)
            if np.all(np.isnan(mean)):
                continue
            ax.plot(np.arange(1, len(mean) + 1), mean, marker="o", label=name)
            ax.set_title(f"mean training loss of {kind} batches")
            ax.set_xlabel("epoch")
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "batch_losses.png", dpi=110)
    plt.close(fig)
    written.append("batch_losses.png")

    sweep = results["lambda_sweep"]
    if sweep:
        fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
        lams = [r["lam"] for r in sweep]
        for ax, key in zip(axes, ("val_loss", "val_sem_ent", "val_distinct_2", "head_share")):
            ax.plot(lams, [r["epochs"][-1].get(key, np.nan) for r in sweep], marker="o")
            ax.set_xlabel("lambda")
            ax.set_title(f"{key}, last epoch")
        fig.suptitle(f"lambda sweep (DRESS without negatives, seed {sweep[0]['seed']})")
        fig.tight_layout()
        fig.savefig(out / "lambda_sweep.png", dpi=110)
        plt.close(fig)
        written.append("lambda_sweep.png")
    return written


def merge(dirs: list[Path], out: Path) -> dict[str, Any]:
    """One results.json and its figures from several partial ones (same config; e.g. one process per seed)."""
    parts = [json.loads((d / "results.json").read_text()) for d in dirs]
    configs = {json.dumps(p["settings"]["config"], sort_keys=True) for p in parts}
    if len(configs) != 1:
        raise ValueError(f"cannot merge results of different configs: {sorted(configs)}")
    runs = [r for p in parts for r in p["runs"]]
    sweep = [r for p in parts for r in p["lambda_sweep"]]
    lam = parts[0]["settings"]["config"]["lam"]
    if sweep and not any(r["lam"] == lam for r in sweep):  # the sweep process skipped the main setting's lambda
        same = [r for r in runs if r["setting"] == "dress_no_negatives" and r["seed"] == sweep[0]["seed"]]
        sweep += [{**r, "setting": f"lambda_{lam:g}"} for r in same[:1]]
    seeds = sorted({r["seed"] for r in runs})
    settings = dict(
        parts[0]["settings"],
        seeds=seeds,
        merged_from=[str(d) for d in dirs],
        lambdas=sorted({lam for p in parts for lam in p["settings"]["lambdas"]}),
    )
    results = {
        "settings": settings,
        "seeds": seeds,
        "gold_sem_ent": next((p["gold_sem_ent"] for p in parts if p["gold_sem_ent"] is not None), None),
        "runs": runs,
        "lambda_sweep": sorted(sweep, key=lambda r: r["lam"]),
        "summary": summarise(runs, KEYS),
        "seconds": {str(d): p["seconds"] for d, p in zip(dirs, parts)},
    }
    out.mkdir(parents=True, exist_ok=True)
    results["figures"] = figures(results, out)
    atomic_write_text(out / "results.json", json.dumps(results, indent=1, default=float))
    print(f"wrote {out / 'results.json'} from {len(dirs)} parts")
    return results


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tiny setting for the tests (< 3 minutes)")
    parser.add_argument("--out", default="experiments/results/dress_vs_baseline", help="output directory")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default: 0 1 2 (--quick: 0)")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--no-sweep", action="store_true", help="skip the lambda sweep")
    parser.add_argument("--only-sweep", action="store_true", help="only the lambda sweep (e.g. in a second process)")
    parser.add_argument("--cache", default=None, help="cluster cache directory (default: OUT/cache), shareable")
    parser.add_argument(
        "--merge",
        nargs="+",
        default=None,
        metavar="DIR",
        help="combine the results.json of runs done in parallel processes into OUT (no training)",
    )
    args = parser.parse_args(argv)
    if args.merge:
        return merge([Path(d) for d in args.merge], Path(args.out))
    if args.seeds is None:
        args.seeds = [0] if args.quick else [0, 1, 2]
    if args.only_sweep:
        args.settings = []
    torch.set_num_threads(args.threads)
    cfg = QUICK if args.quick else FULL
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = Path(args.cache) if args.cache else out / "cache"
    encoder = ResponseEncoder(ENCODER, pooling="mean", batch_size=64, show_progress=False)
    # One fixed data subset for every run, so the clusters are fitted once; seeds change init and order.
    data = DialogueDataModule(
        train="chitchat",
        val="chitchat",
        max_history=2,
        max_train_examples=cfg["train_examples"],
        max_val_examples=cfg["val_examples"],
        seed=0,
        show_progress=False,
    )
    train_pairs, val_pairs = data.train_pairs(), data.val_pairs()
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    sweep: list[dict[str, Any]] = []

    def assemble() -> dict[str, Any]:
        gold = [
            r["epochs"][0].get("val_sem_ent_gold")
            for r in runs + sweep
            if r["epochs"] and "val_sem_ent_gold" in r["epochs"][0]
        ]
        return {
            "settings": {
                "config": cfg,
                "quick": args.quick,
                "seeds": args.seeds,
                "threads": args.threads,
                "dress": {
                    "encoder": ENCODER,
                    "num_clusters": 20,
                    "normalize": True,
                    "mine_at": "start",
                    "negative_batches": "separate",
                    "head_threshold": 0.1,
                },
                "runs": {k: v for k, v in SETTINGS.items() if k in args.settings},
                "lambdas": list(cfg["lambdas"]) if not args.no_sweep else [],
                "python": sys.version.split()[0],
                "torch": torch.__version__,
                "machine": platform.machine(),
            },
            "seeds": args.seeds,
            "gold_sem_ent": gold[0] if gold else None,
            "runs": runs,
            "lambda_sweep": sweep,
            "summary": summarise(runs, KEYS),
            "seconds": time.perf_counter() - started,
        }

    def checkpoint() -> None:  # after every run, so a stopped experiment leaves what it finished
        atomic_write_text(out / "results.json", json.dumps(assemble(), indent=1, default=float))

    for seed in args.seeds:
        for name in args.settings:
            runs.append(run(name, SETTINGS[name], seed, cfg, train_pairs, val_pairs, encoder, cache, cfg["lam"]))
            checkpoint()
            print(
                f"[{time.perf_counter() - started:7.1f}s] {name} seed {seed}: "
                + ", ".join(
                    f"{k}={runs[-1]['epochs'][-1].get(k, float('nan')):.3f}"
                    for k in ("val_loss", "val_sem_ent", "val_distinct_2", "head_share")
                ),
                flush=True,
            )
    if not args.no_sweep:
        seed = args.seeds[0]
        for lam in cfg["lambdas"]:
            reuse = [r for r in runs if r["setting"] == "dress_no_negatives" and r["seed"] == seed and r["lam"] == lam]
            if not reuse and lam == cfg["lam"] and args.only_sweep:
                continue  # the main comparison's dress_no_negatives run has it (merged by --merge)
            result = (
                reuse[0]
                if reuse
                else run(
                    "dress_no_negatives",
                    SETTINGS["dress_no_negatives"],
                    seed,
                    cfg,
                    train_pairs,
                    val_pairs,
                    encoder,
                    cache,
                    lam,
                )
            )
            sweep.append({**result, "setting": f"lambda_{lam:g}"})
            checkpoint()
            print(
                f"[{time.perf_counter() - started:7.1f}s] lambda {lam:g}: val_loss="
                f"{result['epochs'][-1].get('val_loss', float('nan')):.3f}",
                flush=True,
            )
    results = assemble()
    results["figures"] = figures(results, out)
    atomic_write_text(out / "results.json", json.dumps(results, indent=1, default=float))
    print(f"wrote {out / 'results.json'} in {results['seconds']:.0f}s")
    return results


if __name__ == "__main__":
    main()
