"""experiments/pretrain_base.py --quick: the base model's pretraining runs, is deterministic, and ships a model card."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import load_experiment

ROOT = Path(__file__).resolve().parents[1]


def run(out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        str(ROOT / "experiments" / "pretrain_base.py"),
        "--quick",
        "--out",
        str(out),
        "--threads",
        "1",
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "pretrain_base: step" in done.stdout  # plain progress lines when the output is not a terminal
    return json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_pretrain_base_quick_is_deterministic_and_writes_a_card(tmp_path):
    first = run(tmp_path / "a")  # as a user runs it: a fresh interpreter, its progress lines on a pipe
    # and again in another process (this one: helpers.load_experiment saves an interpreter's imports)
    script = load_experiment("pretrain_base")
    script.main(["--quick", "--out", str(tmp_path / "b"), "--threads", "1"])
    second = json.loads((tmp_path / "b" / "results.json").read_text())
    # the same seed and thread count: the same losses to the last bit, during training and as shipped
    assert [h["heldout_loss"] for h in first["history"]] == [h["heldout_loss"] for h in second["history"]]
    assert first["heldout_loss_shipped"] == second["heldout_loss_shipped"]
    assert first["heldout_loss_final"] < first["heldout_loss_start"]  # it learned something
    # the conversations are the pretrain split only: never a validation, test or finetune conversation
    from lightning_div.chitchat import chitchat_conversations

    pretrain = {c for c, _ in chitchat_conversations("pretrain")}
    held_out = {c for split in ("validation", "test", "finetune") for c, _ in chitchat_conversations(split)}
    assert not pretrain & held_out and len(pretrain) == 3248
    card = (tmp_path / "a" / "model" / "README.md").read_text()
    assert "pretrain" in card and "MIT License" in card and "--quick" in card
    assert (tmp_path / "a" / "loss.png").stat().st_size > 0
    assert len(first["samples_before"]) == len(first["samples_after"]) == script.QUICK_SAMPLES == 4
