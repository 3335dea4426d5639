"""experiments/divpo.py --quick writes a complete results.json and page; parts run apart merge."""

from __future__ import annotations

import json
import math
import platform
import re
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
    script.main(["--quick", "--out", str(out), "--save-replies"])
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
    # --save-replies kept the replies each held-out measure read: their within-group distinct-2 is the run's
    from lightning_div.metrics.group import group_distinct_n

    for run in res["runs"]:
        kept = json.loads((out / "replies" / f"{run['setting']}_seed0.json").read_text())
        texts = [t for group in kept["groups"] for t in group["replies"]]
        assert kept["step"] == (0 if run["setting"] == "base" else cfg["steps"]) and len(kept["groups"]) == 3
        assert group_distinct_n(texts, g, 2) == run["held_out"]["group_distinct_2"]
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


# -- --merge: no run dropped, no input overwritten, a damaged part named (issue 64 H2, M7) ---------------


def _divpo_run(script, setting: str, seed: int, value: float) -> dict:
    run = {"setting": setting, "seed": seed, "held_out": dict.fromkeys(script.METRICS, value)}
    if setting != "base":
        run["pairs"] = {"pools": 4, "pairs": 3, "skipped": 1, "skipped_by_reason": {}}
        run["pairs"] |= {"chosen_quality": 0.9, "rejected_quality": 0.1, "chosen_words": 8.0, "rejected_words": 3.0}
    return run


def _divpo_part(script, path, runs, **extra) -> str:
    body = {
        "experiment": "divpo",
        "quick": True,
        "config": dict(script.QUICK),
        "seeds": sorted({r["seed"] for r in runs}),
    }
    body |= {"machine": "test", "runs": runs, **extra}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body), encoding="utf-8")
    return str(path)


def _refused(script, argv, capsys) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit, match=r"^2$"):
        script.main(argv)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("divpo.py --merge: error: "), err
    return err


def test_merge_keeps_every_run_or_refuses_naming_both_parts(tmp_path, capsys):
    """H2: parts holding the same setting and seed: one run when they are the same run, else refused naming both
    files and the run (a later part's run won in silence: 12 input runs became 8)."""
    script = load_experiment("divpo")
    mine = _divpo_part(
        script, tmp_path / "mine" / "results.json", [_divpo_run(script, s, 1, 0.3) for s in ("base", "dpo")]
    )
    theirs = [_divpo_run(script, "base", 1, 0.3), _divpo_run(script, "dpo", 1, 123.0)]
    other = _divpo_part(script, tmp_path / "other" / "results.json", theirs)
    out = tmp_path / "merged" / "divpo"
    err = _refused(script, ["--merge", mine, other, "--out", str(out)], capsys)
    assert re.search(r"mine/results\.json and .*other/results\.json hold different runs of dpo seed 1", err), err
    assert not out.exists()
    # the base model's measurement of a seed is a run too: parts that disagree on it are refused, named
    base = _divpo_part(script, tmp_path / "b" / "results.json", [_divpo_run(script, "base", 1, 0.4)])
    err = _refused(script, ["--merge", mine, base, "--out", str(out)], capsys)
    assert re.search(r"mine/results\.json and .*b/results\.json hold different runs of base seed 1", err), err
    # the same part twice, and parts that share a seed's identical base run: every run kept, once
    semantic = [_divpo_run(script, "base", 1, 0.3), _divpo_run(script, "divpo_semantic", 1, 0.5)]
    more = _divpo_part(script, tmp_path / "more" / "results.json", semantic)
    result = script.main(["--merge", mine, mine, more, "--out", str(out)])
    assert [(r["setting"], r["seed"]) for r in result["runs"]] == [(s, 1) for s in ("base", "divpo_semantic", "dpo")]
    assert json.loads((out / "results.json").read_text())["runs"] == result["runs"]


def test_merge_never_writes_over_its_own_input(tmp_path, capsys):
    """H2: ``--out mine`` with ``mine/results.json`` among the parts is refused, the part untouched (it was rewritten)."""
    script = load_experiment("divpo")
    mine = _divpo_part(script, tmp_path / "mine" / "results.json", [_divpo_run(script, "dpo", 1, 0.334)])
    other = _divpo_part(script, tmp_path / "other" / "results.json", [_divpo_run(script, "dpo", 2, 0.5)])
    before = (tmp_path / "mine" / "results.json").read_bytes()
    for out in (tmp_path / "mine", tmp_path / "." / "mine"):
        err = _refused(script, ["--merge", mine, other, "--out", str(out)], capsys)
        assert re.search(r"--out .*mine would write .*mine/results\.json, which is the input", err), err
    assert (tmp_path / "mine" / "results.json").read_bytes() == before and not (tmp_path / "mine.md").exists()


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"experiment": "divpo", "runs": [', r"part\.json: not valid JSON \(line 1, column 34"),
        ("[1, 2]", r"part\.json: a results\.json holds one JSON object, this holds a list"),
        ('{"experiment": "divpo", "quick": true, "runs": []}', r"part\.json: no 'config' object"),
        ('{"experiment": "grpo_diversity", "quick": true, "config": {}, "runs": []}', r"part\.json: a part of the "),
        ("SEED", r"part\.json: runs\[0\] \(dpo\): the seed must be an integer, got '1'"),
        ("HELD", r"part\.json: runs\[0\] \(dpo seed 1\): held_out\['nll'\] is missing or not a finite number"),
    ],
)
def test_a_damaged_part_is_one_line_naming_the_file(tmp_path, capsys, text, match):
    """M7: a torn or foreign part is one line naming the file, exit 2 (each was a traceback naming no file)."""
    script = load_experiment("divpo")
    good = _divpo_part(script, tmp_path / "good.json", [_divpo_run(script, "dpo", 0, 0.5)])
    if text == "SEED":
        text = json.dumps(
            {**json.loads(Path(good).read_text()), "runs": [{**_divpo_run(script, "dpo", 1, 0.5), "seed": "1"}]}
        )
    elif text == "HELD":
        run = _divpo_run(script, "dpo", 1, 0.5)
        del run["held_out"]["nll"]
        text = json.dumps({**json.loads(Path(good).read_text()), "runs": [run]})
    (tmp_path / "part.json").write_text(text, encoding="utf-8")
    err = _refused(script, ["--merge", good, str(tmp_path / "part.json"), "--out", str(tmp_path / "out")], capsys)
    assert re.search(match, err), err
    assert not (tmp_path / "out").exists()


# -- --page: the committed page recomputes from the committed files (issue 62, items 2 and 5) ----------------

RESULTS = ROOT / "docs" / "results" / "divpo"
PAGE_ARGS = ["--rescored", str(RESULTS / "rescore" / "results.json")]
PAGE_ARGS += ["--stored", str(RESULTS / "results_2026-11-28_stored.json")]


def test_the_committed_page_is_rebuilt_from_the_committed_files(tmp_path):
    """Every generated number of docs/results/divpo.md (the held-out table, the differences, the judge's rescoring,
    the rerun's drift) is what ``--page`` computes from the committed results, rescoring and stored runs."""
    script = load_experiment("divpo")
    out = tmp_path / "divpo"
    out.mkdir()
    (out / "results.json").write_bytes((RESULTS / "results.json").read_bytes())
    committed = (RESULTS.parent / "divpo.md").read_text(encoding="utf-8")
    (tmp_path / "divpo.md").write_text(committed, encoding="utf-8")
    script.main(["--page", "--out", str(out), *PAGE_ARGS])
    assert (tmp_path / "divpo.md").read_text(encoding="utf-8") == committed
    # the judge's table agrees with rescore.py's own summary of the same runs (computed apart)
    summary = json.loads((RESULTS / "rescore" / "results.json").read_text())["rescored"]["divpo"]["summary"]
    for name in ("dpo - base", "divpo_semantic - dpo", "divpo_likelihood - dpo"):
        d = summary["differences"][name]["group_sem_ent"]
        row = f"| {name} | group_sem_ent | {d['mean']:.3f} [{d['low']:.3f}, {d['high']:.3f}] | {d['test']['p']:.3f} |"
        assert row in committed and f"| {d['test']['detectable']:.3f} |" in committed
    # the earlier judge beside it is the held-out table's group_sem_ent of the same runs
    dpo = json.loads((RESULTS / "results.json").read_text())["summary"]["settings"]["dpo"]["group_sem_ent"]
    assert re.search(
        rf"\| dpo \| [^|]+ \| [^|]+ \| {dpo['mean']:.3f} \[{dpo['low']:.3f}, {dpo['high']:.3f}\] \|", committed
    )


def test_the_rescored_table_holm_over_the_judges_tests_only(tmp_path):
    """Holm runs over the judge's two measures in the three differences (6 tests), not over the earlier judge's."""
    script = load_experiment("divpo")
    sections = load_experiment("_divpo_sections")
    result = {"config": dict(script.QUICK), "runs": []}
    rescored_runs = {}
    # per seed k: dpo - base differs by 0.1 + 0.01 k in the judge's Sem-Ent (p small), divpo_* by noise
    for k in range(4):
        for s, judged in (("base", 1.0), ("dpo", 1.1 + 0.01 * k), ("divpo_semantic", 1.1 + 0.02 * (k % 2))):
            result["runs"].append(
                {"setting": s, "seed": k, "held_out": {"group_sem_ent": 1.0, "group_distinct_2": 0.9}}
            )
            rescored_runs[(s, k)] = {"group_sem_ent": judged, "group_clusters": 4.0 + k, "distinct_2": 0.9}
    lines = sections.rescored_lines(result, {"judge": {}, "runs": rescored_runs})
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line.split("|") for line in lines if line.startswith("| d")}
    stats = load_experiment("_stats")
    # the family in order: (dpo - base, divpo_semantic - dpo) x (group_sem_ent, group_clusters); the clusters'
    # difference is 0 at every seed (p 1)
    ps = [stats.paired([0.1 + 0.01 * k for k in range(4)])["p"], 1.0]
    ps += [stats.paired([0.02 * (k % 2) - 0.01 * k for k in range(4)])["p"], 1.0]
    expected = stats.holm(ps)
    assert expected[0] < 0.05 < expected[2]  # the test tells the two apart
    assert float(rows[("dpo - base", "group_sem_ent")][5]) == pytest.approx(expected[0], abs=5e-4)
    assert float(rows[("divpo_semantic - dpo", "group_sem_ent")][5]) == pytest.approx(expected[2], abs=5e-4)
    assert rows[("dpo - base", "old_group_sem_ent")][5].strip() == "-"  # beside, not in the family
    assert "adjusted over the 4 tests" in "\n".join(lines)  # 2 differences present x 2 judge measures


def test_the_rerun_section_says_how_far_each_number_moved(tmp_path):
    """A rerun equal but for one NLL 1e-7 higher: that row says it, every other says 0."""
    script = load_experiment("divpo")
    sections = load_experiment("_divpo_sections")
    runs = [_divpo_run(script, s, k, 0.5 + 0.01 * k) for k in (0, 1) for s in ("base", "dpo", "divpo_semantic")]
    for r in runs:
        if r["setting"] != "base":
            r |= {"loss_last": 0.4, "examples": {"pairs": []}}
    stored = {"config": {}, "runs": runs, "summary": script.summarise(runs)}
    moved = json.loads(json.dumps(runs))
    moved[1]["held_out"]["nll"] += 1e-7  # dpo seed 0
    rerun = {"config": {}, "runs": moved, "summary": script.summarise(moved)}
    lines = sections.rerun_lines(rerun, stored, script.METRICS, "stored")
    # the difference's ends move by more than its mean: the paired sd went from 0 to 1e-7 / sqrt(2)
    half = float(__import__("scipy.stats").stats.t.ppf(0.975, 1)) * (1e-7 / 2**0.5) / 2**0.5
    assert any(x.startswith(f"| nll | 1.0e-07 | 5.0e-08 | {0.5e-7 + half:.1e} |") for x in lines), lines
    assert "| words | 0 | 0 | 0 |" in lines and "| group_sem_ent | 0 | 0 | 0 |" in lines
    assert "| DPO's last loss | 0 | - | - |" in lines and any("the same in 4 of 4 trained runs" in x for x in lines)


@pytest.mark.parametrize(
    ("which", "match"),
    [
        ("rescored", r"dpo seed 0 has distinct-2 0\.100000, the results 0\.500000: not the replies"),
        ("stored", r"stored\.json: not a divpo results\.json made with these settings"),
        ("alone", r"--rescored and --stored go with --page"),
    ],
)
def test_page_refuses_files_of_other_runs(tmp_path, capsys, which, match):
    """--page writes nothing from a rescoring or an earlier run that is not of these runs: one line, exit 2."""
    script = load_experiment("divpo")
    out = tmp_path / "divpo"
    runs = [_divpo_run(script, "dpo", 0, 0.5)]
    _divpo_part(script, out / "results.json", runs, summary=script.summarise(runs))
    (tmp_path / "divpo.md").write_text("# kept\n", encoding="utf-8")
    judged = {"setting": "dpo", "seed": 0, "group_sem_ent": 1.0, "group_clusters": 3.0, "distinct_2": 0.1}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"experiment": "rescore", "rescored": {"divpo": {"runs": [judged]}}}), encoding="utf-8")
    _divpo_part(script, tmp_path / "stored.json", runs, summary={})
    (tmp_path / "stored.json").write_text(
        json.dumps({**json.loads((tmp_path / "stored.json").read_text()), "config": {"steps": 99}}), encoding="utf-8"
    )
    argv = {
        "rescored": ["--page", "--rescored", str(bad)],
        "stored": ["--page", "--stored", str(tmp_path / "stored.json")],
        "alone": ["--rescored", str(bad)],
    }[which]
    capsys.readouterr()
    with pytest.raises(SystemExit, match=r"^2$"):
        script.main([*argv, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert re.search(match, err[-1]) and (len(err) == 1 or which == "alone"), err  # argparse adds its usage
    assert (tmp_path / "divpo.md").read_text(encoding="utf-8") == "# kept\n"
