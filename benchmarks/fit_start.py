"""What the demo's fit start costs: wall time and peak memory of setup + ``on_fit_start``, nothing else.

Builds DialogueLM, DialogueDataModule and the three callbacks from ``configs/demo.yaml`` (their
``class_path`` + ``init_args``), then runs ``Trainer.fit`` with ``max_steps=0``: Lightning still
runs every ``setup`` and ``on_fit_start`` hook (the monitor loads its encoder and fits or loads the
semantic clusters, DRESS does the same and mines its first negatives), but trains no step.

Each measurement runs in its own subprocess, so its peak RSS (``ru_maxrss``) is clean. Two runs
share one cache directory: the first starts it empty (``cold``: the clusters are fitted), the
second finds it filled (``warm``: the clusters are read back). Besides seconds and MiB it prints
how many encoder objects the callbacks hold (each loads its model at its first encode; in brackets
those loaded by the end of fit start) and how many distinct clusters objects. Then it puts every
callback's encoder in use, as the first validation would (one text each: a monitor loads its
encoder at its first encode, and only a forward pass touches every page of the weights), and prints the seconds that took and the resident and peak memory after it.

    python benchmarks/fit_start.py                          # 2,000 train / 200 val examples
    python benchmarks/fit_start.py --max-train-examples 8000 --num-negative-contexts 500  # the demo's sizes

Data caps: ``--max-train-examples`` (the gold responses the clusters are fitted on) and
``--num-negative-contexts`` (DRESS's first mining, the same work before and after any change to
the semantic space: kept small so that it does not hide what the benchmark looks at).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "offline")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def instantiate(spec: dict[str, Any], **overrides: Any) -> Any:
    """``class_path`` + ``init_args`` (as LightningCLI reads them), with ``overrides`` on top."""
    module, _, name = spec["class_path"].rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    return cls(**{**(spec.get("init_args") or {}), **overrides})


def current_rss_mib() -> float:
    """This process's resident memory now (VmRSS), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_child(args: argparse.Namespace) -> dict[str, Any]:
    import pytorch_lightning as pl
    import yaml

    config = yaml.safe_load(Path(args.config).read_text())
    pl.seed_everything(config.get("seed_everything", 0), verbose=False)
    model = instantiate(config["model"])
    data = instantiate(
        config["data"],
        show_progress=False,
        max_train_examples=args.max_train_examples,
        max_val_examples=args.max_val_examples,
    )
    callbacks = []
    hook_s: dict[str, float] = {}
    for spec in config["trainer"].get("callbacks", []):
        name = spec["class_path"].rpartition(".")[2]
        over: dict[str, Any] = {"show_progress": False}
        if "dirpath" in (spec.get("init_args") or {}):
            over["dirpath"] = args.cache_dir
        if name == "DRESSReweighting":
            over["num_negative_contexts"] = args.num_negative_contexts
        cb = instantiate(spec, **over)

        def timed(trainer: Any, pl_module: Any, _name: str = name, _orig: Any = cb.on_fit_start) -> None:
            start = time.perf_counter()
            _orig(trainer, pl_module)
            hook_s[_name] = time.perf_counter() - start

        cb.on_fit_start = timed
        callbacks.append(cb)
    trainer = pl.Trainer(
        max_steps=0,
        accelerator="cpu",
        devices=1,
        num_sanity_val_steps=0,
        reload_dataloaders_every_n_epochs=config["trainer"].get("reload_dataloaders_every_n_epochs", 0),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=args.work_dir,
        callbacks=callbacks,
    )
    start = time.perf_counter()
    trainer.fit(model, datamodule=data)
    fit_start_s = time.perf_counter() - start
    peak_fit_start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rss_fit_start = current_rss_mib()
    specs = [cb.spec for cb in callbacks if hasattr(cb, "spec")]
    # encoder objects: each loads its model at its first encode (the monitor's: at the first validation)
    encoder_objects = {id(s._encoder) for s in specs if s._encoder is not None}
    encoders = {id(s._encoder._model) for s in specs if s._encoder is not None and s._encoder._model is not None}
    clusters = {id(s._clusters) for s in specs if s._clusters is not None}
    # What the first validation adds: every callback's encoder in use, one text each (a monitor's encoder loads at its
    # first encode, and only a forward pass touches all of the weights' pages: from_pretrained maps the file)
    start = time.perf_counter()
    for cb in callbacks:
        if hasattr(cb, "spec"):
            cb.spec.get_encoder(model, cb.batch_size, False).encode(["hello there"], show_progress=False)
    encoders_s = time.perf_counter() - start
    return {
        "fit_start_s": fit_start_s,
        "on_fit_start_s": hook_s,
        "peak_rss_mib": peak_fit_start,
        "rss_after_fit_start_mib": rss_fit_start,
        "encoders_in_use_s": encoders_s,
        "rss_with_encoders_mib": current_rss_mib(),
        "peak_rss_with_encoders_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "encoder_objects": len(encoder_objects),
        "encoder_models_loaded": len(encoders),
        "clusters_objects": len(clusters),
        "train_examples": len(data.train_pairs()),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "demo.yaml"), help="the LightningCLI config to follow")
    p.add_argument("--max-train-examples", type=int, default=2000)
    p.add_argument("--max-val-examples", type=int, default=200)
    p.add_argument("--num-negative-contexts", type=int, default=32)
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--cache-dir", help=argparse.SUPPRESS)
    p.add_argument("--work-dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print("RESULT " + json.dumps(run_child(args)))
        return
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        cache.mkdir()
        for run in ("cold", "warm"):  # the second run finds the first one's clusters on disk
            cmd = [sys.executable, __file__, "--child", "--cache-dir", str(cache), "--work-dir", str(Path(tmp) / run)]
            cmd += ["--config", args.config, "--max-train-examples", str(args.max_train_examples)]
            cmd += ["--max-val-examples", str(args.max_val_examples)]
            cmd += ["--num-negative-contexts", str(args.num_negative_contexts)]
            done = subprocess.run(cmd, capture_output=True, text=True)
            lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
            if done.returncode or not lines:
                sys.exit(f"{run} run failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
            results[run] = json.loads(lines[-1][len("RESULT ") :])
    print(
        f"{'run':5} {'fit start s':>11} {'peak RSS MiB':>12} {'encoders (loaded)':>17} {'clusters':>8} "
        f"{'+ encoders in use: s':>20} {'RSS MiB':>8} {'peak MiB':>8}  on_fit_start s"
    )
    for run, r in results.items():
        hooks = ", ".join(f"{k} {v:.2f}" for k, v in r["on_fit_start_s"].items())
        print(
            f"{run:5} {r['fit_start_s']:11.2f} {r['peak_rss_mib']:12.0f} "
            f"{r['encoder_objects']:>10d} ({r['encoder_models_loaded']:d}) {r['clusters_objects']:8d} "
            f"{r['encoders_in_use_s']:20.2f} {r['rss_with_encoders_mib']:8.0f} {r['peak_rss_with_encoders_mib']:8.0f}  "
            f"{hooks}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
