"""Tokenising a dialogue corpus at datamodule setup: ``encode_pairs`` vs one ``encode_pair`` call per example.

    python benchmarks/datamodule_tokenize.py                  # chitchat validation (6,025 examples), ~1 min on 2 cores
    python benchmarks/datamodule_tokenize.py --split train    # the full 118,529 training examples
    python benchmarks/datamodule_tokenize.py --seq2seq        # BART-style tokenizer and layout

Both produce the same ids (checked). ``encode_pairs`` encodes every distinct turn and
response once, in batches, with the fast tokenizer, then runs ``DialogueLayout.encode_pair``
on cached ids; the baseline calls the tokenizer for every turn of every example (each turn
recurs in up to ``max_history + 1`` examples). The tokenizer is a byte-level BPE trained on
the chitchat corpus; the model only supplies the layout and a 1,024-position window.
"""

from __future__ import annotations

import argparse
import time

from lightning_div.datamodules.encoding import encode_pairs
from lightning_div.datamodules.formats import iter_texts, read_chitchat
from lightning_div.model.formatting import DialogueLayout
from lightning_div.model.tiny import tiny_causal_lm, tiny_seq2seq_lm, train_tokenizer


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--split", default="validation", choices=["train", "validation", "test"])
    p.add_argument("--max-history", type=int, default=3)
    p.add_argument("--vocab-size", type=int, default=4000)
    p.add_argument("--seq2seq", action="store_true")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()

    pairs = read_chitchat(args.split, max_turns=args.max_history)
    tok = train_tokenizer(
        iter_texts(read_chitchat("train", max_turns=1, max_conversations=500)),
        vocab_size=args.vocab_size,
        seq2seq=args.seq2seq,
    )
    model = (
        tiny_seq2seq_lm(tok, max_position_embeddings=1024) if args.seq2seq else tiny_causal_lm(tok, n_positions=1024)
    )
    fmt = DialogueLayout(max_turns=args.max_history)
    fns = {
        "per-example encode_pair": lambda: [fmt.encode_pair(q.context, q.response, tok, model) for q in pairs],
        "encode_pairs": lambda: encode_pairs(pairs, tok, model, fmt, show_progress=False),
    }
    best, out = {name: float("inf") for name in fns}, {}
    for _ in range(args.repeats):  # alternate, so that a busy machine slows both alike
        for name, fn in fns.items():
            start = time.perf_counter()
            out[name] = fn()
            best[name] = min(best[name], time.perf_counter() - start)
    assert list(out["encode_pairs"]) == out["per-example encode_pair"], "the two tokenisations differ"
    layout = "seq2seq" if args.seq2seq else "causal"
    print(f"chitchat {args.split}: {len(pairs):,} examples, {layout} layout, max_history={args.max_history}")
    for name, seconds in best.items():
        print(f"  {name:<24} {seconds:7.2f} s  ({len(pairs) / seconds:,.0f} examples/s)")
    print(f"  speed-up: {best['per-example encode_pair'] / best['encode_pairs']:.1f}x (identical ids)")


if __name__ == "__main__":
    main()
