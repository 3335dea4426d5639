"""PlainProgress: readable progress lines when the output is a file (issue 34: an 11-minute silence per epoch)."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re

import pytest
from helpers import fit_config, quiet_trainer
from monitor_setup import TinyChat, monitors, trainer

from lightning_div.callbacks import PlainProgress
from lightning_div.callbacks.progress import find_progress
from lightning_div.cli.main import main


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="every_n_steps"):
        PlainProgress(every_n_steps=-1)
    with pytest.raises(ValueError, match="when='sometimes'"):
        PlainProgress(when="sometimes")  # type: ignore[arg-type]


def test_auto_prints_only_when_stdout_is_not_a_terminal(monkeypatch):
    import lightning_div.callbacks.progress as progress

    monkeypatch.setattr(progress, "output_is_a_terminal", lambda: True)
    assert not PlainProgress().active and PlainProgress(when="always").active
    monkeypatch.setattr(progress, "output_is_a_terminal", lambda: False)
    assert PlainProgress().active and not PlainProgress(when="never").active
    monkeypatch.setenv("LIGHTNING_DIV_PROGRESS", "0")
    assert not PlainProgress().active and not PlainProgress(when="always").active


@pytest.mark.slow
def test_lines_every_n_steps_and_around_each_measurement(tmp_path, fitted_clusters):
    """The lines are what is checked: the monitors read this session's clusters if fitted already (the line
    before training says "or the cache") and generate 4 tokens (monitor_setup's 10)."""
    out = io.StringIO()
    sem, ruq = monitors(fitted_clusters(tmp_path / "cache"), max_new_tokens=4)
    progress = PlainProgress(every_n_steps=2, when="always", stream=out)
    fit = trainer(tmp_path, [sem, ruq, progress], max_epochs=2)
    assert find_progress(fit) is progress
    fit.fit(TinyChat())
    lines = out.getvalue().splitlines()
    assert all(line.startswith("lightning-div: ") for line in lines)
    assert lines[0] == "lightning-div: fit started: 2 epoch(s)"
    # the monitor's clusters are fitted at fit start, said before training begins
    assert (
        lines[1] == "lightning-div: epoch 0: SemanticDiversityMonitor measuring the semantic clusters "
        "(embedding and k-means, or the cache) ..."
    )
    assert "lightning-div: training: 4 batches an epoch" in lines
    steps = [line for line in lines if re.search(r"epoch \d, batch \d/4, ", line)]
    # limit_train_batches=4, every 2 steps: batches 2 and 4 of each epoch, with the step loss and the speed
    assert [re.search(r"epoch (\d), batch (\d)", line).groups() for line in steps] == [
        ("0", "2"),
        ("0", "4"),
        ("1", "2"),
        ("1", "4"),
    ]
    assert all("train/loss " in line and "batches/s" in line for line in steps)
    for epoch in (0, 1):
        for who, what in (("SemanticDiversityMonitor", "semantic diversity"), ("RUQMonitor", "validation RUQ")):
            started = f"lightning-div: epoch {epoch}: {who} measuring {what} ..."
            done = [
                line for line in lines if line.startswith(f"lightning-div: epoch {epoch}: {who} measured {what} in ")
            ]
            assert started in lines and len(done) == 1
            assert lines.index(started) < lines.index(done[0])  # said when it begins, and again when it ends
    sem_done = next(line for line in lines if "measured semantic diversity" in line)
    assert re.search(r"val/sem_ent \d\.\d{4}", sem_done)
    ends = [line for line in lines if re.match(r"lightning-div: epoch \d done in ", line)]
    assert len(ends) == 2 and "val/sem_ent" in ends[-1]


@pytest.mark.slow
def test_the_command_line_adds_it_when_the_output_is_a_file(tmp_path, monkeypatch, capsys):
    """``python -m lightning_div.cli fit`` with stdout a pipe prints the lines; ``LIGHTNING_DIV_PROGRESS=0``
    silences them. The silenced run is the same command in this process (``main``, stdout captured: no
    terminal either), so only the first pays a fresh interpreter's imports of Lightning."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from lightning_div.cli.main import main

    root = Path(__file__).resolve().parents[1]
    # small files, not the corpus: both runs would read Chit-Chat for 72 pairs of it
    for split, count in (("train", 40), ("val", 8)):
        rows = [{"context": [f"how was day {i}?"], "response": f"day {i} was fine, thanks."} for i in range(count)]
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = tmp_path / "c.yaml"
    config.write_text(
        "trainer:\n  max_epochs: 1\n  limit_train_batches: 4\n  limit_val_batches: 1\n  logger: false\n"
        "  enable_checkpointing: false\n  num_sanity_val_steps: 0\n"
        "model:\n  class_path: DialogueLM\n  init_args:\n    model_name_or_path: null\n"
        "    tokenizer: local:chitchat\n"
        "    from_scratch: {model_type: gpt2, n_layer: 1, n_embd: 32, n_head: 2, n_positions: 128}\n"
        "data:\n  class_path: DialogueDataModule\n  init_args:\n    train: train.jsonl\n    val: val.jsonl\n"
        "    batch_size: 8\n"
    )
    # a bare environment, plus the test session's tokenizer cache and thread settings (tests/conftest.py)
    kept = ("LIGHTNING_DIV_CACHE", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "TOKENIZERS_PARALLELISM")
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(root)}
    env.update({k: os.environ[k] for k in kept if k in os.environ})
    done = subprocess.run(
        [sys.executable, "-m", "lightning_div.cli", "fit", "--config", str(config)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "lightning-div: fit started: 1 epoch(s)" in done.stdout  # stdout is a pipe here
    assert "lightning-div: training: 4 batches an epoch" in done.stdout
    assert "lightning-div: epoch 0 done in " in done.stdout
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LIGHTNING_DIV_PROGRESS", "0")
    capsys.readouterr()
    quiet = main(["fit", "--config", str(config)])
    out = capsys.readouterr().out
    assert quiet == 0 and "lightning-div: fit started" not in out


def test_a_run_without_negatives_draws_no_tokenising_negatives_bar(capsys, monkeypatch):
    """Issue 43 item 3: a run without DRESS printed ``tokenising negatives: 0it`` on a terminal."""
    import sys

    from helpers import chitchat_pairs, tokenizer

    from lightning_div.datamodules import DialogueDataModule

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # bars draw on a terminal only (_internal/bars.py)
    dm = DialogueDataModule(train=list(chitchat_pairs("train", 3))[:8], val=None, tokenizer=tokenizer(), batch_size=4)
    dm.setup("fit")
    dm.train_dataloader()
    err = capsys.readouterr().err
    assert "tokenising train" in err  # the bar is there for the work that is done
    assert "tokenising negatives" not in err


class _FailingStream:
    def __init__(self, err: Exception) -> None:
        self.err, self.writes = err, 0

    def write(self, text: str) -> int:
        self.writes += 1
        raise self.err

    def flush(self) -> None:
        raise self.err


@pytest.mark.parametrize("what", ["a closed stream", "a broken pipe", "/dev/full"])
def test_progress_output_that_fails_never_stops_training(what, tmp_path, caplog):
    # M10: ValueError (I/O operation on closed file), BrokenPipeError, ENOSPC each aborted fit
    import io
    import logging

    from datamodule_setup import TinyLM

    from lightning_div.callbacks.progress import PlainProgress
    from lightning_div.datamodules import DialogueDataModule

    stream: object
    if what == "a closed stream":
        stream = io.StringIO()
        stream.close()
    elif what == "a broken pipe":
        stream = _FailingStream(BrokenPipeError(errno.EPIPE, "Broken pipe"))
    else:
        if not os.path.exists("/dev/full"):
            pytest.skip("no /dev/full here")
        stream = open("/dev/full", "w")
    progress = PlainProgress(every_n_steps=1, when="always", stream=stream)
    dm = DialogueDataModule(train=[("hi", "hello")] * 8, val=None, batch_size=2, show_progress=False)
    trainer = quiet_trainer(max_epochs=2, callbacks=[progress])
    with caplog.at_level(logging.WARNING, logger="lightning_div.callbacks.progress"):
        trainer.fit(TinyLM(), datamodule=dm)
    assert trainer.state.finished and trainer.global_step == 8  # both epochs trained
    warned = [r for r in caplog.records if "writing a progress line failed" in r.getMessage()]
    assert len(warned) == 1 and "training continues" in warned[0].getMessage()
    if what == "/dev/full":
        with contextlib.suppress(OSError):  # its buffer cannot be flushed either
            stream.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["FALSE", "False", "OFF", "No", "00", " off ", "n"])
def test_progress_switch_reads_like_the_ecosystem(value, monkeypatch, capsys):
    # L4: only lowercase "0"/"false"/"no"/"off" silenced the printer
    from lightning_div.callbacks.progress import PlainProgress

    monkeypatch.setenv("LIGHTNING_DIV_PROGRESS", value)
    progress = PlainProgress(when="always")
    assert not progress.active
    progress.measurement_started("X", "y", 0)
    assert capsys.readouterr().out == ""
    monkeypatch.setenv("LIGHTNING_DIV_PROGRESS", value.replace("0", "1") if value == "00" else "TRUE")
    assert progress.active


def test_a_progress_switch_of_no_known_value_is_refused(monkeypatch, tmp_path, capsys):
    from lightning_div.callbacks.progress import PlainProgress

    monkeypatch.setenv("LIGHTNING_DIV_PROGRESS", "maybe")
    with pytest.raises(ValueError, match=r"LIGHTNING_DIV_PROGRESS='maybe' is not a switch: use 0/1, false/true"):
        PlainProgress()
    assert main(["fit", "--config", str(fit_config(tmp_path, "local:chitchat-gpt2"))]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "lightning-div fit: error: LIGHTNING_DIV_PROGRESS='maybe' is not a switch: use 0/1, false/true, no/yes or "
        "off/on (any case)"
    )
