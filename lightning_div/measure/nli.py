"""NLI diversity (Stasaski & Hearst, 2022) of a model's sampled response sets, with no trainer.

For each context, sample ``n`` responses and score every ordered pair with an NLI model
(:class:`~lightning_div.nli.scorer.NLIScorer`); optionally run Diversity Threshold Generation.
The Lightning :class:`~lightning_div.callbacks.NLIDiversityMonitor` adapts hooks, keys and
reporting; what it measures is :class:`NLIMeasure`'s.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from lightning_div._internal.distributed import distributed_map
from lightning_div.measure.base import Measure
from lightning_div.nli.scorer import ScorerSource
from lightning_div.types import Options

__all__ = ["NLIMeasure"]


class NLIMeasure(Measure):
    """NLI diversity of ``n`` sampled responses per context, and optionally Diversity Threshold Generation.

    :meth:`prepare` loads the scorer (once), :meth:`measure` gives ``nli_div_baseline``,
    ``nli_div_neutral``, ``nli_div_confidence`` and the per-class pair counts (means over the
    contexts), :meth:`measure_threshold` Diversity Threshold Generation's ``threshold_*`` values.
    Generation and scoring are sharded by batch across the processes: values are identical on
    1 and N processes. It keeps no state between measurements.

    Args:
        scorer: an :class:`~lightning_div.nli.scorer.NLIScorer` or a model name/path.
        n: responses per context (the paper: 5, so 20 ordered pairs).
        top_p: nucleus sampling of the response sets (the paper: 0.9).
        generation_kwargs: extra sampling arguments (temperature, ...).
        threshold: Diversity Threshold Generation's threshold.
        max_samples: its budget of sampled responses per context (checked only with ``threshold_generation``).
        threshold_metric: the metric the threshold applies to.
        threshold_diversity_metric: the metric that ranks the (n-1)-subsets; None = the paper's.
        threshold_rank_by: ``"diversity"`` (the paper) or ``"threshold"``.
        threshold_generation: whether Diversity Threshold Generation is run (checks ``max_samples``).
        scorer_kwargs: extra NLIScorer arguments when ``scorer`` is a name.
        batch_size: contexts x responses per batch (contexts per batch: ``batch_size // n``).
        seed: Diversity Threshold Generation's sampling seed.
        show_progress: progress bars.

    Raises:
        ValueError: ``n`` not an integer >= 2, an unknown metric or ranking, or ``max_samples`` < ``n`` with threshold generation.
    """

    def __init__(
        self,
        scorer: ScorerSource = "roberta-large-mnli",
        n: int = 5,
        top_p: float = 0.9,
        generation_kwargs: Options | None = None,
        threshold: float = 10,
        max_samples: int = 20,
        threshold_metric: str = "contradictions",
        threshold_diversity_metric: str | None = None,
        threshold_rank_by: str = "diversity",
        threshold_generation: bool = False,
        scorer_kwargs: Options | None = None,
        batch_size: int = 32,
        seed: int = 0,
        show_progress: bool = False,
    ) -> None:
        if isinstance(n, bool) or not hasattr(n, "__index__") or n < 2:  # an int or a numpy integer
            raise ValueError(f"n must be an integer >= 2 (NLI Diversity compares pairs of responses), got {n!r}")
        n = operator.index(n)  # a numpy integer: a plain number in the settings
        from lightning_div.nli.threshold import NLI_METRICS, RANK_BY

        for arg, value in (
            ("threshold_metric", threshold_metric),
            ("threshold_diversity_metric", threshold_diversity_metric),
        ):
            if value is not None and value not in NLI_METRICS:
                raise ValueError(f"{arg}={value!r} is unknown; use one of {NLI_METRICS}")
        if threshold_rank_by not in RANK_BY:
            raise ValueError(f"threshold_rank_by={threshold_rank_by!r} is unknown; use one of {RANK_BY}")
        if threshold_generation and max_samples < n:
            raise ValueError(f"max_samples ({max_samples}) must be >= n ({n}): it counts the first n samples")
        self.scorer_arg = scorer
        self.scorer_kwargs: dict[str, Any] = dict(scorer_kwargs or {})  # NLIScorer checks them
        self.n, self.top_p = n, top_p
        self.generation_kwargs = dict(generation_kwargs or {})
        self.threshold, self.max_samples = threshold, max_samples
        self.threshold_metric = threshold_metric
        self.threshold_diversity_metric = threshold_diversity_metric
        self.threshold_rank_by = threshold_rank_by
        self.threshold_generation = threshold_generation
        self.batch_size, self.seed, self.show_progress = batch_size, seed, show_progress
        self._scorer: Any = None

    def prepare(self, device: Any = None) -> None:
        """Load the scorer when it was given by name (once; ``device`` is where it runs)."""
        if self._scorer is None:
            if isinstance(self.scorer_arg, str):
                from lightning_div.nli.scorer import NLIScorer

                kw = {"show_progress": False, "batch_size": self.batch_size, **self.scorer_kwargs}
                self._scorer = NLIScorer(self.scorer_arg, device=device, **kw)
            else:
                self._scorer = self.scorer_arg

    @property
    def scorer(self) -> Any:
        """The NLI scorer (:meth:`prepare` first)."""
        if self._scorer is None:
            raise ValueError("NLIMeasure.prepare() must load the scorer before a measurement")
        return self._scorer

    def _plan(self, contexts: Sequence[Sequence[str]]) -> tuple[list[list[str]], list[int], int, dict[str, Any]]:
        """The contexts as lists, their length key, contexts per batch, and the sampling arguments."""
        turns = [list(c) for c in contexts]
        per_batch = max(1, self.batch_size // self.n)  # the adapter batches contexts x n sequences
        sampling = {"top_p": self.top_p, "show_progress": False, **self.generation_kwargs}
        return turns, [sum(map(len, c)) for c in turns], per_batch, sampling

    def measure(self, adapter: Any, contexts: Sequence[Sequence[str]]) -> dict[str, float]:
        """NLI diversity of ``n`` sampled responses per context, averaged over the contexts (every process must call it).

        Args:
            adapter: the model (a :class:`~lightning_div.model.adapters.DialogueModelAdapter`).
            contexts: the contexts, each a list of turns.

        Returns:
            ``nli_div_baseline``, ``nli_div_neutral``, ``nli_div_confidence``, ``nli_pairs_<class>`` (unprefixed).
        """
        from lightning_div.model.generation import generate_sets
        from lightning_div.nli.scorer import mean_set_stats

        scorer = self.scorer
        turns, key, per_batch, sampling = self._plan(contexts)

        def score(batch: list[list[str]]) -> list[dict[str, float]]:
            sets = generate_sets(adapter, batch, self.n, **sampling)
            return [r.stats() for r in scorer.score_sets(sets, show_progress=False)]

        rows = distributed_map(
            score,
            turns,
            per_batch,
            sort_key=key,
            show_progress=self.show_progress,
            desc=f"NLI diversity ({len(turns)} contexts x {self.n})",
        )
        return dict(mean_set_stats(rows))

    def measure_threshold(self, adapter: Any, contexts: Sequence[Sequence[str]]) -> dict[str, float]:
        """Diversity Threshold Generation's ``threshold_*`` values over the contexts (every process must call it)."""
        from lightning_div.nli.threshold import diversity_threshold_generate_many, threshold_stats

        scorer = self.scorer
        turns, key, per_batch, sampling = self._plan(contexts)

        def dtg(batch: list[list[str]]) -> list[dict[str, float]]:
            results = diversity_threshold_generate_many(
                adapter,
                batch,
                scorer,
                n=self.n,
                threshold=self.threshold,
                max_samples=self.max_samples,
                top_p=self.top_p,
                metric=self.threshold_metric,
                seed=self.seed,
                show_progress=False,
                diversity_metric=self.threshold_diversity_metric,
                rank_by=self.threshold_rank_by,
                **{k: v for k, v in sampling.items() if k not in ("top_p", "show_progress")},
            )
            return [r.stats() for r in results]

        rows = distributed_map(
            dtg,
            turns,
            per_batch,
            sort_key=key,
            show_progress=self.show_progress,
            desc="Diversity Threshold Generation",
        )
        return dict(threshold_stats(rows))
