"""Do DivPO's pairs keep DPO from narrowing the base model? DPO vs DivPO pairs from the same pools (issue 52)

    python experiments/divpo.py [--quick] [--settings dpo divpo_semantic divpo_likelihood] [--seeds 0 1 2] [--out DIR]
    python experiments/divpo.py --merge part0/results.json part1/results.json --out DIR
    python experiments/divpo.py --page --out DIR [--rescored RESCORE.json] [--stored EARLIER.json]

Per seed, the shipped base model (``local:chitchat-gpt2``) samples one pool of N replies to each of
P Chit-Chat fine-tuning prompts (:func:`~lightning_div.preference.build_pools`, seeded by the seed);
a quality a user could plausibly write scores them (*reply in about eight words*,
``1 - |words - 8| / 8``, floored at 0: one safe eight-word reply maximises it, so it invites
collapse). From the **same pools**, three pair sets, then the same DPO hyper-parameters and seed:

* ``dpo``: the standard pair, best vs worst quality;
* ``divpo_semantic``: DivPO's pair, semantic rarity in the pool by clusters (k = 8) of
  all-MiniLM-L6-v2 embeddings fitted on Chit-Chat training replies (the package's default);
* ``divpo_likelihood``: DivPO's pair by the paper's probability criterion (minus the base model's
  mean log-probability per token).

**Held out, in a ruler the pairs never saw**: after training, each model samples G replies to each
of a fixed set of validation prompts (the same prompts and sampling seed for every setting of a
seed, so the comparison is paired), judged by clusters (k = 8) of the *base model's own* hidden
states (mean pooling), fitted on Chit-Chat validation replies: another encoder and other texts than
the pairs' space. Per setting: group Sem-Ent and clusters per group in that space, within-group
distinct-2 and EAD, the quality, the replies' NLL per token under the untouched base model (fluency)
and their length in words beside every diversity figure (diversity metrics and reward models favour
short outputs: Diverse-NS, arXiv 2505.16245). Differences ``divpo_* - dpo`` paired by seed, with
95 % t-intervals; the untrained base model is measured the same way, as a reference.

Writes ``DIR/results.json`` and ``DIR.md`` (default ``docs/results/divpo``); the reading is written
by hand under the numbers. ``--quick``: one seed, tiny pools, 2 steps (a smoke test; its numbers mean
nothing). ``--save-replies``: also ``DIR/replies/<setting>_seed<seed>.json``, every run's held-out replies
(and the base model's, ``base_seed<seed>.json``), for ``experiments/rescore.py`` (another judge, no rerun).
``--page``: no run, ``DIR.md`` rewritten from ``DIR/results.json`` (the reading kept), with the judge's
rescoring of its replies (``--rescored``, rescore.py's results.json) and how far its numbers moved from an
earlier run of the same settings (``--stored``) when given (``_divpo_sections.py``; each checked to be of its runs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from _environment import environment, environment_lines, environments
from _pages import add_page_arguments, kept_reading, rebuild_if_asked
from _replies import save_replies
from _stats import cell as _cell
from _stats import holm, interval, paired

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETTINGS = ("dpo", "divpo_semantic", "divpo_likelihood")
METRICS = ("group_sem_ent", "group_clusters", "group_distinct_2", "group_ead", "quality", "nll", "words")
FULL = {
    "prompts": 64,
    "num_responses": 8,
    "max_new_tokens": 24,
    "steps": 32,
    "batch_size": 4,
    "learning_rate": 5e-5,
    "beta": 0.1,
    "rho": 0.5,
    "eval_prompts": 32,
    "num_generations": 8,
    "references": 500,
    "num_clusters": 8,
}
QUICK = {
    **FULL,
    "prompts": 4,
    "num_responses": 4,
    "max_new_tokens": 8,
    "steps": 2,
    "batch_size": 2,
    "eval_prompts": 3,
    "num_generations": 4,
    "references": 100,
}
EXAMPLE_PROMPTS = 3


def about_eight_words(completions: list[Any], **kwargs: Any) -> list[float]:
    """The quality: 1 for a reply of 8 words, falling linearly to 0 at 0 or 16 words and beyond."""
    return [max(0.0, 1 - abs(len(c.split()) - 8) / 8) for c in completions]


def prompt_sets(tokenizer: Any, n_train: int, n_eval: int, max_tokens: int) -> tuple[list[str], list[str]]:
    """Distinct fine-tuning turns and held-out validation turns, each followed by EOS, of at most ``max_tokens`` tokens."""
    from lightning_div.datamodules import read_pairs

    def turns(split: str, n: int) -> list[str]:
        seen = dict.fromkeys(p.context[-1] for p in read_pairs(split, max_turns=1) if p.context[-1].strip())
        fit = [
            t + tokenizer.eos_token for t in seen if len(tokenizer(t + tokenizer.eos_token)["input_ids"]) <= max_tokens
        ]
        return fit[:n]

    return turns("chitchat:finetune", n_train), turns("chitchat:validation", n_eval)


def measure(pools: list[Any], judge: Any, base: Any, tokenizer: Any, vocab_size: int) -> dict[str, float]:
    """Held-out metrics of the replies in ``pools`` (one pool of G replies per evaluation prompt)."""
    import numpy as np

    from lightning_div.metrics import group_classes, group_distinct_n, group_semantic_entropy
    from lightning_div.metrics.lexical import expectation_adjusted_distinct
    from lightning_div.preference import likelihood_diversity

    texts = [r for p in pools for r in p.responses]
    g = len(pools[0].responses)
    ids = judge.assign(texts)
    nll = likelihood_diversity(pools, base, tokenizer)  # minus the mean log-probability per token: the NLL
    return {
        "group_sem_ent": group_semantic_entropy(ids, g),
        "group_clusters": group_classes(ids, g),
        "group_distinct_2": group_distinct_n(texts, g, 2),
        "group_ead": float(np.mean([expectation_adjusted_distinct(p.responses, vocab_size) for p in pools])),
        "quality": float(np.mean(about_eight_words(texts))),
        "nll": float(np.mean([x for row in nll for x in row])),
        "words": float(np.mean([len(t.split()) for t in texts])),
    }


def pair_summary(selection: Any) -> dict[str, Any]:
    """What a pair set is made of: counts, the chosen and rejected replies' mean quality and length."""
    import numpy as np

    pairs = selection.pairs

    def mean(values: list[float]) -> float | None:
        return float(np.mean(values)) if values else None

    return {
        **selection.stats,
        "chosen_quality": mean([p.chosen_quality for p in pairs]),
        "rejected_quality": mean([p.rejected_quality for p in pairs]),
        "chosen_words": mean([len(p.chosen.split()) for p in pairs]),
        "rejected_words": mean([len(p.rejected.split()) for p in pairs]),
    }


def keep_replies(out: Path, setting: str, seed: int, step: int, pools: list[Any]) -> None:
    """A run's held-out replies under ``out/replies`` (``experiments/_replies.py``), for a later rescoring."""
    g = len(pools[0].responses)
    save_replies(
        out, "divpo", setting, seed, step, [str(p.prompt) for p in pools], [r for p in pools for r in p.responses], g
    )


def run_seed(
    seed: int,
    settings: list[str],
    cfg: dict[str, Any],
    pair_space: Any,
    judge: Any,
    vocab: int,
    out: Path,
    save: bool = False,
) -> list[dict[str, Any]]:
    """One seed: one set of pools, the pair sets of every setting, a DPO run each, held-out metrics.

    ``save``: keep every run's held-out replies (the base model's too) under ``out/replies``; no number changes.
    """
    from trl import DPOConfig, DPOTrainer

    from lightning_div import load_base_model
    from lightning_div.preference import build_pools, select_preference_pairs

    base, tokenizer = load_base_model()
    window = int(base.config.n_positions) - cfg["max_new_tokens"]
    train_prompts, eval_prompts = prompt_sets(tokenizer, cfg["prompts"], cfg["eval_prompts"], window)
    sample = {"max_new_tokens": cfg["max_new_tokens"], "show_progress": False}
    start = time.time()
    pools = build_pools(
        base, tokenizer, train_prompts, cfg["num_responses"], path=out / f"pools_seed{seed}.jsonl", seed=seed, **sample
    )
    pools_s = time.time() - start
    quality = [about_eight_words(p.responses) for p in pools]
    eval_seed = 10_000 + seed  # the same held-out sampling seed for every setting of this seed: paired
    runs = []
    base_eval = build_pools(base, tokenizer, eval_prompts, cfg["num_generations"], seed=eval_seed, **sample)
    if save:
        keep_replies(out, "base", seed, 0, base_eval)
    runs.append({"setting": "base", "seed": seed, "held_out": measure(base_eval, judge, base, tokenizer, vocab)})
    for setting in settings:
        start = time.time()
        rule, criterion = ("dpo", "semantic") if setting == "dpo" else ("divpo", setting.split("_", 1)[1])
        selection = select_preference_pairs(
            pools,
            quality=quality,
            rule=rule,  # type: ignore[arg-type]
            criterion=criterion,
            rho=cfg["rho"],
            space=pair_space,
            model=base,
            tokenizer=tokenizer,
            seed=seed,
        )
        select_s = time.time() - start
        model, _ = load_base_model()
        args = DPOConfig(
            output_dir=str(out / "trainer" / f"{setting}_seed{seed}"),
            per_device_train_batch_size=cfg["batch_size"],
            max_steps=cfg["steps"],
            learning_rate=cfg["learning_rate"],
            beta=cfg["beta"],
            logging_steps=1,
            save_strategy="no",
            bf16=False,
            use_cpu=True,
            report_to="none",
            seed=seed,
            disable_tqdm=True,
        )
        trainer = DPOTrainer(model=model, args=args, train_dataset=selection.dataset(), processing_class=tokenizer)
        start = time.time()
        trainer.train()
        train_s = time.time() - start
        held = build_pools(model, tokenizer, eval_prompts, cfg["num_generations"], seed=eval_seed, **sample)
        if save:
            keep_replies(out, setting, seed, cfg["steps"], held)
        losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
        runs.append(
            {
                "setting": setting,
                "seed": seed,
                "pairs": pair_summary(selection),
                "held_out": measure(held, judge, base, tokenizer, vocab),
                "loss_first": losses[0],
                "loss_last": losses[-1],
                "examples": {
                    "prompts": eval_prompts[:EXAMPLE_PROMPTS],
                    "replies": [p.responses for p in held[:EXAMPLE_PROMPTS]],
                    "pairs": [
                        {"prompt": p.prompt, "chosen": p.chosen, "rejected": p.rejected}
                        for p in selection.pairs[:EXAMPLE_PROMPTS]
                    ],
                },
                "pools_s": pools_s,
                "select_s": select_s,
                "train_s": train_s,
            }
        )
        print(
            f"[divpo] seed {seed} {setting}: "
            + ", ".join(f"{k} {v:.3f}" for k, v in runs[-1]["held_out"].items())
            + f" (train {train_s:.0f} s)",
            flush=True,
        )
    return runs


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per setting, the held-out means over seeds; the differences ``divpo_* - dpo`` paired by seed."""
    names = [s for s in ("base", *SETTINGS) if any(r["setting"] == s for r in runs)]
    by = {s: {r["seed"]: r for r in runs if r["setting"] == s} for s in names}
    out: dict[str, Any] = {"settings": {}, "difference": {}}
    for s in names:
        rows = list(by[s].values())
        out["settings"][s] = {m: interval([r["held_out"][m] for r in rows]) for m in METRICS}
    if "dpo" in by:
        for s in names:
            if s.startswith("divpo"):
                seeds = sorted(set(by[s]) & set(by["dpo"]))
                out["difference"][f"{s} - dpo"] = {
                    m: interval([by[s][k]["held_out"][m] - by["dpo"][k]["held_out"][m] for k in seeds]) for m in METRICS
                }
    return out


def _text(s: Any) -> str:
    return str(s).replace("<|endoftext|>", "").replace("|", "\\|").replace("\n", " ")


def paired_tests(runs: list[dict[str, Any]], names: list[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (``"divpo_x - dpo"``, metric) with 2 or more seeds: :func:`_stats.paired`, and Holm over them all."""
    by: dict[str, dict[int, dict[str, float]]] = {}
    for r in runs:
        by.setdefault(r["setting"], {})[int(r["seed"])] = r["held_out"]
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for name in names:
        setting, baseline = name.split(" - ")
        seeds = sorted(set(by.get(setting, {})) & set(by.get(baseline, {})))
        for m in METRICS if len(seeds) > 1 else ():
            out[(name, m)] = paired([by[setting][k][m] - by[baseline][k][m] for k in seeds])
    for key, adjusted in zip(out, holm([t["p"] for t in out.values()])):
        out[key]["holm"] = adjusted
    return out


def page(result: dict[str, Any], reading: str = "", sections: list[str] | None = None) -> str:
    """The results page (markdown) from results.json's content; ``reading`` is the hand-written section kept.

    ``sections``: lines read from other files (``_divpo_sections``: the judge's rescoring, a rerun's drift),
    placed after the differences.
    """
    cfg, summary = result["config"], result["summary"]
    lines = [
        "# DPO vs DivPO pairs on the base model",
        "",
        "Written by `experiments/divpo.py`"
        + (" **--quick: a smoke test, the numbers mean nothing**" if result["quick"] else "")
        + ".",
        f"Per seed: pools of {cfg['num_responses']} replies (at most {cfg['max_new_tokens']} tokens) to "
        f"{cfg['prompts']} Chit-Chat prompts from `local:chitchat-gpt2`; quality: about eight words; "
        f"DPO {cfg['steps']} steps of {cfg['batch_size']} pairs, learning rate {cfg['learning_rate']}, "
        f"beta {cfg['beta']}, rho {cfg['rho']}; held out: {cfg['num_generations']} replies to each of "
        f"{cfg['eval_prompts']} validation prompts, judged in the base model's own embedding space (k = "
        f"{cfg['num_clusters']}). Seeds {result['seeds']}. Machine: {result['machine']}.",
        "",
        *([reading.rstrip(), ""] if reading else []),
        "## Held out, after training (mean over seeds, 95 % t-interval)",
        "",
        "| setting | " + " | ".join(METRICS) + " |",
        "|---" * (len(METRICS) + 1) + "|",
    ]
    for s, row in summary["settings"].items():
        lines.append(f"| {s} | " + " | ".join(_cell(row[m]) for m in METRICS) + " |")
    tests = paired_tests(result["runs"], list(summary["difference"]))
    if tests:
        lines += [
            "",
            f"p: two-sided paired t-test; Holm: adjusted over all {len(tests)} tests of the two differences below "
            "(no primary comparison was fixed before the runs, so all count); detectable: the smallest true "
            "difference these seeds detect with 80 % power at a two-sided 5 % level "
            "(`experiments/_stats.py: detectable_difference`): an interval that includes 0 with a detectable "
            "difference larger than the effect asked about is undecided, not null.",
        ]
    for name, diff in summary["difference"].items():
        lines += ["", f"## {name}, held out, paired by seed (95 % t-interval)", ""]
        for m in METRICS:
            d = diff[m]
            verdict = (
                "one seed: no interval"
                if d["low"] is None
                else ("the interval excludes 0" if d["low"] > 0 or d["high"] < 0 else "the interval includes 0")
            )
            t = tests.get((name, m))
            extra = f"; p {t['p']:.3f}, Holm {t['holm']:.3f}, detectable {t['detectable']:.3f}" if t else ""
            lines.append(f"* {m}: {_cell(d)} ({verdict}{extra})")
    lines += ["", *(sections or []), "## The pairs (mean over seeds)", ""]
    keys = ("pairs", "skipped", "chosen_quality", "rejected_quality", "chosen_words", "rejected_words")
    lines += ["| setting | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for s in SETTINGS:
        rows = [r["pairs"] for r in result["runs"] if r["setting"] == s]
        if rows:
            cells = []
            for k in keys:
                vals = [row[k] for row in rows if row[k] is not None]
                cells.append(f"{sum(vals) / len(vals):.2f}" if vals else "-")
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
    lines += ["", *environment_lines(result)]
    lines += [f"## Examples (seed {result['seeds'][0]})", ""]
    for r in result["runs"]:
        if r["seed"] != result["seeds"][0] or "examples" not in r:
            continue
        ex = r["examples"]
        lines += [f"**{r['setting']}**: pairs", "", "| prompt | chosen | rejected |", "|---|---|---|"]
        lines += [f"| {_text(p['prompt'])} | {_text(p['chosen'])} | {_text(p['rejected'])} |" for p in ex["pairs"]]
        lines += ["", f"**{r['setting']}**: held-out replies", "", "| prompt | replies |", "|---|---|"]
        for prompt, replies in zip(ex["prompts"], ex["replies"]):
            lines.append(f"| {_text(prompt)} | {' / '.join(_text(x) for x in replies)} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def _run_fields(run: dict[str, Any]) -> dict[str, type]:
    """What the page reads of a run besides its held-out measures: a trained run's pair counts (the base has none)."""
    return {} if run["setting"] == "base" else {"pairs": dict}


def merge(parts: list[Path], out: Path) -> dict[str, Any]:
    """One results.json and page from parts run apart, every run kept once (``experiments/_merge.py``).

    Raises:
        MergeError: a damaged part or one of another experiment (named), parts made with other settings
            (config) than the first, parts holding different runs of a setting and seed (the base model's
            measurement of a seed included), or an ``out`` that would write over one of the parts.
    """
    from _merge import MergeError, each_run_once, read_part, refuse_writing_over_inputs

    from lightning_div._internal.io import atomic_write_text

    if not parts:
        raise MergeError("--merge needs results.json parts")
    refuse_writing_over_inputs(out, [out / "results.json", out.with_suffix(".md")], parts)
    loaded = [read_part(p, "divpo", ("base", *SETTINGS), METRICS, _run_fields) for p in parts]
    first = loaded[0]
    for path, part in zip(parts, loaded):
        if part["config"] != first["config"] or part["quick"] != first["quick"]:
            raise MergeError(f"{path}: made with other settings than {parts[0]}: {part['config']} vs {first['config']}")
    found = each_run_once(list(zip(parts, (p["runs"] for p in loaded))), lambda r: (r["setting"], r["seed"]))
    runs = sorted(found, key=lambda r: (r["seed"], r["setting"]))
    result = {**first, "seeds": sorted({int(r["seed"]) for r in runs}), "runs": runs, "summary": summarise(runs)}
    result.pop("environment", None)  # each part's own, below: they may have run in other environments
    result["environments"] = environments(loaded)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "results.json", json.dumps(result, indent=1, allow_nan=False))
    atomic_write_text(out.with_suffix(".md"), page(result, kept_reading(out.with_suffix(".md"))))
    print(f"[divpo] merged {len(parts)} parts ({len(runs)} runs) into {out / 'results.json'}")
    return result


def rebuild(out: Path, rescored: Path | None = None, stored: Path | None = None) -> str:
    """Rewrite ``out``'s page from ``out/results.json`` (no run), its reading kept; with the sections of
    ``_divpo_sections`` for a rescoring of its replies and an earlier results.json of the same runs.

    Raises:
        MergeError: a damaged or missing results.json, or a rescoring or earlier results that are not of its runs.
    """
    from _divpo_sections import read_rescored, read_stored, rerun_lines, rescored_lines
    from _merge import read_json_object

    from lightning_div._internal.io import atomic_write_text

    result = read_json_object(out / "results.json")
    sections = rescored_lines(result, read_rescored(rescored, result)) if rescored else []
    if stored:
        sections += rerun_lines(result, read_stored(stored, result), METRICS, f"`{stored.name}`")
    text = page(result, kept_reading(out.with_suffix(".md")), sections)
    atomic_write_text(out.with_suffix(".md"), text)
    print(f"[divpo] rewrote {out.with_suffix('.md')} from {out / 'results.json'}")
    return text


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--settings", nargs="+", choices=SETTINGS, default=list(SETTINGS))
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="default: 0 1 2 (--quick: 0)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "divpo")
    parser.add_argument(
        "--save-replies",
        action="store_true",
        help="keep every run's held-out replies (and the base model's) in --out/replies/<setting>_seed<seed>.json, "
        "for experiments/rescore.py; changes no number",
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        default=None,
        help="combine the results.json of runs made apart into --out, every run once (parts holding different "
        "runs of a setting and seed are refused; --out may not hold an input)",
    )
    add_page_arguments(parser)
    args = parser.parse_args(argv)
    if rebuild_if_asked(parser, args, "divpo.py", rebuild):
        return {}
    if args.merge:
        from _merge import MergeError, fail

        try:
            return merge(args.merge, args.out)
        except MergeError as err:  # a user's mistake: one line, exit code 2
            fail("divpo.py --merge", err)

    from lightning_div import SemanticSpace
    from lightning_div._internal.io import atomic_write_text
    from lightning_div.datamodules import read_pairs
    from lightning_div.metrics.lexical import count_vocab

    cfg = dict(QUICK if args.quick else FULL)
    seeds = args.seeds if args.seeds is not None else ([0] if args.quick else [0, 1, 2])
    args.out.mkdir(parents=True, exist_ok=True)
    n_ref = cfg["references"]
    train_refs = [p.response for p in read_pairs("chitchat:finetune", max_turns=1)[:n_ref]]
    val_refs = [p.response for p in read_pairs("chitchat:validation", max_turns=1)[:n_ref]]
    k = cfg["num_clusters"]
    # the pairs' space (the package's default encoder) and the judge's: another encoder, other texts
    pair_space = SemanticSpace(encoder="minilm", num_clusters=k, dirpath=args.out / "cache", show_progress=False)
    pair_space.fit(train_refs)
    judge = SemanticSpace(
        encoder="local:chitchat-gpt2",
        num_clusters=k,
        encoder_kwargs={"pooling": "mean"},
        dirpath=args.out / "cache",
        show_progress=False,
    )
    judge.fit(val_refs)
    vocab = count_vocab(train_refs)
    runs = []
    for seed in seeds:
        runs += run_seed(seed, list(args.settings), cfg, pair_space, judge, vocab, args.out, args.save_replies)
    result = {
        "experiment": "divpo",
        "quick": args.quick,
        "config": cfg,
        "seeds": seeds,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared: timings are wall clock on a loaded machine)",
        "environment": environment(),
        "runs": runs,
        "summary": summarise(runs),
    }
    atomic_write_text(args.out / "results.json", json.dumps(result, indent=1, allow_nan=False))
    atomic_write_text(args.out.with_suffix(".md"), page(result, kept_reading(args.out.with_suffix(".md"))))
    print(f"[divpo] wrote {args.out / 'results.json'} and {args.out.with_suffix('.md')}")
    return result


if __name__ == "__main__":
    main()
