"""Collapse over epochs (cluster_js, top_cluster_share, heatmap), cards in a real run, DRESS per cluster, TB steps."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
from chitchat_read_once import chitchat_read_once
from monitor_setup import TinyChat, datamodule, dress, monitors, tiny_lm, trainer
from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger

from lightning_div.metrics import cluster_js_divergence, top_cluster_share
from lightning_div.semantic.cards import ClusterCard
from lightning_div.semantic.plots import collapse_heatmap, share_histogram
from lightning_div.semantic.space import SemanticSpace
from lightning_div.settings import Generation, Outputs
from lightning_div.views import dress_cluster_view


@pytest.fixture(scope="module", autouse=True)
def _corpus_read_once():
    """This module's datamodules share one reading of the corpus (tests/chitchat_read_once.py)."""
    with chitchat_read_once():
        yield


def test_js_divergence_against_a_hand_computation():
    # P = (1, 0), Q = (1/2, 1/2): M = (3/4, 1/4); KL(P||M) = log2(4/3); KL(Q||M) = (log2(2/3) + log2(2)) / 2
    hand = 0.5 * (math.log2(4 / 3) + 0.5 * (math.log2(2 / 3) + 1.0))
    assert hand == pytest.approx(0.3112781245, abs=1e-10)
    assert cluster_js_divergence([4, 0], [3, 3]) == pytest.approx(hand, abs=1e-12)  # counts are normalised
    assert cluster_js_divergence([3, 3], [4, 0]) == pytest.approx(hand, abs=1e-12)  # symmetric
    assert cluster_js_divergence([1, 0], [1, 0]) == pytest.approx(0.0, abs=1e-12)
    assert cluster_js_divergence([1, 0, 0], [0, 2, 3]) == pytest.approx(1.0)  # disjoint: 1 bit
    assert cluster_js_divergence([4, 0], [3, 3], base=math.e) == pytest.approx(hand * math.log(2), abs=1e-12)
    with pytest.raises(ValueError, match="counts is empty"):
        cluster_js_divergence([0, 0], [1, 1])
    with pytest.raises(ValueError, match="2 and 3 clusters"):
        cluster_js_divergence([1, 1], [1, 1, 1])


def test_top_cluster_share():
    assert top_cluster_share([2, 2, 2, 0], 3) == 0.75
    assert top_cluster_share([0, 1, 2], 3) == pytest.approx(1 / 3)
    assert top_cluster_share([], 3) == 0.0


def test_figures_are_labelled_by_the_cards():
    labels = [ClusterCard(0, 0.5, 5, words=["lol", "haha"]).label, "1"]
    fig = share_histogram([0.9, 0.1], [0.5, 0.5], labels, "t")
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["0: lol, haha", "1"]
    fig = collapse_heatmap([0, 1], np.array([[0.5, 0.5], [0.9, 0.1]]), [0.5, 0.5], labels)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["gold", "0", "1"]
    np.testing.assert_allclose(ax.images[0].get_array(), [[0.5, 0.5, 0.9], [0.5, 0.5, 0.1]])


def test_dress_view_per_cluster_by_hand():
    class Clusters:
        num_clusters = 3
        cards = [ClusterCard(0, 0.5, 2), ClusterCard(1, 0.25, 1), ClusterCard(2, 0.25, 1)]

    raw = np.array([0.5**2, 0.75**2, 0.75**2])  # (1 - p)^lam, lam = 2
    gold_weights = raw[[0, 0, 1, 2]]  # the four gold responses
    weight, negatives = dress_cluster_view(Clusters(), gold_weights, 2.0, [0], [0, 0, 2])
    np.testing.assert_allclose(weight, raw)
    np.testing.assert_array_equal(negatives, [2, 0, 1])
    normalised = gold_weights / gold_weights.mean()  # normalize=True: the figure shows the same rescaling
    weight, _ = dress_cluster_view(Clusters(), normalised, 2.0, [0], [])
    np.testing.assert_allclose(weight, raw / gold_weights.mean())


def _rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_monitor_logs_cards_collapse_and_aligned_steps(tmp_path, fitted_clusters):
    sem, _ = monitors(fitted_clusters(tmp_path / "cache"))
    loggers = [CSVLogger(tmp_path, name="csv"), TensorBoardLogger(tmp_path, name="tb")]
    tr = trainer(tmp_path, [sem], loggers, max_epochs=2)
    tr.fit(TinyChat())
    rows = _rows(Path(loggers[0].log_dir) / "metrics.csv")
    js = [float(r["val/cluster_js"]) for r in rows if r.get("val/cluster_js")]
    top = [float(r["val/top_cluster_share"]) for r in rows if r.get("val/top_cluster_share")]
    assert len(js) == 2 and len(top) == 2

    out = Path(loggers[0].log_dir) / "lightning_div"
    cards = _rows(out / "cluster_cards.csv")
    assert [int(r["cluster"]) for r in cards] == [0, 1, 2, 3]
    assert sum(float(r["share"]) for r in cards) == pytest.approx(1.0, abs=1e-3)
    assert all(r["nearest gold responses"] for r in cards if float(r["share"]) > 0)
    # the logged scalars are the ones the shares table gives, epoch by epoch
    shares = _rows(out / "cluster_shares.csv")
    for epoch in (0, 1):
        gen = [float(r["generated_share"]) for r in shares if r["epoch"] == str(epoch)]
        gold = [float(r["gold_share"]) for r in shares if r["epoch"] == str(epoch)]
        assert len(gen) == 4 and sum(gen) == pytest.approx(1.0, abs=1e-5)
        assert top[epoch] == pytest.approx(max(gen), abs=1e-6)
        assert js[epoch] == pytest.approx(cluster_js_divergence(gen, gold), abs=1e-4)
    assert [e for e, _ in sem.share_history] == [0, 1]
    for name in ("val_cluster_shares_epoch0.png", "val_cluster_shares_epoch1.png", "val_cluster_histogram_epoch1.png"):
        assert (out / name).stat().st_size > 0
    assert not list(out.glob(".*tmp"))

    # TensorBoard: images and text sit at the steps of the epoch's scalars
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(loggers[1].log_dir, size_guidance={"images": 0, "scalars": 0, "tensors": 0})
    acc.Reload()
    scalar_steps = [e.step for e in acc.Scalars("val/sem_ent")]
    assert len(scalar_steps) == 2
    for tag in ("val/cluster_histogram", "val/cluster_shares"):
        assert [e.step for e in acc.Images(tag)] == scalar_steps, tag
    samples = next(t for t in acc.Tags()["tensors"] if "val/samples" in t)
    assert [e.step for e in acc.Tensors(samples)] == scalar_steps
    assert any("clusters/cards" in t for t in acc.Tags()["tensors"])


@pytest.mark.slow
def test_the_per_cluster_figure_counts_the_negatives_after_a_mid_round_resume(tmp_path, fitted_clusters):
    """Also what test_dress_logs_its_clusters_each_round asserted on a run of its own (1 epoch, the end schedule),
    here on the uninterrupted run: DRESS logs its round's clusters figure, the cluster cards (no monitor did) and
    the head clusters with their negatives."""
    from pytorch_lightning.callbacks import ModelCheckpoint

    cache = fitted_clusters(tmp_path / "cache")  # both runs read it

    def run(root, ckpt_path=None):
        # rounds of 2 epochs, mined at fit start: a run resumed at epoch 1 is in the middle of round 0
        cb = dress(tmp_path, mining={"at": "start"}, every_n_epochs=2, dirpath=str(cache))
        ckpt = ModelCheckpoint(dirpath=root / "ckpt", save_top_k=-1, every_n_epochs=1)  # every epoch's kept
        tr = trainer(
            root,
            [cb, ckpt],
            loggers=[CSVLogger(root, name="csv")],
            max_epochs=2,
            limit_train_batches=2,
            limit_val_batches=0,
            enable_checkpointing=True,
        )
        tr.fit(tiny_lm(), datamodule=datamodule(), ckpt_path=ckpt_path)
        return cb, Path(tr.loggers[0].log_dir) / "lightning_div"

    full, full_out = run(tmp_path / "full")
    assert (full_out / "dress_clusters_epoch0.png").stat().st_size > 0
    assert (full_out / "cluster_cards.csv").is_file()  # logged by DRESS when no monitor did
    heads = _rows(full_out / "dress_head_clusters_epoch0.csv")
    assert [int(r["cluster"]) for r in heads] == [int(h) for h in full.state.heads]
    counts = np.bincount(full.state.negative_clusters, minlength=4)
    assert [int(r["negatives"]) for r in heads] == [int(counts[h]) for h in full.state.heads]
    assert sum(counts) == len(full.state.negative_pairs)
    # resumed from the full run's checkpoint of epoch 0: the state a run stopped after epoch 0 saves
    resumed, resumed_out = run(tmp_path / "resumed", ckpt_path=tmp_path / "full" / "ckpt" / "epoch=0-step=2.ckpt")
    assert resumed.state.mined_for == full.state.mined_for == 0  # nothing mined again: the same round
    np.testing.assert_array_equal(resumed.state.negative_clusters, full.state.negative_clusters)
    expected = _rows(full_out / "dress_head_clusters_epoch1.csv")
    got = _rows(resumed_out / "dress_head_clusters_epoch1.csv")
    assert got == expected and expected  # the same head clusters, with their negatives
    assert sum(int(r["negatives"]) for r in got) == int(np.count_nonzero(full.state.negative_weights)) > 0


@pytest.mark.slow
def test_two_named_monitors_write_their_own_cluster_files_and_the_report_pairs_them(tmp_path, fitted_clusters):
    from monitor_setup import GOLD, VAL, minilm

    from lightning_div.callbacks import SemanticDiversityMonitor
    from lightning_div.report import build_report

    common = dict(
        num_contexts=12,
        val_pairs=VAL,
        cluster_texts=GOLD,
        generation=Generation(batch_size=8, max_new_tokens=8),
        outputs=Outputs(log_samples=0, show_progress=False, dirpath=str(fitted_clusters(tmp_path / "cache"))),
    )
    a = SemanticDiversityMonitor(
        SemanticSpace(minilm(), num_clusters=4, batch_size=8, show_progress=False), name="a", **common
    )
    b = SemanticDiversityMonitor(
        SemanticSpace(minilm(), num_clusters=3, batch_size=8, show_progress=False), name="b", **common
    )
    tr = trainer(tmp_path, [a, b], [CSVLogger(tmp_path, name="csv")], max_epochs=1)
    tr.fit(TinyChat())
    out = Path(tr.loggers[0].log_dir) / "lightning_div"
    # each monitor's files carry its name, as its keys do: a's k=4, b's k=3 (issue 31, CB1)
    assert [int(r["cluster"]) for r in _rows(out / "a_cluster_cards.csv")] == [0, 1, 2, 3]
    assert [int(r["cluster"]) for r in _rows(out / "b_cluster_cards.csv")] == [0, 1, 2]
    assert {int(r["cluster"]) for r in _rows(out / "a_cluster_shares.csv")} == {0, 1, 2, 3}
    assert {int(r["cluster"]) for r in _rows(out / "b_cluster_shares.csv")} == {0, 1, 2}
    assert not (out / "cluster_cards.csv").exists() and not (out / "cluster_shares.csv").exists()
    # the report shows each monitor's cards with its own shares and figures, not one's with the other's
    page = build_report(tmp_path)
    order = [
        "<h3>a/</h3>",
        'data-source="a_cluster_cards.csv"',
        'alt="a/val_cluster_shares"',  # the report names a file's key with its first _ as /
        'data-source="a_cluster_shares.csv"',
        "<h3>b/</h3>",
        'data-source="b_cluster_cards.csv"',
        'alt="b/val_cluster_shares"',
        'data-source="b_cluster_shares.csv"',
    ]
    positions = [page.find(marker) for marker in order]
    assert -1 not in positions and positions == sorted(positions), dict(zip(order, positions))
