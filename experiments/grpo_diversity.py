"""Does GRPO collapse diversity on the base model, and does a semantic group reward hold it? (issue 42)

    python experiments/grpo_diversity.py [--quick] [--settings grpo grpo_semantic] [--seeds 0 1 2] [--out DIR]

GRPO trains the shipped base model (``local:chitchat-gpt2``) on Chit-Chat prompts with a task
reward a user could plausibly write and that invites collapse: *reply in about eight words*
(``1 - |words - 8| / 8``, floored at 0): one safe eight-word reply would maximise it for every
prompt. Two settings, the same seeds, prompts and hyper-parameters:

* ``grpo``: the task reward alone;
* ``grpo_semantic``: the task reward times DARLING's semantic diversity of the completion within
  its group (:class:`~lightning_div.integrations.trl.SemanticGroupReward`, clusters of
  all-MiniLM-L6-v2 embeddings, ``quality=`` the task reward): DARLING's combination.

:class:`~lightning_div.integrations.trl.GroupDiversityCallback` logs, at every step, group
Sem-Ent, clusters per group and the collapsed share of the training rollouts, and the task
reward of the same rollouts is recorded beside them (for ``grpo_semantic`` TRL's ``reward`` is
the product, so the task reward is computed apart). Both share one ``SemanticSpace`` whose
clusters (k = 8) are fitted once on 500 Chit-Chat reference replies. After training, each run
samples G completions for a fixed set of held-out validation prompts (the same for every run)
and measures the same quantities there: the last-step numbers compared between the settings,
as per-seed differences (``grpo_semantic - grpo``, paired by seed) with a 95 % t-interval.
Greedy and sampled replies to three fixed prompts are kept as examples, and the wall and reward
seconds as the cost.

Writes ``DIR/results.json`` and the page ``DIR.md`` (default ``docs/results/grpo_diversity``): the
numbers, the per-seed intervals and whether each excludes 0; the reading (does GRPO collapse
diversity here, does the reward hold it, at what cost to the task reward) is written by hand
under them, and the page added to ``mkdocs.yml``'s Results.
``--quick``: one seed, 2 steps, small batches, clusters of 100 replies (a smoke test; its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETTINGS = ("grpo", "grpo_semantic")
METRICS = ("group_sem_ent", "group_clusters", "collapsed_groups", "task_reward")
FULL = {"steps": 60, "prompts": 4, "num_generations": 8, "max_completion_length": 24, "eval_prompts": 32}
QUICK = {"steps": 2, "prompts": 2, "num_generations": 4, "max_completion_length": 8, "eval_prompts": 4}
EXAMPLE_PROMPTS = 3


def about_eight_words(completions: list[Any], **kwargs: Any) -> list[float]:
    """The task reward: 1 for a reply of 8 words, falling linearly to 0 at 0 or 16 words and beyond."""
    from lightning_div.integrations.trl import completion_texts

    return [max(0.0, 1 - abs(len(c.split()) - 8) / 8) for c in completion_texts(completions)]


def prompt_sets(tokenizer: Any, n_train: int, n_eval: int, max_tokens: int) -> tuple[list[str], list[str]]:
    """Training prompts (Chit-Chat fine-tuning contexts) and held-out validation prompts, each turn + EOS.

    Only turns of at most ``max_tokens`` tokens: the base model's window holds the prompt and the
    completion together (a longer prompt overflows its position embeddings mid-training).
    """
    from lightning_div.datamodules import read_pairs

    def turns(split: str, n: int) -> list[str]:
        seen = dict.fromkeys(p.context[-1] for p in read_pairs(split, max_history=1) if p.context[-1].strip())
        fit = [
            t + tokenizer.eos_token for t in seen if len(tokenizer(t + tokenizer.eos_token)["input_ids"]) <= max_tokens
        ]
        return fit[:n]

    return turns("chitchat:finetune", n_train), turns("chitchat:validation", n_eval)


def sample(model: Any, tokenizer: Any, prompts: list[str], n: int, cfg: dict[str, Any], seed: int) -> list[str]:
    """``n`` completions per prompt (greedy when ``n`` is 0: one), each prompt's consecutive."""
    import torch

    out: list[str] = []
    model.eval()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for prompt in prompts:
            ids = tokenizer(prompt, return_tensors="pt")
            kwargs = {"do_sample": False} if n == 0 else {"do_sample": True, "num_return_sequences": n, "top_k": 0}
            with torch.inference_mode():
                gen = model.generate(
                    **ids, max_new_tokens=cfg["max_completion_length"], pad_token_id=tokenizer.pad_token_id, **kwargs
                )
            out += tokenizer.batch_decode(gen[:, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    return [t.strip() for t in out]


def measure(space: Any, texts: list[str], g: int) -> dict[str, float]:
    """Group Sem-Ent, clusters per group, collapsed share and task reward of whole groups of ``g``."""
    from lightning_div.metrics import collapsed_share, group_classes, group_semantic_entropy

    ids = space.assign(texts)
    return {
        "group_sem_ent": group_semantic_entropy(ids, g),
        "group_clusters": group_classes(ids, g),
        "collapsed_groups": collapsed_share(ids, g),
        "task_reward": sum(about_eight_words(texts)) / len(texts),
    }


def run(setting: str, seed: int, cfg: dict[str, Any], space: Any, out: Path) -> dict[str, Any]:
    """One GRPO run: per-step training metrics, held-out metrics after training, examples, cost."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from lightning_div import load_base_model
    from lightning_div.integrations.trl import GroupDiversityCallback, SemanticGroupReward, rollouts_of

    g = cfg["num_generations"]
    model, tokenizer = load_base_model()
    window = int(model.config.n_positions) - cfg["max_completion_length"]
    train_prompts, eval_prompts = prompt_sets(tokenizer, cfg["steps"] * cfg["prompts"], cfg["eval_prompts"], window)
    reward_s = [0.0]

    def timed(call: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            reward_s[0] += time.perf_counter() - start

    class TimedSemantic(SemanticGroupReward):
        """Still a SemanticGroupReward, so the monitor sharing its space reuses its cluster ids."""

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return timed(super().__call__, *args, **kwargs)

    def task_reward(*args: Any, **kwargs: Any) -> Any:
        return timed(about_eight_words, *args, **kwargs)

    task_reward.__name__ = "about_eight_words"
    reward_fn: Any = (
        task_reward if setting == "grpo" else TimedSemantic(num_generations=g, space=space, quality=about_eight_words)
    )
    args = GRPOConfig(
        output_dir=str(out / "runs" / f"{setting}_seed{seed}"),
        num_generations=g,
        per_device_train_batch_size=cfg["prompts"] * g,
        max_completion_length=cfg["max_completion_length"],
        max_steps=cfg["steps"],
        logging_steps=1,
        learning_rate=cfg["learning_rate"],
        temperature=1.0,
        bf16=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        seed=seed,
        data_seed=seed,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward_fn],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": train_prompts}),
        processing_class=tokenizer,
    )
    steps: list[dict[str, float]] = []

    class TaskReward(TrainerCallback):  # type: ignore[misc]
        """The task reward of the step's rollouts (for grpo_semantic TRL's reward is the product)."""

        def on_step_end(self, a: Any, state: Any, control: Any, **k: Any) -> None:
            completions = rollouts_of(trainer)[1]
            steps.append(
                {"step": state.global_step, "task_reward": sum(about_eight_words(completions)) / len(completions)}
            )

    trainer.add_callback(TaskReward())
    monitor = GroupDiversityCallback(space=space, log_samples=False).attach(trainer)
    start = time.perf_counter()
    trainer.train()
    wall_s = time.perf_counter() - start
    for row, measured in zip(steps, monitor.history):
        row.update({m: measured[f"diversity/{m}"] for m in METRICS if m != "task_reward"})
    trained = trainer.model
    held_out = measure(space, sample(trained, tokenizer, eval_prompts, g, cfg, seed=1000 + seed), g)
    examples = {
        "prompts": [p.removesuffix(tokenizer.eos_token) for p in eval_prompts[:EXAMPLE_PROMPTS]],
        "greedy": sample(trained, tokenizer, eval_prompts[:EXAMPLE_PROMPTS], 0, cfg, seed),
        "sampled": sample(trained, tokenizer, eval_prompts[:EXAMPLE_PROMPTS], 3, cfg, seed),
    }
    return {
        "setting": setting,
        "seed": seed,
        "steps": steps,
        "held_out": held_out,
        "examples": examples,
        "wall_s": wall_s,
        "reward_s": reward_s[0],
        "monitor_s": sum(h["diversity/runtime"] for h in monitor.history),
    }


def interval(values: list[float]) -> dict[str, float | int | None]:
    """Mean and 95 % t-interval of per-seed values (None for the interval with fewer than 2 seeds)."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return {"mean": mean, "low": None, "high": None, "n": n}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}


def summarise(runs: list[dict[str, Any]], settings: list[str]) -> dict[str, Any]:
    """Per setting: held-out and last-training-step means over seeds; the paired differences between settings."""
    by = {s: {r["seed"]: r for r in runs if r["setting"] == s} for s in settings}
    out: dict[str, Any] = {"settings": {}, "difference": None}
    for s in settings:
        rows = list(by[s].values())
        out["settings"][s] = {
            "held_out": {m: interval([r["held_out"][m] for r in rows]) for m in METRICS},
            "last_step": {m: interval([r["steps"][-1][m] for r in rows]) for m in METRICS},
            # does training move it? the last training step minus the first, per seed (the same prompts' groups
            # are not compared: each step draws its own prompts, so this is a trend, not a paired measurement)
            "change": {m: interval([r["steps"][-1][m] - r["steps"][0][m] for r in rows]) for m in METRICS},
            "wall_s": interval([r["wall_s"] for r in rows]),
            "reward_s": interval([r["reward_s"] for r in rows]),
        }
    if set(SETTINGS) <= set(settings):
        seeds = sorted(set(by["grpo"]) & set(by["grpo_semantic"]))
        out["difference"] = {
            m: interval([by["grpo_semantic"][k]["held_out"][m] - by["grpo"][k]["held_out"][m] for k in seeds])
            for m in METRICS
        }
    return out


def _cell(x: dict[str, Any]) -> str:
    if x["low"] is None:
        return f"{x['mean']:.3f}"
    return f"{x['mean']:.3f} [{x['low']:.3f}, {x['high']:.3f}]"


def page(result: dict[str, Any]) -> str:
    """The results page (markdown) from results.json's content."""
    cfg, summary = result["config"], result["summary"]
    lines = [
        "# GRPO and semantic group diversity on the base model",
        "",
        "Written by `experiments/grpo_diversity.py`"
        + (" **--quick: a smoke test, the numbers mean nothing**" if result["quick"] else "")
        + ".",
        f"GRPO on `local:chitchat-gpt2`, {cfg['steps']} steps of {cfg['prompts']} prompts x G = {cfg['num_generations']}, "
        f"replies of at most {cfg['max_completion_length']} tokens, learning rate {cfg['learning_rate']}, seeds "
        f"{result['seeds']}; task reward: about eight words. Machine: {result['machine']}.",
        "",
        "## Held out, after training (mean over seeds, 95 % t-interval)",
        "",
        "| setting | " + " | ".join(METRICS) + " | wall s | reward s |",
        "|---" * (len(METRICS) + 3) + "|",
    ]
    for s, row in summary["settings"].items():
        cells = [_cell(row["held_out"][m]) for m in METRICS]
        lines.append(
            f"| {s} | " + " | ".join(cells) + f" | {row['wall_s']['mean']:.0f} | {row['reward_s']['mean']:.1f} |"
        )
    lines += ["", "## Last training step minus the first (mean over seeds, 95 % t-interval)", ""]
    lines += ["| setting | " + " | ".join(METRICS) + " |", "|---" * (len(METRICS) + 1) + "|"]
    for s, row in summary["settings"].items():
        lines.append(f"| {s} | " + " | ".join(_cell(row["change"][m]) for m in METRICS) + " |")
    if summary["difference"]:
        lines += ["", "## grpo_semantic - grpo, held out, paired by seed (95 % t-interval)", ""]
        for m in METRICS:
            d = summary["difference"][m]
            verdict = (
                "one seed: no interval"
                if d["low"] is None
                else ("the interval excludes 0" if d["low"] > 0 or d["high"] < 0 else "the interval includes 0")
            )
            lines.append(f"* {m}: {_cell(d)} ({verdict})")
    lines += ["", "## Per training step (mean over seeds)", "", "| setting | step | " + " | ".join(METRICS) + " |"]
    lines.append("|---" * (len(METRICS) + 2) + "|")
    for s in summary["settings"]:
        runs = [r for r in result["runs"] if r["setting"] == s]
        for i in range(len(runs[0]["steps"])):
            values = [sum(r["steps"][i][m] for r in runs) / len(runs) for m in METRICS]
            lines.append(f"| {s} | {runs[0]['steps'][i]['step']} | " + " | ".join(f"{v:.3f}" for v in values) + " |")
    lines += ["", "## Examples (seed " + str(result["seeds"][0]) + ")", ""]
    for r in result["runs"]:
        if r["seed"] != result["seeds"][0]:
            continue
        ex = r["examples"]
        lines += [f"**{r['setting']}**", "", "| prompt | greedy | sampled |", "|---|---|---|"]
        k = len(ex["sampled"]) // max(1, len(ex["prompts"]))
        for i, p in enumerate(ex["prompts"]):
            sampled = " / ".join(ex["sampled"][i * k : (i + 1) * k])
            cells = [p, ex["greedy"][i], sampled]
            lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"


def merge(parts: list[Path], out: Path) -> dict[str, Any]:
    """One results.json and page from parts run apart (each run once: a later part's run of a setting and seed wins).

    Raises:
        ValueError: parts made with other settings (config) than the first.
    """
    from lightning_div._internal.io import atomic_write_text

    loaded = [json.loads(Path(p).read_text(encoding="utf-8")) for p in parts]
    first = loaded[0]
    for path, part in zip(parts, loaded):
        if part["config"] != first["config"] or part["quick"] != first["quick"]:
            raise ValueError(f"{path}: made with other settings than {parts[0]}: {part['config']} vs {first['config']}")
    by_run: dict[tuple[str, int], dict[str, Any]] = {}
    for part in loaded:
        for r in part["runs"]:
            by_run[(r["setting"], int(r["seed"]))] = r
    runs = [by_run[k] for k in sorted(by_run, key=lambda k: (k[1], k[0]))]
    settings = sorted({r["setting"] for r in runs}, key=list(SETTINGS).index)
    result = {
        **first,
        "seeds": sorted({int(r["seed"]) for r in runs}),
        "runs": runs,
        "summary": summarise(runs, settings),
    }
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "results.json", json.dumps(result, indent=1, allow_nan=False))
    atomic_write_text(out.with_suffix(".md"), page(result))
    print(f"[grpo_diversity] merged {len(parts)} parts ({len(runs)} runs) into {out / 'results.json'}")
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--settings", nargs="+", choices=SETTINGS, default=list(SETTINGS))
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="default: 0 1 2 (--quick: 0)")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "grpo_diversity")
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        default=None,
        help="combine the results.json of runs made apart (e.g. one seed each) into --out; a later part wins",
    )
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out)

    from lightning_div import SemanticSpace
    from lightning_div._internal.io import atomic_write_text
    from lightning_div.datamodules import read_pairs

    cfg = dict(QUICK if args.quick else FULL, learning_rate=args.learning_rate)
    if args.steps is not None:
        cfg["steps"] = args.steps
    seeds = args.seeds if args.seeds is not None else ([0] if args.quick else [0, 1, 2])
    args.out.mkdir(parents=True, exist_ok=True)
    # the clusters' references (--quick: 100, a smoke test)
    references = [p.response for p in read_pairs("chitchat:finetune", max_history=1)[: 100 if args.quick else 500]]
    space = SemanticSpace(encoder="minilm", num_clusters=8, dirpath=args.out / "cache", show_progress=False)
    space.fit(references)
    runs = []
    for seed in seeds:
        for setting in args.settings:
            print(f"[grpo_diversity] {setting} seed {seed} ...", flush=True)
            runs.append(run(setting, seed, cfg, space, args.out))
            held = runs[-1]["held_out"]
            print(f"[grpo_diversity] {setting} seed {seed}: " + ", ".join(f"{k} {v:.3f}" for k, v in held.items()))
    result = {
        "experiment": "grpo_diversity",
        "quick": args.quick,
        "config": cfg,
        "seeds": seeds,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared: timings are wall clock on a loaded machine)",
        "runs": runs,
        "summary": summarise(runs, list(args.settings)),
    }
    atomic_write_text(args.out / "results.json", json.dumps(result, indent=1, allow_nan=False))
    atomic_write_text(args.out.with_suffix(".md"), page(result))
    print(f"[grpo_diversity] wrote {args.out / 'results.json'} and {args.out.with_suffix('.md')}")
    return result


if __name__ == "__main__":
    main()
