"""benchmarks/large_corpus.py: the recombined corpus it trains on (the runs themselves are by hand)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

from lightning_div.datamodules import read_pairs
from lightning_div.datamodules.formats import read_chitchat

ROOT = Path(__file__).resolve().parent.parent


def load():
    spec = importlib.util.spec_from_file_location("bench_large_corpus", ROOT / "benchmarks" / "large_corpus.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_large_corpus"] = module
    spec.loader.exec_module(module)
    return module


def test_corpus_is_recombined_chitchat_of_the_asked_size_written_once(tmp_path):
    bench = load()
    path = bench.build_corpus(250, tmp_path)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 250 and not list(tmp_path.glob("*.tmp"))
    turns = {t for p in read_chitchat("train", max_history=1) for t in (*p.context, p.response)}
    assert all(1 <= len(r["context"]) <= 3 and set(r["context"]) <= turns and r["response"] in turns for r in rows)
    assert len({r["response"] for r in rows}) > 200  # drawn across the corpus, not one conversation
    assert len(read_pairs(str(path), max_history=3)) == 250  # our reader takes it as it is
    before = path.stat().st_mtime_ns
    assert bench.build_corpus(250, tmp_path) == path and path.stat().st_mtime_ns == before  # not rebuilt
    again = bench.build_corpus(250, tmp_path / "other")
    assert again.read_text(encoding="utf-8") == path.read_text(encoding="utf-8")  # fixed seed: the same corpus
