"""Scoring speed: ``response_scores`` vs a naive one-pair-at-a-time loop and vs a plain forward pass.

    python benchmarks/scoring.py                      # CPU-sized defaults, a few minutes on 2 cores
    python benchmarks/scoring.py --pairs 4096 --layers 12 --dim 768 --device cuda   # DialoGPT-small shape

The model is a random-init GPT-2 with DialoGPT's 50,257-entry vocabulary (the size of the
output layer matters: it is most of a small model's compute) and a tokenizer trained on
the chitchat corpus; the pairs are real chitchat (context of up to 3 turns, gold response).

* naive: for each pair, one unpadded forward and a full log-softmax (what one writes first).
* response_scores: the library call, tokenisation included (also shown with batch_size=1,
  which separates the gain of batching from that of projecting only the response rows).
* floor: only ``model(...)`` over the very padded batches ``response_scores`` builds
  (tokenised and padded beforehand, not timed), full logits.
* bound: only the work no exact method can skip — the transformer body over the same padded
  batches (``model.base_model``, no output layer; the printed padding factor is the slack
  this leaves), plus the output layer and the logsumexp
  over the whole vocabulary at every response token (EOS included), on stand-in hidden
  states batched as ``response_scores`` batches them. naive / bound is the most any exact
  scorer could gain over the naive loop on this machine.

Prints both ratios; the targets are naive/ours >= 5 and ours/floor <= 1.3.

Shared-context scoring (``--shared-prompts``, on by default; ``--shared-only`` runs just this):
RUQ's layout, each context with 3 candidates (its reference and two IDK strings), contexts
built from consecutive chitchat turns to about 4x the candidates' mean token length. Times
``candidate_scores`` (each context encoded once, its keys/values reused) against
``response_scores`` of the same 3 pairs per context (today's scorer, the context re-encoded
with each candidate), taking turns in one run: one untimed warm-up round of each at full
size, then ``--shared-repeats`` timed rounds (default 5). Each round gives one ratio of two
neighbouring runs; it prints the median ratio and the spread (lowest-highest) over the rounds
(target >= 1.8) in wall time and in CPU time (which moves less with other jobs' load), the
median times, the largest score difference, and, for each, the forwards and positions it
feeds the transformer body (padding included: a figure of the method, not of the machine's load).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from lightning_div._internal.distributed import length_batches
from lightning_div.datamodules.formats import iter_texts, read_chitchat
from lightning_div.model.adapters import HuggingFaceAdapter
from lightning_div.model.formatting import DialogueLayout
from lightning_div.model.generation import pad_batch, pad_id_of
from lightning_div.model.scoring import candidate_scores, response_scores
from lightning_div.model.tiny import train_tokenizer


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_round_robin(fns: dict, device: torch.device, repeats: int) -> tuple[dict, dict, dict]:
    """Best wall time, output and best CPU time of each function, taking turns so that a busy machine slows all alike.

    The CPU time (this process, all threads) leaves out the time spent waiting for a core, so
    on a machine shared with other jobs it moves less with their load than the wall time does.
    """
    best, outputs, cpu = {name: float("inf") for name in fns}, {}, {name: float("inf") for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            sync(device)
            start, start_cpu = time.perf_counter(), time.process_time()
            outputs[name] = fn()
            sync(device)
            best[name] = min(best[name], time.perf_counter() - start)
            cpu[name] = min(cpu[name], time.process_time() - start_cpu)
    return best, outputs, cpu


def timed_rounds(fns: dict, device: torch.device, repeats: int) -> tuple[dict, dict, dict]:
    """Every round's wall and CPU time of each function (taking turns), and the last outputs.

    Each round runs every function once, one after the other, so a round's ratio compares two
    neighbouring runs: load that comes and goes on a shared machine slows both sides of a ratio
    more alike than the best times of different moments do.
    """
    wall: dict = {name: [] for name in fns}
    cpu: dict = {name: [] for name in fns}
    outputs: dict = {}
    for _ in range(repeats):
        for name, fn in fns.items():
            sync(device)
            start, start_cpu = time.perf_counter(), time.process_time()
            outputs[name] = fn()
            sync(device)
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    return wall, outputs, cpu


def spread(values: list[float]) -> str:
    """``median (lowest-highest, n rounds)``, ratios to 2 decimals."""
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f}, {len(values)} rounds)"


def naive_scores(model, tok, contexts, responses, fmt, device) -> list[float]:
    scores = []
    with torch.inference_mode():
        for c, r in zip(contexts, responses):
            ctx, resp = fmt.encode_pair(c, r, tok, model)
            logits = model(torch.tensor([ctx + resp], device=device)).logits[0]
            lp = logits.float().log_softmax(-1)[len(ctx) - 1 : -1].gather(1, torch.tensor([resp], device=device).T)
            scores.append(float(lp.mean()))
    return scores


def padded_batches(model, tok, contexts, responses, fmt, batch_size, device):
    """The batches response_scores feeds the model (left padding, explicit position ids)."""
    pairs = [fmt.encode_pair(c, r, tok, model) for c, r in zip(contexts, responses)]
    batches = []
    for batch in length_batches([len(c) + len(r) for c, r in pairs], batch_size):
        ids, mask = pad_batch([pairs[i][0] + pairs[i][1][:-1] for i in batch], pad_id_of(tok), "left", device)
        targets = torch.tensor([t for i in batch for t in pairs[i][1]], device=device)
        batches.append((ids, mask, (mask.cumsum(-1) - 1).clamp(min=0), targets))
    return batches


def plain_forward(model, batches) -> None:
    with torch.inference_mode():
        for ids, mask, pos, _ in batches:
            model(input_ids=ids, attention_mask=mask, position_ids=pos)


def body_forward(model, batches) -> None:
    with torch.inference_mode():
        for ids, mask, pos, _ in batches:
            model.base_model(input_ids=ids, attention_mask=mask, position_ids=pos)


def output_layer(model, hidden: list[torch.Tensor], batches) -> None:
    """The vocabulary projection and logsumexp at the response tokens only: any exact score pays this."""
    head = model.get_output_embeddings()
    with torch.inference_mode():
        for h, (*_, targets) in zip(hidden, batches):
            rows = head(h)
            rows.gather(1, targets.unsqueeze(1)).squeeze(1) - rows.logsumexp(-1)


IDKS = ("I don't know.", "I don't know what to do.")


def shared_context_prompts(
    model, tok, fmt, n: int, ratio: float = 4.0
) -> tuple[list[list[str]], list[list[str]], float]:
    """``n`` prompts of (context, [reference, IDK 1, IDK 2]), contexts ~``ratio`` x the candidates' mean length.

    Each context is the turns before a chitchat reply, extended with earlier turns of the corpus
    until it holds ``ratio`` x as many tokens as its candidates on average. Returns the contexts,
    the candidates and the measured context/candidate token ratio.
    """
    conversations = 80
    pool = read_chitchat("train", max_turns=1, max_conversations=conversations)
    while len(pool) < n + 50:
        conversations *= 2
        pool = read_chitchat("train", max_turns=1, max_conversations=conversations)
    turns = [p.response for p in pool]
    contexts, candidates, ctx_tokens, cand_tokens = [], [], 0, 0

    def size(context: list[str]) -> int:
        return len(fmt.encode_pair(context or [""], "", tok, model)[0])

    for i in range(n):
        cands = [turns[i + 50], *IDKS]
        lengths = [len(fmt.encode_pair(["x"], c, tok, model)[1]) for c in cands]
        want = ratio * sum(lengths) / len(lengths)
        context, j = [], i + 49
        while size(context) < want and j >= 0:
            context.insert(0, turns[j])
            j -= 1
        while size(context) > want + 1 and len(context[0].split()) > 1:  # trim the oldest turn to the target
            context[0] = context[0].split(" ", 1)[1]
        contexts.append(context)
        candidates.append(cands)
        ctx_tokens += size(context)
        cand_tokens += sum(lengths) / len(lengths)
    return contexts, candidates, ctx_tokens / cand_tokens


def body_positions(model, fn) -> str:
    """What ``fn`` feeds the transformer body: forwards, positions (padding included) and the padding factor.

    Counted on the body's input (a forward pre-hook), so it does not depend on the machine: the
    body's cost is about proportional to the positions fed. A candidate pass's attention mask
    also covers its context's cached columns; only its own (the input's) columns are counted.
    """
    counts = {"forwards": 0, "positions": 0, "real": 0}

    def record(module, args, kwargs):
        ids = args[0] if args else kwargs["input_ids"]
        mask = kwargs["attention_mask"][:, -ids.shape[1] :]
        counts["forwards"] += 1
        counts["positions"] += ids.numel()
        counts["real"] += int(mask.sum())

    hook = model.base_model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        fn()
    finally:
        hook.remove()
    padding = counts["positions"] / max(counts["real"], 1)
    return f"[{counts['forwards']} forwards, {counts['positions']:,} positions, padding {padding:.2f}x]"


def shared_context_comparison(tok, fmt, args, device: torch.device) -> None:
    """Shared-context scoring vs today's scorer on RUQ-shaped prompts, timed in turns in this run.

    The model has DialoGPT-small's shape by default (12 layers x 768, vocab 50257): the saving is
    in the transformer body (a context's tokens go through it once instead of once per
    candidate), while the output layer costs the same in both (one row per candidate token).
    On a 4 x 256 body with a 50k vocabulary the output layer dominates and no context sharing
    can reach 1.8x; the printed bound says how much any shared-context scorer could save here.
    """
    config = GPT2Config(
        vocab_size=max(args.vocab_size, len(tok)),
        n_positions=1024,
        n_embd=args.shared_dim,
        n_layer=args.shared_layers,
        n_head=args.shared_heads,
        bos_token_id=tok.eos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).to(device).eval()
    adapter = HuggingFaceAdapter(
        model, tok, format=fmt, batch_size=args.batch_size, show_progress=False, max_new_tokens=8
    )
    contexts, candidates, ratio = shared_context_prompts(model, tok, fmt, args.shared_prompts)
    flat_c = [c for c, cs in zip(contexts, candidates) for _ in cs]
    flat_r = [r for cs in candidates for r in cs]
    methods = {
        "today": lambda: response_scores(adapter, flat_c, flat_r),
        "shared": lambda: candidate_scores(adapter, contexts, candidates),
    }
    # warm-up at full size (the allocator's pools, the kernels' plans for every batch shape), untimed
    timed_rounds(methods, device, 1)
    times, out, cpu = timed_rounds(methods, device, args.shared_repeats)
    wall_ratios = [t / s for t, s in zip(times["today"], times["shared"])]
    cpu_ratios = [t / s for t, s in zip(cpu["today"], cpu["shared"])]
    worst = max(abs(a - b) for a, b in zip(out["today"], [x for g in out["shared"] for x in g]))
    fed = {
        "today": body_positions(model, lambda: response_scores(adapter, flat_c, flat_r)),
        "shared": body_positions(model, lambda: candidate_scores(adapter, contexts, candidates)),
    }
    # Cost model: body FLOPs ~ 24 L d^2 per token through it, output layer 2 d V per scored token.
    pairs = [fmt.encode_pair(c, r, tok, model) for c, r in zip(flat_c, flat_r)]
    ctx_tok = sum(len(fmt.encode_pair(c, cs[0], tok, model)[0]) for c, cs in zip(contexts, candidates))
    resp_tok = sum(len(r) for _, r in pairs)
    body = 24 * args.shared_layers * args.shared_dim**2
    head = 2 * args.shared_dim * config.vocab_size
    today_cost = body * sum(len(c) + len(r) - 1 for c, r in pairs) + head * resp_tok
    shared_cost = body * (ctx_tok + resp_tok - len(pairs)) + head * resp_tok
    print(
        f"shared-context scoring: {len(contexts)} contexts x 3 candidates (reference + 2 IDK strings), "
        f"contexts {ratio:.1f}x the candidates' mean token length; batch size {args.batch_size}; "
        f"model: GPT-2 {args.shared_layers} layers x {args.shared_dim}, vocab {config.vocab_size}"
    )
    print(
        f"most any shared-context scorer can save here (FLOP count, attention left out): {today_cost / shared_cost:.2f}x"
    )
    med = {name: statistics.median(v) for name, v in times.items()}
    med_cpu = {name: statistics.median(v) for name, v in cpu.items()}
    print(
        f"response_scores (context re-encoded per candidate): median {med['today']:8.2f} s, "
        f"CPU {med_cpu['today']:8.2f} s   {fed['today']}"
    )
    print(
        f"candidate_scores (context encoded once)          : median {med['shared']:8.2f} s, "
        f"CPU {med_cpu['shared']:8.2f} s   {fed['shared']}   (max |difference|: {worst:.1e})"
    )
    print(
        "rounds (wall s, today / shared): "
        + ", ".join(f"{t:.1f}/{s:.1f}" for t, s in zip(times["today"], times["shared"]))
    )
    print(f"shared-context speed-up, median of the rounds: {spread(wall_ratios)}   (target >= 1.8)")
    print(f"in CPU time: {spread(cpu_ratios)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=512, help="number of (context, response) pairs")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab-size", type=int, default=50257, help="model output size (DialoGPT: 50257)")
    parser.add_argument(
        "--naive-pairs", type=int, default=128, help="time the one-pair loops on this many pairs and scale up (0: all)"
    )
    parser.add_argument("--repeats", type=int, default=2, help="best of this many rounds")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's)")
    parser.add_argument(
        "--shared-prompts",
        type=int,
        default=128,
        help="contexts for the shared-context comparison (3 candidates each; 0: skip it)",
    )
    parser.add_argument("--shared-only", action="store_true", help="run only the shared-context comparison")
    parser.add_argument(
        "--shared-repeats",
        type=int,
        default=5,
        help="timed rounds of the shared-context comparison after one warm-up round (median and spread printed)",
    )
    parser.add_argument("--shared-layers", type=int, default=12, help="shared comparison's model (DialoGPT-small: 12)")
    parser.add_argument(
        "--shared-dim", type=int, default=768, help="shared comparison's model width (DialoGPT-small: 768)"
    )
    parser.add_argument("--shared-heads", type=int, default=12)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    device = torch.device(args.device)
    conversations = 40
    pairs = read_chitchat("train", max_turns=3, max_conversations=conversations)
    while len(pairs) < args.pairs:
        conversations *= 2
        pairs = read_chitchat("train", max_turns=3, max_conversations=conversations)
    pairs = pairs[: args.pairs]
    tok = train_tokenizer(iter_texts(read_chitchat("train", max_turns=3, max_conversations=300)), vocab_size=4000)
    config = GPT2Config(
        vocab_size=max(args.vocab_size, len(tok)),
        n_positions=1024,
        n_embd=args.dim,
        n_layer=args.layers,
        n_head=args.heads,
        bos_token_id=tok.eos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).to(device).eval()
    fmt = DialogueLayout()
    contexts, responses = [list(p.context) for p in pairs], [p.response for p in pairs]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    if args.shared_only:
        print(f"device: {name}; torch {torch.__version__}")
        shared_context_comparison(tok, fmt, args, device)
        return
    adapter = HuggingFaceAdapter(model, tok, format=fmt, batch_size=args.batch_size, show_progress=False)

    # warm-up (allocator, kernels, tokenizer caches)
    response_scores(adapter, contexts[:32], responses[:32])
    naive_scores(model, tok, contexts[:8], responses[:8], fmt, device)

    # the one-pair loops run on an evenly spread subset and are scaled up (they are linear in N)
    n_naive = min(args.naive_pairs or len(pairs), len(pairs))
    subset = list(range(0, len(pairs), len(pairs) // n_naive))[:n_naive]
    sub_c, sub_r = [contexts[i] for i in subset], [responses[i] for i in subset]
    single = HuggingFaceAdapter(model, tok, format=fmt, batch_size=1, show_progress=False)
    batches = padded_batches(model, tok, contexts, responses, fmt, args.batch_size, device)
    generator = torch.Generator().manual_seed(0)
    hidden = [torch.randn(len(t), args.dim, generator=generator).to(device) for *_, t in batches]
    times, out, _ = timed_round_robin(
        {
            "naive": lambda: naive_scores(model, tok, sub_c, sub_r, fmt, device),
            "single": lambda: response_scores(single, sub_c, sub_r),
            "ours": lambda: response_scores(adapter, contexts, responses),
            "floor": lambda: plain_forward(model, batches),
            "body": lambda: body_forward(model, batches),
            "head": lambda: output_layer(model, hidden, batches),
        },
        device,
        args.repeats,
    )
    scale = len(pairs) / n_naive
    t_naive, t_single, t_ours, t_floor = times["naive"] * scale, times["single"] * scale, times["ours"], times["floor"]
    worst = max(abs(a - out["ours"][i]) for a, i in zip(out["naive"], subset))
    tokens = sum(int(m.sum()) for _, m, _, _ in batches)
    padded = sum(m.numel() for _, m, _, _ in batches)
    targets = sum(len(t) for *_, t in batches)
    print(f"device: {name}; torch {torch.__version__}")
    print(
        f"model: GPT-2 {args.layers} layers x {args.dim}, vocab {config.vocab_size}; "
        f"{len(pairs)} chitchat pairs, {tokens} tokens ({padded / tokens:.2f}x after padding), "
        f"{targets} of them response tokens; batch size {args.batch_size}"
    )
    scaled = f"  (timed on {n_naive} pairs, scaled)" if n_naive < len(pairs) else ""
    print(f"naive loop                     : {t_naive:8.2f} s{scaled}")
    print(f"response_scores, batch_size=1  : {t_single:8.2f} s{scaled}")
    print(f"response_scores                : {t_ours:8.2f} s   (max |difference| from naive: {worst:.1e})")
    print(f"plain forward, same batches    : {t_floor:8.2f} s")
    bound = times["body"] + times["head"]
    print(
        f"bound: body + output layer     : {bound:8.2f} s   (transformer body {times['body']:.2f} s + output "
        f"layer at response tokens {times['head']:.2f} s: what every exact score pays)"
    )
    print(f"speed-up over the naive loop : {t_naive / t_ours:6.2f}x   (target >= 5)")
    print(f"cost over a plain forward    : {t_ours / t_floor:6.2f}x   (target <= 1.3)")
    print(f"most any exact scorer could gain over the naive loop here: {t_naive / bound:6.2f}x (naive / bound)")
    if args.shared_prompts:
        shared_context_comparison(tok, fmt, args, device)


if __name__ == "__main__":
    main()
