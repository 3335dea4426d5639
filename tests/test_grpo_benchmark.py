"""benchmarks/grpo_overhead.py --quick runs and reports every number it prints."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


@pytest.mark.slow
def test_grpo_overhead_quick(tmp_path, capsys):
    import grpo_overhead

    result = grpo_overhead.main(["--quick", "--json", str(tmp_path / "out.json")])
    assert len(result["steps"]) == 2
    for row in result["steps"]:
        # the reward runs inside the step; the callback after it, on every (logging) step
        assert 0 < row["reward_s"] < row["step_s"] and row["callback_s"] > 0
    assert set(result["equivalence_s"]) == {"clusters", "cosine", "nli"}
    assert result["fit_s"] > 0 and (tmp_path / "out.json").is_file()
    out = capsys.readouterr().out
    assert "callback %" in out and "NLI pairs" in out
