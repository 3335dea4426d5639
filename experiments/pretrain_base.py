"""Pretrain the project's base model: a small GPT-2 chit-chat model on Chit-Chat's pretraining conversations.

    python experiments/pretrain_base.py [--quick] [--out DIR] [--epochs 3] [--n-layer 4 --n-embd 256 ...]

The model the demo, the README's first script and the experiments fine-tune, as users
fine-tune DialoGPT. It is trained on the Chit-Chat conversations of the ``pretrain`` split
(the training split minus the held-out ``finetune`` slice; the validation and test
conversations are never seen) as continuous token streams in DialoGPT's layout: every
turn followed by EOS, the conversations of an epoch in a seeded random order, cut into
blocks of ``--block`` tokens, so every token is seen once per epoch.

The tokenizer is the 4,000-token ``local:chitchat`` byte-level BPE (so losses stay
comparable with the from-scratch runs) plus a ``<pad>`` token (id 4000) that training never
sees. The held-out loss is the response loss of DialogueLM's ``val/loss`` (nats per token,
EOS included, context turns not scored) on Chit-Chat's validation conversations with two
context turns, computed over all their tokens at once.

Writes ``DIR/model`` (fp16 safetensors, the tokenizer, a generation config), ``DIR/results.json``
(per-evaluation losses, timing, samples before and after) and ``DIR/loss.png``.
Deterministic for a seed and a thread count (``--threads``).
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

# OpenMP threads that sleep at barriers instead of spinning: on a 2-core machine shared with other
# jobs, spinning threads wait for descheduled ones and the run crawls (292 vs ~2,000 tokens/s seen
# here under load). The numbers do not depend on it. Set before torch starts its thread pool.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch
from _environment import environment

HERE = Path(__file__).resolve().parent

# Chosen by a short-schedule comparison of shapes with equal throughput (docs/results/pretrain_base.md).
FULL = dict(n_layer=4, n_embd=256, n_head=4, positions=128, block=128, batch_size=32, epochs=3.0, warmup=200)
QUICK = dict(n_layer=1, n_embd=32, n_head=2, positions=64, block=64, batch_size=16, epochs=2.0, warmup=10, val_pairs=64)
NUM_SAMPLES = 20  # fixed validation contexts shown before and after
QUICK_SAMPLES = 4  # --quick's: its 20 contexts' 80 generate() calls were a quarter of its time


def log(msg: str) -> None:
    print(msg, flush=True)


def pretraining_stream(tokenizer: Any, max_conversations: int | None = None) -> list[np.ndarray]:
    """The token ids of each pretraining conversation: every turn followed by EOS (DialoGPT's layout)."""
    from lightning_div.chitchat import chitchat_conversations

    eos = tokenizer.eos_token_id
    out = []
    for _, turns in chitchat_conversations("pretrain", max_conversations):
        ids = tokenizer(turns, add_special_tokens=False)["input_ids"]
        out.append(np.fromiter((t for turn in ids for t in (*turn, eos)), dtype=np.int64))
    return out


def epoch_blocks(conversations: list[np.ndarray], block: int, seed: int, epoch: int) -> torch.Tensor:
    """One epoch: the conversations in a seeded order, concatenated and cut into (n, block) rows."""
    order = np.random.default_rng([seed, epoch]).permutation(len(conversations))
    stream = np.concatenate([conversations[i] for i in order])
    n = len(stream) // block
    rows = torch.from_numpy(stream[: n * block].reshape(n, block))
    return rows[torch.from_numpy(np.random.default_rng([seed, epoch, 1]).permutation(n))]


def heldout_loss(model: Any, encoded: Any, pad_id: int, batch_size: int = 64) -> float:
    """Mean response-token loss (nats) over all the held-out pairs' tokens."""
    from lightning_div.datamodules.encoding import DialogueCollator, EncodedDialogues

    data = EncodedDialogues(encoded)
    collate = DialogueCollator(pad_token_id=pad_id)
    order = sorted(range(len(data)), key=lambda i: len(encoded[i][0]) + len(encoded[i][1]))
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            batch = collate([data[i] for i in order[start : start + batch_size]])
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            labels = batch["labels"][:, 1:]
            losses = torch.nn.functional.cross_entropy(
                logits[:, :-1].flatten(0, 1).float(), labels.flatten(), ignore_index=-100, reduction="sum"
            )
            total += float(losses)
            count += int((labels != -100).sum())
    model.train()
    return total / count


def samples(model: Any, tokenizer: Any, contexts: list[list[str]], seed: int) -> list[dict[str, str]]:
    """Greedy (3-gram blocking, as the monitors) and sampled (top-p 0.9) replies to fixed contexts."""
    eos = tokenizer.eos_token
    out = []
    model.eval()
    for context in contexts:
        prompt = tokenizer("".join(t + eos for t in context), return_tensors="pt")
        # the prompt's last tokens, leaving room in the window for the reply (96 of the shipped 128)
        ids = prompt["input_ids"][:, -(model.config.n_positions - 32) :]
        common = dict(max_new_tokens=24, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        with torch.no_grad():
            greedy = model.generate(ids, do_sample=False, no_repeat_ngram_size=3, **common)
            torch.manual_seed(seed)
            sampled = model.generate(ids, do_sample=True, top_p=0.9, top_k=0, **common)
        n = ids.size(1)
        out.append(
            {
                "context": " / ".join(context),
                "greedy": tokenizer.decode(greedy[0, n:], skip_special_tokens=True).strip(),
                "sampled": tokenizer.decode(sampled[0, n:], skip_special_tokens=True).strip(),
            }
        )
    model.train()
    return out


def build(args: argparse.Namespace) -> tuple[Any, Any]:
    from transformers import GPT2Config, GPT2LMHeadModel

    from lightning_div.model.loading import base_tokenizer

    tokenizer = base_tokenizer()
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=args.positions,
        n_embd=args.n_embd,
        n_layer=args.n_layer,
        n_head=args.n_head,
        resid_pdrop=args.dropout,
        embd_pdrop=args.dropout,
        attn_pdrop=args.dropout,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(args.seed)
    return GPT2LMHeadModel(config), tokenizer


def plot(history: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    train = [h for h in history if "train_loss" in h]
    ax.plot([h["epoch"] for h in train], [h["train_loss"] for h in train], label="training stream (all tokens)")
    ax.plot(
        [h["epoch"] for h in history],
        [h["heldout_loss"] for h in history],
        "o-",
        label="held-out responses (validation)",
    )
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss (nats / token)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tiny setting for the tests (< 1 minute)")
    parser.add_argument("--out", type=Path, default=HERE.parent / "runs" / "pretrain_base")
    parser.add_argument("--n-layer", type=int)
    parser.add_argument("--n-embd", type=int)
    parser.add_argument("--n-head", type=int)
    parser.add_argument("--positions", type=int, help="the model window (n_positions)")
    parser.add_argument("--block", type=int, help="tokens per training row")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (cosine decay to 10 %%)")
    parser.add_argument("--warmup", type=int, help="warm-up steps")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--epochs", type=float, help="the schedule's length (3 epochs: ~55 minutes on 2 quiet cores)")
    parser.add_argument(
        "--stop-after", type=int, default=None, help="stop after this many steps, the schedule unchanged (shape search)"
    )
    parser.add_argument("--evals-per-epoch", type=int, default=2)
    parser.add_argument("--val-pairs", type=int, help="held-out pairs evaluated during training (default all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--log-every", type=int, default=50, help="a progress line every N steps")
    parser.add_argument(
        "--finalize",
        action="store_true",
        help="no training: measure OUT/model as shipped (float16), write its model card, and with --install copy it "
        "into the package",
    )
    parser.add_argument("--install", action="store_true", help="copy OUT/model to lightning_div/model/chitchat-gpt2")
    args = parser.parse_args(argv)
    if args.finalize:
        return finalize(args.out, install=args.install)
    preset = QUICK if args.quick else FULL
    for key, value in preset.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)

    from lightning_div.datamodules.encoding import encode_pairs
    from lightning_div.datamodules.formats import read_pairs
    from lightning_div.model.formatting import DialogueLayout

    model, tokenizer = build(args)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"pretrain_base: GPT-2 {args.n_layer} x {args.n_embd} ({n_params / 1e6:.2f} M parameters), seed {args.seed}")
    conversations = pretraining_stream(tokenizer, max_conversations=20 if args.quick else None)
    tokens_per_epoch = sum(len(c) for c in conversations)
    log(f"pretrain_base: {len(conversations):,} conversations, {tokens_per_epoch:,} tokens per epoch")

    val = read_pairs("chitchat:validation", max_turns=2)
    val = val[: args.val_pairs] if args.val_pairs else list(val)
    encoded_val = encode_pairs(val, tokenizer, model, DialogueLayout(max_turns=2), show_progress=False)
    rng = np.random.default_rng(1234)
    num_samples = QUICK_SAMPLES if args.quick else NUM_SAMPLES
    sample_contexts = [list(val[i].context) for i in sorted(rng.choice(len(val), num_samples, replace=False))]

    # the schedule is a number of epochs (not a time budget), so that a seed gives one result on any machine
    rows_per_epoch = tokens_per_epoch // args.block
    steps_per_epoch = rows_per_epoch // args.batch_size
    total_steps = max(1, int(args.epochs * steps_per_epoch))
    log(
        f"pretrain_base: {total_steps:,} steps of {args.batch_size} x {args.block} tokens "
        f"({total_steps / steps_per_epoch:.2f} epochs), lr {args.lr} cosine, warm-up {args.warmup}"
    )

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "ln" not in n]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 or "ln" in n]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
    )

    def lr_at(step: int) -> float:
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        progress = (step - args.warmup) / max(1, total_steps - args.warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))

    before = samples(model, tokenizer, sample_contexts, args.seed)
    first = heldout_loss(model, encoded_val, tokenizer.pad_token_id)
    history: list[dict[str, Any]] = [{"step": 0, "epoch": 0.0, "heldout_loss": first}]
    log(f"pretrain_base: step 0, held-out loss {first:.4f}")
    eval_every = max(1, steps_per_epoch // args.evals_per_epoch)
    start, cpu_start = time.time(), time.process_time()
    step, epoch, running, running_n = 0, 0, 0.0, 0
    model.train()
    while step < total_steps:
        rows = epoch_blocks(conversations, args.block, args.seed, epoch)
        torch.manual_seed(args.seed * 1000 + epoch)  # dropout masks, per epoch
        for b in range(steps_per_epoch):
            if step >= total_steps:
                break
            x = rows[b * args.batch_size : (b + 1) * args.batch_size]
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
            loss = model(input_ids=x, labels=x).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            step += 1
            running += loss.item()
            running_n += 1
            if step % args.log_every == 0:
                elapsed = time.time() - start
                log(
                    f"pretrain_base: step {step:,}/{total_steps:,} (epoch {step / steps_per_epoch:.2f}), "
                    f"loss {running / running_n:.4f}, lr {lr_at(step):.2e}, "
                    f"{step * args.batch_size * args.block / elapsed:,.0f} tokens/s, {elapsed / 60:.1f} min"
                )
            stopping = args.stop_after is not None and step >= args.stop_after
            if step % eval_every == 0 or step == total_steps or stopping:
                h = heldout_loss(model, encoded_val, tokenizer.pad_token_id)
                history.append(
                    {
                        "step": step,
                        "epoch": round(step / steps_per_epoch, 4),
                        "train_loss": running / max(1, running_n),
                        "heldout_loss": h,
                        "wall_s": round(time.time() - start, 1),
                    }
                )
                running, running_n = 0.0, 0
                log(f"pretrain_base: step {step:,}, held-out loss {h:.4f}")
            if stopping:
                break
        if args.stop_after is not None and step >= args.stop_after:
            break
        epoch += 1
    wall, cpu = time.time() - start, time.process_time() - cpu_start

    final = history[-1]["heldout_loss"]
    # fp16 on disk: half the size; loaded back as float32 (load_base_model upcasts)
    model_dir = args.out / "model"
    save(model, tokenizer, model_dir)
    after = samples(model, tokenizer, sample_contexts, args.seed)
    results = {
        "command": "python experiments/pretrain_base.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__}, {args.threads} threads",
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "parameters": n_params,
        "tokens_per_epoch": tokens_per_epoch,
        "conversations": len(conversations),
        "steps": total_steps,
        "epochs": round(total_steps / steps_per_epoch, 3),
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "heldout_pairs": len(val),
        "heldout_loss_start": first,
        "heldout_loss_final": final,
        "history": history,
        "samples_before": before,
        "samples_after": after,
        "weights_bytes": sum(f.stat().st_size for f in model_dir.glob("*.safetensors")),
        "environment": environment(),
    }
    write_json(args.out / "results.json", results)
    plot(history, args.out / "loss.png")
    # --quick measures what it ships on its own held-out pairs: all 6,025 cost more than its training
    results = finalize(args.out, install=args.install, max_pairs=args.val_pairs if args.quick else None)
    log(
        f"pretrain_base: done in {wall / 60:.1f} min (CPU {cpu / 60:.1f} min); held-out loss {first:.3f} -> {final:.3f}"
    )
    for s in after[:5]:
        log(f"  {s['context'][-60:]!r} -> {s['greedy']!r}")
    return results


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


CHECK_PAIRS = 500  # the tests re-measure the shipped model on the first 500 held-out pairs


def finalize(out: Path, install: bool = False, max_pairs: int | None = None) -> dict[str, Any]:
    """Measure the weights as shipped (float16 on disk, float32 in use), write the model card, install if asked.

    The held-out losses of ``results.json`` during training are of the float32 model; the
    shipped figures (``heldout_loss_shipped`` on every held-out pair, ``heldout_loss_check`` on
    the first 500, which ``tests/test_base_model.py`` reproduces) are of what users load.
    ``max_pairs`` (``--quick``) measures the first held-out pairs only.
    """
    from transformers import AutoTokenizer, GPT2LMHeadModel

    from lightning_div.datamodules.encoding import encode_pairs
    from lightning_div.datamodules.formats import read_pairs
    from lightning_div.model.formatting import DialogueLayout

    results = json.loads((out / "results.json").read_text())
    model = GPT2LMHeadModel.from_pretrained(out / "model").float().eval()
    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    val = list(read_pairs("chitchat:validation", max_turns=2))[:max_pairs]
    encoded = encode_pairs(val, tokenizer, model, DialogueLayout(max_turns=2), show_progress=False)
    results["heldout_loss_shipped"] = heldout_loss(model, encoded, tokenizer.pad_token_id)
    check = encode_pairs(val[:CHECK_PAIRS], tokenizer, model, DialogueLayout(max_turns=2), show_progress=False)
    results["check_pairs"] = min(CHECK_PAIRS, len(val))
    results["heldout_loss_check"] = heldout_loss(model, check, tokenizer.pad_token_id)
    results["heldout_pairs_all"] = len(val)
    portable_tokenizer_config(out / "model" / "tokenizer_config.json")
    write_json(out / "results.json", results)
    (out / "model" / "README.md").write_text(model_card(results))
    log(
        f"pretrain_base: shipped (float16) held-out loss {results['heldout_loss_shipped']:.4f} on {len(val):,} pairs; "
        f"model card written"
    )
    if install:
        import shutil

        target = HERE.parent / "lightning_div" / "model" / "chitchat-gpt2"
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(out / "model", tmp)
        shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
        log(f"pretrain_base: installed into {target}")
    return results


def model_card(r: dict[str, Any]) -> str:
    """The model card that ships beside the weights."""
    c = r["config"]
    per_epoch = "\n".join(
        f"| {h['epoch']:.2f} | {h['train_loss']:.3f} | {h['heldout_loss']:.3f} |"
        if "train_loss" in h
        else f"| {h['epoch']:.2f} | – | {h['heldout_loss']:.3f} |"
        for h in r["history"]
    )
    return f"""# chitchat-gpt2: lightning-div's base model

A small GPT-2 chit-chat model, pretrained by lightning-div so that its demo, examples, tests and
experiments fine-tune a pretrained dialogue model (as users fine-tune DialoGPT) without a download.
Load it with `from lightning_div import load_base_model` or by the name `"local:chitchat-gpt2"`
(`DialogueLM`, configs); `from_pretrained` works on this folder.

**Intended use:** demos, tests and experiments of lightning-div. It is not a production chatbot: it
is small, trained on 2.6 M tokens of casual conversation, and says what such data says.

## Model
- GPT-2 architecture (`GPT2LMHeadModel`): {c["n_layer"]} layers, width {c["n_embd"]}, {c["n_head"]} heads,
  window {c["positions"]} tokens, {r["parameters"]:,} parameters; stored as float16 safetensors
  ({r["weights_bytes"] / 1e6:.1f} MB), loaded as float32.
- Tokenizer: lightning-div's 4,000-token byte-level BPE `local:chitchat` (trained on the Chit-Chat
  training turns) plus `<pad>` (id 4000, never trained on; distinct from EOS so that collators do not
  mask the EOS a dialogue model must learn). `<|endoftext|>` (id 0) is BOS, EOS and UNK.
- Layout: DialoGPT's: every turn followed by EOS; a response ends with EOS.

## Data and its license
The Chit-Chat corpus of the BYU PCC lab (PyPI `chitchat-dataset` 0.9.0, MIT License), split by a hash
of the conversation id: the `pretrain` split only ({r["conversations"]:,} conversations, {r["tokens_per_epoch"]:,}
tokens), which is the training split minus the held-out `finetune` slice (about 10 % of it). The
validation and test conversations and the `finetune` slice were never trained on.

## Training
- Command: `{r["command"]}`
- Seed {c["seed"]}, {c["threads"]} CPU threads; {r["epochs"]:g} epochs ({r["steps"]:,} steps of {c["batch_size"]} x {c["block"]} tokens,
  each token once per epoch); AdamW (betas 0.9, 0.95; weight decay {c["weight_decay"]}), peak learning rate {c["lr"]}
  with {c["warmup"]} warm-up steps and cosine decay to 10 %; dropout {c["dropout"]}; gradient clipping 1.0.
- Machine: {r["machine"]}; {r["wall_s"] / 60:.1f} minutes wall, {r["cpu_s"] / 60:.1f} minutes CPU.

## Held-out loss
Response loss in nats per token (EOS included, context not scored), on the {r["heldout_pairs_all"]:,}
(context, response) pairs of Chit-Chat's validation conversations with two context turns:

| epoch | training stream loss | held-out response loss |
|---|---|---|
{per_epoch}

As shipped (float16 weights): **{r["heldout_loss_shipped"]:.4f}**. The from-scratch demo model of
lightning-div 0.1 ended at 5.45 on (a subset of) the same pairs.
Details, the loss curve and samples: `docs/results/pretrain_base.md` in the repository.
"""


def save(model: Any, tokenizer: Any, path: Path) -> None:
    """fp16 safetensors + tokenizer + generation config, written to a temporary folder and renamed into place."""
    import copy
    import shutil

    half = copy.deepcopy(model).half().eval()
    half.generation_config.pad_token_id = tokenizer.pad_token_id
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    half.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    portable_tokenizer_config(tmp / "tokenizer_config.json")
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)


def portable_tokenizer_config(path: Path) -> None:
    """The saved tokenizer config as every transformers release reads it.

    transformers 5 writes its own class name (``TokenizersBackend``, unknown to 4.x) and the
    loading flags of this session (``local_files_only``, ``is_local``); the shipped file names
    ``PreTrainedTokenizerFast`` and leaves the flags out.
    """
    config = json.loads(path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    for key in ("local_files_only", "is_local", "backend"):
        config.pop(key, None)
    path.write_text(json.dumps(config, indent=2) + "\n")


if __name__ == "__main__":
    main()
