"""Rescore saved held-out replies of the GRPO and DivPO experiments with the one validated judge (issue 62, item 2).

    python experiments/rescore.py REPLIES... [--check RESULTS.json ...] [--out DIR] [--quiet]
    python experiments/rescore.py --quick [--out DIR]

``REPLIES``: saved-replies files, or folders of them (``grpo_diversity.py --save-replies`` and
``divpo.py --save-replies`` write ``<out>/replies/<setting>_seed<seed>.json``; a folder holding a
``replies/`` folder is read there). Files of both experiments may be given together; each is
rescored apart.

**The judge** (chosen on the GRPO and DivPO pages, section "Judge for the rescoring (chosen before it)",
before any rescoring, from ``docs/results/sement_validity.md``): the untouched base model's
(``local:chitchat-gpt2``) hidden states, **mean pooling**, k-means with **k = 8** (faiss seed 27) fitted
on the **2,000 gold replies of** ``chitchat:pretrain`` that the validity experiment drew
(``sement_validity.contexts_and_references``): the same encoder, pooling, k, cluster texts and seed as
the validity page's ``base_mean/k8`` row, so its figures (group Sem-Ent ranks temperature at G = 8 and
32 prompts with rho 0.96 [0.94, 0.97]) apply to this judge as it is.

Per run: in the judge's space, group Sem-Ent (the mean over prompts of the entropy, in nats, of a
prompt's G replies' cluster shares: the pages' ``judge_group_sem_ent`` / ``group_sem_ent``) and the
mean number of clusters per group; beside them within-group distinct-2 (no judge: it is the figure the
stored run measured on the same replies, so ``--check`` can tell that the replies are the run's) and,
for GRPO, the share cut at the length limit. Per setting the mean over seeds with a 95 % t-interval,
and the pages' paired differences (GRPO: each setting minus ``grpo``, ``grpo_semantic_kl - grpo_kl``;
DivPO: ``divpo_* - dpo``, ``dpo - base``) with p and the smallest difference the seeds detect at 80 %
power (``experiments/_stats.py``).

``--check RESULTS.json``: the experiment's stored ``results.json`` (or a part's): every rescored run's
within-group distinct-2 must equal the stored run's (1e-9), else the rescoring stops naming the file:
replies of another run (or another environment's rerun) are not rescored as this one.

Writes ``DIR/results.json`` (default ``docs/results/rescore``), whole or not at all. ``--quick``: the
saved replies of ``--quick --save-replies`` runs of both experiments (``tests/data/rescore``) with a
small judge (40 references, k = 3: the validity experiment's ``--quick`` draw): a smoke test, its
numbers mean nothing. Mistakes (a missing or damaged file, two files of one run, a failed check): one
line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from _environment import environment
from _merge import MergeError, fail, read_json_object
from _replies import read_replies
from _stats import interval, paired

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: The judge chosen on the pages (``docs/results/grpo_diversity.md``, ``docs/results/divpo.md``).
JUDGE: dict[str, Any] = {
    "encoder": "local:chitchat-gpt2",
    "pooling": "mean",
    "num_clusters": 8,
    "kmeans_seed": 27,
    "references": "sement_validity FULL: 2000 gold replies of chitchat:pretrain, seed 0",
}
QUICK_JUDGE: dict[str, Any] = {
    **JUDGE,
    "num_clusters": 3,
    "references": "sement_validity QUICK: 40 gold replies of chitchat:pretrain, seed 0",
}
QUICK_REPLIES = ROOT / "tests" / "data" / "rescore"
#: What each run gets (``cut_share``: GRPO's replies carry their cut flags).
MEASURES = ("group_sem_ent", "group_clusters", "distinct_2")
#: The stored measure ``--check`` compares ``distinct_2`` with, per experiment.
STORED_DISTINCT_2 = {"grpo_diversity": "distinct_2", "divpo": "group_distinct_2"}
CHECK_TOLERANCE = 1e-9


def comparisons(experiment: str, settings: Sequence[str]) -> list[tuple[str, str]]:
    """The pages' paired differences among ``settings``: ``(setting, baseline)``, both present."""
    if experiment == "grpo_diversity":
        pairs = [(s, "grpo") for s in settings if s not in ("base", "grpo")] + [("grpo_semantic_kl", "grpo_kl")]
    else:
        pairs = [(s, "dpo") for s in settings if s.startswith("divpo")] + [("dpo", "base")]
    return [(a, b) for a, b in pairs if a in settings and b in settings]


def score(record: dict[str, Any], assign: Callable[[list[str]], Sequence[int]]) -> dict[str, float]:
    """One run's measures in the judge's space (``assign``: texts -> cluster ids), with distinct-2 beside."""
    from lightning_div.metrics import group_classes, group_distinct_n, group_semantic_entropy

    g = record["num_generations"]
    texts = [r for group in record["groups"] for r in group["replies"]]
    ids = [int(i) for i in assign(texts)]
    out = {
        "group_sem_ent": group_semantic_entropy(ids, g),
        "group_clusters": group_classes(ids, g),
        "distinct_2": group_distinct_n(texts, g, 2),
    }
    if all("cut" in group for group in record["groups"]):
        flags = [c for group in record["groups"] for c in group["cut"]]
        out["cut_share"] = sum(flags) / len(flags)
    return out


class Judge:
    """The validated judge: the base model's mean-pooled hidden states, k-means on the validity page's references.

    Args:
        quick: the validity experiment's ``--quick`` references (40) and k = 3 instead of 2,000 and k = 8.
    """

    def __init__(self, quick: bool = False) -> None:
        import sement_validity

        from lightning_div.semantic.clusters import SemanticClusters
        from lightning_div.semantic.encoder import ResponseEncoder

        self.config = dict(QUICK_JUDGE if quick else JUDGE)
        _, self.references = sement_validity.contexts_and_references(
            sement_validity.QUICK if quick else sement_validity.FULL
        )
        # as sement_validity.label_all builds its spaces: the same encoder, pooling, batch and k-means seed
        self.encoder = ResponseEncoder(
            self.config["encoder"], pooling=self.config["pooling"], batch_size=64, show_progress=False
        )
        self.clusters = SemanticClusters(
            num_clusters=self.config["num_clusters"], seed=self.config["kmeans_seed"], show_progress=False
        ).fit(self.encoder.encode(self.references))

    def assign(self, texts: list[str]) -> list[int]:
        """The cluster id of each text (each distinct text embedded once)."""
        import numpy as np

        unique = list(dict.fromkeys(texts))
        ids = dict(zip(unique, np.asarray(self.clusters.assign(self.encoder.encode(unique))).tolist()))
        return [int(ids[t]) for t in texts]


def gather(paths: Sequence[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """Every saved-replies file of ``paths`` (files, folders of them, or folders holding ``replies/``), read.

    Raises:
        MergeError: a path that does not exist, a folder without saved replies, a damaged file, or two
            files of one run (experiment, setting and seed) with other replies, named (the same replies twice,
            as parts of one seed each keep the base model's, are read once).
    """
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            folder = path / "replies" if (path / "replies").is_dir() else path
            found = sorted(folder.glob("*.json"))
            if not found:
                raise MergeError(f"{path}: a folder without saved replies (<setting>_seed<seed>.json)")
            files += found
        elif path.exists():
            files.append(path)
        else:
            raise MergeError(f"{path}: no such file or folder")
    seen: dict[tuple[str, str, int], tuple[Path, dict[str, Any]]] = {}
    for f in files:
        r = read_replies(f)
        key = (r["experiment"], r["setting"], r["seed"])
        if key in seen:
            if seen[key][1] == r:  # the same replies twice (the base model's, kept by every part of a seed): once
                continue
            raise MergeError(
                f"{seen[key][0]} and {f} are both {key[0]} {key[1]} seed {key[2]}, with other replies: give each run once"
            )
        seen[key] = (f, r)
    return list(seen.values())


def stored_runs(path: Path) -> tuple[str, dict[tuple[str, int], dict[str, Any]]]:
    """A stored ``results.json``: its experiment and its held-out measures per (setting as the page names it, seed).

    Raises:
        MergeError: a damaged file, or one of neither experiment.
    """
    part = read_json_object(path)
    experiment = part.get("experiment")
    if experiment not in STORED_DISTINCT_2 or not isinstance(part.get("runs"), list):
        raise MergeError(f"{path}: not a results.json of grpo_diversity or divpo (its 'experiment' and 'runs')")
    held: dict[tuple[str, int], dict[str, Any]] = {}
    fixed = part.get("config", {}).get("lexical_threshold", 0.5) if isinstance(part.get("config"), dict) else 0.5
    for run in part["runs"]:
        setting = str(run.get("setting"))
        threshold = run.get("lexical_threshold", fixed)
        if setting == "grpo_lexical" and threshold != 0.5:  # grpo_diversity.run_name: a matched threshold
            setting = f"grpo_lexical_j{threshold:g}"
        held[(setting, int(run.get("seed", -1)))] = run.get("held_out", {})
    for seed, measures in (part.get("base") or {}).items():  # grpo_diversity keeps the base model apart
        held[("base", int(seed))] = measures
    return str(experiment), held


def check(rescored: dict[str, Any], results: Sequence[Path]) -> None:
    """Every rescored run that a stored results.json holds must have the stored run's within-group distinct-2.

    Raises:
        MergeError: a run whose saved replies give another distinct-2 than the stored run (named with both files).
    """
    for path in results:
        experiment, held = stored_runs(path)
        for run in rescored.get(experiment, {}).get("runs", []):
            stored = held.get((run["setting"], run["seed"]), {}).get(STORED_DISTINCT_2[experiment])
            if stored is not None and abs(stored - run["distinct_2"]) > CHECK_TOLERANCE:
                raise MergeError(
                    f"{run['file']}: within-group distinct-2 {run['distinct_2']:.6f}, but {path} stored "
                    f"{stored:.6f} for {run['setting']} seed {run['seed']}: these are not the replies that run measured"
                )


def summarise(experiment: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per setting the mean over seeds (95 % t-interval); the pages' paired differences, by seed."""
    by: dict[str, dict[int, dict[str, Any]]] = {}
    for r in runs:
        by.setdefault(r["setting"], {})[r["seed"]] = r
    measures = [m for m in (*MEASURES, "cut_share") if all(m in r for r in runs)]
    out: dict[str, Any] = {"settings": {}, "differences": {}}
    for s, runs_of in by.items():
        out["settings"][s] = {m: interval([runs_of[k][m] for k in sorted(runs_of)]) for m in measures}
    for a, b in comparisons(experiment, list(by)):
        seeds = sorted(set(by[a]) & set(by[b]))
        if not seeds:
            continue
        diffs = {m: [by[a][k][m] - by[b][k][m] for k in seeds] for m in measures}
        out["differences"][f"{a} - {b}"] = {
            m: {**interval(d), **({"test": paired(d)} if len(d) > 1 else {})} for m, d in diffs.items()
        }
    return out


def rescore(
    records: list[tuple[Path, dict[str, Any]]],
    assign: Callable[[list[str]], Sequence[int]],
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Per experiment: every run scored, in (setting, seed) order, and :func:`summarise`'s figures."""
    out: dict[str, Any] = {}
    for f, record in sorted(records, key=lambda fr: (fr[1]["experiment"], fr[1]["setting"], fr[1]["seed"])):
        row = {"setting": record["setting"], "seed": record["seed"], "step": record["step"], "file": str(f)}
        row.update(score(record, assign))
        out.setdefault(record["experiment"], {"runs": []})["runs"].append(row)
        say(
            f"[rescore] {record['experiment']} {record['setting']} seed {record['seed']}: "
            + ", ".join(f"{k} {v:.3f}" for k, v in row.items() if isinstance(v, float))
        )
    for experiment, block in out.items():
        block["summary"] = summarise(experiment, block["runs"])
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("replies", nargs="*", type=Path, help="saved-replies files or folders (--save-replies)")
    parser.add_argument("--quick", action="store_true", help=f"the fixture {QUICK_REPLIES} and a small judge")
    parser.add_argument("--check", nargs="+", type=Path, default=[], help="stored results.json the replies must match")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "rescore")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    if not args.replies and not args.quick:
        parser.error("give saved-replies files or folders (or --quick)")

    def say(line: str) -> None:
        if not args.quiet:
            print(line, flush=True)

    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        records = gather(args.replies or [QUICK_REPLIES / "grpo_diversity", QUICK_REPLIES / "divpo"])
        for path in args.check:  # a damaged --check file is named before the judge is built
            stored_runs(path)
    except MergeError as err:
        fail("rescore.py", err)
    say(f"[rescore] {len(records)} runs' replies; building the judge ...")
    import torch

    torch.set_num_threads(args.threads)
    judge = Judge(quick=args.quick)
    say(f"[rescore] judge: {judge.config} fitted in {time.perf_counter() - start:.0f} s")
    rescored = rescore(records, judge.assign, say)
    try:
        check(rescored, args.check)
    except MergeError as err:
        fail("rescore.py", err)
    result = {
        "experiment": "rescore",
        "quick": args.quick,
        "judge": judge.config,
        "checked_against": [str(p) for p in args.check],
        "environment": environment(),
        "rescored": rescored,
        "wall_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu_start,
    }
    from lightning_div._internal.io import atomic_write_text

    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "results.json", json.dumps(result, indent=1, allow_nan=False))
    say(f"[rescore] wrote {args.out / 'results.json'} in {result['wall_s']:.0f} s ({result['cpu_s']:.0f} s CPU)")
    return result


if __name__ == "__main__":
    main()
