"""Does GRPO collapse within-group diversity on the base model, and what holds it? Judged by a ruler the rewards never saw.

    python experiments/grpo_diversity.py [--quick] [--settings S ...] [--seeds 0 1 2 3 4] [--out DIR]
    python experiments/grpo_diversity.py --merge PART/results.json ... [--pilot PILOT/results.json ...] --out DIR
    python experiments/grpo_diversity.py --settings grpo_lexical --lexical-threshold matched --seeds 0 1 2 --out DIR
    python experiments/grpo_diversity.py --page --out DIR [--rescored RESCORE.json] [--stored EARLIER.json]

GRPO (TRL's ``GRPOTrainer``) trains the shipped base model (``local:chitchat-gpt2``) on Chit-Chat
prompts with a task reward a user could write and that has many equally good answers: *reply in
about eight words* (``1 - |words - 8| / 8``, floored at 0), so one safe eight-word reply would
maximise it for every prompt. The settings share prompts, seeds and hyper-parameters and differ
in one thing each:

* ``grpo``: the task reward alone (TRL's defaults: no KL term, temperature 1);
* ``grpo_semantic``: DARLING's reward (Li et al., 2025, arXiv 2509.02534), the task reward shifted
  by its group minimum times the completion's semantic rarity in its group floored at 0.1
  (:class:`~lightning_div.integrations.trl.SemanticGroupReward`, clusters of all-MiniLM-L6-v2
  embeddings fitted on 500 Chit-Chat replies, k = 8);
* ``grpo_kl`` / ``grpo_semantic_kl``: the same two with a KL term to the base model (TRL's ``beta``);
* ``grpo_lexical``: the same product with a *lexical* equivalence (two completions alike when
  their word-bigram sets overlap by Jaccard >= 0.5): DARLING's lexical baseline;
* ``grpo_entropy``: the task reward with TRL's entropy bonus at one untuned coefficient, no KL term
  (``GRPOConfig(entropy_coef=...)``).

**The ruler.** The reward's clusters are not the judge. After training each run samples G
completions for fixed held-out validation prompts and measures them in a *second* semantic space
that no reward uses: the untouched base model's own last-token hidden states (the Sem-Ent paper's
choice of the dialogue model as encoder), k-means clusters fitted on the same reference replies;
beside it within-group distinct-1/2 and EAD, the task reward, the completions' NLL per token
under the untouched base model (fluency: a reward hack into gibberish shows there), their mean
length in words, the share cut at the length limit and the most frequent word's share within a
group (degeneration). Per training step the rollouts get the same group measures (the reward's
space through :class:`~lightning_div.integrations.trl.GroupDiversityMonitor`, and the judge's).

Primary measures, fixed before the runs: held-out judge group Sem-Ent, task reward, NLL. Each
setting is compared with ``grpo`` as per-seed paired differences with a 95 % t-interval;
training curves as first-10 vs last-10 step means. ``--pilot`` parts (one seed per regime, run
with other ``--learning-rate`` / ``--beta`` / ``--steps``) go in a table of their own.

Writes ``DIR/results.json``, ``DIR/curves.png`` and the page ``DIR.md`` (default
``docs/results/grpo_diversity``); the reading is written by hand on the page and kept by ``--merge``.
``--quick``: one seed, 2 steps, small batches, every setting (a smoke test; its numbers mean nothing).
``--save-replies``: also ``DIR/replies/<setting>_seed<seed>.json``, every run's held-out replies (and the
base model's, ``base_seed<seed>.json``), for ``experiments/rescore.py`` (another judge, no rerun).
``--page``: no run, ``DIR.md`` rewritten from ``DIR/results.json`` (the reading kept); with ``--rescored``
(rescore.py's results.json of the runs' saved replies) the judge's sections: both judges side by side on the
same replies, the paired differences and the primary family (Holm) with the new judge, the detectable
difference; with ``--stored`` (an earlier results.json of the same settings: the runs as stored before this
rerun) how far each held-out number moved (``_grpo_sections.py``; each file checked to be of the page's runs;
a table covers the seeds its settings have, and says which).

**The lexical threshold, matched.** ``--lexical-threshold matched`` replaces the fixed 0.5 (which
made two completions almost never alike: ``grpo_lexical`` was then ``grpo``) by the threshold of
:data:`LEXICAL_GRID` whose mean lexical rarity on the *untrained* base model's rollouts is nearest
the semantic reward's on the same rollouts, so both products start from the same granularity. The
rule reads no trained run. Such runs are named ``grpo_lexical_j<threshold>`` on the page, and their
part carries the calibration table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _environment import environment, environment_lines, environments
from _grpo_sections import paired_rows
from _pages import add_page_arguments, kept_reading, rebuild_if_asked
from _replies import save_replies
from _stats import cell as _cell
from _stats import holm, interval

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETTINGS = ("grpo", "grpo_semantic", "grpo_kl", "grpo_semantic_kl", "grpo_lexical", "grpo_entropy")
#: The measures of a set of grouped completions (held out and per training step).
MEASURES = (
    "judge_group_sem_ent",
    "judge_group_clusters",
    "group_sem_ent",
    "group_clusters",
    "collapsed_groups",
    "distinct_1",
    "distinct_2",
    "ead",
    "task_reward",
    "nll",
    "length_words",
    "cut_share",
    "top_word_share",
)
PRIMARY = ("judge_group_sem_ent", "task_reward", "nll")
#: The page's held-out table (the rest are in results.json).
SHOWN = (
    "judge_group_sem_ent",
    "judge_group_clusters",
    "group_sem_ent",
    "distinct_2",
    "ead",
    "task_reward",
    "nll",
    "length_words",
    "cut_share",
    "top_word_share",
)
FULL: dict[str, Any] = {
    "steps": 120,
    "prompts": 4,
    "num_generations": 8,
    "max_completion_length": 24,
    "eval_prompts": 32,
    "learning_rate": 5e-4,
    "beta": 0.04,
    "entropy_coef": 0.01,
    "temperature": 1.0,
    "scale_rewards": "group",
    "lexical_threshold": 0.5,
    "diversity_floor": 0.1,
    "mask_truncated": True,
    "task": "eight_words",
}
QUICK: dict[str, Any] = {
    **FULL,
    "steps": 2,
    "prompts": 2,
    "num_generations": 4,
    "max_completion_length": 8,
    "eval_prompts": 4,
}
EXAMPLE_PROMPTS = 3
#: The word-bigram Jaccard thresholds ``--lexical-threshold matched`` chooses from.
LEXICAL_GRID = (0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5)  # 0.02: about one shared bigram in 24 tokens
#: The calibration's rollouts: this many training prompts x G, sampled from the base model with this seed.
CALIBRATION_PROMPTS, CALIBRATION_SEED = 32, 2000
MACHINE = f"{platform.machine()}, {os.cpu_count()} CPUs (shared: timings are wall clock on a loaded machine)"
WINDOW = 10  # steps averaged at each end of a training curve


def about_eight_words(completions: list[Any], **kwargs: Any) -> list[float]:
    """The task reward: 1 for a reply of 8 words, falling linearly to 0 at 0 or 16 words and beyond."""
    from lightning_div.integrations.trl import completion_texts

    return [max(0.0, 1 - abs(len(c.split()) - 8) / 8) for c in completion_texts(completions)]


def asks_back(completions: list[Any], **kwargs: Any) -> list[float]:
    """Another task reward with many equally good answers: 1 for a reply of 3 to 15 words that ends with a question."""
    from lightning_div.integrations.trl import completion_texts

    return [float(c.rstrip().endswith("?") and 3 <= len(c.split()) <= 15) for c in completion_texts(completions)]


#: The task rewards a run can be given (``--task``; the config's ``task``).
TASKS = {"eight_words": about_eight_words, "asks_back": asks_back}


def lexical_labels(texts: list[str], g: int, threshold: float) -> list[int]:
    """Classes within each group: completions alike when their word-bigram sets overlap by Jaccard >= ``threshold``.

    A completion of fewer than two words is compared by its word set (an empty one equals only other empty ones).
    """
    from lightning_div.metrics.group import partition_by_similarity, split_groups

    def grams(text: str) -> frozenset[tuple[str, ...]]:
        words = text.lower().split()
        return frozenset(zip(words, words[1:])) if len(words) > 1 else frozenset((w,) for w in words)

    labels: list[int] = []
    for group in split_groups(texts, g):
        sets = [grams(t) for t in group]
        sim = [[1.0 if a == b else len(a & b) / max(1, len(a | b)) for b in sets] for a in sets]
        labels += partition_by_similarity(sim, threshold)
    return labels


def darling_product(quality: list[float], diversity: list[float], g: int, floor: float) -> list[float]:
    """DARLING's combination, as :class:`~lightning_div.integrations.trl.SemanticGroupReward` makes it.

    (quality - its group's minimum) x max(diversity, floor), each group of ``g`` apart.
    """
    from lightning_div.metrics.group import shift_by_group_minimum

    shifted = shift_by_group_minimum(quality, g)
    return [float(q or 0.0) * max(d, floor) for q, d in zip(shifted, diversity)]


def prompt_sets(tokenizer: Any, n_train: int, n_eval: int, max_tokens: int) -> tuple[list[str], list[str]]:
    """Training prompts (Chit-Chat fine-tuning contexts) and held-out validation prompts, each turn + EOS.

    Only turns of at most ``max_tokens`` tokens: the base model's window holds the prompt and the
    completion together (a longer prompt overflows its position embeddings mid-training).
    """
    from lightning_div.datamodules import read_pairs

    def turns(split: str, n: int) -> list[str]:
        seen = dict.fromkeys(p.context[-1] for p in read_pairs(split, max_turns=1) if p.context[-1].strip())
        fit = [
            t + tokenizer.eos_token for t in seen if len(tokenizer(t + tokenizer.eos_token)["input_ids"]) <= max_tokens
        ]
        return fit[:n]

    return turns("chitchat:finetune", n_train), turns("chitchat:validation", n_eval)


def sample(
    model: Any, tokenizer: Any, prompts: list[str], n: int, cfg: dict[str, Any], seed: int
) -> tuple[list[str], list[bool]]:
    """``n`` completions per prompt (greedy when ``n`` is 0: one), each prompt's consecutive, and which were cut.

    A completion is *cut* when it reached ``max_completion_length`` tokens without an end-of-sequence token.
    """
    import torch

    texts: list[str] = []
    cut: list[bool] = []
    model.eval()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for prompt in prompts:
            ids = tokenizer(prompt, return_tensors="pt")
            kwargs: dict[str, Any] = (
                {"do_sample": False}
                if n == 0
                else {"do_sample": True, "num_return_sequences": n, "top_k": 0, "temperature": cfg["temperature"]}
            )
            with torch.inference_mode():
                gen = model.generate(
                    **ids, max_new_tokens=cfg["max_completion_length"], pad_token_id=tokenizer.pad_token_id, **kwargs
                )
            new = gen[:, ids["input_ids"].shape[1] :]
            texts += [t.strip() for t in tokenizer.batch_decode(new, skip_special_tokens=True)]
            cut += [
                bool(len(row) >= cfg["max_completion_length"] and tokenizer.eos_token_id not in row.tolist())
                for row in new
            ]
    return texts, cut


def nll_per_token(model: Any, tokenizer: Any, prompts: list[str], completions: list[str]) -> float:
    """Mean NLL per token of the completions' tokens given their prompts, under ``model`` (empty completions add none)."""
    import torch

    total, count = 0.0, 0
    model.eval()
    window = int(model.config.n_positions)
    for prompt, completion in zip(prompts, completions):
        p = tokenizer(prompt)["input_ids"]
        c = tokenizer(completion)["input_ids"] if completion else []
        if not c:
            continue
        ids = (p + c)[-window:]
        k = min(len(c), len(ids) - 1)
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([ids])).logits[0]
        logp = torch.log_softmax(logits[-k - 1 : -1].float(), dim=-1)
        target = torch.tensor(ids[-k:])
        total += float(-logp.gather(1, target[:, None]).sum())
        count += k
    return total / count if count else 0.0


def top_word_share(texts: list[str], g: int) -> float:
    """The most frequent word's share of a group's words, averaged over groups (0 for a group without words)."""
    from lightning_div.metrics.group import split_groups

    shares = []
    for group in split_groups(texts, g):
        words = [w for t in group for w in t.lower().split()]
        shares.append(Counter(words).most_common(1)[0][1] / len(words) if words else 0.0)
    return sum(shares) / len(shares) if shares else 0.0


class Ruler:
    """Everything that measures a set of grouped completions: the reward's space, the judge's, the base model."""

    def __init__(
        self, space: Any, judge: Any, base: Any, tokenizer: Any, vocab_size: int, task: Any = about_eight_words
    ) -> None:
        self.space, self.judge, self.base, self.tokenizer, self.vocab_size = space, judge, base, tokenizer, vocab_size
        self.task = task

    def measure(
        self, prompts: list[str], texts: list[str], g: int, cut: list[bool] | None, ids: Any = None
    ) -> dict[str, float]:
        """Every measure of :data:`MEASURES` over whole groups of ``g`` (``cut`` None: cut_share is 0, read elsewhere)."""
        from lightning_div.metrics import (
            collapsed_share,
            expectation_adjusted_distinct,
            group_classes,
            group_distinct_n,
            group_semantic_entropy,
        )
        from lightning_div.metrics.group import split_groups

        ids = self.space.assign(texts) if ids is None else ids
        judged = self.judge.assign(texts)
        groups = split_groups(texts, g)
        return {
            "judge_group_sem_ent": group_semantic_entropy(judged, g),
            "judge_group_clusters": group_classes(judged, g),
            "group_sem_ent": group_semantic_entropy(ids, g),
            "group_clusters": group_classes(ids, g),
            "collapsed_groups": collapsed_share(ids, g),
            "distinct_1": group_distinct_n(texts, g, 1),
            "distinct_2": group_distinct_n(texts, g, 2),
            "ead": sum(expectation_adjusted_distinct(grp, self.vocab_size) for grp in groups) / len(groups),
            "task_reward": sum(self.task(texts)) / len(texts),
            "nll": nll_per_token(self.base, self.tokenizer, prompts, texts),
            "length_words": sum(len(t.split()) for t in texts) / len(texts),
            "cut_share": 0.0 if cut is None else sum(cut) / len(cut),
            "top_word_share": top_word_share(texts, g),
        }


def measure_base(ruler: Ruler, cfg: dict[str, Any], seed: int, replies: Path | None = None) -> dict[str, float]:
    """The untrained base model's held-out measures: the same prompts and sampling seed as every run's.

    ``replies``: an ``--out`` to keep the held-out replies under (``experiments/_replies.py``), or None.
    """
    window = int(ruler.base.config.n_positions) - cfg["max_completion_length"]
    _, eval_prompts = prompt_sets(ruler.tokenizer, 0, cfg["eval_prompts"], window)
    g = cfg["num_generations"]
    texts, cut = sample(ruler.base, ruler.tokenizer, eval_prompts, g, cfg, seed=1000 + seed)
    if replies is not None:
        save_replies(replies, "grpo_diversity", "base", seed, 0, eval_prompts, texts, g, cut)
    return ruler.measure([p for p in eval_prompts for _ in range(g)], texts, g, cut)


def mean_rarity(labels: list[int], g: int) -> float:
    """The mean of DARLING's per-completion rarity (no floor): 1 when no completion has a twin in its group."""
    from lightning_div.metrics.group import group_diversity_scores

    scores = group_diversity_scores(labels, g)
    return sum(scores) / len(scores)


def nearest_threshold(lexical: dict[float, float], semantic: float) -> float:
    """The threshold whose lexical mean rarity is nearest ``semantic`` (the higher threshold on a tie)."""
    return min(lexical, key=lambda t: (abs(lexical[t] - semantic), -t))


def calibrate_lexical(ruler: Ruler, cfg: dict[str, Any]) -> dict[str, Any]:
    """The lexical threshold matched to the semantic reward's granularity on the untrained base model's rollouts.

    G completions for each of the first :data:`CALIBRATION_PROMPTS` training prompts (seed
    :data:`CALIBRATION_SEED`, the runs' sampling settings); the semantic reward's mean rarity on
    them (its clusters) against the lexical one at each threshold of :data:`LEXICAL_GRID`; the
    threshold nearest wins (the higher on a tie). Nothing trained is read, so the choice cannot
    follow a result.
    """
    g = cfg["num_generations"]
    window = int(ruler.base.config.n_positions) - cfg["max_completion_length"]
    prompts, _ = prompt_sets(ruler.tokenizer, CALIBRATION_PROMPTS, 0, window)
    texts, _ = sample(ruler.base, ruler.tokenizer, prompts, g, cfg, seed=CALIBRATION_SEED)
    semantic = mean_rarity([int(i) for i in ruler.space.assign(texts)], g)
    lexical = {t: mean_rarity(lexical_labels(texts, g, t), g) for t in LEXICAL_GRID}
    chosen = nearest_threshold(lexical, semantic)
    return {
        "prompts": len(prompts),
        "num_generations": g,
        "seed": CALIBRATION_SEED,
        "semantic_rarity": semantic,
        "lexical_rarity": {f"{t:g}": r for t, r in lexical.items()},
        "chosen": chosen,
    }


def run(setting: str, seed: int, cfg: dict[str, Any], ruler: Ruler, out: Path, save: bool = False) -> dict[str, Any]:
    """One GRPO run: per-step training measures, held-out measures after training, examples, cost.

    ``save``: keep the held-out replies under ``out`` (``experiments/_replies.py``); no number changes.
    """
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from lightning_div import load_base_model
    from lightning_div.integrations.trl import GroupDiversityMonitor, SemanticGroupReward
    from lightning_div.metrics.group import group_diversity_scores
    from lightning_div.settings import Outputs

    g = cfg["num_generations"]
    task = TASKS[cfg.get("task", "eight_words")]
    torch.manual_seed(seed)
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
        return timed(task, *args, **kwargs)

    lexical_rarity: list[float] = []  # per reward call: how much the lexical equivalence saw alike

    def lexical_reward(completions: list[Any], **kwargs: Any) -> list[float]:
        from lightning_div.integrations.trl import completion_texts

        def score() -> list[float]:
            texts = completion_texts(completions)
            labels = lexical_labels(texts, g, cfg["lexical_threshold"])
            diversity = group_diversity_scores(labels, g)
            lexical_rarity.append(sum(diversity) / len(diversity))
            return darling_product(task(texts), diversity, g, cfg["diversity_floor"])

        return list(timed(score))

    task_reward.__name__ = task.__name__
    lexical_reward.__name__ = f"{task.__name__}_x_lexical_diversity"
    reward_fn: Any
    if setting in ("grpo_semantic", "grpo_semantic_kl"):
        reward_fn = TimedSemantic(num_generations=g, space=ruler.space, quality=task)
    elif setting == "grpo_lexical":
        reward_fn = lexical_reward
    else:
        reward_fn = task_reward
    args = GRPOConfig(
        output_dir=str(out / "runs" / f"{setting}_seed{seed}"),
        num_generations=g,
        per_device_train_batch_size=cfg["prompts"] * g,
        max_completion_length=cfg["max_completion_length"],
        max_steps=cfg["steps"],
        logging_steps=1,
        learning_rate=cfg["learning_rate"],
        temperature=cfg["temperature"],
        beta=cfg["beta"] if setting.endswith("_kl") else 0.0,
        entropy_coef=cfg["entropy_coef"] if setting == "grpo_entropy" else 0.0,
        scale_rewards=cfg["scale_rewards"],
        mask_truncated_completions=cfg["mask_truncated"],
        bf16=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        seed=seed,
        data_seed=seed,
        disable_tqdm=True,
    )
    # the monitor is a reward function that adds 0.0; after the reward, it reuses the reward's cluster ids
    monitor = GroupDiversityMonitor(space=ruler.space, outputs=Outputs(log_samples=0))
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward_fn, monitor],
        args=args,
        train_dataset=Dataset.from_dict({"prompt": train_prompts}),
        processing_class=tokenizer,
    )
    steps: list[dict[str, float]] = []
    measure_s = [0.0]

    class StepMeasures(TrainerCallback):  # type: ignore[misc]
        """The judge's and the base model's measures of the step's rollouts (the reward's space: the monitor)."""

        def on_step_end(self, a: Any, state: Any, control: Any, **k: Any) -> None:
            start = time.perf_counter()
            batch = monitor.last_batch  # the generation batch this step trained on, as TRL handed it the monitor
            if batch is None or batch.step != state.global_step:
                return  # the monitor's measurement of this step failed (it warned): no batch of this step to judge
            prompts, completions = batch.prompts, batch.completions
            from lightning_div.integrations.trl import completion_texts

            texts = completion_texts(completions)
            row = ruler.measure([str(p) for p in prompts], texts, g, None, ids=[0] * len(texts))
            steps.append({"step": float(state.global_step), **row})
            measure_s[0] += time.perf_counter() - start

    trainer.add_callback(StepMeasures())
    monitor.attach(trainer)
    start = time.perf_counter()
    trainer.train()
    wall_s = time.perf_counter() - start
    logs = {int(h["step"]): h for h in trainer.state.log_history if "step_time" in h or "reward" in h}
    for row, measured in zip(steps, monitor.history):
        for m in ("group_sem_ent", "group_clusters", "collapsed_groups"):
            row[m] = measured[f"diversity/{m}"]
        log = logs.get(int(row["step"]), {})
        row["cut_share"] = float(log.get("completions/clipped_ratio", 0.0))
        row["token_entropy"] = float(log.get("entropy", 0.0))
        row["kl"] = float(log.get("kl", 0.0))
        row["step_time"] = float(log.get("step_time", 0.0))
    trained = trainer.model
    texts, cut = sample(trained, tokenizer, eval_prompts, g, cfg, seed=1000 + seed)
    if save:
        name = run_name({"setting": setting}, cfg)  # the page's name: grpo_lexical at a matched threshold too
        save_replies(out, "grpo_diversity", name, seed, cfg["steps"], eval_prompts, texts, g, cut)
    held_out = ruler.measure([p for p in eval_prompts for _ in range(g)], texts, g, cut)
    examples = {
        "prompts": [p.removesuffix(tokenizer.eos_token) for p in eval_prompts[:EXAMPLE_PROMPTS]],
        "greedy": sample(trained, tokenizer, eval_prompts[:EXAMPLE_PROMPTS], 0, cfg, seed)[0],
        "sampled": sample(trained, tokenizer, eval_prompts[:EXAMPLE_PROMPTS], 3, cfg, seed)[0],
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
        "judge_s": measure_s[0],
        "step_s": sum(r["step_time"] for r in steps),
        **({"lexical_threshold": cfg["lexical_threshold"], "lexical_rarity": lexical_rarity} if lexical_rarity else {}),
    }


def ends(steps: list[dict[str, float]], metric: str) -> tuple[float, float]:
    """The mean of the first and of the last :data:`WINDOW` steps (fewer when the run is shorter)."""
    k = max(1, min(WINDOW, len(steps) // 2))
    first = [s[metric] for s in steps[:k]]
    last = [s[metric] for s in steps[-k:]]
    return sum(first) / len(first), sum(last) / len(last)


def summarise(
    runs: list[dict[str, Any]], settings: list[str], base: dict[str, dict[str, float]] | None = None
) -> dict[str, Any]:
    """Per setting: held-out means and training ends over seeds; each setting against ``grpo``, paired by seed.

    ``base``: the untrained model's held-out measures per seed (a row of its own, the point every run starts from).
    """
    by = {s: {r["seed"]: r for r in runs if r["setting"] == s} for s in settings}
    out: dict[str, Any] = {"settings": {}, "difference": {}, "base": None}
    if base:
        out["base"] = {m: interval([b[m] for b in base.values()]) for m in MEASURES}
    for s in settings:
        rows = list(by[s].values())
        out["settings"][s] = {
            "held_out": {m: interval([r["held_out"][m] for r in rows]) for m in MEASURES},
            "first": {m: interval([ends(r["steps"], m)[0] for r in rows]) for m in MEASURES},
            "last": {m: interval([ends(r["steps"], m)[1] for r in rows]) for m in MEASURES},
            # last-10 minus first-10 per seed: a trend (each step draws its own prompts), not a paired measurement
            "change": {m: interval([ends(r["steps"], m)[1] - ends(r["steps"], m)[0] for r in rows]) for m in MEASURES},
            "wall_s": interval([r["wall_s"] for r in rows]),
            "reward_s": interval([r["reward_s"] for r in rows]),
            "monitor_s": interval([r["monitor_s"] for r in rows]),
            "step_s": interval([r["step_s"] for r in rows]),
            # shares of the run's own GRPO step time (TRL's step_time, which holds the reward's calls): a ratio
            # per run, so a run slowed by a loaded machine or paused counts as much as a quiet one
            "reward_share": interval([100 * r["reward_s"] / r["step_s"] for r in rows]),
            "monitor_share": interval([100 * r["monitor_s"] / r["step_s"] for r in rows]),
        }
    if "grpo" in by:
        for s in settings:
            if s == "grpo":
                continue
            seeds = sorted(set(by["grpo"]) & set(by[s]))
            if seeds:
                out["difference"][s] = {
                    m: interval([by[s][k]["held_out"][m] - by["grpo"][k]["held_out"][m] for k in seeds])
                    for m in MEASURES
                }
    # the semantic reward's effect where the KL term keeps the text fluent: against its own baseline, grpo_kl
    seeds = sorted(set(by.get("grpo_kl", {})) & set(by.get("grpo_semantic_kl", {})))
    if seeds:
        out["difference_kl"] = {
            "grpo_semantic_kl": {
                m: interval([by["grpo_semantic_kl"][k]["held_out"][m] - by["grpo_kl"][k]["held_out"][m] for k in seeds])
                for m in MEASURES
            }
        }
    return out


def pilot_rows(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per pilot run: its regime, training ends and held-out primary measures."""
    rows = []
    for part in parts:
        for seed, held in sorted(part.get("base", {}).items())[:1] if not rows else []:
            rows.append(
                {
                    "setting": "base model, untrained",
                    "seed": int(seed),
                    "learning_rate": 0.0,
                    "beta": 0.0,
                    "steps": 0,
                    "scale_rewards": part["config"]["scale_rewards"],
                    "mask_truncated": False,
                    "temperature": part["config"]["temperature"],
                    "task": part["config"].get("task", "eight_words"),
                    "ends": None,
                    "held_out": held,
                    "greedy": [],
                }
            )
        for r in part["runs"]:
            cfg = part["config"]
            rows.append(
                {
                    "setting": r["setting"],
                    "seed": r["seed"],
                    "learning_rate": cfg["learning_rate"],
                    "beta": cfg["beta"] if r["setting"].endswith("_kl") else 0.0,
                    "steps": cfg["steps"],
                    "scale_rewards": cfg["scale_rewards"],
                    "mask_truncated": bool(cfg.get("mask_truncated", False)),
                    "temperature": cfg["temperature"],
                    "task": cfg.get("task", "eight_words"),
                    "ends": {m: ends(r["steps"], m) for m in MEASURES},
                    "held_out": r["held_out"],
                    "greedy": r["examples"]["greedy"][:2],
                }
            )
    return rows


def _esc(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def figure(result: dict[str, Any], path: Path) -> None:
    """Judge group Sem-Ent, reward-space group Sem-Ent and task reward over training steps: mean and band per setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    metrics = ("judge_group_sem_ent", "group_sem_ent", "task_reward", "nll")
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.4))
    for ax, m in zip(axes, metrics):
        for s in result["summary"]["settings"]:
            runs = [r for r in result["runs"] if r["setting"] == s]
            values = np.array([[row[m] for row in r["steps"]] for r in runs])
            steps = [row["step"] for row in runs[0]["steps"]]
            kernel = np.ones(min(5, values.shape[1])) / min(5, values.shape[1])  # a 5-step moving mean per seed
            smooth = np.array([np.convolve(v, kernel, mode="valid") for v in values])
            x = steps[len(steps) - smooth.shape[1] :]
            mean = smooth.mean(axis=0)
            ax.plot(x, mean, label=s)
            if len(runs) > 1:
                sd = smooth.std(axis=0, ddof=1) / math.sqrt(len(runs))
                ax.fill_between(x, mean - 1.96 * sd, mean + 1.96 * sd, alpha=0.2)
        ax.set_title(m.replace("_", " "), fontsize=10)
        ax.set_xlabel("step")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, path)


def run_sections(result: dict[str, Any], sections: list[str] | None = None) -> list[str]:
    """The page's tables of the full runs: held out, the differences with grpo, training ends, cost.

    ``sections``: lines read from other files (``_grpo_sections``: the judge's rescoring, a rerun's drift),
    placed after the primary comparisons.
    """
    summary = result["summary"]
    lines: list[str] = []
    lines += [
        "## Held out, after training (mean over seeds, 95 % t-interval)",
        "",
        "`judge_*`: the base model's own space, which no reward uses; `group_sem_ent`: the semantic reward's "
        "space (all-MiniLM-L6-v2); `nll`: per token under the untouched base model; `length_words` beside every "
        "diversity figure.",
        "",
        "| setting | n | " + " | ".join(SHOWN) + " |",
        "|---" * (len(SHOWN) + 2) + "|",
    ]
    if summary.get("base"):
        n = summary["base"][SHOWN[0]]["n"]
        lines.append(f"| base model, untrained | {n} | " + " | ".join(_cell(summary["base"][m]) for m in SHOWN) + " |")
    for s, row in summary["settings"].items():
        n = row["held_out"][SHOWN[0]]["n"]
        lines.append(f"| {s} | {n} | " + " | ".join(_cell(row["held_out"][m]) for m in SHOWN) + " |")
    if summary["difference"]:
        lines += ["", "## Each setting minus grpo, held out, paired by seed (95 % t-interval)", ""]
        lines += _difference_table(summary["difference"])
        if summary.get("difference_kl"):
            lines += [
                "",
                "## grpo_semantic_kl minus grpo_kl: the semantic reward under the KL term, paired by seed",
                "",
            ]
            lines += _difference_table(summary["difference_kl"])
        lines += ["", "`*`: the interval excludes 0 (uncorrected; the primary family's correction is below)."]
        lines += comparisons_section(result)
    lines += sections or []
    lines += ["", f"## Training rollouts: first {WINDOW} steps -> last {WINDOW} (mean over seeds)", ""]
    trained = ("judge_group_sem_ent", "group_sem_ent", "distinct_2", "task_reward", "nll", "length_words", "cut_share")
    lines += ["| setting | " + " | ".join(trained) + " |", "|---" * (len(trained) + 1) + "|"]
    for s, row in summary["settings"].items():
        cells = [f"{row['first'][m]['mean']:.3f} -> {row['last'][m]['mean']:.3f}" for m in trained]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    lines += ["", "![training curves](grpo_diversity/curves.png)", ""]
    lines += [
        "## Cost (mean seconds per run; shares: % of the run's GRPO step time, per run, then averaged)",
        "",
        "| setting | run | GRPO steps | reward | monitor | reward % of steps | monitor % of steps |",
        "|---|---|---|---|---|---|---|",
    ]
    for s, row in summary["settings"].items():
        lines.append(
            f"| {s} | {row['wall_s']['mean']:.0f} | {row['step_s']['mean']:.0f} | {row['reward_s']['mean']:.1f} "
            f"| {row['monitor_s']['mean']:.1f} | {_cell(row['reward_share'], 1)} | {_cell(row['monitor_share'], 1)} |"
        )
    return lines


def lexical_section(result: dict[str, Any]) -> list[str]:
    """The matched lexical threshold's calibration, and how much each lexical run's equivalence saw alike."""
    cal = result["lexical_calibration"]
    lines = [
        "",
        "## The lexical threshold, matched to the semantic reward (added after the fixed runs)",
        "",
        f"Mean rarity (DARLING's per-completion diversity, no floor; 1 = no completion has a twin in its group) on "
        f"the untrained base model's rollouts, {cal['prompts']} training prompts x G = {cal['num_generations']}, "
        f"sampling seed {cal['seed']}: the semantic reward's clusters {cal['semantic_rarity']:.3f}; chosen: the "
        f"nearest threshold, **{cal['chosen']:g}**.",
        "",
        "| word-bigram Jaccard threshold | " + " | ".join(cal["lexical_rarity"]) + " |",
        "|---" * (len(cal["lexical_rarity"]) + 1) + "|",
        "| lexical mean rarity | " + " | ".join(f"{r:.3f}" for r in cal["lexical_rarity"].values()) + " |",
    ]
    lexical = [r for r in result["runs"] if r.get("lexical_rarity")]
    if lexical:
        lines += [
            "",
            f"In training, the lexical reward's mean rarity, first {WINDOW} reward calls -> last {WINDOW}:",
            "",
        ]
        for r in lexical:
            first, last = ends([{"x": v} for v in r["lexical_rarity"]], "x")
            lines.append(f"- {r['setting']} seed {r['seed']}: {first:.3f} -> {last:.3f}")
    return lines


#: The comparisons fixed before the runs (the module docstring: each setting against grpo on the primary
#: measures), with grpo_semantic_kl - grpo_kl, which the page reads as the KL settings' own question.
PRIMARY_COMPARISONS = (
    *((s, "grpo") for s in ("grpo_semantic", "grpo_kl", "grpo_semantic_kl", "grpo_lexical", "grpo_entropy")),
    ("grpo_semantic_kl", "grpo_kl"),
)
#: Comparisons chosen after the runs: shown with the same statistics, outside the corrected family.
EXPLORATORY_COMPARISONS = (("grpo_semantic_kl", "grpo_semantic"), ("grpo_lexical_j0.02", "grpo"))
EXPLORATORY_MEASURES = (*PRIMARY, "ead", "distinct_2")


def comparisons_section(result: dict[str, Any]) -> list[str]:
    """Power and multiple comparisons, from the runs: the primary family Holm-corrected, the rest exploratory."""
    primary = paired_rows(result["runs"], PRIMARY_COMPARISONS, PRIMARY)
    if not primary:
        return []
    for row, adjusted in zip(primary, holm([r["p"] for r in primary])):
        row["holm"] = adjusted
    intervals = [
        diff for table in ("difference", "difference_kl") for diff in result["summary"].get(table, {}).values()
    ]
    cells = [d[m] for d in intervals for m in SHOWN]
    starred = sum(1 for c in cells if c["low"] is not None and not c["low"] <= 0 <= c["high"])
    lines = [
        "",
        "## Primary comparisons: multiple comparisons and power (computed from the runs)",
        "",
        f"The family: the primary measures named in this experiment's docstring before any full run (held-out "
        f"{', '.join(PRIMARY)}, each setting minus grpo, paired by seed), and grpo_semantic_kl - grpo_kl (the KL "
        "settings' own question, added to the family after the runs, on 2026-12-04, when the correction itself was "
        f"chosen): {len(primary)} tests. p: two-sided "
        f"paired t-test; Holm: Holm's step-down adjustment over the {len(primary)} (family-wise error 5 %: "
        "an effect is claimed only where Holm < 0.05). detectable: the smallest true difference these seeds "
        "detect with 80 % power at a two-sided 5 % level, delta = nc x sd / sqrt(n), nc the noncentrality at "
        "which a noncentral t with n - 1 degrees of freedom exceeds the t critical value with probability 0.8 "
        "(`experiments/_stats.py: detectable_difference`; 5 seeds: 1.68 x sd, 3 seeds: 3.26 x sd); sd: "
        "the per-seed differences' standard deviation. An interval that includes 0 with a detectable "
        "difference larger than the effect asked about says *undecided*, not *no effect*. "
        f"Every other interval on this page ({len(cells)} in the difference tables, {starred} of them starred) "
        "is exploratory and uncorrected: at 95 % about one in twenty excludes 0 by chance alone.",
        "",
        "| comparison | measure | n | difference [95 % CI] | sd | p | Holm | detectable (80 %) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in primary:
        ci = interval(r["per_seed"])
        lines.append(
            f"| {r['comparison']} | {r['measure']} | {r['n']} | {_cell(ci)} | {r['sd']:.3f} | {r['p']:.3f} "
            f"| {r['holm']:.3f}{' *' if r['holm'] < 0.05 else ''} | {r['detectable']:.3f} |"
        )
    exploratory = paired_rows(result["runs"], EXPLORATORY_COMPARISONS, EXPLORATORY_MEASURES)
    if exploratory:
        lines += [
            "",
            "Chosen after the runs (exploratory, outside the corrected family; same statistics, no Holm):",
            "",
            "| comparison | measure | n | difference [95 % CI] | sd | p | detectable (80 %) |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in exploratory:
            lines.append(
                f"| {r['comparison']} | {r['measure']} | {r['n']} | {_cell(interval(r['per_seed']))} "
                f"| {r['sd']:.3f} | {r['p']:.3f} | {r['detectable']:.3f} |"
            )
    lines += ["", "`*` (Holm column): significant after the correction."]
    return lines


def _difference_table(differences: dict[str, dict[str, Any]]) -> list[str]:
    """Paired differences as table lines, ``*`` where the interval excludes 0."""
    lines = ["| setting | " + " | ".join(SHOWN) + " |", "|---" * (len(SHOWN) + 1) + "|"]
    for s, diff in differences.items():
        cells = []
        for m in SHOWN:
            d = diff[m]
            mark = "" if d["low"] is None or d["low"] <= 0 <= d["high"] else " *"
            cells.append(_cell(d) + mark)
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return lines


def page(result: dict[str, Any], reading: str = "", sections: list[str] | None = None) -> str:
    """The results page (markdown) from results.json's content; ``reading`` is the hand-written section kept.

    ``sections``: :func:`run_sections`'.
    """
    cfg = result["config"]
    lines = [
        "# GRPO and within-group diversity on the base model",
        "",
        "Written by `experiments/grpo_diversity.py`"
        + (" **--quick: a smoke test, the numbers mean nothing**" if result["quick"] else "")
        + ".",
        f"GRPO on `local:chitchat-gpt2`, {cfg['steps']} steps of {cfg['prompts']} prompts x G = {cfg['num_generations']}, "
        f"replies of at most {cfg['max_completion_length']} tokens, learning rate {cfg['learning_rate']}, "
        f"temperature {cfg['temperature']}, scale_rewards={cfg['scale_rewards']!r}, KL beta {cfg['beta']} (the _kl "
        f"settings; 0 elsewhere), entropy_coef {cfg['entropy_coef']} (grpo_entropy), word-bigram Jaccard threshold "
        f"{cfg['lexical_threshold']} (grpo_lexical), seeds {result['seeds']}; "
        f"task reward: {cfg.get('task', 'eight_words')}. Machine: {result['machine']}.",
        "",
    ]
    if reading:
        lines += [reading.rstrip(), ""]
    if not result["runs"]:
        lines += ["*No full run yet: the settings above are fixed before the runs; the runs are to come.*", ""]
    else:
        lines += run_sections(result, sections)
    if result.get("lexical_calibration"):
        lines += lexical_section(result)
    if result.get("pilot"):
        lines += ["", "## Pilot (one seed per regime; the full settings were fixed after it)", ""]
        cols = ("judge_group_sem_ent", "group_sem_ent", "task_reward", "nll", "top_word_share", "cut_share")
        lines += [
            "| setting | task | lr | beta | T | steps | mask cut | "
            + " | ".join(f"{c} first->last" for c in cols)
            + " | held-out judge Sem-Ent | held-out distinct-2 | held-out nll | held-out words | greedy |",
            "|---" * (len(cols) + 12) + "|",
        ]
        for p in result["pilot"]:
            cells = [f"{p['ends'][c][0]:.2f} -> {p['ends'][c][1]:.2f}" if p["ends"] else "-" for c in cols]
            greedy = " / ".join(p["greedy"])
            lines.append(
                f"| {p['setting']} | {p['task']} | {p['learning_rate']:g} | {p['beta']:g} | {p['temperature']:g} | "
                f"{p['steps']} | "
                + ("yes | " if p.get("mask_truncated") else "no | ")
                + " | ".join(cells)
                + f" | {p['held_out']['judge_group_sem_ent']:.3f} | {p['held_out']['distinct_2']:.3f} "
                + f"| {p['held_out']['nll']:.2f} | {p['held_out']['length_words']:.1f} | {_esc(greedy)} |"
            )
    lines += ["", *environment_lines(result)]
    if result["runs"]:
        lines += [f"## Examples (seed {result['seeds'][0]})", ""]
    for r in result["runs"]:
        if r["seed"] != result["seeds"][0]:
            continue
        ex = r["examples"]
        lines += [f"**{r['setting']}**", "", "| prompt | greedy | sampled |", "|---|---|---|"]
        k = len(ex["sampled"]) // max(1, len(ex["prompts"]))
        for i, p in enumerate(ex["prompts"]):
            sampled = " / ".join(ex["sampled"][i * k : (i + 1) * k])
            lines.append("| " + " | ".join(_esc(c) for c in (p, ex["greedy"][i], sampled)) + " |")
        lines.append("")
    return "\n".join(lines) + "\n"


def write(result: dict[str, Any], out: Path) -> None:
    """results.json, the curves and the page (keeping its reading), each written whole or not at all."""
    from lightning_div._internal.io import atomic_write_text

    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "results.json", json.dumps(result, indent=1, allow_nan=False))
    if result["runs"]:
        figure(result, out / "curves.png")
    md = out.with_suffix(".md")
    atomic_write_text(md, page(result, kept_reading(md)))


def setting_order(setting: str) -> tuple[int, str]:
    """Settings in :data:`SETTINGS` order, a lexical run at another threshold after ``grpo_lexical``."""
    return SETTINGS.index(setting.split("_j")[0]), setting


def run_name(run: dict[str, Any], cfg: dict[str, Any]) -> str:
    """A run's name on the page: ``grpo_lexical`` at a threshold other than the fixed one is ``grpo_lexical_j<t>``."""
    threshold = run.get("lexical_threshold", cfg["lexical_threshold"])
    if run["setting"] != "grpo_lexical" or threshold == FULL["lexical_threshold"]:
        return str(run["setting"])
    return f"grpo_lexical_j{threshold:g}"


def _fixed(cfg: dict[str, Any]) -> dict[str, Any]:
    """A config without the lexical threshold: parts that differ only in it merge (their runs named apart)."""
    return {k: v for k, v in cfg.items() if k != "lexical_threshold"}


def _run_fields(run: dict[str, Any]) -> dict[str, type]:
    """What the summary and the page read of a run besides its held-out measures (``float``: a finite number)."""
    return {"steps": list, "examples": dict, "wall_s": float, "reward_s": float, "monitor_s": float, "step_s": float}


def _read(path: Path) -> dict[str, Any]:
    """One part (or pilot part), checked (``experiments/_merge.py``), its ``base`` included."""
    from _merge import MergeError, read_part

    # a merged results.json is a part too: its lexical runs at a matched threshold are named grpo_lexical_j<t>
    part = read_part(path, "grpo_diversity", lambda s: s.split("_j")[0] in SETTINGS, MEASURES, _run_fields)
    base = part.get("base", {})
    if not isinstance(base, dict) or not all(isinstance(v, dict) for v in base.values()):
        kind = "a list" if isinstance(base, list) else type(base).__name__ if not isinstance(base, dict) else "a value"
        raise MergeError(f"{path}: 'base' must be an object of the base model's measures per seed, got {kind}")
    return part


def merge(parts: list[Path], out: Path, pilot: list[Path] | None = None) -> dict[str, Any]:
    """One results.json and page from parts run apart, every run kept once (``experiments/_merge.py``).

    Raises:
        MergeError: a damaged part or one of another experiment (named), parts made with other settings
            (config) than the others (the lexical threshold aside), parts holding different runs of a setting
            and seed or disagreeing on a seed's base measurements or on the lexical calibration, or an ``out``
            that would write over one of the parts or pilot parts.
    """
    from _merge import MergeError, each_run_once, each_seed_once, refuse_writing_over_inputs

    refuse_writing_over_inputs(
        out, [out / "results.json", out / "curves.png", out.with_suffix(".md")], [*parts, *(pilot or [])]
    )
    loaded = [_read(p) for p in parts]
    pilots = [_read(p) for p in pilot or []]
    if not loaded:  # the pilot alone: the page shows it and the fixed settings, before any full run
        if not pilots:
            raise MergeError("--merge needs results.json parts, or --pilot parts")
        loaded = [{"experiment": "grpo_diversity", "quick": False, "config": dict(FULL), "seeds": [], "runs": []}]
        loaded[0]["machine"] = pilots[0].get("machine") or MACHINE
    # the fixed settings' part heads the page; a part run at a matched lexical threshold differs in that alone
    first = next((p for p in loaded if p["config"].get("lexical_threshold") == FULL["lexical_threshold"]), loaded[0])
    for path, part in zip(parts, loaded):
        if _fixed(part["config"]) != _fixed(first["config"]) or part["quick"] != first["quick"]:
            raise MergeError(f"{path}: made with other settings than the others: {part['config']} vs {first['config']}")
    calibration = None
    for path, part in zip(parts, loaded):
        if calibration and part.get("lexical_calibration") not in (None, calibration):
            raise MergeError(
                f"{path}: the parts disagree on the lexical calibration: {part['lexical_calibration']} vs {calibration}"
            )
        calibration = part.get("lexical_calibration") or calibration
    named = [
        (path, [{**r, "setting": run_name(r, part["config"])} for r in part["runs"]])
        for path, part in zip(parts, loaded)
    ]
    found = each_run_once(named, lambda r: (r["setting"], r["seed"]))
    runs = sorted(found, key=lambda r: (r["seed"], setting_order(r["setting"])))
    settings = sorted({r["setting"] for r in runs}, key=setting_order)
    base = each_seed_once(
        [(path, part.get("base", {})) for path, part in zip(parts, loaded)], "the base model's held-out measures"
    )
    result = {
        **first,
        "machine": first.get("machine") or MACHINE,  # a part's partial.json (a run stopped midway) has none
        "seeds": sorted({int(r["seed"]) for r in runs}),
        "base": base,
        "runs": runs,
        "summary": summarise(runs, settings, base),
        "pilot": pilot_rows(pilots),
        **({"lexical_calibration": calibration} if calibration else {}),
        "environments": environments(loaded + pilots),  # each part's own: they may have run in other environments
    }
    result.pop("environment", None)
    write(result, out)
    print(f"[grpo_diversity] merged {len(parts)} parts ({len(runs)} runs) into {out / 'results.json'}")
    return result


def rebuild(out: Path, rescored: Path | None = None, stored: Path | None = None) -> str:
    """Rewrite ``out``'s page from ``out/results.json`` (no run), its reading kept; with the sections of
    ``_grpo_sections`` for a rescoring of its replies (``rescored``) and the stored runs it reran (``stored``).

    Raises:
        MergeError: a damaged or missing results.json (or one without a summary: a part's partial.json), or a
            rescoring or stored results that are not of its runs (named).
    """
    from _grpo_sections import read_rescored, read_stored, rerun_lines, rescored_lines
    from _merge import MergeError
    from rescore import stored_runs

    from lightning_div._internal.io import atomic_write_text

    result = _read(out / "results.json")
    if not isinstance(result.get("summary"), dict):
        raise MergeError(f"{out / 'results.json'}: no summary: a run's or a merge's results.json, not a partial.json")
    _, held = stored_runs(out / "results.json")  # the runs as the page names them, the base model's as "base"
    sections = []
    if rescored:
        sections += rescored_lines(held, read_rescored(rescored, result, held), PRIMARY_COMPARISONS, PRIMARY)
    if stored:
        sections += rerun_lines(
            held, read_stored(stored, result, held), MEASURES, PRIMARY, f"`{stored.parent.name}/{stored.name}`"
        )
    md = out.with_suffix(".md")
    text = page(result, kept_reading(md), sections)
    atomic_write_text(md, text)
    print(f"[grpo_diversity] rewrote {md} from {out / 'results.json'}")
    return text


def _threshold(text: str) -> float | str:
    """``--lexical-threshold``: ``matched``, or a Jaccard threshold in (0, 1]."""
    if text == "matched":
        return text
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected 'matched' or a number in (0, 1], got {text!r}")
    return value


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--settings", nargs="+", choices=SETTINGS, default=list(SETTINGS))
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="default: 0 1 2 3 4 (--quick: 0)")
    parser.add_argument("--steps", type=int, default=None, help="a pilot's; the full runs use the fixed settings")
    parser.add_argument("--learning-rate", type=float, default=None, help="a pilot's")
    parser.add_argument("--beta", type=float, default=None, help="a pilot's KL beta for the _kl settings")
    parser.add_argument("--temperature", type=float, default=None, help="a pilot's sampling temperature")
    parser.add_argument("--task", choices=sorted(TASKS), default=None, help="a pilot's task reward")
    parser.add_argument(
        "--mask-truncated",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a pilot's GRPOConfig(mask_truncated_completions=...): completions cut at the length limit add no loss",
    )
    parser.add_argument(
        "--lexical-threshold",
        type=_threshold,
        default=None,
        help="grpo_lexical's word-bigram Jaccard threshold: a number in (0, 1], or 'matched' (see above)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "grpo_diversity")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (one run per core)")
    parser.add_argument(
        "--save-replies",
        action="store_true",
        help="keep every run's held-out replies (and the base model's) in --out/replies/<setting>_seed<seed>.json, "
        "for experiments/rescore.py; changes no number",
    )
    parser.add_argument(
        "--merge",
        nargs="*",
        type=Path,
        default=None,
        help="combine the results.json of runs made apart (e.g. one seed each) into --out, every run once (parts "
        "holding different runs of a setting and seed are refused; --out may not hold an input) "
        "(none, with --pilot: the pilot's page before the full runs)",
    )
    parser.add_argument(
        "--pilot", nargs="+", type=Path, default=None, help="with --merge: the pilot runs' results.json"
    )
    add_page_arguments(parser)
    args = parser.parse_args(argv)
    if rebuild_if_asked(parser, args, "grpo_diversity.py", rebuild):
        return {}
    if args.merge is not None:
        from _merge import MergeError, fail

        try:
            return merge(args.merge, args.out, args.pilot)
        except MergeError as err:  # a user's mistake: one line, exit code 2
            fail("grpo_diversity.py --merge", err)

    import torch

    from lightning_div import SemanticSpace
    from lightning_div.datamodules import read_pairs
    from lightning_div.metrics import count_vocab

    torch.set_num_threads(args.threads)
    cfg = dict(QUICK if args.quick else FULL)
    pilot_knobs = (
        ("steps", args.steps),
        ("learning_rate", args.learning_rate),
        ("beta", args.beta),
        ("mask_truncated", args.mask_truncated),
        ("temperature", args.temperature),
        ("task", args.task),
    )
    for key, value in pilot_knobs:
        if value is not None:
            cfg[key] = value
    seeds = args.seeds if args.seeds is not None else ([0] if args.quick else [0, 1, 2, 3, 4])
    args.out.mkdir(parents=True, exist_ok=True)
    # the clusters' references (--quick: 100, a smoke test)
    references = [p.response for p in read_pairs("chitchat:finetune", max_turns=1)[: 100 if args.quick else 500]]
    space = SemanticSpace(encoder="minilm", num_clusters=8, dirpath=args.out / "cache", show_progress=False)
    space.fit(references)
    # the judge: the untouched base model's own hidden states, clusters fitted on the same replies
    judge = SemanticSpace(
        encoder="local:chitchat-gpt2", num_clusters=8, dirpath=args.out / "cache", show_progress=False
    )
    judge.fit(references)
    from lightning_div import load_base_model

    base, tokenizer = load_base_model()
    base.eval()
    ruler = Ruler(space, judge, base, tokenizer, count_vocab(references), TASKS[cfg["task"]])
    calibration = calibrate_lexical(ruler, cfg) if args.lexical_threshold == "matched" else None
    if calibration:
        cfg["lexical_threshold"] = calibration["chosen"]
        print(f"[grpo_diversity] lexical threshold matched: {calibration}", flush=True)
    elif args.lexical_threshold is not None:
        cfg["lexical_threshold"] = args.lexical_threshold
    kept = args.out if args.save_replies else None
    base_held = {str(seed): measure_base(ruler, cfg, seed, kept) for seed in seeds}
    recorded = environment()  # once: the process's versions do not change while it runs
    runs = []
    for seed in seeds:
        for setting in args.settings:
            print(f"[grpo_diversity] {setting} seed {seed} ...", flush=True)
            runs.append(run(setting, seed, cfg, ruler, args.out, args.save_replies))
            held = runs[-1]["held_out"]
            print(
                f"[grpo_diversity] {setting} seed {seed}: " + ", ".join(f"{k} {v:.3f}" for k, v in held.items()),
                flush=True,
            )
            # each finished run is kept at once: a long part stopped midway keeps the runs it finished
            partial = {
                "experiment": "grpo_diversity",
                "quick": args.quick,
                "config": cfg,
                "seeds": seeds,
                "environment": recorded,
                "base": base_held,
                "runs": runs,
                **({"lexical_calibration": calibration} if calibration else {}),
            }
            from lightning_div._internal.io import atomic_write_text

            atomic_write_text(args.out / "partial.json", json.dumps(partial, indent=1, allow_nan=False))
    result = {
        "experiment": "grpo_diversity",
        "quick": args.quick,
        "config": cfg,
        "seeds": seeds,
        "machine": MACHINE,
        "environment": recorded,
        "base": base_held,
        "runs": runs,
        "summary": summarise(runs, list(args.settings), base_held),
        "pilot": [],
        **({"lexical_calibration": calibration} if calibration else {}),
    }
    write(result, args.out)
    print(f"[grpo_diversity] wrote {args.out / 'results.json'} and {args.out.with_suffix('.md')}")
    return result


if __name__ == "__main__":
    main()
