"""DRESS vs unweighted training (Han et al., 2022) on the embedded Chit-Chat corpus, with the public API.

    python experiments/dress_vs_baseline.py [--quick] [--regime base|scratch] [--out DIR]
        [--seeds 0 1 2 3 4] [--settings ...] [--threads 1]
    python experiments/dress_vs_baseline.py --merge DIR1 DIR2 ... --out DIR

Two regimes. ``base`` (the default, the paper's): the shipped base model
(``local:chitchat-gpt2``, pretrained on Chit-Chat's ``pretrain`` split) is fine-tuned with a
fine-tuning learning rate on a slice of the held-out ``finetune`` split, as the paper fine-tunes
DialoGPT. ``scratch`` (the earlier setting, kept to reproduce its page): the demo's
from-scratch 2-layer GPT-2. The same model, data and schedule are trained, per seed,

- ``baseline``: no DRESS;
- ``dress_nll``: DRESS gold weights + negatives as the paper trains them (-1 x NLL);
- ``dress_unlikelihood``: DRESS gold weights + bounded negatives (-log(1 - p), Welleck et al. 2020);
- ``dress_no_negatives``: DRESS gold weights only (lambda = 30);
- ``lambda_0``, ``lambda_10``, ``lambda_60``: gold weights only with another lambda (lambda 30 is
  ``dress_no_negatives``; lambda 0 makes every weight 1, so it must equal ``baseline``).

Negatives are mined as the authors do (``mine_at="start"``: greedy, no n-gram blocking, own
batches). Every epoch records validation loss and perplexity, Sem-Ent of greedy generations in
the clusters of the gold training responses, distinct-1/2, Ent-4, EAD, the share of
generations in head clusters (clusters holding > 10 % of them), RUQ and its margin, and per
batch kind (gold / negative) the mean training loss and gradient norm; the last epoch keeps the
generations' cluster ids, for a bootstrap of Sem-Ent over the contexts. ``results.json`` holds
every run and the statistics (per metric, the difference to the baseline with a Welch 95 %
interval over seeds, and the smallest difference the design detects with 80 % power). Only the
package's public API is used: callbacks, DialogueDataModule, DialogueLM and a Trainer, as a user
would.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from _environment import environment, environments
from _merge import MergeError, each_run_once, fail, read_json_object, refuse_writing_over_inputs

from lightning_div import DialogueDataModule, DialogueLM
from lightning_div._internal.io import atomic_write_text
from lightning_div.callbacks import (
    DRESSReweighting,
    RUQMonitor,
    SemanticDiversityMonitor,
)
from lightning_div.datamodules import DialogueLayout, Examples
from lightning_div.dress.weights import head_clusters
from lightning_div.measure.alerts import RUQAlert
from lightning_div.semantic.encoder import ResponseEncoder
from lightning_div.semantic.space import SemanticSpace
from lightning_div.settings import Generation, Lexical, Mining, Outputs

ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
LEXICAL = ("distinct_1", "distinct_2", "ent_4", "ead")
NO_NEGATIVES = {"mining": None}
SETTINGS: dict[str, tuple[dict[str, Any] | None, float | None]] = {  # name -> (DRESS arguments or None, lambda)
    "baseline": (None, None),
    "dress_nll": ({"mining": "nll"}, 30.0),  # the negatives' loss (Mining.loss)
    "dress_unlikelihood": ({"mining": "unlikelihood"}, 30.0),
    "dress_no_negatives": (NO_NEGATIVES, 30.0),
    "lambda_0": (NO_NEGATIVES, 0.0),
    "lambda_10": (NO_NEGATIVES, 10.0),
    "lambda_60": (NO_NEGATIVES, 60.0),
}
MAIN = ("baseline", "dress_nll", "dress_unlikelihood", "dress_no_negatives")
SWEEP = {"lambda_0": 0.0, "lambda_10": 10.0, "dress_no_negatives": 30.0, "lambda_60": 60.0}

# Chosen before running (docs/results/dress_vs_baseline.md says why), never tuned toward a result.
BASE = {
    "model": {"base": "local:chitchat-gpt2"},
    "train_source": "chitchat:finetune",
    "train_examples": 3000,
    "val_examples": 500,
    "epochs": 3,
    "batch_size": 32,
    "learning_rate": 1e-4,  # the demo's fine-tuning rate: at 5e-4 the base model's val/loss rose from the first epoch
    "warmup_steps": 30,
    "num_contexts": 500,  # Sem-Ent over 500 generation contexts: its own noise small against the seeds'
    "num_negative_contexts": 500,
    "ruq_prompts": 100,
    "max_new_tokens": 20,
    "seeds": [0, 1, 2, 3, 4],
    "settings": list(SETTINGS),
    "seeds_of": {"lambda_0": [0]},  # lambda 0 equals the baseline (all weights 1): one seed checks it
}
# The from-scratch regime of the earlier page (3 seeds then); its runs are kept in from_scratch/.
SCRATCH = {
    "model": {"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "n_positions": 128},
    "train_source": "chitchat",
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
    "seeds": [0, 1, 2],
    "settings": list(SETTINGS),
    "seeds_of": {"lambda_0": [0], "lambda_10": [0], "lambda_60": [0]},
}
# A smoke test of every code path (negatives, lambda 0 = baseline), sized for the tests: training dominates
# its cost (one optimizer step of 32 examples ~3 s on one thread), so two steps of 16 an epoch.
QUICK = dict(
    BASE,
    train_examples=32,
    batch_size=16,
    val_examples=16,
    epochs=2,
    num_contexts=16,
    num_negative_contexts=16,
    ruq_prompts=8,
    max_new_tokens=8,
    warmup_steps=2,
    seeds=[0],
    settings=["baseline", "dress_nll", "dress_unlikelihood", "lambda_0"],
    seeds_of={},
    cluster_views=False,  # no Sem-Ent cluster cards or heatmap: figures only, no number in results.json
)
REGIMES = {"base": BASE, "scratch": SCRATCH}


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
            ids = self.sem.space.clusters.assign(self.encoder.encode(responses))
            heads = head_clusters(ids, self.sem.space.clusters.num_clusters, 0.1)
            row["head_share"] = float(np.isin(ids, heads).mean())
            row["largest_cluster_share"] = float(np.bincount(ids).max() / len(ids))
            row["samples"] = responses[:6]
            row["cluster_ids"] = [int(i) for i in ids]  # for the bootstrap over contexts (last epoch kept)

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking and "val/loss" in trainer.callback_metrics:
            val_loss = float(trainer.callback_metrics["val/loss"])
            self.row(trainer).update(val_loss=val_loss, perplexity=math.exp(min(val_loss, 50.0)))


def build_module(cfg: dict[str, Any], seed: int) -> DialogueLM:
    """The regime's model: the shipped base model, or the from-scratch GPT-2 with the local tokenizer."""
    pl.seed_everything(seed, workers=True)
    common = {"learning_rate": cfg["learning_rate"], "warmup_steps": cfg["warmup_steps"]}
    if "base" in cfg["model"]:
        return DialogueLM(cfg["model"]["base"], **common)
    return DialogueLM(model_name_or_path=None, tokenizer="local:chitchat", from_scratch=dict(cfg["model"]), **common)


def run(
    name: str,
    seed: int,
    cfg: dict[str, Any],
    train_pairs: list,
    val_pairs: list,
    encoder: ResponseEncoder,
    cache: Path,
) -> dict[str, Any]:
    """One training run; returns its settings and per-epoch numbers."""
    dress_args, lam = SETTINGS[name]
    lm = build_module(cfg, seed)
    dm = DialogueDataModule(
        train=train_pairs,
        val=val_pairs,
        layout=DialogueLayout(max_turns=2),
        batch_size=cfg["batch_size"],
        seed=seed,
        show_progress=False,
    )
    generation = Generation(batch_size=64, max_new_tokens=cfg["max_new_tokens"])
    sem = SemanticDiversityMonitor(
        SemanticSpace(encoder, num_clusters=20, batch_size=64, show_progress=False),
        num_contexts=cfg["num_contexts"],
        lexical=Lexical(LEXICAL),
        seed=seed,
        generation=generation,
        outputs=Outputs(
            log_samples=0, cluster_views=cfg.get("cluster_views", True), show_progress=False, dirpath=str(cache)
        ),
    )
    ruq = RUQMonitor(
        num_contexts=cfg["ruq_prompts"],
        num_train_contexts=cfg["ruq_prompts"],
        plot=None,
        alert=RUQAlert(warn_drop=None),
        seed=seed,
        generation=generation,
        outputs=Outputs(show_progress=False, dirpath=str(cache)),
    )
    recorder = Recorder(sem, encoder, len(train_pairs))
    callbacks: list[pl.Callback] = [sem, ruq, recorder]
    dress = None
    if dress_args is not None:
        loss = dress_args["mining"]
        mining = Mining(cfg["num_negative_contexts"], at="start", batches="separate", loss=loss) if loss else None
        dress = DRESSReweighting(
            space=SemanticSpace(encoder, num_clusters=20, batch_size=64, show_progress=False),
            lam=lam,
            normalize=True,
            mining=mining,
            seed=seed,
            generation=Generation(batch_size=64, max_new_tokens=cfg["max_new_tokens"]),
            outputs=Outputs(show_progress=False, dirpath=str(cache)),
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
    rows = [epochs[e] for e in sorted(epochs)]
    for row in rows[:-1]:  # the cluster ids of the last epoch are enough for the bootstrap
        row.pop("cluster_ids", None)
    return {
        "setting": name,
        "seed": seed,
        "lam": lam,
        "dress": dress_args,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "epochs": rows,
    }


def summarise(runs: list[dict[str, Any]], keys: list[str]) -> dict[str, Any]:
    """Mean and standard deviation over seeds, per setting, per epoch, per key."""
    out: dict[str, Any] = {}
    for name in SETTINGS:
        sel = [r for r in runs if r["setting"] == name]
        if not sel:
            continue
        n_epochs = min(len(r["epochs"]) for r in sel)
        out[name] = {"n": len(sel)}
        for key in keys:
            vals = np.array([[r["epochs"][e].get(key, np.nan) for e in range(n_epochs)] for r in sel], dtype=float)
            out[name][key] = {
                "mean": np.nanmean(vals, axis=0).tolist() if vals.size else [],
                "std": np.nanstd(vals, axis=0, ddof=1 if len(sel) > 1 else 0).tolist() if vals.size else [],
            }
    return out


COMPARED = [
    "val_loss",
    "perplexity",
    "val_sem_ent",
    "val_distinct_1",
    "val_distinct_2",
    "val_ent_4",
    "val_ead",
    "head_share",
    "val_cluster_js",
    "val_ruq",
    "val_ruq_margin",
]
KEYS = [*COMPARED, "train_ruq", "gold_batch_loss", "negative_batch_loss", "gold_grad_norm", "negative_grad_norm"]


def sem_ent_of(ids: np.ndarray, k: int = 20) -> float:
    from lightning_div.metrics import semantic_entropy

    return float(semantic_entropy(ids.tolist(), num_clusters=k))


def bootstrap_sem_ent(ids: list[int], resamples: int = 1000, seed: int = 0) -> dict[str, float]:
    """Sem-Ent of one run's generations resampled over the contexts: the measurement's own noise."""
    rng = np.random.default_rng(seed)
    x = np.asarray(ids)
    values = np.array([sem_ent_of(x[rng.integers(0, len(x), len(x))]) for _ in range(resamples)])
    lo, hi = np.percentile(values, [2.5, 97.5])
    return {"point": sem_ent_of(x), "std": float(values.std(ddof=1)), "ci95": [float(lo), float(hi)], "n": len(x)}


def compare(runs: list[dict[str, Any]], against: str = "baseline") -> dict[str, Any]:
    """Per setting and metric (last epoch): difference to ``against`` with a Welch 95 % interval over seeds,
    and the smallest difference this design detects (two-sided alpha 0.05, power 0.8)."""
    from scipy import stats

    def last(name: str, key: str) -> np.ndarray:
        return np.array([r["epochs"][-1].get(key, np.nan) for r in runs if r["setting"] == name], dtype=float)

    out: dict[str, Any] = {}
    for name in SETTINGS:
        if name == against or not any(r["setting"] == name for r in runs):
            continue
        out[name] = {}
        for key in COMPARED:
            a, b = last(name, key), last(against, key)
            a, b = a[np.isfinite(a)], b[np.isfinite(b)]
            if len(a) < 2 or len(b) < 2:
                out[name][key] = {
                    "n": [len(a), len(b)],
                    "diff": float(a.mean() - b.mean()) if len(a) and len(b) else None,
                }
                continue
            va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
            se = math.sqrt(va + vb)
            diff = float(a.mean() - b.mean())
            if se == 0:
                out[name][key] = {"n": [len(a), len(b)], "diff": diff, "ci95": [diff, diff], "mdd80": 0.0, "p": None}
                continue
            df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
            t975, t80 = stats.t.ppf(0.975, df), stats.t.ppf(0.8, df)
            p = float(2 * stats.t.sf(abs(diff) / se, df))
            out[name][key] = {
                "n": [len(a), len(b)],
                "diff": diff,
                "ci95": [diff - t975 * se, diff + t975 * se],
                "mdd80": float((t975 + t80) * se),
                "p": p,
                "df": float(df),
            }
    return out


def figures(results: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    written = []
    summary = {k: v for k, v in results["summary"].items() if k in MAIN}
    panels = [
        "val_loss",
        "val_sem_ent",
        "val_distinct_2",
        "val_ent_4",
        "val_ead",
        "head_share",
        "val_ruq_margin",
        "val_distinct_1",
    ]
    fig, axes = plt.subplots(2, 4, figsize=(16, 7))
    for ax, key in zip(axes.flat, panels):
        for i, (name, per_key) in enumerate(summary.items()):
            mean, std = np.array(per_key[key]["mean"]), np.array(per_key[key]["std"])
            x = np.arange(1, len(mean) + 1)
            ax.errorbar(x, mean, yerr=std, marker="o", capsize=3, label=name, color=f"C{i}")
        ax.set_title(key)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if key == "val_sem_ent" and results.get("gold_sem_ent") is not None:
            ax.axhline(results["gold_sem_ent"], color="grey", ls="--", lw=1, label="gold responses")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"DRESS vs baseline ({results['settings']['regime']}), mean +- std over seeds {results['seeds']}")
    fig.tight_layout()
    fig.savefig(out / "dress_vs_baseline.png", dpi=110)
    plt.close(fig)
    written.append("dress_vs_baseline.png")

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    # one colour per setting in both panels (and as in the figure above): baseline has no negative
    # batches, so the right panel's own colour cycle would give the next setting baseline's colour
    for i, (name, per_key) in enumerate(summary.items()):
        for ax, kind in zip(axes, ("gold", "negative")):
            mean = np.array(per_key[f"{kind}_batch_loss"]["mean"], dtype=float)
            if np.all(np.isnan(mean)):
                continue
            ax.plot(np.arange(1, len(mean) + 1), mean, marker="o", label=name, color=f"C{i}")
            ax.set_title(f"mean training loss of {kind} batches")
            ax.set_xlabel("epoch")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "batch_losses.png", dpi=110)
    plt.close(fig)
    written.append("batch_losses.png")

    every = results["summary"]  # the figures above draw MAIN only
    # lambda 0 makes every weight 1, so the baseline's runs are the sweep's lambda 0 (a lambda_0 run checks
    # that: the quick test asserts it equals the baseline exactly); the lambda_0 runs are drawn on top
    zero = "baseline" if "baseline" in every else "lambda_0"
    sweep = [(0.0, zero)] if zero in every else []
    sweep += [(lam, name) for name, lam in SWEEP.items() if lam > 0 and name in every]
    if len(sweep) > 1:
        fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
        lams = [lam for lam, _ in sweep]
        for ax, key in zip(axes, ("val_loss", "val_sem_ent", "val_distinct_2", "head_share")):
            means = [every[n][key]["mean"][-1] for _, n in sweep]
            stds = [every[n][key]["std"][-1] for _, n in sweep]
            ax.errorbar(lams, means, yerr=stds, marker="o", capsize=3, label="mean +- std over seeds")
            for lam, name, mean in zip(lams, (n for _, n in sweep), means):
                ax.annotate(f"n={every[name]['n']}", (lam, mean), textcoords="offset points", xytext=(4, 4), fontsize=7)
            if zero == "baseline" and "lambda_0" in every:
                check = [r["epochs"][-1].get(key, np.nan) for r in results["runs"] if r["setting"] == "lambda_0"]
                ax.plot([0.0] * len(check), check, "x", color="C3", label="lambda_0 run(s)")
            ax.set_xlabel("lambda")
            ax.set_xticks(lams)
            ax.set_title(f"{key}, last epoch")
        axes[0].legend(fontsize=7)
        title = "lambda sweep (DRESS weights without negatives)"
        fig.suptitle(title + (": lambda 0 is the baseline's runs" if zero == "baseline" else ""))
        fig.tight_layout()
        fig.savefig(out / "lambda_sweep.png", dpi=110)
        plt.close(fig)
        written.append("lambda_sweep.png")
    return written


def assemble(runs: list[dict[str, Any]], settings: dict[str, Any], seconds: Any) -> dict[str, Any]:
    """results.json's content from the runs: summary, comparison, bootstrap of Sem-Ent."""
    gold = [
        r["epochs"][0].get("val_sem_ent_gold") for r in runs if r["epochs"] and "val_sem_ent_gold" in r["epochs"][0]
    ]
    with_ids = [r for r in runs if r["epochs"] and r["epochs"][-1].get("cluster_ids")]
    boot = {f"{r['setting']}/{r['seed']}": bootstrap_sem_ent(r["epochs"][-1]["cluster_ids"]) for r in with_ids}
    return {
        "settings": settings,
        "seeds": sorted({r["seed"] for r in runs}),
        "gold_sem_ent": gold[0] if gold else None,
        "runs": sorted(runs, key=lambda r: (list(SETTINGS).index(r["setting"]), r["seed"])),
        "summary": summarise(runs, KEYS),
        "comparison": compare(runs),
        "bootstrap_sem_ent": boot,
        "seconds": seconds,
    }


def _part(path: Path) -> dict[str, Any]:
    """One part's results.json, with what a merge reads of it checked (each failure names the file)."""
    part = read_json_object(path)
    config = part.get("settings", {}).get("config") if isinstance(part.get("settings"), dict) else None
    if not isinstance(config, dict):
        raise MergeError(
            f"{path}: no settings.config object (the settings the part ran with): not a dress_vs_baseline part"
        )
    if not isinstance(part.get("runs"), list) or not all(isinstance(r, dict) for r in part["runs"]):
        raise MergeError(f"{path}: 'runs' must be a list of runs (objects)")
    for i, run in enumerate(part["runs"]):
        if (
            run.get("setting") not in SETTINGS
            or isinstance(run.get("seed"), bool)
            or not isinstance(run.get("seed"), int)
        ):
            raise MergeError(
                f"{path}: runs[{i}]: setting {run.get('setting')!r} seed {run.get('seed')!r} is not a run of this experiment"
            )
    return part


def merge(dirs: list[Path], out: Path) -> dict[str, Any]:
    """One results.json and its figures from several partial ones (same config; e.g. one process per setting).

    A run held by two parts is kept once when both hold the same run, else the merge is refused naming both
    files (the later part used to win without a word); ``out`` may not be the folder of one of its parts.

    Raises:
        MergeError: a damaged part, parts of different configs, differing runs of one setting and seed, or an
            ``out`` that would rewrite a part.
    """
    files = [d / "results.json" for d in dirs]
    parts = [_part(f) for f in files]
    configs = {json.dumps(p["settings"]["config"], sort_keys=True) for p in parts}
    if len(configs) != 1:
        raise MergeError(f"cannot merge results of different configs: {sorted(configs)}")
    refuse_writing_over_inputs(out, [out / "results.json"], files)
    runs = each_run_once([(f, p["runs"]) for f, p in zip(files, parts)], lambda r: (r["setting"], r["seed"]))
    settings = dict(parts[0]["settings"], merged_from=[str(d) for d in dirs])
    settings["settings"] = [n for n in SETTINGS if any(r["setting"] == n for r in runs)]
    results = assemble(runs, settings, {str(d): p["seconds"] for d, p in zip(dirs, parts)})
    results["environments"] = environments(parts)  # each part's own: they may have run in other environments
    out.mkdir(parents=True, exist_ok=True)
    results["figures"] = figures(results, out)
    atomic_write_text(out / "results.json", json.dumps(results, indent=1, default=float))
    print(f"wrote {out / 'results.json'} from {len(dirs)} parts")
    return results


LABELS = {
    "val_loss": "val loss",
    "perplexity": "ppl",
    "val_sem_ent": "Sem-Ent",
    "val_distinct_1": "dist-1",
    "val_distinct_2": "dist-2",
    "val_ent_4": "Ent-4",
    "val_ead": "EAD",
    "head_share": "head share",
    "val_cluster_js": "cluster JS",
    "val_ruq": "RUQ %",
    "val_ruq_margin": "RUQ margin",
}


def markdown(results: dict[str, Any]) -> str:
    """The results page's tables from a results.json: the last epoch per setting (mean +- std over
    seeds), each setting's difference to the baseline (Welch 95 % interval, smallest detectable
    difference at power 0.8, p), Sem-Ent's noise over seeds against over contexts, and each run's time."""
    summary, lines = results["summary"], []
    keys = [k for k in COMPARED if any(k in v for v in summary.values())]
    lines += ["| setting | " + " | ".join(LABELS[k] for k in keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for name, per_key in summary.items():
        cells = [f"{per_key[k]['mean'][-1]:.3f} ± {per_key[k]['std'][-1]:.3f}" for k in keys]
        lines.append(f"| {name} (n={per_key.get('n', '?')}) | " + " | ".join(cells) + " |")
    lines += ["", "| setting − baseline | metric | difference | 95 % interval (Welch) | detectable (power 0.8) | p |"]
    lines.append("|---|---|---|---|---|---|")
    for name, per_key in results.get("comparison", {}).items():
        for key, c in per_key.items():
            if not isinstance(c, dict) or "ci95" not in c:
                continue
            p = "–" if c.get("p") is None else f"{c['p']:.3f}"
            lines.append(
                f"| {name} | {LABELS[key]} | {c['diff']:+.3f} | [{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}] "
                f"| ±{c['mdd80']:.3f} | {p} |"
            )
    lines += ["", "| setting | Sem-Ent std over seeds | mean bootstrap std over contexts (one run) |", "|---|---|---|"]
    for name, per_key in summary.items():
        boots = [b["std"] for k, b in results.get("bootstrap_sem_ent", {}).items() if k.split("/")[0] == name]
        if boots:
            lines.append(f"| {name} | {per_key['val_sem_ent']['std'][-1]:.3f} | {float(np.mean(boots)):.3f} |")
    lines += ["", "| run | wall s | CPU s |", "|---|---|---|"]
    for r in results["runs"]:
        lines.append(
            f"| {r['setting']} seed {r['seed']} | {r['seconds']:.0f} | {r.get('cpu_seconds', float('nan')):.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tiny setting for the tests (< 3 minutes)")
    parser.add_argument("--regime", choices=list(REGIMES), default="base", help="base (default) or scratch")
    parser.add_argument("--out", default="runs/experiments/dress_vs_baseline", help="output directory")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default: the regime's seeds")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (1: run two processes at once)")
    parser.add_argument("--settings", nargs="+", default=None, choices=list(SETTINGS))
    parser.add_argument("--cache", default=None, help="cluster cache directory (default: OUT/cache), shareable")
    parser.add_argument(
        "--merge",
        nargs="+",
        default=None,
        metavar="DIR",
        help="combine the results.json of runs done in parallel processes into OUT (no training)",
    )
    parser.add_argument("--markdown", metavar="RESULTS_JSON", help="print the page's tables of a results.json")
    args = parser.parse_args(argv)
    if args.markdown:
        results = json.loads(Path(args.markdown).read_text())
        print(markdown(results), end="")
        return results
    if args.merge:
        try:
            return merge([Path(d) for d in args.merge], Path(args.out))
        except MergeError as err:
            fail("dress_vs_baseline.py --merge", err)
    cfg = dict(QUICK if args.quick else REGIMES[args.regime])
    seeds = args.seeds or cfg["seeds"]
    names = args.settings or cfg["settings"]
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = Path(args.cache) if args.cache else out / "cache"
    encoder = ResponseEncoder(ENCODER, pooling="mean", batch_size=64, show_progress=False)
    # One fixed data subset for every run, so the clusters are fitted once; seeds change order, dropout, sampling.
    data = DialogueDataModule(
        train=cfg["train_source"],
        val="chitchat:validation",
        layout=DialogueLayout(max_turns=2),
        examples=Examples(max_train=cfg["train_examples"], max_val=cfg["val_examples"]),
        seed=0,
        show_progress=False,
    )
    train_pairs, val_pairs = data.train_pairs(), data.val_pairs()
    settings = {
        "regime": "quick" if args.quick else args.regime,
        "config": {k: v for k, v in cfg.items() if k not in ("seeds", "settings", "seeds_of")},
        "quick": args.quick,
        "threads": args.threads,
        "settings": names,
        "dress": {
            "encoder": ENCODER,
            "num_clusters": 20,
            "normalize": True,
            "mine_at": "start",
            "negative_batches": "separate",
            "head_threshold": 0.1,
        },
        "command": "python experiments/dress_vs_baseline.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
    }
    started = time.perf_counter()
    recorded = environment()  # once: the process's versions do not change while it runs
    runs: list[dict[str, Any]] = []
    for name in names:
        for seed in cfg.get("seeds_of", {}).get(name, seeds) if args.seeds is None else seeds:
            runs.append(run(name, seed, cfg, train_pairs, val_pairs, encoder, cache))
            # after every run, so a stopped experiment leaves what it finished
            partial = assemble(runs, settings, time.perf_counter() - started) | {"environment": recorded}
            atomic_write_text(out / "results.json", json.dumps(partial, indent=1, default=float))
            last = runs[-1]
            print(
                f"[{time.perf_counter() - started:7.1f}s] {name} seed {seed} ({last['seconds']:.0f} s wall, "
                f"{last['cpu_seconds']:.0f} s CPU): "
                + ", ".join(
                    f"{k}={last['epochs'][-1].get(k, float('nan')):.3f}"
                    for k in ("val_loss", "val_sem_ent", "val_distinct_2", "head_share")
                ),
                flush=True,
            )
    results = assemble(runs, settings, time.perf_counter() - started) | {"environment": recorded}
    results["figures"] = figures(results, out)
    atomic_write_text(out / "results.json", json.dumps(results, indent=1, default=float))
    print(f"wrote {out / 'results.json'} in {results['seconds']:.0f}s")
    return results


if __name__ == "__main__":
    main()
