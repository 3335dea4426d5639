"""DRESSReweighting: semantic reweighting of the training data (Han et al., 2022) as a callback."""

from __future__ import annotations

import warnings
from typing import Any, ClassVar, cast

import numpy as np

from lightning_div._internal.attributes import ReadThrough
from lightning_div._internal.checks import check_finite_model
from lightning_div._internal.lightning import TrainerFn, pl
from lightning_div._internal.loop_state import starting_epoch
from lightning_div._internal.tracking import new_figure
from lightning_div.callbacks.base import DiversityCallback, override
from lightning_div.callbacks.dress_args import REGROUPED, RENAMED, dress_arguments
from lightning_div.callbacks.dress_checks import (
    check_dress_trainer,
    reweightable_datamodule,
    unweighted_loss_error,
    watch_weights,
    weights_used,
)
from lightning_div.callbacks.dress_guard import find_guard_monitor, run_guard
from lightning_div.callbacks.parts import take_own
from lightning_div.callbacks.semantic_diversity import SemanticDiversityMonitor
from lightning_div.dress.degeneration import ON_COLLAPSE, OnCollapse
from lightning_div.dress.schedule import MINE_AT, mining_generation_kwargs, mining_seed, round_starts, round_to_mine
from lightning_div.dress.state import DressState
from lightning_div.dress.weights import check_lam, dress_weights
from lightning_div.keys import NegativeLoss
from lightning_div.measure.alerts import DRESSAlert
from lightning_div.measure.dress import NegativeMiner
from lightning_div.measure.reporting import Reporter
from lightning_div.measure.sample import sample_indices
from lightning_div.metrics.semantic import cluster_histogram
from lightning_div.model.sharding import full_parameters
from lightning_div.reweighting import (
    MODES,
    Mode,
    NegativeBatches,
    ReweightableDataModule,
    check_batch_layout,
    check_choice,
    train_responses_of,
)
from lightning_div.semantic.space import SemanticSpace, identity_of
from lightning_div.settings import Mining
from lightning_div.views import log_dress_round

__all__ = ["MINE_AT", "DRESSReweighting"]


class DRESSReweighting(DiversityCallback):
    """Weights gold training responses by the rarity of their semantic cluster, w = (1 - p_train(c))^lam.

    At fit start it fits (or reads) the clusters of the training responses in its
    :class:`~lightning_div.semantic.space.SemanticSpace`, computes the weights and hands them to the
    datamodule (:meth:`~lightning_div.reweighting.ReweightableDataModule.apply_weights`). With
    ``mining`` it mines, at every round (``Mining.at``), the model's responses that fall in its
    head clusters (:class:`~lightning_div.measure.dress.NegativeMiner`) and trains them with
    ``Mining.weight`` and ``Mining.loss``. Its alert (:class:`~lightning_div.measure.alerts.DRESSAlert`)
    reads the run's metrics at every epoch's end, logs ``dress/collapse_alert`` and can stop the
    negatives (``on_collapse``). Everything it decided is one
    :class:`~lightning_div.dress.state.DressState` (:attr:`state`), checkpointed whole: a resumed
    run continues with bit-identical weights.

    The schedule, the losses, the batches, the alert, the figures and what a datamodule must do
    are in the user guide, ``docs/callbacks/dress.md``; :meth:`paper` gives the authors' settings.

    Args:
        space: the semantic space (shared, fitted once, with the callbacks given the same object);
            None = a private ``SemanticSpace()``.
        lam: the exponent lambda of the gold weights, a finite number >= 0 (paper: 30).
        normalize: rescale the gold weights to mean 1 (keeps unweighted training's step size;
            default True; the paper: False).
        mode: ``"loss"`` (weights in the loss) or ``"sampler"`` (weights as draw probabilities;
            needs ``mining=None``).
        mining: the negative mining (:class:`~lightning_div.settings.Mining`: how many contexts,
            the head threshold, the weight, when, which loss, which batches); None: no negatives.
        alert: when the generations count as collapsed (:class:`~lightning_div.measure.alerts.DRESSAlert`;
            None: its defaults).
        on_collapse: what DRESS does when its alert fires, besides logging ``dress/collapse_alert`` and
            warning once: ``"warn"`` (nothing more) or ``"stop_negatives"`` (no negatives after the
            epoch it fired at).
        monitor: the SemanticDiversityMonitor whose metrics the alert reads: the object (it must be
            one of the Trainer's callbacks), or its ``name`` (the form a LightningCLI YAML file
            uses). None: the Trainer's monitor without a name, or its only monitor; with several
            named monitors and none unnamed, the alert reads none of them and says so once.
        **kwargs: the common arguments of :class:`~lightning_div.callbacks.base.DiversityCallback`
            (``generation=Generation(options=...)`` overrides the greedy generation used for mining),
            and 0.2's keywords (``encoder=``, ``negatives=``, ``num_negative_contexts=``, ...,
            ``collapse_thresholds=``, ``collapse_monitor=``), deprecated: each warns naming its new form.

    Raises:
        ValueError: an unknown ``mode`` or ``on_collapse``, ``mode="sampler"`` with mining, ``space``
            together with a 0.2 space keyword, a ``lam`` or ``monitor`` outside what is listed above,
            or a ``mining`` / ``alert`` that is not one.
    """

    kind = "dress"

    #: The authors' mining: M = 5000 contexts, head share 0.1, weight -1 on the NLL, at each round's start, own batches.
    PAPER_MINING: ClassVar[Mining] = Mining(
        num_contexts=5000, head_threshold=0.1, weight=-1.0, at="start", loss="nll", batches="separate"
    )
    #: The authors' settings (Han et al., 2022, and their code): what :meth:`paper` passes.
    PAPER_SETTINGS: ClassVar[dict[str, Any]] = {"lam": 30.0, "normalize": False, "mode": "loss", "mining": PAPER_MINING}

    def __init__(
        self,
        space: SemanticSpace | None = None,
        lam: float = 30.0,
        normalize: bool = True,
        mode: str = "loss",
        mining: Mining | None = Mining(),  # noqa: B008 - frozen: one shared default is safe
        alert: DRESSAlert | None = None,
        on_collapse: str = "warn",
        monitor: SemanticDiversityMonitor | str | None = None,
        **kwargs: Any,
    ) -> None:
        old, groups = take_own(self, kwargs, RENAMED, REGROUPED)  # 0.2's own keywords (warning): not the base's
        super().__init__(**kwargs)
        args = dress_arguments(old, groups, space, mining, alert, monitor, self.batch_size, self.show_progress)
        check_choice("mode", mode, MODES)
        check_choice("on_collapse", on_collapse, ON_COLLAPSE)
        if mode == "sampler" and args.negatives:
            raise ValueError(
                "DRESSReweighting(mode='sampler') cannot use negatives: a sampler cannot draw an example "
                "a negative number of times. Use mining=None, or mode='loss' with weighted_lm_loss."
            )
        #: The mining settings (kept when mining is off: its threshold and weight are in :meth:`settings`).
        self.mining_settings = args.mining
        self.negatives = args.negatives
        #: What a round mines (:class:`~lightning_div.measure.dress.NegativeMiner`); this callback chooses when and where.
        self.miner = NegativeMiner(
            args.space, args.mining.head_threshold, args.mining.weight, self.batch_size, self.show_progress
        )
        self.lam = check_lam(lam)
        self.normalize = normalize
        self.mode = cast(Mode, mode)  # checked against MODES above
        self.on_collapse = cast(OnCollapse, on_collapse)
        #: The degeneration guard (:class:`~lightning_div.measure.alerts.DRESSAlert`).
        self.alert = args.alert
        #: The SemanticDiversityMonitor the alert reads, its name, or None (found at setup).
        self.monitor = args.monitor
        self._guard_monitor: str | None = None  # the name of the monitor the alert reads, found at setup
        self._layout_seen = False  # this epoch's first batch with negatives was checked (on_train_batch_start)
        #: The first batch's weights, watched until the loss's backward: does the loss depend on them?
        self._watched: Any = None
        self._weights_used: bool | None = None  # None: not checked yet in this fit
        #: Everything DRESS decided (weights, negatives and their clusters, the round), checkpointed whole;
        #: ``mined_for`` makes a resumed run mine each round exactly once.
        self.state = DressState(
            negative_loss=cast(NegativeLoss, args.mining.loss),
            negative_batches=cast(NegativeBatches, args.mining.batches),
        )

    @property
    def mining(self) -> Mining | None:
        """The mining settings, None when no negatives are mined."""
        return self.mining_settings if self.negatives else None

    num_contexts: ReadThrough[int] = ReadThrough(
        "mining_settings.num_contexts",
        "The training contexts generated for at each mining round (``Mining.num_contexts``).",
    )
    mine_at: ReadThrough[str] = ReadThrough(
        "mining_settings.at", 'When a round mines: ``"start"`` or ``"end"`` (``Mining.at``).'
    )
    space: ReadThrough[SemanticSpace] = ReadThrough(
        "miner.space", "The semantic space of the weights and the negatives."
    )
    head_threshold: ReadThrough[float] = ReadThrough(
        "miner.head_threshold", "The share of the generations from which a cluster is a head cluster."
    )
    negative_weight: ReadThrough[float] = ReadThrough("miner.negative_weight", "The weight of a mined negative.")

    @classmethod
    def paper(cls, **kwargs: Any) -> DRESSReweighting:
        """DRESS with the authors' exact settings (:attr:`PAPER_SETTINGS`); ``kwargs`` override or add.

        To change one mining setting, pass ``mining=dataclasses.replace(DRESSReweighting.PAPER_MINING, num_contexts=500)``.

        Raw gold weights (``normalize=False``) and negatives trained with weight -1 on the NLL
        (``Mining(loss="nll")``), mined greedily at each round's start from 5,000 training
        contexts into batches of their own. Fine-tuning with -1 x NLL destabilised one of five
        seeds and, at a higher learning rate, wrecked a model within an epoch (``docs/callbacks/dress.md``), so the
        alert stays on (``on_collapse="warn"``: it changes no training).

        Examples:
            >>> from lightning_div.semantic.space import SemanticSpace
            >>> dress = DRESSReweighting.paper(space=SemanticSpace(encoder="minilm", num_clusters=10))
            >>> dress.negative_loss, dress.normalize, dress.num_contexts
            ('nll', False, 5000)
        """
        return cls(**{**cls.PAPER_SETTINGS, **kwargs})

    negative_loss: ReadThrough[NegativeLoss] = ReadThrough(
        "state.negative_loss", 'How the negatives are trained (``"unlikelihood"`` or ``"nll"``).'
    )
    negative_batches: ReadThrough[NegativeBatches] = ReadThrough(
        "state.negative_batches", 'Where the negatives are trained (``"separate"`` or ``"mixed"``).'
    )

    def _datamodule(self, trainer: pl.Trainer) -> ReweightableDataModule:
        return reweightable_datamodule(trainer)

    def check_trainer(self, trainer: pl.Trainer) -> None:
        """Raise when this Trainer would not use the negatives mined each round (the error says the fix).

        New negatives reach training only through a rebuilt train dataloader, so the Trainer must
        rebuild it at every round's start: ``reload_dataloaders_every_n_epochs=1``. (A divisor of
        ``every_n_epochs`` is not enough: Lightning counts its reloads from the epoch a run
        resumes at, which need not be a round's start.) Gold weights alone are applied once,
        before the first dataloader, so ``mining=None`` needs nothing.

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
        """The ``name`` of the SemanticDiversityMonitor whose keys the alert reads (None: the unnamed one).

        ``monitor``'s when given (the object must be one of this Trainer's callbacks, a name must
        name one); else the monitor
        without a name, or the only monitor when it has a name (its keys are ``<name>/val/...``).
        With several named monitors and none unnamed it cannot choose: a warning (once) says so,
        and the alert reads the losses alone.

        Raises:
            ValueError: ``monitor`` is not (or names no) SemanticDiversityMonitor of the Trainer.
        """
        return find_guard_monitor(self, trainer)

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_fit_start(trainer, pl_module)
        dm = self._datamodule(trainer)
        gold = list(train_responses_of(dm, type(self).__name__) or [])
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
        """The alert (:class:`~lightning_div.measure.alerts.DRESSAlert`): log it, warn once, stop mining if asked."""
        run_guard(self, trainer, m, self._guard_monitor)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # The alert decides before this epoch's end mines the next round (stop_negatives stops it).
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
        return mining_generation_kwargs(self.mine_at, dict(self.generation.options), is_seq2seq)

    def _mine_negatives(self, trainer: pl.Trainer, pl_module: pl.LightningModule, for_epoch: int) -> None:
        adapter = self.adapter(pl_module)
        check_finite_model(pl_module, type(self).__name__, adapter)  # a diverged model's empty output is no negative
        dm = self._datamodule(trainer)
        contexts = list(dm.train_contexts())
        idx = sample_indices(len(contexts), self.num_contexts, mining_seed(self.seed, for_epoch, self.mine_at))
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
        return {**super().state_key_args(), **identity_of(self.space)}

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

    # -- checkpointing: DiversityCallback's one loop, with DRESS's parts ---------------------------------

    #: What a resume under changed settings does (:func:`~lightning_div.callbacks.checks.settings_changed`).
    stale_consequence = "the weights are recomputed and the negatives mined again under the new settings"

    def state_parts(self) -> dict[str, Any]:
        """What DRESS checkpoints: its decisions (weights, negatives, the round), the space (written once when a
        monitor given the same object checkpoints it first) and the alert."""
        return {"reweighting": self.state, "space": self.space, "alert": self.alert}

    def legacy_keys(self) -> dict[str, str]:
        return {"alert": "alert"}  # 0.2 wrote no alert: it starts afresh

    def forget(self) -> None:
        """A stale or fresh start: no weights (fit start computes them), no negatives until the next round."""
        self.state.reset()  # in place: the loop holds the parts it restores

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "samples" not in state_dict:  # 0.2 wrote DRESS's state flat: its decisions and the space side by side
            state_dict = {**state_dict, "indices": None}  # what upgrade_flat_state knows a 0.2 state by
        super().load_state_dict(state_dict)
        if self.state.negative_pairs and not self.state.negative_clusters.size:
            warnings.warn(  # not warn_once: a resume happens once per run, and each one must say it
                f"{type(self).__name__}: the checkpoint holds {len(self.state.negative_pairs)} negatives without "
                "the clusters they came from (written before lightning-div 0.2.0): they are trained on as saved, "
                "but the per-cluster figure counts no negatives until the next round is mined",
                RuntimeWarning,
                stacklevel=2,
            )
