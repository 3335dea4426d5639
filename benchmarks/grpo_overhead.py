"""What group diversity costs a GRPO run: the callback and the reward against the GRPO step, in one run.

GRPOTrainer trains the shipped base model (``local:chitchat-gpt2``) on Chit-Chat prompts with
``SemanticGroupReward(quality=about_eight_words)`` (quality x DARLING's diversity, clusters of
all-MiniLM-L6-v2) and ``GroupDiversityMonitor`` (a reward function after it, adding 0.0)
measuring every generation batch. Per step, measured in the same process:

* **step s**: from the Trainer's ``on_step_begin`` to its ``on_step_end`` (generation, the
  reward functions, the forward and backward passes);
* **reward s**: the reward function's own calls in that step (part of step s);
* **callback s**: the callback's measurement (``diversity/runtime``), also part of step s (TRL
  calls it with the reward functions). It shares the reward's space and comes after it in
  ``reward_funcs``, so it reads the cluster ids the reward assigned to the same completions
  instead of embedding them again; ``--no-reuse`` gives the reward its own space (the callback
  then embeds the completions itself, as it does without a SemanticGroupReward).

The one-off work before training (loading the encoder, embedding and clustering 500 reference
replies) is timed apart; the first step is reported apart from the others, which are averaged. Then, on the last step's groups, the equivalences' cost: the clusters (G embeddings
per group) and the cosine threshold against pairwise NLI (G (G - 1) pairs per group, DARLING's
kind of classifier), with a random-init RoBERTa classifier of the given shape (no NLI weights
ship offline; ``--layers 24 --dim 1024 --heads 16`` is roberta-large's shape).

    python benchmarks/grpo_overhead.py                  # 8 steps, 4 prompts x G=8: ~5 min on 2 busy cores
    python benchmarks/grpo_overhead.py --quick          # smoke test: 2 steps, 2 prompts x G=4
    python benchmarks/grpo_overhead.py --layers 24 --dim 1024 --heads 16
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def about_eight_words(completions: list[str], **kwargs: Any) -> list[float]:
    """The task reward: 1 for a reply of 8 words, 0 from 16 words or none."""
    return [max(0.0, 1 - abs(len(c.split()) - 8) / 8) for c in completions]


def timed_reward(**kwargs: Any) -> Any:
    """A SemanticGroupReward that adds its calls' seconds to ``.seconds`` (still one, so the monitor finds it)."""
    from lightning_div.integrations.trl import SemanticGroupReward

    class TimedReward(SemanticGroupReward):
        seconds = 0.0

        def __call__(self, *args: Any, **kw: Any) -> Any:
            start = time.perf_counter()
            try:
                return super().__call__(*args, **kw)
            finally:
                self.seconds += time.perf_counter() - start

    return TimedReward(**kwargs)


def nli_scorer(layers: int, dim: int, heads: int) -> Any:
    """A random-init RoBERTa NLI classifier (as benchmarks/nli.py builds it) around a locally trained tokenizer."""
    import torch
    from transformers import RobertaConfig, RobertaForSequenceClassification

    from lightning_div.datamodules.formats import iter_texts, read_chitchat
    from lightning_div.model.tiny import train_tokenizer
    from lightning_div.nli.scorer import NLIScorer

    tok = train_tokenizer(iter_texts(read_chitchat("train", max_turns=1, max_conversations=300)), 4000, seq2seq=True)
    config = RobertaConfig(
        vocab_size=50265,
        hidden_size=dim,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * dim,
        max_position_embeddings=514,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        num_labels=3,
        id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
    )
    torch.manual_seed(0)
    return NLIScorer.from_model(RobertaForSequenceClassification(config).eval(), tok, show_progress=False)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step")
    parser.add_argument("--num-generations", type=int, default=8, help="G")
    parser.add_argument("--max-completion-length", type=int, default=24)
    parser.add_argument("--layers", type=int, default=2, help="the NLI classifier's layers")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="smoke test: 2 steps, 2 prompts x G=4, 12 tokens")
    parser.add_argument("--no-reuse", action="store_true", help="the reward in a space of its own")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.prompts, args.num_generations, args.max_completion_length = 2, 2, 4, 12

    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from lightning_div import SemanticSpace, load_base_model
    from lightning_div.datamodules import read_pairs
    from lightning_div.integrations.trl import GroupDiversityMonitor, group_labels
    from lightning_div.integrations.trl.rollouts import completion_texts
    from lightning_div.settings import Outputs

    g = args.num_generations
    model, tokenizer = load_base_model()
    pairs = read_pairs("chitchat:finetune", max_turns=1)
    prompts = Dataset.from_dict({"prompt": [p.context[-1] + tokenizer.eos_token for p in pairs[: 8 * args.prompts]]})
    references = [p.response for p in pairs[:500]]
    work = Path(tempfile.mkdtemp(prefix="grpo_overhead_"))
    space = SemanticSpace(encoder="minilm", num_clusters=8, dirpath=work / "cache", show_progress=False)
    start = time.perf_counter()
    space.fit(references)  # one-off: the encoder loaded, the references embedded and clustered
    fit_s = time.perf_counter() - start
    reward_space = space
    if args.no_reuse:
        reward_space = SemanticSpace(encoder="minilm", num_clusters=8, dirpath=work / "cache", show_progress=False)
        reward_space.fit(references)  # read back from the cache the first fit wrote
    reward = timed_reward(num_generations=g, space=reward_space, quality=about_eight_words)
    steps: list[dict[str, float]] = []

    class StepTimer(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self.start, self.reward_before = time.perf_counter(), reward.seconds

        def on_step_end(self, *a: Any, **k: Any) -> None:
            steps.append({"step_s": time.perf_counter() - self.start, "reward_s": reward.seconds - self.reward_before})

    config = GRPOConfig(
        output_dir=str(work / "run"),
        num_generations=g,
        per_device_train_batch_size=args.prompts * g,
        max_completion_length=args.max_completion_length,
        max_steps=args.steps,
        logging_steps=1,
        learning_rate=1e-5,
        bf16=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        seed=0,
    )
    # the monitor is a reward function that adds 0.0; after the reward, it reuses the reward's cluster ids
    monitor = GroupDiversityMonitor(space=space, cluster_texts=references, outputs=Outputs(log_samples=0))
    trainer = GRPOTrainer(
        model=model, reward_funcs=[reward, monitor], args=config, train_dataset=prompts, processing_class=tokenizer
    )
    trainer.add_callback(StepTimer())
    monitor.attach(trainer)
    trainer.train()
    for row, measured in zip(steps, monitor.history):
        row["callback_s"] = measured["diversity/runtime"]
    print(f"the callback reused the reward's cluster ids: {monitor.reused_reward_ids}")

    def mean(key: str, rows: list[dict[str, float]]) -> float:
        return sum(r[key] for r in rows) / len(rows)

    later = steps[1:] or steps
    print(f"GRPO: {args.steps} steps of {args.prompts} prompts x G={g}, <= {args.max_completion_length} tokens, CPU")
    print(
        f"one-off, before training: encoder loaded + {len(references)} references embedded and clustered: {fit_s:.1f} s"
    )
    print(f"{'':<16}{'step s':>9}{'reward s':>10}{'callback s':>12}{'reward %':>10}{'callback %':>12}")
    for label, rows in (("first step", steps[:1]), (f"steps 2-{len(steps)}", later)):
        st, rw, cb = mean("step_s", rows), mean("reward_s", rows), mean("callback_s", rows)
        print(f"{label:<16}{st:>9.2f}{rw:>10.3f}{cb:>12.3f}{100 * rw / st:>9.1f}%{100 * cb / st:>11.1f}%")

    assert monitor.last_batch is not None, "the monitor measured no batch"
    completions = completion_texts(monitor.last_batch.completions)
    scorer = nli_scorer(args.layers, args.dim, args.heads)
    costs = {}
    for name, kwargs in (
        ("clusters", {"equivalence": "clusters", "space": space}),
        ("cosine", {"equivalence": "cosine", "space": space}),
        ("nli", {"equivalence": "nli", "nli": scorer}),
    ):
        group_labels(completions[:g], g, **kwargs)  # warm-up
        start = time.perf_counter()
        group_labels(completions, g, **kwargs)
        costs[name] = time.perf_counter() - start
    groups = len(completions) // g
    print(f"\nequivalence on the last step's {groups} groups of {g} ({groups * g * (g - 1)} NLI pairs):")
    for name, seconds in costs.items():
        print(f"  {name:<9}{seconds:8.3f} s   {seconds / costs['clusters']:6.1f}x clusters")
    print(f"  (NLI classifier: random-init RoBERTa, {args.layers} layers, dim {args.dim})")
    result = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "fit_s": fit_s,
        "steps": steps,
        "equivalence_s": costs,
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
