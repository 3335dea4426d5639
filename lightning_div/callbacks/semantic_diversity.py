"""SemanticDiversityMonitor: Sem-Ent and lexical diversity of generated responses at validation epoch end."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from lightning_div._internal.attributes import ReadThrough
from lightning_div._internal.checks import check_finite_model
from lightning_div._internal.deprecation import renamed_value
from lightning_div._internal.lightning import pl
from lightning_div.callbacks.base import ValidationMonitor, override
from lightning_div.callbacks.checks import require_inputs
from lightning_div.callbacks.parts import merged, take_own
from lightning_div.keys import val_key
from lightning_div.measure.reporting import Reporter
from lightning_div.measure.semantic import SemanticMeasure, SemanticResult, check_clusters_source
from lightning_div.pairs import DialoguePair
from lightning_div.reweighting import train_responses_of
from lightning_div.semantic.space import SPACE_ARGUMENTS, SemanticSpace, identity_of, space_from_arguments
from lightning_div.settings import Lexical
from lightning_div.types import PairsSource, ResponsesSource
from lightning_div.views import log_cards_once, log_collapse, log_samples_table

#: The 0.2 arguments the monitor took flat, now fields of ``space=SemanticSpace(...)`` and ``lexical=Lexical(...)``.
DEPRECATED_SPACE_AND_LEXICAL: dict[str, tuple[str, str]] = {
    **{name: ("space", name) for name in SPACE_ARGUMENTS},
    "lexical_metrics": ("lexical", "metrics"),
    "lexical_options": ("lexical", "options"),
    "vocab_size": ("lexical", "vocab_size"),
}


class SemanticDiversityMonitor(ValidationMonitor):
    """Sem-Ent (Han et al., 2022) and lexical diversity of the model's responses on a fixed validation sample.

    It measures in a :class:`~lightning_div.semantic.space.SemanticSpace` (encoder + clusters),
    ``space=``: give one object to several callbacks (a second monitor, :class:`~lightning_div.callbacks.DRESSReweighting`)
    and they share one encoder and one set of clusters, fitted and checkpointed once. At fit start
    the clusters are loaded (the space's ``clusters``: a SemanticClusters or a saved file) or fitted
    on the cluster texts and cached in ``outputs.dirpath``. At
    each measured validation epoch end: generate for the fixed sample (greedy with
    3-gram blocking by default; sharded across processes and gathered), embed, assign
    clusters, and log ``val/sem_ent``, the lexical metrics (``val/distinct_1`` ...
    ``val/ead``), once ``val/sem_ent_gold`` (Sem-Ent of the gold responses of the same
    contexts, to compare with; not a ceiling: that is ln k), how far the generated cluster
    distribution is from the gold one (``val/cluster_js``: Jensen-Shannon divergence in bits,
    in [0, 1]; ``val/top_cluster_share``: share of the most generated cluster), a
    generated-vs-gold cluster histogram labelled with each cluster's top words
    (``val/cluster_histogram``), a heatmap of the generated shares over the measured
    epochs (``val/cluster_shares``, also ``cluster_shares.csv``) and a table of
    ``outputs.log_samples`` example responses with their cluster ids. Once per run, the
    cluster cards (:mod:`lightning_div.semantic.cards`) as the table ``clusters/cards``
    and ``cluster_cards.csv``.

    Args:
        space: the semantic space to measure in; None: ``SemanticSpace()`` (all-MiniLM-L6-v2, the
            paper's k = 20, 90 % PCA variance, k-means seed 27) of this monitor's own. From LightningCLI:
            ``class_path: lightning_div.SemanticSpace`` with ``init_args``.
        val_pairs: explicit evaluation data; default: the datamodule's ``val_pairs()``.
        cluster_texts: the texts the clusters are fitted on; default: the datamodule's ``train_responses()``.
        num_contexts: size of the fixed validation sample (None = all).
        lexical: the lexical metrics beside Sem-Ent, their options and EAD's V
            (:class:`~lightning_div.settings.Lexical`; None: its defaults). The Sem-Ent paper's Ent-n /
            Dist-n: ``Lexical(options={"tokenizer": "casual", "base": 2})``.
        **kwargs: the common arguments of :class:`~lightning_div.callbacks.base.DiversityCallback`
            (``generation.options`` override the greedy + ``no_repeat_ngram_size=3`` default; ``outputs``
            has ``log_samples`` and ``cluster_views``), and the 0.2 arguments, deprecated: ``encoder``,
            ``clusters``, ``num_clusters``, ``variance_kept``, ``kmeans_seed``, ``encoder_kwargs`` (build the
            space as before: use ``space=SemanticSpace(...)``), ``gold_responses`` (``cluster_texts``),
            ``lexical_metrics``, ``lexical_options``, ``vocab_size`` (``lexical=``).

    Raises:
        ValueError: ``space`` together with a deprecated space argument, or unknown lexical options.
    """

    kind = "semantic_diversity"
    stale_consequence = "the clusters and the validation sample are made again under the new settings"

    def __init__(
        self,
        space: SemanticSpace | None = None,
        val_pairs: PairsSource | None = None,
        cluster_texts: ResponsesSource | None = None,
        num_contexts: int | None = 256,
        lexical: Lexical | None = None,
        **kwargs: Any,
    ) -> None:
        renamed, groups = take_own(self, kwargs, {"gold_responses": "cluster_texts"}, DEPRECATED_SPACE_AND_LEXICAL)
        super().__init__(**kwargs)
        cluster_texts = renamed_value(
            type(self).__name__, "gold_responses", "cluster_texts", cluster_texts, None, renamed
        )
        lexical = merged(type(self).__name__, "lexical", lexical, Lexical(), groups.get("lexical", {}))
        space = space_from_arguments(
            type(self).__name__,
            space,
            **groups.get("space", {}),
            batch_size=self.batch_size,
            show_progress=self.show_progress,
        )
        #: The measurement (:class:`~lightning_div.measure.semantic.SemanticMeasure`): its space, metrics and state.
        self.measure = SemanticMeasure(
            space,
            lexical.metrics,
            dict(lexical.options),  # the metric functions check them
            lexical.vocab_size,
            dict(self.generation.options),
            self.batch_size,
            self.show_progress,
        )
        self.num_contexts = num_contexts
        self.val_pairs_arg = val_pairs
        self.cluster_texts_arg = cluster_texts
        #: The responses of the last measurement, in the sample's order.
        self.last_responses: list[str] = []

    log_samples: ReadThrough[int] = ReadThrough("outputs.log_samples", "Example responses in the table.")

    @property
    def cluster_views(self) -> bool:
        """Whether the cards, heatmap and ``cluster_shares.csv`` are written (``outputs.cluster_views``)."""
        return self.outputs.cluster_views

    @cluster_views.setter
    def cluster_views(self, value: bool) -> None:
        self.outputs = dataclasses.replace(self.outputs, cluster_views=value)

    space: ReadThrough[SemanticSpace] = ReadThrough("measure.space", "The semantic space it measures in.")
    vocab_size: ReadThrough[int | None] = ReadThrough(
        "measure.vocab_size", "EAD's V (counted at fit start if not given)."
    )

    @property
    def lexical_metrics(self) -> list[str]:
        """The lexical metrics' names."""
        return self.measure.lexical_metrics

    @property
    def lexical_options(self) -> dict[str, Any]:
        """The lexical metrics' ``tokenizer`` / ``lowercase`` / ``base``."""
        return self.measure.lexical_options

    @property
    def generation_kwargs(self) -> dict[str, Any]:
        """The overrides of the greedy + 3-gram-blocking generation."""
        return self.measure.generation_kwargs

    @property
    def share_history(self) -> list[tuple[int, list[float]]]:
        """``(epoch, generated share per cluster)`` of every measured epoch."""
        return self.measure.share_history

    # -- preparation ----------------------------------------------------------------------------

    def cluster_texts(self, trainer: pl.Trainer) -> list[str] | None:
        """The texts the clusters are fitted on (explicit, or the datamodule's training responses); None: neither."""
        if self.cluster_texts_arg is not None:
            from lightning_div.datamodules.formats import read_responses

            return read_responses(self.cluster_texts_arg)
        dm = getattr(trainer, "datamodule", None)
        if dm is not None and (texts := train_responses_of(dm, type(self).__name__)) is not None:
            return texts
        return None

    def required_inputs(self) -> list[tuple[str, Any, str]]:
        texts = (
            [("cluster_texts", self.cluster_texts_arg, "train_responses")] if self.space.clusters_source is None else []
        )
        return [("val_pairs", self.val_pairs_arg, "val_pairs"), *texts]

    def sample(self, trainer: pl.Trainer) -> list[DialoguePair]:
        """The fixed validation sample the responses are generated for (drawn once, kept on resume)."""
        return self.fixed_sample(trainer, "val", self.val_pairs_arg, "val_pairs", self.num_contexts, self.seed)

    def prepare(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Fix the validation sample and load or fit the clusters (once per run)."""
        if "val" not in self.fixed_samples:
            require_inputs(self, trainer, self.required_inputs())  # validate-only runs: setup checks fits
        sample = self.sample(trainer)
        if self.measure.ready:
            return
        gold = self.cluster_texts(trainer)
        check_clusters_source(
            self.space,
            gold is not None,
            type(self).__name__,
            "or use a datamodule with train_responses() (lightning_div.datamodules.DialogueDataModule)",
        )
        with self.announced(trainer, "the semantic clusters (embedding and k-means, or the cache)"):
            self.measure.prepare(gold, sample, **self.space_context(trainer, pl_module), who=type(self).__name__)

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_fit_start(trainer, pl_module)
        self.prepare(trainer, pl_module)
        if trainer.is_global_zero and self.cluster_views:  # the cards are known now: log them before the first epoch
            log_cards_once(self.reporter(trainer, pl_module), self.space.clusters, self.log_key)

    # -- measurement ----------------------------------------------------------------------------

    def measure_validation(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        with self.measuring(trainer, pl_module, "semantic diversity") as m:
            self.prepare(trainer, pl_module)
            sample = self.sample(trainer)
            adapter = self.adapter(pl_module)
            check_finite_model(pl_module, type(self).__name__, adapter)  # NaN weights or NaN logits: named
            result = self.measure.measure(
                adapter, sample, at=trainer.current_epoch, device=pl_module.device, who=type(self).__name__
            )
            m.update({val_key(name): v for name, v in result.values.items()})
            self.last_responses = result.responses
            if trainer.is_global_zero:
                self.log_views(self.reporter(trainer, pl_module), sample, result)

    def log_views(self, reporter: Reporter, sample: Sequence[DialoguePair], result: SemanticResult) -> None:
        """The cluster cards (once), the collapse figures and the sample table (rank 0 only)."""
        clusters = self.space.clusters
        if self.cluster_views:
            log_cards_once(reporter, clusters, self.log_key)  # validate()/test() without a fit start
        log_collapse(
            reporter, clusters, self.share_history, result.gold_shares, heatmap=self.cluster_views, log_key=self.log_key
        )
        if self.log_samples > 0:
            log_samples_table(
                reporter,
                self.log_key("val/samples"),
                sample,
                result.responses,
                result.ids,
                result.gold_ids,
                self.log_samples,
            )

    # -- checkpointing --------------------------------------------------------------------------

    def measures(self) -> list[Any]:
        return [self.measure]

    def settings(self) -> dict[str, Any]:
        """What the checkpointed state depends on (clusters, sample): a change makes it stale on resume."""
        return {**self.space.settings(), "num_contexts": self.num_contexts, "seed": self.seed}

    def state_key_args(self) -> dict[str, Any]:
        return {**super().state_key_args(), **identity_of(self.space)}

    def state_parts(self) -> dict[str, Any]:
        return {"space": self.space, "measure": self.measure}  # the space first, as 0.2 read them

    def forget(self) -> None:
        self.measure.forget()
