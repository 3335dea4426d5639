"""Diversity Threshold Generation (Stasaski & Hearst, 2022, section 5).

Sample n responses; while the set's *threshold metric* is <= the threshold and fewer than
``max_samples`` responses have been drawn, drop the response absent from the
best-scoring (n-1)-subset and sample one replacement. Two metrics are involved, as in
the paper: the threshold metric only decides when to stop (the number of contradiction
pairs, "> 10 of 20"); the *diversity metric* ranks the (n-1)-subsets and is what the
start and end diversity are reported in (Baseline NLI Diversity, the paper's Table 4,
whose values can be negative). With a lexical or embedding threshold metric (averaged
distinct, :class:`NegativeMeanCosine`, any ``list[str] -> float``) the paper uses that
same metric for all three. ``rank_by="threshold"`` ranks the subsets by the threshold
metric instead; both metrics are always reported.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Union

import numpy as np
from tqdm.auto import tqdm

from lightning_div._internal.bars import bar_disabled
from lightning_div.metrics.nli import LABELS, VARIANTS, checked_labels, nli_diversity
from lightning_div.metrics.sets import SetMetric
from lightning_div.model.formatting import Context
from lightning_div.model.generation import SAMPLING_DEFAULTS
from lightning_div.nli.scorer import PairScorer, SetResult, ordered_pairs

Metric = Union[str, SetMetric]
NLI_METRICS = ("contradictions",) + VARIANTS
# Keys of threshold_stats(): what a monitor logs after running the procedure.
# ``*_diversity``: the diversity metric (Baseline NLI Diversity by default); ``*_criterion``: the threshold metric.
THRESHOLD_STAT_KEYS = (
    "threshold_start_diversity",
    "threshold_end_diversity",
    "threshold_start_criterion",
    "threshold_end_criterion",
    "threshold_samples_drawn",
    "threshold_reached",
)
RANK_BY = ("diversity", "threshold")


class ResponseGenerator(Protocol):
    """The part of :class:`lightning_div.model.adapters.DialogueModelAdapter` this module uses."""

    def generate(self, contexts: Sequence[Context], **generation_kwargs: Any) -> list[str]:
        """``len(contexts) * num_return_sequences`` responses, grouped by context."""
        ...


@dataclass(frozen=True)
class ThresholdStep:
    """One resampling step: ``dropped`` (at ``index``) left, ``replacement`` took its place."""

    index: int
    dropped: str
    replacement: str
    subset_diversity: float  # ranking metric of the kept n-1 responses (the best subset)
    diversity: float  # diversity metric of the set after the replacement
    criterion: float  # threshold metric of the set after the replacement


@dataclass(frozen=True)
class ThresholdResult:
    """Outcome of Diversity Threshold Generation for one context.

    ``start_diversity`` / ``end_diversity`` are in the diversity metric (Baseline NLI
    Diversity for an NLI threshold metric, as the paper reports them), ``start_criterion``
    / ``end_criterion`` in the threshold metric (e.g. the number of contradiction pairs).
    ``samples_drawn`` counts every sampled response, the initial n included;
    ``reached`` is ``end_criterion > threshold``. When an NLI metric is involved
    ``start_set`` / ``end_set`` hold the pair predictions of the first and final sets (so
    all NLI Diversity variants and pair counts can be reported at no extra cost).
    """

    responses: list[str]
    start_diversity: float
    end_diversity: float
    samples_drawn: int
    reached: bool
    start_responses: list[str]
    steps: list[ThresholdStep]
    start_criterion: float
    end_criterion: float
    start_set: SetResult | None = None
    end_set: SetResult | None = None

    def stats(self) -> dict[str, float]:
        """The values :func:`threshold_stats` averages, keyed by :data:`THRESHOLD_STAT_KEYS`."""
        values = (
            self.start_diversity,
            self.end_diversity,
            self.start_criterion,
            self.end_criterion,
            float(self.samples_drawn),
            float(self.reached),
        )
        return dict(zip(THRESHOLD_STAT_KEYS, values))


def threshold_stats(results: Sequence[ThresholdResult | Mapping[str, float]]) -> dict[str, float]:
    """Mean over contexts of start / end diversity and criterion, samples drawn and the share that reached the threshold."""
    if not results:
        raise ValueError("threshold_stats needs at least one result")
    rows = [r.stats() if isinstance(r, ThresholdResult) else r for r in results]
    return {key: float(np.mean([row[key] for row in rows])) for key in THRESHOLD_STAT_KEYS}


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
        labels = checked_labels(labels, len(pairs))
        probs = np.asarray(probs, dtype=np.float64)
        if probs.shape != (len(pairs), 3):
            raise ValueError(
                f"scorer.score_pairs returned {len(labels)} labels and probs of shape {probs.shape} "
                f"for {len(pairs)} pairs; expected {len(pairs)} and ({len(pairs)}, 3)"
            )
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


def _check_metric(metric: Metric, scorer: PairScorer | None, arg: str = "metric") -> None:
    if callable(metric):
        return
    if metric not in NLI_METRICS:
        raise ValueError(f"{arg}={metric!r} is unknown; use one of {NLI_METRICS} or a callable list[str] -> float")
    if scorer is None or not callable(getattr(scorer, "score_pairs", None)):
        raise ValueError(
            f"{arg}={metric!r} needs an NLI scorer: pass scorer=NLIScorer() "
            f"(roberta-large-mnli) or any object with score_pairs(premises, hypotheses, show_progress)"
        )


def default_diversity_metric(metric: Metric) -> Metric:
    """The paper's diversity metric for a threshold metric: Baseline NLI Diversity for an NLI one, else itself."""
    return "baseline" if isinstance(metric, str) else metric


def _sample(
    adapter: ResponseGenerator, contexts: list[Context], k: int, seed: int, generation_kwargs: Mapping[str, Any]
) -> list[list[str]]:
    out = adapter.generate(contexts, num_return_sequences=k, seed=seed, **generation_kwargs)
    out = list(out)
    if len(out) != len(contexts) * k:
        raise ValueError(
            f"adapter.generate returned {len(out)} responses for {len(contexts)} context(s) x "
            f"num_return_sequences={k}; expected {len(contexts) * k}"
        )
    for i, r in enumerate(out):
        if not isinstance(r, str):
            raise TypeError(f"adapter.generate returned {type(r).__name__} at position {i}, expected str")
    return [out[c * k : (c + 1) * k] for c in range(len(contexts))]


def _drop_index(subset_scores: Sequence[float]) -> int:
    """Position absent from the best (n-1)-subset; on a tie the LAST such position (earlier draws are kept)."""
    best = max(subset_scores)
    tied = [k for k, v in enumerate(subset_scores) if math.isclose(v, best, rel_tol=1e-12, abs_tol=1e-12)]
    return tied[-1]


def diversity_threshold_generate_many(
    adapter: ResponseGenerator,
    contexts: Sequence[Context],
    scorer: PairScorer | None = None,
    n: int = 5,
    threshold: float = 10,
    max_samples: int = 20,
    top_p: float = 0.9,
    metric: Metric = "contradictions",
    seed: int = 0,
    show_progress: bool = True,
    diversity_metric: Metric | None = None,
    rank_by: str = "diversity",
    **generation_kwargs: Any,
) -> list[ThresholdResult]:
    """Diversity Threshold Generation for many contexts at once (see :func:`diversity_threshold_generate`).

    Each sampling round is one ``adapter.generate`` call for all contexts still below the
    threshold and one NLI call for all their new pairs. Deterministic for a given seed
    and list of contexts (a context's samples depend on which contexts share its rounds).

    Args:
        adapter: as :func:`diversity_threshold_generate`.
        contexts: strings or lists of turns.
        scorer: an :class:`~lightning_div.nli.scorer.NLIScorer` (or any object with ``score_pairs``);
            needed by the NLI metrics.
        n: the set size (the paper: 5).
        threshold: stop once the metric exceeds this (the paper: 10 contradictions of 20 pairs).
        max_samples: the most responses drawn per context, the first n included (the paper: 20).
        top_p: nucleus sampling.
        metric: ``"contradictions"``, ``"baseline"``, ``"neutral"``, ``"confidence"`` or a
            callable ``list[str] -> float``.
        seed: round r samples with a seed derived from (seed, r).
        show_progress: a tqdm bar over rounds.
        diversity_metric: ranks the subsets and reports start / end diversity (None: the paper's).
        rank_by: ``"diversity"`` (the paper) or ``"threshold"``.
        **generation_kwargs: passed on to ``adapter.generate`` (``max_new_tokens``, ...).

    Returns:
        One :class:`ThresholdResult` per context.

    Raises:
        ValueError: as :func:`diversity_threshold_generate`.
    """
    contexts = list(contexts)
    report = _checked_arguments(metric, diversity_metric, scorer, rank_by, n, max_samples, seed, threshold)
    if not contexts:
        return []
    # Plain nucleus sampling, no n-gram blocking (the paper's setting), unless the caller asks.
    generation_kwargs = {**SAMPLING_DEFAULTS, "top_p": top_p, **generation_kwargs}
    measure = _SetMeasures(metric, report, scorer)
    ranking = report if rank_by == "diversity" else metric
    sets = _sample(adapter, contexts, n, derive_seed(seed, 0), generation_kwargs)
    measure.add_sets(sets)
    run = _Run(sets, [measure.values(s) for s in sets], n)
    active = run.below(threshold, max_samples, range(len(contexts)))
    bar = tqdm(total=len(contexts), desc="diversity threshold", unit="context", disable=bar_disabled(show_progress))
    bar.update(len(contexts) - len(active))
    rounds = 0
    while active:
        rounds += 1
        seed_r = derive_seed(seed, rounds)
        steps = _resample(adapter, contexts, run.sets, active, measure, ranking, seed_r, generation_kwargs)
        for c, step in zip(active, steps):
            run.record(c, step)
        still = run.below(threshold, max_samples, active)
        bar.update(len(active) - len(still))
        active = still
    bar.close()
    return [run.result(c, threshold, measure) for c in range(len(contexts))]


class _Run:
    """Where each context's set stands: its responses, (diversity, criterion), samples drawn, steps."""

    def __init__(self, sets: list[list[str]], start_values: list[tuple[float, float]], n: int) -> None:
        self.sets, self.starts = sets, [list(s) for s in sets]
        self.start_values, self.values = start_values, list(start_values)
        self.drawn = [n] * len(sets)
        self.steps: list[list[ThresholdStep]] = [[] for _ in sets]

    def below(self, threshold: float, max_samples: int, among: Iterable[int]) -> list[int]:
        """The contexts of ``among`` whose criterion is still <= ``threshold``, with samples left to draw."""
        return [c for c in among if self.values[c][1] <= threshold and self.drawn[c] < max_samples]

    def record(self, c: int, step: ThresholdStep) -> None:
        """Context ``c`` drew one more response (already in ``sets``): its new values and step."""
        self.drawn[c] += 1
        self.values[c] = (step.diversity, step.criterion)
        self.steps[c].append(step)

    def result(self, c: int, threshold: float, measure: _SetMeasures) -> ThresholdResult:
        """Context ``c``'s outcome."""
        return ThresholdResult(
            responses=self.sets[c],
            start_diversity=self.start_values[c][0],
            end_diversity=self.values[c][0],
            samples_drawn=self.drawn[c],
            reached=self.values[c][1] > threshold,
            start_responses=self.starts[c],
            steps=self.steps[c],
            start_set=measure.set_result(self.starts[c]),
            end_set=measure.set_result(self.sets[c]),
            start_criterion=self.start_values[c][1],
            end_criterion=self.values[c][1],
        )


def _checked_arguments(
    metric: Metric,
    diversity_metric: Metric | None,
    scorer: PairScorer | None,
    rank_by: str,
    n: int,
    max_samples: int,
    seed: int,
    threshold: float,
) -> Metric:
    """The diversity metric (``diversity_metric``, else the paper's for ``metric``), after checking every argument."""
    _check_metric(metric, scorer)
    report = default_diversity_metric(metric) if diversity_metric is None else diversity_metric
    _check_metric(report, scorer, "diversity_metric")
    if rank_by not in RANK_BY:
        raise ValueError(
            f"rank_by={rank_by!r} is unknown; use 'diversity' (rank the subsets by the diversity "
            f"metric, the paper's procedure) or 'threshold' (by the threshold metric)"
        )
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"n must be an integer >= 2 (subsets of n-1 responses are compared), got {n!r}")
    if isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < n:
        raise ValueError(
            f"max_samples must be an integer >= n={n} (it counts the initial n samples), got {max_samples!r}"
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(
            f"seed must be a non-negative integer (each round samples with a seed derived from it), got {seed!r}"
        )
    if not math.isfinite(threshold):
        raise ValueError(f"threshold must be a finite number, got {threshold!r}")
    return report


class _SetMeasures:
    """The threshold metric (``metric``) and the diversity metric (``report``) of response sets.

    NLI metrics read the pair predictions of a :class:`_PairCache` (each pair through the
    scorer once); a callable metric is called on the set and must return a finite value.
    """

    def __init__(self, metric: Metric, report: Metric, scorer: PairScorer | None) -> None:
        self.metric, self.report = metric, report
        nli = not (callable(metric) and callable(report))
        self.cache = _PairCache(scorer) if nli and scorer is not None else None

    def add_sets(self, sets: Sequence[Sequence[str]], only: Sequence[int] | None = None) -> None:
        """Score the new NLI pairs of ``sets`` (see :meth:`_PairCache.add_sets`); nothing without an NLI metric."""
        if self.cache is not None:
            self.cache.add_sets(sets, only)

    def set_result(self, responses: Sequence[str]) -> SetResult | None:
        """The pair predictions of a set, when an NLI metric is involved."""
        return self.cache.set_result(responses) if self.cache is not None else None

    def value(self, responses: Sequence[str], which: Metric) -> float:
        """``which`` (the threshold or the diversity metric) of a set."""
        if not callable(which):
            if self.cache is None:  # an NLI metric needs a scorer; _checked_arguments makes sure there is one
                raise ValueError("an NLI metric needs a scorer")
            return _nli_value(self.cache.set_result(responses), which)
        v = float(which(list(responses)))
        if not math.isfinite(v):
            arg = "metric" if which is self.metric else "diversity_metric"
            raise ValueError(f"{arg} returned {v} for the set {list(responses)!r} ({metric_label(which)})")
        return v

    def values(self, responses: Sequence[str]) -> tuple[float, float]:
        """(diversity, criterion) of a set; one call when both are the same metric."""
        criterion = self.value(responses, self.metric)
        return (criterion if self.report is self.metric else self.value(responses, self.report)), criterion


def _resample(
    adapter: ResponseGenerator,
    contexts: list[Context],
    sets: list[list[str]],
    active: list[int],
    measure: _SetMeasures,
    ranking: Metric,
    seed: int,
    generation_kwargs: Mapping[str, Any],
) -> list[ThresholdStep]:
    """One round for the ``active`` contexts: each set's response absent from its best (n-1)-subset replaced.

    One ``adapter.generate`` call samples every replacement (with ``seed``) and one scorer call
    scores the new pairs; ``sets`` is updated in place. Returns one step per active context.
    """
    drops = []
    for c in active:
        n = len(sets[c])
        subsets = [measure.value(sets[c][:k] + sets[c][k + 1 :], ranking) for k in range(n)]
        k = _drop_index(subsets)
        drops.append((k, subsets[k], sets[c][k]))
    new = _sample(adapter, [contexts[c] for c in active], 1, seed, generation_kwargs)
    for c, (k, _, _), (response,) in zip(active, drops, new):
        sets[c] = sets[c][:k] + [response] + sets[c][k + 1 :]
    measure.add_sets([sets[c] for c in active], only=[k for k, _, _ in drops])
    steps = []
    for c, (k, kept, dropped), (response,) in zip(active, drops, new):
        diversity, criterion = measure.values(sets[c])
        steps.append(ThresholdStep(k, dropped, response, kept, diversity, criterion))
    return steps


def metric_label(metric: Metric) -> str:
    """A metric's name for messages: the NLI name, else the callable's ``name`` / ``__name__``."""
    if isinstance(metric, str):
        return metric
    return str(getattr(metric, "name", None) or getattr(metric, "__name__", None) or type(metric).__name__)


def diversity_threshold_generate(
    adapter: ResponseGenerator,
    context: Context,
    scorer: PairScorer | None = None,
    n: int = 5,
    threshold: float = 10,
    max_samples: int = 20,
    top_p: float = 0.9,
    metric: Metric = "contradictions",
    seed: int = 0,
    show_progress: bool = False,
    diversity_metric: Metric | None = None,
    rank_by: str = "diversity",
    **generation_kwargs: Any,
) -> ThresholdResult:
    """Sample n responses to ``context`` and resample until the set's threshold metric exceeds ``threshold``.

    ``metric`` is the threshold metric: "contradictions" (number of contradiction pairs
    among the n(n-1); the paper's, threshold 10 of 20), "baseline" / "neutral" /
    "confidence" (NLI Diversity), all needing ``scorer``; or any callable
    ``list[str] -> float``. ``diversity_metric`` ranks the (n-1)-subsets and gives the
    reported start / end diversity; by default (None) the paper's: "baseline" (Baseline
    NLI Diversity) for an NLI threshold metric, the threshold metric itself for a callable.
    ``rank_by="threshold"`` ranks the subsets by the threshold metric instead (start / end
    diversity are still reported in the diversity metric, and the criterion in the threshold metric).

    While the threshold metric <= threshold and samples_drawn < max_samples: the response
    absent from the best-ranked (n-1)-subset is dropped (ties: the last such position) and
    one response, sampled with nucleus ``top_p`` (no n-gram blocking unless
    ``generation_kwargs`` ask for it) and a seed derived from ``seed``, takes its place. NLI
    pairs are scored once: after a replacement only pairs with the new response.

    Args:
        adapter: any object with ``generate(contexts, num_return_sequences=, do_sample=, top_p=,
            seed=, **kw)``, e.g. a :class:`~lightning_div.model.adapters.HuggingFaceAdapter`.
        context: a string or a list of turns.
        scorer: an :class:`~lightning_div.nli.scorer.NLIScorer` (or any object with ``score_pairs``);
            needed by the NLI metrics.
        n: the set size (the paper: 5).
        threshold: stop once the threshold metric exceeds this (the paper: 10 contradictions of 20 pairs).
        max_samples: the most responses drawn per context, the first n included (the paper: 20).
        top_p: nucleus sampling.
        metric: the threshold metric: ``"contradictions"``, ``"baseline"``, ``"neutral"``,
            ``"confidence"`` or a callable ``list[str] -> float``.
        seed: round r samples with a seed derived from (seed, r).
        show_progress: a tqdm bar over rounds.
        diversity_metric: ranks the subsets and reports start / end diversity (None: the paper's).
        rank_by: ``"diversity"`` (the paper) or ``"threshold"``.
        **generation_kwargs: passed on to ``adapter.generate`` (``max_new_tokens``, ...).

    Returns:
        A :class:`ThresholdResult`.

    Raises:
        ValueError: n < 2, ``max_samples`` < n, a negative seed, an unknown metric or ``rank_by``,
            an NLI metric without ``scorer``, a metric that returns NaN, or an adapter that returns
            the wrong number of responses.
    """
    return diversity_threshold_generate_many(
        adapter,
        [context],
        scorer=scorer,
        n=n,
        threshold=threshold,
        max_samples=max_samples,
        top_p=top_p,
        metric=metric,
        seed=seed,
        show_progress=show_progress,
        diversity_metric=diversity_metric,
        rank_by=rank_by,
        **generation_kwargs,
    )[0]
