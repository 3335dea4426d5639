"""Shared test fixtures' builders: real chitchat text, a locally trained tokenizer, tiny models, a quiet
Lightning Trainer, a child process killed mid-write.

The tiny user LightningModule, the monitors built on it and its one-epoch ``fit`` are in ``monitor_setup``;
pytest fixtures (the fitted-clusters cache, the two-process port) are in ``conftest``.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from functools import cache
from pathlib import Path
from typing import Any

import torch
from transformers import RobertaConfig, RobertaForSequenceClassification

from lightning_div.datamodules.formats import iter_texts, read_chitchat
from lightning_div.model.tiny import tiny_causal_lm, tiny_seq2seq_lm, train_tokenizer


@cache
def chitchat_pairs(split: str = "train", max_conversations: int = 60):
    return tuple(read_chitchat(split, max_turns=3, max_conversations=max_conversations))


@cache
def tokenizer(seq2seq: bool = False, vocab_size: int = 800):
    texts = list(iter_texts(chitchat_pairs("train", 150)))
    return train_tokenizer(texts, vocab_size=vocab_size, seq2seq=seq2seq)


def causal_model(seed: int = 0, **kwargs):
    return tiny_causal_lm(tokenizer(False), seed=seed, **kwargs)


def seq2seq_model(seed: int = 0, **kwargs):
    return tiny_seq2seq_lm(tokenizer(True), seed=seed, **kwargs)


# A shuffled, upper/lower-case id2label: the scorer must read the label order, not assume it.
ID2LABEL = {0: "neutral", 1: "CONTRADICTION", 2: "entailment"}


def tiny_nli_model(id2label=ID2LABEL, num_labels=3, seed=1):
    tok = tokenizer(True)
    config = RobertaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=300,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        num_labels=num_labels,
        id2label=id2label,
        initializer_range=1.0,
    )  # wide init: all three classes get predicted
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return RobertaForSequenceClassification(config).eval()


def mlflow_artifacts(client, run_id: str, path: str | None = None) -> set[str]:
    """Every artifact path of an MLflow run, folders walked."""
    out: set[str] = set()
    for item in client.list_artifacts(run_id, path):
        out |= mlflow_artifacts(client, run_id, item.path) if item.is_dir else {item.path}
    return out


def float32_margin_tolerance(adapter, pairs, idk_responses) -> float:
    """How far float32 rounding can move a RUQ margin over ``pairs``: 4 eps32 times the largest |score|.

    A margin is a mean of (reference score - IDK score), each score a mean log-likelihood rounded to
    float32 differently when the batches differ (shared contexts, another shard, another front end).
    The rounding scales with the scores, not with the margin, which can be near 0; a real error (a
    wrong pair, a lost prompt) moves a margin by far more than this.
    """
    from lightning_div.model.scoring import response_scores

    candidates = [(p.context, r) for p in pairs for r in (*p.all_references, *idk_responses)]
    scores = response_scores(adapter, [c for c, _ in candidates], [r for _, r in candidates])
    return 4 * torch.finfo(torch.float32).eps * max(abs(s) for s in scores)


def base_model_margin_tolerance(pairs, idk=("I don't know.", "I don't know what to do.")) -> float:
    """float32 rounding of the shipped base model's RUQ margins on ``pairs`` (``float32_margin_tolerance``)."""
    from lightning_div import load_base_model
    from lightning_div.model.adapters import HuggingFaceAdapter

    model, tokenizer = load_base_model()
    adapter = HuggingFaceAdapter(model, tokenizer, batch_size=8, show_progress=False)
    return float32_margin_tolerance(adapter, pairs, idk)


def base_model_copy(tmp: Path) -> Path:
    """A copy of the shipped base model's folder that a test may damage."""
    import shutil

    from lightning_div.model.base import base_model_path

    return Path(shutil.copytree(base_model_path(), tmp / "chitchat-gpt2"))


def truncate_weights(folder: str | Path) -> Path:
    """Cut a model folder's ``model.safetensors`` to its first 1,000 bytes (a download that stopped)."""
    weights = Path(folder) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    return weights


def assert_finite_numbers(obj: Any, where: str = "results") -> None:
    """Every number in a JSON-like ``obj`` (dicts, lists, numbers; booleans pass) is finite; ``where`` names it."""
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        assert math.isfinite(obj), where
    elif isinstance(obj, dict):
        for k, v in obj.items():
            assert_finite_numbers(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            assert_finite_numbers(v, f"{where}[{i}]")


def fit_config(tmp: Path, model: str) -> Path:
    """``tmp/fit.yaml``: a one-epoch ``lightning-div fit`` of ``model`` on 8 Chit-Chat pairs, no logger."""
    import json
    import textwrap

    config = tmp / "fit.yaml"
    config.write_text(
        textwrap.dedent(
            f"""
            model:
              class_path: lightning_div.DialogueLM
              init_args:
                model_name_or_path: {json.dumps(model)}
            data:
              class_path: lightning_div.DialogueDataModule
              init_args:
                train: chitchat:finetune
                val: null
                examples:
                  max_train: 8
            trainer:
              max_epochs: 1
              logger: false
              enable_checkpointing: false
            """
        )
    )
    return config


def parse_fit_config(tmp: Path, model: dict, data: dict, trainer: dict) -> Any:
    """Write ``tmp/config.yaml`` and parse and instantiate it the way ``lightning-div fit`` does, without running
    (the ``DiversityCLI``; a bad config is argparse's ``SystemExit``)."""
    import yaml
    from pytorch_lightning import LightningDataModule, LightningModule

    from lightning_div.cli.train import DiversityCLI

    config = tmp / "config.yaml"
    config.write_text(yaml.safe_dump({"model": model, "data": data, "trainer": trainer}))
    return DiversityCLI(
        LightningModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        run=False,
        args=["--config", str(config)],
    )


def load_script(folder: str, name: str, module_name: str | None = None):
    """``<folder>/<name>.py`` of the repository (an experiment, a benchmark) as a module, to call it in this process.

    The module is registered in ``sys.modules`` under ``module_name`` (its classes pickle and its dataclasses
    resolve there), and the folder is put on ``sys.path``: the scripts import their siblings (``_ruq_common``)
    as when run directly.
    """
    import importlib.util
    import sys
    from pathlib import Path

    where = Path(__file__).resolve().parents[1] / folder
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))
    module_name = module_name or f"{folder}_{name}"
    spec = importlib.util.spec_from_file_location(module_name, where / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def load_experiment(name: str):
    """``experiments/<name>.py`` as a module, to call its ``main(argv)`` in this process.

    A test runs an experiment once as a user does (a fresh interpreter); its further runs (a re-run with
    the seed, ``--before``, ``--merge``) call ``main`` here, which saves an interpreter's imports each.
    """
    return load_script("experiments", name)


def report_of_hugging_face_run(output_dir, logged, table_file: str, out) -> str:
    """``lightning-div report OUTPUT_DIR`` of a real Hugging Face / TRL run (``report_to="tensorboard"``),
    checked to report like a Lightning run: each of ``logged`` (TensorBoard tag -> the values the trainer
    logged, in step order) read back from ``<output_dir>/runs/<date>/``, its curves drawn, the sample table
    ``table_file`` of ``<output_dir>/lightning_div`` on the page. Returns the page."""
    import math
    import re
    from pathlib import Path

    import pytest

    from lightning_div.cli.main import main
    from lightning_div.report import find_run, read_tensorboard

    run = find_run(output_dir)
    assert run.version == Path(output_dir) and run.artifacts == Path(output_dir) / "lightning_div"
    assert run.events and all(p.parent.parent == Path(output_dir) / "runs" for p in run.events)
    series = read_tensorboard(run.events, notes := [])
    assert not notes, notes
    for tag, values in logged.items():
        assert values, tag
        assert [v for _, _, v in series[tag]] == pytest.approx(values, rel=1e-6), tag
        assert all(math.isfinite(e) for e, _, _ in series[tag]), tag  # the Trainer's train/epoch at each step
    assert main(["report", str(output_dir), "--out", str(out)]) == 0
    page = Path(out).read_text()
    assert "no metrics.csv" not in page and "no lightning_div/ folder" not in page
    # the diversity curves, under the keys the docs name (TensorBoard's train/diversity/* as diversity/*), come
    # first with the group samples; the trainer's own curves in their own section after them (issue 63)
    scalars = re.search(r'<section id="scalars">(.*?)</section>', page, re.S).group(1)
    own = re.search(r'<section id="trainer-scalars">(.*?)</section>', page, re.S)
    for group in {tag.rsplit("/", 1)[0] for tag in logged}:
        shown = group.removeprefix("train/") if group.startswith("train/diversity") else group
        section = scalars if shown.split("/")[0] in ("diversity", "val", "eval") else own and own.group(1)
        assert section and f'<img alt="{shown}"' in section, group
    assert "train/diversity" not in page
    assert f'data-source="{table_file}"' in page
    assert page.index('<section id="scalars">') < page.index('<section id="trainer-scalars">')
    return page


def quiet_trainer(**kwargs: Any) -> Any:
    """A ``pl.Trainer`` on the CPU that writes nothing and prints nothing: no logger, no checkpoints, no
    progress bar, no model summary, no sanity validation. ``kwargs`` override any of these."""
    import pytorch_lightning as pl

    defaults: dict[str, Any] = dict(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    return pl.Trainer(**{**defaults, **kwargs})


ROOT = Path(__file__).resolve().parent.parent
#: The environment of a child Python process: the repository and tests/ importable, offline.
CHILD_ENV = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}", "HF_HUB_OFFLINE": "1"}


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Wait until ``path`` exists; fail if ``proc`` exits first or ``timeout`` seconds pass."""
    start = time.monotonic()
    while not path.exists():
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "child exited"
        assert time.monotonic() - start < timeout, "child never reached the write"
        time.sleep(0.05)


def kill_when_ready(child: str, ready: Path) -> int:
    """Run ``python -c child``, SIGKILL it once it has created ``ready`` (mid-write), and return its exit code.

    The child touches ``ready`` where it is to be killed (a file half written) and then sleeps.
    """
    proc = subprocess.Popen([sys.executable, "-c", child], env=CHILD_ENV, stderr=subprocess.PIPE)
    try:
        wait_for(ready, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        proc.kill()
    return proc.returncode


# The tiny DialogueLM a LightningCLI config names in the tests (a 1-layer GPT-2 from scratch, local tokenizer).
TINY_CLI_MODEL: dict[str, Any] = {
    "class_path": "lightning_div.DialogueLM",
    "init_args": {
        "model_name_or_path": None,
        "tokenizer": "local:chitchat",
        "tokenizer_vocab_size": 300,
        "from_scratch": {"model_type": "gpt2", "n_layer": 1, "n_embd": 16, "n_head": 2, "n_positions": 64},
    },
}
