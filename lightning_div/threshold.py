"""Diversity Threshold Generation (Stasaski & Hearst, 2022, section 5).

Sample n responses; while the set's diversity is <= the threshold and fewer than
``max_samples`` responses have been drawn, drop the response absent from the
best-scoring (n-1)-subset and sample one replacement. The metric is the number of
contradiction pairs (the paper's "10 of 20"), an NLI Diversity variant, or any
``list[str] -> float`` set metric with its own threshold (averaged distinct,
:class:`NegativeMeanCosine` of sentence embeddings, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Union

import numpy as np
from tqdm.auto import tqdm

from lightning_div.formatting import Context
from lightning_div.metrics.nli import LABELS, VARIANTS, nli_diversity
from lightning_div.nli import PairScorer, SetResult, ordered_pairs

SetMetric = Callable[[list[str]], float]
Metric = Union[str, SetMetric]
NLI_METRICS = ("contradictions",) + VARIANTS
# Keys of threshold_stats(): what a monitor logs after running the procedure.
THRESHOLD_STAT_KEYS = ("threshold_start_diversity", "threshold_end_diversity", "threshold_samples_drawn",
                       "threshold_reached")


class ResponseGenerator(Protocol):
    """The part of :class:`lightning_div.adapters.DialogueModelAdapter` this module uses."""

    def generate(self, contexts: Sequence[Context], **generation_kwargs: Any) -> list[str]:
        """``len(contexts) * num_return_sequences`` responses, grouped by context."""
        ...


@dataclass(frozen=True)
class ThresholdStep:
    """One resampling step: ``dropped`` (at ``index``) left, ``replacement`` took its place."""

    index: int
    dropped: str
    replacement: str
    subset_diversity: float  # metric of the kept n-1 responses
    diversity: float  # metric of the set after the replacement


@dataclass(frozen=True)
class ThresholdResult:
    """Outcome of Diversity Threshold Generation for one context.

    ``samples_drawn`` counts every sampled response, the initial n included;
    ``reached`` is ``end_diversity > threshold``. For NLI metrics ``start_set`` /
    ``end_set`` hold the pair predictions of the first and final sets (so all NLI
    Diversity variants and pair counts can be reported at no extra cost).
    """

    responses: list[str]
    start_diversity: float
    end_diversity: float
    samples_drawn: int
    reached: bool
    start_responses: list[str]
    steps: list[ThresholdStep]
    start_set: SetResult | None = None
    end_set: SetResult | None = None

    def stats(self) -> dict[str, float]:
        values = (self.start_diversity, self.end_diversity, float(self.samples_drawn), float(self.reached))
        return dict(zip(THRESHOLD_STAT_KEYS, values))


def threshold_stats(results: Sequence[ThresholdResult | Mapping[str, float]]) -> dict[str, float]:
    """Mean over contexts of start / end diversity, samples drawn and the share that reached the threshold."""
    if not results:
        raise ValueError("threshold_stats needs at least one result")
    rows = [r.stats() if isinstance(r, ThresholdResult) else r for r in results]
    return {key: float(np.mean([row[key] for row in rows])) for key in THRESHOLD_STAT_KEYS}


class NegativeMeanCosine:
    """Sent-BERT diversity of a set: minus the mean cosine similarity over its response pairs.

    ``encode(texts) -> array [len(texts), d]`` is any sentence encoder (e.g.
    ``lightning_div.embedding.ResponseEncoder`` or a sentence-transformers model's
    ``encode``). Embeddings are cached by text, so threshold generation encodes each
    response once. A set of fewer than 2 responses has no pairs: 0.0.
    """

    def __init__(self, encode: Callable[[list[str]], Any]) -> None:
        self.encode = encode
        self._cache: dict[str, np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> float:
        texts = list(texts)
        if len(texts) < 2:
            return 0.0
        new = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if new:
            vectors = np.asarray(self.encode(new), dtype=np.float64)
            if vectors.ndim != 2 or vectors.shape[0] != len(new):
                raise ValueError(f"encode({len(new)} texts) returned shape {vectors.shape}, "
                                 f"expected ({len(new)}, dim)")
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            if not np.all(np.isfinite(vectors)) or np.any(norms == 0):
                raise ValueError("encode returned a zero or non-finite embedding; cosine similarity is undefined")
            self._cache.update(zip(new, vectors / norms))
        unit = np.stack([self._cache[t] for t in texts])
        sims = unit @ unit.T
        n = len(texts)
        return -float((sims.sum() - np.trace(sims)) / (n * (n - 1)))


def derive_seed(seed: int, step: int) -> int:
    """Independent, reproducible seed for sampling round ``step`` (0: the initial n)."""
    return int(np.random.SeedSequence([seed, step]).generate_state(1)[0])


class _PairCache:
    """NLI predictions by (premise, hypothesis) text: each pair goes through the model once."""

    def __init__(self, scorer: PairScorer) -> None:
        self.scorer = scorer
        self.preds: dict[tuple[str, str], tuple[str, np.ndarray]] = {}

    def add_sets(self, sets: Sequence[Sequence[str]], only: Sequence[int] | None = None) -> None:
        """Score the unseen ordered pairs of ``sets`` (those involving position ``only[s]`` of set s, if given)."""
        todo: dict[tuple[str, str], None] = {}
        for s, responses in enumerate(sets):
            for i, j in ordered_pairs(len(responses)):
                if only is not None and only[s] not in (i, j):
                    continue
                pair = (responses[i], responses[j])
                if pair not in self.preds:
                    todo[pair] = None
        if not todo:
            return
        pairs = list(todo)
        labels, probs = self.scorer.score_pairs([p for p, _ in pairs], [h for _, h in pairs], show_progress=False)
        probs = np.asarray(probs, dtype=np.float64)
        if len(labels) != len(pairs) or probs.shape != (len(pairs), 3):
            raise ValueError(f"scorer.score_pairs returned {len(labels)} labels and probs of shape {probs.shape} "
                             f"for {len(pairs)} pairs; expected {len(pairs)} and ({len(pairs)}, 3)")
        self.preds.update(zip(pairs, zip(labels, probs)))

    def set_result(self, responses: Sequence[str]) -> SetResult:
        pairs = ordered_pairs(len(responses))
        preds = [self.preds[(responses[i], responses[j])] for i, j in pairs]
        probs = np.stack([p for _, p in preds]) if preds else np.zeros((0, 3))
        return SetResult(tuple(responses), tuple(lab for lab, _ in preds), probs)


def _nli_value(result: SetResult, metric: str) -> float:
    if metric == "contradictions":
        return float(sum(lab == LABELS[2] for lab in result.labels))
    return nli_diversity(result.labels, metric, result.confidences if metric == "confidence" else None)


def _check_metric(metric: Metric, scorer: PairScorer | None) -> None:
    if callable(metric):
        return
    if metric not in NLI_METRICS:
        raise ValueError(f"metric={metric!r} is unknown; use one of {NLI_METRICS} or a callable list[str] -> float")
    if scorer is None or not callable(getattr(scorer, "score_pairs", None)):
        raise ValueError(f"metric={metric!r} needs an NLI scorer: pass scorer=NLIScorer() "
                         f"(roberta-large-mnli) or any object with score_pairs(premises, hypotheses, show_progress)")


def _sample(adapter: ResponseGenerator, contexts: list[Context], k: int, seed: int,
            generation_kwargs: Mapping[str, Any]) -> list[list[str]]:
    out = adapter.generate(contexts, num_return_sequences=k, seed=seed, **generation_kwargs)
    out = list(out)
    if len(out) != len(contexts) * k:
        raise ValueError(f"adapter.generate returned {len(out)} responses for {len(contexts)} context(s) x "
                         f"num_return_sequences={k}; expected {len(contexts) * k}")
    for i, r in enumerate(out):
        if not isinstance(r, str):
            raise TypeError(f"adapter.generate returned {type(r).__name__} at position {i}, expected str")
    return [out[c * k:(c + 1) * k] for c in range(len(contexts))]


def _drop_index(subset_scores: Sequence[float]) -> int:
    """Position absent from the best (n-1)-subset; on a tie the LAST such position (earlier draws are kept)."""
    best = max(subset_scores)
    tied = [k for k, v in enumerate(subset_scores) if math.isclose(v, best, rel_tol=1e-12, abs_tol=1e-12)]
    return tied[-1]


def diversity_threshold_generate_many(
        adapter: ResponseGenerator, contexts: Sequence[Context], scorer: PairScorer | None = None, n: int = 5,
        threshold: float = 10, max_samples: int = 20, top_p: float = 0.9, metric: Metric = "contradictions",
        seed: int = 0, show_progress: bool = True, **generation_kwargs: Any) -> list[ThresholdResult]:
    """Diversity Threshold Generation for many contexts at once (see :func:`diversity_threshold_generate`).

    Each sampling round is one ``adapter.generate`` call for all contexts still below the
    threshold and one NLI call for all their new pairs. Deterministic for a given seed
    and list of contexts (a context's samples depend on which contexts share its rounds).

    Args:
        adapter: as :func:`diversity_threshold_generate`.
        contexts: strings or lists of turns.
        scorer: an :class:`~lightning_div.nli.NLIScorer` (or any object with ``score_pairs``);
            needed by the NLI metrics.
        n: the set size (the paper: 5).
        threshold: stop once the metric exceeds this (the paper: 10 contradictions of 20 pairs).
        max_samples: the most responses drawn per context, the first n included (the paper: 20).
        top_p: nucleus sampling.
        metric: ``"contradictions"``, ``"baseline"``, ``"neutral"``, ``"confidence"`` or a
            callable ``list[str] -> float``.
        seed: round r samples with a seed derived from (seed, r).
        show_progress: a tqdm bar over rounds.
        **generation_kwargs: passed on to ``adapter.generate`` (``max_new_tokens``, ...).

    Returns:
        One :class:`ThresholdResult` per context.

    Raises:
        ValueError: as :func:`diversity_threshold_generate`.
    """
    contexts = list(contexts)
    _check_metric(metric, scorer)
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"n must be an integer >= 2 (subsets of n-1 responses are compared), got {n!r}")
    if isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < n:
        raise ValueError(f"max_samples must be an integer >= n={n} (it counts the initial n samples), "
                         f"got {max_samples!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer (each round samples with a seed derived "
                         f"from it), got {seed!r}")
    if not math.isfinite(threshold):
        raise ValueError(f"threshold must be a finite number, got {threshold!r}")
    if not contexts:
        return []
    generation_kwargs = {"do_sample": True, "top_p": top_p, **generation_kwargs}
    cache = _PairCache(scorer) if not callable(metric) else None

    def value(responses: Sequence[str]) -> float:
        if cache is not None:
            return _nli_value(cache.set_result(responses), metric)
        v = float(metric(list(responses)))
        if not math.isfinite(v):
            raise ValueError(f"metric returned {v} for the set {list(responses)!r}")
        return v

    sets = _sample(adapter, contexts, n, derive_seed(seed, 0), generation_kwargs)
    if cache is not None:
        cache.add_sets(sets)
    start_values = [value(s) for s in sets]
    values = list(start_values)
    starts = [list(s) for s in sets]
    drawn = [n] * len(contexts)
    steps: list[list[ThresholdStep]] = [[] for _ in contexts]
    active = [c for c in range(len(contexts)) if values[c] <= threshold and drawn[c] < max_samples]
    bar = tqdm(total=len(contexts), desc="diversity threshold", unit="context", disable=not show_progress)
    bar.update(len(contexts) - len(active))
    rounds = 0
    while active:
        rounds += 1
        drops = []
        for c in active:
            subsets = [value(sets[c][:k] + sets[c][k + 1:]) for k in range(n)]
            k = _drop_index(subsets)
            drops.append((k, subsets[k], sets[c][k]))
        new = _sample(adapter, [contexts[c] for c in active], 1, derive_seed(seed, rounds), generation_kwargs)
        for c, (k, _, _), (response,) in zip(active, drops, new):
            sets[c] = sets[c][:k] + [response] + sets[c][k + 1:]
            drawn[c] += 1
        if cache is not None:
            cache.add_sets([sets[c] for c in active], only=[k for k, _, _ in drops])
        for c, (k, kept, dropped), (response,) in zip(active, drops, new):
            values[c] = value(sets[c])
            steps[c].append(ThresholdStep(k, dropped, response, kept, values[c]))
        still = [c for c in active if values[c] <= threshold and drawn[c] < max_samples]
        bar.update(len(active) - len(still))
        active = still
    bar.close()
    return [ThresholdResult(
        responses=sets[c], start_diversity=start_values[c], end_diversity=values[c], samples_drawn=drawn[c],
        reached=values[c] > threshold, start_responses=starts[c], steps=steps[c],
        start_set=cache.set_result(starts[c]) if cache is not None else None,
        end_set=cache.set_result(sets[c]) if cache is not None else None) for c in range(len(contexts))]


def diversity_threshold_generate(
        adapter: ResponseGenerator, context: Context, scorer: PairScorer | None = None, n: int = 5,
        threshold: float = 10, max_samples: int = 20, top_p: float = 0.9, metric: Metric = "contradictions",
        seed: int = 0, show_progress: bool = False, **generation_kwargs: Any) -> ThresholdResult:
    """Sample n responses to ``context`` and resample until the set's diversity exceeds ``threshold``.

    ``metric``: "contradictions" (number of contradiction pairs among the n(n-1); the
    paper's default, threshold 10 of 20), "baseline" / "neutral" / "confidence" (NLI
    Diversity), all needing ``scorer``; or any callable ``list[str] -> float``.
    While metric <= threshold and samples_drawn < max_samples: the response absent from
    the best-scoring (n-1)-subset is dropped (ties: the last such position) and one
    response, sampled with nucleus ``top_p`` and a seed derived from ``seed``, takes its
    place. NLI pairs are scored once: after a replacement only pairs with the new response.

    Args:
        adapter: any object with ``generate(contexts, num_return_sequences=, do_sample=, top_p=,
            seed=, **kw)``, e.g. a :class:`~lightning_div.adapters.CausalLMAdapter`.
        context: a string or a list of turns.
        scorer: an :class:`~lightning_div.nli.NLIScorer` (or any object with ``score_pairs``);
            needed by the NLI metrics.
        n: the set size (the paper: 5).
        threshold: stop once the metric exceeds this (the paper: 10 contradictions of 20 pairs).
        max_samples: the most responses drawn per context, the first n included (the paper: 20).
        top_p: nucleus sampling.
        metric: ``"contradictions"``, ``"baseline"``, ``"neutral"``, ``"confidence"`` or a
            callable ``list[str] -> float``.
        seed: round r samples with a seed derived from (seed, r).
        show_progress: a tqdm bar over rounds.
        **generation_kwargs: passed on to ``adapter.generate`` (``max_new_tokens``, ...).

    Returns:
        A :class:`ThresholdResult`.

    Raises:
        ValueError: n < 2, ``max_samples`` < n, a negative seed, an unknown metric, an NLI
            metric without ``scorer``, a metric that returns NaN, or an adapter that returns
            the wrong number of responses.
    """
    return diversity_threshold_generate_many(
        adapter, [context], scorer=scorer, n=n, threshold=threshold, max_samples=max_samples, top_p=top_p,
        metric=metric, seed=seed, show_progress=show_progress, **generation_kwargs)[0]
