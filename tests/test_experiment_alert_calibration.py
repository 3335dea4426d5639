"""experiments/alert_calibration.py: labels, Wilson intervals and the alert replay by hand, and the page from the stored runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import load_experiment

ROOT = Path(__file__).resolve().parents[1]


def test_labels_intervals_and_replay_by_hand():
    script = load_experiment("alert_calibration")
    base = {"nll": 4.0, "judge_group_sem_ent": 1.4}
    ok = {"cut_share": 0.0, "top_word_share": 0.1, "nll": 5.0, "judge_group_sem_ent": 0.9}
    assert script.label(ok, base) == "healthy"  # 0.9 > 0.6 x 1.4 = 0.84
    assert script.label({**ok, "judge_group_sem_ent": 0.8}, base) == "collapse"
    assert script.label({**ok, "judge_group_sem_ent": 0.8, "nll": 6.1}, base) == "breakdown"  # NLL up 2.1 nats
    assert script.label({**ok, "cut_share": 0.3}, base) == "breakdown"
    # Wilson, 4 of 6: centre (p + z^2/2n) / (1 + z^2/n), half z sqrt(p q / n + z^2 / 4n^2) / (1 + z^2/n)
    w = script.wilson(4, 6)
    assert w["share"] == pytest.approx(4 / 6) and w["low"] == pytest.approx(0.3000, abs=1e-4)
    assert w["high"] == pytest.approx(0.9032, abs=1e-4) and script.wilson(0, 0)["share"] is None
    # GroupAlert (start 5 steps, warn_drop 0.25) fed 10 steps at 1.0 then 0.5: the mean of the last five
    # falls below 0.75 at the third step at 0.5 (1, 1, 0.5, 0.5, 0.5 -> 0.7), step 13; nothing breaks down
    steps = [
        {"step": i + 1, "group_sem_ent": 1.0 if i < 10 else 0.5, "top_word_share": 0.1, "cut_share": 0.0, "nll": 4.0}
        for i in range(20)
    ]
    assert script.replay(steps, {"warn_drop": 0.25, "nll_rise": 1.0}) == {"collapse": 13, "breakdown": None}


def test_the_page_from_the_stored_grpo_runs(tmp_path):
    script = load_experiment("alert_calibration")
    out = tmp_path / "alert_calibration"
    res = script.main(["--out", str(out)])
    assert json.loads((out / "results.json").read_text()) == res
    # 31 stored runs, two of them (grpo_lexical seeds 1, 2) grpo's to the last digit: 29 distinct
    assert len(res["labels"]) == 29 and "grpo_lexical seed 1" not in res["labels"]
    assert {v["label"] for v in res["labels"].values()} == {"healthy", "collapse", "breakdown"}
    held = res["held_out"]["defaults"]["breakdown"]
    assert held["recall"]["n"] == sum(
        1 for name, v in res["labels"].items() if v["label"] == "breakdown" and name.endswith(("seed 1", "seed 3"))
    )
    assert res["chosen"]["warn_drop"] in script.GRID["warn_drop"] and len(res["grid"]) == 7 * 5
    page = (tmp_path / "alert_calibration.md").read_text()
    assert "## Held out: the chosen thresholds" in page and "| grpo seed 1 |" in page and "## Environment" in page
