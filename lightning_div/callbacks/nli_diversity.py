"""NLIDiversityMonitor: NLI Diversity (Stasaski & Hearst, 2022) of sampled response sets at validation epoch end."""

from __future__ import annotations

from typing import Any

from lightning_div._internal.checks import check_finite_model
from lightning_div._internal.lightning import pl
from lightning_div.callbacks.base import ValidationMonitor, override
from lightning_div.callbacks.checks import optional_part
from lightning_div.callbacks.parts import init_depth, take_own
from lightning_div.keys import val_key
from lightning_div.measure.nli import DEPRECATED_THRESHOLD, NLIMeasure, ThresholdGeneration, threshold_generation_from
from lightning_div.nli.scorer import ScorerSource
from lightning_div.pairs import DialoguePair
from lightning_div.types import Options, PairsSource


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
        fields = groups.get("threshold_generation", {})
        settings = threshold_generation_from(
            type(self).__name__, threshold_generation, fields, stacklevel=2 + init_depth(self), fields_run=False
        )
        super().__init__(**kwargs)
        #: What it measures (:mod:`lightning_div.measure.nli`); this callback adds hooks, keys and reporting.
        self.nli = NLIMeasure(
            scorer=scorer,
            n=n,
            top_p=top_p,
            generation_kwargs=dict(self.generation.options),
            threshold_generation=settings,
            scorer_kwargs=scorer_kwargs,
            batch_size=self.batch_size,
            seed=self.seed,
            show_progress=self.show_progress,
        )
        self.scorer_arg = scorer
        self.num_contexts = num_contexts
        #: Diversity Threshold Generation's settings; None: it is not run.
        self.threshold_generation = settings
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
