"""The SFT part of alert_calibration.py: RUQAlert and DRESSAlert replayed on the stored SFT runs (no training).

Reads the supervised fine-tuning runs already on disk, every one a few epochs with one validation
measurement per epoch (no measurement before training: ``num_sanity_val_steps=0``):

* ``docs/results/dress_vs_baseline/base/results.json`` (the page's regime: the shipped base model
  fine-tuned, seeds 0-4, 3 epochs), ``.../results.json`` and ``.../results_1500.json`` (the earlier
  from-scratch 2-layer GPT-2, seeds 0-2, 3 epochs): per epoch the validation loss, RUQ, and the greedy
  generations' Sem-Ent, top-cluster share, distinct-2 and EAD on the validation contexts, the losses;
* ``docs/results/ruq_over_training/base/results.json`` (10 epochs, seeds 0-1) and
  ``.../results.json`` (from scratch, 16 epochs, seeds 0-1): per epoch RUQ and the losses only (no
  generation measures per epoch).

A run stored twice under two names (``lambda_0`` is ``baseline``, ``lambda_30`` is
``dress_no_negatives``: the same numbers) counts once, under its first name.

**The labels, fixed before any alert was replayed** (:func:`transition_label`, :func:`run_label`), from
measures neither alert reads (RUQAlert reads ``val/ruq``; DRESSAlert reads Sem-Ent, the gold's
Sem-Ent, the top-cluster share and the training losses). An *event* is a change between two
consecutive validation measurements (epoch e-1 to epoch e) of one run:

* *breakdown*: the validation loss rose by at least 0.25 nats per token (perplexity x 1.28 or more)
  from e-1 to e (checked first);
* *collapse*: the generations' distinct-2 at e-1 was at least 0.01 (something to fall from), and
  both distinct-2 and EAD at e are at most half their value at e-1 (two lexical measures of the same
  greedy replies agreeing). Runs without per-epoch generation measures (``ruq_over_training``)
  can only be labelled breakdown;
* a run's label is its first event's kind and the epoch of that event (its *label epoch*); a run
  with no event is *healthy*.

The numbers of the rule (0.25 nats, a halving, the 0.01 floor) are one reasonable choice, not
calibrated themselves; a model that is degenerate from its first measurement (the from-scratch runs'
epoch 0, Sem-Ent 0 and distinct-2 0) has no event to label: nothing fell between two measurements.

**The replay**, as the monitors feed the alerts: :class:`~lightning_div.measure.alerts.RUQAlert`'s
``update({"val/ruq": ...})`` once per validation measurement (``RUQMonitor`` and
``TrainerDiversityMonitor`` check each validation RUQ against the last); :class:`DRESSAlert`'s
``update`` at every epoch's end, on runs that trained with ``DRESSReweighting``, with what
``callbacks/dress_guard.py``'s ``alert_values`` passes: the monitor's ``val/sem_ent``,
``val/sem_ent_gold`` (logged at the first measurement, kept in the trainer's metrics after),
``val/top_cluster_share``, ``train/loss_epoch`` and, only in an epoch that trained negatives,
``train/negative_loss_epoch`` (the stored mean over negative batches stands in for it). The gold
responses' top-cluster share was not stored, so the top-cluster sign uses its 0.8 floor alone (the
same rule whenever the gold's top share is at most 0.4).

**The split, by seed** (as for GroupAlert): even seeds calibrate, odd seeds are held out. On the
calibration runs ``RUQAlert.warn_drop`` and ``DRESSAlert.sem_ent_ratio`` are chosen from
:data:`GRID` by F1 (an alert's first firing in a run against the run's label, any kind); on a tie
(F1 0 everywhere included) the value nearest the default. On the held-out runs the chosen and the
default thresholds are reported: precision and recall with 95 % Wilson intervals, and the lead
(label epoch minus the alert's first epoch; positive: the alert came first).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _stats import wilson

#: The stored SFT runs: the name the page gives each source, and its path under the repository.
SOURCES = {
    "dress_vs_baseline (base)": "docs/results/dress_vs_baseline/base/results.json",
    "dress_vs_baseline (scratch, 3000)": "docs/results/dress_vs_baseline/results.json",
    "dress_vs_baseline (scratch, 1500)": "docs/results/dress_vs_baseline/results_1500.json",
    "ruq_over_training (base)": "docs/results/ruq_over_training/base/results.json",
    "ruq_over_training (scratch)": "docs/results/ruq_over_training/results.json",
}
BREAKDOWN_RISE = 0.25
COLLAPSE_FALL = 0.5
DISTINCT_FLOOR = 0.01
GRID = {"warn_drop": [2.0, 5.0, 10.0, 15.0, 20.0, 30.0], "sem_ent_ratio": [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]}
DEFAULTS = {"warn_drop": 10.0, "sem_ent_ratio": 0.5}
ALERTS = {"RUQAlert": "warn_drop", "DRESSAlert": "sem_ent_ratio"}


def transition_label(before: dict[str, Any], after: dict[str, Any]) -> str | None:
    """The event between two consecutive measurements: ``"breakdown"``, ``"collapse"`` or None (the docstring's rule)."""
    if after["val_loss"] - before["val_loss"] >= BREAKDOWN_RISE:
        return "breakdown"
    d0, d1, e0, e1 = before.get("distinct_2"), after.get("distinct_2"), before.get("ead"), after.get("ead")
    if d0 is None or d1 is None or e0 is None or e1 is None:
        return None
    if d0 >= DISTINCT_FLOOR and d1 <= COLLAPSE_FALL * d0 and e1 <= COLLAPSE_FALL * e0:
        return "collapse"
    return None


def run_label(epochs: list[dict[str, Any]]) -> tuple[str, int | None]:
    """A run's label and label epoch: its first event (``"healthy"``, None without one)."""
    for before, after in zip(epochs, epochs[1:]):
        kind = transition_label(before, after)
        if kind is not None:
            return kind, int(after["epoch"])
    return "healthy", None


def replay_ruq(epochs: list[dict[str, Any]], warn_drop: float | None) -> list[int]:
    """The epochs at which RUQAlert fires, fed ``val/ruq`` once per validation measurement as RUQMonitor feeds it."""
    from lightning_div.measure.alerts import RUQAlert

    alert = RUQAlert(warn_below=None, warn_drop=warn_drop)
    return [int(e["epoch"]) for e in epochs if alert.update({"val/ruq": e["val_ruq"]}, e["epoch"])[0] is not None]


def dress_values(e: dict[str, Any], gold: float | None) -> dict[str, float]:
    """What ``dress_guard.alert_values`` passes DRESSAlert at this epoch's end (stored names to logged keys)."""
    values = {"val/sem_ent": e["sem_ent"], "val/top_cluster_share": e["top_cluster_share"]}
    if gold is not None:
        values["val/sem_ent_gold"] = gold
    values["train/loss_epoch"] = e["train_loss"]
    if e.get("negative_loss") is not None:  # only an epoch that trained negatives passes their loss
        values["train/negative_loss_epoch"] = e["negative_loss"]
    return values


def replay_dress(epochs: list[dict[str, Any]], sem_ent_ratio: float) -> list[int]:
    """The epochs at which DRESSAlert says collapse, fed at every epoch's end as ``run_guard`` feeds it."""
    from lightning_div.measure.alerts import DRESSAlert

    alert = DRESSAlert(sem_ent_ratio=sem_ent_ratio)
    gold = None
    fired = []
    for e in epochs:
        gold = e.get("sem_ent_gold") if e.get("sem_ent_gold") is not None else gold  # the trainer keeps it
        if alert.update(dress_values(e, gold), int(e["epoch"]))[0] is not None:
            fired.append(int(e["epoch"]))
    return fired


def _row(e: dict[str, Any], ruq_key: str, loss_key: str, val_loss_key: str) -> dict[str, Any]:
    negative = e.get("negative_batch_loss") if (e.get("negative_batches") or 0) > 0 else None
    return {
        "epoch": int(e["epoch"]),
        "val_loss": e[val_loss_key],
        "val_ruq": e[ruq_key],
        "train_loss": e.get(loss_key),
        "negative_loss": negative,
        "distinct_2": e.get("val_distinct_2"),
        "ead": e.get("val_ead"),
        "sem_ent": e.get("val_sem_ent"),
        "sem_ent_gold": e.get("val_sem_ent_gold"),
        "top_cluster_share": e.get("val_top_cluster_share"),
    }


def load_runs(root: Path, sources: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Every distinct stored SFT run, its epochs in one shape (:func:`_row`), its label and label epoch."""
    runs: list[dict[str, Any]] = []
    for source, rel in (sources or SOURCES).items():
        stored = json.loads((root / rel).read_text(encoding="utf-8"))
        seen: set[str] = set()
        for r in stored["runs"] + stored.get("lambda_sweep", []):
            if "setting" in r:  # dress_vs_baseline
                name = f"{source}: {r['setting']} seed {r['seed']}"
                epochs = [_row(e, "val_ruq", "train_loss", "val_loss") for e in r["epochs"]]
                dress = r.get("dress") is not None
            else:  # ruq_over_training
                smoothing = f", smoothing {r['label_smoothing']}" if "label_smoothing" in r else ""
                name = f"{source}: dropout {r['dropout']}{smoothing} seed {r['seed']}"
                epochs = [_row(e, "val/ruq", "train/loss_epoch", "val/loss") for e in r["epochs"]]
                dress = False
            key = json.dumps([[e["val_loss"], e["val_ruq"], e["distinct_2"], e["sem_ent"]] for e in epochs])
            if key in seen:  # the same run stored under two names
                continue
            seen.add(key)
            kind, at = run_label(epochs)
            events = [
                {"epoch": int(b["epoch"]), "kind": k}
                for a, b in zip(epochs, epochs[1:])
                if (k := transition_label(a, b)) is not None
            ]
            runs.append(
                {
                    "name": name,
                    "source": source,
                    "seed": int(r["seed"]),
                    "dress": dress,
                    "lexical": all(e["distinct_2"] is not None for e in epochs),
                    "label": kind,
                    "label_epoch": at,
                    "events": events,
                    "epochs": epochs,
                }
            )
    return runs


def _replay(alert: str) -> Callable[[list[dict[str, Any]], float], list[int]]:
    return replay_ruq if alert == "RUQAlert" else replay_dress


def score(runs: list[dict[str, Any]], alert: str, threshold: float) -> dict[str, Any]:
    """Precision, recall (Wilson), F1 and lead epochs of the alert's first firing against the runs' labels."""
    fired = [_replay(alert)(r["epochs"], threshold) for r in runs]
    labelled = [r["label"] != "healthy" for r in runs]
    tp = [(r, f) for r, f, lab in zip(runs, fired, labelled) if f and lab]
    precision = wilson(len(tp), sum(1 for f in fired if f))
    recall = wilson(len(tp), sum(labelled))
    p, q = precision["share"] or 0.0, recall["share"] or 0.0
    return {
        "precision": precision,
        "recall": recall,
        "f1": 2 * p * q / (p + q) if p + q else 0.0,
        "lead_epochs": [r["label_epoch"] - f[0] for r, f in tp],
        "alerts": [{"run": r["name"], "label": r["label"], "fired": f} for r, f in zip(runs, fired)],
    }


def counts(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per source: distinct runs, transitions, events by kind, and runs by label."""
    out: dict[str, Any] = {}
    for source in dict.fromkeys(r["source"] for r in runs):
        sel = [r for r in runs if r["source"] == source]
        events = [e["kind"] for r in sel for e in r["events"]]
        out[source] = {
            "runs": len(sel),
            "dress_runs": sum(r["dress"] for r in sel),
            "seeds": sorted({r["seed"] for r in sel}),
            "transitions": sum(len(r["epochs"]) - 1 for r in sel),
            "lexical": all(r["lexical"] for r in sel),
            "events": {k: events.count(k) for k in ("collapse", "breakdown")},
            "labels": {k: sum(r["label"] == k for r in sel) for k in ("healthy", "collapse", "breakdown")},
        }
    return out


def calibrate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The SFT section of results.json: counts, labels, the grid on the calibration seeds, held-out figures."""
    calibration = [r for r in runs if r["seed"] % 2 == 0]
    held_out = [r for r in runs if r["seed"] % 2 == 1]
    out: dict[str, Any] = {
        "sources": SOURCES,
        "counts": counts(runs),
        "labels": {
            r["name"]: {"label": r["label"], "label_epoch": r["label_epoch"], "events": r["events"]} for r in runs
        },
        "split": {"calibration": "even seeds", "held_out": "odd seeds"},
        "defaults": DEFAULTS,
        "alerts": {},
    }
    for alert, name in ALERTS.items():
        pool = [r for r in runs if r["dress"]] if alert == "DRESSAlert" else runs
        cal, held = [r for r in pool if r in calibration], [r for r in pool if r in held_out]
        grid = [{name: t, "f1": score(cal, alert, t)["f1"]} for t in GRID[name]]
        best = max(grid, key=lambda g: (round(g["f1"], 9), -abs(g[name] - DEFAULTS[name])))
        chosen = best[name]
        out["alerts"][alert] = {
            "threshold": name,
            "runs": {"calibration": len(cal), "held_out": len(held)},
            "labelled": {
                "calibration": sum(r["label"] != "healthy" for r in cal),
                "held_out": sum(r["label"] != "healthy" for r in held),
            },
            "grid": grid,
            "chosen": chosen,
            "default": DEFAULTS[name],
            "calibration": {"chosen": score(cal, alert, chosen), "default": score(cal, alert, DEFAULTS[name])},
            "held_out": {"chosen": score(held, alert, chosen), "default": score(held, alert, DEFAULTS[name])},
        }
    return out


def _share(x: dict[str, Any]) -> str:
    if x["share"] is None:
        return "- (0 of 0)"
    return f"{x['share']:.2f} [{x['low']:.2f}, {x['high']:.2f}] ({x['hits']} of {x['n']})"


def page_lines(sft: dict[str, Any]) -> list[str]:
    """The page's SFT sections (markdown lines) from results.json's ``sft``."""
    lines = [
        "## SFT alerts: the labelled events in the stored runs",
        "",
        "Events between two consecutive validation measurements, by the rule in `experiments/_sft_alerts.py` "
        "(breakdown: validation loss up 0.25 nats or more; collapse: distinct-2 and EAD of the generations "
        "both halved; written before any replay). Calibration: even seeds; held out: odd seeds.",
        "",
        "| source | distinct runs (with DRESS) | seeds | transitions | collapse events | breakdown events | runs healthy / collapse / breakdown |",
        "|---|---|---|---|---|---|---|",
    ]
    for source, c in sft["counts"].items():
        lex = "" if c["lexical"] else " (no generation measures: breakdown only)"
        labels = " / ".join(str(c["labels"][k]) for k in ("healthy", "collapse", "breakdown"))
        lines.append(
            f"| {source}{lex} | {c['runs']} ({c['dress_runs']}) | {c['seeds']} | {c['transitions']} | "
            f"{c['events']['collapse']} | {c['events']['breakdown']} | {labels} |"
        )
    lines += [
        "",
        "## SFT alerts: held out (odd seeds) and calibration (even seeds)",
        "",
        "| alert | threshold | runs (labelled) | precision [95 % Wilson] | recall [95 % Wilson] | lead epochs (label - alert) |",
        "|---|---|---|---|---|---|",
    ]
    for half in ("held_out", "calibration"):
        for alert, a in sft["alerts"].items():
            for which in ("chosen", "default"):
                s = a[half][which]
                value = a["chosen"] if which == "chosen" else a["default"]
                leads = ", ".join(str(x) for x in s["lead_epochs"]) or "-"
                lines.append(
                    f"| {alert} ({half.replace('_', ' ')}) | {which}: {a['threshold']} {value:g} | "
                    f"{a['runs'][half]} ({a['labelled'][half]}) | {_share(s['precision'])} | {_share(s['recall'])} | {leads} |"
                )
    lines += ["", "## SFT alerts: every labelled or alerted run (default thresholds)", ""]
    lines += ["| run | label | label epoch | RUQAlert fires at | DRESSAlert fires at |", "|---|---|---|---|---|"]
    fired: dict[str, dict[str, list[int]]] = {}
    for alert, a in sft["alerts"].items():
        for half in ("held_out", "calibration"):
            for x in a[half]["default"]["alerts"]:
                fired.setdefault(x["run"], {})[alert] = x["fired"]
    for run, lab in sft["labels"].items():
        f = fired.get(run, {})
        if lab["label"] == "healthy" and not any(f.values()):
            continue
        dress = ", ".join(map(str, f["DRESSAlert"])) or "-" if "DRESSAlert" in f else "(no DRESS)"
        lines.append(
            f"| {run} | {lab['label']} | {lab['label_epoch'] if lab['label_epoch'] is not None else '-'} | "
            f"{', '.join(map(str, f.get('RUQAlert', []))) or '-'} | {dress} |"
        )
    return lines
