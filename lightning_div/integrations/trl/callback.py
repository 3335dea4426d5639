"""GroupDiversityCallback: GRPO/RLOO group diversity from the rollouts the trainer already made.

```python
trainer = GRPOTrainer(model=model, reward_funcs=[my_reward], args=args, train_dataset=prompts)
GroupDiversityCallback(space=SemanticSpace(encoder="minilm", num_clusters=8)).attach(trainer)
trainer.train()  # trainer.state.log_history: {"diversity/group_sem_ent": ..., "reward": ..., "step": ...}
```

At every logging step it measures the latest generation batch the trainer sampled (TRL keeps
it, gathered from every process, for its completions table; nothing is generated here), cut
into the prompt groups of ``num_generations``:

* ``diversity/group_sem_ent``: the mean over groups of the entropy of the group's clusters;
* ``diversity/group_clusters``: the mean number of distinct clusters per group;
* ``diversity/collapsed_groups``: the share of groups whose completions all fall in one cluster;
* ``diversity/group_distinct_2``: distinct-2 within each group, averaged;
* over all the step's completions: ``diversity/sem_ent``, ``diversity/distinct_1``,
  ``diversity/distinct_2``, ``diversity/ead``, ``diversity/empty_share`` (the share of empty
  completions: from half of them, a warning); and ``diversity/runtime`` (seconds);
* degeneration signals: ``diversity/group_top_word_share`` (the most frequent word's share of
  a group's words), ``diversity/length_cut_share`` (the completions cut at the length limit, from
  TRL's ``completions/clipped_ratio`` of the measured batch) and, with ``reference_model=``,
  ``diversity/reference_nll`` (mean NLL under that frozen model);
* ``diversity/collapse_alert`` and ``diversity/breakdown_alert`` (0/1): group Sem-Ent fell
  against its own start (collapse), or the text fell apart (breakdown; see
  :class:`~lightning_div.measure.group.GroupAlert`), each also said once in a warning.

The values join the trainer's own metrics of that step (TRL's ``reward``, ``entropy`` ...):
they go through the trainer's ``log`` into ``trainer.state.log_history`` and every
``report_to`` tracker. On the first process a table of one group per step (the one with the
fewest clusters) goes to the trackers that take tables and to
``<output_dir>/lightning_div/``.

The clusters come from a :class:`~lightning_div.semantic.space.SemanticSpace` fitted once, on
reference responses when given (``reference_responses``, or the training dataset's
``reference_column``), else on the first measured step's completions, and kept for the whole
run, so the numbers of different steps are measured against the same clusters.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from lightning_div._internal.checks import optional_texts
from lightning_div._internal.distributed import rank_and_world
from lightning_div.integrations._frontend import (
    attach,
    run_output_dir,
    stateful,
    tracker_reporter,
    warn_fresh_start,
)
from lightning_div.integrations.trl.rollouts import check_grouped, completion_text, completion_texts
from lightning_div.keys import check_name
from lightning_div.measure.errors import check_on_error, guarded
from lightning_div.measure.group import ALERT_SIGNALS, GroupAlert, GroupMeasure, group_metrics
from lightning_div.measure.reporting import RunMemory, TrackerReporter
from lightning_div.metrics.group import split_groups
from lightning_div.semantic.cache import run_cache_dir
from lightning_div.semantic.space import SemanticSpace, given_space
from lightning_div.types import Options
from lightning_div.verdict import next_alert_record

__all__ = ["PREFIX", "GroupDiversityCallback", "group_metrics", "rollouts_of"]

#: What its alert's reasons call each threshold: this callback's own arguments, as the user set them.
ALERT_ARGUMENTS = {
    "top_word_share": "breakdown_top_word",
    "cut_rise": "breakdown_cut_rise",
    "nll_rise": "breakdown_nll_rise",
}

#: The prefix of every key this front end logs (TRL's own keys have none: ``reward``, ``entropy``).
PREFIX = "diversity/"


def _fingerprint(completions: Sequence[Any]) -> str:
    """A generation batch's identity (its completions, compared by their repr)."""
    return hashlib.sha256(repr(list(completions)).encode()).hexdigest()


def rollouts_of(trainer: Any) -> tuple[list[Any], list[Any], int]:
    """The latest generation batch of a TRL ``GRPOTrainer`` / ``RLOOTrainer``: ``(prompts, completions, G)``.

    The one place that reads TRL's internals: ``trainer._logs["prompt"]`` and
    ``["completion"]`` (TRL gathers them from every process, in the global order where each
    prompt's G completions are consecutive, and keeps the latest generation batch) and
    ``trainer.num_generations``.

    Raises:
        TypeError: a trainer without them (not a GRPO/RLOO trainer, or a TRL that keeps them elsewhere).
    """
    logs = getattr(trainer, "_logs", None)
    g = getattr(trainer, "num_generations", None)
    if not isinstance(logs, dict) or "completion" not in logs or "prompt" not in logs or not isinstance(g, int):
        raise TypeError(
            f"{type(trainer).__name__} keeps no rollouts where GroupDiversityCallback reads them "
            "(trainer._logs['completion'] and trainer.num_generations: TRL's GRPOTrainer and RLOOTrainer)"
        )
    return list(logs["prompt"]), list(logs["completion"]), g


class GroupDiversityCallback(TrainerCallback):
    """Group Sem-Ent, clusters per group and collapsed groups of every GRPO/RLOO logging step.

    Add it with :meth:`attach` (it reads the trainer's rollouts, which a ``TrainerCallback``
    given in ``callbacks=[...]`` cannot reach: given there, it warns once and measures nothing).
    With ``logging_steps > 1`` a log row's values are those of the latest generation batch
    before the log (TRL's ``reward`` beside them averages every batch since the last log).
    Evaluation rollouts are never measured; a resumed run measures in the interrupted run's
    clusters (:meth:`state_dict`, saved in ``trainer_state.json``). Under ``accelerate launch`` / ``torchrun`` every
    process measures the same gathered batch, the embeddings sharded over the processes: 1 and N
    processes give the same values.

    Args:
        space: the :class:`~lightning_div.semantic.space.SemanticSpace` to measure in (its encoder,
            clusters, k ...; share it with a :class:`~lightning_div.integrations.trl.SemanticGroupReward`);
            None = a private one with the default settings.
        reference_responses: texts to fit the clusters on (and to count EAD's vocabulary from).
        reference_column: a column of the trainer's ``train_dataset`` holding reference responses
            (text or conversational), used when ``reference_responses`` is None.
        lexical_metrics: the lexical metrics over the whole batch.
        lexical_options: ``tokenizer`` / ``lowercase`` / ``base`` of the lexical metrics.
        vocab_size: V of EAD; default: counted from the references, else from the first measured step.
        dirpath: the clusters' cache directory (default ``<output_dir>/lightning_div_cache``).
        device: where the encoder runs (None: CUDA if there is one).
        batch_size: texts per encoder batch (of the private space).
        log_samples: log a table of one group per step (the one with the fewest clusters).
        on_error: ``"warn"`` (default): a failed measurement is skipped with a warning; ``"raise"``.
        name: goes into every key, ``diversity/<name>/group_sem_ent`` (several callbacks in one trainer).
        warn_drop: alert (collapse) when group Sem-Ent falls by this share of its start (the mean
            of the first ``alert_start_steps`` measured steps; None: never).
        warn_below: alert (collapse) when group Sem-Ent falls below this many nats (None: never).
        alert_start_steps: measured steps that make each signal's start, and the window of "now".
        breakdown_top_word: name the alert breakdown when the most frequent word's share of a
            group's words reaches this (None: never).
        breakdown_cut_rise: ... when the share cut at the length limit rose this much over its start.
        breakdown_nll_rise: ... when the reference NLL rose this many nats over its start.
        reference_model: a frozen model to score the completions' NLL under (e.g. the policy
            before training; batched, no gradient; None: no NLL).
        reference_tokenizer: its tokenizer (default: the trainer's ``processing_class``).

    Raises:
        ValueError: a bad ``on_error``, ``name``, lexical setting or alert threshold.
        TypeError: a ``space`` that is not a SemanticSpace.
    """

    def __init__(
        self,
        *,
        space: SemanticSpace | None = None,
        reference_responses: Sequence[str] | None = None,
        reference_column: str | None = None,
        lexical_metrics: Sequence[str] = ("distinct_1", "distinct_2", "ead"),
        lexical_options: Options | None = None,
        vocab_size: int | None = None,
        dirpath: str | Path | None = None,
        device: Any = None,
        batch_size: int = 32,
        log_samples: bool = True,
        on_error: str = "warn",
        name: str | None = None,
        warn_drop: float | None = 0.25,
        warn_below: float | None = None,
        alert_start_steps: int = 5,
        breakdown_top_word: float | None = 0.4,
        breakdown_cut_rise: float | None = 0.3,
        breakdown_nll_rise: float | None = 1.0,
        reference_model: Any = None,
        reference_tokenizer: Any = None,
    ) -> None:
        check_on_error(on_error)
        #: The collapse / breakdown alert (its state is checkpointed with the run).
        self.alert = GroupAlert(
            warn_drop,
            warn_below,
            alert_start_steps,
            breakdown_top_word,
            breakdown_cut_rise,
            breakdown_nll_rise,
            names=ALERT_ARGUMENTS,
        )
        #: What it measures (:class:`~lightning_div.measure.group.GroupMeasure`); this callback adds hooks,
        #: keys, the alert and reporting.
        self.group = GroupMeasure(
            given_space(type(self).__name__, space, batch_size=batch_size, show_progress=False),
            lexical_metrics,
            lexical_options,
            vocab_size,
            device,
            reference_model,
            reference_tokenizer,
        )
        self.reference_responses = optional_texts(reference_responses, type(self).__name__, "reference_responses")
        self.reference_column = reference_column
        self.dirpath = dirpath
        self.log_samples = log_samples
        self.on_error = on_error
        self.name = check_name(name)
        self.trainer: Any = None
        #: Every measurement, ``{"step": ..., "diversity/...": ...}`` (every process alike).
        self.history: list[dict[str, float]] = []
        self._last: tuple[str, dict[str, float]] | None = None
        #: What this run has warned about (made anew at each training run).
        self.memory = RunMemory()
        #: Whether the last measurement took its cluster ids from a SemanticGroupReward sharing the space.
        self.reused_reward_ids = False
        #: The rollouts buffer as the last evaluation left it (not a training batch).
        self._eval_fingerprint: str | None = None
        #: The alert's state, since when and why (:func:`~lightning_div.verdict.alert_record`), as the summary
        #: reads it; written to ``alerts/<label>.json`` in the run's files for the report.
        self.alert_record: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(space={self.space!r}, name={self.name!r})"

    @property
    def space(self) -> SemanticSpace:
        """The semantic space it measures in."""
        return self.group.space

    @property
    def vocab_size(self) -> int | None:
        """EAD's V (counted at the first :meth:`prepare` when not given)."""
        return self.group.vocab_size

    @vocab_size.setter
    def vocab_size(self, value: int | None) -> None:
        self.group.vocab_size = value

    def attach(self, trainer: Any) -> GroupDiversityCallback:
        """Add this callback to a TRL ``GRPOTrainer`` or ``RLOOTrainer``.

        Args:
            trainer: the trainer.

        Returns:
            This callback.

        Raises:
            TypeError: a trainer that keeps no rollouts (:func:`rollouts_of`).
            ValueError: attached to another trainer already, or another GroupDiversityCallback with the same name.
        """
        rollouts_of(trainer)
        attach(self, trainer)
        return self

    @property
    def label(self) -> str:
        """The class, and ``-<name>`` with a name: the name of its records in the run's files."""
        return type(self).__name__ + (f"-{self.name}" if self.name else "")

    def key(self, metric: str) -> str:
        """``diversity/<metric>``, or ``diversity/<name>/<metric>`` with a name: the one place the prefix is added."""
        return f"{PREFIX}{self.name}/{metric}" if self.name else PREFIX + metric

    # -- the clusters ------------------------------------------------------------------------------

    def references(self) -> list[str] | None:
        """The reference responses: given, or read from the training dataset's ``reference_column``; None without."""
        if self.reference_responses is not None:
            return self.reference_responses
        if self.reference_column is None or self.trainer is None:
            return None
        dataset = getattr(self.trainer, "train_dataset", None)
        columns = getattr(dataset, "column_names", None) or []
        if self.reference_column not in columns:
            raise ValueError(
                f"{type(self).__name__}: reference_column={self.reference_column!r} is not a column of the "
                f"training dataset (it has {list(columns)})"
            )
        return [completion_text(r, i) for i, r in enumerate(dataset[self.reference_column])]  # type: ignore[index]

    def prepare(self, fit_on: Sequence[str] | None, cache_dir: str | Path) -> None:
        """Fit (or read) the clusters once, on the references else ``fit_on``, and count EAD's vocabulary;
        every process must call it."""
        if self.group.ready:
            return  # every later step: nothing to read again
        references = self.references()
        self.group.prepare(references if references is not None else fit_on, Path(self.dirpath or cache_dir))

    # -- measurement -------------------------------------------------------------------------------

    def measure(
        self,
        completions: Sequence[Any],
        num_generations: int,
        cache_dir: str | Path,
        prompts: Sequence[Any] | None = None,
        cut_share: float | None = None,
    ) -> dict[str, float]:
        """The metrics of one step's completions (the whole batch, every process the same), keyed as logged.

        Args:
            completions: the whole generation batch, each prompt's G consecutive (text or conversational).
            num_generations: G.
            cache_dir: the clusters' cache directory when neither the space nor the callback has one.
            prompts: their prompts (needed for the reference NLL).
            cut_share: the share of these completions cut at the length limit, when known.

        Returns:
            ``{"diversity/group_sem_ent": ..., ...}`` (with ``name``: ``diversity/<name>/...``).
        """
        texts = completion_texts(completions)
        self.prepare(texts, cache_dir)
        ids = self._reward_ids(texts)
        self.reused_reward_ids = ids is not None
        with_nll = self.group.reference_model is not None and prompts is not None
        values = self.group.measure(
            texts,
            num_generations,
            ids=ids,
            cut_share=cut_share,
            prompts=[completion_text(q, i) for i, q in enumerate(prompts)] if with_nll and prompts else None,
            tokenizer=getattr(self.trainer, "processing_class", None),
            who=type(self).__name__,
        )
        values.update(self.check_alert(values))
        return {self.key(k): v for k, v in values.items()}

    def check_alert(self, values: dict[str, float], step: int | None = None) -> dict[str, float]:
        """Feed one measurement to the alert; warn once per kind (first process); the 0/1 alert values.

        Args:
            values: the measurement, by unprefixed name (:meth:`GroupMeasure.measure`'s).
            step: the step, in the warning (default: the trainer's global step).

        Returns:
            ``{"collapse_alert": 0/1, "breakdown_alert": 0/1}`` (unprefixed).
        """
        import warnings

        kind, reasons = self.alert.update({k: values[k] for k in ALERT_SIGNALS if k in values})
        if step is None:
            step = getattr(getattr(self.trainer, "state", None), "global_step", None)
        self.alert_record = next_alert_record(
            self.alert_record, self.label, kind, step, "step", reasons, self.key(f"{kind}_alert")
        )
        if kind is not None and kind not in self.alert.warned:
            self.alert.warned.add(kind)
            what = (
                "the text broke down (degeneration, not a collapse of diversity among good answers)"
                if kind == "breakdown"
                else "group diversity collapsed"
            )
            if rank_and_world()[0] == 0:
                warnings.warn(
                    f"{type(self).__name__}: step {step}: {what}: {'; '.join(reasons)}", RuntimeWarning, stacklevel=2
                )
        return {"collapse_alert": float(kind == "collapse"), "breakdown_alert": float(kind == "breakdown")}

    def sample_rows(
        self, step: int, prompts: Sequence[Any], completions: Sequence[Any], ids: np.ndarray, num_generations: int
    ) -> list[list[Any]]:
        """The rows of the step's sample table: the group with the fewest clusters (the first such group)."""
        groups = split_groups(list(range(len(completions))), num_generations)
        if not groups:
            return []
        best = min(range(len(groups)), key=lambda k: len(np.unique(ids[groups[k]])))
        return [
            [step, best, completion_text(prompts[i], i), completion_text(completions[i], i), int(ids[i])]
            for i in groups[best]
        ]

    # -- state -------------------------------------------------------------------------------------

    def state_key(self) -> str:
        """Where this callback's state sits in ``TrainerState.stateful_callbacks`` (one key per ``name``)."""
        return "lightning_div.GroupDiversityCallback" + (f"[{self.name}]" if self.name else "")

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to measure as the uninterrupted one: the clusters file of the space (and
        of every SemanticGroupReward's space in the trainer), EAD's vocabulary size and the alert's state."""
        return {
            "settings": self.space.settings(),
            **self.group.state_dict(),  # "space" and "vocab_size"
            "reward_spaces": [fn.space.state_dict() for fn in self._group_rewards()],
            "alert": self.alert.state_dict(),
        }

    def load_state_dict(self, saved: Any) -> None:
        """Restore :meth:`state_dict`'s values. A state saved with other space settings, or a damaged one,
        is not restored: a warning says why and the callback starts afresh (the clusters fitted again)."""
        if not isinstance(saved, dict) or saved.get("settings") != self.space.settings():
            got = saved.get("settings") if isinstance(saved, dict) else saved
            reason = f"was saved with other settings ({got!r:.200}, now {self.space.settings()!r})"
        else:
            try:
                spaces = saved.get("reward_spaces", [])
                if not isinstance(spaces, list):
                    raise ValueError("no space state")
                self.alert.load_state_dict(saved.get("alert"))
                self.group.load_state_dict(saved)
                for fn, space_state in zip(self._group_rewards(), spaces):
                    if fn.space is not self.space and isinstance(space_state, dict):
                        fn.space.load_state_dict(space_state)
                return
            except ValueError as err:
                self.alert = GroupAlert(
                    self.alert.warn_drop,
                    self.alert.warn_below,
                    self.alert.start_steps,
                    self.alert.top_word_share,
                    self.alert.cut_rise,
                    self.alert.nll_rise,
                    names=ALERT_ARGUMENTS,
                )
                reason = f"in trainer_state.json is damaged ({err})"
        warn_fresh_start(type(self).__name__, reason)

    # -- hooks -------------------------------------------------------------------------------------

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Restore a resumed checkpoint's state, then fit (or read) the clusters on the reference responses.

        The state travels in the checkpoint's ``trainer_state.json`` (``stateful_callbacks``, under
        :meth:`state_key`), which the Trainer has loaded by now: a resumed run reads the clusters the
        interrupted one used instead of fitting them on the resumed batch.
        """
        import warnings

        self.memory = RunMemory()  # a new run: its warnings are shown again
        cache_dir = run_cache_dir(run_output_dir(args), self.dirpath)
        if self.trainer is None:
            warnings.warn(
                f"{type(self).__name__} was given to the trainer in callbacks=[...]: a TrainerCallback cannot reach "
                "the trainer's rollouts, so it measures nothing; build the trainer first, then call "
                f"{type(self).__name__}(...).attach(trainer)",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        for fn in self._group_rewards():  # the reward caches its clusters in this run's folder too
            if fn.dirpath is None:
                fn.run_cache_dir = cache_dir
        if getattr(state, "global_step", 0) > 0:
            saved = stateful(state).get(self.state_key())
            if saved is not None:
                self.load_state_dict(saved)
        self.prepare(None, cache_dir)

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        """Mark the rollouts buffer as the evaluation's: they are not measured as a training step's."""
        if self.trainer is not None:
            try:
                self._eval_fingerprint = _fingerprint(rollouts_of(self.trainer)[1])
            except TypeError:
                self._eval_fingerprint = None

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        """At a logging step, measure the latest rollouts and add the values to the step's log.

        Only training rollouts are measured: when the buffer still holds an evaluation's rollouts
        (the step reused a generation batch made before the evaluation), the values of that
        training batch are logged again.
        """
        if not control.should_log or self.trainer is None:
            return
        prompts, completions, g = rollouts_of(self.trainer)
        # one generation batch serves several steps when steps_per_generation > 1: measured once
        fingerprint = _fingerprint(completions)
        evaluation = fingerprint == self._eval_fingerprint
        if evaluation and self._last is None:
            return  # nothing of training measured yet
        reporter = self.reporter(args)
        who, when = type(self).__name__, f"step {state.global_step}"
        with guarded(self.on_error, self.memory.warn_once, who, "the measurement", when) as m:
            if evaluation or (self._last is not None and self._last[0] == fingerprint):
                assert self._last is not None
                m.values.update(self._last[1])
            else:
                check_grouped(prompts, g)
                m.values.update(
                    self.measure(
                        completions,
                        g,
                        run_cache_dir(run_output_dir(args), self.dirpath),
                        prompts,
                        self._cut_share(),
                    )
                )
                self._last = (fingerprint, dict(m.values))
                if self.log_samples and state.is_world_process_zero:
                    rows = self.sample_rows(state.global_step, prompts, completions, self.group.last_ids, g)
                    reporter.table(self.key("group_sample"), ["step", "group", "prompt", "completion", "cluster"], rows)
        if m.error is not None:
            return
        # the run's record of what these numbers were measured with
        reporter.record_settings(self.label, [self.group])
        if self.alert_record is not None:  # the alert's reasons with the run, for its report
            reporter.record_alert(self.label, self.alert_record)
        m.values[self.key("runtime")] = m.seconds
        self.history.append({"step": float(state.global_step), **reporter.scalars(m.values)})
        stateful(state)[self.state_key()] = self.state_dict()  # saved with every later checkpoint

    def reporter(self, args: TrainingArguments) -> TrackerReporter:
        """This callback's reporter: the trainer's ``report_to`` trackers at its global step, files in
        ``<output_dir>/lightning_div/``, scalars into the step's own log, this run's memory."""
        return tracker_reporter(self.trainer, run_output_dir(args), self._log, self.memory)

    # -- inside ------------------------------------------------------------------------------------

    def _group_rewards(self) -> list[Any]:
        """The trainer's SemanticGroupRewards, in ``reward_funcs`` order."""
        from lightning_div.integrations.trl.reward import SemanticGroupReward

        return [fn for fn in getattr(self.trainer, "reward_funcs", None) or [] if isinstance(fn, SemanticGroupReward)]

    def _reward_ids(self, texts: list[str]) -> np.ndarray | None:
        """The ids a SemanticGroupReward of this trainer, in this space, assigned to these very texts this step."""
        from lightning_div.integrations.trl.reward import SemanticGroupReward

        for fn in getattr(self.trainer, "reward_funcs", None) or []:
            if isinstance(fn, SemanticGroupReward):
                ids = fn.cluster_ids(texts, self.space)
                if ids is not None:
                    return ids
        return None

    def _cut_share(self) -> float | None:
        """The latest generation batch's share cut at the length limit, as TRL measured it (None: unknown).

        TRL's GRPO/RLOO trainers append each generation batch's ``completions/clipped_ratio`` (the
        completions that did not end with EOS, gathered from every process) to
        ``_metrics["train"]`` until the next log; the last one is the batch in ``_logs``.
        """
        metrics = getattr(self.trainer, "_metrics", None)
        ratios = metrics.get("train", {}).get("completions/clipped_ratio") if isinstance(metrics, dict) else None
        if not ratios:
            return None
        value = float(ratios[-1])
        return value if np.isfinite(value) else None

    def _log(self, values: dict[str, float]) -> None:
        """Into the step's own log: TRL's trainers average ``_metrics["train"]`` into the log they write at
        this step (with ``reward``, ``entropy`` ...), through ``trainer.log``; another trainer gets its own
        ``trainer.log`` call."""
        metrics = getattr(self.trainer, "_metrics", None)
        if isinstance(metrics, dict) and "train" in metrics:
            for k, v in values.items():
                metrics["train"][k].append(v)
        else:
            self.trainer.log(dict(values))
