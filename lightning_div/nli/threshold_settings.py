"""Diversity Threshold Generation's settings, as one object (``threshold_generation=ThresholdGeneration(...)``).

Held by :class:`~lightning_div.measure.nli.NLIMeasure` and given to it by
:class:`~lightning_div.callbacks.NLIDiversityMonitor`; the procedure is
:func:`~lightning_div.nli.threshold.diversity_threshold_generate_many`, whose keyword arguments the
fields are (:meth:`ThresholdGeneration.arguments`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from lightning_div._internal.counts import check_required_count
from lightning_div.nli.threshold import NLI_METRICS, RANK_BY

__all__ = ["ThresholdGeneration"]


@dataclass(frozen=True)
class ThresholdGeneration:
    """Diversity Threshold Generation (Stasaski & Hearst, 2022): resample a context's responses until they are diverse enough.

    Attributes:
        threshold: the threshold (the paper: more than 10 contradictions of 20 pairs).
        max_samples: the budget of sampled responses per context (the paper: 20); at least the set's size ``n``,
            which the measure checks.
        metric: the metric the threshold applies to, which decides when to stop (see
            :func:`~lightning_div.nli.threshold.diversity_threshold_generate`).
        diversity_metric: the metric that ranks the (n-1)-subsets and reports start / end diversity;
            None = the paper's (Baseline NLI Diversity for an NLI threshold metric).
        rank_by: ``"diversity"`` (the paper) or ``"threshold"`` (rank the subsets by the threshold metric).

    Raises:
        ValueError: an unknown metric or ranking, or a ``max_samples`` that is not a positive integer.
    """

    threshold: float = 10
    max_samples: int = 20
    metric: str = "contradictions"
    diversity_metric: str | None = None
    rank_by: str = "diversity"

    def __post_init__(self) -> None:
        for field, value in (("metric", self.metric), ("diversity_metric", self.diversity_metric)):
            if value is not None and value not in NLI_METRICS:
                raise ValueError(f"ThresholdGeneration({field}={value!r}) is unknown; use one of {NLI_METRICS}")
        if self.rank_by not in RANK_BY:
            raise ValueError(f"ThresholdGeneration(rank_by={self.rank_by!r}) is unknown; use one of {RANK_BY}")
        # a plain int in the run's record, a numpy integer too
        object.__setattr__(
            self, "max_samples", check_required_count("ThresholdGeneration.max_samples", self.max_samples)
        )

    def arguments(self) -> dict[str, Any]:
        """The fields as :func:`~lightning_div.nli.threshold.diversity_threshold_generate_many`'s keyword arguments."""
        return dataclasses.asdict(self)
