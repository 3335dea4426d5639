"""Cluster cards: the distinctive words of planted clusters are the planted ones; cards travel in the clusters file."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from fakes import PHRASES, TOPIC_WORDS, toy_corpus

from lightning_div.semantic.cards import ClusterCard, cluster_cards, format_cards, write_cards_csv
from lightning_div.semantic.clusters import SemanticClusters


def test_distinctive_words_of_planted_clusters_are_the_planted_ones():
    texts, topics, _ = toy_corpus()
    cards = cluster_cards(texts, topics, 3, top_n=4)
    for card, words, phrases in zip(cards, TOPIC_WORDS.values(), PHRASES.values()):
        assert sorted(card.words) == sorted(words)
        assert sorted(card.bigrams[:2]) == sorted(phrases)
        assert card.share == pytest.approx(1 / 3) and card.size == 60


def test_fitted_clusters_describe_themselves_and_examples_are_nearest_the_centroid():
    texts, topics, x = toy_corpus()
    clusters = SemanticClusters(num_clusters=3, niter=20, nredo=1, show_progress=False, use_gpu=False)
    clusters.fit(x)
    cards = clusters.describe(texts, x)
    ids = clusters.assign(x)
    for card in cards:
        planted = {int(t) for t in topics[ids == card.cluster]}
        assert len(planted) == 1  # the k-means found the planted topics
        assert set(card.words[:4]) == set(list(TOPIC_WORDS.values())[planted.pop()])
        assert len(card.examples) == 5
        members = list(np.flatnonzero(ids == card.cluster))
        d = clusters.transform(x[members]) - clusters.centroids[card.cluster]
        dist = dict(zip([texts[i] for i in members], (d**2).sum(1)))
        nearest = sorted(set(dist), key=lambda t: dist[t])[:5]
        assert card.examples == nearest


def test_examples_are_distinct_and_empty_clusters_get_empty_cards():
    texts = ["lol", "lol", "lol", "haha lol", "ok", "ok sure"]
    cards = cluster_cards(texts, [0, 0, 0, 0, 1, 1], 3, distances=[0.0, 0.0, 0.1, 0.2, 0.0, 0.1], num_examples=5)
    assert cards[0].examples == ["lol", "haha lol"]
    assert cards[1].examples == ["ok", "ok sure"]
    assert cards[2] == ClusterCard(cluster=2, share=0.0, size=0)
    assert cards[2].label == "2" and cards[0].label == "0: lol"
    assert cards[0].words == ["lol"]  # 4 times here, never elsewhere; "haha" occurs once (< 2)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="3 texts but"):
        cluster_cards(["a", "b", "c"], [0, 1], 2)
    with pytest.raises(ValueError, match=r"in \[0, 2\)"):
        cluster_cards(["a", "b"], [0, 2], 2)


def test_cards_are_saved_with_the_clusters_and_old_files_still_load(tmp_path):
    texts, _, x = toy_corpus()
    clusters = SemanticClusters(num_clusters=3, niter=20, nredo=1, show_progress=False, use_gpu=False)
    clusters.fit(x)
    old = clusters.save(tmp_path / "old.npz")  # no cards: the format before cards existed
    with np.load(old) as data:
        assert "cards" not in data.files
    assert SemanticClusters.load(old).cards is None
    clusters.describe(texts, x)
    loaded = SemanticClusters.load(clusters.save(tmp_path / "new.npz"))
    assert loaded.cards == clusters.cards and loaded.config_hash == clusters.config_hash
    np.testing.assert_array_equal(loaded.assign(x), clusters.assign(x))


def test_malformed_cards_in_a_file_are_named(tmp_path):
    texts, _, x = toy_corpus()
    clusters = SemanticClusters(num_clusters=3, niter=20, nredo=1, show_progress=False, use_gpu=False)
    clusters.fit(x)
    clusters.describe(texts, x)
    clusters.cards = clusters.cards[:2]
    path = clusters.save(tmp_path / "c.npz")
    with pytest.raises(ValueError, match="2 cluster cards for 3 clusters"):
        SemanticClusters.load(path)


def test_cards_csv_and_terminal_table(tmp_path):
    texts, topics, _ = toy_corpus()
    cards = cluster_cards(texts, topics, 3, top_n=4)
    path = write_cards_csv(cards, tmp_path / "cluster_cards.csv")
    rows = list(csv.DictReader(open(path, encoding="utf-8")))
    assert [r["cluster"] for r in rows] == ["0", "1", "2"]
    assert set(rows[1]["top words"].split(", ")) == set(TOPIC_WORDS["sport"])
    assert [p.name for p in tmp_path.iterdir()] == ["cluster_cards.csv"]  # no temporary file left
    table = format_cards(cards)
    assert "cluster   0   33.3 %  (60 responses)" in table and "football" in table


def test_stopwords_do_not_label_clusters_unless_asked():
    """Issue 31: on small data cards said "0: the, i, it"; English stopwords are dropped by default."""
    texts = [
        "i like it the pizza",
        "i want it it was",
        "i need it the most",
        "the pizza i ate",
        "it was the pizza it was",
        "we went hiking",
        "hiking trip was great",
        "great weather for hiking trip",
        "a long hiking trip",
    ]
    ids = [0] * 5 + [1] * 4
    cards = cluster_cards(texts, ids, 2)
    assert cards[0].words == ["pizza"] and cards[0].label == "0: pizza"
    assert cards[0].bigrams == ["the pizza"]  # "it was", "it the" (stopwords only) left out; "the pizza" kept
    assert cards[1].words == ["hiking", "trip", "great"] and cards[1].bigrams == ["hiking trip"]
    kept = cluster_cards(texts, ids, 2, stop_words=None)  # the argument turns it off: as before
    assert kept[0].words == ["it", "i", "the", "pizza", "was"]
    assert kept[0].bigrams == ["it was", "the pizza", "it the"]
    own = cluster_cards(texts, ids, 2, stop_words={"pizza"})  # or gives a list of one's own
    assert "pizza" not in own[0].words and "i" in own[0].words
    with pytest.raises(ValueError, match="stop_words must be 'english'"):
        cluster_cards(texts, ids, 2, stop_words="french")


def test_one_shared_word_on_six_replies_gives_no_numpy_warning_and_no_distinctive_word():
    """Issue 64 "also seen": 3 clusters of 6 replies where one word alone occurs twice: numpy's divide-by-zero
    warnings from the log-odds (the word is every counted term, its odds against the others infinite)."""
    import warnings

    texts = ["hello", "hello", "hello x", "y", "z", "w"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cards = cluster_cards(texts, [0, 0, 0, 1, 1, 2], 3)
    # one term cannot tell one cluster from the others: no card lists it
    assert [c.words for c in cards] == [[], [], []] and [c.size for c in cards] == [3, 2, 1]
