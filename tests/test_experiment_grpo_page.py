"""experiments/grpo_diversity.py --page: the page rebuilt from its results.json, with the new judge's rescoring
(--rescored) and the rerun's drift from the stored runs (--stored), checked by hand (issue 62, item 2)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import load_experiment
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results" / "grpo_diversity"

# per (setting, seed): the old judge's group Sem-Ent (the results') and the new judge's (the rescoring's);
# grpo_semantic_kl has two seeds of the three (a setting still training): its differences pair seeds 0 and 1
OLD = {"grpo": (1.0, 1.2, 0.8), "grpo_kl": (1.3, 1.2, 1.4), "grpo_semantic_kl": (0.9, 1.0), "base": (1.4, 1.5, 1.3)}
NEW = {"grpo": (1.1, 1.0, 0.9), "grpo_kl": (1.5, 1.6, 1.2), "grpo_semantic_kl": (1.7, 1.9), "base": (1.6, 1.5, 1.4)}


def _held(script, old: float) -> dict:
    # every other measure equal across settings: their paired differences are 0 (p 1)
    return {**dict.fromkeys(script.MEASURES, 5.0), "judge_group_sem_ent": old, "distinct_2": 0.9}


def _results(script, path: Path, old=OLD, extra: dict | None = None) -> dict:
    """A merged results.json of the runs in ``old`` (``extra``: more runs, (setting, seed) -> held out)."""
    held = {(s, k): _held(script, v) for s, values in old.items() for k, v in enumerate(values)}
    held |= extra or {}
    runs = [
        {
            "setting": s,
            "seed": k,
            "held_out": h,
            "steps": [{"step": i + 1, **h} for i in range(2)],
            "examples": {"prompts": ["hi"], "greedy": ["a b"], "sampled": ["a b"]},
            **{"wall_s": 10.0, "reward_s": 1.0, "monitor_s": 0.5, "step_s": 8.0},
        }
        for (s, k), h in held.items()
        if s != "base"
    ]
    base = {str(k): h for (s, k), h in held.items() if s == "base"}
    settings = [s for s in script.SETTINGS if any(r["setting"] == s for r in runs)]
    body = {"experiment": "grpo_diversity", "quick": False, "config": dict(script.FULL), "machine": "test"}
    body |= {"seeds": sorted({r["seed"] for r in runs}), "base": base, "runs": runs, "pilot": []}
    body["summary"] = script.summarise(runs, settings, base)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body), encoding="utf-8")
    return body


def _rescored(path: Path, new=NEW, distinct_2: float = 0.9, quick: bool = False) -> Path:
    runs = [
        {"setting": s, "seed": k, "group_sem_ent": v, "group_clusters": 3.0, "distinct_2": distinct_2}
        for s, values in new.items()
        for k, v in enumerate(values)
    ]
    judge = {"encoder": "local:chitchat-gpt2", "pooling": "mean", "num_clusters": 8, "kmeans_seed": 27}
    body = {"experiment": "rescore", "quick": quick, "judge": {**judge, "references": "2000 replies"}}
    body |= {"checked_against": ["/r/grpo_a/results.json"], "rescored": {"grpo_diversity": {"runs": runs}}}
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


def _row(text: str, *first: str) -> list[str]:
    """The cells of the one table line starting with ``first``'s cells."""
    start = "| " + " | ".join(first) + " |"
    rows = [line for line in text.splitlines() if line.startswith(start)]
    assert len(rows) == 1, (start, rows)
    return [c.strip() for c in rows[0].strip("|").split("|")]


def test_the_committed_page_is_rebuilt_from_the_committed_files(tmp_path):
    """``--page`` on the committed results.json writes the committed page, every generated line (and, once the
    rescoring and the stored runs are committed beside it, their sections too)."""
    script = load_experiment("grpo_diversity")
    out = tmp_path / "grpo_diversity"
    out.mkdir()
    (out / "results.json").write_bytes((RESULTS / "results.json").read_bytes())
    committed = (RESULTS.parent / "grpo_diversity.md").read_text(encoding="utf-8")
    (tmp_path / "grpo_diversity.md").write_text(committed, encoding="utf-8")
    args = ["--rescored", str(RESULTS / "rescore" / "results.json")] if "## Rescored by" in committed else []
    args += ["--stored", *map(str, RESULTS.glob("results_*_stored.json"))] if "## This rerun vs" in committed else []
    script.main(["--page", "--out", str(out), *args])
    assert (tmp_path / "grpo_diversity.md").read_text(encoding="utf-8") == committed


def test_the_rescored_sections_by_hand(tmp_path):
    """Both judges side by side per setting over its own seeds; the paired differences over the seeds both
    settings have; the primary family's Holm with the new judge's figure, and with the old one's beside."""
    script = load_experiment("grpo_diversity")
    st = load_experiment("_stats")
    out = tmp_path / "grpo_diversity"
    _results(script, out / "results.json")
    (tmp_path / "grpo_diversity.md").write_text("# old\n\n## Reading\n\nBy hand, kept.\n\n## Held out\n\nold\n")
    script.main(["--page", "--out", str(out), "--rescored", str(_rescored(tmp_path / "rescored.json"))])
    text = (tmp_path / "grpo_diversity.md").read_text(encoding="utf-8")
    assert "## Reading\n\nBy hand, kept.\n" in text and "\nold\n" not in text
    assert "checked them against `results.json` (grpo_a)" in text
    # side by side: grpo_semantic_kl over its two seeds, new 1.8 [.], old 0.95 [.]
    row = _row(text, "grpo_semantic_kl", "0 1")
    assert row[2].startswith("1.800 [") and row[4].startswith("0.950 [") and row[6].startswith("5.000")
    assert _row(text, "base", "0 1 2")[2].startswith("1.500 [")
    # grpo_kl - grpo with the new judge, seeds 0-2: 0.4, 0.6, 0.3
    d = [0.4, 0.6, 0.3]
    row = _row(text, "grpo_kl - grpo", "0 1 2", "judge_group_sem_ent")
    half = stats.t.ppf(0.975, 2) * stats.tstd(d) / 3**0.5
    assert row[3] == f"0.433 [{0.4333333 - half:.3f}, {0.4333333 + half:.3f}]"
    assert float(row[4]) == pytest.approx(stats.tstd(d), abs=5e-4)
    assert float(row[5]) == pytest.approx(stats.ttest_1samp(d, 0).pvalue, abs=5e-4)
    # the old judge's difference on the same replies beside it: 0.3, 0.0, 0.6
    assert _row(text, "grpo_kl - grpo", "0 1 2", "old_judge_group_sem_ent")[3].startswith("0.300 [")
    # grpo_semantic_kl pairs with the seeds both have: - grpo_kl over 0 1 (0.2, 0.3); - grpo likewise (0.6, 0.9)
    assert _row(text, "grpo_semantic_kl - grpo_kl", "0 1", "judge_group_sem_ent")[3].startswith("0.250 [")
    assert _row(text, "grpo_semantic_kl - grpo", "0 1", "judge_group_sem_ent")[3].startswith("0.750 [")
    # the family: 3 comparisons with 2+ shared seeds x 3 primary measures = 9 tests of the 18; task reward and
    # NLL differ by 0 on every seed (p 1), so Holm's adjustment is over the judge's three p-values and six 1s
    assert "; 9 tests of the 18 (" in text
    ps = [stats.ttest_1samp(x, 0).pvalue for x in (d, [0.6, 0.9], [0.2, 0.3])]
    new = st.holm([ps[0], 1, 1, ps[1], 1, 1, ps[2], 1, 1])
    old_ps = [stats.ttest_1samp(x, 0).pvalue for x in ([0.3, 0.0, 0.6], [-0.1, -0.2], [-0.4, -0.2])]
    old = st.holm([old_ps[0], 1, 1, old_ps[1], 1, 1, old_ps[2], 1, 1])
    rows = [line for line in text.splitlines() if line.startswith("| grpo_kl - grpo | judge_group_sem_ent | 0 1 2 |")]
    family = [c.strip() for c in rows[-1].strip("|").split("|")]  # the family's table is the last with this start
    assert float(family[6]) == pytest.approx(new[0], abs=5e-4) and float(family[8]) == pytest.approx(old[0], abs=5e-4)
    assert new[0] != pytest.approx(old[0], abs=1e-2)  # the test tells the two judges' families apart
    assert _row(text, "grpo_kl - grpo", "task_reward", "0 1 2")[6] == "1.000"


def test_the_rerun_section_compares_the_same_runs(tmp_path):
    """One stored run's NLL 0.25 higher: the runs, the setting's mean and the differences' means say how far it
    moved, over the rerun's seeds only (the stored file's extra seed is not in any mean); the rest say 0."""
    script = load_experiment("grpo_diversity")
    out = tmp_path / "grpo_diversity"
    _results(script, out / "results.json")
    moved = {**_held(script, 1.2), "nll": 5.25}
    stored = tmp_path / "stored" / "results.json"
    _results(script, stored, extra={("grpo", 1): moved, ("grpo", 3): {**_held(script, 1.0), "nll": 100.0}})
    script.main(["--page", "--out", str(out), "--stored", str(stored)])
    text = (tmp_path / "grpo_diversity.md").read_text(encoding="utf-8")
    assert "## This rerun vs the stored runs (`stored/results.json`)" in text
    assert "Each of the 11 reruns" in text and "grpo_semantic_kl: 0 1" in text
    # runs 0.25; grpo's mean over seeds 0-2 0.25 / 3; grpo_kl - grpo (seeds 0-2) 0.25 / 3, grpo_semantic_kl - grpo
    # (seeds 0, 1) 0.25 / 2: the largest
    assert _row(text, "nll") == ["nll", "0.250 (grpo seed 1)", "0.083", "0.125"]
    assert _row(text, "task_reward") == ["task_reward", "0", "0", "0"]
    assert "in every held-out measure: 10 of 11 runs; moved further: grpo seed 1." in text
    assert _row(text, "grpo", "0 1 2")[4] == "5.083 -> 5.000 (-0.083)"
    assert _row(text, "grpo", "0 1 2")[2] == "1.000 -> 1.000 (+0.000)"


#: Each file --page refuses, and the one line that says why.
REFUSED = {
    "distinct": r"bad\.json: grpo seed 0 has distinct-2 0\.100000, the results 0\.900000: not the replies",
    "missing": r"bad\.json: rescored runs are not the results': missing grpo_semantic_kl seed 1; not in the",
    "quick": r"bad\.json: a --quick judge's \(a smoke test\) rescoring, and the results are not --quick",
    "config": r"stored\.json: not a grpo_diversity results\.json made with these settings",
    "fewer": r"stored\.json: holds no stored run of grpo_kl seed 2: not the runs this page reran",
    "alone": r"--rescored and --stored go with --page",
    "merge": r"--page rewrites the page of a results\.json made before: not with --merge",
}


@pytest.mark.parametrize("which", REFUSED)
def test_page_refuses_files_of_other_runs(tmp_path, capsys, which):
    """--page writes nothing from a rescoring or stored runs that are not of the page's runs: one line, exit 2."""
    script = load_experiment("grpo_diversity")
    out = tmp_path / "grpo_diversity"
    _results(script, out / "results.json")
    (tmp_path / "grpo_diversity.md").write_text("# kept\n", encoding="utf-8")
    bad = tmp_path / "bad.json"
    if which == "distinct":
        _rescored(bad, distinct_2=0.1)
    elif which == "missing":
        _rescored(bad, new={**NEW, "grpo_semantic_kl": (1.7,)})
    else:
        _rescored(bad, quick=which == "quick")
    stored = tmp_path / "stored.json"
    body = _results(script, stored, old={**OLD, "grpo_kl": (1.3, 1.2)} if which == "fewer" else OLD)
    if which == "config":
        stored.write_text(json.dumps({**body, "config": {**body["config"], "steps": 99}}), encoding="utf-8")
    argv = {
        "alone": ["--rescored", str(bad)],
        "merge": ["--page", "--merge", str(stored)],
        "config": ["--page", "--stored", str(stored)],
        "fewer": ["--page", "--stored", str(stored)],
    }.get(which, ["--page", "--rescored", str(bad)])
    capsys.readouterr()
    with pytest.raises(SystemExit, match=r"^2$"):
        script.main([*argv, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert re.search(REFUSED[which], err[-1]) and (len(err) == 1 or which in ("alone", "merge")), err  # argparse: usage
    assert (tmp_path / "grpo_diversity.md").read_text(encoding="utf-8") == "# kept\n"
