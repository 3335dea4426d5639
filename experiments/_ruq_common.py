"""What ruq_over_training.py and dectest_temperature.py share: a Chit-Chat model trained as a user trains it.

Everything here goes through the public API: :class:`lightning_div.DialogueLM`,
:class:`lightning_div.DialogueDataModule` and a plain ``pytorch_lightning.Trainer`` with the
user's callbacks. The helpers only fix the experiments' conventions: one CPU thread per
process (the machine is shared), a seed per run, results written as JSON that refuses
NaN/inf, and the machine description the results pages quote.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# Runnable as `python experiments/<name>.py` from a source checkout without installing.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Idle OpenMP threads spin by default; on shared cores that slows faiss and torch many times over.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytorch_lightning as pl
import torch

from lightning_div import DialogueDataModule, DialogueLM
from lightning_div.datamodules import DialogueLayout, Examples


def one_thread() -> None:
    """One intra-op thread: the experiments run beside others on a 2-core machine; timings stay comparable."""
    torch.set_num_threads(1)


def parse_settings(
    name: str, doc: str, quick: Mapping[str, Any], regimes: Mapping[str, Mapping[str, Any]], argv: list[str] | None
) -> tuple[dict[str, Any], Path, bool, str]:
    """The experiments' shared command line (``--quick``, ``--regime``, ``--out``, ``--seeds``).

    Returns the settings, the output dir, whether quick, and the regime (the first of ``regimes``
    is the default). Also fixes one CPU thread per process (:func:`one_thread`) and creates the
    output directory.
    """
    import argparse

    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny settings for the tests (< 3 minutes)")
    p.add_argument("--regime", choices=list(regimes), default=next(iter(regimes)))
    p.add_argument(
        "--out",
        default=None,
        help=f"output directory (default: runs/experiments/{name}, quick: runs/experiments/{name}_quick)",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds (default: 0 1; quick: 0)")
    args = p.parse_args(argv)
    one_thread()
    cfg = dict(quick if args.quick else regimes[args.regime])
    if args.seeds:
        cfg["seeds"] = list(args.seeds)
    out = Path(args.out or (f"runs/experiments/{name}_quick" if args.quick else f"runs/experiments/{name}"))
    out.mkdir(parents=True, exist_ok=True)
    return cfg, out, args.quick, "quick" if args.quick else args.regime


def gpt2_config(n_layer: int, n_embd: int, n_head: int, dropout: float = 0.1, n_positions: int = 128) -> dict[str, Any]:
    """A ``DialogueLM(from_scratch=...)`` GPT-2 config; ``dropout`` goes to residual, embedding and attention dropout."""
    return {
        "model_type": "gpt2",
        "n_layer": n_layer,
        "n_embd": n_embd,
        "n_head": n_head,
        "n_positions": n_positions,
        "resid_pdrop": dropout,
        "embd_pdrop": dropout,
        "attn_pdrop": dropout,
    }


def chat_model(
    from_scratch: Mapping[str, Any], learning_rate: float, warmup_steps: int, seed: int, vocab_size: int = 4000
) -> DialogueLM:
    """A random-init DialogueLM with the locally trained Chit-Chat tokenizer (seeded)."""
    pl.seed_everything(seed, workers=True, verbose=False)
    return DialogueLM(
        model_name_or_path=None,
        tokenizer="local:chitchat",
        tokenizer_vocab_size=vocab_size,
        from_scratch=dict(from_scratch),
        learning_rate=learning_rate,
        warmup_steps=warmup_steps,
    )


def base_model(
    name: str, dropout: float, label_smoothing: float, learning_rate: float, warmup_steps: int, seed: int
) -> DialogueLM:
    """The shipped base model to fine-tune, with the given dropout (residual, embedding, attention) and smoothing."""
    pl.seed_everything(seed, workers=True, verbose=False)
    return DialogueLM(
        name,
        config_overrides={"resid_pdrop": dropout, "embd_pdrop": dropout, "attn_pdrop": dropout},
        label_smoothing=label_smoothing,
        learning_rate=learning_rate,
        warmup_steps=warmup_steps,
    )


def chat_data(
    max_train_examples: int | None,
    max_val_examples: int | None,
    batch_size: int,
    seed: int,
    max_history: int = 2,
    train: str = "chitchat",
) -> DialogueDataModule:
    """The embedded Chit-Chat corpus (``train``, default its training split; validation) as a user's datamodule."""
    return DialogueDataModule(
        train=train,
        val="chitchat:validation",
        layout=DialogueLayout(max_turns=max_history),
        examples=Examples(max_train=max_train_examples, max_val=max_val_examples),
        batch_size=batch_size,
        seed=seed,
        show_progress=False,
    )


def trainer(root: Path, callbacks: Sequence[pl.Callback], max_epochs: int, **kwargs: Any) -> pl.Trainer:
    """A CPU Trainer with a CSV logger under ``root`` and no checkpoints (the experiments keep their numbers)."""
    from pytorch_lightning.loggers import CSVLogger

    defaults = dict(
        max_epochs=max_epochs,
        accelerator="cpu",
        devices=1,
        num_sanity_val_steps=0,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        logger=CSVLogger(str(root), name="csv"),
        default_root_dir=str(root),
        log_every_n_steps=50,
    )
    return pl.Trainer(callbacks=list(callbacks), **{**defaults, **kwargs})


def epoch_metrics(trainer_: pl.Trainer) -> dict[str, float]:
    """The epoch-level scalars Lightning holds now (``callback_metrics``), as floats."""
    return {k: float(v) for k, v in trainer_.callback_metrics.items() if getattr(v, "numel", lambda: 1)() == 1}


class EpochRecorder(pl.Callback):
    """Keeps every epoch's logged scalars (after all other callbacks logged theirs), for results.json."""

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        row = {"epoch": float(trainer.current_epoch), "elapsed_s": time.perf_counter() - self._start}
        row.update(epoch_metrics(trainer))
        self.rows.append(row)


def machine() -> dict[str, Any]:
    """What ran it: the pages say "2-core shared CPU"; these are the details behind that phrase."""
    return {
        "description": "2-core shared CPU",
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
    }


def check_finite(obj: Any, where: str = "results") -> None:
    """Raise naming the first NaN/inf in a nested structure: results.json carries only real numbers."""
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"{where} = {obj} is not finite")
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            check_finite(v, f"{where}.{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            check_finite(v, f"{where}[{i}]")


def write_results(out: Path, results: Mapping[str, Any]) -> Path:
    """``out/results.json`` written atomically (a temporary file renamed), after the finiteness check.

    The versions it ran with are added under ``"environment"`` unless the results carry them already
    (a merge carries its parts' ``"environments"``).
    """
    from _environment import environment

    if "environment" not in results and "environments" not in results:
        results = {**results, "environment": environment()}
    check_finite(results)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(results, indent=1, allow_nan=False) + "\n")
    tmp.replace(path)
    return path


def plt():
    """matplotlib.pyplot on the Agg backend (no display on the experiment machines)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot
