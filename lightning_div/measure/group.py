"""Group diversity of GRPO/RLOO rollouts, its degeneration signals and its alert, with no trainer.

The TRL front end (:class:`~lightning_div.integrations.trl.GroupDiversityMonitor`) adapts hooks
and keys; what it measures comes from here:

* :class:`GroupMeasure`: the clusters made ready once, then every step's values (the
  :class:`~lightning_div.measure.base.Measure` shape; unprefixed keys, the front end names them);
* :func:`group_metrics`: group Sem-Ent, clusters per group, the collapsed share, and the
  lexical metrics of one step's completions;
* degeneration signals from the same completions: within-group distinct-2 and the most frequent
  word's share (in :func:`group_metrics`), the share cut at the length limit
  (:func:`~lightning_div.metrics.group.length_cut_share`), and the mean NLL under a frozen
  reference model (:func:`reference_nll`);
* :class:`~lightning_div.measure.alerts.GroupAlert` (in :mod:`lightning_div.measure.alerts`, importable
  from here too): says when group Sem-Ent falls against its own start (*collapse*), and
  names it *breakdown* instead when the degeneration signals say the text fell apart.

Why both: a policy whose text degenerates into one repeated word, or into byte-level garbage
that never ends, can look collapsed to the clusters (everything lands in one region) or
diverse (garbage lands anywhere), while what happened is not a loss of diversity among good
answers. The alert reads the text's own signals before it calls a fall of Sem-Ent a collapse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lightning_div._internal.checks import warn_if_mostly_empty
from lightning_div._internal.deprecation import take_deprecated
from lightning_div.keys import EMPTY_SHARE, MOSTLY_EMPTY
from lightning_div.measure.alerts import ALERT_SIGNALS, GroupAlert
from lightning_div.measure.base import LexicalSettings, Measure
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

# the alert is its own module (measure/alerts.py); its names stay importable from here
__all__ = ["ALERT_SIGNALS", "GroupAlert", "GroupMeasure", "group_metrics", "reference_nll"]


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


class GroupMeasure(Measure, LexicalSettings):
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
        ref_model: the frozen model to score the completions' NLL under (None: no NLL), as TRL calls it.
        ref_tokenizer: its tokenizer (else the one :meth:`measure` is given).
        **deprecated: 0.2's ``reference_model`` / ``reference_tokenizer``, accepted with a warning.

    Raises:
        ValueError: unknown lexical names or options, or a ``vocab_size`` that is not an integer >= 1 or None.
    """

    def __init__(
        self,
        space: SemanticSpace,
        lexical_metrics: Sequence[str] = ("distinct_1", "distinct_2", "ead"),
        lexical_options: Mapping[str, Any] | None = None,
        vocab_size: int | None = None,
        device: Any = None,
        ref_model: Any = None,
        ref_tokenizer: Any = None,
        **deprecated: Any,
    ) -> None:
        renamed, _ = take_deprecated(
            "GroupMeasure", deprecated, {"reference_model": "ref_model", "reference_tokenizer": "ref_tokenizer"}
        )
        ref_model, ref_tokenizer = renamed.get("ref_model", ref_model), renamed.get("ref_tokenizer", ref_tokenizer)
        self.space = space
        self._init_lexical(lexical_metrics, lexical_options, vocab_size)
        self.device = device
        self.ref_model, self.ref_tokenizer = ref_model, ref_tokenizer
        self.add_part("space")  # the clusters file in use, so that a resumed run reads the very same clusters
        #: EAD's V: the one given, else counted at :meth:`prepare` (a counted one is restored on resume).
        self.add_state("vocab_size", self.vocab_size, self._restored_vocab)
        #: The cluster ids of the last measured batch, in its order.
        self.last_ids: np.ndarray = np.zeros(0, dtype=np.int64)

    @property
    def ready(self) -> bool:
        """Whether the clusters are fitted and EAD's vocabulary is known (when EAD is measured)."""
        return self.space.fitted and not (self.vocab_size is None and "ead" in self.lexical_metrics)

    def prepare(
        self, cluster_texts: Sequence[str] | None = None, cache_dir: str | Path | None = None, **deprecated: Any
    ) -> None:
        """Fit (or read) the clusters once and count EAD's vocabulary; every process must call it.

        Args:
            cluster_texts: what to fit on and count from (reference responses, else a batch's completions;
                ``texts=`` in 0.2); None: wait for texts, unless the space has clusters of its own.
            cache_dir: the clusters' cache directory when the space has no ``dirpath``.
        """
        texts = take_deprecated("GroupMeasure.prepare", deprecated, {"texts": "cluster_texts"})[0].get(
            "cluster_texts", cluster_texts
        )
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
        if self.ref_model is not None and prompts is not None:
            tokenizer = self.ref_tokenizer or tokenizer
            if tokenizer is None:
                raise ValueError("ref_model= needs ref_tokenizer=")
            values["reference_nll"] = reference_nll(self.ref_model, tokenizer, list(prompts), texts)
        return values

    def settings(self) -> dict[str, Any]:
        """The measurement's configuration (the space's settings, the lexical metrics), JSON-ready: the
        constructor's arguments, the frozen model and tokenizer by their type."""
        out = super().settings()
        for name in ("ref_model", "ref_tokenizer"):
            model = getattr(self, name)
            out[name] = None if model is None else type(model).__name__
        return out
