"""RUQMonitor: how often the model prefers "I don't know." over the real reference (Khayrallah & Sedoc, 2021)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lightning_div._internal.attributes import ReadThrough
from lightning_div._internal.deprecation import regrouped_into, warn_deprecated
from lightning_div._internal.lightning import pl
from lightning_div.callbacks.base import ValidationMonitor, override
from lightning_div.callbacks.checks import optional_part
from lightning_div.callbacks.parts import init_depth, merged, take_own
from lightning_div.keys import RUQ_ALERT, train_key, val_key
from lightning_div.measure.alerts import RUQAlert
from lightning_div.measure.ruq import DEFAULT_IDK, RUQMeasure, ruq_profile_figure
from lightning_div.metrics.ruq import ReferenceChoice, check_reference
from lightning_div.model.adapters import DialogueModelAdapter
from lightning_div.pairs import DialoguePair
from lightning_div.settings import RUQPlot
from lightning_div.types import PairsSource
from lightning_div.verdict import next_alert_record


@dataclass(frozen=True)
class RUQScoring:
    """How RUQ scores a context's references against the IDK strings.

    Attributes:
        reference: with several references per context, ``"lowest"`` (the lowest-scoring one, the paper's
            recommendation) or ``"first"`` (the original reference, as the paper's tables use).
            Single-reference data gives the same value either way.
        shared_contexts: score each context's references and IDK strings after one pass over the context
            (:func:`lightning_div.model.scoring.candidate_logprobs`; 1.8x faster on a DialoGPT-small-shaped
            model). Its values agree with pair-by-pair scoring, and across process counts, to float32
            rounding (1e-6 relative), not bit for bit; ``False`` scores pair by pair, bit-identical on any
            number of processes.

    Raises:
        ValueError: an unknown ``reference``.
    """

    reference: ReferenceChoice = "lowest"
    shared_contexts: bool = True

    def __post_init__(self) -> None:
        check_reference(self.reference)


#: The 0.2 arguments of RUQMonitor now fields of ``plot=``, ``scoring=`` and ``alert=``.
DEPRECATED_RUQ: dict[str, tuple[str, str]] = {
    **regrouped_into("plot", "num_beams", num_plot_prompts="num_contexts"),
    **regrouped_into("scoring", "reference", "shared_contexts"),
    **regrouped_into("alert", "warn_below", "warn_drop"),
}

DEFAULT_PLOT = RUQPlot()


class RUQMonitor(ValidationMonitor):
    """RUQ on a fixed training sample (``train/ruq``) and on validation (``val/ruq``) at epoch ends.

    RUQ = 100 x share of contexts whose reference has a higher length-normalised
    log-likelihood than the IDK response (with several references, the one ``scoring.reference``
    names). Logs ``<split>/ruq`` (against the first IDK string) and
    ``<split>/ruq_idk1``, ``_idk2``, ... (one per IDK string); ``<split>/ruq_margin`` and
    ``<split>/ruq_margin_idk1``, ... : the mean over contexts of (reference score - IDK
    score) in nats per token, which moves while RUQ itself sits at 0 or 100; the plot of the paper
    (mean log-prob by token position of the reference, the model's beam output and each
    IDK string), and ``val/ruq_alert`` = 1 when the alert fires (by default: ``val/ruq`` drops
    by more than 10 points since the last measurement).

    Args:
        idk_responses: the IDK strings; the first is the headline.
        num_contexts: size of the fixed random sample of validation contexts (None = all).
        num_train_contexts: size of the fixed random sample of training contexts (None = all).
        val_pairs: validation evaluation data (pairs or a path); default: the datamodule's.
        train_pairs: training evaluation data (pairs or a path); default: the datamodule's.
        plot: the per-position plot (:class:`~lightning_div.settings.RUQPlot`); None: no plot.
        alert: when ``val/ruq_alert`` fires (:class:`~lightning_div.measure.alerts.RUQAlert`); None: ``RUQAlert()``
            (a drop of more than 10 points since the last measurement), as the Hugging Face monitor;
            ``RUQAlert(warn_drop=None)`` never alerts.
        scoring: which reference counts and how contexts are scored (:class:`RUQScoring`; None: its defaults).
        **kwargs: the common arguments of :class:`~lightning_div.callbacks.base.DiversityCallback`, and
            the 0.2 arguments, deprecated: ``num_val_prompts`` (``num_contexts``), ``num_train_prompts``
            (``num_train_contexts``), ``plot=True/False``, ``num_plot_prompts``, ``num_beams`` (``plot=``),
            ``warn_below``, ``warn_drop`` (``alert=``), ``reference``, ``shared_contexts`` (``scoring=``).
    """

    kind = "ruq"
    stale_consequence = "the context samples are drawn again and the alert starts afresh"

    def __init__(
        self,
        idk_responses: Sequence[str] = DEFAULT_IDK,
        num_contexts: int | None = 256,
        num_train_contexts: int | None = 256,
        val_pairs: PairsSource | None = None,
        train_pairs: PairsSource | None = None,
        plot: RUQPlot | None = DEFAULT_PLOT,
        alert: RUQAlert | None = None,
        scoring: RUQScoring | None = None,
        **kwargs: Any,
    ) -> None:
        renamed, groups = take_own(
            self, kwargs, {"num_val_prompts": "num_contexts", "num_train_prompts": "num_train_contexts"}, DEPRECATED_RUQ
        )
        if isinstance(plot, bool):  # 0.2's plot=True / False
            warn_deprecated(
                f"RUQMonitor(plot={plot})", "plot=RUQPlot(...)" if plot else "plot=None", 2 + init_depth(self)
            )
            plot = DEFAULT_PLOT if plot else None
        super().__init__(**kwargs)
        owner = type(self).__name__
        self.num_contexts = renamed.get("num_contexts", num_contexts)
        self.num_train_contexts = renamed.get("num_train_contexts", num_train_contexts)
        if (
            plot is not None and "plot" in groups
        ):  # 0.2's num_plot_prompts / num_beams (ignored with plot=False, as then)
            plot = merged(owner, "plot", None if plot is DEFAULT_PLOT else plot, DEFAULT_PLOT, groups["plot"])
        #: The per-position plot's settings; None: no plot.
        self.plot = plot
        # alert=None is the default alert, as the Hugging Face monitor's (a default object would be shared
        # state, and LightningCLI could not write it into the run's config); RUQAlert(warn_drop=None) never alerts
        if "alert" in groups and alert is not None:
            raise ValueError(f"{owner}: alert= and the deprecated warn_below= / warn_drop= were both given")
        alert = RUQAlert(**groups.get("alert", {})) if alert is None else alert
        #: The alert (:class:`~lightning_div.measure.alerts.RUQAlert`); its state is the last ``val/ruq``.
        self.alert = alert
        scoring = merged(owner, "scoring", scoring, RUQScoring(), groups.get("scoring", {}))
        #: The measurement (:class:`~lightning_div.measure.ruq.RUQMeasure`).
        self.ruq = RUQMeasure(
            idk_responses, scoring.reference, scoring.shared_contexts, self.batch_size, self.show_progress
        )
        self.train_pairs_arg = train_pairs
        self.val_pairs_arg = val_pairs

    idk_responses: ReadThrough[list[str]] = ReadThrough(
        "ruq.idk_responses", "The IDK strings; the first is the headline."
    )

    @property
    def shared_contexts(self) -> bool:
        """Score a prompt's candidates after one pass over its context (see the class)."""
        return self.ruq.shared_contexts

    @shared_contexts.setter
    def shared_contexts(self, value: bool) -> None:
        self.ruq.shared_contexts = value

    reference: ReadThrough[str] = ReadThrough("ruq.reference", 'Which reference counts: ``"lowest"`` or ``"first"``.')
    last_val_ruq: ReadThrough[float | None] = ReadThrough("alert.last", "The last measured ``val/ruq``.")

    # -- data ---------------------------------------------------------------------------------------

    def _sample(self, trainer: pl.Trainer, split: str) -> list[DialoguePair]:
        if split == "train":
            return self.fixed_sample(
                trainer, "train", self.train_pairs_arg, "train_pairs", self.num_train_contexts, self.seed
            )
        return self.fixed_sample(trainer, "val", self.val_pairs_arg, "val_pairs", self.num_contexts, self.seed + 1)

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
        assert self.plot is not None  # measure_validation plots only with settings
        pairs = list(pairs[: self.plot.num_contexts])
        profile = self.ruq.profile(adapter, pairs, self.plot.num_beams)
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
            self.record_alert(trainer, m, values["ruq"])
            if self.plot:
                with optional_part(self, trainer, "the RUQ plot"):  # val/ruq and the alert are kept
                    self._plot(trainer, pl_module, adapter, pairs)

    def record_alert(self, trainer: pl.Trainer, m: dict[str, float], ruq: float) -> None:
        """``val/ruq_alert`` and the alert's record (for the summary and the report)."""
        m[RUQ_ALERT] = self.alert.alert(ruq, "val/ruq", type(self).__name__, self.idk_responses[0])
        self.alert_record = next_alert_record(
            self.alert_record,
            self.label,
            "RUQ alert" if m[RUQ_ALERT] else None,
            trainer.current_epoch,
            "epoch",
            self.alert.reasons,
            self.log_key(RUQ_ALERT),
        )

    def measures(self) -> list[Any]:
        return [self.ruq]

    def settings(self) -> dict[str, Any]:
        """What the checkpointed samples and last value depend on: a change makes them stale on resume."""
        return {
            "idk_responses": list(self.idk_responses),
            "num_train_contexts": self.num_train_contexts,
            "num_contexts": self.num_contexts,
            "seed": self.seed,
        }

    def state_key_args(self) -> dict[str, Any]:
        return {**super().state_key_args(), "idk_responses": tuple(self.idk_responses)}

    def state_parts(self) -> dict[str, Any]:
        return {"alert": self.alert}

    def legacy_keys(self) -> dict[str, str]:
        return {"alert": "last_val_ruq"}

    def forget(self) -> None:
        self.alert.last = None

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = state_dict.get("settings")
        if "samples" not in state_dict and isinstance(saved, dict):  # 0.2's names of the sample sizes
            renames = {"num_train_prompts": "num_train_contexts", "num_val_prompts": "num_contexts"}
            state_dict = {**state_dict, "settings": {renames.get(k, k): v for k, v in saved.items()}}
        super().load_state_dict(state_dict)
