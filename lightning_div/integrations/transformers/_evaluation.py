"""One ``Trainer`` evaluation's measurement: the data, Sem-Ent and the lexical metrics, RUQ and its alert, the state.

Built from :mod:`lightning_div.measure` (the Lightning monitors' own measurement); the callback
(:mod:`._callback`) adds the Trainer's hooks, the keys and the reporting.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_div._internal.checks import check_finite_model
from lightning_div.integrations.transformers._data import EvaluationData
from lightning_div.integrations.transformers._keys import eval_key
from lightning_div.measure.alerts import RUQAlert
from lightning_div.measure.ruq import RUQMeasure
from lightning_div.measure.semantic import SemanticMeasure, SemanticResult
from lightning_div.model.adapters import HuggingFaceAdapter
from lightning_div.model.formatting import DialogueLayout

__all__ = ["EvaluationResult", "TrainerEvaluation", "state_from_0_2"]

#: 0.2's names of the settings a checkpoint was saved with -> 1.0's.
_SETTINGS_0_2 = {"num_ruq_prompts": "num_ruq_contexts", "num_train_ruq_prompts": "num_train_contexts"}


def state_from_0_2(saved: Any) -> dict[str, Any] | None:
    """A 0.2 checkpoint's flat state (``DiversityTrainerCallback``'s) in 1.0's nested shape; None stays None.

    0.2 kept ``gold_logged``, ``share_history``, ``vocab_size``, ``last_ruq`` and ``indices`` side by side;
    1.0 nests each part's state (``samples``, ``measure``, ``alert``). Anything else is returned as it
    is (a damaged state is refused where it is restored, with the reason).
    """
    if not isinstance(saved, dict) or "measure" in saved:
        return saved
    settings = saved.get("settings")
    if isinstance(settings, dict):
        settings = {_SETTINGS_0_2.get(k, k): v for k, v in settings.items()}
    measure = {k: saved[k] for k in ("gold_logged", "share_history", "vocab_size") if k in saved}
    return {
        "settings": settings,
        "samples": saved.get("indices", {}),
        "measure": measure,
        "alert": saved.get("last_ruq"),
    }


@dataclass
class EvaluationResult:
    """One evaluation: the values keyed as logged (unprefixed), the semantic result, and the RUQ plot's lines."""

    values: dict[str, float]
    semantic: SemanticResult
    profile: tuple[dict[str, Any], int] | None


class TrainerEvaluation:
    """What :class:`TrainerDiversityMonitor` measures at an evaluation, and its state (see the callback's arguments).

    Args:
        who: the callback, named in messages.
        data: the evaluation data and its fixed samples.
        semantic: Sem-Ent and the lexical metrics.
        ruq: RUQ, or None (no IDK strings).
        alert: RUQ's alert.
        layout: the token layout.
        batch_size: the adapter's batch size.
        max_new_tokens: the generation length limit.
        seed: generation's seed (when it samples).
        dirpath: the clusters' cache directory (None: the one :meth:`measure` is given).
        plot: ``(num_plot_prompts, num_beams)`` of RUQ's per-position plot, or None (no plot).
    """

    def __init__(
        self,
        who: str,
        data: EvaluationData,
        semantic: SemanticMeasure,
        ruq: RUQMeasure | None,
        alert: RUQAlert,
        layout: DialogueLayout,
        batch_size: int,
        max_new_tokens: int,
        seed: int,
        dirpath: str | Path | None,
        plot: tuple[int, int] | None,
    ) -> None:
        self.who, self.data, self.semantic, self.ruq, self.alert = who, data, semantic, ruq, alert
        self.layout, self.batch_size, self.max_new_tokens, self.seed = layout, batch_size, max_new_tokens, seed
        self.dirpath, self.plot = dirpath, plot

    def reseed(self, seed: int) -> None:
        """Draw the samples with ``seed`` (RUQ's with ``seed + 1``, as RUQMonitor draws its validation sample),
        and generate with it: a sample drawn with another seed is drawn again at its next use."""
        for key, sample in self.data.samples.items():
            wanted = seed + 1 if key == "ruq" else seed
            if sample.seed != wanted:
                sample.seed = wanted
                sample.forget()
        self.seed = seed

    def prepare(self, cache_dir: str | Path, device: Any = None) -> None:
        """Read the data and make the clusters ready (cached or fitted once; every process must call it)."""
        gold, sample = self.data.cluster_texts(), self.data.sample()
        self.semantic.prepare(gold, sample, device=device, cache_dir=Path(self.dirpath or cache_dir), who=self.who)

    def adapter(self, model: Any, tokenizer: Any) -> HuggingFaceAdapter:
        """The model as the measurements reach it (built fresh each time: the current weights and device)."""
        return HuggingFaceAdapter(
            model,
            tokenizer,
            self.layout,
            batch_size=self.batch_size,
            max_new_tokens=self.max_new_tokens,
            show_progress=False,
            seed=self.seed,
        )

    def ruq_alert(self, value: float) -> float:
        """1.0 (and a warning, on the first process) when RUQ fell below ``warn_below`` or by more than ``warn_drop``.

        Args:
            value: this measurement's RUQ; it becomes the alert's last value.

        Returns:
            1.0 on an alert, else 0.0.
        """
        idk = self.ruq.idk_responses[0] if self.ruq is not None else "I don't know."
        return self.alert.alert(value, "eval_ruq", self.who, idk)

    def measure(self, model: Any, tokenizer: Any, cache_dir: str | Path, step: int) -> EvaluationResult:
        """Every metric of one evaluation (every process must call it; every process gets the values).

        Args:
            model: the Hugging Face model (unwrapped; it is put in eval mode and restored).
            tokenizer: its tokenizer.
            cache_dir: where fitted clusters are cached when there is no ``dirpath``.
            step: the global step (the share history's x).

        Returns:
            The values keyed as logged without the ``name`` prefix (``eval_sem_ent``, ``ruq`` ...),
            the semantic result and the RUQ plot's lines.
        """
        from lightning_div.model.generation import model_device

        device = model_device(model)
        self.prepare(cache_dir, device)
        adapter = self.adapter(model, tokenizer)
        check_finite_model(model, self.who, adapter)  # NaN weights or logits are named, not measured as empty text
        result = self.semantic.measure(adapter, self.data.sample(), at=step, device=device, who=self.who)
        out = {eval_key(n): v for n, v in result.values.items()}
        profile = None
        if self.ruq is not None:
            values = self.ruq.measure(adapter, self.data.ruq_sample())
            out.update({eval_key(n): v for n, v in values.items()})
            out[eval_key("ruq_alert")] = self.ruq_alert(values["ruq"])
            train_sample = self.data.train_ruq_sample()
            if train_sample:  # un-prefixed keys are the Trainer's training metrics: charted as train/ruq
                out.update(self.ruq.measure(adapter, train_sample))
            if self.plot is not None:  # every process: generation and scoring are sharded
                pairs = self.data.ruq_sample()[: self.plot[0]]
                profile = (self.ruq.profile(adapter, pairs, self.plot[1]), len(pairs))
        return EvaluationResult(out, result, profile)

    def settings(self, train_pairs: bool) -> dict[str, Any]:
        """What a saved state must have been measured with to be restored (the samples and the clusters)."""
        sizes = {k: s.size for k, s in self.data.samples.items()}
        return {
            "num_contexts": sizes["eval"],
            "num_ruq_contexts": sizes["ruq"],
            "num_train_contexts": sizes["train"] if train_pairs else None,
            "seed": self.data.samples["eval"].seed,
            "idk_responses": list(self.ruq.idk_responses) if self.ruq is not None else [],
            "space": self.semantic.space.settings(),
        }

    def state_dict(self) -> dict[str, Any]:
        """Each part's state, nested as the Lightning monitors nest theirs: the samples' indices (``samples``),
        the SemanticMeasure's (``measure``: whether the gold Sem-Ent was logged, the heatmap's columns ...)
        and the alert's (``alert``: the last RUQ)."""
        return {
            "samples": self.data.state_dict(),
            "measure": self.semantic.state_dict(),
            "alert": self.alert.state_dict(),
        }

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`, all or nothing.

        Raises:
            ValueError: a damaged state (a missing or mistyped field); nothing is restored then.
        """
        before = self.state_dict()
        try:
            self._restore(saved)
        except ValueError:
            self._restore(before)
            raise

    def _restore(self, saved: dict[str, Any]) -> None:
        missing = [k for k in ("samples", "measure", "alert") if k not in saved]
        if missing:
            raise ValueError(f"{', '.join(missing)} missing")
        if not isinstance(saved["measure"], dict) or "gold_logged" not in saved["measure"]:
            raise ValueError(f"measure must be an object with gold_logged, got {saved['measure']!r:.80}")
        self.semantic.load_state_dict(saved["measure"])
        self.alert.load_state_dict(saved["alert"])
        self.data.load_state_dict(saved["samples"])
