"""DialogueDataModule: dialogue pairs in, padded and optionally weighted batches out.

Holds the train / validation / test pairs (any source :func:`read_pairs` accepts),
tokenises them once at ``setup`` with the project's one token layout
(:class:`lightning_div.model.formatting.DialogueLayout`), and yields batches with
``input_ids``, ``attention_mask``, ``labels``, ``sample_weight`` and ``index``. The
DRESS callback reaches it through one method, :meth:`DialogueDataModule.apply_weights`
(the :class:`~lightning_div.reweighting.ReweightableDataModule` protocol).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np
from torch.utils.data import DataLoader, Sampler

from lightning_div._internal.counts import check_count
from lightning_div._internal.deprecation import take_deprecated, warn_deprecated
from lightning_div._internal.distributed import rank_and_world
from lightning_div._internal.lightning import pl, rank_zero, reload_every
from lightning_div._internal.loop_state import batches_trained_this_epoch
from lightning_div.datamodules.encoding import (
    ConcatPairs,
    DialogueCollator,
    EncodedDialogues,
    EncodedPairs,
    encode_pairs,
    resolve_tokenizer_and_model,
)
from lightning_div.datamodules.formats import (
    ReaderOptions,
    ReadResult,
    ReadStats,
    read_pairs,
)
from lightning_div.datamodules.options import (
    DATAMODULE_REGROUPED,
    DATAMODULE_RENAMED,
    DEFAULT_LAYOUT,
    DeprecatedAttributes,
    Examples,
    plain,
    settings_of,
)
from lightning_div.datamodules.samplers import (
    ExactDistributedSampler,
    ResumableDataLoader,
    check_sampling_weights,
    train_sampler,
)
from lightning_div.model.formatting import DialogueLayout, is_seq2seq, model_window
from lightning_div.model.generation import pad_id_of
from lightning_div.pairs import DialoguePair
from lightning_div.reweighting import (
    MODES,
    Mode,
    Negatives,
    check_choice,
    finite_weights,
)
from lightning_div.types import PairsSource, TokenizerSource

log = logging.getLogger(__name__)
_info = rank_zero.rank_zero_only(log.info)

NAMES = ("train", "val", "test")
_SPLIT_OF = {"train": "train", "val": "validation", "test": "test"}
_STAGE_NAMES = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": ()}
_REQUIRED = {"fit": "train", "validate": "val", "test": "test"}
_ALL_EXAMPLES = Examples()


def _plain(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool, type(None)))


class DialogueDataModule(DeprecatedAttributes, pl.LightningDataModule):
    """Dialogue (context, response) data for causal or seq2seq LMs, with DRESS sample weights.

    Args:
        train: a file path, a saved ``datasets`` directory, ``"chitchat"``
            (the embedded corpus; its train / validation / test split), a ``datasets.Dataset``,
            or a list of pairs; ``None`` = no such data.
        val: the validation data, as ``train``.
        test: the test data, as ``train``.
        file_format: how the files are written: ``"auto"`` (from the extension) or a name in ``formats.FORMATS``.
        tokenizer: a name or path for ``AutoTokenizer``, ``"local:chitchat-gpt2"`` (the base model's),
            ``"local:chitchat"``, a tokenizer object, or ``None`` = the LightningModule's ``tokenizer``
            attribute at setup. A name that does not load raises an :class:`OSError` naming it at setup.
        layout: how a dialogue becomes tokens (:class:`~lightning_div.model.formatting.DialogueLayout`:
            the turn separator, the turns kept, the token limits; contexts are also left-truncated to fit
            the model window); default: the last 3 turns. Exposed as ``dm.layout``, which the monitors use.
        examples: which of the examples read are used (:class:`~lightning_div.datamodules.options.Examples`:
            subsets, the epoch's window, dedupe); default: all, every epoch.
        batch_size: training batch size.
        eval_batch_size: evaluation batch size (None = ``batch_size``).
        num_workers: DataLoader worker processes.
        seed: subset choice, shuffling and weighted draws (offset by the epoch).
        seq2seq: encoder-decoder layout; ``None`` = read it from the LightningModule's ``model``.
        reader: the field / column names and CSV/TSV separators the readers use
            (:class:`~lightning_div.datamodules.formats.ReaderOptions`; None = the defaults).
        show_progress: progress bar while tokenising.
        **deprecated: 0.2's keyword arguments (``format``, ``max_history``, ``max_train_examples`` ...),
            accepted for one release with a ``DeprecationWarning`` naming the new form.
    """

    def __init__(
        self,
        train: PairsSource | None = "chitchat",
        val: PairsSource | None = "chitchat",
        test: PairsSource | None = None,
        file_format: str = "auto",
        tokenizer: TokenizerSource | None = None,
        layout: DialogueLayout = DEFAULT_LAYOUT,
        examples: Examples = _ALL_EXAMPLES,
        batch_size: int = 16,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        seed: int = 0,
        seq2seq: bool | None = None,
        reader: ReaderOptions | None = None,
        show_progress: bool = True,
        **deprecated: Any,
    ) -> None:
        super().__init__()
        # the warning points at the user's call, through a subclass's __init__ (StreamingDialogueDataModule's) too:
        # Python shows a DeprecationWarning by default only where the user's own code made the call
        through_subclass = type(self).__init__ is not DialogueDataModule.__init__
        renamed, groups = take_deprecated(
            type(self).__name__, deprecated, DATAMODULE_RENAMED, DATAMODULE_REGROUPED, stacklevel=4 + through_subclass
        )
        self.file_format: str = renamed.get("file_format", file_format)
        self.layout = settings_of(DialogueLayout, layout, "layout", groups.get("layout"))
        self.examples = settings_of(Examples, examples, "examples", groups.get("examples"))
        self.reader = ReaderOptions.of(reader)  # or a dict of its options, as a checkpoint's hyperparameters hold it
        for name, value in (("batch_size", batch_size), ("eval_batch_size", eval_batch_size)):
            check_count(name, value)  # checked here, so that a bad value fails when built, not minutes into a fit
        sources = {"train": train, "val": val, "test": test}
        # `tokenizer` is left out: DialogueLM logs its own, and Lightning refuses two different values of one key.
        # The settings objects as plain values: checkpoints load with weights_only=True, which refuses our classes.
        settings = {"file_format": self.file_format, "layout": plain(self.layout), "examples": plain(self.examples)}
        self.save_hyperparameters(
            ignore=["tokenizer", *settings, "reader", *(k for k, v in sources.items() if not _plain(v))]
        )
        self.save_hyperparameters({**settings, "reader": self.reader.as_dict()})
        self._sources = sources
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size or batch_size
        self.num_workers = num_workers
        self.seed = seed
        self.show_progress = show_progress
        self._tokenizer_arg = tokenizer
        self._seq2seq_arg = seq2seq
        self._pairs: dict[str, list[DialoguePair]] = {}
        self._stats: dict[str, ReadStats] = {}
        self._encoded: dict[str, EncodedPairs] = {}
        self._tokenizer: Any = None
        self._model: Any = None
        self._resolved_for: Any = None  # the LightningModule the tokenizer/model were taken from
        self._sample_weights: np.ndarray | None = None
        self._negatives = Negatives(batches="mixed")
        self._negatives_encoded: EncodedPairs | None = None
        self._mode = "loss"
        self._train_loader_built = False

    # ------------------------------------------------------------------------------------------
    # Reading

    def _read(self, name: str) -> list[DialoguePair]:
        if name not in self._pairs:
            source = self._sources[name]
            if source is None:
                raise ValueError(f"no {name} data: pass {name}= (a path, 'chitchat', a datasets.Dataset or pairs)")
            pairs = read_pairs(
                source,
                self.file_format,
                split=_SPLIT_OF[name],
                max_turns=self.layout.max_turns,
                dedupe=self.examples.dedupe,
                fields=self.reader.fields,
                **self.reader.csv_options(),
            )
            stats = pairs.stats
            limit, note = self.examples.limit(name), ""
            if limit is not None and len(pairs) > limit:
                keep = np.sort(np.random.default_rng(self.seed).choice(len(pairs), size=limit, replace=False))
                pairs = ReadResult([pairs[i] for i in keep], stats)
                note = f"; using a random {limit:,} of them (examples.max_{name}, seed {self.seed})"
            _info(f"{name} data: {stats.summary()}{note}")
            self._pairs[name], self._stats[name] = pairs, stats
        return self._pairs[name]

    def _num_train(self) -> int:
        """How many gold training examples there are (a subclass may know without reading them)."""
        return len(self._read("train"))

    def train_pairs(self) -> list[DialoguePair]:
        """The gold training examples (after truncation, dedupe and subset), in index order."""
        return list(self._read("train"))

    def val_pairs(self) -> list[DialoguePair]:
        """The validation examples."""
        return list(self._read("val"))

    def test_pairs(self) -> list[DialoguePair]:
        """The test examples."""
        return list(self._read("test"))

    def train_responses(self) -> list[str]:
        """The gold response of every training example, in index order."""
        return [p.response for p in self._read("train")]

    def gold_train_responses(self) -> list[str]:
        """Deprecated: :meth:`train_responses` (0.2's name; removed in the release after 1.0)."""
        warn_deprecated(f"{type(self).__name__}.gold_train_responses()", "train_responses()")
        return self.train_responses()

    def train_contexts(self) -> list[tuple[str, ...]]:
        """The context turns of every training example, in index order."""
        return [p.context for p in self._read("train")]

    @property
    def read_stats(self) -> dict[str, ReadStats]:
        """What the readers did, per data set read so far ("train", "val", "test")."""
        return dict(self._stats)

    # ------------------------------------------------------------------------------------------
    # Tokenising

    def _module(self) -> Any:
        trainer = self._trainer_or_none()
        return getattr(trainer, "lightning_module", None) if trainer is not None else None

    def _trainer_or_none(self) -> pl.Trainer | None:
        return getattr(self, "trainer", None)

    def _resolve_model(self) -> None:
        """The tokenizer and the model whose layout (causal / seq2seq, window) the ids follow."""
        self._tokenizer, self._model = resolve_tokenizer_and_model(
            self._tokenizer_arg, self._seq2seq_arg, self._module(), _info
        )

    def _layout(self) -> tuple:
        return id(self._tokenizer), is_seq2seq(self._model), model_window(self._model)

    def _ensure_model(self) -> None:
        module = self._module()
        if self._model is not None and self._resolved_for is module:
            return
        before = self._layout() if self._model is not None else None
        self._resolve_model()
        self._resolved_for = module
        if before is not None and before != self._layout():  # used before a Trainer attached, with another layout
            self._encoded.clear()
            self._negatives_encoded = None

    @property
    def tokenizer(self) -> Any:
        """The tokenizer in use (resolved at setup)."""
        self._ensure_model()
        return self._tokenizer

    @property
    def seq2seq(self) -> bool:
        """Whether batches use the encoder-decoder layout."""
        self._ensure_model()
        return is_seq2seq(self._model)

    def _encode(self, pairs: list[DialoguePair], desc: str) -> EncodedPairs:
        self._ensure_model()
        # no bar for nothing: a run without DRESS has no negatives, and "tokenising negatives: 0it" read as work
        show = self.show_progress and self._rank() == 0 and len(pairs) > 0
        return encode_pairs(
            pairs,
            self._tokenizer,
            self._model,
            self.layout,
            show_progress=show,
            desc=desc,
        )

    def _encoded_split(self, name: str) -> EncodedPairs:
        self._ensure_model()
        if name not in self._encoded:
            self._encoded[name] = self._encode(self._read(name), f"tokenising {name}")
        return self._encoded[name]

    def setup(self, stage: str | None = None) -> None:
        """Read and tokenise the data the stage needs (once; later calls reuse it)."""
        names = _STAGE_NAMES.get(stage, NAMES) if stage is not None else NAMES
        required = _REQUIRED.get(stage) if stage is not None else None
        if required is not None and self._sources[required] is None:
            raise ValueError(f"stage {stage!r} needs {required} data: pass {required}=")
        self._ensure_model()
        for name in names:
            if self._sources[name] is not None:
                self._encoded_split(name)

    # ------------------------------------------------------------------------------------------
    # Reweighting (lightning_div.reweighting.ReweightableDataModule)

    @property
    def sample_weights(self) -> np.ndarray:
        """One weight per gold training example (ones until weights are applied)."""
        if self._sample_weights is None:
            return np.ones(self._num_train(), dtype=np.float64)
        return self._sample_weights.copy()

    @property
    def negatives(self) -> list[DialoguePair]:
        """The generated responses added to the training data (see :meth:`apply_weights`)."""
        return list(self._negatives.pairs)

    @property
    def negative_weights(self) -> np.ndarray:
        """The weight of each negative."""
        return np.array(self._negatives.weights)

    @property
    def negative_batches(self) -> str:
        """``"mixed"`` (negatives shuffled in with the gold examples) or ``"separate"`` (batches of their own)."""
        return self._negatives.batches

    @property
    def sampling_mode(self) -> str:
        """``"loss"`` (batches carry the weights) or ``"sampler"`` (draws proportional to them)."""
        return self._mode

    def _set(self, weights: np.ndarray | None, negatives: Negatives, mode: str, what: str) -> None:
        """Validate all of it first, then replace: a refused change leaves the previous state whole."""
        check_choice("mode", mode, MODES)
        w = None if weights is None else finite_weights(weights, self._num_train(), what)
        if mode == "sampler":
            check_sampling_weights(
                np.concatenate([self.sample_weights if w is None else w, negatives.weights]),
                "sampling weights" if what == "sample weights" else what,
            )
        if negatives.pairs != self._negatives.pairs:
            self._negatives_encoded = None
        self._sample_weights = w if weights is not None else self._sample_weights
        self._negatives, self._mode = negatives, mode

    def apply_weights(self, weights: np.ndarray, negatives: Negatives | None = None, mode: Mode = "loss") -> None:
        """Train on these weights and negatives from the next train dataloader on (the DRESS protocol).

        Implements :class:`~lightning_div.reweighting.ReweightableDataModule`. In
        ``"loss"`` mode the weights ride in ``batch["sample_weight"]`` (negatives at index
        ``len(train_pairs()) + position``, in batches of their own with
        ``negatives.batches="separate"``); in ``"sampler"`` mode the train dataloader draws
        ``len(train set)`` examples per epoch with probability proportional to the weights
        and every batch carries ``sample_weight`` 1.0. What is applied here is not
        checkpointed: its owner (:class:`~lightning_div.callbacks.dress.DRESSReweighting`)
        checkpoints it and applies it again on resume. Training batches carry what a loss needs:
        ``sample_weight``, ``negative`` (True for a negative) and ``negative_loss``
        (``negatives.loss``), read by :func:`lightning_div.dress.losses.dress_loss`.

        Args:
            weights: one finite weight per example of :meth:`train_pairs` (>= 0 in sampler mode).
            negatives: extra examples with their weights; None or empty: none.
            mode: ``"loss"`` or ``"sampler"``.

        Raises:
            ValueError: a wrong shape, a non-finite weight (the message names the index), a
                negative one or any negatives in sampler mode, an unknown mode, or a change after
                the train dataloader was built while the Trainer will never rebuild it (the
                message says to set ``Trainer(reload_dataloaders_every_n_epochs=1)``).
        """
        negatives = Negatives() if negatives is None else negatives
        if not isinstance(negatives, Negatives):
            raise ValueError(
                f"negatives must be a lightning_div.reweighting.Negatives (or None), got {type(negatives).__name__}"
            )
        trainer = self._trainer_or_none()
        if self._train_loader_built and trainer is not None and not reload_every(trainer):
            raise ValueError(
                "DialogueDataModule.apply_weights: the train dataloader is already built and this "
                "Trainer never rebuilds it, so the new weights would not be used: create the Trainer "
                "with reload_dataloaders_every_n_epochs=1"
            )
        self._set(weights, negatives, mode, "sample weights")

    # ------------------------------------------------------------------------------------------
    # Dataloaders

    def _rank(self) -> int:
        return self._world()[1]

    def _world(self) -> tuple[int, int]:
        trainer = self._trainer_or_none()
        if trainer is not None:
            return trainer.world_size, trainer.global_rank
        rank, size = rank_and_world()
        return size, rank

    def _loader(
        self,
        dataset: EncodedDialogues,
        sampler: Sampler,
        batch_size: int,
        progress: Any = None,
        settings: dict[str, Any] | None = None,
    ) -> DataLoader:
        # how negatives are trained travels with every batch (the training_step reads it there, not from here)
        collate = DialogueCollator(pad_id_of(self.tokenizer), seq2seq=self.seq2seq, negative_loss=self._negatives.loss)
        kwargs: dict[str, Any] = dict(
            batch_size=batch_size, sampler=sampler, collate_fn=collate, num_workers=self.num_workers, drop_last=False
        )
        if progress is not None:
            return ResumableDataLoader(dataset, progress=progress, settings=settings, **kwargs)
        return DataLoader(dataset, **kwargs)

    def train_dataset(self) -> EncodedDialogues:
        """Gold examples then negatives (marked as such), with their weights (all 1.0 in sampler mode)."""
        gold = self._encoded_split("train")
        if self._negatives_encoded is None:
            self._negatives_encoded = self._encode(list(self._negatives.pairs), "tokenising negatives")
        weights = np.concatenate([self.sample_weights, self._negatives.weights])
        return EncodedDialogues(
            ConcatPairs(gold, self._negatives_encoded),
            weights if self._mode == "loss" else None,
            num_negatives=len(self._negatives),
        )

    def train_dataloader(self) -> DataLoader:
        """Shuffled; under DDP every example once per epoch (loss mode) or weighted draws (sampler mode).

        A :class:`~lightning_div.datamodules.samplers.ResumableDataLoader`: a run resumed from a
        mid-epoch checkpoint trains on exactly the batches of that epoch not yet trained on; resumed
        mid-epoch with another ``batch_size``, ``train_examples_per_epoch`` or number of processes, it
        raises a ``ValueError`` naming the change (those batches would be other examples).
        """
        dataset = self.train_dataset()
        num_replicas, rank = self._world()
        sampler = train_sampler(
            dataset,
            self._mode,
            self._negatives,
            np.concatenate([self.sample_weights, self._negatives.weights]),
            self.batch_size,
            num_replicas,
            rank,
            self.seed,
            self.examples.train_per_epoch,
        )
        trainer = self._trainer_or_none()
        sampler.set_epoch(trainer.current_epoch if trainer is not None else 0)
        self._train_loader_built = True
        # a mid-epoch position counts batches: it means the same examples only under these (checked on resume)
        settings = {
            "batch_size": self.batch_size,
            "train_examples_per_epoch": self.examples.train_per_epoch,
            "world_size": num_replicas,
        }
        return self._loader(
            dataset,
            sampler,
            self.batch_size,
            progress=lambda: batches_trained_this_epoch(self._trainer_or_none()),
            settings=settings,
        )

    def _eval_loader(self, name: str) -> DataLoader:
        dataset = EncodedDialogues(self._encoded_split(name))
        num_replicas, rank = self._world()
        sampler = ExactDistributedSampler(dataset, num_replicas, rank, shuffle=False, seed=self.seed)
        return self._loader(dataset, sampler, self.eval_batch_size)

    def val_dataloader(self) -> DataLoader | list:
        """In order; under DDP every example once (padding rows carry weight 0). [] without val data."""
        return [] if self._sources["val"] is None else self._eval_loader("val")

    def test_dataloader(self) -> DataLoader:
        """In order; under DDP every example once (padding rows carry weight 0)."""
        return self._eval_loader("test")

    # ------------------------------------------------------------------------------------------
    # Checkpointing

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Nothing to restore: the weights applied here are checkpointed by their owner (the DRESS callback).

        A lightning-div 0.1 checkpoint whose weights were set with the setters removed in 0.2
        (``set_sample_weights`` ...) holds them here; they are not restored, and a warning says so.
        """
        if state_dict:
            warnings.warn(
                f"DialogueDataModule: the checkpoint holds weights ({', '.join(sorted(state_dict))}) that the "
                "setters removed in lightning-div 0.2 stored; they are not restored: the callback that owns the "
                "weights (DRESSReweighting) applies its own at fit start",
                RuntimeWarning,
                stacklevel=2,
            )
