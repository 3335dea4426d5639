"""Set metrics for meta-evaluation: one response set in, one diversity value out.

A *set metric* is any ``Callable[[list[str]], float]``. Metrics that run a model also
offer ``score_many(sets) -> list[float]``, which scores many sets in one batched pass
(every response of every set embedded at once, every NLI pair of every set scored at
once); :func:`score_sets` uses it when present and otherwise loops over the sets.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from lightning_div._internal.bars import bar_disabled
from lightning_div._internal.text import TokenizerSpec, check_texts, get_tokenizer
from lightning_div.metrics import check_lexical_names, lexical_scores, semantic_entropy
from lightning_div.metrics.lexical import LEXICAL_PATTERN, iter_ngrams
from lightning_div.metrics.nli import VARIANTS as VARIANTS_NLI
from lightning_div.metrics.sets import NegativeMeanCosine, SetMetric, fewer_than_two

Similarity = Callable[[str, str], float]
Encode = Callable[[list[str]], Any]

MODEL_METRICS = ("sem_ent", "sent_bert") + tuple(f"nli_{v}" for v in VARIANTS_NLI)
METRIC_NAMES = ("avg_distinct", "distinct_<n>", "distinct_<n>_utt", "ent_<n>", "ead", "cos_sim") + MODEL_METRICS


def metric_name(metric: Any) -> str:
    """The name a metric is reported under: its ``name`` attribute, else its ``__name__``.

    Args:
        metric: a set metric.

    Returns:
        Its name.
    """
    name = getattr(metric, "name", None) or getattr(metric, "__name__", None)
    return str(name) if name else type(metric).__name__


def score_sets(metric: SetMetric, sets: Sequence[Sequence[str]], show_progress: bool = True) -> np.ndarray:
    """The metric of every set (float64), through ``metric.score_many`` when it has one.

    Raises when a set is not a list of strings (naming it) or the metric returns a
    non-finite value (naming the set): a meta-evaluation must not rank NaNs.

    Args:
        metric: a set metric.
        sets: the response sets.
        show_progress: a tqdm bar when the metric is looped over.

    Returns:
        float64 array, one value per set.

    Raises:
        TypeError: a set that is not a list of strings (named by index).
        ValueError: a non-finite metric value (named by set).
    """
    if isinstance(sets, str):
        raise TypeError("sets must be a list of response sets (lists of str), got one str")
    checked = [check_texts(s, f"sets[{i}]") for i, s in enumerate(sets)]
    name = metric_name(metric)
    many = getattr(metric, "score_many", None)
    if callable(many):
        values = list(many(checked))
        if len(values) != len(checked):
            raise ValueError(f"{name}.score_many returned {len(values)} values for {len(checked)} sets")
    else:
        values = [
            metric(s) for s in tqdm(checked, desc=f"scoring {name}", unit="set", disable=bar_disabled(show_progress))
        ]
    try:
        out = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"metric {name} must return numbers, got {values[:3]!r}...") from None
    if out.shape != (len(checked),):
        raise TypeError(f"metric {name} must return one float per set, got an array of shape {out.shape}")
    bad = np.flatnonzero(~np.isfinite(out))
    if bad.size:
        raise ValueError(f"metric {name} returned {out[bad[0]]} for sets[{bad[0]}]; diversity values must be finite")
    return out


class LexicalMetric:
    """``avg_distinct``, ``distinct_<n>`` (``_utt``: utterance level), ``ent_<n>`` or ``ead`` of one set.

    ``tokenizer`` / ``lowercase`` as in :mod:`lightning_div._internal.text` (Tevet & Berant's own split:
    ``tokenizer="diversity_eval"``); ``base`` of Ent-n (e: nats, 2: bits).
    """

    def __init__(
        self,
        name: str,
        vocab_size: int | None = None,
        tokenizer: TokenizerSpec = "13a",
        lowercase: bool | None = None,
        base: float = math.e,
    ) -> None:
        check_lexical_names([name])
        if name == "ead" and vocab_size is None:
            raise ValueError("the ead metric needs vocab_size (e.g. count_vocab(all responses))")
        get_tokenizer(tokenizer, lowercase)  # an unknown name fails here, not at the first set
        self.name = name
        self.vocab_size = vocab_size
        self.tokenizer = tokenizer
        self.lowercase = lowercase
        self.base = base

    def __call__(self, texts: Sequence[str]) -> float:
        return lexical_scores(texts, [self.name], self.vocab_size, self.tokenizer, self.lowercase, self.base)[self.name]

    def __repr__(self) -> str:
        return f"LexicalMetric({self.name!r})"


class SimilarityDiversity:
    """Tevet & Berant's reduction: div(S) = −mean of ``similarity(s_i, s_j)`` over the C(n,2) pairs i > j.

    ``similarity`` must be symmetric; each unordered pair is scored once. A set of fewer
    than 2 responses has no pairs: its diversity is undefined, NaN with a warning.
    """

    def __init__(self, similarity: Similarity, name: str | None = None) -> None:
        if not callable(similarity):
            raise TypeError(f"similarity must be a function (str, str) -> float, got {type(similarity).__name__}")
        self.similarity = similarity
        self.name = name or f"div_{metric_name(similarity)}"

    def __call__(self, texts: Sequence[str]) -> float:
        texts = check_texts(texts)
        n = len(texts)
        if n < 2:
            return fewer_than_two(n, f"{self.name} (a mean over pairs)")
        total = 0.0
        for i in range(1, n):
            for j in range(i):
                value = float(self.similarity(texts[i], texts[j]))
                if not math.isfinite(value):
                    raise ValueError(f"{metric_name(self.similarity)}(texts[{i}], texts[{j}]) = {value} is not finite")
                total += value
        return -total / (n * (n - 1) / 2)

    def __repr__(self) -> str:
        return f"SimilarityDiversity({metric_name(self.similarity)})"


def similarity_to_diversity(similarity: Similarity, name: str | None = None) -> SimilarityDiversity:
    """A set metric from a pairwise similarity: −mean over unordered pairs (paper section 5).

    Args:
        similarity: a symmetric ``sim(a, b) -> float``.
        name: the metric's name (default: the similarity's).

    Returns:
        A set metric; a set of fewer than 2 responses scores 0.0.

    Examples:
        >>> exact = similarity_to_diversity(lambda a, b: float(a == b))
        >>> round(exact(["a", "a", "b"]), 4)  # 1 identical pair of 3
        -0.3333
    """
    return SimilarityDiversity(similarity, name)


def ngram_cosine_similarity(
    a: str, b: str, max_n: int = 5, tokenizer: TokenizerSpec = "13a", lowercase: bool | None = None
) -> float:
    """Cosine of the two texts' n-gram count vectors, averaged over n = 1..max_n (the paper's cos-sim).

    An order n at which either text has no n-gram contributes similarity 0 (no shared
    n-gram; a defined value), as in the authors' code. ``tokenizer`` / ``lowercase`` as in
    :mod:`lightning_div._internal.text`; the authors split with ``tokenizer="diversity_eval"`` (case kept).

    Args:
        a: one text.
        b: the other text.
        max_n: the highest n-gram order.
        tokenizer: the lexical tokeniser (see :func:`~lightning_div._internal.text.get_tokenizer`).
        lowercase: lowercase first; None = the tokeniser's own setting.

    Returns:
        The similarity in [0, 1].

    Examples:
        >>> ngram_cosine_similarity("a b", "a c", max_n=1)  # unigram counts (1, 1, 0) and (1, 0, 1)
        0.5
    """
    split = get_tokenizer(tokenizer, lowercase)
    ta, tb = split(a), split(b)
    values = []
    for n in range(1, max_n + 1):
        ca, cb = Counter(iter_ngrams(ta, n)), Counter(iter_ngrams(tb, n))
        dot = sum(v * cb[k] for k, v in ca.items() if k in cb)
        norm = math.sqrt(sum(v * v for v in ca.values()) * sum(v * v for v in cb.values()))
        values.append(dot / norm if norm > 0 else 0.0)
    return float(np.mean(values))


class SemEntMetric:
    """Sem-Ent of one set: entropy (nats) of its responses' histogram over fitted semantic clusters.

    ``clusters`` is a fitted :class:`lightning_div.semantic.clusters.SemanticClusters`; ``encoder`` a
    ``ResponseEncoder`` (or any ``encode(texts) -> [n, d]``) of the kind the clusters were
    fitted on. ``score_many`` embeds and assigns every distinct response of all sets at once.
    """

    name = "sem_ent"

    def __init__(self, clusters: Any, encoder: Any) -> None:
        if not getattr(clusters, "fitted", False):
            raise ValueError(
                "sem_ent needs fitted clusters: SemanticClusters(...).fit_texts(texts, encoder) "
                "or SemanticClusters.load(path)"
            )
        self.clusters = clusters
        self.encode: Encode = getattr(encoder, "encode", encoder)

    def score_many(self, sets: Sequence[Sequence[str]]) -> list[float]:
        """Sem-Ent of every set, all distinct responses embedded and assigned in one pass.

        Args:
            sets: the response sets.

        Returns:
            One value per set.
        """
        unique = list(dict.fromkeys(t for s in sets for t in s))
        ids = self.clusters.assign(self.encode(unique)) if unique else np.zeros(0, dtype=np.int64)
        cluster_of = dict(zip(unique, ids.tolist()))
        k = self.clusters.num_clusters
        return [semantic_entropy([cluster_of[t] for t in s], k) for s in sets]

    def __call__(self, texts: Sequence[str]) -> float:
        return self.score_many([check_texts(texts)])[0]


class SentBertMetric:
    """Sent-BERT diversity: negative mean pairwise cosine of sentence embeddings (:class:`NegativeMeanCosine`).

    ``encoder`` is a ``ResponseEncoder`` with mean pooling (e.g. all-MiniLM-L6-v2) or any
    ``encode(texts) -> [n, d]``. ``score_many`` embeds every distinct response of all sets in one call.
    """

    name = "sent_bert"

    def __init__(self, encoder: Any) -> None:
        self.encode: Encode = getattr(encoder, "encode", encoder)
        self._batch: dict[str, np.ndarray] = {}
        self._cosine = NegativeMeanCosine(self._vectors)

    def _vectors(self, texts: list[str]) -> Any:
        # NegativeMeanCosine asks only for texts it has not cached; inside score_many they were all embedded.
        if all(t in self._batch for t in texts):
            return np.stack([self._batch[t] for t in texts])
        return self.encode(texts)

    def score_many(self, sets: Sequence[Sequence[str]]) -> list[float]:
        """Sent-BERT diversity of every set, all distinct responses embedded in one call.

        Args:
            sets: the response sets.

        Returns:
            One value per set.
        """
        unique = list(dict.fromkeys(t for s in sets if len(s) > 1 for t in s))
        if unique:
            vectors = np.asarray(self.encode(unique))
            if vectors.ndim != 2 or vectors.shape[0] != len(unique):
                raise ValueError(
                    f"encode({len(unique)} texts) returned shape {vectors.shape}, expected ({len(unique)}, dim)"
                )
            self._batch = dict(zip(unique, vectors))
        try:
            return [self._cosine(s) for s in sets]
        finally:
            self._batch = {}

    def __call__(self, texts: Sequence[str]) -> float:
        return self._cosine(check_texts(texts))


class NLIMetric:
    """NLI Diversity (``baseline``, ``neutral`` or ``confidence``) of one set with an :class:`NLIScorer`.

    Metrics made by :func:`nli_metrics` share their predictions: asking for all three
    variants runs each set's pairs through the model once.
    """

    def __init__(self, scorer: Any, variant: str = "baseline", cache: dict | None = None) -> None:
        if variant not in VARIANTS_NLI:
            raise ValueError(f"variant={variant!r} is unknown; use one of {VARIANTS_NLI}")
        if not callable(getattr(scorer, "score_sets", None)):
            raise TypeError(
                f"nli_{variant} needs an NLIScorer (an object with score_sets), got {type(scorer).__name__}"
            )
        self.scorer = scorer
        self.variant = variant
        self.name = f"nli_{variant}"
        self._results: dict[tuple[str, ...], Any] = {} if cache is None else cache

    def score_many(self, sets: Sequence[Sequence[str]]) -> list[float]:
        """NLI Diversity of every set, all pairs of all sets in one batched NLI pass (shared between variants).

        Args:
            sets: the response sets.

        Returns:
            One value per set.
        """
        keys = [tuple(s) for s in sets]
        todo = list(dict.fromkeys(k for k in keys if k not in self._results))
        if todo:
            self._results.update(zip(todo, self.scorer.score_sets([list(k) for k in todo])))
        return [self._results[k].diversity(self.variant) for k in keys]

    def __call__(self, texts: Sequence[str]) -> float:
        return self.score_many([check_texts(texts)])[0]


def nli_metrics(scorer: Any, variants: Sequence[str] = VARIANTS_NLI) -> list[NLIMetric]:
    """One :class:`NLIMetric` per variant, sharing the scorer's predictions.

    Args:
        scorer: an :class:`~lightning_div.nli.scorer.NLIScorer`.
        variants: the NLI Diversity variants wanted.

    Returns:
        One metric per variant, named ``nli_<variant>``.
    """
    cache: dict = {}
    return [NLIMetric(scorer, v, cache) for v in variants]


def check_metric_names(names: Sequence[str]) -> list[str]:
    """Validate metric names against :data:`METRIC_NAMES` (the error lists them).

    Args:
        names: the names to check.

    Returns:
        The names, as a list.

    Raises:
        ValueError: an unknown name.
    """
    bad = [n for n in names if not (LEXICAL_PATTERN.match(n) or n == "cos_sim" or n in MODEL_METRICS)]
    if bad:
        raise ValueError(f"unknown metrics {bad}; use {', '.join(METRIC_NAMES)}")
    return list(names)


def make_metrics(
    names: Sequence[str],
    *,
    vocab_size: int | None = None,
    encoder: Any = None,
    clusters: Any = None,
    nli_scorer: Any = None,
    tokenizer: TokenizerSpec = "13a",
    lowercase: bool | None = None,
    base: float = math.e,
) -> dict[str, SetMetric]:
    """Set metrics by name (see :data:`METRIC_NAMES`), keyed by name.

    ``ead`` needs ``vocab_size``; ``sem_ent`` fitted ``clusters`` and an ``encoder``;
    ``sent_bert`` an ``encoder`` (mean pooling); ``nli_*`` an ``nli_scorer``. The NLI
    variants share one set of predictions. ``tokenizer`` / ``lowercase`` apply to the
    lexical metrics and ``cos_sim`` (Tevet & Berant's own split: ``"diversity_eval"``);
    ``base`` to Ent-n.

    Args:
        names: metric names (see :data:`METRIC_NAMES`; ``distinct_<n>`` and ``ent_<n>`` for any n).
        vocab_size: V for ``ead``.
        encoder: a :class:`~lightning_div.semantic.encoder.ResponseEncoder` for ``sem_ent`` / ``sent_bert``.
        clusters: fitted :class:`~lightning_div.semantic.clusters.SemanticClusters` for ``sem_ent``.
        nli_scorer: an :class:`~lightning_div.nli.scorer.NLIScorer` for ``nli_*``.
        tokenizer: the lexical tokeniser (see :func:`~lightning_div._internal.text.get_tokenizer`).
        lowercase: lowercase first; None = the tokeniser's own setting.
        base: the logarithm's base for Ent-n (2: bits, as the Sem-Ent paper reports).

    Returns:
        ``{name: set metric}`` in the order of ``names``.

    Raises:
        ValueError: an unknown name (the message lists ours), or a metric whose requirement is missing.
    """
    names = list(dict.fromkeys(check_metric_names(names)))
    missing = []
    if any(n in ("sem_ent", "sent_bert") for n in names) and encoder is None:
        missing.append("sem_ent and sent_bert need encoder= (a ResponseEncoder, mean pooling)")
    if "sem_ent" in names and clusters is None:
        missing.append("sem_ent needs clusters= (a fitted SemanticClusters)")
    if any(n.startswith("nli_") for n in names) and nli_scorer is None:
        missing.append("nli_* need nli_scorer= (an NLIScorer)")
    if missing:
        raise ValueError("; ".join(missing))
    variants = [n[len("nli_") :] for n in names if n.startswith("nli_")]
    nli = {m.name: m for m in nli_metrics(nli_scorer, variants)} if variants else {}
    out: dict[str, SetMetric] = {}
    for name in names:
        if name in nli:
            out[name] = nli[name]
        elif name == "sem_ent":
            out[name] = SemEntMetric(clusters, encoder)
        elif name == "sent_bert":
            out[name] = SentBertMetric(encoder)
        elif name == "cos_sim":

            def cos_sim(a: str, b: str) -> float:
                return ngram_cosine_similarity(a, b, tokenizer=tokenizer, lowercase=lowercase)

            out[name] = similarity_to_diversity(cos_sim, "cos_sim")
        else:
            out[name] = LexicalMetric(name, vocab_size, tokenizer, lowercase, base)
    return out


class CachedEncoder:
    """Wraps an encoder so that each distinct text is embedded once (clusters, Sem-Ent and Sent-BERT share it)."""

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder
        self.name = getattr(encoder, "name", type(encoder).__name__)
        self._vectors: dict[str, np.ndarray] = {}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``, running the wrapped encoder only on texts not seen before.

        Args:
            texts: the texts.

        Returns:
            The embeddings ``[len(texts), d]``, in input order.
        """
        texts = check_texts(texts)
        new = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if new:
            self._vectors.update(zip(new, np.asarray(self.encoder.encode(new))))
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([self._vectors[t] for t in texts])


def mapping_of(metrics: SetMetric | Sequence[SetMetric] | Mapping[str, SetMetric]) -> dict[str, SetMetric]:
    """Metrics keyed by :func:`metric_name` (a mapping is kept as given)."""
    if isinstance(metrics, Mapping):
        return dict(metrics)
    if callable(metrics):
        metrics = [metrics]
    out: dict[str, SetMetric] = {}
    for m in metrics:
        name = metric_name(m)
        if name in out:
            raise ValueError(f"two metrics are named {name!r}; pass a dict to name them")
        out[name] = m
    return out
