"""experiments/ruq_over_training.py --quick runs as a user runs it and writes a complete, finite results.json."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import assert_finite_numbers, load_experiment

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_ruq_over_training_quick(tmp_path, capsys):
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
    assert_finite_numbers(res)
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

    # a re-run of one committed run (one corner, same seed), in another process (this one), gives every
    # per-epoch number again, exactly; the runs below call the script's main here too (helpers.load_experiment)
    script = load_experiment("ruq_over_training")
    again_dir = tmp_path / "again"
    script.main(["--quick", "--corners", "0.0,0.4", "--seeds", "3", "--out", str(again_dir)])
    (again,) = json.loads((again_dir / "results.json").read_text())["runs"]
    first = next(r for r in res["runs"] if (r["dropout"], r["label_smoothing"]) == (0.0, 0.4))
    per_epoch = ("val/loss", "train/loss_epoch", "train/ruq", "val/ruq", "train/ruq_margin", "val/ruq_margin")
    assert [[e[k] for k in per_epoch] for e in again["epochs"]] == [[e[k] for k in per_epoch] for e in first["epochs"]]

    # --before: the base model as shipped, validated on the runs' data and prompts before any step
    script.main(["--quick", "--before", "--seeds", "3", "--out", str(tmp_path / "before")])
    before = json.loads((tmp_path / "before" / "results.json").read_text())
    assert_finite_numbers(before)
    assert before["experiment"] == "ruq_over_training_before" and [b["seed"] for b in before["before"]] == [3]
    (row,) = before["before"]
    assert 0.0 <= row["val/ruq"] <= 100.0 and 0.0 <= row["val/ruq_idk2"] <= 100.0
    assert row["val/loss"] < 5.0  # the pretrained weights (a random GPT-2 starts near ln(vocab) > 8)
    assert row["val/loss"] not in [e["val/loss"] for r in res["runs"] for e in r["epochs"]]  # no training step
    with pytest.raises(SystemExit, match=r"^2$") as bad:
        script.main(["--before", "--regime", "scratch", "--out", str(tmp_path / "x")])
    assert bad.value.code == 2 and "the scratch regime has none" in capsys.readouterr().err

    # --merge of parts split by seed: every corner once in the summary, with both seeds' runs
    other = tmp_path / "seed4"
    other.mkdir()
    part = json.loads((out / "results.json").read_text())
    part["settings"]["seeds"] = [4]
    for run in part["runs"]:
        run["seed"] = 4
        for e in run["epochs"]:
            e["train/ruq"] = 100.0 - e["train/ruq"]  # another seed's numbers, so the mean is checkable
    (other / "results.json").write_text(json.dumps(part))
    merged_dir = tmp_path / "merged"
    script.main(["--merge", str(out), str(other), "--out", str(merged_dir)])
    merged = json.loads((merged_dir / "results.json").read_text())
    assert merged["settings"]["seeds"] == [3, 4]
    assert [(row["dropout"], row["label_smoothing"]) for row in merged["summary"]] == corners
    assert [(r["dropout"], r["label_smoothing"], r["seed"]) for r in merged["runs"]] == [
        (*c, s) for c in corners for s in (3, 4)
    ]
    for row in merged["summary"]:
        assert row["seeds"] == [3, 4] and row["train/ruq"]["mean"] == pytest.approx(50.0)
    # a run held by two parts differently is refused naming both files (the later part used to win in silence)
    part["settings"]["seeds"] = [3]
    for run in part["runs"]:
        run["seed"] = 3
    (other / "results.json").write_text(json.dumps(part))
    with pytest.raises(SystemExit, match=r"^2$"):
        script.main(["--merge", str(out), str(other), "--out", str(tmp_path / "merged2")])
    err = capsys.readouterr().err
    assert "different runs of" in err and "seed 3" in err and str(other / "results.json") in err
    with pytest.raises(SystemExit, match=r"^2$"):  # nor may it write over a part it reads
        script.main(["--merge", str(out), str(merged_dir), "--out", str(out)])
    assert "would rewrite a part it reads" in capsys.readouterr().err
