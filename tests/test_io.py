"""Files lightning-div writes: whole or not at all (crash cases with real killed processes), a full disk named,
figures and tables written whole, spreadsheet cells that cannot run as formulas. The clusters' cache is in
test_clusters_cache.py."""

from __future__ import annotations

import csv
import errno
import json
import os
import signal
import textwrap

import numpy as np
import pytest
from helpers import kill_when_ready

from lightning_div.semantic.clusters import SemanticClusters


def test_a_killed_writer_leaves_the_old_file_intact(tmp_path):
    target = tmp_path / "scores.json"
    target.write_text('{"old": 1}\n')
    ready = tmp_path / "ready"
    child = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from lightning_div._internal.io import atomic_write
        with atomic_write({str(target)!r}, "w") as f:
            f.write('{{"new": ' + "1" * 1_000_000)  # half a JSON document
            f.flush()
            Path({str(ready)!r}).touch()
            time.sleep(600)
    """)
    assert kill_when_ready(child, ready) == -signal.SIGKILL
    assert json.loads(target.read_text()) == {"old": 1}  # a reader never sees the half-written one


def test_a_full_disk_names_the_path_and_leaves_nothing(tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    target = tmp_path / "c.npz"
    x = np.random.default_rng(0).normal(size=(40, 8))
    clusters = SemanticClusters(num_clusters=2, niter=5, nredo=1, show_progress=False).fit(x)
    monkeypatch.setattr(np, "savez", full)
    with pytest.raises(OSError, match=r"cannot save SemanticClusters to '.*c\.npz': No space left") as info:
        clusters.save(target)
    assert info.value.errno == errno.ENOSPC
    from lightning_div.cli.score import write_json

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match=r"cannot write '.*scores\.json': No space left"):
        write_json({"a": {"distinct_1": 0.5}}, tmp_path / "scores.json")
    assert list(tmp_path.iterdir()) == []  # no partial file, no temporary file


def test_figures_and_tables_are_written_whole(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lightning_div._internal.tracking import log_figure, log_table

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    png = log_figure(None, "val/plot", fig, tmp_path / "out")
    assert png.read_bytes().startswith(b"\x89PNG")
    table = log_table(None, "val/samples", ["a"], [["x"]], tmp_path / "out")
    assert table.read_bytes() == b"a\r\nx\r\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["val_plot_epoch0.png", "val_samples_epoch0.csv"]


class WandbLogger:  # recognised by class name, like the real one: receives the raw table
    def __init__(self):
        self.tables = []

    def log_table(self, key, columns, data):
        self.tables.append((key, columns, data))


class Trainer:
    global_step, current_epoch = 0, 0

    def __init__(self):
        self.loggers = [WandbLogger()]


def test_csv_cells_that_would_run_as_formulas_are_neutralised(tmp_path):
    from lightning_div._internal.tracking import lightning_destination, log_table

    rows = [["=1+1", "+cmd", "-2", "@SUM(A1)", "\tx", "plain", 3, "a=b"]]
    trainer = Trainer()
    path = log_table(lightning_destination(trainer), "val/samples", list("abcdefgh"), rows, tmp_path)
    with open(path, newline="", encoding="utf-8") as f:
        written = list(csv.reader(f))
    assert written[1] == ["'=1+1", "'+cmd", "'-2", "'@SUM(A1)", "'\tx", "plain", "3", "a=b"]
    assert trainer.loggers[0].tables[0][2] == rows  # the tracker keeps the raw text
