"""What every lightning-div callback shares: finding data and the model, scheduling, timing, errors.

Callbacks hold no maths. They resolve their evaluation data (explicit arguments or
the datamodule), reach the user's model through an adapter, run their work sharded
across processes (:mod:`lightning_div._internal.distributed`), and log (:mod:`lightning_div._internal.tracking`).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if sys.version_info >= (3, 12):
    from typing import override
else:  # pragma: no cover - depends on the Python version
    from typing_extensions import override

from lightning_div._internal.lightning import TrainerFn, pl
from lightning_div._internal.tracking import artifact_dir, lightning_destination, log_scalars
from lightning_div.callbacks.checks import require_inputs, settings_changed
from lightning_div.callbacks.parts import SHARED, common_settings, nested_state, part_owners, upgrade_flat_state
from lightning_div.callbacks.progress import find_progress
from lightning_div.callbacks.samples import FixedSamples
from lightning_div.callbacks.settings_access import SettingsAttributes
from lightning_div.keys import check_name
from lightning_div.measure.errors import check_on_error, guarded
from lightning_div.measure.reporting import RunMemory, TrackerReporter
from lightning_div.measure.sample import check_seed
from lightning_div.model.formatting import DialogueLayout
from lightning_div.model.generation import generate_responses
from lightning_div.model.sharding import check_strategy, full_parameters
from lightning_div.pairs import DialoguePair
from lightning_div.semantic.cache import run_cache_dir
from lightning_div.settings import Generation, ModelAccess, Outputs

if TYPE_CHECKING:  # the adapters import the scoring and generation code: only when a callback asks for one
    from lightning_div.model.adapters import DialogueModelAdapter

log = logging.getLogger("lightning_div")

DATA_HELP = (
    "Give the callback its data explicitly — {arg}=[(context, reference), ...] or (context, [references]) "
    "pairs, or a path any lightning_div reader understands (JSONL, CSV/TSV, DailyDialog, ParlAI, a dataset "
    "directory) — or use a datamodule with a `{method}()` method (lightning_div.datamodules.DialogueDataModule "
    "has one)."
)


def _callbacks(trainer: Any) -> list[Any]:
    """``trainer.callbacks`` (set in ``Trainer.__init__``, not declared on the class)."""
    return list(getattr(trainer, "callbacks", []))


class DiversityCallback(SettingsAttributes, pl.Callback):
    """Base class: subclasses implement the work; this class gives them data, model, schedule and logging.

    Args:
        every_n_epochs: run at the end of every n-th epoch (1 = every epoch).
        seed: seeds the fixed evaluation sample and any sampling in generation (an integer >= 0).
        model: where the model, its tokenizer and their layout are found
            (:class:`~lightning_div.settings.ModelAccess`; None: ``pl_module.model``, ``pl_module.tokenizer``
            and the datamodule's ``layout``, else ``DialogueLayout()``).
        generation: batch size, length limit and options of generation / scoring / embedding
            (:class:`~lightning_div.settings.Generation`; None: its defaults).
        outputs: samples table, cluster views, progress bars, cache directory
            (:class:`~lightning_div.settings.Outputs`; None: its defaults). The cache (clusters) defaults
            to ``<default_root_dir>/lightning_div_cache``; figures and tables go beside the first logger's
            files (``<log_dir>/lightning_div``), or to ``<dirpath>/plots`` without a logger.
        on_error: "warn" (default) skips the epoch's measurement with a warning so training
            continues; "raise" re-raises.
        name: tells several instances of one callback in a Trainer apart (e.g. Sem-Ent with two
            encoders, RUQ with two IDK lists): every key it logs is prefixed, ``<name>/val/ruq``,
            and it is part of the checkpoint :attr:`state_key`. None (default): keys as documented.
        **deprecated: the 0.2 keyword arguments, still accepted for one release with a ``DeprecationWarning``:
            ``model_attr``, ``tokenizer_attr``, ``format`` (now ``model=``), ``batch_size``,
            ``max_new_tokens``, ``generation_kwargs`` (``generation=``), ``dirpath``, ``show_progress``,
            ``log_samples``, ``cluster_views`` (``outputs=``).

    Checkpointing: the state is saved under :attr:`state_key`, built from the instance's
    identifying arguments as Lightning's ``EarlyStopping`` / ``ModelCheckpoint`` build theirs,
    so two instances never overwrite each other's state. It is nested the same way in every
    callback: ``history``, ``settings``, ``samples`` and one entry per part (:meth:`state_parts`:
    ``measure``, ``space``, ``alert``); a part shared with another callback of the Trainer (one
    ``SemanticSpace`` given to two) is written once, by the first, and the other writes
    ``{"owner": <its state key>}``. The flat state of lightning-div 0.2 is still restored. A
    checkpoint of lightning-div 0.1 that holds the state under the bare class name is not
    restored; a warning says so.
    """

    #: What the callback is, for ``timing/<kind>_s`` and warnings; set by each subclass.
    kind = "diversity"

    def __init__(
        self,
        every_n_epochs: int = 1,
        seed: int = 0,
        model: ModelAccess | None = None,
        generation: Generation | None = None,
        outputs: Outputs | None = None,
        on_error: str = "warn",
        name: str | None = None,
        **deprecated: Any,
    ) -> None:
        if every_n_epochs < 1:
            raise ValueError(f"every_n_epochs must be >= 1, got {every_n_epochs}")
        check_on_error(on_error)
        self.name = check_name(name)
        #: Where the model, tokenizer and layout are found; how it generates; what it shows and writes.
        self.model_access, self.generation, self.outputs = common_settings(self, deprecated, model, generation, outputs)
        #: An alerting monitor's alert state, since when and why (:func:`~lightning_div.verdict.alert_record`),
        #: as the summary reads it; written to ``alerts/<label>.json`` for the report. None: no alert here.
        self.alert_record: dict[str, Any] | None = None
        self.every_n_epochs = every_n_epochs
        self.seed = check_seed(seed)  # it seeds the fixed samples: refused here, not at the first measurement
        self.on_error = on_error
        self.history: list[dict[str, float]] = []
        #: The fixed evaluation samples (:meth:`fixed_sample`), by name; their indices are checkpointed.
        self.fixed_samples = FixedSamples()
        self._datamodule_layout: DialogueLayout | None = None  # the trainer's datamodule's, seen at setup
        self._owners: dict[str, str] = {}  # part name -> state key of the callback that checkpoints it (shared)
        #: What this run has warned about and logged once (made anew at each setup: a new run warns again).
        self.memory = RunMemory()

    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.memory = RunMemory()  # a new fit/validate call is a new run: its warnings are shown again
        layout = getattr(getattr(trainer, "datamodule", None), "layout", None)
        self._datamodule_layout = layout if isinstance(layout, DialogueLayout) else None
        self._owners = part_owners(self, _callbacks(trainer))
        # Two instances logging over each other's keys, or missing data, is a configuration error: say so
        # before any work (the data is looked at here, the model at fit start: see on_fit_start).
        self.check_unique_keys(trainer)
        # A strategy whose sharded parameters the measurements cannot gather (DeepSpeed ZeRO-3, tensor
        # parallelism) is refused now, naming it, rather than hanging at the first epoch's end.
        check_strategy(trainer)
        if stage == TrainerFn.FITTING:
            require_inputs(self, trainer, self.required_inputs())

    def required_inputs(self) -> list[tuple[str, Any, str]]:
        """``(argument, value given, datamodule method)`` of each input the callback needs (checked in ``setup``)."""
        return []

    # -- identity: logged keys and checkpoint state ----------------------------------------------

    @property
    def label(self) -> str:
        """The class, and ``-<name>`` with a name: the name of its records in the run's files."""
        return type(self).__name__ + (f"-{self.name}" if self.name else "")

    def log_key(self, key: str) -> str:
        """``key`` as this instance logs it: ``<name>/<key>`` when a name is set."""
        return f"{self.name}/{key}" if self.name else key

    def state_key_args(self) -> dict[str, Any]:
        """The arguments that identify this instance in a checkpoint (subclasses add theirs)."""
        return {"name": self.name}

    @property
    def state_key(self) -> str:
        """``ClassName{identifying arguments}``, like ``EarlyStopping``'s ``state_key``."""
        return self._generate_state_key(**self.state_key_args())

    @override
    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # lightning-div 0.1 kept the state under the bare class name; 0.2 does not read it (no migration
        # code is carried), and Lightning would pass over it silently: say so, once.
        states = checkpoint.get("callbacks")
        bare = type(self).__qualname__
        if isinstance(states, dict) and self.state_key not in states and bare in states:
            warnings.warn(  # not warn_once: a resume happens once per run, and each one must say it
                f"the checkpoint holds a {bare} state under the key {bare!r}, which lightning-div 0.1 wrote; "
                f"0.2 keys it by the callback's arguments ({self.state_key!r}), so it is not restored: this "
                "run starts the callback afresh (its samples, history and, for DRESS, weights and negatives)",
                RuntimeWarning,
                stacklevel=2,
            )

    def check_unique_keys(self, trainer: pl.Trainer) -> None:
        """Two instances of one class without distinct names would log over each other's keys: an error."""
        same = [cb for cb in _callbacks(trainer) if type(cb) is type(self) and cb.name == self.name]
        if len(same) > 1:
            raise ValueError(
                f"{len(same)} {type(self).__name__}s in this Trainer have name={self.name!r}, so they "
                f"would log the same keys (and one would overwrite the other's): give each its own "
                f"name=... (it prefixes the keys: '<name>/val/...')"
            )

    # -- where things are --------------------------------------------------------------------------

    def cache_dir(self, trainer: pl.Trainer) -> Path:
        # Not ".../lightning_div": run from a source checkout, that would write into the package itself.
        return run_cache_dir(trainer.default_root_dir, self.dirpath)

    def output_dir(self, trainer: pl.Trainer) -> Path:
        return artifact_dir(trainer, self.cache_dir(trainer) / "plots")

    def space_context(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        """Where a :class:`~lightning_div.semantic.space.SemanticSpace` works for this callback.

        The ``device``, ``broadcast`` and ``cache_dir`` arguments of
        :meth:`~lightning_div.semantic.space.SemanticSpace.fit`: the module's device, the
        strategy's broadcast (rank 0's clusters to every rank) and :meth:`cache_dir`.
        """
        strategy = getattr(trainer, "strategy", None)
        return {
            "device": pl_module.device,
            "broadcast": getattr(strategy, "broadcast", None),
            "cache_dir": self.cache_dir(trainer),
        }

    def adapter(self, pl_module: pl.LightningModule) -> DialogueModelAdapter:
        """The user's model as a :class:`~lightning_div.model.adapters.DialogueModelAdapter` (built fresh: no stale weights)."""
        from lightning_div.model.adapters import resolve_adapter

        return resolve_adapter(
            pl_module,
            model_attr=self.model_attr,
            tokenizer_attr=self.tokenizer_attr,
            format=self.layout,
            batch_size=self.batch_size,
            max_new_tokens=self.max_new_tokens,
            show_progress=False,
            seed=self.seed,
        )

    def resolve_pairs(self, trainer: pl.Trainer, explicit: Any, name: str) -> Sequence[DialoguePair]:
        """Explicit pairs/path if given, else ``trainer.datamodule.<name>()``, else a helpful error.

        Args:
            trainer: the Trainer (its datamodule is asked when nothing is given).
            explicit: the pairs or path the user gave as argument ``name``, or None.
            name: the argument's name, which is also the datamodule's method (``"val_pairs"``,
                ``"train_pairs"``); errors name it: ``"val_pairs[3]: ..."``.
        """
        from lightning_div.datamodules.formats import pairs_from_items, read_pairs

        method = arg = name
        pairs: Sequence[DialoguePair]
        if isinstance(explicit, (list, tuple)):
            pairs = pairs_from_items(explicit, name=arg)
        elif explicit is not None:
            pairs = read_pairs(explicit)
        else:
            dm = getattr(trainer, "datamodule", None)
            if dm is None or not callable(getattr(dm, method, None)):
                raise ValueError(f"{type(self).__name__} has no data: {DATA_HELP.format(arg=arg, method=method)}")
            got = getattr(dm, method)()
            # A sequence is kept as it is: a streaming datamodule reads the few sampled pairs from disk on demand.
            pairs = got if isinstance(got, Sequence) else list(got)
        if not pairs:
            raise ValueError(f"{type(self).__name__}: {arg} is empty")
        return pairs

    def fixed_sample(
        self, trainer: pl.Trainer, key: str, explicit: Any, name: str, size: int | None, seed: int
    ) -> list[DialoguePair]:
        """A fixed random sample of the pairs (:meth:`resolve_pairs`), drawn once and kept across epochs and on resume
        (:class:`~lightning_div.callbacks.samples.FixedSamples`).

        Args:
            trainer: the Trainer.
            key: the sample's name in this callback's state (``"val"``, ``"train"``).
            explicit: the pairs or path given as argument ``name``, or None (the datamodule's).
            name: the argument / datamodule method, see :meth:`resolve_pairs`.
            size: how many examples (None: all).
            seed: the draw's seed.
        """
        return self.fixed_samples.get(key, size, seed, lambda: self.resolve_pairs(trainer, explicit, name))

    def sample_state(self) -> dict[str, list[int]]:
        """The fixed samples' indices by name (what a checkpoint holds as ``"samples"``)."""
        return self.fixed_samples.state_dict()

    def forget_samples(self) -> None:
        """Draw the fixed samples again when next asked (settings changed on resume)."""
        self.fixed_samples.forget()

    def load_sample_state(self, indices: Any) -> None:
        """Indices from a checkpoint (:meth:`~lightning_div.callbacks.samples.FixedSamples.load_state_dict`)."""
        self.fixed_samples.load_state_dict(indices)

    def generate(
        self,
        adapter: DialogueModelAdapter,
        contexts: Sequence[Sequence[str]],
        generation_kwargs: dict[str, Any],
        desc: str = "generating",
    ) -> list[str]:
        """One response per context, batches sharded across processes and gathered in order
        (:func:`~lightning_div.model.generation.generate_responses`)."""
        return generate_responses(adapter, contexts, generation_kwargs, self.batch_size, self.show_progress, desc)

    def measures(self) -> list[Any]:
        """The :class:`~lightning_div.measure.base.Measure` objects this callback measures with (their
        ``settings()`` go into the run's ``settings/`` record); none by default."""
        return []

    def settings(self) -> dict[str, Any] | None:
        """This callback's own settings around its measures (its sample, its schedule), JSON-ready: what
        a checkpoint's state depends on, and the ``"callback"`` part of the run's record; None: none."""
        return None

    def reporter(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> TrackerReporter:
        """This callback's :class:`~lightning_div.measure.reporting.Reporter`: the trainer's loggers at
        Lightning's step, files in :meth:`output_dir`, scalars through ``pl_module.log``, this run's memory."""

        def log(values: dict[str, float]) -> None:
            log_scalars(pl_module, values, type(self).__name__)

        return TrackerReporter(
            lightning_destination(trainer), self.output_dir(trainer), log, self.memory, trainer.is_global_zero
        )

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # A module the callbacks cannot reach is a configuration error: say so now, not after an epoch.
        # Here, not in setup: a LightningModule may build its model in its own setup / configure_model,
        # which Lightning calls after the callbacks' setup.
        self.adapter(pl_module)

    # -- when ----------------------------------------------------------------------------------------

    def due(self, trainer: pl.Trainer) -> bool:
        """Not during the sanity check; at every n-th epoch while fitting; always in validate/test."""
        if trainer.sanity_checking:
            return False
        if trainer.state.fn != TrainerFn.FITTING:
            return True
        return (trainer.current_epoch + 1) % self.every_n_epochs == 0

    @contextmanager
    def announced(self, trainer: pl.Trainer, what: str) -> Iterator[None]:
        """Says when ``what`` (work outside :meth:`measuring`, such as a fit-start clustering) starts and
        ends, to a :class:`~lightning_div.callbacks.progress.PlainProgress` the trainer has; logs nothing."""
        progress = find_progress(trainer)
        label = type(self).__name__ + (f"({self.name!r})" if self.name else "")
        if progress is not None:
            progress.measurement_started(label, what, trainer.current_epoch)
        start = time.perf_counter()
        yield
        if progress is not None:
            progress.measurement_done(label, what, trainer.current_epoch, time.perf_counter() - start, {})

    @contextmanager
    def measuring(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        what: str,
        timing_key: str | None = None,
        needs_model: bool = True,
    ) -> Iterator[dict[str, float]]:
        """Times the block, logs what it put in the yielded dict plus ``timing_key``; isolates failures.

        A failure the model, the data or a tracker can cause (:data:`~lightning_div._internal.checks.MEASUREMENT_ERRORS`:
        RuntimeError (torch out-of-memory included), ValueError, OSError, ...) skips this measurement
        with one warning and training continues (``on_error="warn"``); a programming error (TypeError,
        AttributeError, NameError, ...) always propagates.

        ``timing_key`` defaults to ``timing/<kind>_s``; a callback that measures twice an epoch
        names each measurement, or the one key's chart zig-zags between them. Keys are prefixed
        by :meth:`log_key` when the instance has a ``name``.

        Under FSDP the block runs with the model's full parameters
        (:func:`lightning_div.model.sharding.full_parameters`), gathered on entry on every rank; a block
        that does not call the model passes ``needs_model=False`` and gathers nothing. Either way
        every rank must enter the block (every callback measures on every rank).
        """
        progress = find_progress(trainer)  # plain lines for a log file (lightning_div.callbacks.progress)
        label = type(self).__name__ + (f"({self.name!r})" if self.name else "")
        if progress is not None:
            progress.measurement_started(label, what, trainer.current_epoch)
        with (
            self.memory.scope(),
            guarded(self.on_error, self.memory.warn_once, label, what, f"epoch {trainer.current_epoch}") as m,
            # Under FSDP the model's parameters are gathered once, on every rank (every measurement runs on
            # every rank), and held for the whole measurement: no model call inside communicates, so ranks
            # may generate and score different numbers of batches (lightning_div.model.sharding).
            full_parameters(pl_module) if needs_model else contextlib.nullcontext(),
        ):
            yield m.values
        m.values[timing_key or f"timing/{self.kind}_s"] = m.seconds
        with self.memory.scope():
            logged = log_scalars(pl_module, {self.log_key(k): v for k, v in m.values.items()}, type(self).__name__)
            if m.error is None:  # the run's record of what these numbers were measured with
                reporter = self.reporter(trainer, pl_module)
                reporter.record_settings(self.label, self.measures(), self.settings())
                if self.alert_record is not None:  # the alert's reasons with the run, for its report
                    reporter.record_alert(self.label, self.alert_record)
        self.history.append({"epoch": float(trainer.current_epoch), **logged})
        if progress is not None:
            progress.measurement_done(label, what, trainer.current_epoch, m.seconds, logged)

    # -- checkpointing: one loop for every callback ------------------------------------------------

    #: What a resume under changed settings does, for the warning (:func:`~lightning_div.callbacks.checks.settings_changed`).
    stale_consequence = "the samples are drawn again"

    def state_parts(self) -> dict[str, Any] | None:
        """The parts whose state this callback checkpoints, by name (``measure``, ``space``, ``alert``): objects
        with ``state_dict()`` / ``load_state_dict()``. None (the default): the subclass writes its state itself
        and only ``history`` is written here."""
        return None

    def legacy_keys(self) -> dict[str, str]:
        """Part name -> the key its state had in 0.2's flat checkpoint, for a part that did not read the flat
        state itself (RUQ's alert: ``"last_val_ruq"``)."""
        return {}

    def forget(self) -> None:
        """Start the parts afresh before a checkpoint is read (what a stale checkpoint must not leave behind)."""

    @override
    def state_dict(self) -> dict[str, Any]:
        parts = self.state_parts()
        if parts is None:
            return {"history": list(self.history)}
        own = {
            name: {SHARED: self._owners[name]} if name in self._owners else p.state_dict() for name, p in parts.items()
        }
        return nested_state(self.history, self.settings(), self.sample_state() or None, own)

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        parts = self.state_parts()
        if parts is None:
            self.history = list(state_dict.get("history", []))
            return
        state = upgrade_flat_state(state_dict, parts, self.legacy_keys())
        self.history = list(state.get("history", []))
        self.forget_samples()
        self.forget()
        settings = self.settings()
        if settings is not None and settings_changed(self, state.get("settings"), settings, self.stale_consequence):
            return  # history is kept; samples and parts come from the new settings
        self.load_sample_state(state.get("samples"))
        for name, part in parts.items():
            saved = state.get(name)
            if isinstance(saved, dict) and set(saved) == {SHARED}:
                continue  # a shared part: the callback that owns it restored it
            if saved is not None:
                part.load_state_dict(saved)


class ValidationMonitor(DiversityCallback):
    """A callback that measures the model on validation data: after every validation loop.

    When a training epoch ends without a validation loop in it (a module without
    ``validation_step``, ``limit_val_batches=0``, ``check_val_every_n_epoch`` > 1, no val
    DataLoader), it measures at the end of that training epoch instead, so the metrics still
    arrive at every (``every_n_epochs``-th) epoch end. Lightning runs the epoch-end
    validation before ``on_train_epoch_end``, which is what tells the two cases apart.
    """

    _validated_epoch: int | None = None

    def measure_validation(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        raise NotImplementedError

    @override
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validated_epoch = trainer.current_epoch
        if self.due(trainer):
            self.measure_validation(trainer, pl_module)

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._validated_epoch != trainer.current_epoch and self.due(trainer):
            self.measure_validation(trainer, pl_module)

    # a checkpoint written after validation but before the epoch's end must not measure that epoch twice
    @override
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "validated_epoch": self._validated_epoch}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._validated_epoch = state_dict.get("validated_epoch")
