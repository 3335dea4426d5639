"""Does Sem-Ent see a change of diversity at the sizes the monitors measure? decTest at 50-1,000 responses and G = 4-16.

    python experiments/sement_validity.py [--quick] [--out DIR] [--threads 1]

The decTest page (``dectest_temperature.py``) scores sets of 10 responses; the monitors score other
sizes: :class:`~lightning_div.callbacks.SemanticDiversityMonitor` one response per context over
``num_contexts`` contexts (100-1,000), the GRPO monitor groups of G = 4-16 completions per prompt
(a few prompts a step; 32 held out). Here the shipped base model (``local:chitchat-gpt2``) samples,
as decTest does (pure temperature, no n-gram blocking), at each value of a temperature sweep
(and a top-p sweep at temperature 1) a *pool*: one reply to each of ``pool`` distinct validation
contexts (for the sets; the same contexts at every value, as a monitor's fixed sample is the same
at every measurement), and ``group_pool`` other validation prompts x 16 replies (for the groups,
the temperature sweep only). Sets of every size are drawn from a value's pool with replacement, as
a monitor's fixed sample is a draw of contexts: ``sets_per_value`` sets per value and size (for
groups: ``prompts`` prompts, and G of each drawn prompt's 16 replies). Each set is scored by

* Sem-Ent (sets) or group Sem-Ent (groups) over k-means clusters (each k of ``ks``) fitted on
  gold training replies of the base model's corpus, in each space: all-MiniLM-L6-v2 (the package's
  default encoder, mean pooling), and the base model's own hidden states with each pooling
  (``last_token``, ``mean``);
* the lexical anchors beside it: distinct-1/2 and EAD (sets), within-group distinct-2 (groups).

Per metric and size: Spearman's rho of the score with the swept value over all sets and its 95 %
percentile-bootstrap interval (``dec_test_from_scores``), and the noise of one measurement: the
standard deviation of the score over the sets at temperature 1.0 (top-p 1.0), from which the
smallest change two measurements tell apart at 95 % is ``1.96 * sqrt(2) * sd``, beside the change
one temperature step (0.2, from 1.0 down to 0.8) makes. Writes ``DIR/results.json`` and the page
``DIR.md`` (default ``docs/results/sement_validity``; its ``## Reading`` is written by hand and kept).
``--quick``: a smoke test of every code path, its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import _ruq_common as common
import numpy as np
from _environment import environment_lines
from _pages import kept_reading

ROOT = Path(__file__).resolve().parent.parent
#: The spaces: (name, encoder, pooling).
SPACES = (
    ("minilm", "minilm", "mean"),
    ("base_last_token", "local:chitchat-gpt2", "last_token"),
    ("base_mean", "local:chitchat-gpt2", "mean"),
)
FULL: dict[str, Any] = {
    "model": "local:chitchat-gpt2",
    "temperatures": [0.2, 0.4, 0.6, 0.8, 1.0, 1.2],
    "top_ps": [0.2, 0.4, 0.6, 0.8, 1.0],
    "pool": {"temperature": 1000, "top_p": 300},  # distinct contexts, one reply each, per value
    "sizes": {"temperature": [50, 100, 300, 1000], "top_p": [50, 100, 300]},
    "group_pool": 48,  # prompts x group_replies replies per temperature
    "group_replies": 16,  # a set's G replies of a prompt are drawn from these
    "group_sizes": [4, 8, 16],  # G
    "group_prompts": [4, 32],  # prompts per measured set: a training step's and a held-out evaluation's
    "sets_per_value": 20,
    "ks": [5, 8, 20, 50],
    "references": 2000,
    "max_new_tokens": 24,
    "n_boot": 1000,
    "seed": 0,
}
QUICK: dict[str, Any] = {
    **FULL,
    "temperatures": [0.4, 0.8, 1.0, 1.2],
    "top_ps": [0.5, 1.0],
    "pool": {"temperature": 12, "top_p": 6},
    "sizes": {"temperature": [5, 10], "top_p": [5]},
    "group_pool": 3,
    "group_replies": 4,
    "group_sizes": [2, 4],
    "group_prompts": [2],
    "sets_per_value": 3,
    "ks": [3],
    "references": 40,
    "max_new_tokens": 8,
    "n_boot": 50,
}
SET_LEXICAL = ("distinct_1", "distinct_2", "ead")


def contexts_and_references(cfg: dict[str, Any]) -> tuple[list[list[str]], list[str]]:
    """The validation contexts the pools are sampled after, and the gold replies the clusters are fitted on.

    One generator seeded by ``cfg["seed"]`` draws both, in this order (``experiments/rescore.py`` draws the
    validated judge's cluster texts through this function, so they are the ones this page measured).

    Raises:
        ValueError: fewer validation contexts than the pools need.
    """
    from lightning_div.datamodules import read_pairs

    rng = np.random.default_rng(cfg["seed"])
    val = read_pairs("chitchat:validation", max_turns=2)
    need = max(cfg["pool"].values()) + cfg["group_pool"]
    if need > len(val):
        raise ValueError(f"the pools need {need} distinct validation contexts; chitchat:validation has {len(val)}")
    contexts = [list(val[i].context) for i in rng.permutation(len(val))[:need]]
    gold = list(dict.fromkeys(p.response for p in read_pairs("chitchat:pretrain", max_turns=1)))
    references = [gold[i] for i in sorted(rng.choice(len(gold), min(cfg["references"], len(gold)), replace=False))]
    return contexts, references


def encoders(cfg: dict[str, Any]) -> dict[str, Any]:
    """One ResponseEncoder per space (the base model's two poolings share nothing but the weights' file)."""
    from lightning_div.cli.meta_eval import default_encoder_path
    from lightning_div.semantic.encoder import ResponseEncoder

    out = {}
    for name, encoder, pooling in SPACES:
        path = default_encoder_path() if encoder == "minilm" else encoder
        out[name] = ResponseEncoder(path, pooling=pooling, batch_size=64, show_progress=False)
    return out


def sample_pools(cfg: dict[str, Any], adapter: Any, contexts: list[Any]) -> dict[str, Any]:
    """Per sweep and value, one reply to each of ``pool`` contexts; per temperature, ``group_pool`` prompts x G_max."""
    from lightning_div.meta_eval.data import DEC_TEST_SAMPLING

    pools: dict[str, Any] = {"temperature": {}, "top_p": {}, "groups": {}}
    for swept, values in (("temperature", cfg["temperatures"]), ("top_p", cfg["top_ps"])):
        n = cfg["pool"][swept]
        for i, v in enumerate(values):
            # the same contexts at every value, as a monitor's fixed sample is the same at every measurement
            chosen = contexts[:n]
            kwargs = {**DEC_TEST_SAMPLING, "temperature": v} if swept == "temperature" else {**DEC_TEST_SAMPLING}
            if swept == "top_p":
                kwargs["top_p"] = v
            seed = cfg["seed"] * 1000 + i + (0 if swept == "temperature" else 100)
            pools[swept][str(v)] = adapter.generate(chosen, num_return_sequences=1, seed=seed, **kwargs)
            print(f"[sement_validity] {swept} {v}: {n} replies", flush=True)
    offset = max(cfg["pool"].values())  # the groups' prompts: other contexts than the sets'
    for i, v in enumerate(cfg["temperatures"]):
        chosen = contexts[offset : offset + cfg["group_pool"]]
        kwargs = {**DEC_TEST_SAMPLING, "temperature": v}
        g = cfg["group_replies"]
        replies = adapter.generate(chosen, num_return_sequences=g, seed=cfg["seed"] * 1000 + 500 + i, **kwargs)
        pools["groups"][str(v)] = [replies[j * g : (j + 1) * g] for j in range(len(chosen))]
        print(f"[sement_validity] groups, temperature {v}: {len(chosen)} prompts x {g}", flush=True)
    return pools


def label_all(cfg: dict[str, Any], spaces: dict[str, Any], references: list[str], texts: list[str]) -> dict[str, Any]:
    """Cluster ids of every text, per space and k: ``{"minilm/k20": {text: id}}`` (each text embedded once)."""
    from lightning_div.semantic.clusters import SemanticClusters

    unique = list(dict.fromkeys(texts))
    labels: dict[str, dict[str, int]] = {}
    for name, encoder in spaces.items():
        start = time.perf_counter()
        ref = encoder.encode(references)
        emb = encoder.encode(unique)
        for k in cfg["ks"]:
            clusters = SemanticClusters(num_clusters=k, seed=27, show_progress=False).fit(ref)
            ids = np.asarray(clusters.assign(emb))
            labels[f"{name}/k{k}"] = dict(zip(unique, ids.tolist()))
        print(f"[sement_validity] {name}: {len(unique)} texts in {time.perf_counter() - start:.0f} s", flush=True)
    return labels


def score_sets(cfg: dict[str, Any], pools: dict[str, list[str]], sizes: list[int], labels: dict[str, Any], vocab: int):
    """Per size: each set's swept value and every metric's score (sets drawn from a value's pool with replacement)."""
    from lightning_div.metrics import distinct_n, expectation_adjusted_distinct, semantic_entropy

    rng = np.random.default_rng(cfg["seed"])
    out = {}
    for n in sizes:
        values, scores = [], {m: [] for m in [*labels, *SET_LEXICAL]}
        for v, pool in pools.items():
            for _ in range(cfg["sets_per_value"]):
                chosen = [pool[i] for i in rng.integers(0, len(pool), n)]
                values.append(float(v))
                for space, ids in labels.items():
                    k = int(space.rsplit("/k", 1)[1])
                    scores[space].append(semantic_entropy([ids[t] for t in chosen], k))
                scores["distinct_1"].append(distinct_n(chosen, 1))
                scores["distinct_2"].append(distinct_n(chosen, 2))
                scores["ead"].append(expectation_adjusted_distinct(chosen, vocab))
        out[n] = (values, scores)
    return out


def score_groups(cfg: dict[str, Any], groups: dict[str, list[list[str]]], labels: dict[str, Any]):
    """Per (G, prompts): each set's temperature and every metric's score (prompts drawn with replacement)."""
    from lightning_div.metrics.group import group_distinct_n, group_semantic_entropy

    rng = np.random.default_rng(cfg["seed"] + 1)
    out = {}
    for g in cfg["group_sizes"]:
        for b in cfg["group_prompts"]:
            values, scores = [], {m: [] for m in [*labels, "group_distinct_2"]}
            for v, pool in groups.items():
                for _ in range(cfg["sets_per_value"]):
                    texts: list[str] = []
                    for p in rng.integers(0, len(pool), b):
                        texts += [pool[p][j] for j in rng.choice(cfg["group_replies"], g, replace=False)]
                    values.append(float(v))
                    for space, ids in labels.items():
                        scores[space].append(group_semantic_entropy([ids[t] for t in texts], g))
                    scores["group_distinct_2"].append(group_distinct_n(texts, g, 2))
            out[(g, b)] = (values, scores)
    return out


def analyse(values: list[float], scores: dict[str, list[float]], reference: float, step: float, cfg: dict[str, Any]):
    """Per metric: rho with its bootstrap interval, the noise sd at ``reference``, the change one step below it makes."""
    from lightning_div.meta_eval import dec_test_from_scores

    v = np.asarray(values)
    out = {}
    for name, s in scores.items():
        x = np.asarray(s, dtype=float)
        if np.ptp(x) == 0:  # a constant score (e.g. one cluster everywhere): no rank, said as such, not NaN
            r = {"spearman": 0.0, "ci_low": 0.0, "ci_high": 0.0, "constant": True}
        else:
            d = dec_test_from_scores(x, v, name, n_boot=cfg["n_boot"], seed=cfg["seed"])
            r = {"spearman": d["spearman"], "ci_low": d["ci_low"], "ci_high": d["ci_high"], "constant": False}
        at, below = x[np.isclose(v, reference)], x[np.isclose(v, reference - step)]
        sd = float(np.std(at, ddof=1)) if len(at) > 1 else 0.0
        r["sd"] = sd
        r["detectable"] = 1.96 * math.sqrt(2) * sd
        r["step_change"] = float(np.mean(at) - np.mean(below)) if len(below) else 0.0
        r["mean_by_value"] = [float(np.mean(x[np.isclose(v, u)])) for u in sorted(set(values))]
        out[name] = r
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "sement_validity")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args(argv)
    import torch

    from lightning_div import DialogueLM
    from lightning_div.metrics import count_vocab
    from lightning_div.model.adapters import resolve_adapter

    torch.set_num_threads(args.threads)
    start, cpu_start = time.perf_counter(), time.process_time()
    cfg = dict(QUICK if args.quick else FULL)
    contexts, references = contexts_and_references(cfg)
    module = DialogueLM(cfg["model"]).eval()
    adapter = resolve_adapter(module, batch_size=64, max_new_tokens=cfg["max_new_tokens"], show_progress=False)
    pools = sample_pools(cfg, adapter, contexts)
    generate_s = time.perf_counter() - start
    texts = [t for s in ("temperature", "top_p") for p in pools[s].values() for t in p]
    texts += [t for p in pools["groups"].values() for group in p for t in group]
    labels = label_all(cfg, encoders(cfg), references, texts)
    vocab = count_vocab(references)
    sets: dict[str, Any] = {}
    for swept in ("temperature", "top_p"):
        scored = score_sets(cfg, pools[swept], cfg["sizes"][swept], labels, vocab)
        step = 0.2 if swept == "temperature" else round(cfg["top_ps"][-1] - cfg["top_ps"][-2], 6)
        sets[swept] = {str(n): analyse(v, s, 1.0, step, cfg) for n, (v, s) in scored.items()}
    groups = {
        f"G{g}/prompts{b}": analyse(v, s, 1.0, 0.2, cfg)
        for (g, b), (v, s) in score_groups(cfg, pools["groups"], labels).items()
    }
    examples = {v: pool[:3] for v, pool in pools["temperature"].items()}
    results = {
        "experiment": "sement_validity",
        "quick": args.quick,
        "config": cfg,
        "spaces": [{"name": n, "encoder": e, "pooling": p} for n, e, p in SPACES],
        "machine": common.machine(),
        "sets": sets,
        "groups": groups,
        "examples": examples,
        "generate_s": generate_s,
        "wall_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu_start,
    }
    path = common.write_results(args.out, results)
    results = json.loads(path.read_text())  # with the environment the writer recorded
    from lightning_div._internal.io import atomic_write_text

    md = args.out.with_suffix(".md")
    atomic_write_text(md, page(results, kept_reading(md)))
    print(f"[sement_validity] wrote {path} and {md} in {results['wall_s']:.0f} s", flush=True)
    return results


def _rho(r: dict[str, Any]) -> str:
    if r["constant"]:
        return "constant"
    return f"{r['spearman']:.2f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]"


def _table(block: dict[str, dict[str, Any]], what: str, columns: list[str]) -> list[str]:
    """Rows: metrics; columns: sizes; each cell rho [interval]; then the noise rows."""
    metrics = list(next(iter(block.values())))
    lines = [f"| {what} | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for m in metrics:
        lines.append(f"| {m} | " + " | ".join(_rho(block[c][m]) for c in columns) + " |")
    lines += [
        "",
        f"Noise of one measurement at 1.0 (sd over sets) -> the smallest change two measurements tell apart "
        f"(1.96 x sqrt(2) x sd), beside the change one step below 1.0 makes ({what}):",
        "",
        "| metric | " + " | ".join(columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for m in metrics:
        cells = [f"{block[c][m]['detectable']:.3f} vs {block[c][m]['step_change']:+.3f}" for c in columns]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return lines


def page(result: dict[str, Any], reading: str = "") -> str:
    """The results page (markdown) from results.json's content; ``reading`` is the hand-written section kept."""
    cfg = result["config"]
    lines = [
        "# Sem-Ent at the monitors' sizes: decTest from the base model",
        "",
        "Written by `experiments/sement_validity.py`"
        + (" **--quick: a smoke test, the numbers mean nothing**" if result["quick"] else "")
        + f" in {result['wall_s'] / 60:.0f} min ({result['cpu_s'] / 60:.0f} min CPU). "
        f"`{cfg['model']}` samples (pure temperature, no n-gram blocking, at most {cfg['max_new_tokens']} "
        f"tokens) per temperature {cfg['temperatures']} one reply to each of {cfg['pool']['temperature']} distinct "
        f"validation contexts, per top-p {cfg['top_ps']} (temperature 1) {cfg['pool']['top_p']}, and per "
        f"temperature {cfg['group_pool']} prompts x {cfg['group_replies']} replies; {cfg['sets_per_value']} sets per value and "
        f"size are drawn from a value's pool with replacement. Clusters: k-means (k in {cfg['ks']}) on "
        f"{cfg['references']} gold replies of `chitchat:pretrain`; spaces: "
        + ", ".join(f"`{s['name']}` ({s['encoder']}, {s['pooling']} pooling)" for s in result["spaces"])
        + f". Spearman's rho of each score with the swept value over all sets, 95 % percentile bootstrap "
        f"({cfg['n_boot']} resamples), seed {cfg['seed']}. Machine: {result['machine']['description']} (loaded).",
        "",
    ]
    if reading:
        lines += [reading.rstrip(), ""]
    for swept in ("temperature", "top_p"):
        block = result["sets"][swept]
        lines += [f"## Sets of one reply per context, {swept} sweep: rho with {swept} by set size", ""]
        lines += _table(block, "set size", list(block))
        lines.append("")
    lines += ["## Groups (GRPO): group Sem-Ent's rho with temperature, by G and prompts per set", ""]
    lines += _table(result["groups"], "G / prompts", list(result["groups"]))
    lines += ["", *environment_lines(result), "## Examples (temperature: the first three replies of each pool)", ""]
    lines += ["| temperature | replies |", "|---|---|"]
    for v, replies in result["examples"].items():
        lines.append(f"| {v} | " + " / ".join(r.replace("|", "\\|").replace("\n", " ") for r in replies) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
