"""The alerts' thresholds on labelled runs: GroupAlert (GRPO), RUQAlert and DRESSAlert (SFT); no training.

    python experiments/alert_calibration.py [--runs RESULTS_JSON] [--out DIR]

Reads the stored GRPO runs of 2026-11-28 (``docs/results/grpo_diversity/results_2026-11-28_stored.json``, the runs
the labels were written for; the page's 2026-12-05 rerun moves one label step by one): every run's 120 training
steps of rollout measures, its held-out measures after training, and the untrained base model's
on the same seed) and replays :class:`~lightning_div.measure.GroupAlert` on each run's steps as
``GroupDiversityMonitor`` feeds it (group Sem-Ent in the monitor's MiniLM space, the within-group
top-word share, the length-cut share, the NLL under the base model).

**The labels, fixed before any alert was replayed** (:func:`label`), from the held-out measures,
which no alert reads, against the untrained base model on the same seed:

* *breakdown*: held-out cut share >= 0.3, top-word share >= 0.3, or NLL under the base model at
  least 2 nats above the base model's own;
* *collapse*: no breakdown, and the judge's held-out group Sem-Ent (the base model's own space,
  which neither reward nor monitor uses) at most 0.6 x the base model's;
* *healthy*: neither.

A run's *label step* (for the lead time) is the first training step from which the same rule holds
on the rollouts' 10-step moving mean against their first 10 steps. A run stored twice under two
names (``grpo_lexical`` seeds 1 and 2 are ``grpo`` seeds 1 and 2 to the last digit) counts once.

**The split, by seed**: calibration seeds 0, 2, 4; held out seeds 1, 3. On the calibration runs
``warn_drop`` and ``nll_rise`` are chosen from :data:`GRID` (the other thresholds at their
defaults) by the mean of the collapse and breakdown alerts' F1; on the held-out runs the chosen and
the default thresholds are reported: per kind precision and recall with 95 % Wilson intervals, and
the lead time (label step minus the alert's first step; positive: the alert came first). The
breakdown label and the ``nll_rise`` alert both read NLL under the base model (held out vs in
training): that part of the agreement is by construction.

**The SFT alerts** (results.json's ``sft``, the page's ``SFT alerts`` sections):
:class:`~lightning_div.measure.alerts.RUQAlert` and :class:`~lightning_div.measure.alerts.DRESSAlert`
replayed on the stored supervised runs (``dress_vs_baseline``, ``ruq_over_training``) by
``_sft_alerts.py``, whose docstring holds their label rule (written before any replay) and split.

Writes ``DIR/results.json`` and ``DIR.md`` (default ``docs/results/alert_calibration``; its
``## Reading`` is written by hand and kept).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import _ruq_common as common
import _sft_alerts as sft
import numpy as np
from _environment import environment_lines
from _pages import kept_reading
from _stats import wilson

ROOT = Path(__file__).resolve().parent.parent
CALIBRATION_SEEDS = (0, 2, 4)
HELD_OUT_SEEDS = (1, 3)
WINDOW = 10
GRID = {"warn_drop": [0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5], "nll_rise": [0.5, 1.0, 1.5, 2.0, 3.0]}
DEFAULTS = {"warn_drop": 0.25, "nll_rise": 1.0}
KINDS = ("collapse", "breakdown")


def _broken(cut: float, top: float, nll_rise: float) -> bool:
    return cut >= 0.3 or top >= 0.3 or nll_rise >= 2.0


def label(held: dict[str, float], base: dict[str, float]) -> str:
    """A run's label from its held-out measures against the base model's (the rule in the module docstring)."""
    if _broken(held["cut_share"], held["top_word_share"], held["nll"] - base["nll"]):
        return "breakdown"
    if held["judge_group_sem_ent"] <= 0.6 * base["judge_group_sem_ent"]:
        return "collapse"
    return "healthy"


def label_step(steps: list[dict[str, float]], kind: str) -> int | None:
    """The first step from which the label's rule holds on the rollouts' moving mean (None: never)."""

    def mean(key: str, i: int) -> float:
        return float(np.mean([s[key] for s in steps[max(0, i - WINDOW + 1) : i + 1]]))

    start = {k: float(np.mean([s[k] for s in steps[:WINDOW]])) for k in ("judge_group_sem_ent", "nll")}
    for i in range(WINDOW, len(steps)):
        broken = _broken(mean("cut_share", i), mean("top_word_share", i), mean("nll", i) - start["nll"])
        if kind == "breakdown" and broken:
            return int(steps[i]["step"])
        if kind == "collapse" and not broken and mean("judge_group_sem_ent", i) <= 0.6 * start["judge_group_sem_ent"]:
            return int(steps[i]["step"])
    return None


def replay(steps: list[dict[str, float]], thresholds: dict[str, float]) -> dict[str, int | None]:
    """The first step each kind of alert fires, GroupAlert fed the steps as the callback feeds it."""
    from lightning_div.measure import GroupAlert

    alert = GroupAlert(warn_drop=thresholds["warn_drop"], nll_rise=thresholds["nll_rise"])
    first: dict[str, int | None] = dict.fromkeys(KINDS)
    for s in steps:
        kind, _ = alert.update(
            {
                "group_sem_ent": s["group_sem_ent"],
                "group_top_word_share": s["top_word_share"],
                "length_cut_share": s["cut_share"],
                "reference_nll": s["nll"],
            }
        )
        if kind is not None and first[kind] is None:
            first[kind] = int(s["step"])
    return first


def score(runs: list[dict[str, Any]], thresholds: dict[str, float]) -> dict[str, Any]:
    """Per kind: precision, recall, F1 and lead times of the alert against the labels."""
    out: dict[str, Any] = {}
    fired = [replay(r["steps"], thresholds) for r in runs]
    for kind in KINDS:
        tp = [(r, f) for r, f in zip(runs, fired) if f[kind] is not None and r["label"] == kind]
        alerted = sum(1 for f in fired if f[kind] is not None)
        labelled = sum(1 for r in runs if r["label"] == kind)
        precision, recall = wilson(len(tp), alerted), wilson(len(tp), labelled)
        p, q = precision["share"] or 0.0, recall["share"] or 0.0
        leads = [r["label_step"][kind] - f[kind] for r, f in tp if r["label_step"][kind] is not None]
        out[kind] = {
            "precision": precision,
            "recall": recall,
            "f1": 2 * p * q / (p + q) if p + q else 0.0,
            "lead_steps": leads,
        }
    out["alerts"] = [{"run": r["name"], "label": r["label"], **f} for r, f in zip(runs, fired)]
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--runs", type=Path, default=ROOT / "docs" / "results" / "grpo_diversity" / "results_2026-11-28_stored.json"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "alert_calibration")
    args = parser.parse_args(argv)
    stored = json.loads(args.runs.read_text(encoding="utf-8"))
    runs, seen = [], set()
    for r in stored["runs"]:
        key = json.dumps(r["held_out"], sort_keys=True)
        if key in seen:  # the same run stored under two names
            continue
        seen.add(key)
        base = stored["base"][str(r["seed"])]
        kind = label(r["held_out"], base)
        runs.append(
            {
                "name": f"{r['setting']} seed {r['seed']}",
                "seed": int(r["seed"]),
                "label": kind,
                "label_step": {k: label_step(r["steps"], k) for k in KINDS},
                "steps": r["steps"],
            }
        )
    calibration = [r for r in runs if r["seed"] in CALIBRATION_SEEDS]
    held_out = [r for r in runs if r["seed"] in HELD_OUT_SEEDS]
    grid = []
    for drop in GRID["warn_drop"]:
        for rise in GRID["nll_rise"]:
            s = score(calibration, {"warn_drop": drop, "nll_rise": rise})
            grid.append({"warn_drop": drop, "nll_rise": rise, "f1": (s["collapse"]["f1"] + s["breakdown"]["f1"]) / 2})
    # the best mean F1; on a tie the thresholds nearest the defaults (no preference invented)
    best = max(
        grid,
        key=lambda g: (
            round(g["f1"], 9),
            -abs(g["warn_drop"] - DEFAULTS["warn_drop"]) - abs(g["nll_rise"] - DEFAULTS["nll_rise"]),
        ),
    )
    chosen = {"warn_drop": best["warn_drop"], "nll_rise": best["nll_rise"]}
    results = {
        "experiment": "alert_calibration",
        "source": str(args.runs.relative_to(ROOT)) if args.runs.is_relative_to(ROOT) else str(args.runs),
        "labels": {r["name"]: {"label": r["label"], "label_step": r["label_step"]} for r in runs},
        "split": {"calibration_seeds": list(CALIBRATION_SEEDS), "held_out_seeds": list(HELD_OUT_SEEDS)},
        "grid": grid,
        "chosen": chosen,
        "defaults": DEFAULTS,
        "calibration": {"chosen": score(calibration, chosen), "defaults": score(calibration, DEFAULTS)},
        "held_out": {"chosen": score(held_out, chosen), "defaults": score(held_out, DEFAULTS)},
        "sft": sft.calibrate(sft.load_runs(ROOT)),
        "machine": common.machine(),
    }
    path = common.write_results(args.out, results)
    results = json.loads(path.read_text())
    from lightning_div._internal.io import atomic_write_text

    md = args.out.with_suffix(".md")
    atomic_write_text(md, page(results, kept_reading(md)))
    print(f"[alert_calibration] wrote {path} and {md}")
    return results


def _share(x: dict[str, Any]) -> str:
    if x["share"] is None:
        return "- (0 of 0)"
    return f"{x['share']:.2f} [{x['low']:.2f}, {x['high']:.2f}] ({x['hits']} of {x['n']})"


def page(result: dict[str, Any], reading: str = "") -> str:
    """The results page (markdown) from results.json's content; ``reading`` is the hand-written section kept."""
    labels = result["labels"]
    counts = {k: sum(1 for v in labels.values() if v["label"] == k) for k in ("healthy", *KINDS)}
    lines = [
        "# The alerts on held-out labelled runs: GroupAlert (GRPO), RUQAlert and DRESSAlert (SFT)",
        "",
        f"Written by `experiments/alert_calibration.py` from `{result['source']}` (no training): "
        f"{len(labels)} distinct runs labelled {counts}, calibration seeds {result['split']['calibration_seeds']}, "
        f"held out {result['split']['held_out_seeds']}. The SFT alerts from the stored SFT runs "
        f"({sum(c['runs'] for c in result['sft']['counts'].values())} distinct runs, sections below). "
        f"Machine: {result['machine']['description']} (loaded).",
        "",
    ]
    if reading:
        lines += [reading.rstrip(), ""]
    c = result["chosen"]
    lines += [
        f"## Held out: the chosen thresholds (warn_drop {c['warn_drop']}, nll_rise {c['nll_rise']}) "
        f"and the defaults (warn_drop {result['defaults']['warn_drop']}, nll_rise {result['defaults']['nll_rise']})",
        "",
        "| thresholds | kind | precision [95 % Wilson] | recall [95 % Wilson] | lead steps (label - alert) |",
        "|---|---|---|---|---|",
    ]
    for which in ("chosen", "defaults"):
        for kind in KINDS:
            s = result["held_out"][which][kind]
            leads = ", ".join(str(x) for x in s["lead_steps"]) or "-"
            lines.append(f"| {which} | {kind} | {_share(s['precision'])} | {_share(s['recall'])} | {leads} |")
    lines += ["", "## Calibration (the seeds the thresholds were chosen on)", ""]
    lines += ["| thresholds | kind | precision | recall | F1 |", "|---|---|---|---|---|"]
    for which in ("chosen", "defaults"):
        for kind in KINDS:
            s = result["calibration"][which][kind]
            lines.append(f"| {which} | {kind} | {_share(s['precision'])} | {_share(s['recall'])} | {s['f1']:.2f} |")
    lines += ["", "## Every run: its label and the first step of each alert (held out, chosen thresholds)", ""]
    lines += ["| run | label | label step | collapse alert | breakdown alert |", "|---|---|---|---|---|"]
    for a in result["held_out"]["chosen"]["alerts"] + result["calibration"]["chosen"]["alerts"]:
        lab = labels[a["run"]]
        step = lab["label_step"].get(lab["label"]) if lab["label"] != "healthy" else None
        lines.append(
            f"| {a['run']} | {lab['label']} | {step if step is not None else '-'} | "
            f"{a['collapse'] if a['collapse'] is not None else '-'} | {a['breakdown'] if a['breakdown'] is not None else '-'} |"
        )
    lines += ["", *sft.page_lines(result["sft"])]
    lines += ["", *environment_lines(result)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
