"""docs/dpo.md's whole script, verbatim: pools from the base model, DivPO and DPO pairs, three steps of a real DPOTrainer."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from docs_blocks import run_page_script

PAGE = Path(__file__).resolve().parents[1] / "docs" / "dpo.md"


@pytest.mark.slow
def test_the_pages_dpo_script_runs_verbatim(tmp_path, monkeypatch, capsys):
    pytest.importorskip("trl")
    from lightning_div.preference import quality_bands, read_pools, semantic_rarity

    monkeypatch.chdir(tmp_path)
    namespace = run_page_script(PAGE, "A whole script")
    out = capsys.readouterr().out.splitlines()
    steps = [line for line in out if line.startswith("step ")]
    assert [line.split(":")[0] for line in steps] == ["step 1", "step 2", "step 3"]
    assert all(math.isfinite(float(re.search(r"loss ([-\d.]+)", line).group(1))) for line in steps)
    assert len([line for line in out if re.match(r"\| \d \| (DivPO|DPO) \|", line)]) == 8
    trainer, pools, space = namespace["trainer"], namespace["pools"], namespace["space"]
    divpo, dpo, quality_of = namespace["divpo"], namespace["dpo"], namespace["about_eight_words"]
    assert trainer.state.global_step == 3
    assert len(pools) == 4 and all(len(p.responses) == 6 for p in pools)
    assert read_pools(tmp_path / "dpo_run" / "pools.jsonl") == pools  # the file the build wrote after each chunk
    # every pair follows the rule, recomputed here from the pools, the quality and the space
    rarity = semantic_rarity(pools, space)
    assert divpo.stats["pairs"] + divpo.stats["skipped"] == 4
    for pair in divpo.pairs:
        q, d = np.array(quality_of(pools[pair.pool].responses)), np.array(rarity[pair.pool])
        up, down = quality_bands(q, 0.5)
        assert up[pair.chosen_index] and d[pair.chosen_index] == d[up].max()
        below = down & (q < q[pair.chosen_index])
        assert below[pair.rejected_index] and d[pair.rejected_index] == d[below].min()
        assert (pair.chosen_quality, pair.chosen_diversity) == (q[pair.chosen_index], d[pair.chosen_index])
    for pair in dpo.pairs:
        q = np.array(quality_of(pools[pair.pool].responses))
        assert (pair.chosen_quality, pair.rejected_quality) == (q.max(), q.min())
    rows = divpo.dataset()
    assert rows.column_names == ["prompt", "chosen", "rejected"] and len(rows) == len(divpo.pairs)
    assert all(r["prompt"].endswith("<|endoftext|>") for r in rows)
