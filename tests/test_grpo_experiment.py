"""experiments/grpo_diversity.py --quick runs as a user runs it and writes a complete results.json and page."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import load_experiment

pytest.importorskip("trl")
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_grpo_diversity_quick(tmp_path):
    out = tmp_path / "results" / "grpo_diversity"
    cmd = [sys.executable, str(ROOT / "experiments" / "grpo_diversity.py"), "--quick", "--out", str(out)]
    subprocess.run(cmd, check=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=1200)
    res = json.loads((out / "results.json").read_text())  # allow_nan=False wrote it: every number is finite
    assert res["experiment"] == "grpo_diversity" and res["quick"] is True and res["seeds"] == [0]
    assert [(r["setting"], r["seed"]) for r in res["runs"]] == [("grpo", 0), ("grpo_semantic", 0)]
    g = res["config"]["num_generations"]
    for run in res["runs"]:
        assert [s["step"] for s in run["steps"]] == list(range(1, res["config"]["steps"] + 1))
        for row in [*run["steps"], run["held_out"]]:
            assert 0.0 <= row["group_sem_ent"] <= math.log(g) + 1e-9
            assert 1.0 <= row["group_clusters"] <= g and 0.0 <= row["collapsed_groups"] <= 1.0
            assert 0.0 <= row["task_reward"] <= 1.0
        assert len(run["examples"]["greedy"]) == 3 and len(run["examples"]["sampled"]) == 9
        assert run["wall_s"] > run["reward_s"] > 0
    # the difference is paired by seed; with one seed it has no interval (None, not NaN)
    diff = res["summary"]["difference"]
    assert diff["group_sem_ent"]["n"] == 1 and diff["group_sem_ent"]["low"] is None
    grpo, semantic = (res["runs"][0]["held_out"], res["runs"][1]["held_out"])
    assert diff["task_reward"]["mean"] == pytest.approx(semantic["task_reward"] - grpo["task_reward"])
    steps = res["runs"][0]["steps"]
    change = res["summary"]["settings"]["grpo"]["change"]["group_sem_ent"]
    assert change["mean"] == pytest.approx(steps[-1]["group_sem_ent"] - steps[0]["group_sem_ent"])
    page = (out.parent / "grpo_diversity.md").read_text()
    assert "--quick: a smoke test" in page and "| grpo_semantic |" in page and "(one seed: no interval)" in page

    # parts run apart (a seed each) merge into one results.json: each setting and seed once, a later part winning
    other = json.loads((out / "results.json").read_text())
    for r in other["runs"]:
        r["seed"] = 1
        r["held_out"] = {**r["held_out"], "task_reward": 0.5}
    second = tmp_path / "part1" / "results.json"
    second.parent.mkdir()
    second.write_text(json.dumps(other))
    merged_out = tmp_path / "merged" / "grpo_diversity"
    # in this process (helpers.load_experiment): a second interpreter's imports cost more than the merge
    script = load_experiment("grpo_diversity")
    script.main(["--merge", str(out / "results.json"), str(second), str(second), "--out", str(merged_out)])
    merged = json.loads((merged_out / "results.json").read_text())
    assert merged["seeds"] == [0, 1] and len(merged["runs"]) == 4
    assert [(r["setting"], r["seed"]) for r in merged["runs"]] == [
        ("grpo", 0),
        ("grpo_semantic", 0),
        ("grpo", 1),
        ("grpo_semantic", 1),
    ]
    assert merged["summary"]["difference"]["group_sem_ent"]["n"] == 2
    assert (merged_out.parent / "grpo_diversity.md").exists()
