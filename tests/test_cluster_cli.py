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
        (["clusters", "show", "missing.npz"], "missing.npz: no such file"),
        (["clusters", "assign", "missing.npz", "--responses", "x.txt"], "missing.npz: no such file"),
        (["clusters", "fit", "--data", "missing.txt", "--out", "c.npz"], "--data missing.txt: no such file"),
    ],
)
def test_errors_are_one_line_without_traceback(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2  # a user mistake: exit code 2, as every subcommand (it was 1 here)
    assert capsys.readouterr().err == f"lightning-div clusters: error: {message}\n"


def test_the_traceback_switch_works_in_clusters(tmp_path, monkeypatch, capsys):
    # LIGHTNING_DIV_TRACEBACK=1 printed nothing more in `clusters` (issue 31, R17)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LIGHTNING_DIV_TRACEBACK", "1")
    assert main(["clusters", "show", "missing.npz"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "Traceback (most recent call last):" and "UsageError: missing.npz: no such file" in err[-2]
    assert err[-1] == "lightning-div clusters: error: missing.npz: no such file"


def test_show_of_a_file_that_is_not_clusters_is_said_in_our_words(tmp_path, capsys):
    # numpy's message for a text file invited the reader to unpickle it (issue 31, C17)
    gold = tmp_path / "gold.txt"
    gold.write_text("hello there\nhow are you\n")
    assert main(["clusters", "show", str(gold)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"lightning-div clusters: error: {gold}: not a clusters file (the .npz that 'lightning-div clusters fit' "
        "or SemanticClusters.save writes)\n"
    )
    assert "pickle" not in err
    assert main(["score", str(gold), "--clusters", str(gold), "--quiet"]) == 2
    assert capsys.readouterr().err.startswith(f"lightning-div score: error: --clusters {gold}: not a clusters file")


def test_show_escapes_control_characters_of_the_cards(fitted, tmp_path, capsys):
    # a card quotes the data: an escape sequence in a gold response set the terminal's title and cleared
    # the screen (issue 31, C16); printed as visible escapes, saved unchanged
    _, out = fitted
    clusters = SemanticClusters.load(out)
    evil = "hi\x1b]0;pwned\x07\x1b[2J there\r\u202eoops"
    clusters.cards[0].examples = [evil]
    clusters.cards[0].words = ["x\x9bword"]
    path = clusters.save(tmp_path / "evil.npz")
    assert main(["clusters", "show", str(path)]) == 0
    printed = capsys.readouterr().out
    assert not any(c in printed for c in "\x1b\x07\r\x9b\u202e")
    assert "hi\\x1b]0;pwned\\x07\\x1b[2J there\\r\\u202eoops" in printed and "x\\x9bword" in printed
    assert SemanticClusters.load(path).cards[0].examples == [evil]  # the file keeps the data as it is


def test_show_of_a_file_without_cards_says_what_to_do(fitted, tmp_path, capsys):
    _, out = fitted
    clusters = SemanticClusters.load(out)
    clusters.cards = None
    old = clusters.save(tmp_path / "old.npz")
    assert main(["clusters", "show", str(old)]) == 2
    assert "has no cluster cards" in capsys.readouterr().err
