"""experiments/dectest_temperature.py --quick runs as a user runs it and writes a complete, finite results.json."""

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from helpers import assert_finite_numbers

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_dectest_temperature_quick(tmp_path):
    """One --quick run as a user runs it, with seed 0 twice: its results, figures, and that a seed is its run.

    Same-seed reproducibility is shown by the two runs of the one command (``--seeds 0 0``): the second
    samples, clusters and scores every set again after the first, and gives every set's scores, ρ and
    OCA exactly (it used to be a second whole run in this process, whose own imports, model, encoder and
    data loading cost more than the check).
    """
    out = tmp_path / "dec"
    cmd = [sys.executable, str(ROOT / "experiments" / "dectest_temperature.py"), "--quick", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([*cmd, "--seeds", "0", "0"], check=True, cwd=tmp_path, env=env, timeout=600)
    res = json.loads((out / "results.json").read_text())
    assert_finite_numbers(res)
    # the shared writer records the versions it ran with (experiments/_environment.py)
    packages = res["environment"]["packages"]
    assert packages["torch"] == metadata.version("torch")
    assert packages["lightning-div"] == metadata.version("lightning-div")
    assert res["experiment"] == "dectest_temperature" and res["quick"] is True and res["settings"]["seeds"] == [0, 0]
    settings, metrics = res["settings"], res["metrics"]
    assert settings["temperatures"] >= 8 and {
        "distinct_1",
        "avg_distinct",
        "ent_2",
        "ead",
        "sem_ent",
        "sent_bert",
    } <= set(metrics)
    assert res["regime"] == "quick" and settings["model"] == {"base": "local:chitchat-gpt2"}
    assert settings["sweeps"] == ["temperature", "top_p"]
    run, again = res["runs"]
    for swept, (low, high) in (("temperature", (0.2, 1.2)), ("top_p", (0.1, 1.0))):
        sweep = run["sweeps"][swept]
        values = sweep["values"]
        assert len(values) == settings["temperatures"] and values[0] == low and values[-1] == high
        assert sweep["n_sets"] == settings["sets"]
        for name in metrics:
            r = sweep["metrics"][name]
            assert -1.0 <= r["ci_low"] <= r["ci_high"] <= 1.0 and -1.0 <= r["spearman"] <= 1.0
            assert 0.5 <= r["oca_oca"] <= 1.0
            assert len(r["scores"]) == len(r["parameters"]) == settings["sets"]
            assert sorted(set(r["parameters"])) == values and len(r["mean_by_value"]) == len(values)
            assert res["summary"][swept][name]["spearman"]["per_seed"] == [r["spearman"]] * 2
    assert run["cpu_s"] > 0 and res["cpu_s"] >= run["cpu_s"] + again["cpu_s"] and run["wall_s"] > 0
    assert {"dectest_spearman.png", "dectest_spearman_top_p.png"} <= set(res["figures"])
    for name in res["figures"]:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the second run of seed 0 scores every set again, exactly: the same ρ and OCA
    for swept in settings["sweeps"]:
        for name in metrics:
            first, second = run["sweeps"][swept]["metrics"][name], again["sweeps"][swept]["metrics"][name]
            assert second["scores"] == first["scores"], (swept, name)
            assert (second["spearman"], second["oca_oca"]) == (first["spearman"], first["oca_oca"]), (swept, name)
