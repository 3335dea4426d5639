"""NLI diversity (Stasaski & Hearst, 2022) of a model's sampled response sets, with no trainer.

For each context, sample ``n`` responses and score every ordered pair with an NLI model
(:class:`~lightning_div.nli.scorer.NLIScorer`); optionally run Diversity Threshold Generation.
The Lightning :class:`~lightning_div.callbacks.NLIDiversityMonitor` adapts hooks, keys and
reporting; what it measures is :class:`NLIMeasure`'s.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

from lightning_div._internal.attributes import ReadThrough
from lightning_div._internal.deprecation import merged, regrouped_into, take_deprecated, warn_deprecated
from lightning_div._internal.distributed import distributed_map
from lightning_div.measure.base import Measure
from lightning_div.nli.scorer import ScorerSource
from lightning_div.nli.threshold_settings import ThresholdGeneration
from lightning_div.types import Options

__all__ = ["NLIMeasure", "ThresholdGeneration"]


#: The 0.2 arguments of NLIMeasure and NLIDiversityMonitor now fields of ``threshold_generation=ThresholdGeneration(...)``.
DEPRECATED_THRESHOLD: dict[str, tuple[str, str]] = regrouped_into(
    "threshold_generation",
    "threshold",
    "max_samples",
    threshold_metric="metric",
    threshold_diversity_metric="diversity_metric",
    threshold_rank_by="rank_by",
)


def threshold_generation_from(
    owner: str,
    given: ThresholdGeneration | bool | None,
    fields: Mapping[str, Any],
    stacklevel: int,
    fields_run: bool,
) -> ThresholdGeneration | None:
    """``threshold_generation=`` as 1.0 takes it, from what 0.2 took too (each 0.2 form warns).

    Args:
        owner: the class taking it (named in the warnings and errors).
        given: a :class:`ThresholdGeneration`, None (not run), or 0.2's ``True`` / ``False``.
        fields: the deprecated flat fields already taken (``threshold=``, ``max_samples=`` ...).
        stacklevel: where a warning points (the user's call).
        fields_run: what 0.2's flat fields did without ``threshold_generation=True``: ran with them
            (:class:`NLIMeasure`'s ``measure_threshold``) or nothing (the monitor's).

    Returns:
        The settings it runs with; None: not run.

    Raises:
        TypeError: ``given`` of another type.
        ValueError: a :class:`ThresholdGeneration` together with deprecated fields, or a field out of range.
    """
    if isinstance(given, bool):
        new = "threshold_generation=ThresholdGeneration(...)" if given else "threshold_generation=None"
        warn_deprecated(f"{owner}(threshold_generation={given})", new, stacklevel + 1)
        return merged(owner, "threshold_generation", None, ThresholdGeneration(), fields) if given else None
    if given is not None and not isinstance(given, ThresholdGeneration):
        raise TypeError(f"{owner}: threshold_generation must be a ThresholdGeneration or None, got {given!r}")
    settings = merged(owner, "threshold_generation", given, ThresholdGeneration(), fields)  # both given: an error
    return settings if given is not None or (fields and fields_run) else None


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
        threshold_generation: Diversity Threshold Generation's settings (:class:`ThresholdGeneration`), which
            :meth:`measure_threshold` runs; None: it is not run (0.2 ran the paper's: for one release, with a warning).
        scorer_kwargs: extra NLIScorer arguments when ``scorer`` is a name.
        batch_size: contexts x responses per batch (contexts per batch: ``batch_size // n``).
        seed: Diversity Threshold Generation's sampling seed.
        show_progress: progress bars.
        **deprecated: 0.2's flat ``threshold``, ``max_samples``, ``threshold_metric``,
            ``threshold_diversity_metric``, ``threshold_rank_by`` and ``threshold_generation=True/False``
            (each warns; ``threshold_generation=ThresholdGeneration(...)``).

    Raises:
        ValueError: ``n`` not an integer >= 2, or ``max_samples`` < ``n`` with threshold generation.
    """

    def __init__(
        self,
        scorer: ScorerSource = "roberta-large-mnli",
        n: int = 5,
        top_p: float = 0.9,
        generation_kwargs: Options | None = None,
        threshold_generation: ThresholdGeneration | None = None,
        scorer_kwargs: Options | None = None,
        batch_size: int = 32,
        seed: int = 0,
        show_progress: bool = False,
        **deprecated: Any,
    ) -> None:
        if isinstance(n, bool) or not hasattr(n, "__index__") or n < 2:  # an int or a numpy integer
            raise ValueError(f"n must be an integer >= 2 (NLI Diversity compares pairs of responses), got {n!r}")
        n = operator.index(n)  # a numpy integer: a plain number in the settings
        _, groups = take_deprecated("NLIMeasure", deprecated, regrouped=DEPRECATED_THRESHOLD, stacklevel=5)
        settings = threshold_generation_from(
            "NLIMeasure", threshold_generation, groups.get("threshold_generation", {}), stacklevel=4, fields_run=True
        )
        if settings is not None and settings.max_samples < n:
            raise ValueError(
                f"ThresholdGeneration(max_samples={settings.max_samples}) must be >= n ({n}): it counts the first n samples"
            )
        self.scorer_arg = scorer
        self.scorer_kwargs: dict[str, Any] = dict(scorer_kwargs or {})  # NLIScorer checks them
        self.n, self.top_p = n, top_p
        self.generation_kwargs = dict(generation_kwargs or {})
        #: Diversity Threshold Generation's settings; None: it is not run.
        self.threshold_generation = settings
        self.batch_size, self.seed, self.show_progress = batch_size, seed, show_progress
        self._scorer: Any = None

    @property
    def threshold_in_use(self) -> ThresholdGeneration:
        """The threshold settings :meth:`measure_threshold` runs with (the paper's when none were given)."""
        return self.threshold_generation or ThresholdGeneration()

    # 0.2's flat attributes, readable as they were (the fields of threshold_in_use)
    threshold: ReadThrough[float] = ReadThrough("threshold_in_use.threshold", "``ThresholdGeneration.threshold``.")
    max_samples: ReadThrough[int] = ReadThrough("threshold_in_use.max_samples", "``ThresholdGeneration.max_samples``.")
    threshold_metric: ReadThrough[str] = ReadThrough("threshold_in_use.metric", "``ThresholdGeneration.metric``.")
    threshold_diversity_metric: ReadThrough[str | None] = ReadThrough(
        "threshold_in_use.diversity_metric", "``ThresholdGeneration.diversity_metric``."
    )
    threshold_rank_by: ReadThrough[str] = ReadThrough("threshold_in_use.rank_by", "``ThresholdGeneration.rank_by``.")

    def settings(self) -> dict[str, Any]:
        """The settings as 0.2 recorded them (the threshold's flat, ``threshold_generation`` a flag), so records compare."""
        recorded = super().settings()
        threshold = self.threshold_in_use
        flat = {
            "threshold": threshold.threshold,
            "max_samples": threshold.max_samples,
            "threshold_metric": threshold.metric,
            "threshold_diversity_metric": threshold.diversity_metric,
            "threshold_rank_by": threshold.rank_by,
            "threshold_generation": self.threshold_generation is not None,
        }
        head = {k: recorded[k] for k in ("scorer", "n", "top_p", "generation_kwargs")}
        return head | flat | {k: v for k, v in recorded.items() if k not in head and k != "threshold_generation"}

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

        threshold = self.threshold_generation
        if threshold is None:  # 0.2 ran the paper's settings: still, for one release
            warn_deprecated(
                "NLIMeasure.measure_threshold() without threshold_generation=",
                "NLIMeasure(threshold_generation=ThresholdGeneration())",
            )
            threshold = self.threshold_in_use
        scorer = self.scorer
        turns, key, per_batch, sampling = self._plan(contexts)

        def dtg(batch: list[list[str]]) -> list[dict[str, float]]:
            results = diversity_threshold_generate_many(
                adapter,
                batch,
                scorer,
                n=self.n,
                top_p=self.top_p,
                seed=self.seed,
                show_progress=False,
                **threshold.arguments(),
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
