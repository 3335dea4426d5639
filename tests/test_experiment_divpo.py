"""experiments/divpo.py --quick writes a complete results.json and page; parts run apart merge."""

from __future__ import annotations

import json
import math
import platform
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
from helpers import load_experiment

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("trl")


@pytest.mark.slow
def test_divpo_quick(tmp_path):
    out = tmp_path / "results" / "divpo"
    # in this process (helpers.load_experiment): the worker has torch and transformers imported already, and a
    # second interpreter's imports would be a third of this test's cost
    script = load_experiment("divpo")
    script.main(["--quick", "--out", str(out)])
    res = json.loads((out / "results.json").read_text())  # allow_nan=False wrote it: every number is finite
    assert res["experiment"] == "divpo" and res["quick"] is True and res["seeds"] == [0]
    settings = ["base", "dpo", "divpo_semantic", "divpo_likelihood"]
    assert [(r["setting"], r["seed"]) for r in res["runs"]] == [(s, 0) for s in settings]
    cfg = res["config"]
    g = cfg["num_generations"]
    for run in res["runs"]:
        held = run["held_out"]
        assert 0.0 <= held["group_sem_ent"] <= math.log(g) + 1e-9 and 1.0 <= held["group_clusters"] <= g
        assert 0.0 <= held["group_distinct_2"] <= 1.0 and 0.0 <= held["quality"] <= 1.0
        assert held["nll"] > 0 and held["words"] > 0 and held["group_ead"] > 0
        if run["setting"] != "base":
            assert run["pairs"]["pairs"] + run["pairs"]["skipped"] == cfg["prompts"]
            assert run["pairs"]["chosen_quality"] > run["pairs"]["rejected_quality"]
            assert len(run["examples"]["replies"]) == 3 and all(len(r) == g for r in run["examples"]["replies"])
    # the pools were built once per seed and written; every setting chose from them
    pools = [json.loads(line) for line in (out / "pools_seed0.jsonl").read_text().splitlines()]
    assert "settings" in pools[0] and len(pools) == 1 + cfg["prompts"]
    # the difference is paired by seed; with one seed it has no interval (None, not NaN)
    diff = res["summary"]["difference"]["divpo_semantic - dpo"]
    by = {r["setting"]: r["held_out"] for r in res["runs"]}
    assert diff["nll"]["n"] == 1 and diff["nll"]["low"] is None
    assert diff["words"]["mean"] == pytest.approx(by["divpo_semantic"]["words"] - by["dpo"]["words"])
    page = (out.parent / "divpo.md").read_text()
    assert "--quick: a smoke test" in page and "| divpo_likelihood |" in page and "(one seed: no interval)" in page
    # the versions it ran with, as the installed distributions and the checkout's commit say, on the page too
    env = res["environment"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert env["python"] == platform.python_version() and env["commit"] == head.stdout.strip()
    for name in ("torch", "transformers", "trl", "lightning", "numpy", "lightning-div"):
        assert env["packages"][name] == metadata.version(name)
    assert f"transformers {metadata.version('transformers')}, trl {metadata.version('trl')}" in page
    assert f"commit `{head.stdout.strip()[:10]}`" in page and "Bit-identical reruns need the versions" in page

    # parts run apart (a seed each) merge into one results.json, each setting and seed once
    other = json.loads((out / "results.json").read_text())
    for r in other["runs"]:
        r["seed"] = 1
        r["held_out"] = {**r["held_out"], "words": r["held_out"]["words"] + (1.0 if r["setting"] == "dpo" else 0.0)}
    del other["environment"]  # a part made before the record existed
    second = tmp_path / "part1" / "results.json"
    second.parent.mkdir()
    second.write_text(json.dumps(other))
    merged_out = tmp_path / "merged" / "divpo"
    merged_out.parent.mkdir()
    (merged_out.parent / "divpo.md").write_text("# old\n\n## Reading (by hand)\n\nKept.\n\n## Held out\n\nold\n")
    script.main(["--merge", str(out / "results.json"), str(second), "--out", str(merged_out)])
    merged = json.loads((merged_out / "results.json").read_text())
    # each part's environment once, in order; the one that recorded none says so on the page
    assert merged["environments"] == [env, None] and "environment" not in merged
    text = (merged_out.parent / "divpo.md").read_text()
    assert text.count("## Reading (by hand)\n\nKept.") == 1 and "\nold\n" not in text
    assert "- not recorded (runs made before the record existed" in text
    assert merged["seeds"] == [0, 1] and len(merged["runs"]) == 8
    words = merged["summary"]["difference"]["divpo_semantic - dpo"]["words"]
    assert words["n"] == 2 and words["low"] is not None
    assert words["mean"] == pytest.approx(by["divpo_semantic"]["words"] - by["dpo"]["words"] - 0.5)
