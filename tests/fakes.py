"""Stand-ins for the sentence encoder (and the planted-topic data they are built for), a model adapter and an NLI scorer.

An encoder, to the package, is any object with a ``name`` (its clusters' key) and ``encode(texts) -> array``
(``lightning_div.semantic.encoder.ResponseEncoder`` is the real one); a ``fingerprint`` (its weights) is
optional. The tests that need no model use these:

- :class:`VectorEncoder`: each text's vector from a function of the text (a fixed table, a hash, ones);
- :func:`topic_encoder`: a text's topic direction plus a little noise seeded by the text, so texts of one
  topic form one tight cluster (the clusters are then known by hand);
- :func:`hashed_encoder`: random vectors seeded by each text, counted (a cache's bookkeeping);
- :class:`CountingEncoder`: wraps any encoder (the real one too) and records each ``encode`` call, to tell
  a cache hit from a fit or to check batching;
- :class:`EchoSets` and :class:`EqualityScorer`: a model adapter and an NLI scorer whose sets and labels are
  known by hand (NLI diversity and Diversity Threshold Generation without models).

The tests that monkeypatch the real encoder's class (``test_semantic_space.py``) keep their subclass.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

# -- encoders ---------------------------------------------------------------------------------------------


class VectorEncoder:
    """An encoder whose vector for a text is ``vector_of(text)``, as float32 rows of width ``dim``."""

    def __init__(
        self, vector_of: Callable[[str], Any], dim: int, name: str = "fake", fingerprint: str | None = None
    ) -> None:
        self.vector_of, self.dim, self.name = vector_of, dim, name
        if fingerprint is not None:
            self.fingerprint = fingerprint

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not len(texts):
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([np.asarray(self.vector_of(t), dtype=np.float32) for t in texts])


class CountingEncoder:
    """Any encoder, with the size of each ``encode`` call recorded in ``sizes`` (``calls``: how many)."""

    def __init__(self, encoder: Any) -> None:
        self.encoder, self.sizes = encoder, []

    @property
    def calls(self) -> int:
        return len(self.sizes)

    def __getattr__(self, name: str) -> Any:  # name, fingerprint, ...: the wrapped encoder's
        if name in ("encoder", "sizes"):
            raise AttributeError(name)
        return getattr(self.encoder, name)

    def encode(self, texts: Sequence[str], *args: Any, **kwargs: Any) -> np.ndarray:
        self.sizes.append(len(texts))
        return self.encoder.encode(texts, *args, **kwargs)


def text_seed(text: str) -> int:
    """A seed from a text's bytes (the same in every process, unlike ``hash``)."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def hashed_encoder(dim: int = 8, name: str = "hashed", fingerprint: str = "weights-1") -> CountingEncoder:
    """Normal vectors seeded by each text (the same in every process), its calls counted: clusters of no meaning,
    for a cache's bookkeeping."""
    return CountingEncoder(
        VectorEncoder(lambda t: np.random.default_rng(text_seed(t)).normal(size=dim), dim, name, fingerprint)
    )


def topic_encoder(direction: Callable[[str], Iterable[float]], dim: int, noise: float) -> VectorEncoder:
    """A text's vector is ``direction(text)`` (its first entries; the rest 0) plus normal noise of scale
    ``noise`` seeded by the text: deterministic, and texts sharing a direction form one tight cluster."""

    def vector_of(text: str) -> np.ndarray:
        v = np.random.default_rng(text_seed(text)).normal(scale=noise, size=dim)
        for i, weight in enumerate(direction(text)):
            v[i] += weight
        return v

    return VectorEncoder(vector_of, dim, name="topic-encoder")


def first_word_encoder(topics: Sequence[str], default: str, noise: float = 0.01) -> VectorEncoder:
    """Topic = the text's first word, one of ``topics`` (an empty text counts as ``default``; another word is
    a ValueError: a test's texts are its topics)."""

    def direction(text: str) -> list[float]:
        word = text.split()[0] if text.split() else default
        return [float(i == list(topics).index(word)) for i in range(len(topics))]

    return topic_encoder(direction, len(topics), noise)


def first_letter_encoder(letters: str = "abcd", noise: float = 0.05) -> VectorEncoder:
    """Topic = the text's first letter, one of ``letters`` (any other letter counts as the first)."""

    def direction(text: str) -> list[float]:
        return [float(i == max(letters.find(text[:1]), 0)) for i in range(len(letters))]

    return topic_encoder(direction, len(letters), noise)


def topic_words_encoder(topics: Iterable[Sequence[str]], dim: int = 16, noise: float = 0.05) -> VectorEncoder:
    """Topic ``t``'s direction weighs how many of its words the text holds (a text may mix topics)."""
    topics = [list(words) for words in topics]

    def direction(text: str) -> list[float]:
        return [float(sum(w in text.split() for w in words)) for words in topics]

    return topic_encoder(direction, dim, noise)


# -- planted topics, for the cluster cards ----------------------------------------------------------------

# Three planted topics. Every response also carries the same filler words, which a
# frequency ranking would put first everywhere and a distinctiveness ranking must not.
PHRASES = {
    "food": ["pizza oven", "pasta sauce"],
    "sport": ["football goal", "referee whistle"],
    "weather": ["rain umbrella", "cloudy forecast"],
}
TOPIC_WORDS = {name: " ".join(phrases).split() for name, phrases in PHRASES.items()}
FILLER = ["i", "really", "think", "the", "is", "so"]


def toy_corpus(per_topic: int = 60, seed: int = 0) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Texts, their planted topic ids and embeddings (topic direction + small noise)."""
    rng = np.random.default_rng(seed)
    texts, topics, vectors = [], [], []
    for t, phrases in enumerate(PHRASES.values()):
        for _ in range(per_topic):
            words = list(rng.choice(FILLER, size=3, replace=False))
            words.insert(int(rng.integers(0, 4)), str(rng.choice(phrases)))
            texts.append(" ".join(words))
            topics.append(t)
            v = rng.normal(scale=0.05, size=16)
            v[t] += 1.0
            vectors.append(v)
    return texts, np.array(topics), np.array(vectors, dtype=np.float32)


# -- a model adapter and an NLI scorer --------------------------------------------------------------------


class EchoSets:
    """A stand-in adapter: context "same" gets n copies of "a", any other n distinct responses."""

    def generate(self, contexts, num_return_sequences, **kwargs):
        n = num_return_sequences
        return [r for c in contexts for r in (["a"] * n if c[-1] == "same" else [f"r{i}" for i in range(n)])]


class EqualityScorer:
    """A stand-in NLI scorer: equal texts entail each other, different ones contradict (probability 1)."""

    def score_sets(self, sets, show_progress=None):
        from lightning_div.nli.scorer import SetResult, ordered_pairs

        out = []
        for responses in sets:
            labels = tuple(
                "entailment" if responses[i] == responses[j] else "contradiction"
                for i, j in ordered_pairs(len(responses))
            )
            probs = np.array([[1.0, 0, 0] if lab == "entailment" else [0, 0, 1.0] for lab in labels])
            out.append(SetResult(tuple(responses), labels, probs))
        return out

    def score_pairs(self, premises, hypotheses, show_progress=None):
        """The same rule for single pairs (what Diversity Threshold Generation asks)."""
        labels = ["entailment" if p == h else "contradiction" for p, h in zip(premises, hypotheses)]
        probs = np.array([[1.0, 0, 0] if lab == "entailment" else [0, 0, 1.0] for lab in labels]).reshape(-1, 3)
        return labels, probs
