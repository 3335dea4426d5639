"""What the demo's fit start costs: wall time and peak memory of setup + ``on_fit_start``, nothing else.

Builds DialogueLM, DialogueDataModule and the three callbacks from ``configs/demo.yaml`` (their
``class_path`` + ``init_args``), then runs ``Trainer.fit`` with ``max_steps=0``: Lightning still
runs every ``setup`` and ``on_fit_start`` hook (the monitor loads its encoder and fits or loads the
semantic clusters, DRESS does the same and mines its first negatives), but trains no step. The
monitor and DRESS get one :class:`~lightning_div.semantic.space.SemanticSpace` built from the
monitor's space arguments (``space=``, as a Python user shares it); ``--private-spaces`` gives each
its own from its arguments instead, as a YAML config does.

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


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``; a mapping (a settings object's fields: ``generation: {...}``) merged field by field."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def instantiate(spec: dict[str, Any], space: Any = None, **overrides: Any) -> Any:
    """``class_path`` + ``init_args`` built as LightningCLI builds them (a settings object from its mapping, a
    ``SemanticSpace`` from its ``class_path``), with ``overrides`` merged on top and ``space``, an object, given."""
    from jsonargparse import ArgumentParser

    module, _, name = spec["class_path"].rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls, "built")
    init = merged(spec.get("init_args") or {}, overrides)
    namespace = parser.parse_object({"built": init})
    if space is not None:
        namespace.built.space = space  # an object: shared by identity, not rebuilt from a config
    return parser.instantiate_classes(namespace).built


def current_rss_mib() -> float:
    """This process's resident memory now (VmRSS), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


SPACE_USERS = ("SemanticDiversityMonitor", "DRESSReweighting")


def share_one_space(specs: list[dict[str, Any]], cache_dir: str | None) -> Any:
    """One SemanticSpace from the space users' ``space:`` blocks (which must agree); the blocks leave their init_args."""
    from lightning_div import SemanticSpace

    users = [s for s in specs if s["class_path"].rpartition(".")[2] in SPACE_USERS]
    found = [dict((s.setdefault("init_args", {}).pop("space", None) or {}).get("init_args") or {}) for s in users]
    if any(f != found[0] for f in found):
        sys.exit(f"the space users' arguments differ, so one space cannot serve them: {found}")
    return SemanticSpace(**{**found[0], "dirpath": cache_dir, "show_progress": False}) if users else None


def run_child(args: argparse.Namespace) -> dict[str, Any]:
    import pytorch_lightning as pl
    import yaml

    config = yaml.safe_load(Path(args.config).read_text())
    specs = config["trainer"].get("callbacks", [])
    space = None if args.private_spaces else share_one_space(specs, args.cache_dir)
    pl.seed_everything(config.get("seed_everything", 0), verbose=False)
    model = instantiate(config["model"])
    data = instantiate(
        config["data"],
        show_progress=False,
        examples={"max_train": args.max_train_examples, "max_val": args.max_val_examples},
    )
    callbacks = []
    hook_s: dict[str, float] = {}
    for spec in specs:
        name = spec["class_path"].rpartition(".")[2]
        outputs = (spec.get("init_args") or {}).get("outputs") or {}
        over: dict[str, Any] = {"outputs": {"show_progress": False}}
        if "dirpath" in outputs:
            over["outputs"]["dirpath"] = args.cache_dir
        if name == "DRESSReweighting":
            over["mining"] = {"num_contexts": args.num_negative_contexts}
        cb = instantiate(spec, space if name in SPACE_USERS else None, **over)

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
    spaces = {id(cb.space): cb.space for cb in callbacks if hasattr(cb, "space")}.values()
    # encoder objects: each loads its model at its first encode (the monitor's: at the first validation)
    encoder_objects = {id(s.get_encoder()) for s in spaces if s.fitted}
    encoders = {id(s.get_encoder()._model) for s in spaces if s.fitted and s.get_encoder()._model is not None}
    clusters = {id(s.clusters) for s in spaces if s.fitted}
    # What the first validation adds: every callback's encoder in use, one text each (a monitor's encoder loads at its
    # first encode, and only a forward pass touches all of the weights' pages: from_pretrained maps the file)
    start = time.perf_counter()
    for cb in callbacks:
        if hasattr(cb, "space"):
            cb.space.get_encoder(model.device).encode(["hello there"], show_progress=False)
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
        "spaces": len(spaces),
        "train_examples": len(data.train_pairs()),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "demo.yaml"), help="the LightningCLI config to follow")
    p.add_argument("--max-train-examples", type=int, default=2000)
    p.add_argument("--max-val-examples", type=int, default=200)
    p.add_argument("--num-negative-contexts", type=int, default=32)
    p.add_argument(
        "--private-spaces",
        action="store_true",
        help="each callback builds its own semantic space from its arguments (as a YAML config does)",
    )
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
            cmd += ["--private-spaces"] if args.private_spaces else []
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
