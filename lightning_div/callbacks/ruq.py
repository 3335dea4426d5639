"""RUQMonitor: how often the model prefers "I don't know." over the real reference (Khayrallah & Sedoc, 2021)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lightning_div._internal.lightning import pl
from lightning_div.callbacks.base import ValidationMonitor, override
from lightning_div.callbacks.checks import optional_part, settings_changed
from lightning_div.keys import RUQ_ALERT, train_key, val_key
from lightning_div.measure.alerts import RUQAlert
from lightning_div.measure.ruq import DEFAULT_IDK, RUQMeasure, ruq_profile_figure
from lightning_div.metrics.ruq import ReferenceChoice
from lightning_div.model.adapters import DialogueModelAdapter
from lightning_div.pairs import DialoguePair
from lightning_div.types import PairsSource
from lightning_div.verdict import next_alert_record


class RUQMonitor(ValidationMonitor):
    """RUQ on a fixed training sample (``train/ruq``) and on validation (``val/ruq``) at epoch ends.

    RUQ = 100 x share of prompts whose reference has a higher length-normalised
    log-likelihood than the IDK response (with several references, the one ``reference``
    names). Logs ``<split>/ruq`` (against the first IDK string) and
    ``<split>/ruq_idk1``, ``_idk2``, ... (one per IDK string); ``<split>/ruq_margin`` and
    ``<split>/ruq_margin_idk1``, ... : the mean over prompts of (reference score - IDK
    score) in nats per token, which moves while RUQ itself sits at 0 or 100; the plot of the paper
    (mean log-prob by token position of the reference, the model's beam output and each
    IDK string), and ``val/ruq_alert`` = 1 when RUQ falls below ``warn_below`` or drops
    by more than ``warn_drop`` points since the last measurement.

    Args:
        idk_responses: the IDK strings; the first is the headline.
        num_train_prompts: size of the fixed random sample of training prompts (None = all).
        num_val_prompts: size of the fixed random sample of validation prompts (None = all).
        train_pairs: training evaluation data (pairs or a path); default: the datamodule's.
        val_pairs: validation evaluation data (pairs or a path); default: the datamodule's.
        plot: log the per-position plot every measured validation epoch.
        num_plot_prompts: prompts used for the plot (its beam search is the costly part: 64 prompts took
            most of a quick-start epoch, hence 16).
        num_beams: beam size of the "model output" line of the plot.
        warn_below: alert when val/ruq falls below this (None disables it).
        warn_drop: alert when val/ruq drops by more than this many points since the last
            measurement (None disables it).
        reference: with several references per prompt, ``"lowest"`` (the lowest-scoring
            one, the paper's recommendation) or ``"first"`` (the original reference, as the
            paper's tables use). Single-reference data gives the same value either way.
        shared_contexts: score each prompt's references and IDK strings after one pass over its
            context (:func:`lightning_div.model.scoring.candidate_logprobs`; 1.8x faster on a
            DialoGPT-small-shaped model). Its values agree with pair-by-pair scoring, and across
            process counts, to float32 rounding (1e-6 relative), not bit for bit; ``False``
            scores pair by pair, bit-identical on any number of processes.
        **kwargs: the common arguments of :class:`~lightning_div.callbacks.base.DiversityCallback`.
    """

    kind = "ruq"

    def __init__(
        self,
        idk_responses: Sequence[str] = DEFAULT_IDK,
        num_train_prompts: int | None = 256,
        num_val_prompts: int | None = 256,
        train_pairs: PairsSource | None = None,
        val_pairs: PairsSource | None = None,
        plot: bool = True,
        num_plot_prompts: int = 16,
        num_beams: int = 5,
        warn_below: float | None = None,
        warn_drop: float | None = 10.0,
        reference: ReferenceChoice = "lowest",
        shared_contexts: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        #: The measurement (:class:`~lightning_div.measure.ruq.RUQMeasure`).
        self.ruq = RUQMeasure(idk_responses, reference, shared_contexts, self.batch_size, self.show_progress)
        #: The alert (:class:`~lightning_div.measure.alerts.RUQAlert`); its state is the last ``val/ruq``.
        self.alert = RUQAlert(warn_below, warn_drop)
        self.num_train_prompts = num_train_prompts
        self.num_val_prompts = num_val_prompts
        self.train_pairs_arg = train_pairs
        self.val_pairs_arg = val_pairs
        self.plot = plot
        self.num_plot_prompts = num_plot_prompts
        self.num_beams = num_beams

    @property
    def idk_responses(self) -> list[str]:
        """The IDK strings; the first is the headline."""
        return self.ruq.idk_responses

    @property
    def shared_contexts(self) -> bool:
        """Score a prompt's candidates after one pass over its context (see the class)."""
        return self.ruq.shared_contexts

    @shared_contexts.setter
    def shared_contexts(self, value: bool) -> None:
        self.ruq.shared_contexts = value

    @property
    def reference(self) -> str:
        """Which of several references counts: ``"lowest"`` or ``"first"``."""
        return self.ruq.reference

    @property
    def last_val_ruq(self) -> float | None:
        """The last measured ``val/ruq`` (what ``warn_drop`` compares with)."""
        return self.alert.last

    # -- data ---------------------------------------------------------------------------------------

    def _sample(self, trainer: pl.Trainer, split: str) -> list[DialoguePair]:
        if split == "train":
            return self.fixed_sample(
                trainer, "train", self.train_pairs_arg, "train_pairs", self.num_train_prompts, self.seed
            )
        return self.fixed_sample(trainer, "val", self.val_pairs_arg, "val_pairs", self.num_val_prompts, self.seed + 1)

    # -- work ---------------------------------------------------------------------------------------

    def compute(self, adapter: DialogueModelAdapter, pairs: Sequence[DialoguePair]) -> dict[str, float]:
        """RUQ and its margin for every IDK string over ``pairs`` (:meth:`lightning_div.measure.ruq.RUQMeasure.compute`)."""
        return self.ruq.measure(adapter, pairs)

    def _plot(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        adapter: DialogueModelAdapter,
        pairs: Sequence[DialoguePair],
    ) -> None:
        pairs = list(pairs[: self.num_plot_prompts])
        profile = self.ruq.profile(adapter, pairs, self.num_beams)
        if trainer.is_global_zero:
            title = f"RUQ: per-position log-probability, epoch {trainer.current_epoch}"
            self.reporter(trainer, pl_module).figure(
                self.log_key("val/ruq_plot"), ruq_profile_figure(profile, len(pairs), title)
            )

    # -- hooks --------------------------------------------------------------------------------------

    def required_inputs(self) -> list[tuple[str, Any, str]]:
        return [("train_pairs", self.train_pairs_arg, "train_pairs"), ("val_pairs", self.val_pairs_arg, "val_pairs")]

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_fit_start(trainer, pl_module)
        self._sample(trainer, "train")
        self._sample(trainer, "val")

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.due(trainer):
            with self.measuring(trainer, pl_module, "train RUQ", "timing/ruq_train_s") as m:
                values = self.compute(self.adapter(pl_module), self._sample(trainer, "train"))
                m.update({train_key(k): v for k, v in values.items()})
        super().on_train_epoch_end(trainer, pl_module)  # validation RUQ, if no validation loop ran

    def measure_validation(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        with self.measuring(trainer, pl_module, "validation RUQ") as m:
            adapter = self.adapter(pl_module)
            pairs = self._sample(trainer, "val")
            values = self.compute(adapter, pairs)
            m.update({val_key(k): v for k, v in values.items()})
            m[RUQ_ALERT] = self.alert.alert(values["ruq"], "val/ruq", type(self).__name__, self.idk_responses[0])
            self.alert_record = next_alert_record(
                self.alert_record,
                self.label,
                "RUQ alert" if m[RUQ_ALERT] else None,
                trainer.current_epoch,
                "epoch",
                self.alert.reasons,
                self.log_key(RUQ_ALERT),
            )
            if self.plot:
                with optional_part(self, trainer, "the RUQ plot"):  # val/ruq and the alert are kept
                    self._plot(trainer, pl_module, adapter, pairs)

    def measures(self) -> list[Any]:
        return [self.ruq]

    def settings(self) -> dict[str, Any]:
        """What the checkpointed samples and last value depend on: a change makes them stale on resume."""
        return {
            "idk_responses": list(self.idk_responses),
            "num_train_prompts": self.num_train_prompts,
            "num_val_prompts": self.num_val_prompts,
            "seed": self.seed,
        }

    def state_key_args(self) -> dict[str, Any]:
        return {**super().state_key_args(), "idk_responses": tuple(self.idk_responses)}

    @override
    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "indices": self.sample_state(),
            "last_val_ruq": self.alert.last,
            "settings": self.settings(),
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.forget_samples()
        self.alert.last = None
        if settings_changed(
            self,
            state_dict.get("settings"),
            self.settings(),
            "the prompt samples are drawn again and warn_drop starts afresh",
        ):
            return
        self.load_sample_state(state_dict.get("indices", {}))
        self.alert.load_state_dict(state_dict.get("last_val_ruq"))
