"""The Hugging Face front end of the monitors: :class:`TrainerDiversityMonitor` (hooks, keys, reporting).

What it measures comes from :mod:`lightning_div.measure`, as the Lightning monitors' does; this module
adapts the ``Trainer``'s hooks, names the keys ``eval_<metric>`` and reports through ``trainer.log``
and the trainer's ``report_to`` trackers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from lightning_div.integrations._frontend import (
    attach,
    run_output_dir,
    stateful,
    tracker_reporter,
    warn_fresh_start,
)
from lightning_div.integrations.transformers._data import EvaluationData
from lightning_div.integrations.transformers._deprecated import check_types, trainer_legacy
from lightning_div.integrations.transformers._evaluation import EvaluationResult, TrainerEvaluation, state_from_0_2
from lightning_div.integrations.transformers._keys import EVAL_PREFIX, eval_key
from lightning_div.keys import check_name
from lightning_div.measure.alerts import RUQAlert
from lightning_div.measure.errors import check_on_error, guarded
from lightning_div.measure.reporting import RunMemory, TrackerReporter
from lightning_div.measure.ruq import RUQMeasure, ruq_profile_figure
from lightning_div.measure.semantic import SemanticMeasure
from lightning_div.model.formatting import DialogueLayout
from lightning_div.pairs import DialoguePair
from lightning_div.semantic.cache import run_cache_dir
from lightning_div.semantic.space import SemanticSpace, given_space
from lightning_div.settings import Generation, Outputs, RUQPlot
from lightning_div.types import PairsSource, ResponsesSource
from lightning_div.verdict import next_alert_record
from lightning_div.views import log_cards_once, log_collapse, log_samples_table

__all__ = ["DEFAULT_SEED", "RUQPlot", "TrainerDiversityMonitor"]

#: The samples' seed before a trainer is attached: ``TrainingArguments``' default ``seed``.
DEFAULT_SEED = 42

#: Where 0.2 kept its state in ``trainer_state.json`` (read on resume, for one release).
_STATE_KEY_0_2 = "lightning_div.DiversityTrainerCallback"


def _measures(
    who: str,
    measures: Sequence[SemanticMeasure | RUQMeasure] | None,
    space: SemanticSpace | None,
    generation: Generation,
    show_progress: bool,
) -> tuple[SemanticMeasure, RUQMeasure | None]:
    """The callback's SemanticMeasure and RUQMeasure: the ones given, or the defaults in ``space``.

    Raises:
        ValueError: ``space`` beside ``measures``, or measures that are not one SemanticMeasure
            and at most one RUQMeasure.
    """
    batch_size = generation.batch_size
    if measures is None:
        space = given_space(who, space, batch_size=batch_size, show_progress=show_progress)
        options = dict(generation.options)
        semantic = SemanticMeasure(space, generation_kwargs=options, batch_size=batch_size, show_progress=show_progress)
        return semantic, RUQMeasure(batch_size=batch_size, show_progress=show_progress)
    if generation.options:
        raise ValueError(
            f"{who}: generation options are the default SemanticMeasure's: with measures=, give them to "
            "the SemanticMeasure (SemanticMeasure(space, generation_kwargs=...))"
        )
    if space is not None:
        raise ValueError(
            f"{who}: space= and measures= were both given: space= is the default measures' space; with "
            "measures=, give the space to the SemanticMeasure (SemanticMeasure(space))"
        )
    given = list(measures)
    semantic_given = [m for m in given if isinstance(m, SemanticMeasure)]
    ruq_given = [m for m in given if isinstance(m, RUQMeasure)]
    others = [type(m).__name__ for m in given if not isinstance(m, (SemanticMeasure, RUQMeasure))]
    if others or len(semantic_given) != 1 or len(ruq_given) > 1:
        raise ValueError(
            f"{who}: measures must be one SemanticMeasure and at most one RUQMeasure, got "
            f"{[type(m).__name__ for m in given]}"
        )
    return semantic_given[0], (ruq_given[0] if ruq_given else None)


class TrainerDiversityMonitor(TrainerCallback):
    """Sem-Ent, lexical diversity and RUQ of the model's responses at every ``Trainer`` evaluation.

    What it logs at each evaluation is listed in :mod:`lightning_div.integrations.transformers`.

    The samples are drawn once and saved in the checkpoint's ``trainer_state.json``, so a resumed
    run measures the same pairs. The measurement itself is :mod:`lightning_div.measure`'s, the
    Lightning monitors' own.

    Like transformers' ``EarlyStoppingCallback``, it reads what ``TrainingArguments`` already holds:
    the samples' seed (``args.seed``), the generation batch size (``args.per_device_eval_batch_size``,
    also the default measures' and space's), the clusters' cache directory
    (``<args.output_dir>/lightning_div_cache``) and whether bars are shown (``not args.disable_tqdm``),
    and the model's tokenizer from the trainer's ``processing_class``. A ``generation=`` or
    ``outputs=`` given explicitly wins (the whole object).

    The clusters are fitted once on ``cluster_texts`` in a
    :class:`~lightning_div.semantic.space.SemanticSpace` (or read from its disk cache: a Lightning
    run with the same encoder, settings and cluster texts wrote the same file).

    What it measures is the measures it is given (``measures=``): one
    :class:`~lightning_div.measure.semantic.SemanticMeasure` (Sem-Ent, the cluster divergence, the
    lexical metrics) and at most one :class:`~lightning_div.measure.ruq.RUQMeasure`; by default both,
    in ``space`` (a private :class:`~lightning_div.semantic.space.SemanticSpace` with the default
    encoder when None). The common case is one line::

        TrainerDiversityMonitor(val_pairs, train_responses, space=SemanticSpace(encoder="minilm")).attach(trainer)

    and any setting of a measure is the measure's own::

        TrainerDiversityMonitor(
            val_pairs,
            train_responses,
            measures=[SemanticMeasure(SemanticSpace(encoder="minilm", num_clusters=8)), RUQMeasure(reference="first")],
        )

    Args:
        eval_pairs: the evaluation dialogues as text: ``[(context, response), ...]`` pairs or any
            source :func:`~lightning_div.datamodules.read_pairs` reads (the trainer's
            ``eval_dataset`` is tokenized, so it cannot be read back).
        cluster_texts: the texts the clusters are fitted on, usually the training responses (a list,
            a file, or a source ``read_pairs`` reads); not needed with given or fitted clusters.
        measures: what to measure: one SemanticMeasure and at most one RUQMeasure (none: no RUQ);
            None = both with their defaults, in ``space``.
        space: the space of the default measures (share one with other monitors); with
            ``measures=``, the space is the SemanticMeasure's (both: an error).
        num_contexts: size of the fixed samples of evaluation contexts, the generation sample
            (drawn with ``args.seed``) and RUQ's (drawn with ``args.seed + 1``); None = all evaluation pairs.
        train_pairs: training dialogues as text (as ``eval_pairs``) for RUQ-train; None = no RUQ-train.
        num_train_contexts: size of RUQ-train's fixed sample (None = all training pairs).
        alert: RUQ's alert (default ``RUQAlert()``: a drop of more than 10 points since the last
            measurement); an alert is a warning and ``eval_ruq_alert`` = 1 (else 0), as RUQMonitor's
            ``val/ruq_alert``. ``RUQAlert(warn_drop=None)`` never alerts.
        layout: the token layout (default ``DialogueLayout()``: DialoGPT's ``turn<eos>...``); it
            must be the one the model is trained with.
        generation: the generation's batch size, length limit and options (None: ``Generation()`` with
            ``args.per_device_eval_batch_size`` as its batch size). The options go to the default
            SemanticMeasure; with ``measures=``, give them to it.
        outputs: the sample table (``log_samples``), the cluster views, progress bars and the cache
            directory (None: ``Outputs()`` with ``show_progress = not args.disable_tqdm``).
        on_error: ``"warn"`` (default): a failed measurement is skipped with a warning and training
            continues; ``"raise"`` re-raises.
        name: goes into every key, ``eval_<name>/sem_ent`` (several monitors in one trainer).
        measure_at_start: measure once before the first training step as well (a baseline, logged at step 0).
        ruq_plot: RUQ's per-position plot (``eval/ruq_plot``, the paper's Figure 1, as RUQMonitor's
            ``plot``) at every evaluation: a :class:`RUQPlot` (its contexts and beam size) or True for
            ``RUQPlot()``. Off by default: its beam search costs more than the rest of RUQ.
        **deprecated: 0.2's keyword arguments, accepted for one release with a ``DeprecationWarning``
            naming the 1.0 form (``gold_responses``, ``num_ruq_prompts``, ``warn_below``, ``seed`` ...).

    Raises:
        ValueError: a bad setting (``on_error``, ``name``, a sample size that is not an integer >= 1),
            measures that are not one SemanticMeasure and at most one RUQMeasure, or ``space`` together
            with ``measures``.
        TypeError: a settings object of the wrong type, or an unknown keyword argument.
    """

    def __init__(
        self,
        eval_pairs: PairsSource | Sequence[DialoguePair],
        cluster_texts: ResponsesSource | None = None,
        *,
        measures: Sequence[SemanticMeasure | RUQMeasure] | None = None,
        space: SemanticSpace | None = None,
        num_contexts: int | None = 256,
        train_pairs: PairsSource | Sequence[DialoguePair] | None = None,
        num_train_contexts: int | None = 256,
        alert: RUQAlert | None = None,
        layout: DialogueLayout | None = None,
        generation: Generation | None = None,
        outputs: Outputs | None = None,
        on_error: str = "warn",
        name: str | None = None,
        measure_at_start: bool = False,
        ruq_plot: RUQPlot | bool | None = None,
        **deprecated: Any,
    ) -> None:
        who = type(self).__name__
        given: dict[str, Any] = {"alert": alert, "generation": generation, "outputs": outputs, "ruq_plot": ruq_plot}
        legacy = trainer_legacy(who, deprecated, given)
        alert, generation, outputs, ruq_plot = given["alert"], given["generation"], given["outputs"], given["ruq_plot"]
        cluster_texts = legacy.renamed.get("cluster_texts", cluster_texts)
        layout = legacy.renamed.get("layout", layout)
        num_train_contexts = legacy.renamed.get("num_train_contexts", num_train_contexts)
        check_types(who, alert=(alert, RUQAlert), generation=(generation, Generation), outputs=(outputs, Outputs))
        check_types(who, layout=(layout, DialogueLayout), ruq_plot=(ruq_plot, (RUQPlot, bool)))
        self.on_error = check_on_error(on_error)
        name = check_name(name)
        #: What was given explicitly (None: read from the trainer's TrainingArguments when attached).
        self.given: dict[str, Any] = {"generation": generation, "outputs": outputs, "seed": legacy.seed}
        gen, out = generation or Generation(), outputs or Outputs()
        semantic, ruq = _measures(who, measures, space, gen, out.show_progress)
        self._defaults = measures is None  # the measures are this monitor's own: it sets their batch size
        self._private_space = measures is None and space is None
        seed = DEFAULT_SEED if legacy.seed is None else legacy.seed
        plot = RUQPlot() if ruq_plot is True else (ruq_plot or None)
        ruq_size = legacy.num_ruq_contexts[0] if legacy.num_ruq_contexts else num_contexts
        #: What an evaluation measures, and its state (:mod:`lightning_div.measure`'s pieces).
        self.evaluation = TrainerEvaluation(
            who,
            EvaluationData(
                who, eval_pairs, cluster_texts, train_pairs, num_contexts, ruq_size, num_train_contexts, seed
            ),
            semantic,
            ruq,
            alert or RUQAlert(),
            layout or DialogueLayout(),
            gen.batch_size,
            gen.max_new_tokens,
            seed,
            out.dirpath,
            (plot.num_contexts, plot.num_beams) if plot else None,
        )
        self.num_contexts, self.train_pairs_arg = num_contexts, train_pairs
        self.tokenizer, self.show_progress, self.name = legacy.tokenizer, out.show_progress, name
        #: RUQ's alert state, since when and why (:func:`~lightning_div.verdict.alert_record`), as the summary
        #: reads it; written to ``alerts/<label>.json`` in the run's files for the report. None: not measured.
        self.alert_record: dict[str, Any] | None = None
        self.log_samples, self.cluster_views, self.measure_at_start = (
            out.log_samples,
            out.cluster_views,
            measure_at_start,
        )
        self.trainer: Any = None
        #: Every measurement's values, ``{"step": ..., "<key>": ...}`` (rank 0 and the others alike).
        self.history: list[dict[str, float]] = []
        #: The responses generated at the last measurement, in the order of :meth:`sample`.
        self.last_responses: list[str] = []
        #: What this run has warned about and logged once (made anew at each training run).
        self.memory = RunMemory()
        self._last: EvaluationResult | None = None

    def read_arguments(self, args: Any) -> None:
        """Take from ``TrainingArguments`` what was not given explicitly: the samples' seed (``args.seed``),
        the generation batch size (``args.per_device_eval_batch_size``) and the progress bars
        (``not args.disable_tqdm``); the cache directory is read at each measurement (``args.output_dir``).

        Called when attached and when training begins (before a checkpoint's samples are restored).
        Only this monitor's own objects are changed: the default measures and a private space, never
        measures or a space the user gave.
        """
        if args is None:
            return
        seed = self.given["seed"] if self.given["seed"] is not None else int(getattr(args, "seed", DEFAULT_SEED))
        self.evaluation.reseed(seed)
        own: list[Any] = [
            m for m in (self.evaluation.semantic, self.evaluation.ruq) if m is not None and self._defaults
        ]
        own += [self.space] if self._private_space else []
        if self.given["generation"] is None:
            batch_size = getattr(args, "per_device_eval_batch_size", None)
            if isinstance(batch_size, int) and batch_size >= 1:
                for part in [self.evaluation, *own]:
                    part.batch_size = batch_size
        if self.given["outputs"] is None:
            self.show_progress = not getattr(args, "disable_tqdm", False)
            for part in own:
                part.show_progress = self.show_progress

    def __repr__(self) -> str:
        return f"{type(self).__name__}(space={self.space!r}, num_contexts={self.num_contexts}, name={self.name!r})"

    @property
    def space(self) -> SemanticSpace:
        """The semantic space it measures in."""
        return self.evaluation.semantic.space

    @property
    def share_history(self) -> list[tuple[int, list[float]]]:
        """``(step, generated share per cluster)`` of every measurement: the heatmap's columns."""
        return self.evaluation.semantic.share_history

    @property
    def last_ruq(self) -> float | None:
        """The last measured ``eval_ruq`` (what ``warn_drop`` compares with)."""
        return self.evaluation.alert.last

    def sample(self) -> list[DialoguePair]:
        """The fixed generation sample (drawn once with ``seed``: the same pairs at every evaluation and after a resume)."""
        return self.evaluation.data.sample()

    # -- wiring ------------------------------------------------------------------------------------

    def attach(self, trainer: Any) -> TrainerDiversityMonitor:
        """Add this callback to ``trainer`` and log through it (``trainer.log``).

        Args:
            trainer: a ``transformers.Trainer`` (TRL's trainers are ones).

        Returns:
            This callback.

        Raises:
            ValueError: another attached TrainerDiversityMonitor with the same ``name`` (they
                would log over each other's keys), or this one attached to another trainer.
        """
        attach(self, trainer)
        self.read_arguments(getattr(trainer, "args", None))
        return self

    def log_key(self, key: str) -> str:
        """``key`` as this callback logs it: ``eval_<metric>`` as ``eval_<name>/<metric>`` and a
        training metric (``ruq``) as ``<name>/ruq`` when a name is set."""
        if key.startswith(EVAL_PREFIX):
            return eval_key(key.removeprefix(EVAL_PREFIX), self.name)
        return f"{self.name}/{key}" if self.name else key

    def figure_key(self, key: str) -> str:
        """A figure's or table's key as the trackers show it: the monitor's ``val/x`` as ``eval/x``
        (``eval/<name>/x`` with a name), beside the scalars' ``eval/<metric>`` charts."""
        return "eval/" + (f"{self.name}/" if self.name else "") + key.removeprefix("val/")

    # -- measurement -------------------------------------------------------------------------------

    def measure(self, model: Any, tokenizer: Any, cache_dir: str | Path) -> dict[str, float]:
        """Every metric of one evaluation, keyed as logged without the ``name`` prefix (:meth:`TrainerEvaluation.measure`).

        Every process must call it (the work is sharded over them); every process gets the values.

        Args:
            model: the Hugging Face model (unwrapped; it is put in eval mode and restored).
            tokenizer: its tokenizer.
            cache_dir: where fitted clusters are cached when the callback has no ``dirpath``.

        Returns:
            ``{"eval_sem_ent": ..., "eval_distinct_1": ..., "eval_ruq": ..., ...}``.
        """
        step = int(self.trainer.state.global_step) if self.trainer is not None else 0
        self._last = self.evaluation.measure(model, tokenizer, cache_dir, step)
        self.last_responses = self._last.semantic.responses
        return dict(self._last.values)

    def reporter(self, output_dir: str | Path) -> TrackerReporter:
        """This callback's reporter: the trainer's ``report_to`` trackers at its global step, files in
        ``<output_dir>/lightning_div/``, scalars through ``trainer.log``, this run's memory."""
        # a copy: Trainer.log adds "epoch" to its dict
        return tracker_reporter(self.trainer, output_dir, lambda values: self.trainer.log(dict(values)), self.memory)

    def log_views(self, output_dir: str | Path) -> None:
        """The last measurement's figures and tables to the trainer's trackers and ``<output_dir>/lightning_div/``.

        Called on the first process only, after :meth:`measure` (nothing here is a collective).
        """
        if self._last is None:
            return
        result, profile = self._last.semantic, self._last.profile
        reporter = self.reporter(output_dir)
        clusters = self.space.clusters
        if self.cluster_views:
            log_cards_once(reporter, clusters, self.figure_key)
        log_collapse(
            reporter, clusters, self.share_history, result.gold_shares, self.cluster_views, self.figure_key, "step"
        )
        if self.log_samples > 0:
            key = self.figure_key("val/samples")
            log_samples_table(
                reporter, key, self.sample(), result.responses, result.ids, result.gold_ids, self.log_samples
            )
        if profile is not None:
            lines, n = profile
            title = f"RUQ: per-position log-probability, step {reporter.step}"
            reporter.figure(self.figure_key("val/ruq_plot"), ruq_profile_figure(lines, n, title))

    def _measure_and_log(
        self, args: TrainingArguments, state: TrainerState, kwargs: dict[str, Any]
    ) -> dict[str, float]:
        if self.trainer is None:
            raise ValueError(
                f"{type(self).__name__} logs through its trainer: add it with callback.attach(trainer), "
                "not Trainer(callbacks=[...]) (a TrainerCallback is never given the trainer)"
            )
        model = kwargs.get("model") or self.trainer.model
        tokenizer = (
            self.tokenizer
            or kwargs.get("processing_class")
            or kwargs.get("tokenizer")  # what transformers before 4.46 hands its callbacks
            or getattr(self.trainer, "processing_class", None)
        )
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a multimodal processor holds the tokenizer
        if tokenizer is None:
            raise ValueError(
                f"{type(self).__name__}: the trainer has no processing_class: build it with "
                "Trainer(..., processing_class=tokenizer)"
            )
        self._last = None
        who = type(self).__name__
        with (
            self.memory.scope(),
            guarded(self.on_error, self.memory.warn_once, who, "the measurement", f"step {state.global_step}") as m,
        ):
            m.values.update(self.measure(model, tokenizer, run_cache_dir(run_output_dir(args))))
        if self._last is not None and m.error is None and state.is_world_process_zero:
            self.log_views(run_output_dir(args))
        m.values[eval_key("diversity_runtime")] = m.seconds
        reporter = self.reporter(run_output_dir(args))
        logged = reporter.scalars({self.log_key(k): float(v) for k, v in m.values.items()})
        if m.error is None:  # the run's record of what these numbers were measured with
            measures = [x for x in (self.evaluation.semantic, self.evaluation.ruq) if x is not None]
            who = type(self).__name__ + (f"-{self.name}" if self.name else "")
            reporter.record_settings(who, measures, self.settings())
            alert = m.values.get(eval_key("ruq_alert"))
            if alert is not None:  # RUQ's alert, its reasons with the run, for its report
                self.alert_record = next_alert_record(
                    self.alert_record,
                    who,
                    "RUQ alert" if alert else None,
                    state.global_step,
                    "step",
                    self.evaluation.alert.reasons,
                    self.log_key(eval_key("ruq_alert")),
                )
                reporter.record_alert(who, self.alert_record)
        self.history.append({"step": float(state.global_step), **logged})
        stateful(state)[self.state_key()] = self.state_dict()  # saved with every later checkpoint
        return logged

    # -- state -------------------------------------------------------------------------------------

    def state_key(self) -> str:
        """Where this callback's state sits in ``TrainerState.stateful_callbacks`` (one key per ``name``)."""
        return "lightning_div.TrainerDiversityMonitor" + (f"[{self.name}]" if self.name else "")

    def settings(self) -> dict[str, Any]:
        """What a saved state must have been measured with to be restored (the samples and the clusters)."""
        return self.evaluation.settings(self.train_pairs_arg is not None)

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to continue as the uninterrupted one: ``{"settings": ..., "samples": ...,
        "measure": ..., "alert": ...}``, each part's own state (:meth:`TrainerEvaluation.state_dict`)."""
        return {"settings": self.settings(), **self.evaluation.state_dict()}

    def load_state_dict(self, saved: Any) -> None:
        """Restore :meth:`state_dict`'s values. A state saved with other settings, or a damaged one
        (a missing or mistyped field), is not restored: a warning says why and the callback starts afresh."""
        if not isinstance(saved, dict) or saved.get("settings") != self.settings():
            got = saved.get("settings") if isinstance(saved, dict) else saved
            reason = f"was saved with other settings ({got!r:.200}, now {self.settings()!r})"
        else:
            try:
                self.evaluation.load_state_dict(saved)
                return
            except ValueError as err:
                reason = f"in trainer_state.json is damaged ({err})"
        warn_fresh_start(type(self).__name__, reason)

    # -- hooks -------------------------------------------------------------------------------------

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Check the inputs, restore the state a resumed checkpoint holds, and measure a baseline before
        the first step (``measure_at_start``).

        The state travels in the checkpoint's ``trainer_state.json`` (``stateful_callbacks``, under
        :meth:`state_key`), which the Trainer has loaded by now, wherever the checkpoint was resumed from.

        Raises:
            ValueError: a misconfigured callback (:meth:`EvaluationData.check`).
        """
        self.memory = RunMemory()  # a new run: its warnings and once-only tables are shown again
        self.read_arguments(args)  # before a checkpoint's samples are restored: they were drawn with this seed
        if state.global_step > 0:
            held = stateful(state)
            saved = held.get(self.state_key())
            if saved is None:  # a checkpoint of 0.2 (DiversityTrainerCallback), resumed under 1.0
                saved = state_from_0_2(held.get(_STATE_KEY_0_2 + (f"[{self.name}]" if self.name else "")))
            if saved is not None:
                self.load_state_dict(saved)
        else:  # a fresh run logs its gold Sem-Ent, even after an evaluate() before train()
            self.evaluation.semantic.gold_logged = False
        self.evaluation.data.check(self.space)  # a misconfigured callback raises now, not at the first evaluation
        if self.measure_at_start and state.global_step == 0:
            self._measure_and_log(args, state, kwargs)

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        """Measure, log through ``trainer.log``, and add the values to the evaluation's metrics."""
        logged = self._measure_and_log(args, state, kwargs)
        metrics = kwargs.get("metrics")
        if isinstance(metrics, dict):  # what trainer.evaluate() returns: the evaluation's metrics, not RUQ-train
            metrics.update({k: v for k, v in logged.items() if k.startswith(EVAL_PREFIX)})
