"""benchmarks/large_corpus.py: the recombined corpus it trains on (the runs themselves are by hand)."""

from __future__ import annotations

import json

from helpers import load_script

from lightning_div.datamodules import read_pairs
from lightning_div.datamodules.formats import read_chitchat


def load():
    return load_script("benchmarks", "large_corpus", "bench_large_corpus")


def test_corpus_is_recombined_chitchat_of_the_asked_size_written_once(tmp_path):
    bench = load()
    path = bench.build_corpus(250, tmp_path)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 250 and not list(tmp_path.glob("*.tmp"))
    turns = {t for p in read_chitchat("train", max_turns=1) for t in (*p.context, p.response)}
    assert all(1 <= len(r["context"]) <= 3 and set(r["context"]) <= turns and r["response"] in turns for r in rows)
    assert len({r["response"] for r in rows}) > 200  # drawn across the corpus, not one conversation
    assert len(read_pairs(str(path), max_turns=3)) == 250  # our reader takes it as it is
    before = path.stat().st_mtime_ns
    assert bench.build_corpus(250, tmp_path) == path and path.stat().st_mtime_ns == before  # not rebuilt
    again = bench.build_corpus(250, tmp_path / "other")
    assert again.read_text(encoding="utf-8") == path.read_text(encoding="utf-8")  # fixed seed: the same corpus
