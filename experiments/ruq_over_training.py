"""RUQ over training (Khayrallah & Sedoc 2021, §6): how often the reference beats "I don't know.", epoch by epoch.

    python experiments/ruq_over_training.py [--quick] [--regime base|scratch] [--out DIR] [--seeds 0 1]
        [--corners 0.4,0.2 0.0,0.4] [--merge DIR1 DIR2 ...] [--before]

Regime ``base`` (the default): the shipped base model (``local:chitchat-gpt2``) is fine-tuned on
a slice of Chit-Chat's held-out ``finetune`` split, once per setting of the paper's two axes and
seed: dropout (residual, embedding and attention) x label smoothing at the paper's corners, its
BASE (dropout 0.4, smoothing 0.2), its BEST (dropout 0.0, smoothing 0.4) and the two mixed ones.
Regime ``scratch`` (the earlier page): a 2-layer GPT-2 trained from scratch over dropout 0.0 /
0.2 / 0.4 without label smoothing. Training uses ``DialogueLM`` + ``DialogueDataModule`` with a
``RUQMonitor`` in the Trainer. Per epoch it records what the monitor logged (``train/ruq``,
``val/ruq``, both IDK strings, the margins) and the losses; after training it draws the paper's
Figure 1 (mean per-token log-probability by position of the reference, the beam output and
each IDK string, on the training and the validation prompts) for the settings with the best and
the worst final RUQ-train. Writes ``DIR/results.json`` and ``DIR/*.png``. ``--before`` instead
validates the base model as shipped, once per seed, on the same prompts (the runs' starting point).

The paper's claim: baseline (strongly regularised) models prefer "I don't know." to the
reference most of the time, even on their training data (RUQ-train 28.5 %), and the tuned
model much less (95.3 %); RUQ-test is lower than RUQ-train throughout (12.2 % and 35.7 %).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import _ruq_common as common
import numpy as np
from _environment import environments
from _merge import MergeError, each_run_once, fail, read_json_object, refuse_writing_over_inputs

from lightning_div.callbacks import RUQMonitor, RUQScoring
from lightning_div.model.adapters import resolve_adapter
from lightning_div.model.scoring import candidate_logprobs, profile_from_logprobs
from lightning_div.settings import Generation, Outputs

IDK = ("I don't know.", "I don't know what to do.")

BASE = dict(
    model={"base": "local:chitchat-gpt2"},
    train_source="chitchat:finetune",
    # (dropout, label smoothing): the paper's BASE, BEST and the two mixed corners
    corners=[(0.4, 0.2), (0.0, 0.4), (0.0, 0.2), (0.4, 0.4)],
    max_train_examples=600,
    max_val_examples=300,
    batch_size=16,
    epochs=10,
    learning_rate=5e-4,
    warmup_steps=20,
    num_train_prompts=150,
    num_val_prompts=150,
    profile_prompts=64,
    num_beams=5,
    seeds=[0, 1],
)
SCRATCH = dict(
    model=dict(n_layer=2, n_embd=128, n_head=4),
    train_source="chitchat",
    corners=[(0.0, 0.0), (0.2, 0.0), (0.4, 0.0)],
    max_train_examples=600,
    max_val_examples=300,
    batch_size=16,
    epochs=16,
    learning_rate=2e-3,
    warmup_steps=50,
    num_train_prompts=150,
    num_val_prompts=150,
    profile_prompts=64,
    num_beams=5,
    seeds=[0, 1],
)
QUICK = dict(  # training steps were the largest share of the test's cost: two steps of 8 an epoch
    BASE,
    corners=[(0.4, 0.2), (0.0, 0.4)],
    max_train_examples=16,
    max_val_examples=16,
    batch_size=8,
    epochs=2,
    warmup_steps=2,
    num_train_prompts=12,
    num_val_prompts=12,
    profile_prompts=6,
    num_beams=2,
    seeds=[0],
)
REGIMES = {"base": BASE, "scratch": SCRATCH}


def corner_name(corner: tuple[float, float]) -> str:
    return f"dropout {corner[0]:g}, smoothing {corner[1]:g}"


def profiles(module: Any, pairs: list[Any], num_beams: int) -> dict[str, dict[str, list[float]]]:
    """Figure 1's lines for these prompts: reference, beam output and each IDK string, by token position."""
    adapter = resolve_adapter(module, batch_size=32, max_new_tokens=24, show_progress=False)
    contexts = [list(p.context) for p in pairs]
    beams = adapter.generate(contexts, num_beams=num_beams, do_sample=False)
    lines = {"reference": [p.response for p in pairs], f"beam ({num_beams})": beams}
    lines.update({f"IDK: {s}": [s] * len(pairs) for s in IDK})
    # every line's response to a prompt scored after one encoding of its context
    logprobs = candidate_logprobs(adapter, contexts, [[rs[i] for rs in lines.values()] for i in range(len(pairs))])
    out = {}
    for k, name in enumerate(lines):
        mean, count = profile_from_logprobs([per_prompt[k] for per_prompt in logprobs])
        out[name] = {"mean_logprob": mean.tolist(), "count": count.tolist()}
    out["beam_examples"] = {"responses": beams[:5]}  # type: ignore[assignment]
    return out


def run_data(cfg: dict[str, Any], seed: int) -> Any:
    """One seed's data: its seeded 600-example fine-tuning subset and its validation subset."""
    return common.chat_data(
        cfg["max_train_examples"], cfg["max_val_examples"], cfg["batch_size"], seed, train=cfg["train_source"]
    )


def monitor(cfg: dict[str, Any], seed: int, root: Path) -> RUQMonitor:
    """The runs' RUQ monitor: its prompts are drawn from the data with ``seed``, the same for every corner."""
    return RUQMonitor(
        idk_responses=IDK,
        num_train_contexts=cfg["num_train_prompts"],
        num_contexts=cfg["num_val_prompts"],
        plot=None,
        scoring=RUQScoring(reference="lowest"),
        seed=seed,
        generation=Generation(batch_size=64),
        outputs=Outputs(show_progress=False, dirpath=str(root / "cache")),
        on_error="raise",
    )


BEFORE_KEYS = ("val/loss", "val/ruq", "val/ruq_idk2", "val/ruq_margin", "val/ruq_margin_idk2")


def before_fine_tuning(cfg: dict[str, Any], seed: int, root: Path) -> dict[str, Any]:
    """The base model as shipped, validated once with the runs' monitor: validation loss and RUQ-val on the
    very prompts each run of this seed measures after every epoch, before any training step.

    Dropout and label smoothing do not enter: validation runs in eval mode and ``val/loss`` is the plain NLL.
    """
    start, cpu_start = time.perf_counter(), time.process_time()
    module = common.base_model(cfg["model"]["base"], 0.0, 0.0, cfg["learning_rate"], cfg["warmup_steps"], seed)
    trainer = common.trainer(root, [monitor(cfg, seed, root)], cfg["epochs"])
    trainer.validate(module, run_data(cfg, seed), verbose=False)
    logged = {k: float(v) for k, v in trainer.callback_metrics.items()}
    missing = [k for k in BEFORE_KEYS if k not in logged]
    if missing:
        raise RuntimeError(f"seed={seed}: validating the base model logged no {missing}")
    return {
        "seed": seed,
        **{k: logged[k] for k in BEFORE_KEYS},
        "wall_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu_start,
    }


def run_one(cfg: dict[str, Any], corner: tuple[float, float], seed: int, root: Path) -> dict[str, Any]:
    start, cpu_start = time.perf_counter(), time.process_time()
    dropout, smoothing = corner
    if "base" in cfg["model"]:
        module = common.base_model(
            cfg["model"]["base"], dropout, smoothing, cfg["learning_rate"], cfg["warmup_steps"], seed
        )
    else:
        module = common.chat_model(
            common.gpt2_config(dropout=dropout, **cfg["model"]), cfg["learning_rate"], cfg["warmup_steps"], seed
        )
    data = run_data(cfg, seed)
    ruq = monitor(cfg, seed, root)
    recorder = common.EpochRecorder()
    trainer = common.trainer(root, [ruq, recorder], cfg["epochs"])
    trainer.fit(module, data)
    keep = (
        "train/ruq",
        "train/ruq_idk2",
        "val/ruq",
        "val/ruq_idk2",
        "train/ruq_margin",
        "train/ruq_margin_idk2",
        "val/ruq_margin",
        "val/ruq_margin_idk2",
        "train/loss_epoch",
        "val/loss",
        "elapsed_s",
    )
    epochs = [{"epoch": int(r["epoch"]), **{k: r[k] for k in keep if k in r}} for r in recorder.rows]
    missing = [k for k in keep if k not in epochs[-1]]
    if missing:
        raise RuntimeError(f"{corner_name(corner)} seed={seed}: the last epoch has no {missing}")
    module.eval()
    n = cfg["profile_prompts"]
    # the datamodule's subsets are already seeded random draws of the corpus: their first n prompts
    prof = {
        "train": profiles(module, data.train_pairs()[:n], cfg["num_beams"]),
        "val": profiles(module, data.val_pairs()[:n], cfg["num_beams"]),
    }
    return {
        "dropout": dropout,
        "label_smoothing": smoothing,
        "seed": seed,
        "epochs": epochs,
        "profiles": prof,
        "train_examples": len(data.train_pairs()),
        "val_examples": len(data.val_pairs()),
        "wall_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu_start,
    }


def corner_of(run: dict[str, Any]) -> tuple[float, float]:
    return (run["dropout"], run.get("label_smoothing", 0.0))


def summarise(runs: list[dict[str, Any]], corners: list[tuple[float, float]]) -> list[dict[str, Any]]:
    rows = []
    for c in corners:
        mine = [r for r in runs if corner_of(r) == tuple(c)]
        if not mine:
            continue
        last = [r["epochs"][-1] for r in mine]
        row: dict[str, Any] = {"dropout": c[0], "label_smoothing": c[1], "seeds": [r["seed"] for r in mine]}
        for key in (
            "train/ruq",
            "val/ruq",
            "train/ruq_margin",
            "val/ruq_margin",
            "train/ruq_idk2",
            "val/ruq_idk2",
            "train/loss_epoch",
            "val/loss",
        ):
            values = [e[key] for e in last]
            row[key] = {"mean": float(np.mean(values)), "std": float(np.std(values)), "per_seed": values}
        row["max_train_ruq_any_epoch"] = float(max(e["train/ruq"] for r in mine for e in r["epochs"]))
        row["max_val_ruq_any_epoch"] = float(max(e["val/ruq"] for r in mine for e in r["epochs"]))
        rows.append(row)
    return rows


def plot_curves(runs: list[dict[str, Any]], corners: list[tuple[float, float]], out: Path) -> list[str]:
    plt = common.plt()
    names = []
    for stem, keys, ylabel in (
        ("ruq_over_epochs", ("train/ruq", "val/ruq"), "RUQ (% reference preferred)"),
        ("ruq_margin_over_epochs", ("train/ruq_margin", "val/ruq_margin"), "margin: ref - IDK (nats / token)"),
    ):
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
        for ax, key in zip(axes, keys):
            for i, c in enumerate(corners):
                color = f"C{i}"
                mine = [r for r in runs if corner_of(r) == tuple(c)]
                if not mine:
                    continue
                for r in mine:
                    ax.plot(
                        [e["epoch"] + 1 for e in r["epochs"]],
                        [e[key] for e in r["epochs"]],
                        color=color,
                        alpha=0.35,
                        linewidth=1,
                    )
                ep = [e["epoch"] + 1 for e in mine[0]["epochs"]]
                mean = np.mean([[e[key] for e in r["epochs"]] for r in mine], axis=0)
                ax.plot(ep, mean, color=color, marker="o", markersize=3, label=corner_name(c))
            ax.set_title(key.replace("val/", "validation ").replace("train/", "train "))
            ax.set_xlabel("epoch")
            ax.grid(alpha=0.3)
        axes[0].set_ylabel(ylabel)
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / f"{stem}.png", dpi=120)
        plt.close(fig)
        names.append(f"{stem}.png")
    return names


def plot_positions(runs: list[dict[str, Any]], summary: list[dict[str, Any]], out: Path) -> tuple[str, dict]:
    """The paper's Figure 1 for the best and the worst setting (by final RUQ-train, first seed)."""
    plt = common.plt()
    ranked = sorted(summary, key=lambda r: (r["train/ruq"]["mean"], r["train/ruq_margin"]["mean"]))
    worst = (ranked[0]["dropout"], ranked[0]["label_smoothing"])
    best = (ranked[-1]["dropout"], ranked[-1]["label_smoothing"])
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharey=True)
    markers = {"reference": "*", "beam": "o", "IDK: I don't know.": "s", "IDK: I don't know what to do.": "^"}
    for col, (label, c) in enumerate((("worst", worst), ("best", best))):
        run = next(r for r in runs if corner_of(r) == c)
        for row, split in enumerate(("train", "val")):
            ax = axes[row, col]
            for name, line in run["profiles"][split].items():
                if "mean_logprob" not in line:
                    continue
                mean, count = np.asarray(line["mean_logprob"]), np.asarray(line["count"])
                keep = count >= max(1, int(0.1 * count[0]))  # positions few responses reach are noise
                marker = next((m for k, m in markers.items() if name.startswith(k)), "o")
                ax.plot(np.arange(1, len(mean) + 1)[keep], mean[keep], marker=marker, markersize=5, label=name)
            ax.set_title(
                f"{label} ({corner_name(c)}), {'train' if split == 'train' else 'validation'} prompts, seed {run['seed']}",
                fontsize=9,
            )
            ax.set_xlabel("token position (EOS included)")
            ax.grid(alpha=0.3)
        axes[0, col].legend(fontsize=7)
    axes[0, 0].set_ylabel("mean log p(token)")
    axes[1, 0].set_ylabel("mean log p(token)")
    fig.tight_layout()
    fig.savefig(out / "ruq_positions_best_worst.png", dpi=120)
    plt.close(fig)
    return "ruq_positions_best_worst.png", {"best": list(best), "worst": list(worst)}


def finish(cfg: dict[str, Any], runs: list[dict[str, Any]], out: Path, meta: dict[str, Any]) -> dict[str, Any]:
    corners = [tuple(c) for c in cfg["corners"]]
    summary = summarise(runs, corners)
    figures = plot_curves(runs, corners, out)
    fig, chosen = plot_positions(runs, summary, out)
    results = {
        "experiment": "ruq_over_training",
        **meta,
        "settings": cfg,
        "idk_responses": list(IDK),
        "reference": "lowest",
        "machine": common.machine(),
        "summary": summary,
        **chosen,
        "runs": sorted(runs, key=lambda r: (corners.index(corner_of(r)), r["seed"])),
        "figures": [*figures, fig],
    }
    path = common.write_results(out, results)
    print(f"wrote {path} and {', '.join(results['figures'])}")
    return results


def _part(path: Path) -> dict[str, Any]:
    """One part's results.json, with what a merge reads of it checked (each failure names the file)."""
    part = read_json_object(path)
    settings = part.get("settings")
    if not isinstance(settings, dict) or not isinstance(settings.get("corners"), list):
        raise MergeError(f"{path}: no settings.corners list: not a ruq_over_training part")
    if not isinstance(part.get("runs"), list) or not all(isinstance(r, dict) for r in part["runs"]):
        raise MergeError(f"{path}: 'runs' must be a list of runs (objects)")
    for i, run in enumerate(part["runs"]):
        if any(k not in run for k in ("dropout", "seed")):
            raise MergeError(f"{path}: runs[{i}] lacks its dropout or seed")
    return part


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny settings for the tests (< 3 minutes)")
    p.add_argument("--regime", choices=list(REGIMES), default="base")
    p.add_argument("--out", default=None, help="output directory (default: runs/experiments/ruq_over_training)")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds (default: the regime's)")
    p.add_argument("--corners", nargs="+", default=None, metavar="DROPOUT,SMOOTHING", help="a subset of the corners")
    p.add_argument("--merge", nargs="+", default=None, metavar="DIR", help="combine parts run in parallel into OUT")
    p.add_argument(
        "--before",
        action="store_true",
        help="validate the base model before fine-tuning (per seed: val loss, RUQ-val on the runs' prompts)",
    )
    args = p.parse_args(argv)
    common.one_thread()
    out = Path(args.out or "runs/experiments/ruq_over_training")
    out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        files = [Path(d) / "results.json" for d in args.merge]
        try:
            parts = [_part(f) for f in files]
            refuse_writing_over_inputs(out, [out / "results.json"], files)
            # a run held by two parts: kept once when both hold the same run, else refused naming both files
            runs = each_run_once(
                [(f, part["runs"]) for f, part in zip(files, parts)],
                lambda r: (r["dropout"], r.get("label_smoothing", 0.0), r["seed"]),
            )
        except MergeError as err:
            fail("ruq_over_training.py --merge", err)
        # parts split by corner, by seed or both: each corner and seed once, in the order first met
        corners = [c for part in parts for c in part["settings"]["corners"]]
        corners = [c for i, c in enumerate(corners) if c not in corners[:i]]
        seeds = sorted({s for part in parts for s in part["settings"]["seeds"]})
        cfg = dict(parts[0]["settings"], corners=corners, seeds=seeds)
        meta = {"quick": parts[0]["quick"], "regime": parts[0]["regime"], "merged_from": args.merge}
        meta["wall_s"] = sum(part["wall_s"] for part in parts)
        meta["environments"] = environments(parts)
        return finish(cfg, runs, out, meta)
    cfg = dict(QUICK if args.quick else REGIMES[args.regime])
    if args.seeds:
        cfg["seeds"] = list(args.seeds)
    if args.corners:
        chosen = [tuple(float(x) for x in c.split(",")) for c in args.corners]
        unknown = [c for c in chosen if c not in cfg["corners"]]
        if unknown:
            p.error(f"--corners {unknown} are not corners of this regime: {cfg['corners']}")
        cfg["corners"] = chosen
    if args.before:
        if "base" not in cfg["model"]:
            p.error("--before measures the base model before fine-tuning: the scratch regime has none")
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="ruq_before_") as scratch_dir:
            before = [before_fine_tuning(cfg, seed, Path(scratch_dir) / f"seed{seed}") for seed in cfg["seeds"]]
        for row in before:
            print(f"seed={row['seed']} before fine-tuning: " + ", ".join(f"{k} {row[k]:.3f}" for k in BEFORE_KEYS))
        results = {
            "experiment": "ruq_over_training_before",
            "quick": args.quick,
            "regime": "quick" if args.quick else args.regime,
            "settings": cfg,
            "idk_responses": list(IDK),
            "reference": "lowest",
            "machine": common.machine(),
            "before": before,
            "wall_s": time.perf_counter() - start,
        }
        print(f"wrote {common.write_results(out, results)}")
        return results
    start = time.perf_counter()
    runs = []
    scratch = tempfile.TemporaryDirectory(
        prefix="ruq_over_training_"
    )  # Lightning's logs: every number is in results.json
    for seed in cfg["seeds"]:
        for c in cfg["corners"]:
            run = run_one(cfg, c, seed, Path(scratch.name) / f"d{c[0]}_s{c[1]}_seed{seed}")
            last = run["epochs"][-1]
            print(
                f"{corner_name(c)} seed={seed}: train/ruq {last['train/ruq']:.1f} val/ruq {last['val/ruq']:.1f} "
                f"train/ruq_margin {last['train/ruq_margin']:.3f} val/loss {last['val/loss']:.3f} "
                f"({run['wall_s']:.0f} s wall, {run['cpu_s']:.0f} s CPU)",
                flush=True,
            )
            runs.append(run)
    scratch.cleanup()
    meta = {
        "quick": args.quick,
        "regime": "quick" if args.quick else args.regime,
        "wall_s": time.perf_counter() - start,
    }
    return finish(cfg, runs, out, meta)


if __name__ == "__main__":
    main()
