"""`lightning-div clusters fit|show|assign` with the real all-MiniLM-L6-v2 weights; errors are one line."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from monitor_setup import GOLD, minilm

from lightning_div.cli.main import main
from lightning_div.metrics import cluster_js_divergence, semantic_entropy
from lightning_div.semantic.clusters import SemanticClusters


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    d = tmp_path_factory.mktemp("clusters")
    (d / "gold.txt").write_text("\n".join(GOLD[:200]) + "\n", encoding="utf-8")
    out = d / "clusters.npz"
    assert (
        main(
            [
                "clusters",
                "fit",
                "--data",
                str(d / "gold.txt"),
                "--encoder",
                "minilm",
                "--out",
                str(out),
                "--num-clusters",
                "4",
                "--quiet",
            ]
        )
        == 0
    )
    return d, out


def test_fit_saves_clusters_with_cards_of_the_data(fitted, capsys):
    _, out = fitted
    clusters = SemanticClusters.load(out)
    assert clusters.num_clusters == 4 and clusters.encoder_name.endswith("all-MiniLM-L6-v2@mean")
    assert len(clusters.cards) == 4 and sum(c.size for c in clusters.cards) == 200
    ids = clusters.assign(minilm().encode(GOLD[:200]))  # the cards describe these very assignments
    assert [c.size for c in clusters.cards] == np.bincount(ids, minlength=4).tolist()
    for card in clusters.cards:
        members = {GOLD[i] for i in np.flatnonzero(ids == card.cluster)}
        assert card.examples and set(card.examples) <= members


def test_show_prints_every_card(fitted, capsys):
    _, out = fitted
    capsys.readouterr()
    assert main(["clusters", "show", str(out)]) == 0
    printed = capsys.readouterr().out
    clusters = SemanticClusters.load(out)
    for card in clusters.cards:
        assert f"cluster {card.cluster:>3}  {100 * card.share:5.1f} %" in printed
        assert ", ".join(card.words) in printed
    assert "4 clusters of encoder" in printed


def test_assign_gives_shares_sem_ent_and_js(fitted, capsys):
    d, out = fitted
    responses = ["i don't know", "i don't know.", "lol", "that sounds great!", "I love pizza"]
    (d / "gen.txt").write_text("\n".join(responses) + "\n", encoding="utf-8")
    capsys.readouterr()
    assert (
        main(
            [
                "clusters",
                "assign",
                str(out),
                "--responses",
                str(d / "gen.txt"),
                "--quiet",
                "--output",
                str(d / "gen.json"),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    result = json.loads((d / "gen.json").read_text())
    clusters = SemanticClusters.load(out)
    ids = clusters.assign(minilm().encode(responses))
    counts = np.bincount(ids, minlength=4)
    assert result["sem_ent"] == pytest.approx(semantic_entropy(ids, 4), abs=1e-12)
    assert [r["count"] for r in result["clusters"]] == counts.tolist()
    assert result["cluster_js"] == pytest.approx(cluster_js_divergence(counts, [c.share for c in clusters.cards]))
    assert result["sem_ent_max"] == pytest.approx(math.log(4))
    assert f"Sem-Ent {result['sem_ent']:.4f} nats" in printed


@pytest.mark.parametrize(
    "argv, message",
    [
        (["clusters", "show", "missing.npz"], "no SemanticClusters file at 'missing.npz'"),
        (["clusters", "assign", "missing.npz", "--responses", "x.txt"], "no SemanticClusters file"),
        (["clusters", "fit", "--data", "missing.txt", "--out", "c.npz"], "missing.txt"),
    ],
)
def test_errors_are_one_line_without_traceback(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("lightning-div clusters: error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_show_of_a_file_without_cards_says_what_to_do(fitted, tmp_path, capsys):
    _, out = fitted
    clusters = SemanticClusters.load(out)
    clusters.cards = None
    old = clusters.save(tmp_path / "old.npz")
    assert main(["clusters", "show", str(old)]) == 1
    assert "has no cluster cards" in capsys.readouterr().err
