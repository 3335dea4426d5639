"""The GRPO page's sections read from files beside its results.json: the judge's rescoring and a rerun's drift.

``grpo_diversity.py --page --rescored R --stored S`` adds them (issue 62, items 2 and 5), as the page's
"Judge for the rescoring (chosen before it)" says before any rescoring: the old judge's and the new judge's
figures side by side on the same replies, the page's paired differences (each setting minus ``grpo``,
``grpo_semantic_kl - grpo_kl``) with the new judge, the primary Holm family with the new judge in place of the
old, the detectable difference, and how far each held-out number moved from the stored runs. ``R`` is
``experiments/rescore.py``'s results.json of this results.json's saved replies, ``S`` an earlier results.json
of the same settings (the stored runs this one reran; it may hold more runs than were rerun). Each is checked
against the results before a line is written. Runs are keyed as ``rescore.stored_runs`` names them
(``(setting, seed)``, the base model's measurements as ``("base", seed)``); a table covers the seeds each of
its settings has, and says which.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _merge import MergeError, read_json_object
from _stats import cell, holm, interval, paired
from rescore import CHECK_TOLERANCE, comparisons

Held = dict[tuple[str, int], dict[str, Any]]
#: The new judge's measures, as rescore.py names them, and the page's own (old judge) names for the same.
JUDGE = {"group_sem_ent": "judge_group_sem_ent", "group_clusters": "judge_group_clusters"}
#: Beside every judge figure (the page's limits: degenerate text lands in a few clusters too).
BESIDE = ("nll", "cut_share", "top_word_share")
#: A rerun "the same" as its stored run: float noise only (the NLL's sums differ at 1e-7 between environments).
SAME = 1e-6


def paired_rows(
    runs: list[dict[str, Any]], pairs: Sequence[tuple[str, str]], measures: Sequence[str]
) -> list[dict[str, Any]]:
    """Per (setting, baseline, measure) with 2 or more shared seeds: :func:`_stats.paired` of the per-seed differences."""
    by: dict[str, dict[int, dict[str, float]]] = {}
    for r in runs:
        by.setdefault(r["setting"], {})[int(r["seed"])] = r["held_out"]
    rows = []
    for setting, baseline in pairs:
        seeds = sorted(set(by.get(setting, {})) & set(by.get(baseline, {})))
        for m in measures if len(seeds) > 1 else ():
            diffs = [by[setting][k][m] - by[baseline][k][m] for k in seeds]
            row = {"comparison": f"{setting} - {baseline}", "measure": m, **paired(diffs)}
            rows.append({**row, "per_seed": diffs, "seeds": seeds})
    return rows


def _name(key: tuple[str, int]) -> str:
    return f"{key[0]} seed {key[1]}"


def _names(keys: Any) -> str:
    return ", ".join(_name(k) for k in sorted(keys)) or "none"


def seeds_of(held: Held) -> dict[str, list[int]]:
    """Each setting's seeds (the base model first, then the settings in the order the runs first name them)."""
    out: dict[str, list[int]] = {"base": []} if any(s == "base" for s, _ in held) else {}
    for s, k in held:
        out.setdefault(s, []).append(k)
    return {s: sorted(ks) for s, ks in out.items()}


def _seeds(seeds: list[int]) -> str:
    return " ".join(map(str, seeds))


def read_rescored(path: Path, result: dict[str, Any], held: Held) -> dict[str, Any]:
    """``rescore.py``'s results.json, its grpo_diversity block, checked to hold exactly these runs' replies.

    Args:
        path: the rescoring.
        result: the page's results.json (its ``quick``).
        held: the page's runs' held-out measures (``rescore.stored_runs`` of its results.json).

    Raises:
        MergeError: a damaged file, one without grpo_diversity runs, a ``--quick`` judge's for full runs (or the
            other way), other runs than the results' (those missing and those extra named), or a run whose
            replies' within-group distinct-2 is not the one this result measured.
    """
    body = read_json_object(path)
    block = body.get("rescored", {}).get("grpo_diversity") if isinstance(body.get("rescored"), dict) else None
    if body.get("experiment") != "rescore" or not isinstance(block, dict) or not block.get("runs"):
        raise MergeError(f"{path}: not a rescore.py results.json with grpo_diversity runs")
    if bool(body.get("quick")) != bool(result.get("quick")):
        kind = "a --quick judge's (a smoke test)" if body.get("quick") else "the full judge's"
        raise MergeError(
            f"{path}: {kind} rescoring, and the results are {'' if result.get('quick') else 'not '}--quick"
        )
    rescored = {(str(r["setting"]), int(r["seed"])): r for r in block["runs"]}
    if set(rescored) != set(held):
        raise MergeError(
            f"{path}: rescored runs are not the results': missing {_names(set(held) - set(rescored))}; "
            f"not in the results {_names(set(rescored) - set(held))}"
        )
    for key, run in rescored.items():
        stored = held[key]["distinct_2"]
        if abs(run["distinct_2"] - stored) > CHECK_TOLERANCE:
            raise MergeError(
                f"{path}: {_name(key)} has distinct-2 {run['distinct_2']:.6f}, the results {stored:.6f}: "
                "not the replies these runs measured"
            )
    return {"judge": body.get("judge", {}), "checked_against": body.get("checked_against") or [], "runs": rescored}


def _judged(held: Held, rescored: dict[str, Any]) -> Held:
    """The runs' held-out measures with the new judge's figures under the page's judge names (old: ``old_*``)."""
    out: Held = {}
    for key, measures in held.items():
        new = rescored["runs"][key]
        out[key] = {**measures, **{f"old_{page}": measures[page] for page in JUDGE.values()}}
        out[key].update({page: new[m] for m, page in JUDGE.items()})
    return out


def _as_runs(held: Held) -> list[dict[str, Any]]:
    return [{"setting": s, "seed": k, "held_out": m} for (s, k), m in held.items()]


def rescored_lines(
    held: Held, rescored: dict[str, Any], family: Sequence[tuple[str, str]], primary: Sequence[str]
) -> list[str]:
    """The judge's sections: per setting the two judges side by side, the page's differences, the primary family.

    Args:
        held: the page's runs' held-out measures.
        rescored: :func:`read_rescored`'s.
        family: the page's primary comparisons ``(setting, baseline)``, fixed before the runs.
        primary: the page's primary measures (``judge_group_sem_ent`` among them: the new judge's in the family).
    """
    judged, seeds = _judged(held, rescored), seeds_of(held)
    j = rescored["judge"]
    checked = ", ".join(f"`{Path(p).name}` ({Path(p).parent.name})" for p in rescored["checked_against"])
    cols = ("judge_group_sem_ent", "judge_group_clusters", "old_judge_group_sem_ent", "old_judge_group_clusters")
    lines = [
        "",
        "## Rescored by the judge chosen before it (held out, the same replies; mean over seeds, 95 % t-interval)",
        "",
        f"Judge: `{j.get('encoder')}` hidden states, {j.get('pooling')} pooling, k = {j.get('num_clusters')} "
        f"(faiss seed {j.get('kmeans_seed')}), clusters fitted on {j.get('references')}. `judge_*`: this judge's "
        "figures (`experiments/rescore.py`); `old_judge_*`: the held-out table's `judge_*` on the same replies "
        "(the earlier judge: last-token pooling, clusters of 500 training replies). NLL, the cut share and the "
        "top-word share beside them (the reruns' own). The replies are the runs': rescore.py checked them "
        f"against {checked or 'no stored results (no --check)'}, and this page against its results.json (every "
        "run's within-group distinct-2 equal to the stored one). Each row covers the seeds listed.",
        "",
        "| setting | seeds | " + " | ".join((*cols, *BESIDE)) + " |",
        "|---" * (len(cols) + len(BESIDE) + 2) + "|",
    ]
    for s, ks in seeds.items():
        cells = [cell(interval([judged[(s, k)][m] for k in ks])) for m in (*cols, *BESIDE)]
        lines.append(f"| {s} | {_seeds(ks)} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Differences paired by seed (each setting minus grpo, grpo_semantic_kl - grpo_kl; over the seeds both "
        "settings have, listed), uncorrected: the corrected family is the next table. p: two-sided paired t-test; "
        "sd: the per-seed differences' standard deviation; detectable: the smallest true difference these seeds "
        "detect with 80 % power at a two-sided 5 % level (`experiments/_stats.py: detectable_difference`); "
        "one seed: no interval, no test.",
        "",
        "| difference | seeds | measure | mean [95 % interval] | sd | p | detectable |",
        "|---|---|---|---|---|---|---|",
    ]
    for a, b in comparisons("grpo_diversity", [s for s in seeds if s != "base"]):
        shared = sorted(set(seeds[a]) & set(seeds[b]))
        for m in cols[:3] if shared else ():
            diffs = [judged[(a, k)][m] - judged[(b, k)][m] for k in shared]
            t = paired(diffs) if len(diffs) > 1 else None
            stats = f"{t['sd']:.3f} | {t['p']:.3f} | {t['detectable']:.3f}" if t else "- | - | -"
            lines.append(f"| {a} - {b} | {_seeds(shared)} | {m} | {cell(interval(diffs))} | {stats} |")
    return [*lines, *family_lines(judged, family, primary)]


def family_lines(judged: Held, family: Sequence[tuple[str, str]], primary: Sequence[str]) -> list[str]:
    """The page's primary family, Holm-corrected, with the new judge's group Sem-Ent in place of the old judge's;
    the old judge's Holm beside (its family: the same tests with the old judge's figure)."""
    runs = _as_runs(judged)
    new = paired_rows(runs, family, primary)
    if not new:
        return ["", "Primary family: no comparison has 2 shared seeds yet; no test."]
    old_runs = [
        {**r, "held_out": {**r["held_out"], "judge_group_sem_ent": r["held_out"]["old_judge_group_sem_ent"]}}
        for r in runs
    ]
    old = paired_rows(old_runs, family, primary)
    lines = [
        "",
        f"The primary family with this judge: the page's primary comparisons (fixed before the runs) on held out "
        f"{', '.join(primary)}, with `judge_group_sem_ent` this judge's; {len(new)} tests of the "
        f"{len(family) * len(primary)} (the comparisons whose settings share 2 or more seeds here, over those seeds: "
        "a family of fewer tests is corrected less). Holm: Holm's step-down adjustment over them (an effect is "
        "claimed only where Holm < 0.05); old-judge Holm: the same tests with the earlier judge's figure.",
        "",
        "| comparison | measure | seeds | difference [95 % CI] | sd | p | Holm | detectable (80 %) | old-judge Holm |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r, adjusted, before in zip(new, holm([r["p"] for r in new]), holm([r["p"] for r in old])):
        lines.append(
            f"| {r['comparison']} | {r['measure']} | {_seeds(r['seeds'])} | {cell(interval(r['per_seed']))} "
            f"| {r['sd']:.3f} | {r['p']:.3f} | {adjusted:.3f}{' *' if adjusted < 0.05 else ''} "
            f"| {r['detectable']:.3f} | {before:.3f} |"
        )
    return [*lines, "", "`*` (Holm column): significant after the correction."]


def read_stored(path: Path, result: dict[str, Any], held: Held) -> Held:
    """The stored runs of an earlier results.json of the same settings, one for each of these runs.

    Returns:
        The stored runs' held-out measures (``rescore.stored_runs``), every key of ``held`` among them.

    Raises:
        MergeError: a damaged file, one of another experiment, other settings (the lexical threshold aside, as
            in a merge) or ``--quick`` where the results are not, or one missing a run of the results (named).
    """
    from rescore import stored_runs

    body = read_json_object(path)

    def fixed(cfg: Any) -> Any:
        return {k: v for k, v in cfg.items() if k != "lexical_threshold"} if isinstance(cfg, dict) else cfg

    same = fixed(body.get("config")) == fixed(result["config"]) and body.get("quick") == result["quick"]
    if body.get("experiment") != "grpo_diversity" or not same:
        raise MergeError(f"{path}: not a grpo_diversity results.json made with these settings ({result['config']})")
    _, stored = stored_runs(path)
    missing = set(held) - set(stored)
    if missing:
        raise MergeError(f"{path}: holds no stored run of {_names(missing)}: not the runs this page reran")
    return stored


def _moved(x: float) -> str:
    """An absolute change: 0 when equal to the last digit, else 3 decimals (small ones in exponent form)."""
    return "0" if x == 0 else f"{x:.3f}" if abs(x) >= 5e-4 else f"{x:.1e}"


def rerun_lines(held: Held, stored: Held, measures: Sequence[str], primary: Sequence[str], label: str) -> list[str]:
    """How far each held-out number moved from the stored runs to these reruns, over the same runs on both sides."""
    seeds = seeds_of(held)
    pairs = comparisons("grpo_diversity", [s for s in seeds if s != "base"])

    def mean(runs: Held, s: str, m: str) -> float:
        return float(sum(runs[(s, k)][m] for k in seeds[s]) / len(seeds[s]))

    def difference(runs: Held, a: str, b: str, m: str) -> float | None:
        shared = sorted(set(seeds[a]) & set(seeds[b]))
        return sum(runs[(a, k)][m] - runs[(b, k)][m] for k in shared) / len(shared) if shared else None

    lines = [
        "",
        f"## This rerun vs the stored runs ({label})",
        "",
        f"Each of the {len(held)} reruns against the stored run of the same setting and seed "
        f"({'; '.join(f'{s}: {_seeds(ks)}' for s, ks in seeds.items())}); a setting's mean and a difference's "
        "mean over the same seeds on both sides (the stored page's may hold more). Largest absolute change, "
        "rerun minus stored, over the runs (the run named), the settings' means and the paired differences' means "
        "(0: equal to the last digit):",
        "",
        "| measure | runs | settings' means | differences' means |",
        "|---|---|---|---|",
    ]
    for m in measures:
        key = max(held, key=lambda k: abs(held[k][m] - stored[k][m]))
        runs = abs(held[key][m] - stored[key][m])
        means = max(abs(mean(held, s, m) - mean(stored, s, m)) for s in seeds)
        moved = [
            abs(new - old)
            for a, b in pairs
            if (new := difference(held, a, b, m)) is not None and (old := difference(stored, a, b, m)) is not None
        ]
        where = f" ({_name(key)})" if runs else ""
        lines.append(f"| {m} | {_moved(runs)}{where} | {_moved(means)} | {_moved(max(moved)) if moved else '-'} |")
    further = [k for k in held if any(abs(held[k][m] - stored[k][m]) > SAME for m in measures)]
    lines += [
        "",
        f"Within {SAME:g} of the stored run in every held-out measure: {len(held) - len(further)} of {len(held)} "
        f"runs; moved further: {_names(further)}.",
        "",
        "The primary measures' means per setting, stored -> rerun (change), over the seeds listed:",
        "",
        "| setting | seeds | " + " | ".join(primary) + " |",
        "|---" * (len(primary) + 2) + "|",
    ]
    for s, ks in seeds.items():
        cells = [
            f"{mean(stored, s, m):.3f} -> {mean(held, s, m):.3f} ({mean(held, s, m) - mean(stored, s, m):+.3f})"
            for m in primary
        ]
        lines.append(f"| {s} | {_seeds(ks)} | " + " | ".join(cells) + " |")
    return [*lines, "", "Timings are wall clock on a loaded machine and are not compared."]
