"""Invariants of real training runs with the callbacks, on CPU with tiny models and fixed seeds.

1. A run stopped in the middle of an epoch and resumed from its checkpoint logs the same
   metrics and ends with the same DRESS state and bit-identical weights as an uninterrupted run.
2. One process and two DDP processes log the same corpus metrics for the same model.
3. A failing tracker, an unwritable plot directory or a Ctrl+C inside a callback's generation
   never corrupts the run: training goes on (or ends the way Lightning ends it), checkpoints load,
   and the model's modes, gradients flags and RNG are as before the callback ran.
4. Two runs with the same seed log identical metrics.
"""

from __future__ import annotations

import copy
import csv
import json
import math
import os
import re
import signal
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from chitchat_read_once import chitchat_read_once
from ddp_utils import forkserver_ddp
from helpers import chitchat_pairs, tokenizer
from monitor_setup import TinyChat, datamodule, dress, minilm, settings_objects, tiny_lm, trainer
from monitor_setup import monitors as monitors_with_own_data
from pytorch_lightning import Callback
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger
from transformers import LogitsProcessor, LogitsProcessorList

from lightning_div.callbacks.base import DiversityCallback
from lightning_div.callbacks.ruq import RUQMonitor, RUQPlot
from lightning_div.callbacks.semantic_diversity import SemanticDiversityMonitor
from lightning_div.datamodules import Chunks, DialogueDataModule, Examples
from lightning_div.datamodules.samplers import (
    ExactDistributedSampler,
    ResumableDataLoader,
    WeightedDistributedSampler,
    epoch_window,
)
from lightning_div.model.dialogue_lm import DialogueLM
from lightning_div.semantic.space import SemanticSpace


@pytest.fixture(scope="module", autouse=True)
def _corpus_read_once():
    """This module's dozen datamodules share one reading of the corpus (tests/chitchat_read_once.py)."""
    with chitchat_read_once():
        yield


CORPUS_METRICS = [
    "val/sem_ent",
    "val/distinct_1",
    "val/distinct_2",
    "val/ead",
    "val/ruq",
    "train/ruq",
    "val/cluster_js",
    "val/top_cluster_share",
]


def monitors(cache: Path, **overrides):
    """Sem-Ent and RUQ monitors reading their data from the datamodule; clusters cached in ``cache``."""
    flat = dict(show_progress=False, batch_size=8, max_new_tokens=8, dirpath=str(cache), **overrides)
    space = SemanticSpace(minilm(), num_clusters=4, batch_size=flat["batch_size"], show_progress=False)
    return (
        SemanticDiversityMonitor(space, num_contexts=12, **settings_objects(**flat, log_samples=2)),
        RUQMonitor(
            num_train_contexts=8, num_contexts=8, plot=RUQPlot(num_contexts=4, num_beams=2), **settings_objects(**flat)
        ),
    )


def measured(callbacks) -> list[list[dict[str, float]]]:
    """Each diversity callback's history without its wall-clock timings (the only values allowed to differ)."""
    return [
        [{k: v for k, v in row.items() if not k.startswith("timing/")} for row in cb.history]
        for cb in callbacks
        if isinstance(cb, DiversityCallback)
    ]


def csv_rows(logger: CSVLogger) -> list[dict[str, str]]:
    with open(Path(logger.log_dir) / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def logged(rows: list[dict[str, str]], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key) not in (None, "")]


# ------------------------------------------------------------------------------------- 1. mid-epoch resume


def test_samplers_skip_the_start_of_the_resumed_epoch_only():
    data = list(range(11))
    for sampler in (
        ExactDistributedSampler(data, num_replicas=2, rank=1, seed=3),
        WeightedDistributedSampler(data, np.arange(1.0, 12.0), num_replicas=2, rank=1, seed=3),
    ):
        sampler.set_epoch(4)
        whole = list(sampler)
        assert len(whole) == len(sampler) == 6
        sampler.skip_at_start(4, 4)
        assert list(sampler) == whole[4:] and len(sampler) == 6  # Lightning counts the skipped batches itself
        sampler.set_epoch(5)
        assert len(list(sampler)) == 6  # the next epoch is whole
    with pytest.raises(ValueError, match="count must be >= 0"):
        sampler.skip_at_start(0, -1)


def test_train_loader_state_skips_the_batches_already_trained_on():
    pairs = list(chitchat_pairs("train", 5))[:13]
    dm = DialogueDataModule(train=pairs, val=None, tokenizer=tokenizer(), batch_size=3, show_progress=False)
    loader = dm.train_dataloader()
    assert isinstance(loader, ResumableDataLoader)
    state = loader.state_dict()
    assert state == {"epoch": 0, "batches": 0, "settings": state["settings"]}  # no Trainer: nothing trained on yet
    assert state["settings"] == {"batch_size": 3, "train_examples_per_epoch": None, "world_size": 1}
    whole = [b["index"].tolist() for b in loader]
    loader.progress = lambda: 2
    state = loader.state_dict()
    assert state == {"epoch": 0, "batches": 2, "settings": state["settings"]}
    fresh = dm.train_dataloader()
    fresh.load_state_dict(state)
    assert [b["index"].tolist() for b in fresh] == whole[2:]
    assert len(fresh) == len(whole) == 5
    plain = ResumableDataLoader(list(range(6)), batch_size=2)  # a plain sampler cannot start part-way
    with pytest.raises(ValueError, match="ResumableSampler"):
        plain.load_state_dict({"epoch": 0, "batches": 1})


def test_an_epoch_of_a_window_resumes_with_the_rest_of_that_window():
    # train_examples_per_epoch: which examples an epoch trains is a function of (seed, epoch), so a
    # fresh loader restored to (epoch 1, 2 batches trained) yields the rest of epoch 1's window,
    # neither epoch 0's window nor a new draw
    pairs = list(chitchat_pairs("train", 5))[:13]
    dm = DialogueDataModule(
        train=pairs,
        val=None,
        tokenizer=tokenizer(),
        batch_size=2,
        show_progress=False,
        examples=Examples(train_per_epoch=6),
    )
    loader = dm.train_dataloader()
    loader.sampler.set_epoch(1)
    whole = [b["index"].tolist() for b in loader]
    taken = sorted(i for b in whole for i in b)
    assert len(whole) == 3 and taken == sorted(epoch_window(13, 6, dm.seed, 1))
    assert not set(taken) & set(epoch_window(13, 6, dm.seed, 0))  # a different window from epoch 0's
    fresh = dm.train_dataloader()
    fresh.load_state_dict({"epoch": 1, "batches": 2})
    fresh.sampler.set_epoch(1)  # Lightning sets the epoch before it iterates
    assert [b["index"].tolist() for b in fresh] == whole[2:]


STEPS_PER_EPOCH = 10  # 160 examples / batch size 16; epoch 1 has more (the DRESS negatives join it)
CRASH_STEP = 15  # in the middle of epoch index 1


class CrashAt(Callback):
    """A crash just before the optimizer step ``step + 1``, after step ``step`` was checkpointed."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            raise RuntimeError("simulated crash")


class BatchLog(Callback):
    """(epoch, example indices) of every training batch."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[int]]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batches.append((trainer.current_epoch, batch["index"].tolist()))


def resume_run(
    root: Path, cache: Path, crash: bool = False, ckpt_path: Path | None = None, stream_dir: Path | None = None
):
    sem, ruq = monitors(cache)
    ruq.plot = None  # a figure of the model's beams, no state: what is resumed is measured without it
    dr, batches = dress(root, dirpath=str(cache)), BatchLog()
    callbacks = [sem, ruq, dr, batches]
    if crash:
        callbacks += [CrashAt(CRASH_STEP), ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=CRASH_STEP)]
    if stream_dir is None:
        model, dm = tiny_lm(), datamodule()
    else:  # the training split in LitData chunks, read by index (tests/test_streaming.py)
        from lightning_div.datamodules.streaming import StreamingDialogueDataModule

        model = tiny_lm()
        dm = StreamingDialogueDataModule(
            examples=Examples(max_train=160, max_val=16),
            batch_size=16,
            show_progress=False,
            # LitData's writer without a spawned interpreter (test_streaming.py)
            chunks=Chunks(dir=stream_dir, start_method="forkserver"),
        )
    tr = trainer(
        root, callbacks, max_epochs=2, limit_train_batches=None, limit_val_batches=1, enable_checkpointing=crash
    )
    if crash:
        with pytest.raises(RuntimeError, match="simulated crash"):
            tr.fit(model, datamodule=dm)
    else:
        tr.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return (sem, ruq, dr), model, dm, batches.batches


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The uninterrupted run both resume tests compare with, in memory: the streamed split yields the
    very same batches, weights and negatives (tests/test_streaming.py), so the streamed crash and
    resume must match it too. Its clusters cache serves the crashed and resumed runs (not what they test)."""
    root = tmp_path_factory.mktemp("uninterrupted")
    return resume_run(root, root / "cache"), root / "cache"


@pytest.mark.slow
@pytest.mark.xdist_group("invariants_resume")  # one worker: the uninterrupted run (a module fixture) runs once
@pytest.mark.parametrize("data", ["memory", "stream"])
def test_mid_epoch_resume_matches_the_uninterrupted_run(tmp_path, data, uninterrupted):
    if data == "stream":
        pytest.importorskip("litdata")
    stream = tmp_path / "stream" if data == "stream" else None
    (full_cbs, full_model, full_dm, full_batches), cache = uninterrupted
    resume_run(tmp_path / "part", cache, crash=True, stream_dir=stream)
    ckpt = tmp_path / "part" / "ckpt" / f"epoch=1-step={CRASH_STEP}.ckpt"
    assert ckpt.is_file()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cbs, model, dm, batches = resume_run(tmp_path / "part", cache, ckpt_path=ckpt, stream_dir=stream)
    # Lightning recognises the train dataloader as resumable (it warns about any other)
    assert not [w for w in caught if "not resumable" in str(w.message)]

    # the resumed run trains on exactly the batches the uninterrupted run had left in that epoch
    done_in_epoch1 = CRASH_STEP - STEPS_PER_EPOCH
    epoch1 = [b for e, b in full_batches if e == 1]
    assert batches == [(1, b) for b in epoch1[done_in_epoch1:]]
    assert len(epoch1) > STEPS_PER_EPOCH  # the negatives mined after epoch 0 were trained on

    # every callback logged the same values at every epoch (epoch 0 restored from the checkpoint)
    assert measured(cbs) == measured(full_cbs)
    sem_hist, ruq_hist, dress_hist = measured(cbs)
    assert [r["epoch"] for r in sem_hist if "val/sem_ent" in r] == [0.0, 1.0]
    assert [r["epoch"] for r in ruq_hist if "train/ruq" in r] == [0.0, 1.0]
    assert [r["epoch"] for r in dress_hist if "dress/negatives" in r] == [0.0, 1.0]
    assert all(r["dress/negatives"] > 0 for r in dress_hist)

    # the same DRESS state, in the callback and in the datamodule
    (_, _, dr), (_, _, full_dr) = cbs, full_cbs
    np.testing.assert_array_equal(dr.state.weights, full_dr.state.weights)
    np.testing.assert_array_equal(dr.state.heads, full_dr.state.heads)
    assert dr.state.negative_pairs == full_dr.state.negative_pairs and dr.state.negative_pairs
    np.testing.assert_array_equal(dr.state.negative_weights, full_dr.state.negative_weights)
    np.testing.assert_array_equal(dm.sample_weights, full_dm.sample_weights)
    assert dm.negatives == full_dm.negatives

    # bit-identical weights (dropout is 0: Lightning does not checkpoint the global RNG)
    full_state = full_model.state_dict()
    for name, value in model.state_dict().items():
        assert torch.equal(value, full_state[name]), name


# --------------------------------------------------------------------------------- 2. launch independence


class SaveHistories(Callback):
    """Writes each rank's diversity-callback histories to ``<out>/rank<r>.json`` (spawned ranks' objects die)."""

    def __init__(self, out: str) -> None:
        self.out = out

    def on_fit_end(self, trainer, pl_module):
        with open(os.path.join(self.out, f"rank{trainer.global_rank}.json"), "w") as f:
            json.dump(measured(trainer.callbacks), f)


def launch(root: Path, devices: int) -> list[list[list[dict[str, float]]]]:
    root.mkdir()
    sem, ruq = monitors(root / "cache")
    # Bit-identical values need pair-by-pair RUQ scoring; the shared-context pass agrees to float32
    # rounding across process counts (tests/test_ruq.py::test_shared_contexts_on_two_processes).
    ruq.shared_contexts = False
    # learning rate 0: both launches measure the very same weights after their training step
    tr = trainer(
        root,
        [sem, ruq, SaveHistories(str(root))],
        max_epochs=1,
        limit_train_batches=2,
        limit_val_batches=1,
        devices=devices,
        # ddp_spawn's fresh processes, forked from a server with torch and Lightning imported
        **({"strategy": forkserver_ddp()} if devices > 1 else {}),
    )
    # the pairs chosen here: the ranks (fresh processes) then do not read the whole corpus again
    chosen = datamodule()
    dm = datamodule(train=list(chosen.train_pairs()), val=list(chosen.val_pairs()))
    tr.fit(tiny_lm(learning_rate=0.0), datamodule=dm)
    return [json.loads((root / f"rank{r}.json").read_text()) for r in range(devices)]


@pytest.mark.slow
@pytest.mark.xdist_group("two_processes")
def test_one_and_two_processes_log_the_same_corpus_metrics(tmp_path):
    (single,) = launch(tmp_path / "one", 1)
    rank0, rank1 = launch(tmp_path / "two", 2)  # each launch fits its own clusters
    assert rank0 == rank1  # every rank logs the global values
    flat_single = {k: v for hist in single for row in hist for k, v in row.items()}
    flat_ddp = {k: v for hist in rank0 for row in hist for k, v in row.items()}
    assert set(CORPUS_METRICS) <= set(flat_single)
    assert set(flat_single) == set(flat_ddp)
    for key, value in flat_single.items():
        assert math.isfinite(value) and flat_ddp[key] == pytest.approx(value, abs=1e-9, rel=0), key


# ------------------------------------------------------------------------------------- 3. failure isolation


class _UploadsFail:
    """A TensorBoard writer whose figure, image and text uploads raise; scalars still work."""

    def __init__(self, writer) -> None:
        self._writer = writer

    def __getattr__(self, name):
        if name in ("add_figure", "add_image", "add_images", "add_text"):

            def fail(*args, **kwargs):
                raise RuntimeError(f"tracker unreachable ({name})")

            return fail
        return getattr(self._writer, name)


class FlakyTensorBoard(TensorBoardLogger):
    """A real TensorBoardLogger subclass whose media uploads (every call lightning-div makes to it) raise."""

    @property
    def experiment(self):
        return _UploadsFail(super().experiment)


#: One worker runs the failure-isolation tests and the same-seed test: two runs (module fixtures) serve all three.
ISOLATION = "invariants_isolation"
SEED = 7


@dataclass
class IsolationRun:
    trainer: pl.Trainer
    model: DialogueLM
    csv_logger: CSVLogger
    caught: list[warnings.WarningMessage]  # every warning of the fit, as pytest.warns records them
    root: Path


def isolation_run(root: Path, cache: Path, loggers, **kwargs) -> IsolationRun:
    """A run with the monitors and DRESS, seed 7 and dropout on (the training RNG stream matters): the two
    failure-isolation runs are also section 4's same-seed pair; they share one clusters cache."""
    model = tiny_lm(dropout=0.1)
    pl.seed_everything(SEED, workers=True)
    callbacks = [
        *monitors(cache),
        dress(root, mining={"num_contexts": 16}, dirpath=str(cache)),
        *kwargs.pop("extra", ()),
    ]
    tr = trainer(root, callbacks, loggers, limit_train_batches=4, limit_val_batches=1, log_every_n_steps=1, **kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tr.fit(model, datamodule=datamodule())
    return IsolationRun(tr, model, loggers[0], caught, root)


def warned(run: IsolationRun, pattern: str) -> str:
    """All the run's warning messages (as pytest.warns(RuntimeWarning, match=pattern) checks them)."""
    assert any(issubclass(w.category, RuntimeWarning) and re.search(pattern, str(w.message)) for w in run.caught)
    return " ".join(str(w.message) for w in run.caught)


@pytest.fixture(scope="module")
def isolation_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("isolation_cache")


@pytest.fixture(scope="module")
def flaky_tracker_run(tmp_path_factory, isolation_cache) -> IsolationRun:
    root = tmp_path_factory.mktemp("flaky_tracker")
    loggers = [CSVLogger(root, name="csv"), FlakyTensorBoard(root, name="tb")]
    ckpt = ModelCheckpoint(dirpath=root / "ckpt", save_last=True)
    return isolation_run(root, isolation_cache, loggers, extra=[ckpt], enable_checkpointing=True)


@pytest.fixture(scope="module")
def blocked_plot_dir_run(tmp_path_factory, isolation_cache) -> tuple[IsolationRun, Path]:
    root = tmp_path_factory.mktemp("blocked_plot_dir")
    csv_logger = CSVLogger(root, name="csv", version=0)
    blocked = Path(csv_logger.log_dir) / "lightning_div"  # where the callbacks put figures and tables
    if os.geteuid() != 0:
        blocked.mkdir(parents=True)
        blocked.chmod(0o555)
    else:  # root writes through any mode bits: block the directory by making its name a file
        blocked.parent.mkdir(parents=True)
        blocked.write_text("in the way")
    try:
        return isolation_run(root, isolation_cache, [csv_logger]), blocked
    finally:
        if blocked.is_dir():
            blocked.chmod(0o755)


@pytest.mark.slow
@pytest.mark.xdist_group(ISOLATION)
def test_a_failing_tracker_costs_warnings_not_the_run(flaky_tracker_run):
    run = flaky_tracker_run
    tr, model, csv_logger, tmp_path = run.trainer, run.model, run.csv_logger, run.root
    messages = warned(run, r"could not write val/cluster_histogram to FlakyTensorBoard")
    for key in ("val/samples", "val/ruq_plot", "dress/weight_histogram"):
        assert f"could not write {key} to FlakyTensorBoard" in messages
    assert tr.state.finished and tr.current_epoch == 2
    rows = csv_rows(csv_logger)
    for key in CORPUS_METRICS + ["dress/weight_mean"]:
        assert len(logged(rows, key)) == 2, key  # both epochs measured and logged
    # the figures still reached the disk beside the CSV logger's files
    assert sorted(p.name for p in (Path(csv_logger.log_dir) / "lightning_div").glob("val_cluster_histogram_*.png")) == [
        "val_cluster_histogram_epoch0.png",
        "val_cluster_histogram_epoch1.png",
    ]
    restored = DialogueLM.load_from_checkpoint(tmp_path / "ckpt" / "last.ckpt")
    for name, value in model.state_dict().items():
        assert torch.equal(restored.state_dict()[name], value), name
    states = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)["callbacks"]
    dress_state = next(v for k, v in states.items() if k.startswith("DRESSReweighting"))
    assert len(dress_state["history"]) == 2 and dress_state["reweighting"]["weights"] is not None


@pytest.mark.slow
@pytest.mark.xdist_group(ISOLATION)
def test_an_unwritable_plot_directory_costs_warnings_not_the_run(blocked_plot_dir_run):
    run, blocked = blocked_plot_dir_run
    tr, csv_logger = run.trainer, run.csv_logger
    messages = warned(run, "could not write")
    for name in (
        "val_cluster_histogram_epoch0.png",
        "val_samples_epoch0.csv",
        "val_ruq_plot_epoch0.png",
        "dress_weight_histogram_epoch0.png",
    ):
        assert str(blocked / name) in messages, name
    assert tr.state.finished and tr.current_epoch == 2
    rows = csv_rows(csv_logger)
    for key in CORPUS_METRICS + ["dress/weight_mean"]:
        assert len(logged(rows, key)) == 2, key
    assert blocked.is_file() or not any(blocked.iterdir())


class InterruptGeneration(LogitsProcessor):
    """Ctrl+C inside ``model.generate``: KeyboardInterrupt at the first decoding step once armed."""

    def __init__(self) -> None:
        self.armed, self.calls = False, 0

    def __call__(self, input_ids, scores):
        self.calls += 1
        if self.armed:
            raise KeyboardInterrupt
        return scores


def model_flags(pl_module) -> dict[str, tuple[bool, ...]]:
    return {
        "training": tuple(m.training for m in pl_module.modules()),
        "requires_grad": tuple(p.requires_grad for p in pl_module.parameters()),
    }


class Watch(Callback):
    """Arms the interrupt in epoch 1 and records the model's flags and the RNG around DRESS's generation."""

    def __init__(self, interrupt: InterruptGeneration) -> None:
        self.interrupt = interrupt
        self.calls_epoch0 = 0
        self.weights_epoch1: dict[str, torch.Tensor] = {}
        self.start: dict = {}
        self.before: dict = {}
        self.after: dict = {}

    def _snapshot(self, pl_module) -> dict:
        return {
            **model_flags(pl_module),
            "rng": torch.get_rng_state(),
            "grad": torch.is_grad_enabled(),
            "inference": torch.is_inference_mode_enabled(),
        }

    def on_train_start(self, trainer, pl_module):
        self.start = model_flags(pl_module)

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch == 1:
            self.calls_epoch0 = self.interrupt.calls  # DRESS generated through it, unharmed, after epoch 0
            self.interrupt.armed = True
            self.weights_epoch1 = copy.deepcopy(pl_module.state_dict())

    def on_train_epoch_end(self, trainer, pl_module):  # before DRESS's hook: Watch comes first in the list
        self.before = self._snapshot(pl_module)

    def on_exception(self, trainer, pl_module, exception):
        self.after = {**self._snapshot(pl_module), "exception": type(exception).__name__}


@pytest.mark.slow
def test_ctrl_c_during_generation_ends_the_fit_cleanly(tmp_path, fitted_clusters):
    fitted_clusters(tmp_path / "cache")  # the clusters are not what this test is about
    interrupt = InterruptGeneration()
    watch = Watch(interrupt)
    dr = dress(tmp_path, mining={"num_contexts": 16}, options={"logits_processor": LogitsProcessorList([interrupt])})
    model = tiny_lm()
    # a user's partly frozen model: one block in eval mode, the embeddings without gradients
    model.model.transformer.h[0].eval()
    model.model.transformer.wte.requires_grad_(False)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    tr = trainer(tmp_path, [watch, dr, ckpt], limit_train_batches=2, limit_val_batches=1, enable_checkpointing=True)
    handler = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit, match=r"^1$") as exit_info:  # Lightning's graceful shutdown on KeyboardInterrupt
            tr.fit(model, datamodule=datamodule())
    finally:
        signal.signal(signal.SIGINT, handler)  # Lightning ignores further Ctrl+C from then on
    assert exit_info.value.code == 1 and tr.interrupted
    assert watch.calls_epoch0 > 0 and watch.after["exception"] == "KeyboardInterrupt"
    # the callback's generations (the finished one after epoch 0, the interrupted one) left the model as it was
    flags = watch.start
    assert any(flags["training"]) and not all(flags["training"])
    assert any(flags["requires_grad"]) and not all(flags["requires_grad"])
    for snapshot in (watch.before, watch.after):
        assert snapshot["training"] == flags["training"] and snapshot["requires_grad"] == flags["requires_grad"]
    assert torch.equal(watch.after["rng"], watch.before["rng"])
    assert watch.after["grad"] and not watch.after["inference"]
    # the checkpoint of epoch 0 loads and holds the weights epoch 1 started from
    restored = DialogueLM.load_from_checkpoint(tmp_path / "ckpt" / "last.ckpt")
    for name, value in watch.weights_epoch1.items():
        assert torch.equal(restored.state_dict()[name], value), name
    state = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert state["epoch"] == 0
    dress_state = next(v for k, v in state["callbacks"].items() if k.startswith("DRESSReweighting"))
    assert [row["epoch"] for row in dress_state["history"]] == [0.0]


# ------------------------------------------------------------------------------------------- 4. determinism


@pytest.mark.slow
@pytest.mark.xdist_group(ISOLATION)
def test_two_runs_with_one_seed_log_identical_metrics(flaky_tracker_run, blocked_plot_dir_run):
    """The failure-isolation runs of section 3 are the pair: seed 7, dropout on (the training RNG stream
    matters), the monitors and DRESS; they differ only in what could not be written (a tracker's uploads,
    the plot directory) and in a checkpoint callback, none of which may change a metric."""
    first, second = csv_rows(flaky_tracker_run.csv_logger), csv_rows(blocked_plot_dir_run[0].csv_logger)
    columns = set(first[0])
    assert set(second[0]) == columns
    assert set(CORPUS_METRICS + ["train/loss_step", "val/loss", "dress/effective_sample_size"]) <= columns
    compared = sorted(c for c in columns if not c.startswith("timing/"))  # wall-clock times may differ
    assert [[r[c] for c in compared] for r in first] == [[r[c] for c in compared] for r in second]
    assert len(logged(first, "train/loss_step")) == 8 and len(logged(first, "val/sem_ent")) == 2


@pytest.mark.slow
def test_epochs_without_a_validation_loop_are_measured_at_their_end(tmp_path, fitted_clusters):
    """No validation loop in an epoch (limit_val_batches=0, check_val_every_n_epoch=2, or a module without
    validation_step): the validation metrics come at that training epoch's end instead — once per epoch,
    with the values a validated run gets (validation changes neither the weights nor the RNG stream).
    The metrics are what is compared: no RUQ plot, no cluster views (their figures were most of each run)."""

    def run(name, **kwargs):
        # val_pairs / train_pairs given: no datamodule; the three runs fit the same clusters: once
        sem, ruq = monitors_with_own_data(fitted_clusters(tmp_path / name / "cache"))
        sem.cluster_views, ruq.plot = False, None
        torch.manual_seed(0)
        trainer(tmp_path / name, [sem, ruq], **kwargs).fit(TinyChat())
        return (
            [(h["epoch"], h["val/sem_ent"]) for h in sem.history if "val/sem_ent" in h],
            [(h["epoch"], h["val/ruq"]) for h in ruq.history if "val/ruq" in h],
            [(h["epoch"], h["train/ruq"]) for h in ruq.history if "train/ruq" in h],
        )

    validated = run("validated")
    assert [e for e, _ in validated[0]] == [0.0, 1.0] and [e for e, _ in validated[1]] == [0.0, 1.0]
    assert run("no_val_batches", limit_val_batches=0) == validated
    assert run("every_other_epoch", check_val_every_n_epoch=2) == validated
