"""Clusters without cards (files saved before cards existed, or given by the user) get cards from the gold data."""

from __future__ import annotations

import hashlib

import numpy as np
from test_cluster_cards import TOPICS, toy_corpus

from lightning_div.semantic.clusters import SemanticClusters
from lightning_div.semantic.space import ClusterSpec


class TopicEncoder:
    """A deterministic stand-in for ResponseEncoder: a text's topic direction plus noise seeded by the text."""

    name = "topic-encoder"

    def encode(self, texts):
        rows = []
        for text in texts:
            rng = np.random.default_rng(int(hashlib.sha256(text.encode()).hexdigest()[:8], 16))
            v = rng.normal(scale=0.05, size=16)
            for t, words in enumerate(TOPICS.values()):
                v[t] += sum(w in text.split() for w in words)
            rows.append(v)
        return np.array(rows, dtype=np.float32)


def test_an_old_cache_file_gets_its_cards_saved_into_it(tmp_path):
    texts, _, _ = toy_corpus()
    encoder = TopicEncoder()
    config = dict(num_clusters=3, niter=20, nredo=1, show_progress=False, use_gpu=False)
    clusters = SemanticClusters.load_or_fit(tmp_path, texts, encoder, **config)
    path = next(tmp_path.glob("clusters-*.npz"))
    clusters.cards = None
    clusters.save(path)  # as a version without cards wrote it
    assert SemanticClusters.load(path).cards is None

    spec = ClusterSpec(encoder=encoder, num_clusters=3)
    loaded = SemanticClusters.load(path)
    spec._clusters, spec.clusters_path = loaded, str(path)
    cards = spec.ensure_cards(None, texts, batch_size=8, show_progress=False, save=True)
    assert {frozenset(c.words[:4]) for c in cards} == {frozenset(w) for w in TOPICS.values()}
    assert SemanticClusters.load(path).cards == cards  # saved into our own cache file


def test_given_clusters_without_cards_are_described_but_the_users_file_is_left_alone(tmp_path):
    texts, _, _ = toy_corpus()
    encoder = TopicEncoder()
    fitted = SemanticClusters(num_clusters=3, niter=20, nredo=1, show_progress=False, use_gpu=False)
    fitted.fit(encoder.encode(texts))  # fit(), not fit_texts(): no cards
    user_file = fitted.save(tmp_path / "mine.npz")
    before = user_file.read_bytes()
    spec = ClusterSpec(encoder=encoder, clusters=str(user_file), num_clusters=3)
    clusters, ids = spec.gold_assignments(None, texts, tmp_path / "cache", batch_size=8, show_progress=False)
    assert clusters.cards is not None and sum(c.size for c in clusters.cards) == len(texts)
    assert [c.size for c in clusters.cards] == np.bincount(ids, minlength=3).tolist()
    assert user_file.read_bytes() == before
