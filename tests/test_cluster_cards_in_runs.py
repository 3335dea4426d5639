"""Clusters without cards (files saved before cards existed, or given by the user) get cards from the gold data."""

from __future__ import annotations

import numpy as np
from fakes import TOPIC_WORDS, topic_words_encoder, toy_corpus

from lightning_div.semantic.cache import load_or_fit_clusters
from lightning_div.semantic.clusters import SemanticClusters
from lightning_div.semantic.space import SemanticSpace


def test_an_old_cache_file_gets_its_cards_saved_into_it(tmp_path):
    texts, _, _ = toy_corpus()
    encoder = topic_words_encoder(TOPIC_WORDS.values())
    config = dict(num_clusters=3, niter=20, nredo=1, show_progress=False, use_gpu=False)
    clusters = load_or_fit_clusters(tmp_path, texts, encoder, **config).clusters
    path = next(tmp_path.glob("clusters-*.npz"))
    clusters.cards = None
    clusters.save(path)  # as a version without cards wrote it
    assert SemanticClusters.load(path).cards is None

    space = SemanticSpace(encoder=encoder, num_clusters=3, batch_size=8, show_progress=False)
    space.load_state_dict({"clusters_path": str(path)})  # a checkpoint points at our cache file
    cards = space.fit(texts).cards
    assert cards is not None
    assert {frozenset(c.words[:4]) for c in cards} == {frozenset(w) for w in TOPIC_WORDS.values()}
    assert SemanticClusters.load(path).cards == cards  # saved into our own cache file


def test_given_clusters_without_cards_are_described_but_the_users_file_is_left_alone(tmp_path):
    texts, _, _ = toy_corpus()
    encoder = topic_words_encoder(TOPIC_WORDS.values())
    fitted = SemanticClusters(num_clusters=3, niter=20, nredo=1, show_progress=False, use_gpu=False)
    fitted.fit(encoder.encode(texts))  # fit(), not fit_texts(): no cards
    user_file = fitted.save(tmp_path / "mine.npz")
    before = user_file.read_bytes()
    space = SemanticSpace(encoder=encoder, clusters=str(user_file), batch_size=8, show_progress=False)
    clusters = space.fit(texts, cache_dir=tmp_path / "cache").clusters
    ids = space.gold_assignments(texts)
    assert clusters.cards is not None and sum(c.size for c in clusters.cards) == len(texts)
    assert [c.size for c in clusters.cards] == np.bincount(ids, minlength=3).tolist()
    assert user_file.read_bytes() == before and not (tmp_path / "cache").exists()
