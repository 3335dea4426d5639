"""The DivPO page's sections read from files beside its results.json: the judge's rescoring and a rerun's drift.

``divpo.py --page --rescored R --stored S`` adds them (issue 62, items 2 and 5): ``R`` is
``experiments/rescore.py``'s results.json of this results.json's saved replies, ``S`` an earlier results.json
of the same settings (the runs this one reran). Each is checked against the results before a line is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _merge import MergeError, read_json_object
from _stats import cell, holm, paired

#: The differences the judge's rescoring reports (``rescore.comparisons`` for divpo), in the page's order.
RESCORED_DIFFERENCES = ("dpo - base", "divpo_semantic - dpo", "divpo_likelihood - dpo")
#: The judge's own measures, the family Holm's correction runs over (distinct-2 is no judge's: it is above).
JUDGE_MEASURES = ("group_sem_ent", "group_clusters")
CHECK_TOLERANCE = 1e-9


def _by_run(result: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(str(r["setting"]), int(r["seed"])): r for r in result["runs"]}


def read_rescored(path: Path, result: dict[str, Any]) -> dict[str, Any]:
    """``rescore.py``'s results.json, its divpo block, checked to hold exactly this result's runs' replies.

    Raises:
        MergeError: a damaged file, one without divpo runs, or one whose runs are not this result's (another set
            of runs, or a run whose replies' within-group distinct-2 is not the one this result measured).
    """
    body = read_json_object(path)
    block = body.get("rescored", {}).get("divpo") if isinstance(body.get("rescored"), dict) else None
    if body.get("experiment") != "rescore" or not isinstance(block, dict) or not block.get("runs"):
        raise MergeError(f"{path}: not a rescore.py results.json with divpo runs")
    runs, rescored = _by_run(result), {(str(r["setting"]), int(r["seed"])): r for r in block["runs"]}
    if sorted(rescored) != sorted(runs):
        raise MergeError(f"{path}: rescored runs {sorted(rescored)} are not the results' {sorted(runs)}")
    for key, run in rescored.items():
        stored = runs[key]["held_out"]["group_distinct_2"]
        if abs(run["distinct_2"] - stored) > CHECK_TOLERANCE:
            raise MergeError(
                f"{path}: {key[0]} seed {key[1]} has distinct-2 {run['distinct_2']:.6f}, the results {stored:.6f}: "
                "not the replies these runs measured"
            )
    return {"judge": body.get("judge", {}), "runs": rescored}


def rescored_lines(result: dict[str, Any], rescored: dict[str, Any]) -> list[str]:
    """The judge's table: per setting the mean over seeds, then each difference with p, Holm and power."""
    from _stats import interval

    runs, judged = _by_run(result), rescored["runs"]
    seeds = sorted({k[1] for k in judged})
    names = [s for s in ("base", "dpo", "divpo_semantic", "divpo_likelihood") if all((s, k) in judged for k in seeds)]

    def values(measure: str, setting: str) -> list[float]:
        if measure == "old_group_sem_ent":
            return [runs[(setting, k)]["held_out"]["group_sem_ent"] for k in seeds]
        return [judged[(setting, k)][measure] for k in seeds]

    j = rescored["judge"]
    cols = ("group_sem_ent", "group_clusters", "old_group_sem_ent")
    lines = [
        "## Rescored by the judge chosen before it (held out, the same replies; mean over seeds, 95 % t-interval)",
        "",
        f"Judge: `{j.get('encoder')}` hidden states, {j.get('pooling')} pooling, k = {j.get('num_clusters')} "
        f"(faiss seed {j.get('kmeans_seed')}), clusters fitted on {j.get('references')}. group_sem_ent and "
        "group_clusters are this judge's; old_group_sem_ent is the table above's group_sem_ent (the page's "
        "earlier judge, clusters of 500 validation replies) on the same replies.",
        "",
        "| setting | " + " | ".join(cols) + " |",
        "|---" * (len(cols) + 1) + "|",
    ]
    lines += [f"| {s} | " + " | ".join(cell(interval(values(m, s))) for m in cols) + " |" for s in names]
    tests: dict[tuple[str, str], dict[str, Any]] = {}
    for name in RESCORED_DIFFERENCES:
        a, b = name.split(" - ")
        if a in names and b in names:
            for m in cols:
                tests[(name, m)] = {
                    **interval([x - y for x, y in zip(values(m, a), values(m, b))]),
                    **paired([x - y for x, y in zip(values(m, a), values(m, b))]),
                }
    family = [key for key in tests if key[1] in JUDGE_MEASURES]
    for key, adjusted in zip(family, holm([tests[key]["p"] for key in family])):
        tests[key]["holm"] = adjusted
    lines += [
        "",
        f"Differences paired by seed. p: two-sided paired t-test; Holm: adjusted over the {len(family)} tests of the "
        "judge's two measures in the differences below (the comparisons named before the rescoring; none was "
        "singled out as primary, so all count); old_group_sem_ent is shown beside them, not in that family; "
        "detectable: the smallest true difference these seeds detect with 80 % power at a two-sided 5 % level.",
        "",
        "| difference | measure | mean [95 % interval] | p | Holm | detectable |",
        "|---|---|---|---|---|---|",
    ]
    for (name, m), t in tests.items():
        holm_cell = f"{t['holm']:.3f}" if "holm" in t else "-"
        lines.append(f"| {name} | {m} | {cell(t)} | {t['p']:.3f} | {holm_cell} | {t['detectable']:.3f} |")
    return [*lines, ""]


def read_stored(path: Path, result: dict[str, Any]) -> dict[str, Any]:
    """An earlier results.json of the same settings and runs (the runs this result reran).

    Raises:
        MergeError: a damaged file, one of another experiment or other settings, or other runs.
    """
    body = read_json_object(path)
    if body.get("experiment") != "divpo" or body.get("config") != result["config"] or "runs" not in body:
        raise MergeError(f"{path}: not a divpo results.json made with these settings ({result['config']})")
    if sorted(_by_run(body)) != sorted(_by_run(result)):
        raise MergeError(f"{path}: holds other runs than the results (settings and seeds)")
    return body


def _delta(x: float) -> str:
    return "0" if x == 0 else f"{x:.1e}"


def rerun_lines(result: dict[str, Any], stored: dict[str, Any], metrics: tuple[str, ...], label: str) -> list[str]:
    """How far each headline number moved from the stored runs to these: the largest absolute change per measure."""
    new, old = _by_run(result), _by_run(stored)
    diffs = list(result["summary"]["difference"])
    lines = [
        f"## This rerun vs the stored runs ({label})",
        "",
        f"Largest absolute change, rerun minus stored, over the {len(new)} runs' held-out measures, the "
        f"{len(result['summary']['settings'])} settings' means and the {len(diffs)} differences' means and interval "
        "ends (0: equal to the last digit).",
        "",
        "| measure | runs | settings' means | differences (mean, low, high) |",
        "|---|---|---|---|",
    ]
    for m in metrics:
        per_run = max(abs(new[k]["held_out"][m] - old[k]["held_out"][m]) for k in new)
        means = max(
            abs(result["summary"]["settings"][s][m]["mean"] - stored["summary"]["settings"][s][m]["mean"])
            for s in result["summary"]["settings"]
        )
        ends = max(
            abs(result["summary"]["difference"][d][m][e] - stored["summary"]["difference"][d][m][e])
            for d in diffs
            for e in ("mean", "low", "high")
            if result["summary"]["difference"][d][m][e] is not None  # one seed: no interval ends
        )
        lines.append(f"| {m} | {_delta(per_run)} | {_delta(means)} | {_delta(ends)} |")
    trained = [k for k in new if "loss_last" in new[k]]
    loss = max(abs(new[k]["loss_last"] - old[k]["loss_last"]) for k in trained)
    lines.append(f"| DPO's last loss | {_delta(loss)} | - | - |")
    same = sum(new[k]["pairs"] == old[k]["pairs"] and new[k].get("examples") == old[k].get("examples") for k in trained)
    lines += [
        "",
        f"Pair statistics and kept examples (pairs and held-out replies of 3 prompts): the same in {same} of "
        f"{len(trained)} trained runs. Timings are wall clock on a loaded machine and are not compared.",
        "",
    ]
    return lines
