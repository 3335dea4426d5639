"""NLIDiversityMonitor: NLI Diversity (Stasaski & Hearst, 2022) of sampled response sets at validation epoch end."""

from __future__ import annotations

from typing import Any

from lightning_div._internal.checks import check_finite_model
from lightning_div._internal.distributed import distributed_map
from lightning_div._internal.lightning import pl
from lightning_div.callbacks.base import ValidationMonitor, override
from lightning_div.callbacks.guards import optional_part, settings_changed
from lightning_div.keys import val_key
from lightning_div.model.adapters import DialogueModelAdapter
from lightning_div.nli.scorer import ScorerSource
from lightning_div.pairs import DialoguePair
from lightning_div.types import Options, PairsSource


class NLIDiversityMonitor(ValidationMonitor):
    """For a fixed sample of validation contexts, sample ``n`` responses each and score every ordered pair with NLI.

    Logs the mean over contexts of ``val/nli_div_baseline``, ``val/nli_div_neutral``,
    ``val/nli_div_confidence`` and the per-class pair counts ``val/nli_pairs_entailment``
    / ``_neutral`` / ``_contradiction``. With ``threshold_generation=True`` it also runs
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
        generation_kwargs: extra sampling arguments (temperature, ...).
        threshold_generation: also run Diversity Threshold Generation.
        threshold: its threshold (the paper: more than 10 contradictions of 20 pairs).
        max_samples: its budget of sampled responses per context (the paper: 20).
        threshold_metric: the metric the threshold applies to, which decides when to stop (see
            :func:`~lightning_div.nli.threshold.diversity_threshold_generate`).
        threshold_diversity_metric: the metric that ranks the (n-1)-subsets and reports start /
            end diversity; None = the paper's (Baseline NLI Diversity for an NLI threshold metric).
        threshold_rank_by: "diversity" (the paper) or "threshold" (rank the subsets by the
            threshold metric).
        val_pairs: explicit evaluation data; default: the datamodule's ``val_pairs()``.
        scorer_kwargs: extra NLIScorer arguments when ``scorer`` is a name.
        **kwargs: the common arguments of :class:`~lightning_div.callbacks.base.DiversityCallback`.
    """

    kind = "nli_diversity"

    def __init__(
        self,
        scorer: ScorerSource = "roberta-large-mnli",
        num_contexts: int | None = 64,
        n: int = 5,
        top_p: float = 0.9,
        generation_kwargs: Options | None = None,
        threshold_generation: bool = False,
        threshold: float = 10,
        max_samples: int = 20,
        threshold_metric: str = "contradictions",
        threshold_diversity_metric: str | None = None,
        threshold_rank_by: str = "diversity",
        val_pairs: PairsSource | None = None,
        scorer_kwargs: Options | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if n < 2:
            raise ValueError(f"n must be >= 2 (NLI Diversity compares pairs of responses), got {n}")
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
        self.num_contexts = num_contexts
        self.n = n
        self.top_p = top_p
        self.generation_kwargs = dict(generation_kwargs or {})
        self.threshold_generation = threshold_generation
        self.threshold = threshold
        self.max_samples = max_samples
        self.threshold_metric = threshold_metric
        self.threshold_diversity_metric = threshold_diversity_metric
        self.threshold_rank_by = threshold_rank_by
        self.val_pairs_arg = val_pairs
        self._scorer: Any = None

    def scorer(self, pl_module: pl.LightningModule) -> Any:
        if self._scorer is None:
            if isinstance(self.scorer_arg, str):
                from lightning_div.nli.scorer import NLIScorer

                kw = {"show_progress": False, "batch_size": self.batch_size, **self.scorer_kwargs}
                self._scorer = NLIScorer(self.scorer_arg, device=pl_module.device, **kw)
            else:
                self._scorer = self.scorer_arg
        return self._scorer

    def sample(self, trainer: pl.Trainer) -> list[DialoguePair]:
        return self.fixed_sample(trainer, "val", self.val_pairs_arg, "val_pairs", self.num_contexts, self.seed)

    def required_inputs(self) -> list[tuple[str, Any, str]]:
        return [("val_pairs", self.val_pairs_arg, "val_pairs")]

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_fit_start(trainer, pl_module)
        self.sample(trainer)  # missing data is a configuration error: report it now

    def measure_validation(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        from lightning_div.model.generation import generate_sets
        from lightning_div.nli.scorer import mean_set_stats

        with self.measuring(trainer, pl_module, "NLI diversity") as m:
            adapter, scorer = self.adapter(pl_module), self.scorer(pl_module)
            check_finite_model(pl_module, type(self).__name__, adapter)
            contexts = [list(p.context) for p in self.sample(trainer)]
            key = [sum(map(len, c)) for c in contexts]
            per_batch = max(1, self.batch_size // self.n)  # the adapter batches contexts x n sequences
            sampling = {"top_p": self.top_p, "show_progress": False, **self.generation_kwargs}

            def score(batch: list[list[str]]) -> list[dict[str, float]]:
                sets = generate_sets(adapter, batch, self.n, **sampling)
                return [r.stats() for r in scorer.score_sets(sets, show_progress=False)]

            rows = distributed_map(
                score,
                contexts,
                per_batch,
                sort_key=key,
                show_progress=self.show_progress,
                desc=f"NLI diversity ({len(contexts)} contexts x {self.n})",
            )
            m.update({val_key(k): v for k, v in mean_set_stats(rows).items()})
            if self.threshold_generation:
                with optional_part(self, trainer, "Diversity Threshold Generation"):  # NLI values are kept
                    self._threshold_generation(m, adapter, scorer, contexts, key, per_batch, sampling)

    def _threshold_generation(
        self,
        m: dict[str, float],
        adapter: DialogueModelAdapter,
        scorer: Any,
        contexts: list[list[str]],
        key: list[int],
        per_batch: int,
        sampling: dict[str, Any],
    ) -> None:
        from lightning_div.nli.threshold import diversity_threshold_generate_many, threshold_stats

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
            contexts,
            per_batch,
            sort_key=key,
            show_progress=self.show_progress,
            desc="Diversity Threshold Generation",
        )
        m.update({val_key(k): v for k, v in threshold_stats(rows).items()})

    def state_key_args(self) -> dict[str, Any]:
        from lightning_div.semantic.space import describe

        return {**super().state_key_args(), "scorer": describe(self.scorer_arg)}

    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "indices": self.sample_state().get("val"),
            "settings": {"num_contexts": self.num_contexts, "seed": self.seed},
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.forget_samples()
        current = {"num_contexts": self.num_contexts, "seed": self.seed}
        if not settings_changed(self, state_dict.get("settings"), current, "the validation sample is drawn again"):
            self.load_sample_state(state_dict.get("indices"))
