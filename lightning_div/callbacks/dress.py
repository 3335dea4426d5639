"""DRESSReweighting: semantic reweighting of the training data (Han et al., 2022) as a callback."""

from __future__ import annotations

import warnings
from typing import Any, ClassVar, cast

import numpy as np

from lightning_div._internal.checks import check_finite_model
from lightning_div._internal.lightning import TrainerFn, pl
from lightning_div._internal.loop_state import starting_epoch
from lightning_div._internal.tracking import new_figure
from lightning_div.callbacks.base import DiversityCallback, override
from lightning_div.callbacks.checks import settings_changed
from lightning_div.callbacks.dress_checks import (
    check_dress_trainer,
    reweightable_datamodule,
    unweighted_loss_error,
    watch_weights,
    weights_used,
)
from lightning_div.callbacks.dress_guard import check_collapse_monitor, find_guard_monitor, run_guard
from lightning_div.datamodules.samplers import check_count
from lightning_div.dress.degeneration import ON_COLLAPSE, CollapseThresholds, OnCollapse, check_thresholds
from lightning_div.dress.schedule import MINE_AT, mining_generation_kwargs, mining_seed, round_starts, round_to_mine
from lightning_div.dress.state import DressState
from lightning_div.dress.weights import (
    check_lam,
    dress_weights,
)
from lightning_div.keys import NEGATIVE_LOSSES, NegativeLoss
from lightning_div.measure.dress import NegativeMiner
from lightning_div.measure.reporting import Reporter
from lightning_div.measure.sample import sample_indices
from lightning_div.metrics.semantic import cluster_histogram
from lightning_div.model.sharding import full_parameters
from lightning_div.reweighting import (
    MODES,
    NEGATIVE_BATCHES,
    Mode,
    NegativeBatches,
    ReweightableDataModule,
    check_batch_layout,
    check_choice,
)
from lightning_div.semantic.clusters import ClustersSource
from lightning_div.semantic.encoder import EncoderSource
from lightning_div.semantic.space import SemanticSpace, space_from_arguments
from lightning_div.types import Options
from lightning_div.views import log_dress_round

__all__ = ["MINE_AT", "DRESSReweighting"]


class DRESSReweighting(DiversityCallback):
    """Weights gold training responses by the rarity of their semantic cluster, w = (1 - p_train(c))^lam.

    At fit start it fits (or reads) the clusters of the gold training responses in its
    :class:`~lightning_div.semantic.space.SemanticSpace`, computes the weights and hands them to the
    datamodule (:meth:`~lightning_div.reweighting.ReweightableDataModule.apply_weights`). With
    ``negatives=True`` it mines, at every round (``mine_at``), the model's responses that fall in its
    head clusters (:class:`~lightning_div.measure.dress.NegativeMiner`) and trains them with
    ``negative_weight`` and ``negative_loss``. A degeneration guard
    (:mod:`lightning_div.dress.degeneration`) reads the run's metrics at every epoch's end, logs
    ``dress/collapse_alert`` and can stop the negatives (``on_collapse``). Everything it decided is one
    :class:`~lightning_div.dress.state.DressState` (:attr:`state`), checkpointed whole: a resumed
    run continues with bit-identical weights.

    The schedule, the losses, the batches, the guard, the figures and what a datamodule must do
    are in the user guide, ``docs/callbacks/dress.md``; :meth:`paper` gives the authors' settings.

    Args:
        space: the semantic space (shared by identity with the callbacks given the same object);
            None = a private one from the space arguments below. Giving both is an error.
        encoder: model name/path for :class:`~lightning_div.semantic.encoder.ResponseEncoder`, or an
            encoder (default: ``lightning_div.keys.DEFAULT_ENCODER``).
        clusters: a fitted SemanticClusters, a path to a saved one, or None (fit on the gold responses).
        num_clusters: k of the k-means clusters (default 20, the paper's).
        variance_kept: explained variance the PCA keeps (default 0.9, the paper's).
        kmeans_seed: faiss k-means seed (default 27, the paper's).
        lam: the exponent lambda of the gold weights, a finite number >= 0 (paper: 30).
        normalize: rescale the gold weights to mean 1 (keeps unweighted training's step size;
            default True; the paper: False).
        negatives: mine generated responses of the head clusters each epoch.
        num_negative_contexts: training contexts generated for per epoch (paper: M = 5000).
        head_threshold: share of the generations above which a cluster is a head cluster, in [0, 1) (paper: 0.1).
        negative_weight: the weight of a mined response, a finite number < 0 (paper: -1).
        mode: ``"loss"`` (weights in the loss) or ``"sampler"`` (weights as draw probabilities;
            needs ``negatives=False``).
        generation_kwargs: overrides of the greedy generation used for mining.
        encoder_kwargs: extra ResponseEncoder arguments (pooling, max_length, dtype, ...).
        mine_at: ``"start"`` (the authors: every round's start, greedy without n-gram blocking)
            or ``"end"`` (each epoch's end for the next epochs, with n-gram blocking).
        negative_loss: ``"unlikelihood"`` (default: |weight| x -log(1 - p) a token, bounded) or
            ``"nll"`` (the paper: weight x NLL, unbounded).
        negative_batches: ``"separate"`` (the authors: all generations in batches of their own,
            zero weights counted in the denominator) or ``"mixed"`` (head-cluster ones among the gold).
        on_collapse: what the degeneration guard does besides logging ``dress/collapse_alert`` and
            warning once: ``"warn"`` (nothing more) or ``"stop_negatives"`` (no negatives after the
            epoch it fired at).
        collapse_thresholds: when the guard fires (:class:`~lightning_div.dress.degeneration.CollapseThresholds`,
            or a dict of its fields; None: its defaults).
        collapse_monitor: the ``name`` of the SemanticDiversityMonitor whose metrics the guard reads; it
            must be in the Trainer (checked when fitting starts). None: the monitor without a name, or
            the only monitor when it has one; with several named monitors and none unnamed, the guard
            reads none of them and says so once.
        **kwargs: the common arguments of :class:`~lightning_div.callbacks.base.DiversityCallback`.

    Raises:
        ValueError: an unknown ``mode``, ``mine_at``, ``negative_loss``, ``negative_batches`` or ``on_collapse``,
            ``mode="sampler"`` with ``negatives=True``, ``space`` together with a space argument, or a
            ``lam``, ``num_negative_contexts``, ``head_threshold``, ``negative_weight``,
            ``collapse_thresholds`` or ``collapse_monitor`` outside what is listed above.
    """

    kind = "dress"

    #: The authors' settings (Han et al., 2022, and their code): what :meth:`paper` passes.
    PAPER_SETTINGS: ClassVar[dict[str, Any]] = {
        "lam": 30.0,
        "normalize": False,
        "negatives": True,
        "num_negative_contexts": 5000,
        "head_threshold": 0.1,
        "negative_weight": -1.0,
        "mode": "loss",
        "mine_at": "start",
        "negative_loss": "nll",
        "negative_batches": "separate",
    }

    def __init__(
        self,
        encoder: EncoderSource | None = None,
        clusters: ClustersSource | None = None,
        num_clusters: int | None = None,
        variance_kept: float | None = None,
        kmeans_seed: int | None = None,
        lam: float = 30.0,
        normalize: bool = True,
        negatives: bool = True,
        num_negative_contexts: int = 5000,
        head_threshold: float = 0.1,
        negative_weight: float = -1.0,
        mode: str = "loss",
        generation_kwargs: Options | None = None,
        encoder_kwargs: Options | None = None,
        mine_at: str = "start",
        negative_loss: str = "unlikelihood",
        negative_batches: str = "separate",
        space: SemanticSpace | None = None,
        on_collapse: str = "warn",
        collapse_thresholds: CollapseThresholds | None = None,
        collapse_monitor: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_choice("mode", mode, MODES)
        check_choice("mine_at", mine_at, MINE_AT)
        check_choice("negative_loss", negative_loss, NEGATIVE_LOSSES)
        check_choice("negative_batches", negative_batches, NEGATIVE_BATCHES)
        check_choice("on_collapse", on_collapse, ON_COLLAPSE)
        if mode == "sampler" and negatives:
            raise ValueError(
                "DRESSReweighting(mode='sampler') cannot use negatives: a sampler cannot draw an example "
                "a negative number of times. Use negatives=False, or mode='loss' with weighted_lm_loss."
            )
        #: What a round mines (:class:`~lightning_div.measure.dress.NegativeMiner`); this callback chooses when and where.
        self.miner = NegativeMiner(
            space_from_arguments(
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
            ),
            head_threshold,
            negative_weight,
            self.batch_size,
            self.show_progress,
        )
        self.lam = check_lam(lam)
        self.normalize = normalize
        self.negatives = negatives
        if num_negative_contexts is None:
            raise ValueError("num_negative_contexts must be an integer >= 1, got None")
        self.num_negative_contexts = int(check_count("num_negative_contexts", num_negative_contexts) or 0)
        # checked against MODES / NEGATIVE_LOSSES / NEGATIVE_BATCHES above (check_choice), hence the casts
        self.mode = cast(Mode, mode)
        self.generation_kwargs = dict(generation_kwargs or {})
        self.mine_at = mine_at
        self.on_collapse = cast(OnCollapse, on_collapse)
        self.collapse_thresholds: CollapseThresholds = check_thresholds(collapse_thresholds)
        self.collapse_monitor = check_collapse_monitor(collapse_monitor)
        self._guard_monitor = collapse_monitor  # the monitor the guard reads, found at setup (guard_monitor)
        self._layout_seen = False  # this epoch's first batch with negatives was checked (on_train_batch_start)
        #: The first batch's weights, watched until the loss's backward: does the loss depend on them?
        self._watched: Any = None
        self._weights_used: bool | None = None  # None: not checked yet in this fit
        #: Everything DRESS decided (weights, negatives and their clusters, the round), checkpointed whole;
        #: ``mined_for`` makes a resumed run mine each round exactly once.
        self.state = DressState(
            negative_loss=cast(NegativeLoss, negative_loss), negative_batches=cast(NegativeBatches, negative_batches)
        )

    @property
    def space(self) -> SemanticSpace:
        """The semantic space of the weights and the negatives."""
        return self.miner.space

    @property
    def head_threshold(self) -> float:
        """The share of the generations from which a cluster is a head cluster."""
        return self.miner.head_threshold

    @property
    def negative_weight(self) -> float:
        """The weight of a mined negative."""
        return self.miner.negative_weight

    @classmethod
    def paper(cls, **kwargs: Any) -> DRESSReweighting:
        """DRESS with the authors' exact settings (:attr:`PAPER_SETTINGS`); ``kwargs`` override or add.

        Raw gold weights (``normalize=False``) and negatives trained with weight -1 on the NLL
        (``negative_loss="nll"``), mined greedily at each round's start from 5,000 training
        contexts into batches of their own. Fine-tuning with -1 x NLL destabilised one of five
        seeds and, at a higher learning rate, wrecked a model within an epoch (``docs/callbacks/dress.md``), so the
        degeneration guard stays on (``on_collapse="warn"``: it changes no training).

        Examples:
            >>> dress = DRESSReweighting.paper(encoder="minilm", num_clusters=10)
            >>> dress.negative_loss, dress.normalize, dress.num_negative_contexts
            ('nll', False, 5000)
        """
        return cls(**{**cls.PAPER_SETTINGS, **kwargs})

    @property
    def negative_loss(self) -> NegativeLoss:
        """How the negatives are trained (``"unlikelihood"`` or ``"nll"``)."""
        return self.state.negative_loss

    @property
    def negative_batches(self) -> NegativeBatches:
        """Where the negatives are trained (``"separate"`` or ``"mixed"``)."""
        return self.state.negative_batches

    def _datamodule(self, trainer: pl.Trainer) -> ReweightableDataModule:
        return reweightable_datamodule(trainer)

    def check_trainer(self, trainer: pl.Trainer) -> None:
        """Raise when this Trainer would not use the negatives mined each round (the error says the fix).

        New negatives reach training only through a rebuilt train dataloader, so the Trainer must
        rebuild it at every round's start: ``reload_dataloaders_every_n_epochs=1``. (A divisor of
        ``every_n_epochs`` is not enough: Lightning counts its reloads from the epoch a run
        resumes at, which need not be a round's start.) Gold weights alone are applied once,
        before the first dataloader, so ``negatives=False`` needs nothing.

        Warns (once) when ``limit_train_batches`` cuts the epochs: only about that share of the
        negatives' batches, shuffled among the gold ones, would be trained.
        """
        if self.negatives:
            check_dress_trainer(trainer, self.every_n_epochs)

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if stage == TrainerFn.FITTING:  # validate/test runs train nothing: DRESS has nothing to do there
            self._datamodule(trainer)
            self.check_trainer(trainer)
            self._guard_monitor = self.guard_monitor(trainer)

    def guard_monitor(self, trainer: pl.Trainer) -> str | None:
        """The ``name`` of the SemanticDiversityMonitor whose keys the degeneration guard reads (None: the unnamed one).

        ``collapse_monitor`` when given (it must name a monitor of this Trainer); else the monitor
        without a name, or the only monitor when it has a name (its keys are ``<name>/val/...``).
        With several named monitors and none unnamed it cannot choose: a warning (once) says so,
        and the guard reads the losses alone.

        Raises:
            ValueError: ``collapse_monitor`` names no SemanticDiversityMonitor of the Trainer.
        """
        return find_guard_monitor(self, trainer)

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_fit_start(trainer, pl_module)
        dm = self._datamodule(trainer)
        gold = list(dm.train_responses())
        with self.announced(trainer, "the semantic clusters (embedding and k-means, or the cache)"):
            self.space.fit(gold, **self.space_context(trainer, pl_module))
        if self.state.weights is None:  # a resumed run restored them already
            gold_ids = self.space.gold_assignments(gold, device=pl_module.device)
            k = self.space.clusters.num_clusters
            self.state.weights = dress_weights(gold_ids, k, self.lam, self.normalize)
            hist = cluster_histogram(gold_ids, k)
            self.state.gold_top_share = float(hist.max() / hist.sum()) if hist.sum() else None
        epoch = starting_epoch(trainer)
        self._layout_seen = False
        self._watched, self._weights_used = None, None
        if self._mining() and self.mine_at == "start" and self.state.mined_for != epoch and self._round_starts(epoch):
            # The first round's negatives come from the model as it is before any training step. Outside
            # measuring(), so the full parameters are gathered here (every rank runs on_fit_start).
            with full_parameters(pl_module), self.announced(trainer, "DRESS negatives"):
                self._mine_negatives(trainer, pl_module, epoch)
        self._apply(dm)

    def _mining(self) -> bool:
        """Negatives on and not stopped by the degeneration guard."""
        return self.negatives and self.state.negatives_stopped_at is None

    def _round_starts(self, epoch: int) -> bool:
        return round_starts(epoch, self.every_n_epochs)

    def _apply(self, dm: ReweightableDataModule) -> None:
        """Hand the datamodule the weights and negatives this callback owns (the only way they reach it)."""
        dm.apply_weights(np.asarray(self.state.weights, dtype=np.float64), self.state.negatives(), self.mode)

    def _mine_now(self, trainer: pl.Trainer) -> int | None:
        """At this epoch's end: the epoch to mine negatives for, or None."""
        if not self._mining() or trainer.sanity_checking or trainer.state.fn != TrainerFn.FITTING:
            return None
        return round_to_mine(
            trainer.current_epoch,
            self.mine_at,
            self.every_n_epochs,
            due=self.due(trainer),
            max_epochs=trainer.max_epochs,
            mined_for=self.state.mined_for,
            should_stop=trainer.should_stop,
        )

    @override
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._layout_seen = False

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self.mode == "loss" and not self._layout_seen and np.any(self.state.negative_weights != 0):
            self._check_batch(batch)
        if self.mode == "loss" and self._weights_used is None:
            self._watched = watch_weights(batch)  # a leaf that records its use: is the loss weighted?

    @override
    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Any) -> None:
        """At the fit's first backward: a loss that does not depend on the batch's weights is an error, not a
        silently unweighted run (a module calling ``self.model(**batch)`` hands the weights to the model's
        forward, which ignores or refuses them)."""
        watched, self._watched = self._watched, None
        used = weights_used(loss, watched)
        if used is not None:
            self._weights_used = used
        if used is False:
            raise unweighted_loss_error(type(self).__name__)

    def _check_batch(self, batch: Any) -> None:
        """Warn (once each) when a batch cannot carry what DRESS decided to the loss, until one with negatives is seen."""
        found = check_batch_layout(batch, self.negative_loss, self.negative_batches, type(self).__name__)
        self._layout_seen = found.decided
        for what, message in found.problems:
            self.memory.warn_once(f"dress-batch-{what}:{self.name}", message)

    def _guard(self, trainer: pl.Trainer, m: dict[str, float]) -> None:
        """The degeneration guard (lightning_div.dress.degeneration): log the alert, warn once, stop mining if asked."""
        run_guard(self, trainer, m, self._guard_monitor)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # The guard decides before this epoch's end mines the next round (stop_negatives stops it).
        trained = self.state.summary()  # the negatives this epoch was trained with, before a stop clears them
        guard: dict[str, float] = {}
        self._guard(trainer, guard)
        target = self._mine_now(trainer)  # the same on every rank: epoch, schedule and should_stop are global
        # The full parameters (FSDP) are gathered only for a round that mines; a summary needs no model.
        with self.measuring(trainer, pl_module, "DRESS negatives", needs_model=target is not None) as m:
            m.update(guard)
            if self.mine_at == "start":
                # Logged before mining: the negatives this epoch was trained with.
                m.update(trained)
            if target is not None:
                self._mine_negatives(trainer, pl_module, target)
                self._apply(self._datamodule(trainer))
            if self.mine_at == "end":  # today's schedule logs the negatives just mined for the next epoch
                m.update(self.state.summary())
            all_w = self.state.all_weights()
            if trainer.is_global_zero and all_w.size:
                reporter = self.reporter(trainer, pl_module)
                self._plot(trainer, reporter, all_w)
                log_dress_round(
                    reporter,
                    self.state,
                    self.space.clusters,
                    self.lam,
                    trainer.current_epoch,
                    self.log_key,
                    cards=not self._monitor_logs_cards(trainer),
                )

    def _monitor_logs_cards(self, trainer: pl.Trainer) -> bool:
        """Whether a SemanticDiversityMonitor of this callback's name logs the cluster cards (then DRESS does not)."""
        from lightning_div.callbacks.semantic_diversity import SemanticDiversityMonitor

        return any(
            isinstance(cb, SemanticDiversityMonitor) and cb.name == self.name and cb.cluster_views
            for cb in getattr(trainer, "callbacks", [])
        )

    def mining_generation_kwargs(self, pl_module: pl.LightningModule) -> dict[str, Any]:
        """What ``generate`` gets when mining: ``mine_at="start"`` turns the n-gram blocking off."""
        # a module implementing the adapter protocol itself has no layout to read: the causal defaults
        is_seq2seq = bool(getattr(self.adapter(pl_module), "is_seq2seq", False))
        return mining_generation_kwargs(self.mine_at, self.generation_kwargs, is_seq2seq)

    def _mine_negatives(self, trainer: pl.Trainer, pl_module: pl.LightningModule, for_epoch: int) -> None:
        adapter = self.adapter(pl_module)
        check_finite_model(pl_module, type(self).__name__, adapter)  # a diverged model's empty output is no negative
        dm = self._datamodule(trainer)
        contexts = list(dm.train_contexts())
        idx = sample_indices(len(contexts), self.num_negative_contexts, mining_seed(self.seed, for_epoch, self.mine_at))
        chosen = [list(contexts[i]) for i in idx]
        mined = self.miner.measure(
            adapter,
            chosen,
            generation_kwargs=self.mining_generation_kwargs(pl_module),
            # "separate" keeps the zero-weight generations too: they count in their batches' token denominator
            keep_zero_weights=self.state.negative_batches == "separate",
            device=pl_module.device,  # the space was fitted at fit start, on every rank
            who=type(self).__name__,
        )
        # the cluster each came from: the per-cluster figure counts them, also after a resume
        self.state.set_negatives(mined.pairs, mined.weights, mined.clusters, mined.heads, mined.head_share, for_epoch)

    def _plot(self, trainer: pl.Trainer, reporter: Reporter, weights: np.ndarray) -> None:
        fig, ax = new_figure(figsize=(6, 3.5))
        ax.hist(weights, bins=40)
        ax.set_yscale("log")
        ax.set_xlabel("DRESS sample weight")
        ax.set_ylabel("examples")
        ax.set_title(f"DRESS weights, epoch {trainer.current_epoch} (lambda={self.lam})")
        reporter.figure(self.log_key("dress/weight_histogram"), fig)

    def state_key_args(self) -> dict[str, Any]:
        return {**super().state_key_args(), **self.space.identity()}

    def measures(self) -> list[Any]:
        return [self.miner]

    def settings(self) -> dict[str, Any]:
        """What the checkpointed weights and negatives depend on: a change makes them stale on resume."""
        return {
            **self.space.settings(),
            "lam": self.lam,
            "normalize": self.normalize,
            "head_threshold": self.head_threshold,
            "negative_weight": self.negative_weight,
            "mode": self.mode,
        }

    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "settings": self.settings(),
            **self.state.state_dict(),
            **self.space.state_dict(),
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        if settings_changed(
            self,
            state_dict.get("settings"),
            self.settings(),
            "the weights are recomputed and the negatives mined again under the new settings",
        ):
            return  # weights None: on_fit_start computes them; no negatives until the next mining
        self.state.load_state_dict(state_dict)
        if self.state.negative_pairs and not self.state.negative_clusters.size:
            warnings.warn(  # not warn_once: a resume happens once per run, and each one must say it
                f"{type(self).__name__}: the checkpoint holds {len(self.state.negative_pairs)} negatives without "
                "the clusters they came from (written before lightning-div 0.2.0): they are trained on as saved, "
                "but the per-cluster figure counts no negatives until the next round is mined",
                RuntimeWarning,
                stacklevel=2,
            )
        self.space.load_state_dict(state_dict)
