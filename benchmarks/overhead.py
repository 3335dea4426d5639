"""What the training-time callbacks cost: demo epochs with and without them, one run.

Builds DialogueLM, DialogueDataModule and the three callbacks from ``configs/demo.yaml``
(their ``class_path`` + ``init_args``, so the benchmark follows the demo) and trains the
same model (same seed, same data) under seven configurations: no callbacks (the baseline),
SemanticDiversityMonitor alone, RUQMonitor alone, the two monitors together (also with
``cluster_views=False``: what the cluster cards, heatmap and shares table cost),
DRESSReweighting alone, and all three. DRESS changes the training data (weights, and
from epoch 2 its mined negatives), so its rows are reported apart from the monitors'.

Each configuration runs in its own subprocess, so its peak RSS (``ru_maxrss``) is clean;
"peak memory added" is that peak minus the baseline's. The reported epoch is the last
one (default: epoch 2 of 2, so first-epoch warm-up is excluded): the wall time from the
end of the previous epoch to the end of this one -- dataloader rebuild, training,
validation and every epoch-end hook included. "callback s" is what the callbacks
report as ``timing/<name>_s`` for that epoch; "overhead" is (epoch - baseline epoch) /
baseline epoch, and "in-run" is callback s / (epoch - callback s), the same ratio
measured inside one process (less sensitive to a busy machine). "epoch CPU s" is the
process's user + system CPU time over the same epoch, and "CPU overhead" compares it with
the baseline's: on a shared machine wall times swing with other jobs, CPU time much less. The one-off fit-start
work (loading the encoder; embedding + clustering the gold training responses, cached
on disk and shared by the monitor and DRESS) is timed separately: the cache starts
empty, so the first configuration that needs clusters pays the cold cost.

    python benchmarks/overhead.py                       # full demo: 8,000 train examples, 30-60 min on 2 cores
    python benchmarks/overhead.py --quick               # smoke test: small sizes, 2-4 min
    python benchmarks/overhead.py --device cuda
    python benchmarks/overhead.py --configs none monitors --max-train-examples 2000

Loggers: a CSVLogger only (the demo's TensorBoard and W&B loggers cost every
configuration the same, and W&B's service process would blur the memory figures);
checkpointing is off for the same reason.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see the README, "Semantic space: ... Limits and notes"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SEM, RUQ, DRESS = "SemanticDiversityMonitor", "RUQMonitor", "DRESSReweighting"
CONFIGS: dict[str, list[str]] = {
    "none": [],
    "sem_div": [SEM],
    "ruq": [RUQ],
    "monitors": [SEM, RUQ],
    "monitors_no_views": [SEM, RUQ],  # without the cluster views (cards, heatmap, shares): what the views cost
    "dress": [DRESS],
    "all": [SEM, RUQ, DRESS],
}
LABELS = {
    "none": "no callbacks (baseline)",
    "sem_div": SEM,
    "ruq": RUQ,
    "monitors": f"{SEM} + {RUQ}",
    "monitors_no_views": f"{SEM}(cluster_views=False) + {RUQ}",
    "dress": DRESS,
    "all": "all three",
}
# --quick: sample sizes small enough for a ~2 min smoke run of the whole script
QUICK_CALLBACK_ARGS: dict[str, dict[str, Any]] = {
    SEM: {"num_contexts": 32},
    RUQ: {"num_train_contexts": 32, "num_contexts": 32, "plot": {"num_contexts": 8}},
    DRESS: {"mining": {"num_contexts": 32}},
}


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``; a mapping (a settings object's fields: ``generation: {...}``) merged field by field."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def instantiate(spec: dict[str, Any], **overrides: Any) -> Any:
    """``class_path`` + ``init_args`` built as LightningCLI builds them (a settings object from its mapping, a
    ``SemanticSpace`` from its ``class_path``), with ``overrides`` merged on top."""
    from jsonargparse import ArgumentParser

    module, _, name = spec["class_path"].rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls, "built")
    init = merged(spec.get("init_args") or {}, overrides)
    return parser.instantiate_classes(parser.parse_object({"built": init})).built


def callback_specs(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {spec["class_path"].rpartition(".")[2]: spec for spec in config["trainer"].get("callbacks", [])}


def cpu_seconds() -> float:
    """User + system CPU time of this process: a busy machine inflates wall time far more than this."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# -- one configuration (child process) ------------------------------------------------------------

# Where the callbacks call the cluster views (cards, labelled histogram, heatmap, shares CSV, DRESS's
# per-cluster figure and table): timed by wrapping the names the callbacks imported.
VIEW_FUNCTIONS = [
    ("lightning_div.callbacks.semantic_diversity", "log_cards_once"),
    ("lightning_div.callbacks.semantic_diversity", "log_collapse"),
    ("lightning_div.callbacks.dress", "log_dress_round"),
]


def time_views(module_name: str, fn_name: str, into: dict[int, float]) -> None:
    """Wrap ``module_name.fn_name`` so its wall time adds to ``into[current epoch]``.

    Measured in the same process as the epoch it is compared with, so a busy machine slows
    both alike (the cross-process "monitors" vs "monitors_no_views" comparison is noisier
    than the views' own cost). A renamed function fails here rather than timing nothing.
    """
    module = importlib.import_module(module_name)
    original = getattr(module, fn_name)

    def timed(reporter: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(reporter, *args, **kwargs)
        finally:
            # the views take the callback's reporter, whose files are tagged epoch_<N>
            epoch = int(str(getattr(reporter.destination, "tag", "epoch_0")).rpartition("_")[2])
            into[epoch] = into.get(epoch, 0.0) + time.perf_counter() - start

    setattr(module, fn_name, timed)


def run_child(args: argparse.Namespace) -> dict[str, Any]:
    import pytorch_lightning as pl
    import torch
    import yaml
    from pytorch_lightning.callbacks import Callback
    from pytorch_lightning.loggers import CSVLogger

    config = yaml.safe_load(Path(args.config).read_text())
    pl.seed_everything(config.get("seed_everything", 0), verbose=False)
    model = instantiate(config["model"])
    data_over: dict[str, Any] = {"show_progress": False, "examples": {}}
    if args.max_train_examples is not None:
        data_over["examples"]["max_train"] = args.max_train_examples
    if args.max_val_examples is not None:
        data_over["examples"]["max_val"] = args.max_val_examples
    data = instantiate(config["data"], **data_over)

    specs = callback_specs(config)
    callbacks = []
    for name in CONFIGS[args.child]:
        over = merged(
            {"outputs": {"show_progress": False, "dirpath": args.cache_dir}},
            QUICK_CALLBACK_ARGS[name] if args.quick else {},
        )
        if args.child == "monitors_no_views" and name == SEM:
            over["outputs"]["cluster_views"] = False
        callbacks.append(instantiate(specs[name], **over))
    views_s: dict[int, float] = {}
    for module, fn in VIEW_FUNCTIONS:  # the cluster views' own time per epoch, inside this process
        time_views(module, fn, views_s)
    fit_start_s: dict[str, float] = {}
    for cb in callbacks:  # time each callback's one-off fit-start work

        def timed(trainer, pl_module, _cb=cb, _orig=cb.on_fit_start):
            start = time.perf_counter()
            _orig(trainer, pl_module)
            fit_start_s[type(_cb).__name__] = time.perf_counter() - start

        cb.on_fit_start = timed

    class EpochClock(Callback):
        """Wall time at the end of every training epoch, after every other callback's epoch-end hook."""

        def __init__(self) -> None:
            self.marks: list[float] = []
            self.cpu_marks: list[float] = []

        def mark(self) -> None:
            if args.device == "cuda":
                torch.cuda.synchronize()
            self.marks.append(time.perf_counter())
            self.cpu_marks.append(cpu_seconds())

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self.mark()

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            self.mark()

    clock = EpochClock()
    t = config["trainer"]
    trainer = pl.Trainer(
        max_epochs=args.epochs,
        accelerator="gpu" if args.device == "cuda" else "cpu",
        devices=1,
        num_sanity_val_steps=t.get("num_sanity_val_steps", 0),
        log_every_n_steps=t.get("log_every_n_steps", 50),
        reload_dataloaders_every_n_epochs=t.get("reload_dataloaders_every_n_epochs", 0),
        logger=CSVLogger(args.work_dir, name=args.child),
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=args.work_dir,
        callbacks=[*callbacks, clock],
    )
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    trainer.fit(model, datamodule=data)
    fit_s = time.perf_counter() - start

    epochs = [b - a for a, b in zip(clock.marks, clock.marks[1:])]
    cpu_epochs = [b - a for a, b in zip(clock.cpu_marks, clock.cpu_marks[1:])]
    last = len(epochs) - 1
    cb_s: dict[str, float] = {}
    for cb in callbacks:
        # every timing/* key of the callback: RUQ measures twice per epoch (timing/ruq_train_s, timing/ruq_s)
        cb_s[type(cb).__name__] = sum(
            v for h in cb.history if int(h["epoch"]) == last for k, v in h.items() if k.startswith("timing/")
        )
    out = {
        "config": args.child,
        "epochs_s": epochs,
        "epoch_s": epochs[last],
        "epoch_cpu_s": cpu_epochs[last],
        "callback_s": cb_s,
        "views_s": views_s.get(last, 0.0),
        "fit_start_s": fit_start_s,
        "fit_s": fit_s,
        "train_examples": len(data.train_pairs()),
        "negatives": len(data.negatives),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_before_fit_mib": rss_before / 1024,
        "threads": torch.get_num_threads(),
    }
    if args.device == "cuda":
        out["peak_cuda_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return out


# -- the whole benchmark (parent process) ---------------------------------------------------------


def format_table(results: list[dict[str, Any]]) -> str:
    base = next((r for r in results if r["config"] == "none"), None)
    cuda = any("peak_cuda_mib" in r for r in results)
    head = [
        "configuration",
        "epoch s",
        "callback s",
        "overhead",
        "in-run",
        "views s",
        "views share",
        "epoch CPU s",
        "CPU overhead",
        "fit-start s",
        "peak RSS MiB",
        "RSS added",
    ] + (["CUDA added"] if cuda else [])
    rows = []
    for r in results:
        cb = sum(r["callback_s"].values())
        fs = sum(r["fit_start_s"].values())
        row = [
            LABELS[r["config"]],
            f"{r['epoch_s']:.1f}",
            f"{cb:.1f}" if r["callback_s"] else "-",
            f"{r['epoch_s'] / base['epoch_s'] - 1:+.1%}" if base and r is not base else "-",
            f"{cb / (r['epoch_s'] - cb):.1%}" if r["callback_s"] else "-",
            f"{r['views_s']:.2f}" if r.get("views_s") else "-",
            f"{r['views_s'] / (r['epoch_s'] - r['views_s']):.2%}" if r.get("views_s") else "-",
            f"{r['epoch_cpu_s']:.1f}",
            f"{r['epoch_cpu_s'] / base['epoch_cpu_s'] - 1:+.1%}" if base and r is not base else "-",
            (f"{fs:.1f}" + (" (cold)" if r.get("cold") else "")) if r["fit_start_s"] else "-",
            f"{r['peak_rss_mib']:.0f}",
            f"{r['peak_rss_mib'] - base['peak_rss_mib']:+.0f}" if base and r is not base else "-",
        ]
        if cuda:
            row.append(f"{r['peak_cuda_mib'] - base['peak_cuda_mib']:+.0f}" if base and r is not base else "-")
        rows.append(row)
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "demo.yaml"), help="the LightningCLI config to follow")
    p.add_argument("--max-train-examples", type=int, default=None, help="default: the config's (demo: 8000)")
    p.add_argument("--max-val-examples", type=int, default=None, help="default: the config's (demo: 600)")
    p.add_argument("--epochs", type=int, default=2, help="epochs per configuration; the last one is reported")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: 400 train / 64 val examples, callback samples of 32 (8 plot prompts)",
    )
    p.add_argument(
        "--configs",
        nargs="+",
        default=list(CONFIGS),
        choices=list(CONFIGS),
        help="which configurations to run (the table needs 'none' for its ratios)",
    )
    p.add_argument("--json", help="also write the raw results here")
    p.add_argument("--child", choices=list(CONFIGS), help=argparse.SUPPRESS)
    p.add_argument("--cache-dir", help=argparse.SUPPRESS)
    p.add_argument("--work-dir", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.quick:
        args.max_train_examples = args.max_train_examples or 400
        args.max_val_examples = args.max_val_examples or 64
    if args.epochs < 1:
        p.error("--epochs must be >= 1")

    if args.child:
        Path(args.result).write_text(json.dumps(run_child(args)))
        return

    import yaml

    config = yaml.safe_load(Path(args.config).read_text())
    d = config["data"]["init_args"]
    n_train = args.max_train_examples or d.get("examples", {}).get("max_train")
    n_val = args.max_val_examples or d.get("examples", {}).get("max_val")
    specs = callback_specs(config)
    print(
        f"config: {args.config}  ({n_train} train / {n_val} val examples, batch {d.get('batch_size')}, "
        f"{args.epochs} epoch(s) per configuration, the last one reported; device {args.device}, "
        f"{os.cpu_count()} CPU cores)"
    )
    for name in (SEM, RUQ, DRESS):
        init = merged(specs[name].get("init_args", {}), QUICK_CALLBACK_ARGS[name] if args.quick else {})
        sizes = {k: v for k, v in init.items() if k.startswith("num_") or k in ("generation", "plot", "mining")}
        print(f"  {name}: {sizes}")
    work = Path(tempfile.mkdtemp(prefix="lightning-div-overhead-"))
    cache = work / "cache"  # empty: the first configuration with clusters pays the cold fit-start cost
    results, cold_done = [], False
    try:
        for name in args.configs:
            result_file = work / f"{name}.json"
            cmd = [
                sys.executable,
                __file__,
                "--child",
                name,
                "--config",
                args.config,
                "--epochs",
                str(args.epochs),
                "--device",
                args.device,
                "--cache-dir",
                str(cache),
                "--work-dir",
                str(work / "runs"),
                "--result",
                str(result_file),
            ]
            cmd += ["--max-train-examples", str(n_train)] if n_train else []
            cmd += ["--max-val-examples", str(n_val)] if n_val else []
            cmd += ["--quick"] if args.quick else []
            start = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                sys.stderr.write(done.stdout[-4000:] + done.stderr[-8000:])
                raise SystemExit(f"configuration {name!r} failed (exit {done.returncode})")
            r = json.loads(result_file.read_text())
            needs_clusters = SEM in CONFIGS[name] or DRESS in CONFIGS[name]
            r["cold"] = needs_clusters and not cold_done
            cold_done = cold_done or needs_clusters
            results.append(r)
            if args.json:  # after every configuration, so an interrupted run keeps what it measured
                Path(args.json).write_text(json.dumps(results, indent=1))
            print(
                f"  {LABELS[name]}: epochs {', '.join(f'{s:.1f}' for s in r['epochs_s'])} s, "
                f"callbacks {json.dumps({k: round(v, 2) for k, v in r['callback_s'].items()})}, "
                f"fit start {json.dumps({k: round(v, 2) for k, v in r['fit_start_s'].items()})}, "
                f"{r['negatives']} DRESS negatives mined "
                f"({time.perf_counter() - start:.0f} s in all)",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(format_table(results))
    print(
        "\nepoch s: wall time of the last epoch (training + validation + epoch-end hooks); overhead: vs the "
        "baseline's epoch; in-run: callback s / (epoch s - callback s); views s: the cluster views' own time in that epoch (cards, "
        "labelled histogram, heatmap, shares CSV, DRESS's per-cluster figure), views share: views s / (epoch s - views s), "
        "what the views add to an epoch; epoch CPU s: user + system CPU time of the same epoch (less "
        "sensitive to other load on the machine), CPU overhead: vs the baseline's; fit-start s: the callbacks' one-off "
        "on_fit_start (encoder load, gold embedding + clustering when cold, cached on disk); peak RSS: the "
        "configuration's subprocess (ru_maxrss), RSS added: minus the baseline's."
    )


if __name__ == "__main__":
    main()
