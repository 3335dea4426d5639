"""GroupDiversityMonitor: GRPO/RLOO group diversity from the rollouts the trainer already made.

```python
diversity = GroupDiversityMonitor(space=SemanticSpace(encoder="minilm", num_clusters=8))
trainer = GRPOTrainer(model=model, reward_funcs=[my_reward, diversity], args=args, train_dataset=prompts)
diversity.attach(trainer)
trainer.train()  # trainer.state.log_history: {"diversity/group_sem_ent": ..., "reward": ..., "step": ...}
```

The monitor is also one of the trainer's reward functions, one that adds 0.0 to every reward:
TRL (>= 1.0) calls it once per generation batch with the completions, their token ids,
``trainer_state`` and ``log_metric`` (its public reward contract; nothing private of TRL is
read, nothing is generated here). It gathers every process's slice and measures the whole
batch, cut into the prompt groups of ``num_generations``:

* ``diversity/group_sem_ent``: the mean over groups of the entropy of the group's clusters;
* ``diversity/group_clusters``: the mean number of distinct clusters per group;
* ``diversity/collapsed_groups``: the share of groups whose completions all fall in one cluster;
* ``diversity/group_distinct_2``: distinct-2 within each group, averaged;
* over all the step's completions: ``diversity/sem_ent``, ``diversity/distinct_1``,
  ``diversity/distinct_2``, ``diversity/ead``, ``diversity/empty_share`` (the share of empty
  completions: from half of them, a warning); and ``diversity/runtime`` (seconds);
* degeneration signals: ``diversity/group_top_word_share`` (the most frequent word's share of
  a group's words), ``diversity/length_cut_share`` (the completions cut at the length limit: the last
  token id neither an EOS nor the pad id, TRL's own ``completions/clipped_ratio`` rule) and, with
  ``ref_model=``,
  ``diversity/reference_nll`` (mean NLL under that frozen model);
* ``diversity/collapse_alert`` and ``diversity/breakdown_alert`` (0/1): group Sem-Ent fell
  against its own start (collapse), or the text fell apart (breakdown; see
  :class:`~lightning_div.measure.alerts.GroupAlert`), each also said once in a warning.

The values go to TRL's ``log_metric``: TRL averages them over the logging interval and the
processes into its own log row (beside ``reward``, ``entropy`` ...), through ``trainer.log`` into
``trainer.state.log_history`` and every ``report_to`` tracker. On the first process a table of
one group per measured batch (the one with the fewest clusters) goes to the trackers that take
tables and to ``<output_dir>/lightning_div/``.

The clusters come from a :class:`~lightning_div.semantic.space.SemanticSpace` fitted once, on
the cluster texts when given (``cluster_texts``, or the training dataset's
``cluster_column``), else on the first measured step's completions, and kept for the whole
run, so the numbers of different steps are measured against the same clusters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from lightning_div._internal.checks import optional_texts
from lightning_div._internal.compat.trl import rollouts_of
from lightning_div._internal.deprecation import moved_names
from lightning_div.integrations._frontend import (
    attach,
    run_output_dir,
    stateful,
    tracker_reporter,
    warn_fresh_start,
)
from lightning_div.integrations.trl._deprecated import GROUP_LEXICAL, monitor_legacy
from lightning_div.integrations.trl.alert import alert_values, feed_alert, fresh_alert
from lightning_div.integrations.trl.reward import reward_cluster_ids
from lightning_div.integrations.trl.rollouts import (
    RolloutBatch,
    column_texts,
    completion_text,
    completion_texts,
    end_token_ids,
    fewest_clusters_rows,
    gather_rollouts,
    num_generations_of,
    reward_call,
)
from lightning_div.keys import check_name
from lightning_div.measure.alerts import GroupAlert
from lightning_div.measure.errors import check_on_error, guarded
from lightning_div.measure.group import GroupMeasure, group_metrics
from lightning_div.measure.reporting import RunMemory, TrackerReporter
from lightning_div.semantic.cache import run_cache_dir
from lightning_div.semantic.space import SemanticSpace, given_space
from lightning_div.settings import Lexical, Outputs
from lightning_div.verdict import next_alert_record

__all__ = ["PREFIX", "GroupDiversityMonitor", "end_token_ids", "group_metrics", "rollouts_of"]

#: The prefix of every key this front end logs (TRL's own keys have none: ``reward``, ``entropy``).
PREFIX = "diversity/"


class GroupDiversityMonitor(TrainerCallback):
    """Group Sem-Ent, clusters per group and collapsed groups of every GRPO/RLOO generation batch.

    Build it first, put it in the trainer's ``reward_funcs`` (it is a reward function that returns
    0.0 for every completion, so it adds nothing to any reward whatever ``reward_weights`` says),
    then :meth:`attach` it: ``reward_funcs=[my_reward, diversity]``, then
    ``diversity.attach(trainer)``. TRL (>= 1.0) calls it with each process's slice of every
    generation batch; it measures the whole batch once and hands each value to TRL's
    ``log_metric``, so a log row holds the mean over the generation batches since the last log,
    as TRL's ``reward`` does (the 0/1 alerts: the share of those batches in alert). TRL logs its
    column as ``rewards/<__name__>/mean`` (always 0). Given only in ``callbacks=[...]`` it warns once and measures nothing. Evaluation rollouts are never measured
    (TRL's rule: the model is not in training mode); a resumed run measures in the interrupted
    run's clusters (:meth:`state_dict`, saved in ``trainer_state.json``). Under ``accelerate launch``
    / ``torchrun`` every process measures the same gathered batch, the embeddings sharded over the
    processes: 1 and N processes give the same values.

    The space is shared, not found: give a :class:`~lightning_div.integrations.trl.SemanticGroupReward`
    and the monitor the same :class:`~lightning_div.semantic.space.SemanticSpace` object and it is
    fitted once and checkpointed once, by this monitor (in its state); placed after the reward, the
    monitor reuses the reward's cluster ids of the step. The monitor sets nothing on the reward.

    Args:
        space: the :class:`~lightning_div.semantic.space.SemanticSpace` to measure in (its encoder,
            clusters, k ...; share it with a :class:`~lightning_div.integrations.trl.SemanticGroupReward`);
            None = a private one with the default settings.
        cluster_texts: texts to fit the clusters on (and to count EAD's vocabulary from).
        cluster_column: a column of the trainer's ``train_dataset`` holding the cluster texts
            (text or conversational), used when ``cluster_texts`` is None.
        lexical: the lexical metrics over the whole batch, their options and EAD's V (default
            ``Lexical(metrics=("distinct_1", "distinct_2", "ead"))``; V counted from the cluster
            texts, else from the first measured step).
        alert: the collapse / breakdown alert (default ``GroupAlert()``: collapse when group Sem-Ent
            falls by a quarter of its start, the mean of the first 5 measured steps; breakdown at a
            top-word share of 0.4, a length-cut rise of 0.3 or a ``ref_model`` NLL rise of 1 nat).
        ref_model: a frozen model to score the completions' NLL under (e.g. the policy
            before training; batched, no gradient; None: no NLL), as TRL calls it.
        ref_tokenizer: its tokenizer (default: the trainer's ``processing_class``).
        outputs: ``log_samples`` (> 0: a table of one group per step, the one with the fewest
            clusters; 0: none) and ``dirpath``, the clusters' cache directory (default
            ``<args.output_dir>/lightning_div_cache``). Its ``show_progress`` and ``cluster_views``
            are not used here (nothing is generated, no cluster view is drawn).
        device: where the encoder runs (None: CUDA if there is one).
        on_error: ``"warn"`` (default): a failed measurement is skipped with a warning; ``"raise"``.
        name: goes into every key, ``diversity/<name>/group_sem_ent``, and into the reward function's
            ``__name__``, ``group_diversity_<name>`` (several monitors in one trainer).
        **deprecated: 0.2's keyword arguments, accepted for one release with a ``DeprecationWarning``
            naming the 1.0 form (``reference_responses``, ``warn_drop``, ``lexical_metrics``, ``dirpath`` ...).

    Raises:
        ValueError: a bad ``on_error``, ``name``, lexical setting or alert threshold.
        TypeError: a ``space`` that is not a SemanticSpace, a settings object of another type, or an
            unknown keyword argument.
    """

    def __init__(
        self,
        *,
        space: SemanticSpace | None = None,
        cluster_texts: Sequence[str] | None = None,
        cluster_column: str | None = None,
        lexical: Lexical | None = None,
        alert: GroupAlert | None = None,
        ref_model: Any = None,
        ref_tokenizer: Any = None,
        outputs: Outputs | None = None,
        device: Any = None,
        on_error: str = "warn",
        name: str | None = None,
        **deprecated: Any,
    ) -> None:
        who = type(self).__name__
        given: dict[str, Any] = {
            "cluster_texts": cluster_texts,
            "cluster_column": cluster_column,
            "ref_model": ref_model,
            "ref_tokenizer": ref_tokenizer,
            "alert": alert,
            "lexical": lexical,
            "outputs": outputs,
        }
        batch_size = monitor_legacy(who, deprecated, given)
        for arg, cls in (("alert", GroupAlert), ("lexical", Lexical), ("outputs", Outputs)):
            if given[arg] is not None and not isinstance(given[arg], cls):
                raise TypeError(f"{who}: {arg} must be a {cls.__name__} or None, got {type(given[arg]).__name__}")
        check_on_error(on_error)
        lexical, out = given["lexical"] or Lexical(metrics=GROUP_LEXICAL), given["outputs"] or Outputs()
        #: The collapse / breakdown alert (its state is checkpointed with the run).
        self.alert: GroupAlert = given["alert"] or GroupAlert()
        private = {} if batch_size is None else {"batch_size": batch_size}
        #: What it measures (:class:`~lightning_div.measure.group.GroupMeasure`); this monitor adds hooks,
        #: keys, the alert and reporting.
        self.group = GroupMeasure(
            given_space(who, space, show_progress=False, **private),
            lexical.metrics,
            lexical.options,
            lexical.vocab_size,
            device,
            given["ref_model"],
            given["ref_tokenizer"],
        )
        self.cluster_texts = optional_texts(given["cluster_texts"], who, "cluster_texts")
        self.cluster_column = given["cluster_column"]
        self.dirpath = out.dirpath
        self.log_samples = out.log_samples > 0
        self.on_error = on_error
        self.name = check_name(name)
        self.trainer: Any = None
        #: Every measurement, ``{"step": ..., "diversity/...": ...}`` (every process alike).
        self.history: list[dict[str, float]] = []
        #: The whole generation batch last measured (gathered from every process); None before the first.
        self.last_batch: RolloutBatch | None = None
        #: TRL names a reward function's column by its ``__name__`` (``rewards/group_diversity/mean``).
        self.__name__ = "group_diversity" + (f"_{self.name}" if self.name else "")
        #: What this run has warned about (made anew at each training run).
        self.memory = RunMemory()
        #: Whether the last measurement took its cluster ids from a SemanticGroupReward sharing the space.
        self.reused_reward_ids = False
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

    def attach(self, trainer: Any) -> GroupDiversityMonitor:
        """Add this monitor to a TRL ``GRPOTrainer`` or ``RLOOTrainer`` that has it in its ``reward_funcs``.

        Args:
            trainer: the trainer.

        Returns:
            This monitor.

        Raises:
            ValueError: the monitor is not in ``trainer.reward_funcs``, attached to another trainer
                already, or another GroupDiversityMonitor with the same name.
            TypeError: a trainer without ``args.num_generations`` (not a GRPO/RLOO trainer).
        """
        if not any(fn is self for fn in getattr(trainer, "reward_funcs", None) or []):
            raise ValueError(
                f"{type(self).__name__} is not in the trainer's reward_funcs: it reads the rollouts TRL gives its "
                "reward functions, so build it first, pass it in reward_funcs=[my_reward, diversity], then call "
                "diversity.attach(trainer)"
            )
        num_generations_of(trainer)
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
        """The cluster texts: given, or read from the training dataset's ``cluster_column``; None without."""
        if self.cluster_texts is not None:
            return self.cluster_texts
        if self.cluster_column is None or self.trainer is None:
            return None
        return column_texts(self.trainer, self.cluster_column, type(self).__name__)

    def prepare(self, fit_on: Sequence[str] | None, cache_dir: str | Path) -> None:
        """Fit (or read) the clusters once, on the cluster texts else ``fit_on``, and count EAD's vocabulary;
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
        step: int | None = None,
    ) -> dict[str, float]:
        """The metrics of one step's completions (the whole batch, every process the same), keyed as logged
        (``{"diversity/group_sem_ent": ..., ...}``; with ``name``: ``diversity/<name>/...``).

        ``completions`` is the whole generation batch, each prompt's G = ``num_generations`` consecutive
        (text or conversational); ``cache_dir`` the clusters' cache when neither the space nor the monitor
        has one; ``prompts`` are needed for the ``ref_model`` NLL; ``cut_share`` is the share cut at the
        length limit, when known; ``step`` goes into the alert's warning (default: the global step).
        """
        texts = completion_texts(completions)
        self.prepare(texts, cache_dir)
        ids = reward_cluster_ids(self.trainer, texts, self.space)
        self.reused_reward_ids = ids is not None
        with_nll = self.group.ref_model is not None and prompts is not None
        values = self.group.measure(
            texts,
            num_generations,
            ids=ids,
            cut_share=cut_share,
            prompts=[completion_text(q, i) for i, q in enumerate(prompts)] if with_nll and prompts else None,
            tokenizer=getattr(self.trainer, "processing_class", None),
            who=type(self).__name__,
        )
        values.update(self.check_alert(values, step))
        return {self.key(k): v for k, v in values.items()}

    def check_alert(self, values: dict[str, float], step: int | None = None) -> dict[str, float]:
        """Feed one measurement to the alert; warn once per kind (first process); the 0/1 alert values.

        Args:
            values: the measurement, by unprefixed name (:meth:`GroupMeasure.measure`'s).
            step: the step, in the warning (default: the trainer's global step).

        Returns:
            ``{"collapse_alert": 0/1, "breakdown_alert": 0/1}`` (unprefixed).
        """
        if step is None:
            step = getattr(getattr(self.trainer, "state", None), "global_step", None)
        kind, reasons = feed_alert(self.alert, values, type(self).__name__, step)
        self.alert_record = next_alert_record(
            self.alert_record, self.label, kind, step, "step", reasons, self.key(f"{kind}_alert")
        )
        return alert_values(kind)

    # -- state -------------------------------------------------------------------------------------

    def state_key(self) -> str:
        """Where this monitor's state sits in ``TrainerState.stateful_callbacks`` (one key per ``name``)."""
        return "lightning_div.GroupDiversityMonitor" + (f"[{self.name}]" if self.name else "")

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to measure as the uninterrupted one, each part's own state nested:
        ``{"settings": the space's settings, "measure": the GroupMeasure's (its space's clusters file
        and EAD's V), "alert": the alert's}``. The space is saved here once, also when a reward shares it."""
        return {"settings": self.space.settings(), "measure": self.group.state_dict(), "alert": self.alert.state_dict()}

    def load_state_dict(self, saved: Any) -> None:
        """Restore :meth:`state_dict`'s values (or a 0.2 checkpoint's flat ones). A state saved with other space
        settings, or a damaged one, is not restored: a warning says why and the monitor starts afresh (the
        clusters fitted again)."""
        if isinstance(saved, dict) and "measure" not in saved and "space" in saved:  # 0.2's flat state
            saved = {**saved, "measure": {"space": saved["space"], "vocab_size": saved.get("vocab_size")}}
        if not isinstance(saved, dict) or saved.get("settings") != self.space.settings():
            got = saved.get("settings") if isinstance(saved, dict) else saved
            reason = f"was saved with other settings ({got!r:.200}, now {self.space.settings()!r})"
        else:
            try:
                self.alert.load_state_dict(saved.get("alert"))
                self.group.load_state_dict(saved["measure"])
                return
            except ValueError as err:
                self.alert = fresh_alert(self.alert)
                reason = f"in trainer_state.json is damaged ({err})"
        warn_fresh_start(type(self).__name__, reason)

    # -- hooks -------------------------------------------------------------------------------------

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Restore a resumed checkpoint's state, then fit (or read) the clusters on the cluster texts.

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
                "the trainer's rollouts, so it measures nothing; build it first, pass it in the trainer's "
                "reward_funcs=[my_reward, diversity], then call diversity.attach(trainer)",
                RuntimeWarning,
                stacklevel=2,
            )
            return
        if getattr(state, "global_step", 0) > 0:
            held = stateful(state)
            saved = held.get(self.state_key())
            if saved is None:  # a checkpoint of 0.2 (GroupDiversityCallback), resumed under 1.0
                saved = held.get(self.state_key().replace("Monitor", "Callback", 1))
            if saved is not None:
                self.load_state_dict(saved)
        self.prepare(None, cache_dir)

    # -- the reward function TRL calls ----------------------------------------------------------------

    def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] | None = None,
        completion_ids: Sequence[Sequence[int]] | None = None,
        **kwargs: Any,
    ) -> list[float]:
        """TRL's call of a reward function: measure the generation batch this slice belongs to; 0.0 each.

        Every process calls it with its own slice (TRL calls every reward function on every
        process), so the slices are gathered here and every process measures the whole batch.
        An evaluation's batch (the model not in training mode, as TRL tells train from eval) is
        not measured.

        Args:
            prompts: this process's prompts (each prompt's G completions consecutive).
            completions: this process's completions, text or conversational.
            completion_ids: their token ids (TRL's, cut after the EOS): the length-cut share.
            **kwargs: TRL's other reward arguments; ``log_metric`` (where the values go) and
                ``trainer_state`` (the step) are read, dataset columns and ``log_extra`` ignored.

        Returns:
            0.0 for every completion: the monitor adds nothing to any reward.

        Raises:
            TypeError: called without ``log_metric`` (a TRL older than 1.0, or a trainer that is
                not GRPO/RLOO), or ``completions`` missing.
            RuntimeError: in ``reward_funcs`` but never attached.
        """
        completions, log_metric = reward_call(completions, kwargs, self.__name__, type(self).__name__)
        if self.trainer is None:
            raise RuntimeError(
                f"{type(self).__name__} is in reward_funcs but not attached: call diversity.attach(trainer) after "
                "building the trainer"
            )
        zeros = [0.0] * len(completions)
        if not getattr(getattr(self.trainer, "model", None), "training", True):
            return zeros  # an evaluation's rollouts: TRL's own test of its mode
        state = kwargs.get("trainer_state") or self.trainer.state
        self.measure_batch(prompts, completions, completion_ids, state, log_metric)
        return zeros

    def measure_batch(
        self,
        prompts: Sequence[Any] | None,
        completions: Sequence[Any],
        completion_ids: Sequence[Sequence[int]] | None,
        state: Any,
        log_metric: Callable[[str, float], None],
    ) -> None:
        """Gather this process's slice with the others', measure the whole batch, hand each value to ``log_metric``.

        The alert, the sample table, the settings record, :attr:`history`, :attr:`last_batch` and the
        checkpointed state follow; the step is ``state.global_step + 1`` (the step this batch trains,
        whose log row gets its values). Every process must call it (the gathering is a collective).
        """
        step = int(getattr(state, "global_step", 0)) + 1
        args = self.trainer.args
        gathered = gather_rollouts(prompts, completions, completion_ids)  # every process, before anything can fail
        reporter = self.reporter(args, log_metric, step)
        who, when = type(self).__name__, f"step {step}"
        with guarded(self.on_error, self.memory.warn_once, who, "the measurement", when) as m:
            batch, share = gathered.batch(self.trainer, step)
            g = batch.num_generations
            with_prompts = batch.prompts if all(p is not None for p in batch.prompts) else None
            cache_dir = run_cache_dir(run_output_dir(args), self.dirpath)
            m.values.update(self.measure(batch.completions, g, cache_dir, with_prompts, share, step=step))
            self.last_batch = batch
            if self.log_samples and reporter.is_rank_zero and with_prompts is not None:
                table = fewest_clusters_rows(step, with_prompts, batch.completions, self.group.last_ids, g)
                reporter.table(self.key("group_sample"), ["step", "group", "prompt", "completion", "cluster"], table)
        if m.error is not None:
            return
        # the run's record of what these numbers were measured with
        reporter.record_settings(self.label, [self.group])
        if self.alert_record is not None:  # the alert's reasons with the run, for its report
            reporter.record_alert(self.label, self.alert_record)
        m.values[self.key("runtime")] = m.seconds
        self.history.append({"step": float(step), **reporter.scalars(m.values)})
        stateful(state)[self.state_key()] = self.state_dict()  # saved with every later checkpoint

    def reporter(self, args: TrainingArguments, log_metric: Callable[[str, float], None], step: int) -> TrackerReporter:
        """This monitor's reporter: the trainer's ``report_to`` trackers at ``step``, files in
        ``<output_dir>/lightning_div/`` tagged ``step_<step>``, scalars into TRL's ``log_metric``,
        this run's memory."""

        def log(values: dict[str, float]) -> None:
            for key, value in values.items():
                log_metric(key, value)

        reporter = tracker_reporter(self.trainer, run_output_dir(args), log, self.memory)
        reporter.destination = dataclasses.replace(reporter.destination, step=step, tag=f"step_{step}")
        return reporter


#: 0.2's ``GroupDiversityCallback``, importable from this module for one release (warning).
__getattr__ = moved_names(__name__, {"GroupDiversityCallback": (__name__, "GroupDiversityMonitor")})
