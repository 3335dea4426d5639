"""RUQMonitor: how often the model prefers "I don't know." over the real reference (Khayrallah & Sedoc, 2021)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lightning_div._internal.distributed import distributed_map
from lightning_div._internal.lightning import pl, rank_zero
from lightning_div._internal.tracking import log_figure, new_figure
from lightning_div.callbacks.base import ValidationMonitor, override
from lightning_div.callbacks.guards import optional_part, settings_changed
from lightning_div.core import DialoguePair
from lightning_div.keys import RUQ_ALERT, train_key, val_key
from lightning_div.metrics.ruq import ReferenceChoice, check_reference, ruq_per_idk
from lightning_div.model.adapters import DialogueModelAdapter
from lightning_div.model.scoring import candidate_logprobs, profile_from_logprobs, scores_from_logprobs
from lightning_div.types import PairsSource


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
        num_plot_prompts: prompts used for the plot (its beam search is the costly part).
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
        idk_responses: Sequence[str] = ("I don't know.", "I don't know what to do."),
        num_train_prompts: int | None = 256,
        num_val_prompts: int | None = 256,
        train_pairs: PairsSource | None = None,
        val_pairs: PairsSource | None = None,
        plot: bool = True,
        num_plot_prompts: int = 64,
        num_beams: int = 5,
        warn_below: float | None = None,
        warn_drop: float | None = 10.0,
        reference: ReferenceChoice = "lowest",
        shared_contexts: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        idk = list(idk_responses)
        if not idk or not all(isinstance(s, str) and s.strip() for s in idk):
            raise ValueError(f"idk_responses must be non-empty strings, got {idk_responses!r}")
        self.idk_responses = idk
        self.reference = check_reference(reference)
        self.shared_contexts = shared_contexts
        self.num_train_prompts = num_train_prompts
        self.num_val_prompts = num_val_prompts
        self.train_pairs_arg = train_pairs
        self.val_pairs_arg = val_pairs
        self.plot = plot
        self.num_plot_prompts = num_plot_prompts
        self.num_beams = num_beams
        self.warn_below = warn_below
        self.warn_drop = warn_drop
        self.last_val_ruq: float | None = None

    # -- data ---------------------------------------------------------------------------------------

    def _sample(self, trainer: pl.Trainer, split: str) -> list[DialoguePair]:
        if split == "train":
            return self.fixed_sample(
                trainer, "train", self.train_pairs_arg, "train_pairs", self.num_train_prompts, self.seed
            )
        return self.fixed_sample(trainer, "val", self.val_pairs_arg, "val_pairs", self.num_val_prompts, self.seed + 1)

    @property  # type: ignore[misc]  # RUQ samples two splits: its checkpoint holds indices by split
    def _indices(self) -> dict[str, list[int]]:  # type: ignore[override]
        """The prompt samples' indices by split (what the checkpoint holds as ``"indices"``)."""
        return self._sample_indices

    # -- work ---------------------------------------------------------------------------------------

    def _candidate_logprobs(
        self, adapter: DialogueModelAdapter, items: list[tuple[tuple[str, ...], list[str]]]
    ) -> list[Any]:
        """Token log-probs of every (context, candidates) item, whole prompts sharded over ranks.

        With ``shared_contexts`` each context is encoded once for its candidates (they share its
        cache); otherwise pair by pair. The batch plan is the same on any number of processes.
        """

        def score(batch: list[tuple[tuple[str, ...], list[str]]]) -> list[Any]:
            contexts = [list(c) for c, _ in batch]
            if self.shared_contexts:
                return candidate_logprobs(adapter, contexts, [rs for _, rs in batch])
            flat = adapter.token_logprobs(
                [c for c, (_, rs) in zip(contexts, batch) for _ in rs], [r for _, rs in batch for r in rs]
            )
            out, at = [], 0
            for _, rs in batch:
                out.append(flat[at : at + len(rs)])
                at += len(rs)
            return out

        key = [sum(len(t) for t in c) + max(map(len, rs), default=0) for c, rs in items]
        per_prompt = max(len(rs) for _, rs in items) if items else 1
        return distributed_map(
            score,
            items,
            max(1, self.batch_size // per_prompt),
            sort_key=key,
            show_progress=self.show_progress,
            desc=f"RUQ scoring ({sum(len(rs) for _, rs in items)} pairs)",
        )

    def compute(self, adapter: DialogueModelAdapter, pairs: Sequence[DialoguePair]) -> dict[str, float]:
        """RUQ and its margin for every IDK string over ``pairs`` (one batched, sharded scoring pass).

        Each context is encoded once for its references and IDK strings
        (:func:`lightning_div.model.scoring.candidate_logprobs`).
        """
        items = [(p.context, [*p.all_references, *self.idk_responses]) for p in pairs]
        scores = [scores_from_logprobs(lp) for lp in self._candidate_logprobs(adapter, items)]
        return ruq_per_idk(scores, [len(p.all_references) for p in pairs], len(self.idk_responses), self.reference)

    def _plot(self, trainer: pl.Trainer, adapter: DialogueModelAdapter, pairs: Sequence[DialoguePair]) -> None:
        pairs = list(pairs[: self.num_plot_prompts])
        beams = self.generate(
            adapter,
            [p.context for p in pairs],
            {"num_beams": self.num_beams, "do_sample": False},
            "RUQ plot: beam search",
        )
        lines = {"reference": [p.response for p in pairs], f"beam ({self.num_beams})": beams}
        for j, s in enumerate(self.idk_responses):
            lines[f"IDK {j + 1}: {s}"] = [s] * len(pairs)
        # one item per prompt: its context is encoded once for all the lines
        items = [(p.context, [rs[i] for rs in lines.values()]) for i, p in enumerate(pairs)]
        logprobs = self._candidate_logprobs(adapter, items)
        if not trainer.is_global_zero:
            return
        fig, ax = new_figure(figsize=(7, 4))
        for k, name in enumerate(lines):
            means, counts = profile_from_logprobs([per_prompt[k] for per_prompt in logprobs])
            # A position only a handful of long responses reach is noise, not a profile.
            keep = counts >= max(1, int(0.1 * len(pairs)))
            ax.plot(np.arange(1, len(means) + 1)[keep], means[keep], marker="o", markersize=3, label=name)
        ax.set_xlabel("token position in the response (EOS included)")
        ax.set_ylabel("mean log p(token)")
        ax.set_title(f"RUQ: per-position log-probability, epoch {trainer.current_epoch}")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        log_figure(trainer, self.log_key("val/ruq_plot"), fig, self.output_dir(trainer))

    def _alerts(self, value: float) -> float:
        reasons = []
        if self.warn_below is not None and value < self.warn_below:
            reasons.append(f"val/ruq = {value:.1f} is below warn_below = {self.warn_below}")
        if self.warn_drop is not None and self.last_val_ruq is not None and self.last_val_ruq - value > self.warn_drop:
            reasons.append(
                f"val/ruq dropped from {self.last_val_ruq:.1f} to {value:.1f} (more than warn_drop = {self.warn_drop})"
            )
        self.last_val_ruq = value
        for r in reasons:
            rank_zero.rank_zero_warn(f'RUQMonitor: {r}: the model increasingly prefers "{self.idk_responses[0]}"')
        return 1.0 if reasons else 0.0

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
            m[RUQ_ALERT] = self._alerts(values["ruq"])
            if self.plot:
                with optional_part(self, trainer, "the RUQ plot"):  # val/ruq and the alert are kept
                    self._plot(trainer, adapter, pairs)

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
            "indices": dict(self._sample_indices),
            "last_val_ruq": self.last_val_ruq,
            "settings": self.settings(),
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.forget_samples()
        if settings_changed(
            self,
            state_dict.get("settings"),
            self.settings(),
            "the prompt samples are drawn again and warn_drop starts afresh",
        ):
            return
        self._restore_sample_indices(state_dict.get("indices", {}))
        self.last_val_ruq = state_dict.get("last_val_ruq")
