"""NLIDiversityMonitor: NLI Diversity (Stasaski & Hearst, 2022) of sampled response sets at validation epoch end."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lightning_div._internal.checks import check_finite_model
from lightning_div._internal.deprecation import regrouped_into, warn_deprecated
from lightning_div._internal.lightning import pl
from lightning_div.callbacks.base import ValidationMonitor, override
from lightning_div.callbacks.checks import optional_part
from lightning_div.callbacks.parts import init_depth, merged, take_own
from lightning_div.keys import val_key
from lightning_div.measure.nli import NLIMeasure
from lightning_div.nli.scorer import ScorerSource
from lightning_div.pairs import DialoguePair
from lightning_div.types import Options, PairsSource


@dataclass(frozen=True)
class ThresholdGeneration:
    """Diversity Threshold Generation (Stasaski & Hearst, 2022): resample a context's responses until they are diverse enough.

    Attributes:
        threshold: the threshold (the paper: more than 10 contradictions of 20 pairs).
        max_samples: the budget of sampled responses per context (the paper: 20).
        metric: the metric the threshold applies to, which decides when to stop (see
            :func:`~lightning_div.nli.threshold.diversity_threshold_generate`).
        diversity_metric: the metric that ranks the (n-1)-subsets and reports start / end diversity;
            None = the paper's (Baseline NLI Diversity for an NLI threshold metric).
        rank_by: ``"diversity"`` (the paper) or ``"threshold"`` (rank the subsets by the threshold metric).

    The values are checked by :class:`~lightning_div.measure.nli.NLIMeasure`, which uses them.
    """

    threshold: float = 10
    max_samples: int = 20
    metric: str = "contradictions"
    diversity_metric: str | None = None
    rank_by: str = "diversity"


#: The 0.2 arguments of NLIDiversityMonitor now fields of ``threshold_generation=ThresholdGeneration(...)``.
DEPRECATED_THRESHOLD: dict[str, tuple[str, str]] = regrouped_into(
    "threshold_generation",
    "threshold",
    "max_samples",
    threshold_metric="metric",
    threshold_diversity_metric="diversity_metric",
    threshold_rank_by="rank_by",
)


class NLIDiversityMonitor(ValidationMonitor):
    """For a fixed sample of validation contexts, sample ``n`` responses each and score every ordered pair with NLI.

    Logs the mean over contexts of ``val/nli_div_baseline``, ``val/nli_div_neutral``,
    ``val/nli_div_confidence`` and the per-class pair counts ``val/nli_pairs_entailment``
    / ``_neutral`` / ``_contradiction``. With ``threshold_generation`` it also runs
    Diversity Threshold Generation and logs ``val/threshold_start_diversity`` and
    ``val/threshold_end_diversity`` (in Baseline NLI Diversity by default, as the paper's
    Table 4 reports them: comparable with its numbers, and possibly negative),
    ``val/threshold_start_criterion`` and ``val/threshold_end_criterion`` (the threshold
    metric, by default the number of contradiction pairs), ``val/threshold_samples_drawn``
    and ``val/threshold_reached``. Generation and NLI scoring are sharded by batch across
    processes, so values are identical on 1 and N processes.

    Args:
        scorer: an :class:`~lightning_div.nli.scorer.NLIScorer` or a model name/path (default roberta-large-mnli).
        num_contexts: size of the fixed validation sample (None = all).
        n: responses per context (the paper: 5, so 20 ordered pairs).
        top_p: nucleus sampling of the response sets (the paper: 0.9).
        threshold_generation: also run Diversity Threshold Generation with these settings
            (:class:`ThresholdGeneration`); None: not.
        val_pairs: explicit evaluation data; default: the datamodule's ``val_pairs()``.
        scorer_kwargs: extra NLIScorer arguments when ``scorer`` is a name.
        **kwargs: the common arguments of :class:`~lightning_div.callbacks.base.DiversityCallback`
            (``generation.options``: extra sampling arguments, temperature ...), and the 0.2 arguments,
            deprecated: ``threshold_generation=True/False``, ``threshold``, ``max_samples``, ``threshold_metric``,
            ``threshold_diversity_metric``, ``threshold_rank_by`` (``threshold_generation=ThresholdGeneration(...)``).
    """

    kind = "nli_diversity"
    stale_consequence = "the validation sample is drawn again"

    def __init__(
        self,
        scorer: ScorerSource = "roberta-large-mnli",
        num_contexts: int | None = 64,
        n: int = 5,
        top_p: float = 0.9,
        threshold_generation: ThresholdGeneration | None = None,
        val_pairs: PairsSource | None = None,
        scorer_kwargs: Options | None = None,
        **kwargs: Any,
    ) -> None:
        _, groups = take_own(self, kwargs, regrouped=DEPRECATED_THRESHOLD)
        enabled = threshold_generation is not None
        if isinstance(threshold_generation, bool):  # 0.2's threshold_generation=True / False
            new = (
                "threshold_generation=ThresholdGeneration(...)" if threshold_generation else "threshold_generation=None"
            )
            warn_deprecated(
                f"NLIDiversityMonitor(threshold_generation={threshold_generation})", new, 2 + init_depth(self)
            )
            enabled, threshold_generation = threshold_generation, None
        super().__init__(**kwargs)
        # the settings are kept (and recorded) also when it is off, as 0.2 kept the flat ones
        settings = merged(
            type(self).__name__,
            "threshold_generation",
            threshold_generation,
            ThresholdGeneration(),
            groups.get("threshold_generation", {}),
        )
        #: What it measures (:mod:`lightning_div.measure.nli`); this callback adds hooks, keys and reporting.
        self.nli = NLIMeasure(
            scorer=scorer,
            n=n,
            top_p=top_p,
            generation_kwargs=dict(self.generation.options),
            threshold=settings.threshold,
            max_samples=settings.max_samples,
            threshold_metric=settings.metric,
            threshold_diversity_metric=settings.diversity_metric,
            threshold_rank_by=settings.rank_by,
            threshold_generation=enabled,
            scorer_kwargs=scorer_kwargs,
            batch_size=self.batch_size,
            seed=self.seed,
            show_progress=self.show_progress,
        )
        self.scorer_arg = scorer
        self.num_contexts = num_contexts
        #: Diversity Threshold Generation's settings; None: it is not run.
        self.threshold_generation = settings if enabled else None
        self.val_pairs_arg = val_pairs

    def scorer(self, pl_module: pl.LightningModule) -> Any:
        """The NLI scorer, loaded on the module's device at the first call."""
        self.nli.prepare(pl_module.device)
        return self.nli.scorer

    def sample(self, trainer: pl.Trainer) -> list[DialoguePair]:
        return self.fixed_sample(trainer, "val", self.val_pairs_arg, "val_pairs", self.num_contexts, self.seed)

    def required_inputs(self) -> list[tuple[str, Any, str]]:
        return [("val_pairs", self.val_pairs_arg, "val_pairs")]

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_fit_start(trainer, pl_module)
        self.sample(trainer)  # missing data is a configuration error: report it now

    def measure_validation(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        with self.measuring(trainer, pl_module, "NLI diversity") as m:
            adapter = self.adapter(pl_module)
            self.nli.prepare(pl_module.device)
            check_finite_model(pl_module, type(self).__name__, adapter)
            contexts = [list(p.context) for p in self.sample(trainer)]
            m.update({val_key(k): v for k, v in self.nli.measure(adapter, contexts).items()})
            if self.threshold_generation is not None:
                with optional_part(self, trainer, "Diversity Threshold Generation"):  # NLI values are kept
                    m.update({val_key(k): v for k, v in self.nli.measure_threshold(adapter, contexts).items()})

    def measures(self) -> list[Any]:
        return [self.nli]

    def settings(self) -> dict[str, Any]:
        """What the checkpointed sample depends on: a change makes it stale on resume."""
        return {"num_contexts": self.num_contexts, "seed": self.seed}

    def state_key_args(self) -> dict[str, Any]:
        from lightning_div.semantic.space import describe

        return {**super().state_key_args(), "scorer": describe(self.scorer_arg)}

    def state_parts(self) -> dict[str, Any]:
        return {}  # the sample alone: the measure keeps nothing between measurements
