"""Pretrain the project's base model: a small GPT-2 chit-chat model on Chit-Chat's pretraining conversations.

    python experiments/pretrain_base.py [--quick] [--out DIR] [--minutes 55] [--n-layer 4 --n-embd 256 ...]

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

HERE = Path(__file__).resolve().parent

FULL = dict(n_layer=4, n_embd=256, n_head=4, block=128, batch_size=32, minutes=55.0, val_pairs=None)
QUICK = dict(n_layer=1, n_embd=32, n_head=2, block=64, batch_size=16, minutes=0.5, val_pairs=64)
NUM_SAMPLES = 20  # fixed validation contexts shown before and after


def log(msg: str) -> None:
    print(msg, flush=True)


def pretraining_stream(tokenizer: Any, max_conversations: int | None = None) -> list[np.ndarray]:
    """The token ids of each pretraining conversation: every turn followed by EOS (DialoGPT's layout)."""
    from lightning_div.datamodules.formats import chitchat_conversations

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
        ids = prompt["input_ids"][:, -96:]
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
    parser.add_argument("--positions", type=int, default=256, help="the model window (n_positions)")
    parser.add_argument("--block", type=int, help="tokens per training row")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (cosine decay to 10 %%)")
    parser.add_argument("--warmup", type=int, default=200, help="warm-up steps")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--minutes", type=float, help="training budget: the schedule's length is set from it")
    parser.add_argument("--tokens-per-s", type=float, default=None, help="planned throughput (default: measured)")
    parser.add_argument("--epochs", type=float, default=None, help="train this many epochs instead of a budget")
    parser.add_argument(
        "--stop-after", type=int, default=None, help="stop after this many steps, the schedule unchanged (shape search)"
    )
    parser.add_argument("--evals-per-epoch", type=int, default=2)
    parser.add_argument("--val-pairs", type=int, help="held-out pairs evaluated during training (default all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--log-every", type=int, default=50, help="a progress line every N steps")
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else FULL
    for key, value in preset.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)

    from lightning_div.datamodules.encoding import encode_pairs
    from lightning_div.datamodules.formats import read_pairs
    from lightning_div.model.formatting import DialogueFormat

    model, tokenizer = build(args)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"pretrain_base: GPT-2 {args.n_layer} x {args.n_embd} ({n_params / 1e6:.2f} M parameters), seed {args.seed}")
    conversations = pretraining_stream(tokenizer, max_conversations=40 if args.quick else None)
    tokens_per_epoch = sum(len(c) for c in conversations)
    log(f"pretrain_base: {len(conversations):,} conversations, {tokens_per_epoch:,} tokens per epoch")

    val = read_pairs("chitchat:validation", max_history=2)
    val = val[: args.val_pairs] if args.val_pairs else list(val)
    encoded_val = encode_pairs(val, tokenizer, model, DialogueFormat(max_turns=2), show_progress=False)
    rng = np.random.default_rng(1234)
    sample_contexts = [list(val[i].context) for i in sorted(rng.choice(len(val), NUM_SAMPLES, replace=False))]

    # the schedule: planned steps from the budget and a short throughput measurement
    rows_per_epoch = tokens_per_epoch // args.block
    steps_per_epoch = rows_per_epoch // args.batch_size
    if args.epochs is not None:
        total_steps = max(1, int(args.epochs * steps_per_epoch))
    else:
        rate = args.tokens_per_s
        if rate is None:
            rate = measure_rate(fresh_copy(model), args)
        total_steps = max(1, int(args.minutes * 60 * rate / (args.block * args.batch_size)))
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
    }
    tmp = args.out / "results.json.tmp"
    tmp.write_text(json.dumps(results, indent=1))
    os.replace(tmp, args.out / "results.json")
    plot(history, args.out / "loss.png")
    log(
        f"pretrain_base: done in {wall / 60:.1f} min (CPU {cpu / 60:.1f} min); held-out loss {first:.3f} -> {final:.3f}"
    )
    for s in after[:5]:
        log(f"  {s['context'][-60:]!r} -> {s['greedy']!r}")
    return results


def fresh_copy(model: Any) -> Any:
    """A fresh copy of the model (same config) for the throughput probe, so the real one is untouched."""
    from transformers import GPT2LMHeadModel

    with torch.random.fork_rng(devices=[]):
        return GPT2LMHeadModel(model.config)


def measure_rate(model: Any, args: argparse.Namespace, steps: int = 6) -> float:
    """Training tokens per second of this shape on this machine (a few steps after a warm-up step)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, model.config.vocab_size - 1, (args.batch_size, args.block))
    model.train()
    with torch.random.fork_rng(devices=[]):
        for i in range(steps + 1):
            if i == 1:
                t0 = time.time()
            loss = model(input_ids=x, labels=x).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    return steps * args.batch_size * args.block / (time.time() - t0)


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
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
