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
    # the SFT part: 72 distinct stored runs (lambda_0 and lambda_30 are baseline and dress_no_negatives), their
    # events counted by the label rule: none in the base regime's 30, 6 lexical collapses from scratch, one
    # breakdown (ruq_over_training base, dropout 0.0, smoothing 0.4, seed 0: validation loss +0.27 at epoch 8)
    sft = res["sft"]
    c = sft["counts"]
    assert sum(x["runs"] for x in c.values()) == 72 and c["dress_vs_baseline (base)"]["runs"] == 30
    assert c["dress_vs_baseline (base)"]["events"] == {"collapse": 0, "breakdown": 0}
    assert sum(x["events"]["collapse"] for x in c.values()) == 6
    assert sum(x["events"]["breakdown"] for x in c.values()) == 1
    assert sft["labels"]["ruq_over_training (base): dropout 0.0, smoothing 0.4 seed 0"]["label_epoch"] == 8
    # the defaults the page judges are the alerts' own
    from lightning_div.measure.alerts import DRESSAlert, RUQAlert

    assert sft["defaults"] == {"warn_drop": RUQAlert().warn_drop, "sem_ent_ratio": DRESSAlert().sem_ent_ratio}
    ruq, dress = sft["alerts"]["RUQAlert"], sft["alerts"]["DRESSAlert"]
    assert ruq["labelled"] == {"calibration": 6, "held_out": 1} and dress["runs"] == {"calibration": 31, "held_out": 16}
    # RUQAlert at warn_drop 10 fires in one stored run: scratch 1500, dress_no_negatives seed 0, RUQ 25.0 -> 2.1
    fired = [a for a in ruq["calibration"]["default"]["alerts"] + ruq["held_out"]["default"]["alerts"] if a["fired"]]
    assert [(a["run"], a["fired"]) for a in fired] == [
        ("dress_vs_baseline (scratch, 1500): dress_no_negatives seed 0", [1])
    ]
    # DRESSAlert: in none of the base regime's 25 DRESS runs
    every = dress["calibration"]["default"]["alerts"] + dress["held_out"]["default"]["alerts"]
    assert not any(a["fired"] for a in every if a["run"].startswith("dress_vs_baseline (base)"))
    assert "## SFT alerts: held out" in page and "| RUQAlert (held out) | default: warn_drop 10 |" in page


def _epoch(epoch, val_loss, ruq, d2, ead, sem, top, gold=None, loss=4.0, negative=None):
    return {
        "epoch": epoch,
        "val_loss": val_loss,
        "val_ruq": ruq,
        "train_loss": loss,
        "negative_loss": negative,
        "distinct_2": d2,
        "ead": ead,
        "sem_ent": sem,
        "sem_ent_gold": gold,
        "top_cluster_share": top,
    }


def test_sft_labels_and_replays_by_hand():
    sft = load_experiment("_sft_alerts")
    before = _epoch(0, 4.0, 30.0, 0.10, 0.06, 1.5, 0.2)
    # distinct-2 and EAD both exactly halved: a collapse; EAD a hair above half: none
    assert sft.transition_label(before, _epoch(1, 4.1, 30.0, 0.05, 0.03, 1.5, 0.2)) == "collapse"
    assert sft.transition_label(before, _epoch(1, 4.1, 30.0, 0.05, 0.031, 1.5, 0.2)) is None
    # nothing to fall from (distinct-2 below the 0.01 floor): none; validation loss up 0.25 nats: breakdown
    assert sft.transition_label({**before, "distinct_2": 0.009}, _epoch(1, 4.1, 30.0, 0.0, 0.0, 0.0, 1.0)) is None
    assert sft.transition_label(before, _epoch(1, 4.25, 30.0, 0.10, 0.06, 1.5, 0.2)) == "breakdown"
    assert sft.transition_label(before, _epoch(1, 4.2, 30.0, 0.10, 0.06, 1.5, 0.2)) is None
    # no generation measures (ruq_over_training): only the loss can label
    assert sft.transition_label({**before, "distinct_2": None}, _epoch(1, 4.0, 0.0, None, None, None, None)) is None

    # a made-up run of four epochs: RUQ 30, 25, 14, 13 (a drop of 11 points at epoch 2); the gold's Sem-Ent
    # logged once (2.0, at epoch 0); Sem-Ent 0.9 < 0.5 x 2.0 at epoch 1; the top cluster 85 % > 80 % at
    # epoch 3; distinct-2 and EAD halved from epoch 2 to 3
    run = [
        _epoch(0, 4.0, 30.0, 0.10, 0.06, 1.5, 0.2, gold=2.0),
        _epoch(1, 4.0, 25.0, 0.10, 0.06, 0.9, 0.3),
        _epoch(2, 4.1, 14.0, 0.08, 0.05, 1.2, 0.5),
        _epoch(3, 4.1, 13.0, 0.04, 0.02, 1.2, 0.85),
    ]
    assert sft.run_label(run) == ("collapse", 3)
    assert sft.replay_ruq(run, 10.0) == [2] and sft.replay_ruq(run, 11.0) == [] and sft.replay_ruq(run, None) == []
    assert sft.replay_dress(run, 0.5) == [1, 3]  # the gold carried from epoch 0, as the trainer's metrics keep it
    assert sft.replay_dress(run, 0.4) == [3]  # 0.9 is not below 0.4 x 2.0 = 0.8
    # the negatives' loss is read only in an epoch that trained negatives: -4.5 < -1 x the gold loss 4.0
    assert sft.dress_values(run[2], 2.0) == {
        "val/sem_ent": 1.2,
        "val/top_cluster_share": 0.5,
        "val/sem_ent_gold": 2.0,
        "train/loss_epoch": 4.0,
    }
    assert sft.replay_dress([{**run[2], "negative_loss": -4.5, "sem_ent_gold": 2.0}], 0.5) == [2]

    # score: the labelled run (alert first at epoch 2, label epoch 3: one epoch ahead) and a healthy run on
    # which RUQ drops 20 points at epoch 1: precision 1 of 2, recall 1 of 1
    healthy = [_epoch(0, 4.0, 40.0, 0.1, 0.06, 1.5, 0.2), _epoch(1, 3.9, 20.0, 0.1, 0.06, 1.5, 0.2)]
    runs = [
        {"name": "a", "label": "collapse", "label_epoch": 3, "epochs": run},
        {"name": "b", "label": "healthy", "label_epoch": None, "epochs": healthy},
    ]
    s = sft.score(runs, "RUQAlert", 10.0)
    assert (s["precision"]["hits"], s["precision"]["n"], s["recall"]["hits"], s["recall"]["n"]) == (1, 2, 1, 1)
    assert s["lead_epochs"] == [1] and s["f1"] == pytest.approx(2 * 0.5 * 1.0 / 1.5)
