"""NLI Diversity speed: batched ``score_sets`` vs one pair at a time, and threshold generation's pair cache.

    python benchmarks/nli.py                                      # CPU-sized defaults, ~2 minutes on 2 cores
    python benchmarks/nli.py --sets 200 --layers 24 --dim 1024 --heads 16 --device cuda   # roberta-large shape

The model is a random-init RoBERTa classifier with roberta-large-mnli's vocabulary size
and a tokenizer trained on the chitchat corpus; the response sets are real chitchat
responses (5 per set, 20 ordered pairs each).

* naive: one unpadded forward per ordered pair (what one writes first).
* score_sets: the library call — all pairs of all sets, length-sorted batches.
* threshold, naive: Diversity Threshold Generation with a callable metric that re-scores
  every (n-1)-subset and set with the NLI model each round.
* threshold, cached: ``metric="contradictions"``: each distinct pair is scored once.

Prints both speed-ups (targets: >= 3x and >= 3x) and checks both give the same results.
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np
import torch
from transformers import RobertaConfig, RobertaForSequenceClassification

from lightning_div.datamodules.formats import iter_texts, read_chitchat
from lightning_div.model.tiny import train_tokenizer
from lightning_div.nli.scorer import NLIScorer, ordered_pairs
from lightning_div.nli.threshold import diversity_threshold_generate_many


class PoolSampler:
    """Stands in for a dialogue model: draws responses from a pool, reproducibly for (context, seed)."""

    def __init__(self, pool: list[str]) -> None:
        self.pool = pool

    def generate(self, contexts, num_return_sequences=1, seed=None, **kwargs):
        out = []
        for c in contexts:
            rng = random.Random(f"{c}|{seed}")
            out += [rng.choice(self.pool) for _ in range(num_return_sequences)]
        return out


def timed(fn, device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start, out


def naive_probs(model, tok, sets, device, max_length):
    out = []
    with torch.inference_mode():
        for s in sets:
            for i, j in ordered_pairs(len(s)):
                enc = tok(s[i], s[j], return_tensors="pt", truncation=True, max_length=max_length).to(device)
                out.append(model(**enc).logits[0].softmax(-1))
    return torch.stack(out).cpu()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", type=int, default=12, help="response sets of 5 (20 pairs each)")
    parser.add_argument("--contexts", type=int, default=2, help="contexts for threshold generation")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab-size", type=int, default=50265, help="model vocabulary (roberta-large-mnli: 50265)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    pairs = read_chitchat("train", max_turns=1, max_conversations=300)
    pool = list(dict.fromkeys(p.response for p in pairs))
    tok = train_tokenizer(iter_texts(pairs), vocab_size=4000, seq2seq=True)
    config = RobertaConfig(
        vocab_size=max(args.vocab_size, len(tok)),
        hidden_size=args.dim,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        intermediate_size=4 * args.dim,
        max_position_embeddings=514,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        num_labels=3,
        initializer_range=0.5,
        id2label={0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
    )
    torch.manual_seed(0)
    model = RobertaForSequenceClassification(config).to(device).eval()
    scorer = NLIScorer.from_model(model, tok, batch_size=args.batch_size, show_progress=False)
    rng = random.Random(0)
    sets = [rng.sample(pool, 5) for _ in range(args.sets)]

    scorer.score_sets(sets[:2])  # warm-up
    naive_probs(model, tok, sets[:1], device, scorer.max_length)
    t_naive, ref = timed(lambda: naive_probs(model, tok, sets, device, scorer.max_length), device)
    t_ours, results = timed(lambda: scorer.score_sets(sets), device)
    ours = np.concatenate([r.probs for r in results])
    ref = ref[:, [2, 1, 0]].double().numpy()  # id2label above: canonical columns are 2, 1, 0
    worst = float(np.abs(ours - ref).max())
    agree = int((ours.argmax(1) == ref.argmax(1)).sum())

    contexts = [f"context {i}" for i in range(args.contexts)]
    sampler = PoolSampler(pool)
    seen: list[int] = []

    def contradictions(texts):  # the straightforward way: the NLI model on every pair of every subset
        seen.append(len(texts) * (len(texts) - 1))
        return float(scorer.score_sets([texts])[0].counts["contradiction"])

    t_thr_naive, naive_runs = timed(
        lambda: diversity_threshold_generate_many(
            sampler, contexts, metric=contradictions, threshold=10, show_progress=False
        ),
        device,
    )
    t_thr_ours, our_runs = timed(
        lambda: diversity_threshold_generate_many(
            sampler, contexts, scorer=scorer, metric="contradictions", threshold=10, show_progress=False
        ),
        device,
    )
    same = [a.responses for a in naive_runs] == [b.responses for b in our_runs]
    drawn = sum(r.samples_drawn for r in our_runs)

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    print(f"device: {name}; torch {torch.__version__}")
    print(
        f"model: RoBERTa {args.layers} layers x {args.dim}, vocab {config.vocab_size}; "
        f"{args.sets} chitchat sets of 5 = {20 * args.sets} pairs, batch size {args.batch_size}"
    )
    print(f"naive pair loop : {t_naive:8.2f} s")
    print(
        f"score_sets      : {t_ours:8.2f} s   (labels agree on {agree}/{len(ref)} pairs; max |difference| in "
        f"probabilities {worst:.1e}: float32 padding noise, large with these wide random weights)"
    )
    print(f"speed-up of score_sets over the naive loop: {t_naive / t_ours:6.2f}x   (target >= 3)")
    print(f"threshold generation, {args.contexts} contexts, {drawn} samples drawn in all:")
    print(f"  re-scoring every subset : {t_thr_naive:8.2f} s   ({sum(seen)} pair predictions)")
    print(f"  pair cache              : {t_thr_ours:8.2f} s   (same final sets: {same})")
    print(f"  speed-up of the pair cache: {t_thr_naive / t_thr_ours:6.2f}x   (target >= 3)")


if __name__ == "__main__":
    main()
