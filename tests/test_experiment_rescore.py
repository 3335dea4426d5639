"""experiments/rescore.py: saved held-out replies scored by the validated judge, by hand and on the --quick fixture."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import load_experiment

ROOT = Path(__file__).resolve().parents[1]


def by_name(texts):
    """A judge whose cluster id is written in the text: ``"c3 ..."`` is in cluster 3."""
    return [int(t.split()[0][1:]) for t in texts]


def save(tmp_path, replies_module, experiment, setting, seed, groups, cut=None):
    prompts = [f"prompt {i}" for i in range(len(groups))]
    texts = [t for group in groups for t in group]
    return replies_module.save_replies(tmp_path, experiment, setting, seed, 2, prompts, texts, len(groups[0]), cut)


def test_group_sem_ent_and_the_paired_difference_by_hand(tmp_path):
    script = load_experiment("rescore")
    replies = load_experiment("_replies")
    # grpo seed 0: a group split 2 + 2 (ln 2) and a collapsed one (0); seed 1: four clusters (ln 4) and 3 + 1
    save(tmp_path, replies, "grpo_diversity", "grpo", 0, [["c0 a", "c0 b", "c1 a", "c1 b"], ["c2 x"] * 4])
    save(
        tmp_path,
        replies,
        "grpo_diversity",
        "grpo",
        1,
        [["c0 a", "c1 a", "c2 a", "c3 a"], ["c0 y", "c0 y", "c0 y", "c1 z"]],
    )
    # grpo_kl: every group spread over four clusters (ln 4), a quarter of its replies cut on seed 0
    spread = [["c0 a b", "c1 a b", "c2 a c", "c3 d e"]] * 2
    save(tmp_path, replies, "grpo_diversity", "grpo_kl", 0, spread, cut=[True, False, False, False] * 2)
    save(tmp_path, replies, "grpo_diversity", "grpo_kl", 1, spread, cut=[False] * 8)
    records = script.gather([tmp_path])  # a folder holding replies/
    out = script.rescore(records, by_name, say=lambda _: None)["grpo_diversity"]
    runs = {(r["setting"], r["seed"]): r for r in out["runs"]}
    ln2, ln4 = math.log(2), math.log(4)
    three_one = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert runs[("grpo", 0)]["group_sem_ent"] == pytest.approx(ln2 / 2)
    assert runs[("grpo", 0)]["group_clusters"] == pytest.approx(1.5)
    assert runs[("grpo", 1)]["group_sem_ent"] == pytest.approx((ln4 + three_one) / 2)
    assert runs[("grpo", 1)]["group_clusters"] == pytest.approx(3.0)
    assert runs[("grpo_kl", 0)]["group_sem_ent"] == pytest.approx(ln4)
    # within-group distinct-2 (no judge): 4 of 4 bigrams, and 1 of 4 in the collapsed group; "c0 y" x3 + "c1 z": 2 of 4
    assert runs[("grpo", 0)]["distinct_2"] == pytest.approx((1.0 + 0.25) / 2)
    assert runs[("grpo", 1)]["distinct_2"] == pytest.approx((1.0 + 0.5) / 2)
    assert runs[("grpo_kl", 0)]["cut_share"] == pytest.approx(0.25) and runs[("grpo_kl", 1)]["cut_share"] == 0.0
    # the page's difference, paired by seed: grpo_kl - grpo = ln 4 - ln2/2 (seed 0) and ln 4 - (ln4 + 3:1)/2 (seed 1)
    diffs = [ln4 - ln2 / 2, ln4 - (ln4 + three_one) / 2]
    diff = out["summary"]["differences"]["grpo_kl - grpo"]["group_sem_ent"]
    assert diff["mean"] == pytest.approx(sum(diffs) / 2) and diff["test"]["n"] == 2
    assert diff["test"]["sd"] == pytest.approx(abs(diffs[0] - diffs[1]) / math.sqrt(2))
    assert out["summary"]["settings"]["grpo"]["group_sem_ent"]["mean"] == pytest.approx(
        (ln2 / 2 + (ln4 + three_one) / 2) / 2
    )
    assert list(out["summary"]["differences"]) == ["grpo_kl - grpo"]  # grpo_semantic_kl - grpo_kl: not given


def test_the_pages_comparisons():
    script = load_experiment("rescore")
    settings = ["base", "grpo", "grpo_semantic", "grpo_kl", "grpo_semantic_kl", "grpo_lexical_j0.02"]
    assert script.comparisons("grpo_diversity", settings) == [
        ("grpo_semantic", "grpo"),
        ("grpo_kl", "grpo"),
        ("grpo_semantic_kl", "grpo"),
        ("grpo_lexical_j0.02", "grpo"),
        ("grpo_semantic_kl", "grpo_kl"),
    ]
    assert script.comparisons("divpo", ["base", "dpo", "divpo_semantic", "divpo_likelihood"]) == [
        ("divpo_semantic", "dpo"),
        ("divpo_likelihood", "dpo"),
        ("dpo", "base"),
    ]


def test_damaged_replies_duplicates_and_a_failed_check_are_named(tmp_path):
    script = load_experiment("rescore")
    replies = load_experiment("_replies")
    from _merge import MergeError

    with pytest.raises(ValueError, match=r"grpo seed 0: 3 replies \(cut flags: None\) for 1 prompts x G = 4"):
        replies.save_replies(tmp_path, "grpo_diversity", "grpo", 0, 2, ["p"], ["a", "b", "c"], 4)
    path = save(tmp_path, replies, "divpo", "dpo", 0, [["c0 a", "c1 b"]])
    record = json.loads(path.read_text())
    assert record == {
        "experiment": "divpo",
        "setting": "dpo",
        "seed": 0,
        "step": 2,
        "num_generations": 2,
        "groups": [{"prompt": "prompt 0", "replies": ["c0 a", "c1 b"]}],
    }
    record["groups"][0]["replies"] = ["only one"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(record))
    with pytest.raises(MergeError, match=r"bad\.json: groups\[0\]: 'replies' must be 2 strings"):
        script.gather([bad])
    assert [f for f, _ in script.gather([path, tmp_path / "replies"])] == [path]  # the same file twice: once
    other = tmp_path / "other" / "dpo_seed0.json"
    other.parent.mkdir()
    other.write_text(json.dumps({**record, "groups": [{"prompt": "prompt 0", "replies": ["c0 a", "c0 a"]}]}))
    with pytest.raises(MergeError, match=r"and .*other/dpo_seed0\.json are both divpo dpo seed 0, with other replies"):
        script.gather([path, other])
    with pytest.raises(MergeError, match=r"nowhere: no such file or folder"):
        script.gather([tmp_path / "nowhere"])
    # --check: the stored run measured other replies (its distinct-2 differs) -> refused, naming both files
    rescored = script.rescore(script.gather([path]), by_name, say=lambda _: None)
    stored = tmp_path / "results.json"
    run = {"setting": "dpo", "seed": 0, "held_out": {"group_distinct_2": 1.0}}
    stored.write_text(json.dumps({"experiment": "divpo", "runs": [run]}))
    script.check(rescored, [stored])  # the same distinct-2: passes
    run["held_out"]["group_distinct_2"] = 0.5
    stored.write_text(json.dumps({"experiment": "divpo", "runs": [run]}))
    with pytest.raises(MergeError, match=r"distinct-2 1\.000000, but .*results\.json stored 0\.500000 for dpo seed 0"):
        script.check(rescored, [stored])


def test_a_damaged_file_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "grpo_seed0.json"
    bad.write_text('{"experiment": "grpo_diversity", "setting": "grpo"')
    done = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "rescore.py"), str(bad), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"rescore.py: error: {bad}: not valid JSON (line 1, column 51: Expecting ',' delimiter); a torn part?"
    ]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_quick_rescores_the_fixture_with_the_validity_pages_judge(tmp_path):
    script = load_experiment("rescore")
    validity = load_experiment("sement_validity")
    res = script.main(["--quick", "--quiet", "--out", str(tmp_path)])
    assert json.loads((tmp_path / "results.json").read_text()) == json.loads(json.dumps(res))
    assert res["judge"]["pooling"] == "mean" and res["judge"]["num_clusters"] == 3 and res["quick"] is True
    fixture = ROOT / "tests" / "data" / "rescore"
    for experiment, settings in (
        ("grpo_diversity", ["base", "grpo", "grpo_semantic"]),
        ("divpo", ["base", "divpo_likelihood", "divpo_semantic", "dpo"]),
    ):
        runs = res["rescored"][experiment]["runs"]
        assert [(r["setting"], r["seed"]) for r in runs] == [(s, 0) for s in settings]
        for run in runs:
            record = json.loads((fixture / experiment / f"{run['setting']}_seed0.json").read_text())
            g = record["num_generations"]
            assert 0.0 <= run["group_sem_ent"] <= math.log(min(3, g)) + 1e-9 and 1.0 <= run["group_clusters"] <= 3
    # the judge is the validity page's base_mean space: the same ids as sement_validity.label_all gives
    judge = script.Judge(quick=True)
    texts = [
        r
        for f in sorted((fixture / "divpo").glob("*.json"))
        for g in json.loads(f.read_text())["groups"]
        for r in g["replies"]
    ]
    labels = validity.label_all({"ks": [3]}, {"base_mean": judge.encoder}, judge.references, texts)["base_mean/k3"]
    assert judge.assign(texts) == [labels[t] for t in texts]
    _, references = validity.contexts_and_references(validity.QUICK)
    assert judge.references == references and len(references) == 40
