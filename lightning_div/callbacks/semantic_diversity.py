"""SemanticDiversityMonitor: Sem-Ent and lexical diversity of generated responses at validation epoch end."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lightning_div._internal.checks import check_finite_model
from lightning_div._internal.lightning import pl
from lightning_div.callbacks.base import ValidationMonitor, override
from lightning_div.callbacks.checks import require_inputs, settings_changed
from lightning_div.keys import val_key
from lightning_div.measure.reporting import Reporter
from lightning_div.measure.semantic import SemanticMeasure, SemanticResult, check_clusters_source
from lightning_div.metrics import DEFAULT_LEXICAL
from lightning_div.pairs import DialoguePair
from lightning_div.reweighting import train_responses_of
from lightning_div.semantic.clusters import ClustersSource
from lightning_div.semantic.encoder import EncoderSource
from lightning_div.semantic.space import SemanticSpace, space_from_arguments
from lightning_div.types import Options, PairsSource, ResponsesSource
from lightning_div.views import log_cards_once, log_collapse, log_samples_table


class SemanticDiversityMonitor(ValidationMonitor):
    """Sem-Ent (Han et al., 2022) and lexical diversity of the model's responses on a fixed validation sample.

    It measures in a :class:`~lightning_div.semantic.space.SemanticSpace` (encoder + clusters):
    ``space=`` (share one with :class:`~lightning_div.callbacks.DRESSReweighting` and both use
    one encoder and one set of clusters), or a private one built from ``encoder``, ``clusters``,
    ``num_clusters``, ``variance_kept``, ``kmeans_seed`` and ``encoder_kwargs``. At fit start
    the clusters are loaded (``clusters`` = a SemanticClusters or a saved file) or fitted on the
    gold training responses and cached in ``dirpath`` (a private space of DRESS with the same
    settings reads the same cache file, so the fit is done once). At
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
    ``log_samples`` example responses with their cluster ids. Once per run, the
    cluster cards (:mod:`lightning_div.semantic.cards`) as the table ``clusters/cards``
    and ``cluster_cards.csv``.

    Args:
        space: the semantic space to measure in (shared by identity with the callbacks given the
            same object); None = a private one from the space arguments below. Giving both is an error.
        encoder: model name/path for :class:`~lightning_div.semantic.encoder.ResponseEncoder`, or an
            encoder (default: ``lightning_div.keys.DEFAULT_ENCODER``).
        clusters: a fitted SemanticClusters, a path to a saved one, or None (fit on gold responses).
        num_clusters: k of the k-means clusters (default 20, the paper's).
        variance_kept: explained variance the PCA keeps (default 0.9, the paper's).
        kmeans_seed: faiss k-means seed (default 27, the paper's).
        num_contexts: size of the fixed validation sample (None = all).
        generation_kwargs: overrides of the greedy + no_repeat_ngram_size=3 default.
        lexical_metrics: which of distinct_<n> (corpus level), distinct_<n>_utt (utterance level),
            avg_distinct, ent_<n>, ead to add.
        lexical_options: ``tokenizer`` / ``lowercase`` / ``base`` of the lexical metrics (see
            :func:`~lightning_div.metrics.lexical_scores`); the Sem-Ent paper's Ent-n / Dist-n:
            ``{"tokenizer": "casual", "base": 2}``. Default: 13a lowercased, Ent-n in nats.
        vocab_size: V of EAD; default: counted from the gold training responses.
        log_samples: how many example responses go in the table (0 = none).
        cluster_views: log the cluster cards, the epochs x clusters heatmap and ``cluster_shares.csv``
            (the scalars and the share histogram are always logged).
        val_pairs: explicit evaluation data; default: the datamodule's ``val_pairs()``.
        gold_responses: explicit gold training responses for the clusters; default: the
            datamodule's ``train_responses()``.
        encoder_kwargs: extra ResponseEncoder arguments (pooling, max_length, dtype, ...).
        **kwargs: the common arguments of :class:`~lightning_div.callbacks.base.DiversityCallback`.

    Raises:
        ValueError: ``space`` together with a space argument, or unknown ``lexical_options``.
    """

    kind = "semantic_diversity"

    def __init__(
        self,
        encoder: EncoderSource | None = None,
        clusters: ClustersSource | None = None,
        num_clusters: int | None = None,
        variance_kept: float | None = None,
        kmeans_seed: int | None = None,
        num_contexts: int | None = 256,
        generation_kwargs: Options | None = None,
        lexical_metrics: Sequence[str] = DEFAULT_LEXICAL,
        vocab_size: int | None = None,
        log_samples: int = 8,
        val_pairs: PairsSource | None = None,
        gold_responses: ResponsesSource | None = None,
        encoder_kwargs: Options | None = None,
        lexical_options: Options | None = None,
        cluster_views: bool = True,
        space: SemanticSpace | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        space = space_from_arguments(
            type(self).__name__,
            space,
            encoder=encoder,
            clusters=clusters,
            num_clusters=num_clusters,
            variance_kept=variance_kept,
            kmeans_seed=kmeans_seed,
            encoder_kwargs=encoder_kwargs,
            batch_size=self.batch_size,
            show_progress=self.show_progress,
        )
        #: The measurement (:class:`~lightning_div.measure.semantic.SemanticMeasure`): its space, metrics and state.
        self.measure = SemanticMeasure(
            space,
            lexical_metrics,
            lexical_options,  # Options types the CLI's JSON values; the metric functions check them
            vocab_size,
            generation_kwargs,
            self.batch_size,
            self.show_progress,
        )
        self.num_contexts = num_contexts
        self.log_samples = log_samples
        self.cluster_views = cluster_views
        self.val_pairs_arg = val_pairs
        self.gold_responses_arg = gold_responses
        #: The responses of the last measurement, in the sample's order.
        self.last_responses: list[str] = []

    @property
    def space(self) -> SemanticSpace:
        """The semantic space it measures in (shared by identity with the callbacks given the same one)."""
        return self.measure.space

    @property
    def vocab_size(self) -> int | None:
        """EAD's V (counted from the gold responses at fit start when not given)."""
        return self.measure.vocab_size

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

    def gold_responses(self, trainer: pl.Trainer) -> list[str] | None:
        """Gold training responses (explicit, or the datamodule's); None when neither is available."""
        if self.gold_responses_arg is not None:
            from lightning_div.datamodules.formats import read_responses

            return read_responses(self.gold_responses_arg)
        dm = getattr(trainer, "datamodule", None)
        if dm is not None and (gold := train_responses_of(dm, type(self).__name__)) is not None:
            return gold
        return None

    def required_inputs(self) -> list[tuple[str, Any, str]]:
        gold = (
            [("gold_responses", self.gold_responses_arg, "train_responses")]
            if self.space.clusters_source is None
            else []
        )
        return [("val_pairs", self.val_pairs_arg, "val_pairs"), *gold]

    def sample(self, trainer: pl.Trainer) -> list[DialoguePair]:
        """The fixed validation sample the responses are generated for (drawn once, kept on resume)."""
        return self.fixed_sample(trainer, "val", self.val_pairs_arg, "val_pairs", self.num_contexts, self.seed)

    def prepare(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Fix the validation sample and load or fit the clusters (once per run)."""
        if "val" not in self._samples:
            require_inputs(self, trainer, self.required_inputs())  # validate-only runs: setup checks fits
        sample = self.sample(trainer)
        if self.measure.ready:
            return
        gold = self.gold_responses(trainer)
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
        return {**super().state_key_args(), **self.space.identity()}

    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "indices": self.sample_state().get("val"),
            **self.space.state_dict(),
            **self.measure.state_dict(),
            "settings": self.settings(),
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.forget_samples()
        self.measure.forget()
        if settings_changed(
            self,
            state_dict.get("settings"),
            self.settings(),
            "the clusters and the validation sample are made again under the new settings",
        ):
            return  # history is kept; clusters, sample and the gold Sem-Ent come from the new settings
        self.load_sample_state(state_dict.get("indices"))
        self.space.load_state_dict(state_dict)
        self.measure.load_state_dict(state_dict)
