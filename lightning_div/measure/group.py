"""Group diversity of GRPO/RLOO rollouts, its degeneration signals and its alert, with no trainer.

The TRL front end (:class:`~lightning_div.integrations.trl.GroupDiversityCallback`) adapts hooks
and keys; what it measures comes from here:

* :class:`GroupMeasure`: the clusters made ready once, then every step's values (the
  :class:`~lightning_div.measure.base.Measure` shape; unprefixed keys, the front end names them);
* :func:`group_metrics`: group Sem-Ent, clusters per group, the collapsed share, and the
  lexical metrics of one step's completions;
* degeneration signals from the same completions: within-group distinct-2 and the most frequent
  word's share (in :func:`group_metrics`), the share cut at the length limit
  (:func:`~lightning_div.metrics.group.length_cut_share`), and the mean NLL under a frozen
  reference model (:func:`reference_nll`);
* :class:`GroupAlert`: says when group Sem-Ent falls against its own start (*collapse*), and
  names it *breakdown* instead when the degeneration signals say the text fell apart.

Why both: a policy whose text degenerates into one repeated word, or into byte-level garbage
that never ends, can look collapsed to the clusters (everything lands in one region) or
diverse (garbage lands anywhere), while what happened is not a loss of diversity among good
answers. The alert reads the text's own signals before it calls a fall of Sem-Ent a collapse.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lightning_div._internal.checks import warn_if_mostly_empty
from lightning_div.keys import EMPTY_SHARE, MOSTLY_EMPTY
from lightning_div.measure.base import check_vocab_size, plain, restored_vocab_size
from lightning_div.metrics import (
    check_lexical_names,
    check_lexical_options,
    collapsed_share,
    count_vocab,
    empty_share,
    group_classes,
    group_distinct_n,
    group_semantic_entropy,
    lexical_scores,
    semantic_entropy,
)
from lightning_div.metrics.group import check_groups, group_top_word_share
from lightning_div.semantic.space import SemanticSpace
from lightning_div.types import Options

__all__ = ["ALERT_SIGNALS", "GroupAlert", "GroupMeasure", "group_metrics", "reference_nll"]

#: The values :meth:`GroupAlert.update` reads (unprefixed keys); the last three may be missing.
ALERT_SIGNALS = ("group_sem_ent", "group_top_word_share", "length_cut_share", "reference_nll")


def group_metrics(
    texts: Sequence[str],
    cluster_ids: Sequence[int] | np.ndarray,
    num_generations: int,
    num_clusters: int,
    lexical_metrics: Sequence[str] = ("distinct_1", "distinct_2", "ead"),
    vocab_size: int | None = None,
    lexical_options: Options | None = None,
) -> dict[str, float]:
    """Every group and batch metric of one step's completions, by unprefixed name.

    Args:
        texts: the step's completions, each prompt's G consecutive.
        cluster_ids: their cluster ids.
        num_generations: G.
        num_clusters: k, for the batch Sem-Ent.
        lexical_metrics: the lexical metrics over the whole batch (names of
            :func:`~lightning_div.metrics.lexical_scores`).
        vocab_size: V of EAD.
        lexical_options: ``tokenizer`` / ``lowercase`` / ``base`` of the lexical metrics.

    Returns:
        ``{"group_sem_ent": ..., ...}``, with the degeneration signals ``group_distinct_2`` and
        ``group_top_word_share``, and ``empty_share`` (the share of empty completions).

    Raises:
        ValueError: G does not divide the batch, or ids and texts differ in number.
    """
    texts = list(texts)
    ids = np.asarray(cluster_ids, dtype=np.int64)
    if len(ids) != len(texts):
        raise ValueError(f"{len(ids)} cluster ids for {len(texts)} completions")
    check_groups(len(texts), num_generations)
    return _group_values(texts, ids, num_generations, num_clusters, lexical_metrics, vocab_size, lexical_options)


def _group_values(
    texts: list[str],
    ids: np.ndarray,
    num_generations: int,
    num_clusters: int,
    lexical_metrics: Sequence[str],
    vocab_size: int | None,
    lexical_options: Options | None,
) -> dict[str, float]:
    """:func:`group_metrics` of texts and ids already checked (same number, G dividing it)."""
    options = check_lexical_options(lexical_options)
    tokenizer, lowercase = options.get("tokenizer", "13a"), options.get("lowercase")
    out = {
        "group_sem_ent": group_semantic_entropy(ids, num_generations),
        "group_clusters": group_classes(ids, num_generations),
        "collapsed_groups": collapsed_share(ids, num_generations),
        "group_distinct_2": group_distinct_n(texts, num_generations, 2, tokenizer, lowercase),
        "group_top_word_share": group_top_word_share(texts, num_generations, tokenizer),
        "sem_ent": semantic_entropy(ids, num_clusters),
        EMPTY_SHARE: empty_share(texts),  # beside the lexical metrics, which say nothing of empty text
        **lexical_scores(texts, check_lexical_names(lexical_metrics), vocab_size, **options),
    }
    return {k: float(v) for k, v in out.items()}


def reference_nll(
    model: Any, tokenizer: Any, prompts: Sequence[str], completions: Sequence[str], batch_size: int = 16
) -> float:
    """The mean per-token NLL (nats) of the completions, each after its prompt, under a frozen model.

    Scored as the package scores dialogue pairs
    (:func:`~lightning_div.model.scoring.token_logprobs_batched`: the prompt as the context, the
    completion and its EOS as the scored tokens; batched, no gradient, the model left as it was).
    Each completion's mean over its tokens, then the mean over completions. Under the untouched
    base model it is a fluency signal: text that falls apart gets improbable.

    Under torch.distributed every process must call it with the same pairs (a front end measures
    the whole gathered batch on each): the batches are split across the processes and the
    per-completion values gathered, so each process runs 1/W of the forward passes and all get
    the single-process value (the same batches, so the same numbers). A sharded reference model
    (FSDP, DeepSpeed ZeRO-3), whose every forward is a collective, scores all the batches on
    every process instead: uneven shares would leave the processes waiting on each other.

    Args:
        model: a Hugging Face causal or seq2seq LM (e.g. the policy before training).
        tokenizer: its tokenizer.
        prompts: one prompt (text) per completion.
        completions: the completions (text).
        batch_size: pairs per forward pass.

    Returns:
        The mean NLL.

    Raises:
        ValueError: prompts and completions differ in number, no completions (the mean NLL of nothing
            is undefined: 0.0 would read as a perfect fluency), or ``batch_size`` < 1.
        RuntimeError: the scoring failed on one of several processes (each process raises, naming it).
    """
    from lightning_div._internal.distributed import distributed_map
    from lightning_div.model.scoring import token_logprobs_batched
    from lightning_div.model.sharding import forward_communicates

    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts for {len(completions)} completions")
    if not completions:
        raise ValueError("no completions to score: the reference NLL of an empty batch is undefined")

    def score(pairs: list[tuple[str, str]]) -> list[float]:
        contexts, replies = [p for p, _ in pairs], [c for _, c in pairs]
        logprobs = token_logprobs_batched(
            model, tokenizer, contexts, replies, batch_size=len(pairs), show_progress=False
        )
        return [-float(lp.float().mean()) for lp in logprobs]

    pairs = list(zip(prompts, completions))
    lengths = [len(p) + len(c) for p, c in pairs]  # characters: similar lengths share a batch, little padding
    # a sharded model's every forward is a collective: every process then runs every batch, in the same order
    nll = distributed_map(
        score,
        pairs,
        batch_size,
        sort_key=lengths,
        show_progress=False,
        desc="reference NLL",
        split=not forward_communicates(model),
    )
    return float(np.mean(nll))


class GroupMeasure:
    """Group diversity of GRPO/RLOO rollouts, one generation batch at a time, in one semantic space.

    :meth:`prepare` fits (or reads) the clusters once, on reference responses or on the first
    batch, and counts EAD's vocabulary; :meth:`measure` gives :func:`group_metrics`' values of a
    batch (its groups checked once), with the degeneration signals it is given or can compute
    (``length_cut_share``, ``reference_nll``). Its state is the clusters file and EAD's vocabulary size.

    Args:
        space: the semantic space (share it with a reward that clusters the same completions).
        lexical_metrics: the lexical metrics over the whole batch.
        lexical_options: ``tokenizer`` / ``lowercase`` / ``base`` of the lexical metrics.
        vocab_size: V of EAD; None: counted at :meth:`prepare`. A given V is a setting: a resumed run keeps
            it (a checkpoint of another V is warned about); a counted one is restored from the checkpoint.
        device: where the encoder runs (None: CUDA if there is one).
        reference_model: a frozen model to score the completions' NLL under (None: no NLL).
        reference_tokenizer: its tokenizer (else the one :meth:`measure` is given).

    Raises:
        ValueError: unknown lexical names or options, or a ``vocab_size`` that is not an integer >= 1 or None.
    """

    def __init__(
        self,
        space: SemanticSpace,
        lexical_metrics: Sequence[str] = ("distinct_1", "distinct_2", "ead"),
        lexical_options: Options | None = None,
        vocab_size: int | None = None,
        device: Any = None,
        reference_model: Any = None,
        reference_tokenizer: Any = None,
    ) -> None:
        self.space = space
        self.lexical_metrics = check_lexical_names(lexical_metrics)
        self.lexical_options: dict[str, Any] = check_lexical_options(lexical_options)
        self.vocab_size = check_vocab_size(vocab_size)
        #: V as given (a setting: a checkpoint of another V does not replace it); None: counted.
        self.given_vocab_size = self.vocab_size
        self.device = device
        self.reference_model, self.reference_tokenizer = reference_model, reference_tokenizer
        #: The cluster ids of the last measured batch, in its order.
        self.last_ids: np.ndarray = np.zeros(0, dtype=np.int64)

    @property
    def ready(self) -> bool:
        """Whether the clusters are fitted and EAD's vocabulary is known (when EAD is measured)."""
        return self.space.fitted and not (self.vocab_size is None and "ead" in self.lexical_metrics)

    def prepare(self, texts: Sequence[str] | None, cache_dir: str | Path | None = None) -> None:
        """Fit (or read) the clusters once and count EAD's vocabulary; every process must call it.

        Args:
            texts: what to fit on and count from (reference responses, else a batch's completions);
                None: wait for texts, unless the space has clusters of its own.
            cache_dir: the clusters' cache directory when the space has no ``dirpath``.
        """
        if self.ready:
            return  # every later step: nothing to read again
        if not self.space.fitted:
            if texts is None and self.space.clusters_source is None:
                return  # no references: wait for the first step's completions
            self.space.fit(texts, device=self.device, cache_dir=None if cache_dir is None else Path(cache_dir))
        if self.vocab_size is None and "ead" in self.lexical_metrics and texts:
            self.vocab_size = count_vocab(
                list(texts), self.lexical_options.get("tokenizer", "13a"), self.lexical_options.get("lowercase")
            )

    def measure(
        self,
        texts: Sequence[str],
        num_generations: int,
        *,
        ids: np.ndarray | None = None,
        cut_share: float | None = None,
        prompts: Sequence[str] | None = None,
        tokenizer: Any = None,
        who: str = "GroupMeasure",
    ) -> dict[str, float]:
        """The values of one generation batch, by unprefixed name (every process alike).

        Args:
            texts: the batch's completions, each prompt's G consecutive.
            num_generations: G.
            ids: their cluster ids when already known (a reward in this space assigned them); None: assigned here.
            cut_share: the share of these completions cut at the length limit, when known.
            prompts: their prompts as text (for the reference NLL).
            tokenizer: the reference model's tokenizer when it was not given at construction.
            who: the front end, named in the warning when most completions are empty.

        Returns:
            :func:`group_metrics`' values, with ``length_cut_share`` and ``reference_nll`` when known.

        Raises:
            ValueError: no completions (the diversity of an empty batch is undefined: its zeros would read
                as a total collapse, and a :class:`GroupAlert` would take them as its start), G does not
                divide the batch, or a reference model without a tokenizer.
        """
        texts = list(texts)
        if not texts:
            raise ValueError("no completions to measure: the group diversity of an empty batch is undefined")
        check_groups(len(texts), num_generations)  # once, before the encoder runs
        warn_if_mostly_empty(texts, who, "a step's completions", MOSTLY_EMPTY)
        if ids is None:
            ids = self.space.assign(texts, self.device)
        self.last_ids = np.asarray(ids, dtype=np.int64)
        if len(self.last_ids) != len(texts):
            raise ValueError(f"{len(self.last_ids)} cluster ids for {len(texts)} completions")
        values = _group_values(
            texts,
            self.last_ids,
            num_generations,
            self.space.clusters.num_clusters,
            self.lexical_metrics,
            self.vocab_size,
            self.lexical_options,
        )
        if cut_share is not None:
            values["length_cut_share"] = float(cut_share)
        if self.reference_model is not None and prompts is not None:
            tokenizer = self.reference_tokenizer or tokenizer
            if tokenizer is None:
                raise ValueError("reference_model= needs reference_tokenizer=")
            values["reference_nll"] = reference_nll(self.reference_model, tokenizer, list(prompts), texts)
        return values

    def state_dict(self) -> dict[str, Any]:
        """The clusters file of the space and EAD's vocabulary size (JSON-ready)."""
        return {"space": self.space.state_dict(), "vocab_size": self.vocab_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`: the clusters file (read at :meth:`prepare` only when it was fitted with
        the space's settings, else fitted again with a warning) and a counted ``vocab_size`` (a given one
        is kept, with a warning when the state's differs).

        Raises:
            ValueError: a state that is not a dict with a ``space`` dict, or a ``vocab_size`` that is not an integer >= 1.
        """
        if not isinstance(state, dict) or not isinstance(state.get("space"), dict):
            raise ValueError(f"a GroupMeasure state must be a dict with a 'space' dict, got {state!r:.80}")
        vocab = state.get("vocab_size")
        if vocab is not None and (isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 1):
            raise ValueError(f"vocab_size {vocab!r} is not an integer >= 1")
        self.space.load_state_dict(state["space"])
        restored = restored_vocab_size(self.given_vocab_size, vocab, type(self).__name__)
        if restored is not None:
            self.vocab_size = restored

    def settings(self) -> dict[str, Any]:
        """The measurement's configuration (the space's settings, the lexical metrics), JSON-ready."""
        return {
            "space": self.space.settings_in_use(),  # the k measured with, the clusters file given
            "lexical_metrics": list(self.lexical_metrics),
            "lexical_options": plain(self.lexical_options),
            "vocab_size": self.vocab_size,
            "reference_model": None if self.reference_model is None else type(self.reference_model).__name__,
        }


def _check_threshold(value: Any, name: str, low: float, high: float | None = None) -> float | None:
    """None, or a finite number in [low, high]."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number or None, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < low or (high is not None and v > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be a finite number {bound} or None, got {value!r}")
    return v


class GroupAlert:
    """Says when group Sem-Ent falls against its own start (collapse), or when the text falls apart (breakdown).

    Each signal's *start* is the mean of its first ``start_steps`` measured values. Group
    Sem-Ent *now* is the mean of its last ``start_steps`` values (one step of a few groups is
    noise); a degeneration signal's now is its latest value (text falls apart abruptly, and the
    thresholds are far from what ordinary text gives). Once a signal's start is complete and a
    later step was measured:

    * **collapse**: group Sem-Ent now is below ``(1 - warn_drop) x`` its start, or below
      ``warn_below`` (nats; checked from the first step);
    * **breakdown** (checked first; a breakdown is not called a collapse): the most frequent
      word's share within groups is at least ``top_word_share`` (from the first step), the
      share of completions cut at the length limit rose by ``cut_rise`` or more over its start,
      or the mean NLL under the reference model rose by ``nll_rise`` nats or more over its start.

    :meth:`update` returns the kind (``"collapse"``, ``"breakdown"`` or None) and its reasons.
    Its state (every signal's values so far, and which kinds were warned of) is
    :meth:`state_dict`, which a resumed run restores.

    Args:
        warn_drop: the relative fall of group Sem-Ent that is a collapse (0.25: a quarter; None: never).
        warn_below: the group Sem-Ent (nats) below which it is a collapse (None: never).
        start_steps: how many first measurements make each signal's start (and the window of "now").
        top_word_share: the within-group top-word share from which the text broke down (None: never).
        cut_rise: the rise of the length-cut share over its start that is a breakdown (None: never).
        nll_rise: the rise of the reference NLL (nats) over its start that is a breakdown (None: never).
        names: what the reasons call each threshold, by its name here: a front end's own argument
            (``{"top_word_share": "breakdown_top_word"}``), so that a warning names what the user set.

    Raises:
        ValueError: a threshold that is not a finite number in its range (or None), or
            ``start_steps`` not an integer >= 1.

    Examples:
        >>> alert = GroupAlert(warn_drop=0.25, start_steps=2)
        >>> [alert.update({"group_sem_ent": v, "group_top_word_share": 0.1})[0] for v in (1.0, 1.0, 0.9, 0.5, 0.3)]
        [None, None, None, 'collapse', 'collapse']
    """

    def __init__(
        self,
        warn_drop: float | None = 0.25,
        warn_below: float | None = None,
        start_steps: int = 5,
        top_word_share: float | None = 0.4,
        cut_rise: float | None = 0.3,
        nll_rise: float | None = 1.0,
        names: Mapping[str, str] | None = None,
    ) -> None:
        #: What the reasons call each threshold (the front end's argument names).
        self.names = dict(names or {})
        self.warn_drop = _check_threshold(warn_drop, "warn_drop", 0.0, 1.0)
        self.warn_below = _check_threshold(warn_below, "warn_below", 0.0)
        if isinstance(start_steps, bool) or not isinstance(start_steps, (int, np.integer)) or start_steps < 1:
            raise ValueError(f"start_steps must be an integer >= 1, got {start_steps!r}")
        self.start_steps = int(start_steps)
        self.top_word_share = _check_threshold(top_word_share, "top_word_share", 0.0, 1.0)
        self.cut_rise = _check_threshold(cut_rise, "cut_rise", 0.0, 1.0)
        self.nll_rise = _check_threshold(nll_rise, "nll_rise", 0.0)
        #: Every signal's measured values, in order (the starts are their first ``start_steps``).
        self.values: dict[str, list[float]] = {k: [] for k in ALERT_SIGNALS}
        #: The kinds already warned of in this run (each is warned of once).
        self.warned: set[str] = set()

    def _called(self, threshold: str) -> str:
        """The name a reason gives a threshold: the front end's argument, else the name here."""
        return self.names.get(threshold, threshold)

    def start(self, signal: str) -> float | None:
        """The signal's start: the mean of its first ``start_steps`` values (None until there are that many)."""
        seen = self.values[signal]
        return float(np.mean(seen[: self.start_steps])) if len(seen) >= self.start_steps else None

    def now(self, signal: str) -> float | None:
        """The signal now: the mean of its last ``start_steps`` values (None before any)."""
        seen = self.values[signal]
        return float(np.mean(seen[-self.start_steps :])) if seen else None

    def latest(self, signal: str) -> float | None:
        """The signal's latest value (None before any)."""
        seen = self.values[signal]
        return seen[-1] if seen else None

    def _risen(self, signal: str, rise: float | None) -> tuple[float, float] | None:
        """(start, latest) when the signal's latest value is ``rise`` or more above its complete start."""
        start, now = self.start(signal), self.latest(signal)
        if rise is None or start is None or now is None or len(self.values[signal]) <= self.start_steps:
            return None
        return (start, now) if now - start >= rise else None

    def update(self, values: dict[str, float]) -> tuple[str | None, list[str]]:
        """Add one step's values and say whether they alert.

        Args:
            values: the step's signals by :data:`ALERT_SIGNALS` name (``group_sem_ent`` required;
                a missing or non-finite other signal is not counted).

        Returns:
            ``(kind, reasons)``: kind ``"breakdown"``, ``"collapse"`` or None; reasons in words
            (what, now, start, the threshold).

        Raises:
            ValueError: no finite ``group_sem_ent`` >= 0, or a signal given as a boolean or a non-number
                (checked before anything is kept, as :meth:`load_state_dict` checks a state).
        """
        sem = values.get("group_sem_ent")
        number = (int, float, np.integer, np.floating)
        if isinstance(sem, bool) or not isinstance(sem, number) or not math.isfinite(sem) or sem < 0:
            raise ValueError(f"GroupAlert.update needs a finite group_sem_ent >= 0 (an entropy), got {sem!r}")
        for signal in ALERT_SIGNALS:
            v = values.get(signal)
            if v is not None and (isinstance(v, bool) or not isinstance(v, number)):
                raise ValueError(f"GroupAlert.update: {signal} must be a number, got {v!r}")
        for signal in ALERT_SIGNALS:
            v = values.get(signal)
            if v is not None and math.isfinite(float(v)):
                self.values[signal].append(float(v))
        breakdown = []
        top = self.latest("group_top_word_share")
        if self.top_word_share is not None and top is not None and top >= self.top_word_share:
            breakdown.append(
                f"the most frequent word is {top:.0%} of the words within a group, averaged over groups "
                f"({self._called('top_word_share')} = {self.top_word_share})"
            )
        cut = self._risen("length_cut_share", self.cut_rise)
        if cut is not None:
            breakdown.append(
                f"{cut[1]:.0%} of the completions are cut at the length limit, up from {cut[0]:.0%} at the start "
                f"({self._called('cut_rise')} = {self.cut_rise})"
            )
        nll = self._risen("reference_nll", self.nll_rise)
        if nll is not None:
            breakdown.append(
                f"the reference model's NLL is {nll[1]:.2f}, up from {nll[0]:.2f} at the start ({self._called('nll_rise')} = {self.nll_rise})"
            )
        sem_start, sem_now = self.start("group_sem_ent"), self.now("group_sem_ent")
        assert sem_now is not None
        collapse = []
        if (
            self.warn_drop is not None
            and sem_start is not None
            and len(self.values["group_sem_ent"]) > self.start_steps
            and sem_now < (1.0 - self.warn_drop) * sem_start
        ):
            collapse.append(
                f"group Sem-Ent is {sem_now:.3f}, down {1 - sem_now / sem_start:.0%} from {sem_start:.3f} at the start "
                f"({self._called('warn_drop')} = {self.warn_drop})"
            )
        if self.warn_below is not None and sem_now < self.warn_below:
            collapse.append(f"group Sem-Ent is {sem_now:.3f}, below {self._called('warn_below')} = {self.warn_below}")
        if breakdown:
            return "breakdown", breakdown + collapse
        return ("collapse", collapse) if collapse else (None, [])

    def state_dict(self) -> dict[str, Any]:
        """The values so far and the kinds warned of (JSON-ready)."""
        return {"values": {k: list(v) for k, v in self.values.items()}, "warned": sorted(self.warned)}

    def load_state_dict(self, state: Any) -> None:
        """Restore :meth:`state_dict`'s values.

        Raises:
            ValueError: anything but a dict of lists of finite numbers by signal, and a list of kinds.
        """
        if not isinstance(state, dict) or not isinstance(state.get("values"), dict):
            raise ValueError(f"a GroupAlert state must be a dict with 'values', got {state!r}")
        values: dict[str, list[float]] = {k: [] for k in ALERT_SIGNALS}
        for key, seen in state["values"].items():
            if key not in values or not isinstance(seen, list):
                raise ValueError(f"a GroupAlert state has an unknown signal or not a list: {key!r}")
            for v in seen:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise ValueError(f"a GroupAlert state's {key} holds {v!r}, not a finite number")
            values[key] = [float(v) for v in seen]
        warned = state.get("warned", [])
        if not isinstance(warned, list) or any(k not in ("collapse", "breakdown") for k in warned):
            raise ValueError(f"a GroupAlert state's 'warned' must list 'collapse' / 'breakdown', got {warned!r}")
        self.values, self.warned = values, set(warned)
