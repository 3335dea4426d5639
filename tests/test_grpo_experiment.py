"""experiments/grpo_diversity.py --quick runs as a user runs it and writes a complete results.json, figure and page."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import load_experiment

pytest.importorskip("trl")
ROOT = Path(__file__).resolve().parents[1]
# every code path of the six settings: the KL term and the semantic product (grpo_semantic_kl), the lexical
# product and TRL's entropy bonus, beside the baseline the differences are taken against
QUICK_SETTINGS = ["grpo", "grpo_semantic_kl", "grpo_lexical", "grpo_entropy"]


def test_darling_product_and_lexical_classes_by_hand():
    script = load_experiment("grpo_diversity")
    # a group of 4: qualities 0.5, 1, 1, 0 (min 0) and diversities 1, 0 (a collapsed pair), 0, 1 -> floor 0.1
    assert script.darling_product([0.5, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0], 4, 0.1) == pytest.approx(
        [0.5, 0.1, 0.1, 0.0]
    )
    # negative qualities: shifted by the group minimum (-3), so the rarer completion still earns more
    assert script.darling_product([-1.0, -1.0, -3.0], [1.0, 0.5, 0.5], 3, 0.1) == pytest.approx([2.0, 1.0, 0.0])
    # bigram Jaccard: "a b c" ~ "a b c d" (2 of 3 bigrams), "x y" alone; the empty reply equals the empty one
    assert script.lexical_labels(["a b c", "a b c d", "x y", ""], 4, 0.5) == [0, 0, 1, 2]
    assert script.lexical_labels(["", "", "a", "a"], 2, 0.5) == [0, 0, 0, 0]
    assert script.top_word_share(["you you", "your you", "a b", "c d"], 2) == pytest.approx((3 / 4 + 1 / 4) / 2)
    # the matched lexical threshold: nearest the semantic rarity, the higher threshold on a tie
    assert script.nearest_threshold({0.05: 0.7, 0.1: 0.9, 0.5: 1.0}, 0.75) == 0.05
    assert script.nearest_threshold({0.05: 0.7, 0.1: 0.9, 0.5: 1.0}, 0.85) == 0.1
    assert script.nearest_threshold({0.1: 0.5, 0.2: 1.0}, 0.75) == 0.2  # an exact tie (in binary too)
    assert script.mean_rarity([0, 0, 1, 2], 4) == pytest.approx((2 / 3 + 2 / 3 + 1 + 1) / 4)
    assert script._threshold("matched") == "matched" and script._threshold("0.2") == 0.2
    for bad in ("0", "1.5", "nan", "loose"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected 'matched' or a number"):
            script._threshold(bad)


@pytest.mark.slow
def test_grpo_diversity_quick(tmp_path):
    out = tmp_path / "results" / "grpo_diversity"
    cmd = [sys.executable, str(ROOT / "experiments" / "grpo_diversity.py"), "--quick", "--out", str(out)]
    cmd += ["--settings", *QUICK_SETTINGS, "--save-replies"]
    subprocess.run(cmd, check=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=1200)
    res = json.loads((out / "results.json").read_text())  # allow_nan=False wrote it: every number is finite
    assert res["experiment"] == "grpo_diversity" and res["quick"] is True and res["seeds"] == [0]
    assert [(r["setting"], r["seed"]) for r in res["runs"]] == [(s, 0) for s in QUICK_SETTINGS]
    g = res["config"]["num_generations"]
    for run in res["runs"]:
        assert [s["step"] for s in run["steps"]] == list(range(1, res["config"]["steps"] + 1))
        for row in [*run["steps"], run["held_out"]]:
            for space in ("group_sem_ent", "judge_group_sem_ent"):
                assert 0.0 <= row[space] <= math.log(g) + 1e-9
            assert 1.0 <= row["group_clusters"] <= g and 1.0 <= row["judge_group_clusters"] <= g
            assert 0.0 <= row["task_reward"] <= 1.0 and 0.0 <= row["cut_share"] <= 1.0
            assert 0.0 < row["top_word_share"] <= 1.0 and row["nll"] > 0 and row["length_words"] > 0
        assert len(run["examples"]["greedy"]) == 3 and len(run["examples"]["sampled"]) == 9
        assert run["wall_s"] > run["reward_s"] > 0 and run["step_s"] > 0
        # the lexical reward records how much it saw alike, a mean rarity per reward call (one per step here)
        if run["setting"] == "grpo_lexical":
            assert run["lexical_threshold"] == 0.5 and len(run["lexical_rarity"]) == res["config"]["steps"]
            assert all(0.0 <= r <= 1.0 for r in run["lexical_rarity"])
        else:
            assert "lexical_rarity" not in run
    # TRL's knobs reached the runs: a KL term only in the _kl setting, an entropy bonus only in grpo_entropy
    assert all(s["kl"] > 0 for s in res["runs"][1]["steps"]) and all(s["kl"] == 0 for s in res["runs"][0]["steps"])
    # each setting is compared with grpo, paired by seed; with one seed there is no interval (None, not NaN)
    diff = res["summary"]["difference"]
    assert sorted(diff) == sorted(QUICK_SETTINGS[1:])
    assert diff["grpo_lexical"]["judge_group_sem_ent"]["n"] == 1 and diff["grpo_lexical"]["nll"]["low"] is None
    grpo, entropy = res["runs"][0]["held_out"], res["runs"][3]["held_out"]
    assert diff["grpo_entropy"]["task_reward"]["mean"] == pytest.approx(entropy["task_reward"] - grpo["task_reward"])
    steps = res["runs"][0]["steps"]  # 2 steps: the first and last "ten" are one step each
    change = res["summary"]["settings"]["grpo"]["change"]["judge_group_sem_ent"]
    assert change["mean"] == pytest.approx(steps[-1]["judge_group_sem_ent"] - steps[0]["judge_group_sem_ent"])
    # --save-replies kept the replies each held-out measure read: their distinct-2 and cut share are the run's
    from lightning_div.metrics.group import group_distinct_n

    for setting, seed, held in [
        *((r["setting"], 0, r["held_out"]) for r in res["runs"]),
        ("base", 0, res["base"]["0"]),
    ]:
        kept = json.loads((out / "replies" / f"{setting}_seed{seed}.json").read_text())
        texts = [t for group in kept["groups"] for t in group["replies"]]
        cut = [c for group in kept["groups"] for c in group["cut"]]
        assert kept["step"] == (0 if setting == "base" else res["config"]["steps"]) and kept["num_generations"] == g
        assert len(kept["groups"]) == res["config"]["eval_prompts"] and held["cut_share"] == sum(cut) / len(cut)
        assert group_distinct_n(texts, g, 2) == held["distinct_2"]
    page = (out.parent / "grpo_diversity.md").read_text()
    assert "--quick: a smoke test" in page and "| grpo_semantic_kl |" in page and "curves.png" in page
    assert (out / "curves.png").stat().st_size > 1000

    # parts run apart (a seed each) merge into one results.json: each setting and seed once, a later part winning;
    # the page's hand-written reading survives the merge, and pilot parts get a table of their own
    other = json.loads((out / "results.json").read_text())
    for r in other["runs"]:
        r["seed"] = 1
        r["held_out"] = {**r["held_out"], "task_reward": 0.5}
    second = tmp_path / "part1" / "results.json"
    second.parent.mkdir()
    second.write_text(json.dumps(other))
    merged_out = tmp_path / "merged" / "grpo_diversity"
    merged_out.parent.mkdir()
    (merged_out.parent / "grpo_diversity.md").write_text(
        "# old\n\n## Reading\n\nBy hand, kept.\n\n## Held out\n\nold\n"
    )
    # in this process (helpers.load_experiment): a second interpreter's imports cost more than the merge
    script = load_experiment("grpo_diversity")
    parts = [str(out / "results.json"), str(second), str(second)]
    script.main(["--merge", *parts, "--pilot", str(out / "results.json"), "--out", str(merged_out)])
    merged = json.loads((merged_out / "results.json").read_text())
    assert merged["seeds"] == [0, 1] and len(merged["runs"]) == 8
    assert [(r["setting"], r["seed"]) for r in merged["runs"]] == [(s, k) for k in (0, 1) for s in QUICK_SETTINGS]
    assert merged["summary"]["difference"]["grpo_lexical"]["task_reward"]["n"] == 2
    # the untrained base model first (measured on the same prompts and sampling seed), then each pilot run
    assert [p["setting"] for p in merged["pilot"]] == ["base model, untrained", *QUICK_SETTINGS]
    assert merged["pilot"][0]["held_out"] == res["base"]["0"] and merged["pilot"][0]["ends"] is None
    text = (merged_out.parent / "grpo_diversity.md").read_text()
    assert "## Reading\n\nBy hand, kept." in text and "old\n" not in text.split("## Reading")[0]
    assert "## Pilot" in text and text.count("## Reading") == 1
    # the parts' one environment (every part and the pilot ran in this one), on the page with its commit
    assert merged["environments"] == [res["environment"]] and res["environment"]["packages"]["trl"] is not None
    assert f"commit `{res['environment']['commit'][:10]}`" in text and "Bit-identical reruns need" in text

    # before any full run: the pilot alone makes the page, with the fixed settings and no run tables
    alone = tmp_path / "alone" / "grpo_diversity"
    script.main(["--merge", "--pilot", str(out / "results.json"), "--out", str(alone)])
    text = (alone.parent / "grpo_diversity.md").read_text()
    assert "No full run yet" in text and "## Pilot" in text and "## Held out" not in text
    assert json.loads((alone / "results.json").read_text())["config"] == script.FULL


def test_the_semantic_reward_under_kl_is_paired_with_grpo_kl():
    """grpo_semantic_kl is compared with its own baseline (grpo_kl), seed by seed, beside the differences with grpo."""
    script = load_experiment("grpo_diversity")

    def run(setting: str, seed: int, value: float) -> dict:
        held = dict.fromkeys(script.MEASURES, value)
        steps = [{"step": i + 1, **held} for i in range(2)]
        return {
            "setting": setting,
            "seed": seed,
            "held_out": held,
            "steps": steps,
            "wall_s": 10.0,
            "reward_s": 1.0,
            "monitor_s": 0.5,
            "step_s": 8.0,
        }

    runs = [
        run("grpo", 0, 0.1),
        run("grpo_kl", 0, 1.0),
        run("grpo_semantic_kl", 0, 1.5),
        run("grpo", 1, 0.2),
        run("grpo_kl", 1, 2.0),
        run("grpo_semantic_kl", 1, 2.1),
    ]
    summary = script.summarise(runs, ["grpo", "grpo_kl", "grpo_semantic_kl"], {})
    d = summary["difference_kl"]["grpo_semantic_kl"]["judge_group_sem_ent"]
    assert d["n"] == 2 and d["mean"] == pytest.approx((0.5 + 0.1) / 2)
    assert summary["difference"]["grpo_semantic_kl"]["nll"]["mean"] == pytest.approx((1.4 + 1.9) / 2)
    assert summary["settings"]["grpo"]["reward_share"]["mean"] == pytest.approx(12.5)
    page = "\n".join(script.run_sections({"summary": summary, "runs": runs, "seeds": [0, 1], "base": {}}))
    assert "## grpo_semantic_kl minus grpo_kl" in page
    # the primary family: grpo_kl - grpo, grpo_semantic_kl - grpo and - grpo_kl, 3 measures each = 9 tests,
    # Holm over 9; grpo_semantic_kl - grpo_kl judge Sem-Ent: differences 0.5, 0.1 -> mean 0.3, sd 0.2 sqrt 2
    assert "## Primary comparisons" in page and ": 9 tests." in page
    row = "| grpo_semantic_kl - grpo_kl | judge_group_sem_ent | 2 | 0.300 [-2.241, 2.841] | 0.283 |"
    assert row in page


def test_power_holm_and_paired_differences_by_hand():
    """The pages' power and multiple-comparison figures (experiments/_stats.py), checked another way."""
    import numpy as np
    from scipy import stats

    st = load_experiment("_stats")
    # the detectable difference is where a paired t-test's power is 0.8: simulated, 40,000 sets of 5 pairs
    delta = st.detectable_difference(1.0, 5)
    rng = np.random.default_rng(0)
    x = rng.normal(delta, 1.0, size=(40_000, 5))
    t = x.mean(axis=1) / (x.std(axis=1, ddof=1) / np.sqrt(5))
    assert np.mean(np.abs(t) > stats.t.ppf(0.975, 4)) == pytest.approx(0.80, abs=0.01)
    # a little above the normal-theory (t_0.975 + t_0.8) / sqrt(5) = 1.662, which ignores the t's noncentrality
    assert 1.662 < delta < 1.70
    assert st.detectable_difference(0.4, 5) == pytest.approx(0.4 * delta)  # in units of the paired sd
    assert st.detectable_difference(0.0, 5) == 0.0 and st.detectable_difference(1.0, 1) == 0.0
    # Holm by hand: sorted 0.01 x 4, 0.03 x 3, 0.04 x 2 (raised to the running 0.09), 0.5 x 1
    assert st.holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert st.holm([0.3, 0.6]) == pytest.approx([0.6, 0.6])
    r = st.paired([1.0, 2.0, 3.0, 4.0, 5.5])
    assert r["mean"] == pytest.approx(3.1) and r["n"] == 5
    assert r["p"] == pytest.approx(stats.ttest_1samp([1.0, 2.0, 3.0, 4.0, 5.5], 0.0).pvalue)
    # the same difference on every seed: no spread to test, p 0 (or 1 when it is 0), nothing left to detect
    assert st.paired([0.2, 0.2, 0.2])["p"] == 0.0 and st.paired([0.0, 0.0])["p"] == 1.0


def test_a_matched_lexical_threshold_merges_beside_the_fixed_runs(tmp_path):
    """A grpo_lexical part at another threshold merges as grpo_lexical_j<t>, paired with grpo, calibration kept."""
    script = load_experiment("grpo_diversity")

    def run(setting: str, seed: int, value: float, **extra: object) -> dict:
        held = dict.fromkeys(script.MEASURES, value)
        steps = [{"step": i + 1, **held} for i in range(2)]
        examples = {"prompts": ["hi"], "greedy": ["a b"], "sampled": ["a b"]}
        timing = {"wall_s": 10.0, "reward_s": 1.0, "monitor_s": 0.5, "step_s": 8.0}
        return {
            "setting": setting,
            "seed": seed,
            "held_out": held,
            "steps": steps,
            "examples": examples,
            **timing,
            **extra,
        }

    def part(name: str, threshold: float, runs: list[dict], calibration: dict | None = None) -> str:
        body = {
            "experiment": "grpo_diversity",
            "quick": False,
            "config": {**script.FULL, "lexical_threshold": threshold},
        }
        body |= {"seeds": [0, 1], "machine": "test", "base": {}, "runs": runs}
        if calibration:
            body["lexical_calibration"] = calibration
        path = tmp_path / name
        path.write_text(json.dumps(body))
        return str(path)

    calibration = {
        "prompts": 32,
        "num_generations": 8,
        "seed": 2000,
        "semantic_rarity": 0.6,
        "lexical_rarity": {"0.05": 0.9, "0.5": 1.0},
        "chosen": 0.05,
    }
    fixed = part("fixed.json", 0.5, [run(s, k, 1.0 + k) for k in (0, 1) for s in ("grpo", "grpo_lexical")])
    matched_runs = [
        run("grpo_lexical", k, 2.0 + 2 * k, lexical_threshold=0.05, lexical_rarity=[1.0, 0.8]) for k in (0, 1)
    ]
    matched = part("matched.json", 0.05, matched_runs, calibration)
    out = tmp_path / "merged" / "grpo_diversity"
    result = script.merge([Path(matched), Path(fixed)], out)
    # the fixed settings head the page (the part at the fixed threshold), and both lexical settings keep their runs
    assert result["config"]["lexical_threshold"] == 0.5 and result["lexical_calibration"] == calibration
    assert list(result["summary"]["settings"]) == ["grpo", "grpo_lexical", "grpo_lexical_j0.05"]
    diff = result["summary"]["difference"]["grpo_lexical_j0.05"]["judge_group_sem_ent"]
    assert diff["n"] == 2 and diff["mean"] == pytest.approx(((2.0 - 1.0) + (4.0 - 2.0)) / 2)
    text = (out.parent / "grpo_diversity.md").read_text()
    assert "chosen: the nearest threshold, **0.05**" in text and "- grpo_lexical_j0.05 seed 1: 1.000 -> 0.800" in text
    # a part that differs in anything else, or a calibration that disagrees, is refused
    other = part("other.json", 0.5, [run("grpo", 2, 1.0)])
    body = json.loads(Path(other).read_text())
    body["config"]["steps"] = 7
    Path(other).write_text(json.dumps(body))
    with pytest.raises(ValueError, match="made with other settings"):
        script.merge([Path(fixed), Path(other)], out)
    second = part("second.json", 0.05, matched_runs, {**calibration, "semantic_rarity": 0.7})
    with pytest.raises(ValueError, match="disagree on the lexical calibration"):
        script.merge([Path(matched), Path(second)], out)


# -- --merge: no run dropped, no input overwritten, a damaged part named (issue 64 H2, M7) ---------------


def _grpo_run(script, setting: str, seed: int, value: float) -> dict:
    held = dict.fromkeys(script.MEASURES, value)
    return {
        "setting": setting,
        "seed": seed,
        "held_out": held,
        "steps": [{"step": i + 1, **held} for i in range(2)],
        "examples": {"prompts": ["hi"], "greedy": ["a b"], "sampled": ["a b"]},
        **{"wall_s": 10.0, "reward_s": 1.0, "monitor_s": 0.5, "step_s": 8.0},
    }


def _grpo_part(script, path: Path, runs: list, base: dict | None = None, experiment: str = "grpo_diversity") -> str:
    body = {"experiment": experiment, "quick": False, "config": dict(script.FULL), "machine": "test"}
    body |= {"seeds": sorted({r["seed"] for r in runs}), "base": base or {}, "runs": runs}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body), encoding="utf-8")
    return str(path)


def _merge_refused(script, argv: list, capsys) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit, match=r"^2$"):
        script.main(argv)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("grpo_diversity.py --merge: error: "), err
    return err


def test_merge_keeps_every_run_and_base_or_refuses_naming_both_parts(tmp_path, capsys):
    """H2: a setting and seed in two parts is one run when they hold the same run, else refused naming both files;
    parts that disagree on a seed's base measurements likewise (a later part won, without a word)."""
    script = load_experiment("grpo_diversity")
    base = {"1": dict.fromkeys(script.MEASURES, 0.2)}
    mine = _grpo_part(script, tmp_path / "mine" / "results.json", [_grpo_run(script, "grpo", 1, 0.3)], base)
    other = _grpo_part(script, tmp_path / "other" / "results.json", [_grpo_run(script, "grpo", 1, 123.0)], base)
    out = tmp_path / "merged" / "grpo_diversity"
    err = _merge_refused(script, ["--merge", mine, other, "--out", str(out)], capsys)
    assert re.search(r"mine/results\.json and .*other/results\.json hold different runs of grpo seed 1", err), err
    moved = {"1": dict.fromkeys(script.MEASURES, 0.25)}
    kl = _grpo_part(script, tmp_path / "kl" / "results.json", [_grpo_run(script, "grpo_kl", 1, 0.4)], moved)
    err = _merge_refused(script, ["--merge", mine, kl, "--out", str(out)], capsys)
    assert re.search(r"mine/results\.json and .*kl/results\.json disagree on the base model's held-out", err), err
    assert "seed 1" in err and not out.exists()
    # the same part twice and a part sharing the seed's identical base: every run kept, once
    kl = _grpo_part(script, tmp_path / "kl" / "results.json", [_grpo_run(script, "grpo_kl", 1, 0.4)], base)
    result = script.merge([Path(mine), Path(mine), Path(kl)], out)
    assert [(r["setting"], r["seed"]) for r in result["runs"]] == [("grpo", 1), ("grpo_kl", 1)]
    assert result["base"] == base and result["summary"]["difference"]["grpo_kl"]["nll"]["mean"] == pytest.approx(0.1)


def test_merge_never_writes_over_its_own_input_or_pilot(tmp_path, capsys):
    """H2: an ``--out`` whose results.json is a part or a pilot part is refused, the file untouched (rewritten)."""
    script = load_experiment("grpo_diversity")
    mine = _grpo_part(script, tmp_path / "mine" / "results.json", [_grpo_run(script, "grpo", 1, 0.3)])
    other = _grpo_part(script, tmp_path / "other" / "results.json", [_grpo_run(script, "grpo", 2, 0.5)])
    before = Path(mine).read_bytes()
    for argv in (["--merge", mine, other], ["--merge", other, "--pilot", mine]):
        err = _merge_refused(script, [*argv, "--out", str(tmp_path / "mine")], capsys)
        assert re.search(r"--out .*mine would write .*mine/results\.json, which is the input", err), err
    assert Path(mine).read_bytes() == before and not (tmp_path / "mine.md").exists()


@pytest.mark.parametrize(
    ("kind", "match"),
    [
        ("divpo", r"part\.json: a part of the experiment 'divpo', not of 'grpo_diversity'"),
        ("torn", r"part\.json: not valid JSON"),
        ("list", r"part\.json: a results\.json holds one JSON object, this holds a list"),
        ("steps", r"part\.json: runs\[0\] \(grpo seed 1\): 'steps' must be a list, got None"),
        ("base", r"part\.json: 'base' must be an object of the base model's measures per seed, got a list"),
    ],
)
def test_a_damaged_part_is_one_line_naming_the_file(tmp_path, capsys, kind, match):
    """M7: a foreign or damaged part (or pilot part) is one line naming the file, exit 2 (tracebacks before)."""
    script = load_experiment("grpo_diversity")
    good = _grpo_part(script, tmp_path / "good.json", [_grpo_run(script, "grpo", 0, 0.5)])
    part = tmp_path / "part.json"
    if kind == "divpo":
        _grpo_part(script, part, [_grpo_run(script, "grpo", 1, 0.5)], experiment="divpo")
    elif kind == "torn":
        part.write_text(Path(good).read_text()[:50], encoding="utf-8")
    elif kind == "list":
        part.write_text("[]", encoding="utf-8")
    elif kind == "steps":
        _grpo_part(script, part, [{**_grpo_run(script, "grpo", 1, 0.5), "steps": None}])
    else:
        body = json.loads(_grpo_part(script, part, [_grpo_run(script, "grpo", 1, 0.5)]) and part.read_text())
        part.write_text(json.dumps({**body, "base": [0.2]}), encoding="utf-8")
    for argv in (["--merge", good, str(part)], ["--merge", good, "--pilot", str(part)]):
        err = _merge_refused(script, [*argv, "--out", str(tmp_path / "out")], capsys)
        assert re.search(match, err), err
    assert not (tmp_path / "out").exists()
