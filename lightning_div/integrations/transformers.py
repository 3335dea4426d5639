"""The diversity monitors in Hugging Face ``transformers.Trainer`` and TRL's ``SFTTrainer``.

:class:`DiversityTrainerCallback` is the Hugging Face counterpart of
:class:`~lightning_div.callbacks.SemanticDiversityMonitor` and
:class:`~lightning_div.callbacks.RUQMonitor` together: at each evaluation it generates responses
for a fixed sample of evaluation contexts with the trainer's model and logs Sem-Ent, the lexical
metrics, the cluster divergence from the gold responses and RUQ, named as the Trainer names its
evaluation metrics: ``eval_<metric>`` (``eval_sem_ent``, ``eval_distinct_2``, ``eval_ruq`` ...),
which the Trainer's trackers (TensorBoard, W&B, Comet ...) show as ``eval/<metric>``: the Lightning
monitors' ``val/<metric>`` names with ``eval/`` for ``val/``. Like ``eval_loss``, they can be
``metric_for_best_model`` (``"sem_ent"``).

```python
trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=val)
DiversityTrainerCallback(eval_pairs=val_pairs, gold_responses=train_responses, encoder="minilm").attach(trainer)
trainer.train()  # trainer.state.log_history holds {"eval_sem_ent": ..., "eval_ruq": ..., "step": ...}
```

The values go through ``trainer.log`` right after the Trainer's own evaluation log, so they reach
``trainer.state.log_history`` and every ``report_to`` tracker (W&B, TensorBoard, MLflow ...) as
the loss does; they are also added to the metrics ``trainer.evaluate()`` returns. This is why the
callback is given its trainer (:meth:`DiversityTrainerCallback.attach`) instead of being passed in
``callbacks=[...]``: a ``TrainerCallback`` is given the model, not the trainer, and the Trainer logs
an evaluation's metrics *before* its callbacks' ``on_evaluate``, so adding to them there would reach
no tracker.

Nothing here imports Lightning. The measurements are those of the Lightning monitors, on the same
framework-free parts: a :class:`~lightning_div.semantic.space.SemanticSpace` (clusters fitted once
on the gold training responses and kept in the same disk cache), the
:class:`~lightning_div.model.adapters.HuggingFaceAdapter` (greedy generation with 3-gram blocking,
in eval mode under a forked RNG: the training mode and random stream are restored), and
:mod:`lightning_div.metrics`. Under ``torchrun`` / ``accelerate launch`` every process must run the
evaluation (the Trainer does): generation and scoring are sharded over the processes and gathered
(:func:`lightning_div._internal.distributed.distributed_map`).
"""

from __future__ import annotations

import time
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from transformers import Trainer, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from lightning_div._internal.checks import MEASUREMENT_ERRORS, check_finite_model, warn_if_all_empty
from lightning_div._internal.distributed import distributed_map, rank_and_world
from lightning_div._internal.tracking import warn_once
from lightning_div.core import DialoguePair
from lightning_div.datamodules.encoding import DialogueCollator, EncodedDialogues, encode_pairs
from lightning_div.datamodules.samplers import WeightedDistributedSampler, check_sampling_weights, sample_indices
from lightning_div.dress.losses import dress_loss
from lightning_div.dress.protocol import MODES, Mode, check_choice
from lightning_div.dress.state import DressState
from lightning_div.dress.weights import dress_weights
from lightning_div.keys import NEGATIVE, NEGATIVE_LOSS, SAMPLE_WEIGHT
from lightning_div.metrics import (
    DEFAULT_LEXICAL,
    check_lexical_names,
    check_lexical_options,
    cluster_js_divergence,
    count_vocab,
    lexical_scores,
    semantic_entropy,
    top_cluster_share,
)
from lightning_div.metrics.ruq import ReferenceChoice, check_reference, ruq_per_idk
from lightning_div.model.adapters import HuggingFaceAdapter
from lightning_div.model.formatting import DialogueFormat, is_seq2seq
from lightning_div.model.generation import pad_id_of
from lightning_div.model.scoring import candidate_logprobs, scores_from_logprobs
from lightning_div.semantic.space import SemanticSpace, space_from_arguments
from lightning_div.types import ClustersSource, EncoderSource, Options, PairsSource, ResponsesSource
from lightning_div.views import cluster_shares, log_cards_once, log_collapse, log_samples_table

__all__ = [
    "DIALOGPT_CHAT_TEMPLATE",
    "DRESS_FIELDS",
    "EVAL_PREFIX",
    "DiversityTrainerCallback",
    "DressTrainer",
    "DressTrainerMixin",
    "as_messages",
    "dress_dataset",
    "eval_key",
    "gold_dress_state",
]

#: A chat template with DialoGPT's token layout, the one lightning-div trains, generates and scores
#: with (:class:`~lightning_div.model.formatting.DialogueFormat`'s default): every turn's content
#: followed by the EOS token, whoever speaks, and nothing else (no role names, no generation
#: prompt: the response starts right after the last turn's EOS). DialoGPT's tokenizers, and the
#: base model's, ship no chat template; set ``tokenizer.chat_template = DIALOGPT_CHAT_TEMPLATE``
#: before TRL's ``SFTTrainer`` reads a conversational (``messages``) dataset. The assistant turns
#: are marked ``{% generation %}``, so ``SFTConfig(assistant_only_loss=True)`` trains on the
#: responses only, as :class:`~lightning_div.datamodules.DialogueDataModule` does.
DIALOGPT_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] + eos_token }}{% endgeneration %}"
    "{% else %}{{ message['content'] + eos_token }}{% endif %}"
    "{% endfor %}"
)


def as_messages(pair: DialoguePair) -> dict[str, list[dict[str, str]]]:
    """A dialogue pair as one conversational example for TRL: ``{"messages": [{"role", "content"}, ...]}``.

    The response is the assistant's turn; the context's turns alternate backwards from it, so the
    last context turn is the user's (``user, assistant, user, assistant`` for a 3-turn context).

    Args:
        pair: a :class:`~lightning_div.core.DialoguePair` (its extra references are not used).

    Returns:
        The example, in TRL's conversational format.
    """
    n = len(pair.context)
    turns = [{"role": "user" if (n - i) % 2 else "assistant", "content": t} for i, t in enumerate(pair.context)]
    return {"messages": [*turns, {"role": "assistant", "content": pair.response}]}


#: What the Trainer puts before an evaluation metric (``eval_loss``); its trackers show it as ``eval/``.
EVAL_PREFIX = "eval_"


def eval_key(metric: str, name: str | None = None) -> str:
    """The key of a metric measured at a Hugging Face evaluation: ``eval_<metric>`` (``eval_<name>/<metric>``).

    The Trainer's trackers (``transformers.integrations``' TensorBoard, W&B, Comet ... callbacks)
    rewrite ``eval_`` to ``eval/``: ``eval_sem_ent`` is charted as ``eval/sem_ent``, the Lightning
    monitors' ``val/sem_ent`` with ``eval/`` for ``val/``.

    Args:
        metric: the monitors' metric name (``"sem_ent"``, ``"distinct_2"``, ``"ruq"`` ...).
        name: the callback's ``name``, if any.
    """
    return f"{EVAL_PREFIX}{name}/{metric}" if name else f"{EVAL_PREFIX}{metric}"


def _read_pairs(given: Any, field: str, who: str) -> list[DialoguePair]:
    """Pairs given as a list, or read from any source :func:`~lightning_div.datamodules.read_pairs` reads."""
    from lightning_div.datamodules.formats import pairs_from_items, read_pairs

    pairs = list(pairs_from_items(given, name=field)) if isinstance(given, (list, tuple)) else list(read_pairs(given))
    if not pairs:
        raise ValueError(f"{who}: {field} is empty")
    return pairs


def _stateful(state: TrainerState) -> dict[str, Any]:
    """``state.stateful_callbacks``: typed as a list, a dict once the state exists (``TrainerState.__post_init__``)."""
    stateful: Any = state.stateful_callbacks
    if not isinstance(stateful, dict):
        stateful = state.stateful_callbacks = {}  # type: ignore[assignment]
    return stateful


class DiversityTrainerCallback(TrainerCallback):
    """Sem-Ent, lexical diversity and RUQ of the model's responses at every ``Trainer`` evaluation.

    At each evaluation (``on_evaluate``; also before the first step with ``measure_at_start``):

    * generate one response (greedy, 3-gram blocking, ``max_new_tokens``) for each of a fixed
      sample of ``num_contexts`` evaluation contexts, drawn once with ``seed`` as
      :class:`~lightning_div.callbacks.SemanticDiversityMonitor` draws it;
    * log ``eval_sem_ent``, ``eval_cluster_js``, ``eval_top_cluster_share``, the lexical metrics
      (``eval_distinct_1`` ... ``eval_ead``) and, at the first measurement, ``eval_sem_ent_gold``
      (Sem-Ent of the same contexts' gold responses);
    * score the references and the IDK strings of a fixed sample of ``num_ruq_prompts`` evaluation
      pairs (drawn with ``seed + 1``, as :class:`~lightning_div.callbacks.RUQMonitor` draws its
      validation sample) and log ``eval_ruq``, ``eval_ruq_margin`` and, per IDK string,
      ``eval_ruq_idk<j>`` and ``eval_ruq_margin_idk<j>`` (``idk_responses=()`` skips RUQ), and
      ``eval_ruq_alert`` (see ``warn_below`` / ``warn_drop``); with ``train_pairs``, the same on a
      fixed sample of ``num_train_ruq_prompts`` training pairs (drawn with ``seed``, as RUQMonitor
      draws its training prompts), logged as ``ruq``, ``ruq_margin`` ... (``<name>/ruq`` with a
      name), which the trackers chart as ``train/ruq``: the paper's RUQ-train, the Lightning
      monitor's ``train/ruq``;
    * log ``eval_diversity_runtime``, the seconds the measurement took;
    * on the first process, send the figures and tables of the Lightning monitor to the trainer's
      ``report_to`` trackers that take them (TensorBoard, W&B, MLflow) and write them to
      ``<output_dir>/lightning_div/``: the labelled cluster histogram (``eval/cluster_histogram``),
      with ``cluster_views`` the steps x clusters heatmap (``eval/cluster_shares``),
      ``eval_cluster_shares.csv`` and the cluster cards (``eval/clusters/cards``, once), and
      ``log_samples`` generated responses beside the gold ones (``eval/samples``).

    The keys are :func:`eval_key`'s: the trackers chart them as ``eval/sem_ent`` ... .

    The clusters are fitted once on ``gold_responses`` in a
    :class:`~lightning_div.semantic.space.SemanticSpace` (or read from its disk cache in
    ``dirpath``, default ``<output_dir>/lightning_div_cache``: a Lightning run with the same
    encoder, settings and gold responses wrote the same file).

    Args:
        eval_pairs: the evaluation dialogues as text: ``[(context, response), ...]`` pairs or any
            source :func:`~lightning_div.datamodules.read_pairs` reads (the trainer's
            ``eval_dataset`` is tokenized, so it cannot be read back).
        gold_responses: the gold training responses the clusters are fitted on (a list, a file,
            or a source ``read_pairs`` reads); not needed with ``clusters`` or a fitted ``space``.
        space: a :class:`~lightning_div.semantic.space.SemanticSpace` to measure in (share one
            with other callbacks); None = a private one from the arguments below. Both: an error.
        encoder: the response encoder (default ``lightning_div.keys.DEFAULT_ENCODER``;
            ``"minilm"`` works offline).
        clusters: fitted SemanticClusters or a saved file; None = fit on ``gold_responses``.
        num_clusters: k (default 20).
        variance_kept: PCA variance kept (default 0.9).
        kmeans_seed: the k-means seed (default 27).
        encoder_kwargs: more ResponseEncoder arguments.
        num_contexts: size of the generation sample (None = all evaluation pairs).
        generation_kwargs: overrides of the greedy + ``no_repeat_ngram_size=3`` default.
        lexical_metrics: which lexical metrics to log (see :func:`~lightning_div.metrics.lexical_scores`).
        lexical_options: ``tokenizer`` / ``lowercase`` / ``base`` of the lexical metrics.
        vocab_size: V of EAD; default: counted from the gold responses.
        idk_responses: RUQ's IDK strings, the first is the headline; empty = no RUQ.
        num_ruq_prompts: size of RUQ's sample (None = all evaluation pairs).
        train_pairs: training dialogues as text (as ``eval_pairs``) for RUQ-train; None = no RUQ-train.
        num_train_ruq_prompts: size of RUQ-train's sample (None = all training pairs).
        reference: with several references per prompt, ``"lowest"`` or ``"first"`` (see RUQMonitor).
        warn_below: alert when ``eval_ruq`` falls below this (None disables it).
        warn_drop: alert when ``eval_ruq`` drops by more than this many points since the last
            measurement (None disables it). An alert is a warning and ``eval_ruq_alert`` = 1 (else 0),
            as RUQMonitor's ``val/ruq_alert``.
        seed: the samples' seed (and generation's, when it samples).
        tokenizer: the model's tokenizer; None = the trainer's ``processing_class``.
        format: the token layout (default ``DialogueFormat()``: DialoGPT's ``turn<eos>...``); it
            must be the one the model is trained with.
        batch_size: contexts per generation batch, pairs per scoring batch, texts per encoder batch.
        max_new_tokens: the generation length limit.
        dirpath: the clusters' cache directory (default ``<args.output_dir>/lightning_div_cache``).
        show_progress: progress bars while generating, scoring, embedding and fitting (the monitors' bars).
        on_error: ``"warn"`` (default): a failed measurement is skipped with a warning and training
            continues; ``"raise"`` re-raises.
        name: goes into every key, ``eval_<name>/sem_ent`` (several callbacks in one trainer).
        log_samples: how many generated responses go in the ``eval/samples`` table (0 = none).
        cluster_views: log the cluster cards, the steps x clusters heatmap and the shares CSV
            (the histogram is always logged), as the monitor's ``cluster_views``.
        measure_at_start: measure once before the first training step as well (a baseline, logged at step 0).

    Raises:
        ValueError: a bad setting (``on_error``, lexical names or options, ``reference``, an
            empty IDK string), or ``space`` together with a space argument.
    """

    def __init__(
        self,
        eval_pairs: PairsSource | Sequence[DialoguePair],
        gold_responses: ResponsesSource | None = None,
        *,
        space: SemanticSpace | None = None,
        encoder: EncoderSource | None = None,
        clusters: ClustersSource | None = None,
        num_clusters: int | None = None,
        variance_kept: float | None = None,
        kmeans_seed: int | None = None,
        encoder_kwargs: Options | None = None,
        num_contexts: int | None = 256,
        generation_kwargs: Options | None = None,
        lexical_metrics: Sequence[str] = DEFAULT_LEXICAL,
        lexical_options: Options | None = None,
        vocab_size: int | None = None,
        idk_responses: Sequence[str] = ("I don't know.", "I don't know what to do."),
        num_ruq_prompts: int | None = 256,
        train_pairs: PairsSource | Sequence[DialoguePair] | None = None,
        num_train_ruq_prompts: int | None = 256,
        reference: ReferenceChoice = "lowest",
        warn_below: float | None = None,
        warn_drop: float | None = 10.0,
        seed: int = 0,
        tokenizer: Any = None,
        format: DialogueFormat | None = None,
        batch_size: int = 32,
        max_new_tokens: int = 32,
        dirpath: str | Path | None = None,
        show_progress: bool = True,
        on_error: str = "warn",
        name: str | None = None,
        log_samples: int = 8,
        cluster_views: bool = True,
        measure_at_start: bool = False,
    ) -> None:
        if on_error not in ("warn", "raise"):
            raise ValueError(f"on_error must be 'warn' or 'raise', got {on_error!r}")
        if name is not None and (not isinstance(name, str) or not name.strip() or name != name.strip()):
            raise ValueError(f"name must be None or a non-empty string without surrounding spaces, got {name!r}")
        idk = list(idk_responses)
        if not all(isinstance(s, str) and s.strip() for s in idk):
            raise ValueError(f"idk_responses must be non-empty strings, got {idk_responses!r}")
        self.lexical_options: dict[str, Any] = check_lexical_options(lexical_options)
        self.space = space_from_arguments(
            type(self).__name__,
            space,
            encoder=encoder,
            clusters=clusters,
            num_clusters=num_clusters,
            variance_kept=variance_kept,
            kmeans_seed=kmeans_seed,
            encoder_kwargs=encoder_kwargs,
            batch_size=batch_size,
            show_progress=show_progress,
        )
        self.eval_pairs_arg = eval_pairs
        self.gold_responses_arg = gold_responses
        self.num_contexts = num_contexts
        self.generation_kwargs: dict[str, Any] = dict(generation_kwargs or {})
        self.lexical_metrics = check_lexical_names(lexical_metrics)
        self.vocab_size = vocab_size
        self.idk_responses = idk
        self.num_ruq_prompts = num_ruq_prompts
        self.train_pairs_arg = train_pairs
        self.num_train_ruq_prompts = num_train_ruq_prompts
        self._train_pairs: list[DialoguePair] | None = None
        self.reference = check_reference(reference)
        self.warn_below, self.warn_drop = warn_below, warn_drop
        #: The last measured ``eval_ruq`` (what ``warn_drop`` compares with).
        self.last_ruq: float | None = None
        self.seed = seed
        self.tokenizer = tokenizer
        self.format = format or DialogueFormat()
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self.dirpath = dirpath
        self.show_progress = show_progress
        self.on_error = on_error
        self.name = name
        if isinstance(log_samples, bool) or not isinstance(log_samples, int) or log_samples < 0:
            raise ValueError(f"log_samples must be an integer >= 0, got {log_samples!r}")
        self.log_samples = log_samples
        self.cluster_views = cluster_views
        #: ``(step, generated share per cluster)`` of every measurement: the heatmap's columns.
        self.share_history: list[tuple[int, list[float]]] = []
        self.measure_at_start = measure_at_start
        self.trainer: Any = None
        #: Every measurement's values, ``{"step": ..., "<key>": ...}`` (rank 0 and the others alike).
        self.history: list[dict[str, float]] = []
        #: The responses generated at the last measurement, in the order of :meth:`sample`.
        self.last_responses: list[str] = []
        self._pairs: list[DialoguePair] | None = None
        self._gold_ids: np.ndarray | None = None
        self._last_ids: np.ndarray | None = None
        self._gold_logged = False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(space={self.space!r}, num_contexts={self.num_contexts}, name={self.name!r})"

    # -- wiring ------------------------------------------------------------------------------------

    def attach(self, trainer: Any) -> DiversityTrainerCallback:
        """Add this callback to ``trainer`` and log through it (``trainer.log``).

        Args:
            trainer: a ``transformers.Trainer`` (TRL's trainers are ones).

        Returns:
            This callback.

        Raises:
            ValueError: another attached DiversityTrainerCallback with the same ``name`` (they
                would log over each other's keys), or this one attached to another trainer.
        """
        if self.trainer is not None and self.trainer is not trainer:
            raise ValueError(f"{type(self).__name__} is already attached to another trainer")
        for cb in trainer.callback_handler.callbacks:
            if isinstance(cb, DiversityTrainerCallback) and cb is not self and cb.name == self.name:
                raise ValueError(
                    f"two {type(self).__name__}s in this trainer have name={self.name!r}, so they would log the "
                    "same keys: give each its own name=... (it goes into the keys: 'eval_<name>/...')"
                )
        if self not in trainer.callback_handler.callbacks:
            trainer.add_callback(self)
        self.trainer = trainer
        return self

    def log_key(self, key: str) -> str:
        """``key`` as this callback logs it: ``eval_<metric>`` as ``eval_<name>/<metric>`` and a
        training metric (``ruq``) as ``<name>/ruq`` when a name is set."""
        if key.startswith(EVAL_PREFIX):
            return eval_key(key.removeprefix(EVAL_PREFIX), self.name)
        return f"{self.name}/{key}" if self.name else key

    # -- data --------------------------------------------------------------------------------------

    def pairs(self) -> list[DialoguePair]:
        """The evaluation pairs (read once)."""
        if self._pairs is None:
            self._pairs = _read_pairs(self.eval_pairs_arg, "eval_pairs", type(self).__name__)
        return self._pairs

    def train_ruq_sample(self) -> list[DialoguePair]:
        """RUQ-train's fixed sample (drawn with ``seed``, as RUQMonitor draws its training prompts); [] without ``train_pairs``."""
        if self.train_pairs_arg is None:
            return []
        if self._train_pairs is None:
            self._train_pairs = _read_pairs(self.train_pairs_arg, "train_pairs", type(self).__name__)
        pairs = self._train_pairs
        return [pairs[i] for i in sample_indices(len(pairs), self.num_train_ruq_prompts, self.seed)]

    def sample(self) -> list[DialoguePair]:
        """The fixed generation sample (the same pairs at every evaluation)."""
        pairs = self.pairs()
        return [pairs[i] for i in sample_indices(len(pairs), self.num_contexts, self.seed)]

    def ruq_sample(self) -> list[DialoguePair]:
        """The fixed RUQ sample (drawn with ``seed + 1``, as RUQMonitor draws its validation prompts)."""
        pairs = self.pairs()
        return [pairs[i] for i in sample_indices(len(pairs), self.num_ruq_prompts, self.seed + 1)]

    def gold_responses(self) -> list[str] | None:
        """The gold training responses the clusters are fitted on, or None when not given."""
        if self.gold_responses_arg is None:
            return None
        from lightning_div.datamodules.formats import read_responses

        return read_responses(self.gold_responses_arg)

    def prepare(self, cache_dir: str | Path, device: Any = None) -> None:
        """Read the data and make the clusters ready (cached or fitted once; every process must call it)."""
        sample = self.sample()
        if not self.space.fitted:
            gold = self.gold_responses()
            if gold is None and self.space.clusters_source is None:
                raise ValueError(
                    f"{type(self).__name__} needs gold training responses to fit its semantic clusters: pass "
                    "gold_responses=[...] (or a file), clusters=<a SemanticClusters or saved file>, or a fitted space="
                )
            self.space.fit(gold, device=device, cache_dir=Path(self.dirpath or cache_dir))
        if self.vocab_size is None and "ead" in self.lexical_metrics:
            gold = self.gold_responses()
            self.vocab_size = count_vocab(
                gold if gold else [p.response for p in sample],
                self.lexical_options.get("tokenizer", "13a"),
                self.lexical_options.get("lowercase"),
            )

    # -- measurement -------------------------------------------------------------------------------

    def adapter(self, model: Any, tokenizer: Any) -> HuggingFaceAdapter:
        """The model as the measurements reach it (built fresh each time: the current weights and device)."""
        return HuggingFaceAdapter(
            model,
            tokenizer,
            format=self.format,
            batch_size=self.batch_size,
            max_new_tokens=self.max_new_tokens,
            show_progress=False,
            seed=self.seed,
        )

    def generate(self, adapter: HuggingFaceAdapter, contexts: Sequence[Sequence[str]]) -> list[str]:
        """One response per context, batches sharded across processes and gathered in order."""

        def gen(batch: list[list[str]]) -> list[str]:
            return adapter.generate(batch, **self.generation_kwargs)

        turns = [list(c) for c in contexts]
        return distributed_map(
            gen,
            turns,
            self.batch_size,
            sort_key=[sum(map(len, c)) for c in turns],
            show_progress=self.show_progress,
            desc=f"generating ({len(turns)} contexts)",  # the monitors' progress bar
        )

    def ruq(self, adapter: HuggingFaceAdapter, pairs: Sequence[DialoguePair]) -> dict[str, float]:
        """RUQ and its margin per IDK string (``ruq``, ``ruq_idk1``, ``ruq_margin`` ...), as RUQMonitor computes them.

        Each prompt's references and IDK strings are scored after one pass over its context
        (:func:`lightning_div.model.scoring.candidate_logprobs`); whole prompts are sharded over
        the processes.
        """
        items = [(list(p.context), [*p.all_references, *self.idk_responses]) for p in pairs]

        def score(batch: list[tuple[list[str], list[str]]]) -> list[Any]:
            return candidate_logprobs(adapter, [c for c, _ in batch], [rs for _, rs in batch])

        per_prompt = max(len(rs) for _, rs in items)
        logprobs = distributed_map(
            score,
            items,
            max(1, self.batch_size // per_prompt),
            sort_key=[sum(len(t) for t in c) + max(map(len, rs)) for c, rs in items],
            show_progress=self.show_progress,
            desc=f"RUQ scoring ({sum(len(rs) for _, rs in items)} pairs)",
        )
        scores = [scores_from_logprobs(lp) for lp in logprobs]
        return ruq_per_idk(scores, [len(p.all_references) for p in pairs], len(self.idk_responses), self.reference)

    def ruq_alert(self, value: float) -> float:
        """1.0 (and a warning, on the first process) when RUQ fell below ``warn_below`` or by more than ``warn_drop``.

        Args:
            value: this measurement's RUQ; it becomes :attr:`last_ruq`.

        Returns:
            1.0 on an alert, else 0.0.
        """
        reasons = []
        if self.warn_below is not None and value < self.warn_below:
            reasons.append(f"eval_ruq = {value:.1f} is below warn_below = {self.warn_below}")
        last = self.last_ruq
        if self.warn_drop is not None and last is not None and last - value > self.warn_drop:
            reasons.append(f"eval_ruq dropped from {last:.1f} to {value:.1f} (more than warn_drop = {self.warn_drop})")
        self.last_ruq = value
        if rank_and_world()[0] == 0:
            for reason in reasons:
                warnings.warn(
                    f"{type(self).__name__}: {reason}: the model increasingly prefers {self.idk_responses[0]!r}",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return 1.0 if reasons else 0.0

    def measure(self, model: Any, tokenizer: Any, cache_dir: str | Path) -> dict[str, float]:
        """Every metric of one evaluation, keyed as logged (without the ``name`` prefix).

        Every process must call it (the work is sharded over them); every process gets the values.

        Args:
            model: the Hugging Face model (unwrapped; it is put in eval mode and restored).
            tokenizer: its tokenizer.
            cache_dir: where fitted clusters are cached when the callback has no ``dirpath``.

        Returns:
            ``{"eval_sem_ent": ..., "eval_distinct_1": ..., "eval_ruq": ..., ...}``.
        """
        from lightning_div.model.generation import model_device

        device = model_device(model)
        self.prepare(cache_dir, device)
        who = type(self).__name__
        sample = self.sample()
        adapter = self.adapter(model, tokenizer)
        check_finite_model(model, who, adapter)  # NaN weights or logits are named, not measured as empty text
        responses = self.generate(adapter, [p.context for p in sample])
        warn_if_all_empty(responses, who, "the evaluation sample")
        clusters = self.space.clusters
        k = clusters.num_clusters
        ids = self.space.assign(responses, device)
        if self._gold_ids is None:  # the same texts in the same clusters at every evaluation: embedded once
            self._gold_ids = self.space.assign([p.response for p in sample], device)
        out: dict[str, float] = {
            eval_key("sem_ent"): semantic_entropy(ids, k),
            eval_key("cluster_js"): cluster_js_divergence(clusters.histogram(ids), clusters.histogram(self._gold_ids)),
            eval_key("top_cluster_share"): top_cluster_share(ids, k),
        }
        lexical = lexical_scores(responses, self.lexical_metrics, self.vocab_size, **self.lexical_options)
        out.update({eval_key(n): v for n, v in lexical.items()})
        if not self._gold_logged:
            out[eval_key("sem_ent_gold")] = semantic_entropy(self._gold_ids, k)
        if self.idk_responses:
            values = self.ruq(adapter, self.ruq_sample())
            out.update({eval_key(n): v for n, v in values.items()})
            out[eval_key("ruq_alert")] = self.ruq_alert(values["ruq"])
            train_sample = self.train_ruq_sample()
            if train_sample:  # un-prefixed keys are the Trainer's training metrics: charted as train/ruq
                out.update(self.ruq(adapter, train_sample))
        self._gold_logged = True
        self.last_responses = responses
        self._last_ids = ids
        return out

    def figure_key(self, key: str) -> str:
        """A figure's or table's key as the trackers show it: the monitor's ``val/x`` as ``eval/x``
        (``eval/<name>/x`` with a name), beside the scalars' ``eval/<metric>`` charts."""
        return "eval/" + (f"{self.name}/" if self.name else "") + key.removeprefix("val/")

    def log_views(self, output_dir: str | Path) -> None:
        """The last measurement's figures and tables to the trainer's trackers and ``<output_dir>/lightning_div/``.

        Called on the first process only, after :meth:`measure` (nothing here is a collective).
        """
        out = Path(output_dir) / "lightning_div"
        sample, clusters, ids, gold_ids = self.sample(), self.space.clusters, self._last_ids, self._gold_ids
        if ids is None or gold_ids is None:
            return
        gold_share = cluster_shares(clusters, gold_ids)
        if self.cluster_views:
            log_cards_once(self.trainer, clusters, out, self.figure_key)
        log_collapse(
            self.trainer, clusters, self.share_history, gold_share, out, self.cluster_views, self.figure_key, "step"
        )
        if self.log_samples > 0:
            key = self.figure_key("val/samples")
            log_samples_table(self.trainer, key, sample, self.last_responses, ids, gold_ids, self.log_samples, out)

    def _measure_and_log(
        self, args: TrainingArguments, state: TrainerState, kwargs: dict[str, Any]
    ) -> dict[str, float]:
        if self.trainer is None:
            raise ValueError(
                f"{type(self).__name__} logs through its trainer: add it with callback.attach(trainer), "
                "not Trainer(callbacks=[...]) (a TrainerCallback is never given the trainer)"
            )
        model = kwargs.get("model") or self.trainer.model
        tokenizer = self.tokenizer or kwargs.get("processing_class") or getattr(self.trainer, "processing_class", None)
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a multimodal processor holds the tokenizer
        if tokenizer is None:
            raise ValueError(f"{type(self).__name__}: the trainer has no processing_class: pass tokenizer=")
        start = time.perf_counter()
        try:
            values = self.measure(model, tokenizer, Path(args.output_dir or ".") / "lightning_div_cache")
        except MEASUREMENT_ERRORS as err:  # a programming error (TypeError, AttributeError ...) propagates
            if self.on_error == "raise":
                raise
            warn_once(
                f"hf:{self.name}:{type(err).__name__}",
                f"{type(self).__name__} skipped the measurement at step {state.global_step}: {err!r} "
                f"(training continues; on_error='raise' to stop)\n{traceback.format_exc(limit=3)}",
            )
            values = {}
        if self._last_ids is not None and eval_key("sem_ent") in values:
            shares = cluster_shares(self.space.clusters, self._last_ids)
            self.share_history = [h for h in self.share_history if h[0] != state.global_step]
            self.share_history.append((int(state.global_step), shares))
            if state.is_world_process_zero:
                self.log_views(args.output_dir or ".")
        values[eval_key("diversity_runtime")] = time.perf_counter() - start
        logged = {self.log_key(k): float(v) for k, v in values.items()}
        self.history.append({"step": float(state.global_step), **logged})
        # Saved with every later checkpoint: the Trainer writes the whole dict into trainer_state.json.
        # Not an ExportableState: restore_callback_states_from_checkpoint would rebuild the callback
        # from saved constructor arguments, and the evaluation pairs are no JSON.
        _stateful(state)[self.state_key()] = self.state_dict()
        self.trainer.log(dict(logged))  # a copy: Trainer.log adds "epoch" to the dict it is given
        return logged

    # -- hooks -------------------------------------------------------------------------------------

    def state_key(self) -> str:
        """Where this callback's state sits in ``TrainerState.stateful_callbacks`` (one key per ``name``)."""
        return "lightning_div.DiversityTrainerCallback" + (f"[{self.name}]" if self.name else "")

    def settings(self) -> dict[str, Any]:
        """What a saved state must have been measured with to be restored (the samples and the clusters)."""
        return {
            "num_contexts": self.num_contexts,
            "num_ruq_prompts": self.num_ruq_prompts,
            "num_train_ruq_prompts": self.num_train_ruq_prompts if self.train_pairs_arg is not None else None,
            "seed": self.seed,
            "idk_responses": list(self.idk_responses),
            "space": self.space.settings(),
        }

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to continue as the uninterrupted one: whether the gold Sem-Ent was
        logged, the last RUQ (``warn_drop`` compares with it) and the heatmap's columns so far."""
        return {
            "settings": self.settings(),
            "gold_logged": self._gold_logged,
            "last_ruq": self.last_ruq,
            "share_history": [[step, list(shares)] for step, shares in self.share_history],
        }

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s values; a state saved with other settings is refused with a warning."""
        if saved.get("settings") != self.settings():
            warn_once(
                f"hf:{self.name}:state",
                f"{type(self).__name__}: the checkpoint's state was saved with other settings "
                f"({saved.get('settings')!r}, now {self.settings()!r}); it starts afresh",
            )
            return
        self._gold_logged = bool(saved["gold_logged"])
        self.last_ruq = None if saved["last_ruq"] is None else float(saved["last_ruq"])
        self.share_history = [(int(step), [float(v) for v in shares]) for step, shares in saved["share_history"]]

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        """Restore the state a resumed checkpoint holds; measure a baseline before the first step (``measure_at_start``).

        The state travels in the checkpoint's ``trainer_state.json`` (``stateful_callbacks``, under
        :meth:`state_key`), which the Trainer has loaded by now, wherever the checkpoint was resumed from.
        """
        saved = _stateful(state).get(self.state_key()) if state.global_step > 0 else None
        if isinstance(saved, dict):
            self.load_state_dict(saved)
        if self.measure_at_start and state.global_step == 0:
            self._measure_and_log(args, state, kwargs)

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        """Measure, log through ``trainer.log``, and add the values to the evaluation's metrics."""
        logged = self._measure_and_log(args, state, kwargs)
        metrics = kwargs.get("metrics")
        if isinstance(metrics, dict):  # what trainer.evaluate() returns: the evaluation's metrics, not RUQ-train
            metrics.update({k: v for k, v in logged.items() if k.startswith(EVAL_PREFIX)})


# -- DRESS -----------------------------------------------------------------------------------------------

#: The fields a DRESS batch carries besides the model's inputs (DialogueCollator's): read by the loss, not the model.
DRESS_FIELDS = (SAMPLE_WEIGHT, NEGATIVE, NEGATIVE_LOSS, "index")


def gold_dress_state(
    space: SemanticSpace,
    gold_responses: Sequence[str],
    *,
    lam: float = 30.0,
    normalize: bool = False,
    cache_dir: str | Path | None = None,
    device: Any = None,
) -> DressState:
    """A :class:`~lightning_div.dress.state.DressState` holding the gold weights, as DRESSReweighting computes them.

    The clusters are fitted on (or read from the cache for) ``gold_responses``, and each response
    gets w = (1 - p_train(c))^lam (:func:`~lightning_div.dress.weights.dress_weights`).

    Args:
        space: the semantic space (shared with a :class:`DiversityTrainerCallback` it is fitted once).
        gold_responses: the training responses, in the training dataset's order.
        lam: the exponent (the paper: 30).
        normalize: rescale the weights to mean 1.
        cache_dir: the clusters' cache directory when the space has no ``dirpath``.
        device: where the encoder runs.

    Returns:
        The state, without negatives.
    """
    gold = list(gold_responses)
    space.fit(gold, device=device, cache_dir=cache_dir)
    ids = space.gold_assignments(gold, device=device)
    return DressState(weights=dress_weights(ids, space.clusters.num_clusters, lam, normalize), negative_batches="mixed")


def dress_dataset(
    pairs: Sequence[DialoguePair],
    tokenizer: Any,
    model: Any,
    state: DressState | None = None,
    mode: Mode = "loss",
    format: DialogueFormat | None = None,
) -> tuple[EncodedDialogues, DialogueCollator]:
    """The training dataset and collator of a DRESS run in a ``Trainer``: gold pairs, then the state's negatives.

    Each item is one example's token ids with its weight (``mode="loss"``; all 1.0 with
    ``"sampler"``, where the weights decide the draws instead) and whether it is a negative; the
    collator pads them into ``input_ids`` / ``attention_mask`` / ``labels`` plus the DRESS fields
    (:data:`DRESS_FIELDS`), as :class:`~lightning_div.datamodules.DialogueDataModule` does.

    Args:
        pairs: the gold training pairs (the order of ``state.weights``).
        tokenizer: the model's tokenizer.
        model: the model (its window and layout are read from it).
        state: the weights and negatives; None = every weight 1, no negatives (an evaluation set).
        mode: ``"loss"`` or ``"sampler"``.
        format: the token layout (default ``DialogueFormat()``).

    Returns:
        ``(dataset, collator)`` for ``Trainer(train_dataset=..., data_collator=...)``.

    Raises:
        ValueError: weights that do not match the pairs, or negatives to train in batches of
            their own (``negative_batches="separate"``: the Trainer front end mixes them in).
    """
    check_choice("mode", mode, MODES)
    if state is None:
        state = DressState(weights=np.ones(len(pairs)), negative_batches="mixed")
    if state.weights is None or len(state.weights) != len(pairs):
        got = "no weights" if state.weights is None else f"{len(state.weights)} weights"
        raise ValueError(f"dress_dataset: the DressState holds {got} for {len(pairs)} training pairs")
    if state.negative_pairs and state.negative_batches != "mixed":
        raise ValueError(
            "dress_dataset: the Trainer front end trains negatives mixed in with the gold examples: "
            "DressState(negative_batches='mixed')"
        )
    encoded = encode_pairs([*pairs, *state.negative_pairs], tokenizer, model, format, show_progress=False)
    weights = state.all_weights() if mode == "loss" else None
    dataset = EncodedDialogues(encoded, weights, num_negatives=len(state.negative_pairs))
    collator = DialogueCollator(pad_id_of(tokenizer), seq2seq=is_seq2seq(model), negative_loss=state.negative_loss)
    return dataset, collator


class DressTrainerMixin:
    """DRESS in a ``transformers.Trainer``: the weighted sampler and the weighted / negative loss.

    Mix it in before the trainer class (:class:`DressTrainer` is ``Trainer``'s), then give it the state:

    ```python
    class MyTrainer(DressTrainerMixin, Trainer): ...

    state = gold_dress_state(space, [p.response for p in train])
    dataset, collator = dress_dataset(train, tokenizer, model, state, mode="loss")
    trainer = MyTrainer(model=model, args=args, train_dataset=dataset, data_collator=collator)
    trainer.set_dress(state, mode="loss")
    ```

    ``mode="loss"``: every batch carries its examples' weights and the loss is
    :func:`~lightning_div.dress.losses.dress_loss` (negatives as ``state.negative_loss`` says).
    ``mode="sampler"``: the train sampler draws ``len(dataset)`` examples per epoch with
    probability proportional to the weights (:class:`~lightning_div.datamodules.samplers.WeightedDistributedSampler`
    seeded with ``args.seed`` + epoch: on one process the very draws of DialogueDataModule with that seed)
    and the loss is unweighted. Under several processes the draws are one stream that accelerate
    splits into per-process batches. Label smoothing is ``args.label_smoothing_factor``, applied to
    the gold examples only, as DialogueLM's ``label_smoothing``.
    """

    dress_state: DressState | None = None
    dress_mode: Mode = "loss"

    def set_dress(self, state: DressState, mode: Mode = "loss") -> None:
        """Train with ``state``'s weights (and negatives, in loss mode) from the next train dataloader on.

        Args:
            state: the DRESS state (:func:`gold_dress_state`, or one DRESSReweighting filled).
            mode: ``"loss"`` or ``"sampler"``.

        Raises:
            ValueError: an unknown mode, no weights, negatives or weights < 0 in sampler mode, or
                ``remove_unused_columns=True`` (it would drop the DRESS fields from the batches).
        """
        check_choice("mode", mode, MODES)
        if state.weights is None:
            raise ValueError("set_dress: the DressState has no weights yet (gold_dress_state computes them)")
        if mode == "sampler":
            if np.count_nonzero(state.negative_weights):
                raise ValueError("set_dress: negatives cannot be drawn by a sampler (weights < 0): use mode='loss'")
            check_sampling_weights(state.all_weights(), "DRESS sampling weights")
        trainer: Any = self
        if trainer.args.remove_unused_columns:
            raise ValueError(
                "set_dress: DRESS batches carry sample_weight, negative and negative_loss, which "
                "remove_unused_columns=True would drop: TrainingArguments(remove_unused_columns=False)"
            )
        # The loss is a per-batch token mean, as in the Lightning path: the Trainer divides it by the
        # gradient accumulation steps instead of expecting a loss normalised by num_items_in_batch.
        trainer.model_accepts_loss_kwargs = False
        self.dress_state, self.dress_mode = state, mode

    def _get_train_sampler(self, train_dataset: Any = None) -> Any:
        trainer: Any = self
        if self.dress_state is None or self.dress_mode != "sampler":
            return super()._get_train_sampler(train_dataset)  # type: ignore[misc]
        dataset = train_dataset if train_dataset is not None else trainer.train_dataset
        return WeightedDistributedSampler(
            dataset, self.dress_state.all_weights(), num_replicas=1, rank=0, seed=trainer.args.seed
        )

    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        """:func:`~lightning_div.dress.losses.dress_loss` of the batch (its DRESS fields are not given to the model)."""
        if self.dress_state is None:
            return super().compute_loss(  # type: ignore[misc]
                model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
            )
        trainer: Any = self
        fields = {k: inputs[k] for k in DRESS_FIELDS if k in inputs}
        model_inputs = {k: v for k, v in inputs.items() if k not in DRESS_FIELDS}
        labels = model_inputs["labels"]
        seq2seq = is_seq2seq(trainer.accelerator.unwrap_model(model))
        if not seq2seq:  # the model's own loss is not wanted: the labels stay out of its forward
            model_inputs.pop("labels")
        outputs = model(**model_inputs)
        smoothing = float(trainer.args.label_smoothing_factor) if model.training else 0.0
        weighted = fields if model.training else {}  # evaluation measures the plain NLL, as DialogueLM does
        loss = dress_loss(outputs.logits, labels, weighted, causal=not seq2seq, label_smoothing=smoothing).loss
        return (loss, outputs) if return_outputs else loss


class DressTrainer(DressTrainerMixin, Trainer):
    """A ``transformers.Trainer`` with :class:`DressTrainerMixin` (call :meth:`set_dress` before training)."""
