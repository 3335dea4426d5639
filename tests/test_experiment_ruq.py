"""experiments/ruq_over_training.py --quick runs as a user runs it and writes a complete, finite results.json."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def finite_numbers(obj, where="results"):
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        assert math.isfinite(obj), where
    elif isinstance(obj, dict):
        for k, v in obj.items():
            finite_numbers(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            finite_numbers(v, f"{where}[{i}]")


@pytest.mark.slow
def test_ruq_over_training_quick(tmp_path):
    out = tmp_path / "ruq"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "experiments" / "ruq_over_training.py"),
            "--quick",
            "--out",
            str(out),
            "--seeds",
            "3",
        ],
        check=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    res = json.loads((out / "results.json").read_text())
    finite_numbers(res)
    assert res["experiment"] == "ruq_over_training" and res["quick"] is True
    settings = res["settings"]
    corners = [tuple(c) for c in settings["corners"]]
    # the paper's BASE (dropout 0.4, smoothing 0.2) and BEST (0.0, 0.4) corners, fine-tuning the base model
    assert settings["seeds"] == [3] and corners == [(0.4, 0.2), (0.0, 0.4)]
    assert settings["model"] == {"base": "local:chitchat-gpt2"} and settings["train_source"] == "chitchat:finetune"
    assert [(r["dropout"], r["label_smoothing"], r["seed"]) for r in res["runs"]] == [(*c, 3) for c in corners]
    for run in res["runs"]:
        assert [e["epoch"] for e in run["epochs"]] == list(range(settings["epochs"]))
        for e in run["epochs"]:
            for key in ("train/ruq", "val/ruq", "train/ruq_idk2", "val/ruq_idk2"):
                assert 0.0 <= e[key] <= 100.0
            for key in ("train/ruq_margin", "val/ruq_margin", "train/loss_epoch", "val/loss"):
                assert key in e
        for split in ("train", "val"):
            lines = run["profiles"][split]
            assert {"reference", "IDK: I don't know.", "IDK: I don't know what to do."} <= set(lines)
            assert len(lines["IDK: I don't know."]["mean_logprob"]) == len(lines["IDK: I don't know."]["count"]) >= 2
    assert [(row["dropout"], row["label_smoothing"]) for row in res["summary"]] == corners
    assert tuple(res["best"]) in corners and tuple(res["worst"]) in corners
    for name in res["figures"]:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
