"""experiments/sement_validity.py: the noise and rank figures by hand, and --quick writes a complete results.json and page."""

from __future__ import annotations

import json
import math

import pytest
from helpers import load_experiment


def test_rank_noise_and_step_change_by_hand():
    """analyse(): sd at the reference value, the detectable change 1.96 sqrt(2) sd, the change one step below."""
    script = load_experiment("sement_validity")
    cfg = {"n_boot": 50, "seed": 0}
    values = [0.8, 0.8, 1.0, 1.0]
    got = script.analyse(values, {"up": [1.0, 2.0, 4.0, 6.0], "flat": [0.5] * 4}, 1.0, 0.2, cfg)
    up = got["up"]
    assert up["sd"] == pytest.approx(math.sqrt(2.0))  # 4 and 6: sd sqrt(2)
    assert up["detectable"] == pytest.approx(1.96 * math.sqrt(2.0) * math.sqrt(2.0))
    assert up["step_change"] == pytest.approx(5.0 - 1.5) and up["mean_by_value"] == pytest.approx([1.5, 5.0])
    # Spearman's rho is Pearson's on the ranks: values ranked 1.5 1.5 3.5 3.5 (ties), scores 1 2 3 4
    x, y = [1.5, 1.5, 3.5, 3.5], [1.0, 2.0, 3.0, 4.0]
    mx, my = sum(x) / 4, sum(y) / 4
    cov = sum((a - mx) * (b - my) for a, b in zip(x, y))
    rho = cov / math.sqrt(sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y))
    assert up["spearman"] == pytest.approx(rho) and not up["constant"]
    # a score that never moves has no rank: said as such (rho 0, constant), not NaN
    assert got["flat"]["constant"] and got["flat"]["spearman"] == 0.0 and got["flat"]["detectable"] == 0.0


def test_sement_validity_quick(tmp_path):
    out = tmp_path / "results" / "sement_validity"
    script = load_experiment("sement_validity")
    out.parent.mkdir(parents=True)
    (out.parent / "sement_validity.md").write_text("# old\n\n## Reading\n\nBy hand, kept.\n\n## Sets\n\nold\n")
    res = script.main(["--quick", "--out", str(out)])
    stored = json.loads((out / "results.json").read_text())  # allow_nan=False wrote it: every number is finite
    assert stored["experiment"] == "sement_validity" and stored["quick"] is True and stored == res
    cfg = stored["config"]
    spaces = [f"{s}/k{k}" for s in ("minilm", "base_last_token", "base_mean") for k in cfg["ks"]]
    assert list(stored["sets"]) == ["temperature", "top_p"]
    assert list(stored["sets"]["temperature"]) == [str(n) for n in cfg["sizes"]["temperature"]]
    for swept, values in (("temperature", cfg["temperatures"]), ("top_p", cfg["top_ps"])):
        for block in stored["sets"][swept].values():
            assert list(block) == [*spaces, "distinct_1", "distinct_2", "ead"]
            for name, r in block.items():
                assert -1.0 <= r["spearman"] <= 1.0 and len(r["mean_by_value"]) == len(values)
                assert r["detectable"] == pytest.approx(1.96 * math.sqrt(2) * r["sd"])
                if name in spaces:  # Sem-Ent over k clusters: in [0, ln k]
                    k = int(name.rsplit("k", 1)[1])
                    assert all(0.0 <= m <= math.log(k) + 1e-9 for m in r["mean_by_value"])
    groups = stored["groups"]
    assert list(groups) == [f"G{g}/prompts{b}" for g in cfg["group_sizes"] for b in cfg["group_prompts"]]
    for key, block in groups.items():
        g = int(key.split("/")[0][1:])
        for name in spaces:  # group Sem-Ent: in [0, ln min(G, k)]
            k = int(name.rsplit("k", 1)[1])
            assert all(0.0 <= m <= math.log(min(g, k)) + 1e-9 for m in block[name]["mean_by_value"])
        assert all(0.0 < m <= 1.0 for m in block["group_distinct_2"]["mean_by_value"])
    assert stored["environment"]["commit"] and stored["environment"]["packages"]["torch"]
    page = (out.parent / "sement_validity.md").read_text()
    assert "--quick: a smoke test" in page and page.count("## Reading\n\nBy hand, kept.") == 1 and "\nold\n" not in page
    assert "## Sets of one reply per context, temperature sweep" in page and "## Groups (GRPO)" in page
    assert "| minilm/k3 |" in page and "## Environment" in page
