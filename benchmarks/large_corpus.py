"""In-memory vs streaming training data at growing corpus sizes: setup time, peak memory, throughput.

    python benchmarks/large_corpus.py --pairs 100000 2000000     # the issue's sizes (CPU: hours for 2M)
    python benchmarks/large_corpus.py --quick                     # 2,000 pairs, a few steps: the structure

For each N it builds an N-pair corpus from Chit-Chat once (``--work-dir/chitchat_<N>.jsonl``:
every pair a random 1-3 turn context and a random response, drawn with a fixed seed from all
Chit-Chat utterances, so the text is real and the corpus as large as asked). Then, each in its
own process (so that ``ru_maxrss`` is that run's peak), it trains the demo's model
(configs/demo.yaml: a 2-layer GPT-2, 128 wide, the local Chit-Chat tokenizer, batch 32) for
``--steps`` steps on:

* **memory**: ``DialogueDataModule`` (every pair read and tokenised into RAM);
* **stream (first)**: ``StreamingDialogueDataModule`` writing the LitData chunks (the one-off cost);
* **stream**: ``StreamingDialogueDataModule`` again, reading the chunks written before: a
  training run as every later run of the same data sees it.

Reported per run: setup seconds (from ``Trainer.fit`` to the first training batch), peak RSS,
training steps per second after the first 10 steps, and the data alone: milliseconds per
batch of the training DataLoader iterated without the model, after the run (so the data's own
cost is seen apart from the model's, whose time moves with the machine's load).
``--paths`` picks runs (``memory``, ``first``, ``stream``), e.g. to re-time the two training
paths on chunks written before. The goals (issue 22): the streaming
run's peak RSS grows by < 100 MB from 100,000 to 2,000,000 pairs, and its throughput is within
10 % of the in-memory path's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def build_corpus(n: int, work_dir: Path, seed: int = 0) -> Path:
    """An n-pair JSONL corpus of recombined Chit-Chat turns (written once, atomically)."""
    import numpy as np

    out = work_dir / f"chitchat_{n}.jsonl"
    if out.is_file():
        return out
    from lightning_div.datamodules.formats import read_chitchat

    turns = sorted({t for p in read_chitchat("train", max_turns=1) for t in (*p.context, p.response) if t.strip()})
    rng = np.random.default_rng(seed)
    work_dir.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    block = 100_000
    with tmp.open("w", encoding="utf-8") as f:
        for start in range(0, n, block):
            m = min(block, n - start)
            lengths = rng.integers(1, 4, size=m)
            picks = rng.integers(0, len(turns), size=(m, 4))
            for k in range(m):
                context = [turns[j] for j in picks[k, : lengths[k]]]
                f.write(json.dumps({"context": context, "response": turns[picks[k, 3]]}) + "\n")
    os.replace(tmp, out)
    return out


class Timing(pl.Callback):
    """Seconds from fit start to the first batch; steps per second after ``warmup`` steps."""

    def __init__(self, warmup: int = 10) -> None:
        self.warmup = warmup
        self.first: float | None = None
        self.warm: float | None = None
        self.end: float | None = None
        self.steps = 0

    def on_train_batch_start(self, *args: Any) -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = now
        if self.steps == self.warmup:
            self.warm = now

    def on_train_batch_end(self, *args: Any) -> None:
        self.steps += 1
        self.end = time.perf_counter()


def child(path: str, kind: str, steps: int, stream_dir: str) -> dict[str, Any]:
    """One training run in this process: its setup time, peak RSS and throughput."""
    from lightning_div import DialogueLM
    from lightning_div.datamodules import Chunks, DialogueDataModule, DialogueLayout

    pl.seed_everything(0, verbose=False)
    model = DialogueLM(
        model_name_or_path=None,
        tokenizer="local:chitchat",
        from_scratch={"model_type": "gpt2", "n_layer": 2, "n_embd": 128, "n_head": 4, "n_positions": 128},
        learning_rate=0.002,
    )
    args = dict(train=path, val=None, layout=DialogueLayout(max_turns=2), batch_size=32, show_progress=False)
    if kind == "memory":
        dm = DialogueDataModule(**args)
    else:
        from lightning_div.datamodules.streaming import StreamingDialogueDataModule

        dm = StreamingDialogueDataModule(chunks=Chunks(dir=stream_dir), **args)
    timing = Timing()
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[timing],
    )
    start = time.perf_counter()
    trainer.fit(model, dm)
    measured = timing.steps - timing.warmup
    assert timing.first is not None and timing.end is not None, "no training step ran"
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the training run's, before the loader pass
    return {
        "setup_s": timing.first - start,
        "steps_per_s": measured / (timing.end - timing.warm) if measured > 0 and timing.warm else float("nan"),
        "steps": timing.steps,
        "peak_rss_mb": peak,
        "loader_ms_per_batch": loader_ms(dm.train_dataloader(), steps),
    }


def loader_ms(loader: Any, batches: int) -> float:
    """Milliseconds per batch of ``loader`` alone (its first ``batches`` batches, no model)."""
    it = iter(loader)
    next(it)  # the first batch pays the DataLoader's start-up, as the first training step does
    start, n = time.perf_counter(), 0
    for _ in range(batches - 1):
        if next(it, None) is None:
            break
        n += 1
    return (time.perf_counter() - start) / max(n, 1) * 1e3


def run(path: Path, kind: str, steps: int, stream_dir: Path) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", str(path), kind, str(steps), str(stream_dir)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} run on {path.name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, nargs="+", default=[100_000, 2_000_000], help="corpus sizes")
    parser.add_argument("--steps", type=int, default=200, help="training steps per run")
    parser.add_argument("--work-dir", default="runs/large_corpus", help="corpora and LitData chunks go here")
    parser.add_argument("--quick", action="store_true", help="2,000 pairs and 15 steps: the structure only")
    parser.add_argument("--json", default=None, help="write the rows here")
    parser.add_argument(
        "--paths",
        nargs="+",
        choices=["memory", "first", "stream"],
        default=["memory", "first", "stream"],
        help="the runs per size: in memory, streaming's first (writing) run, streaming on written chunks",
    )
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], int(args.child[2]), args.child[3])))
        return {}
    sizes, steps = ([2_000], 15) if args.quick else (args.pairs, args.steps)
    work = Path(args.work_dir)
    rows = []
    for n in sizes:
        corpus = build_corpus(n, work)
        stream_dir = work / f"stream_{n}"
        runs = {"memory": ("memory", "memory"), "first": ("stream", "stream (first)"), "stream": ("stream", "stream")}
        for key in ("memory", "first", "stream"):
            if key not in args.paths:
                continue
            kind, label = runs[key]
            row = {"pairs": n, "path": label, **run(corpus, kind, steps, stream_dir)}
            rows.append(row)
            print(
                f"{n:>10,} pairs  {label:<15} setup {row['setup_s']:8.1f} s  peak RSS {row['peak_rss_mb']:7.0f} MB  "
                f"{row['steps_per_s']:6.2f} steps/s  data alone {row['loader_ms_per_batch']:6.2f} ms/batch",
                flush=True,
            )
        mine = {r["path"]: r for r in rows if r["pairs"] == n}
        if "memory" in mine and "stream" in mine:
            memory, stream = mine["memory"], mine["stream"]
            print(
                f"{'':>17}stream / memory throughput: {stream['steps_per_s'] / memory['steps_per_s']:.2f}"
                f" (data alone: {stream['loader_ms_per_batch']:.2f} vs {memory['loader_ms_per_batch']:.2f} ms/batch)",
                flush=True,
            )
    streams = [r for r in rows if r["path"] == "stream"]
    if len(streams) >= 2:
        growth = streams[-1]["peak_rss_mb"] - streams[0]["peak_rss_mb"]
        print(
            f"streaming peak RSS growth {streams[0]['pairs']:,} -> {streams[-1]['pairs']:,} pairs: "
            f"{growth:+.0f} MB (goal < 100 MB)"
        )
    result = {"steps": steps, "rows": rows}
    if args.json:
        tmp = Path(f"{args.json}.tmp")
        tmp.write_text(json.dumps(result, indent=1))
        os.replace(tmp, args.json)
    return result


if __name__ == "__main__":
    main()
