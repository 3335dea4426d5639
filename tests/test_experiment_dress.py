"""experiments/dress_vs_baseline.py --quick: the JSON has every setting, seed and epoch, with finite numbers."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "dress_vs_baseline.py"
FINITE_PER_EPOCH = [
    "val_loss",
    "perplexity",
    "val_sem_ent",
    "val_distinct_1",
    "val_distinct_2",
    "val_ent_4",
    "val_ead",
    "head_share",
    "val_ruq",
    "train_loss",
    "gold_batch_loss",
]


def load_script():
    spec = importlib.util.spec_from_file_location("dress_vs_baseline", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_quick_run_writes_results_and_figures(tmp_path):
    script = load_script()
    script.main(["--quick", "--out", str(tmp_path), "--threads", "1"])
    results = json.loads((tmp_path / "results.json").read_text())
    config = results["settings"]["config"]
    assert results["seeds"] == [0] and results["settings"]["quick"] is True
    assert {r["setting"] for r in results["runs"]} == set(script.SETTINGS)
    for run in results["runs"] + results["lambda_sweep"]:
        assert [e["epoch"] for e in run["epochs"]] == list(range(config["epochs"]))
        for epoch in run["epochs"]:
            for key in FINITE_PER_EPOCH:
                assert math.isfinite(epoch[key]), (run["setting"], key)
            assert 0.0 <= epoch["head_share"] <= 1.0 and 0.0 <= epoch["val_ruq"] <= 100.0
            assert epoch["perplexity"] == pytest.approx(math.exp(epoch["val_loss"]))
    # DRESS with negatives trains on negative batches from epoch 0 on (mine_at="start")
    for name in ("dress_nll", "dress_unlikelihood"):
        run = next(r for r in results["runs"] if r["setting"] == name)
        assert all(e["negative_batches"] > 0 and math.isfinite(e["negative_batch_loss"]) for e in run["epochs"])
        assert all(e["dress_head_clusters"] >= 1 for e in run["epochs"])
    baseline = next(r for r in results["runs"] if r["setting"] == "baseline")
    assert all(e["negative_batches"] == 0 for e in baseline["epochs"])
    assert [r["lam"] for r in results["lambda_sweep"]] == list(config["lambdas"])
    summary = results["summary"]
    assert set(summary) == set(script.SETTINGS)
    assert len(summary["baseline"]["val_sem_ent"]["mean"]) == config["epochs"]
    for name in results["figures"]:
        assert (tmp_path / name).stat().st_size > 1000
