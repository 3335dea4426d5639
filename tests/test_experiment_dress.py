"""experiments/dress_vs_baseline.py --quick: the JSON has every setting, seed and epoch, with finite numbers and statistics."""

import json
import math

import numpy as np
import pytest
from helpers import load_experiment

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
    "val_ruq_margin",
    "train_loss",
    "gold_batch_loss",
]


def load_script():
    return load_experiment("dress_vs_baseline")


def test_welch_interval_and_detectable_difference_match_a_hand_computation():
    script = load_script()
    runs = [
        {"setting": name, "seed": i, "epochs": [{"val_sem_ent": v}]}
        for name, values in (("baseline", [1.0, 1.2, 1.4]), ("dress_no_negatives", [1.5, 1.9, 2.3]))
        for i, v in enumerate(values)
    ]
    out = script.compare(runs)["dress_no_negatives"]["val_sem_ent"]
    # diff 0.7; variances 0.04 and 0.16 -> se = sqrt(0.04/3 + 0.16/3) = 0.2582; Welch df = 2.941
    se = math.sqrt(0.04 / 3 + 0.16 / 3)
    df = (0.04 / 3 + 0.16 / 3) ** 2 / ((0.04 / 3) ** 2 / 2 + (0.16 / 3) ** 2 / 2)
    assert out["diff"] == pytest.approx(0.7) and out["df"] == pytest.approx(df)
    from scipy import stats

    t = stats.t.ppf(0.975, df)
    assert out["ci95"] == pytest.approx([0.7 - t * se, 0.7 + t * se])
    assert out["mdd80"] == pytest.approx((t + stats.t.ppf(0.8, df)) * se)
    assert out["p"] == pytest.approx(stats.ttest_ind([1.5, 1.9, 2.3], [1.0, 1.2, 1.4], equal_var=False).pvalue)


def test_bootstrap_of_sem_ent_is_centred_on_the_point_value():
    script = load_script()
    ids = [0] * 50 + [1] * 30 + [2] * 20
    boot = script.bootstrap_sem_ent(ids, resamples=400)
    p = np.array([0.5, 0.3, 0.2])
    assert boot["point"] == pytest.approx(float(-(p * np.log(p)).sum()))
    assert boot["ci95"][0] < boot["point"] < boot["ci95"][1] and 0 < boot["std"] < 0.2


@pytest.mark.slow
def test_quick_run_writes_results_and_figures_and_reruns_identically(tmp_path, capsys):
    """One --quick run: its results, figures and tables, and that a run with a seed is the run of that seed.

    Same-seed reproducibility is shown by the run that exists: lambda_0 (DRESS's weights all 1, the
    callback off the training RNG) runs last, after the DRESS runs, and gives the baseline's numbers
    at every epoch exactly, so a run neither varies between two runs with one seed nor depends on
    what ran before it in the process. (A second ``--settings baseline`` run used to show the final
    loss and Sem-Ent again; the clusters' own same-seed refit is tests/test_clustering.py's.)
    --merge is checked on a part holding the baseline run again: kept once when it is the same run, and
    refused naming both files when it differs (the later part used to win without a word).
    """
    script = load_script()
    script.main(["--quick", "--out", str(tmp_path / "a"), "--threads", "1"])
    results = json.loads((tmp_path / "a" / "results.json").read_text())
    config = results["settings"]["config"]
    assert results["seeds"] == [0] and results["settings"]["quick"] is True
    assert config["model"] == {"base": "local:chitchat-gpt2"} and config["train_source"] == "chitchat:finetune"
    assert {r["setting"] for r in results["runs"]} == set(script.QUICK["settings"])
    for run in results["runs"]:
        assert [e["epoch"] for e in run["epochs"]] == list(range(config["epochs"]))
        for epoch in run["epochs"]:
            for key in FINITE_PER_EPOCH:
                assert math.isfinite(epoch[key]), (run["setting"], key)
            assert 0.0 <= epoch["head_share"] <= 1.0 and 0.0 <= epoch["val_ruq"] <= 100.0
            assert epoch["perplexity"] == pytest.approx(math.exp(epoch["val_loss"]))
        assert len(run["epochs"][-1]["cluster_ids"]) == config["num_contexts"]
        assert run["seconds"] > 0 and run["cpu_seconds"] > 0
    # DRESS with negatives trains on negative batches from epoch 0 on (mine_at="start")
    for name in ("dress_nll", "dress_unlikelihood"):
        run = next(r for r in results["runs"] if r["setting"] == name)
        assert all(e["negative_batches"] > 0 and math.isfinite(e["negative_batch_loss"]) for e in run["epochs"])
        assert all(e["dress_head_clusters"] >= 1 for e in run["epochs"])
    baseline = next(r for r in results["runs"] if r["setting"] == "baseline")
    assert all(e["negative_batches"] == 0 for e in baseline["epochs"])
    # lambda 0 makes every DRESS weight 1, and the callback never touches the training RNG: the baseline exactly
    lam0 = next(r for r in results["runs"] if r["setting"] == "lambda_0")
    for key in ("val_loss", "val_sem_ent", "val_distinct_2"):
        assert [e[key] for e in lam0["epochs"]] == [e[key] for e in baseline["epochs"]], key
    assert set(results["comparison"]) == set(script.QUICK["settings"]) - {"baseline"}
    assert set(results["bootstrap_sem_ent"]) == {f"{r['setting']}/0" for r in results["runs"]}
    for name in results["figures"]:
        assert (tmp_path / "a" / name).stat().st_size > 1000
    # --merge puts the parts together, each run once: part b holds the baseline run (seed 0) again, the
    # same run, so it is kept once; part c holds it changed, so the merge is refused naming both files
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "results.json").write_text(json.dumps({**results, "runs": [baseline]}))
    merged = script.main(["--merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "m")])
    assert len(merged["runs"]) == len(results["runs"])
    again = json.loads(json.dumps(baseline))
    again["epochs"][-1]["val_loss"] += 1.0
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "results.json").write_text(json.dumps({**results, "runs": [again]}))
    with pytest.raises(SystemExit, match=r"^2$"):
        script.main(["--merge", str(tmp_path / "a"), str(tmp_path / "c"), "--out", str(tmp_path / "m2")])
    err = capsys.readouterr().err
    assert "different runs of baseline seed 0" in err and str(tmp_path / "c" / "results.json") in err
    assert not (tmp_path / "m2" / "results.json").exists()
    # nor may it write over a part it reads
    with pytest.raises(SystemExit, match=r"^2$"):
        script.main(["--merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "a")])
    assert "would rewrite a part it reads" in capsys.readouterr().err
    # the page's tables: one row per setting with its seeds, the differences to the baseline, each run's time
    table = script.markdown(merged)
    assert "| baseline (n=1) |" in table and "| dress_nll (n=1) |" in table
    baseline_loss = merged["summary"]["baseline"]["val_loss"]["mean"][-1]
    assert baseline_loss == pytest.approx(baseline["epochs"][-1]["val_loss"])
    assert f"{baseline_loss:.3f} ± 0.000" in table
    assert "| baseline seed 0 |" in table and "| setting − baseline |" in table
