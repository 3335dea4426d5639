"""benchmarks/scaling.py: the fitted exponent on exact power laws, and a --smoke run's structure."""

from __future__ import annotations

import json
import math

import pytest
from helpers import load_script


def load_scaling():
    return load_script("benchmarks", "scaling", "bench_scaling")


def test_exponent_recovers_a_power_law():
    scaling = load_scaling()
    work = [10, 100, 1000, 10000]
    assert scaling.exponent(work, [3 * w**1.5 for w in work]) == pytest.approx(1.5, abs=1e-9)
    assert scaling.exponent(work, [7.0] * 4) == pytest.approx(0.0, abs=1e-9)  # fixed cost: exponent 0
    assert math.isnan(scaling.exponent([10], [1.0]))  # one point fits no line


@pytest.mark.slow
def test_smoke_run_reports_every_curve(tmp_path, capsys):
    """--smoke (two sizes per curve) on the clusters and monitors parts: rows for every size, finite exponents,
    a JSON on disk. --smoke runs the code --quick runs, on fewer and smaller sizes (``sizes`` is all that differs)."""
    scaling = load_scaling()
    out = tmp_path / "scaling.json"
    result = scaling.main(["--smoke", "--parts", "clusters", "monitors", "--json", str(out)])
    assert result["smoke"] and result["sizes"] == scaling.SMOKE
    assert scaling.SMOKE.keys() == scaling.QUICK.keys() == scaling.FULL.keys()  # --quick sizes every part too
    on_disk = json.loads(out.read_text())
    assert on_disk["curves"].keys() == result["curves"].keys()
    names = list(result["curves"])
    for d in scaling.SMOKE["dims"]:
        assert any(f"d={d}" in n or f"d = {d}" in n or str(d) in n for n in names)
    assert len(result["rows"]["clusters"]) == len(scaling.SMOKE["dims"]) * len(scaling.SMOKE["n"])
    for name, curve in result["curves"].items():
        assert math.isfinite(curve["exponent"]), name
        assert all(v > 0 for v in curve["values"]), name
    printed = capsys.readouterr().out
    assert "exponent" in printed and all(n in printed for n in names)
