"""SemanticGroupReward: a TRL reward function that scores each completion by the semantic diversity of its group.

DARLING (Li et al., 2025, arXiv 2509.02534) partitions each prompt's rollouts into classes of
equivalent meaning and multiplies the quality reward by a completion's diversity within its
group. :class:`SemanticGroupReward` is that diversity term for TRL's ``GRPOTrainer`` and
``RLOOTrainer``, with the equivalence pluggable:

* ``"clusters"`` (default): two completions are equivalent when the run's
  :class:`~lightning_div.semantic.space.SemanticSpace` puts them in the same k-means cluster
  (one embedding per completion, no pair is scored);
* ``"cosine"``: equivalent when their embeddings' cosine similarity is at least ``threshold``
  (made transitive: connected components, as DARLING's union-find makes its classes);
* ``"nli"``: bidirectional entailment, DARLING's and semantic entropy's (Kuhn et al., 2023)
  test: equivalent when an NLI model (:class:`~lightning_div.nli.scorer.NLIScorer`) predicts
  entailment in both directions (G (G - 1) NLI pairs per group).

The score is DARLING's by default (``score="rarity"``): the share of the other G - 1 completions
of the group that mean something else (:func:`~lightning_div.metrics.group.group_diversity_scores`),
floored at 0.1 as DARLING floors it. With a ``quality`` reward the two are multiplied as DARLING's
trainer does with its ``add_bias`` option: each group's least quality is subtracted first
(:func:`~lightning_div.metrics.group.shift_by_group_minimum`), so that a rarer completion never
gets a lower reward.

TRL calls a reward function on each process's slice of the batch, and a prompt's group may
straddle two processes; the reward gathers the slices (:func:`~.rollouts.gather_batch`), scores
the whole batch on every process (the embeddings and NLI pairs sharded over the processes) and
returns this process's part: every process gets exactly what one process would give for the
whole batch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from lightning_div._internal.checks import optional_texts
from lightning_div._internal.distributed import distributed_map, gather_objects, rank_and_world
from lightning_div.integrations.trl._deprecated import reward_legacy
from lightning_div.integrations.trl.rollouts import check_grouped, completion_texts
from lightning_div.metrics.group import (
    DIVERSITY_SCORES,
    DiversityScore,
    check_floor,
    check_groups,
    group_diversity_scores,
    partition_by_similarity,
    partition_pairs,
    shift_by_group_minimum,
    split_groups,
)
from lightning_div.metrics.nli import check_pair_scorer, checked_labels
from lightning_div.semantic.space import SemanticSpace, given_space

__all__ = ["EQUIVALENCES", "Equivalence", "SemanticGroupReward", "group_labels"]

Equivalence = Literal["clusters", "cosine", "nli"]
#: The equivalences a group's completions can be partitioned by.
EQUIVALENCES = ("clusters", "cosine", "nli")


#: Cosine similarities this close below ``threshold`` count as reaching it: float rounding must not
#: split identical completions (their cosine is 1.0 up to rounding, e.g. 0.9999999999999998).
COSINE_TOLERANCE = 1e-6


def check_threshold(threshold: Any) -> float:
    """``threshold`` as a float: a finite cosine similarity in [-1, 1] (not a bool or a string).

    Raises:
        ValueError: anything else, naming ``threshold``.
    """
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.integer, np.floating)):
        raise ValueError(f"threshold must be a cosine similarity, a number in [-1, 1], got {threshold!r}")
    value = float(threshold)
    if not -1.0 <= value <= 1.0:  # NaN fails this too
        raise ValueError(f"threshold must be a cosine similarity, a number in [-1, 1], got {threshold!r}")
    return value


def _nli_classes(scorer: Any, groups: list[list[str]]) -> list[list[int]]:
    """Each group's classes by bidirectional entailment: both (i, j) and (j, i) predicted ``entailment``."""
    premises: list[str] = []
    hypotheses: list[str] = []
    for group in groups:
        for i in range(len(group)):
            for j in range(i + 1, len(group)):
                premises += [group[i], group[j]]
                hypotheses += [group[j], group[i]]
    labels, _ = scorer.score_pairs(premises, hypotheses, show_progress=False) if premises else ([], None)
    labels = checked_labels(labels, len(premises), "nli.score_pairs")
    out, k = [], 0
    for group in groups:
        equivalent = []
        for i in range(len(group)):
            for j in range(i + 1, len(group)):
                if labels[k] == "entailment" and labels[k + 1] == "entailment":
                    equivalent.append((i, j))
                k += 2
        out.append(partition_pairs(len(group), equivalent))
    return out


def group_labels(
    texts: Sequence[str],
    num_generations: int,
    *,
    equivalence: Equivalence = "clusters",
    space: SemanticSpace | None = None,
    threshold: float = 0.9,
    nli: Any = None,
    device: Any = None,
    batch_size: int = 32,
) -> np.ndarray:
    """One class id per completion: which completions of the same group mean the same.

    Under an initialised process group every process must call it with the same ``texts`` (the
    embeddings and the NLI pairs are computed sharded over the processes, and every process
    gets all the labels).

    Args:
        texts: the whole batch's completions, each prompt's G consecutive.
        num_generations: G.
        equivalence: ``"clusters"``, ``"cosine"`` or ``"nli"`` (see the module).
        space: the semantic space (``"clusters"``: fitted; ``"cosine"``: its encoder).
        threshold: ``"cosine"``'s similarity from which two completions are equivalent, in [-1, 1]
            (similarities within 1e-6 below it count: identical completions reach 1.0).
        nli: ``"nli"``'s scorer: anything with :class:`~lightning_div.nli.scorer.NLIScorer`'s
            ``score_pairs(premises, hypotheses, show_progress)``.
        device: where the encoder runs (None: CUDA if there is one).
        batch_size: NLI pairs per batch of groups.

    Returns:
        int64 array, one class id per completion (ids are comparable within a group only).

    Raises:
        ValueError: G does not divide the batch, an unknown equivalence, a ``threshold`` outside
            [-1, 1], or what it needs missing.
    """
    texts = list(texts)
    check_groups(len(texts), num_generations)
    if equivalence not in EQUIVALENCES:
        raise ValueError(f"equivalence must be one of {EQUIVALENCES}, got {equivalence!r}")
    if not texts:
        return np.zeros(0, dtype=np.int64)
    if equivalence == "nli":
        if check_pair_scorer(nli, "nli") is None:
            raise ValueError("equivalence='nli' needs an NLI scorer: nli=NLIScorer(...)")
        pairs_per_group = max(1, num_generations * (num_generations - 1))
        classes = distributed_map(
            lambda batch: _nli_classes(nli, batch),
            split_groups(texts, num_generations),
            max(1, batch_size // pairs_per_group),
            show_progress=False,
            desc="NLI equivalence",
        )
        return np.asarray([c for group in classes for c in group], dtype=np.int64)
    if space is None:
        raise ValueError(f"equivalence={equivalence!r} needs a SemanticSpace")
    threshold = check_threshold(threshold)
    if equivalence == "clusters":
        return np.asarray(space.assign(texts, device), dtype=np.int64)
    vectors = np.asarray(space.encode(texts, device), dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors = vectors / np.where(norms > 0, norms, 1.0)
    labels: list[int] = []
    g = int(num_generations)
    for start in range(0, len(texts), g):
        block = vectors[start : start + g]
        labels += partition_by_similarity(block @ block.T, threshold - COSINE_TOLERANCE)
    return np.asarray(labels, dtype=np.int64)


class SemanticGroupReward:
    """A TRL reward function: each completion's semantic diversity within its prompt's group of G.

    ``reward(prompts=..., completions=..., **kwargs) -> list[float]``, as ``GRPOTrainer`` and
    ``RLOOTrainer`` call their reward functions; completions as text or conversational (lists of
    messages). With ``score="rarity"`` (default, DARLING's) a completion gets the share of the
    other G - 1 completions of its group that fall in another class: 1 when nothing else in the
    group means what it means, 0 when the whole group means the same. ``score="classes"`` gives
    every completion of a group the group's number of classes / G.

    The diversity is floored at ``diversity_floor`` (default 0.1, DARLING's ``max(d, 0.1)``): a
    collapsed group still passes a tenth of its quality signal on. Combined with a quality reward
    as DARLING combines them, in one line: ``SemanticGroupReward(num_generations=8,
    quality=my_reward)`` gives ``(q_i - min_group q) x max(d_i, 0.1)``: the group's least quality
    is subtracted first (``shift_quality=True``, DARLING's ``add_bias``), so that every shifted
    quality is >= 0 and a rarer completion never gets a lower reward, whatever the sign of the
    quality. ``quality`` is called with the same arguments on each process's slice; its values
    are gathered so that a group straddling two processes is shifted by its whole minimum. A
    ``None`` quality takes no part in the minimum and stays ``None``. A group whose qualities are
    all equal gets 0 for every completion (nothing to prefer in quality, and the shifted product
    carries no diversity signal either). Used alone, add it to the quality reward (TRL sums the
    reward functions, ``reward_weights`` weigh them).

    The clusters (``equivalence="clusters"``) are those of the space: given, read from its disk
    cache, or fitted once, on ``cluster_texts`` when given, else on the first batch's
    completions (gathered from every process). Share the space with a
    :class:`~lightning_div.integrations.trl.GroupDiversityMonitor` (give both the same object) so
    that both measure in one: it is fitted once, and the monitor checkpoints it (a resumed run reads
    the same clusters). A space of the reward's own is not checkpointed: one fitted on the first
    batch's completions is fitted again on a resumed run's first batch.

    Args:
        num_generations: G, the trainer's ``num_generations``; the batch must be whole groups.
        equivalence: ``"clusters"`` (default), ``"cosine"`` or ``"nli"``.
        score: ``"rarity"`` (default) or ``"classes"``.
        quality: a reward function to multiply the diversity into (None: the diversity alone).
        cluster_texts: texts to fit the clusters on (e.g. the dataset's reference replies).
        space: the :class:`~lightning_div.semantic.space.SemanticSpace` (its encoder, clusters, k ...;
            k at most the number of distinct completions fitted on); None = a private one with the
            default settings.
        threshold: ``"cosine"``'s similarity threshold, in [-1, 1] (default 0.9).
        nli: ``"nli"``'s :class:`~lightning_div.nli.scorer.NLIScorer`.
        dirpath: the clusters' cache directory when the space has none (default: the package's
            cache, ``$LIGHTNING_DIV_CACHE`` or ``~/.cache/lightning_div``, under ``clusters/``; never
            the current directory). A space shared with a monitor that fits it first is cached
            where the monitor caches (``<output_dir>/lightning_div_cache``).
        device: where the encoder runs (None: CUDA if there is one).
        batch_size: texts per encoder batch, NLI pairs per batch.
        diversity_floor: the least diversity, in [0, 1] (default 0.1, DARLING's; 0: no floor).
        shift_quality: subtract each group's least quality before the product (default True,
            DARLING's ``add_bias``; False: the raw quality).
        name: the function's ``__name__``, which TRL logs its mean under (``rewards/<name>/mean``);
            default ``"<quality's __name__>_x_semantic_diversity"`` with a ``quality``, else
            ``"semantic_group_diversity"``.
        **deprecated: 0.2's ``reference_responses`` (now ``cluster_texts``), accepted for one
            release with a ``DeprecationWarning``.

    Raises:
        ValueError: a bad ``num_generations``, ``equivalence``, ``score``, ``threshold`` or
            ``diversity_floor``, ``"nli"`` without a scorer, or ``"clusters"`` to be fitted on the
            first batch with the default k (give ``cluster_texts=`` or ``space=``).
        TypeError: a ``quality`` that is not callable, a ``shift_quality`` that is not a bool, or a
            ``space`` that is not a SemanticSpace.
    """

    def __init__(
        self,
        num_generations: int,
        *,
        equivalence: Equivalence = "clusters",
        score: DiversityScore = "rarity",
        quality: Callable[..., Sequence[float | None]] | None = None,
        cluster_texts: Sequence[str] | None = None,
        space: SemanticSpace | None = None,
        threshold: float = 0.9,
        nli: Any = None,
        dirpath: str | Path | None = None,
        device: Any = None,
        batch_size: int = 32,
        diversity_floor: float = 0.1,
        shift_quality: bool = True,
        name: str | None = None,
        **deprecated: Any,
    ) -> None:
        renamed = reward_legacy(type(self).__name__, deprecated)
        if "cluster_texts" in renamed:
            if cluster_texts is not None:
                raise TypeError(
                    f"{type(self).__name__}() got cluster_texts= and its 0.2 name: give cluster_texts= alone"
                )
            cluster_texts = renamed["cluster_texts"]
        check_groups(0, num_generations)
        if equivalence not in EQUIVALENCES:
            raise ValueError(f"equivalence must be one of {EQUIVALENCES}, got {equivalence!r}")
        if score not in DIVERSITY_SCORES:
            raise ValueError(f"score must be one of {DIVERSITY_SCORES}, got {score!r}")
        if equivalence == "nli" and check_pair_scorer(nli, "nli") is None:
            raise ValueError("equivalence='nli' needs an NLI scorer: nli=NLIScorer(...)")
        if quality is not None and not callable(quality):
            raise TypeError(f"quality must be a reward function, got {type(quality).__name__}")
        self.num_generations = int(num_generations)
        self.equivalence: Equivalence = equivalence
        self.score: DiversityScore = score
        self.quality = quality
        self.cluster_texts = optional_texts(cluster_texts, type(self).__name__, "cluster_texts")
        self.space = given_space(type(self).__name__, space, batch_size=batch_size, show_progress=False)
        self.threshold = check_threshold(threshold)
        self.nli = nli
        self.dirpath = dirpath
        self.device = device
        self.batch_size = batch_size
        self.diversity_floor = check_floor(diversity_floor, "diversity_floor")
        if not isinstance(shift_quality, bool):
            raise TypeError(f"shift_quality must be True or False, got {shift_quality!r}")
        self.shift_quality = shift_quality
        self._quality_name = "" if quality is None else str(getattr(quality, "__name__", type(quality).__name__))
        if name is None:
            name = "semantic_group_diversity" if quality is None else f"{self._quality_name}_x_semantic_diversity"
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        self.__name__ = name  # TRL names a reward function by __name__
        self._assigned: tuple[tuple[str, ...], np.ndarray] | None = None
        if equivalence == "clusters" and space is None and cluster_texts is None:
            # the default k (20) would be fitted on the first batch alone: GRPO's usual batches (2-8 prompts
            # x G) hold fewer distinct completions, and the first step would fail
            raise ValueError(
                f"{type(self).__name__}(equivalence='clusters') with neither cluster_texts= nor space= "
                f"fits its k-means clusters on the first batch's completions, and the default "
                f"num_clusters={self.space.num_clusters} needs at least that many distinct ones: give "
                "cluster_texts= (e.g. the dataset's reference replies), a space= with clusters= or "
                "num_clusters= at most the first batch's distinct completions (or a fitted or shared one), "
                "or equivalence='cosine'"
            )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_generations={self.num_generations}, equivalence={self.equivalence!r}, "
            f"score={self.score!r}, diversity_floor={self.diversity_floor}, shift_quality={self.shift_quality}, "
            f"space={self.space!r})"
        )

    def prepare(self, completions: Sequence[str]) -> None:
        """Make the clusters ready (``"clusters"`` only): on ``cluster_texts``, else on ``completions``.

        Every process must call it with the same texts (rank 0 fits, the others receive).
        """
        if self.equivalence != "clusters" or self.space.fitted:
            return
        texts = self.cluster_texts if self.cluster_texts is not None else list(completions)
        self.space.fit(texts, device=self.device, cache_dir=self.cache_dir())

    def cache_dir(self) -> Path:
        """Where fitted clusters are cached when the space has no ``dirpath``: ``dirpath``, else the package's
        cache (``clusters/`` under :func:`~lightning_div.model.loading.cache_root`)."""
        from lightning_div.model.loading import cache_root

        return Path(self.dirpath) if self.dirpath is not None else cache_root() / "clusters"

    def diversity(self, completions: Sequence[Any]) -> list[float]:
        """The diversity score of every completion of a whole batch (no gathering; see :meth:`__call__`).

        Args:
            completions: the whole batch, each prompt's G consecutive (text or conversational).

        Returns:
            One score in [``diversity_floor``, 1] per completion.
        """
        texts = completion_texts(completions)
        check_groups(len(texts), self.num_generations)
        self.prepare(texts)
        labels = group_labels(
            texts,
            self.num_generations,
            equivalence=self.equivalence,
            space=self.space,
            threshold=self.threshold,
            nli=self.nli,
            device=self.device,
            batch_size=self.batch_size,
        )
        if self.equivalence == "clusters":  # the monitor of the same space reuses them (one embedding pass a step)
            self._assigned = (tuple(texts), labels.copy())
        return group_diversity_scores(labels, self.num_generations, self.score, self.diversity_floor)

    def cluster_ids(self, texts: Sequence[str], space: SemanticSpace) -> np.ndarray | None:
        """The cluster ids of ``texts`` if this reward just assigned exactly these texts in ``space``, else None.

        A :class:`~lightning_div.integrations.trl.GroupDiversityMonitor` sharing the space reads
        them instead of embedding the step's completions a second time.

        Args:
            texts: the whole batch's completions as text.
            space: the space the ids must come from (compared by identity).

        Returns:
            A copy of the ids, or None.
        """
        if space is not self.space or self._assigned is None or self._assigned[0] != tuple(texts):
            return None
        return self._assigned[1].copy()

    def __call__(
        self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] | None = None, **kwargs: Any
    ) -> list[float | None]:
        """This process's completions' rewards, each measured within its whole group.

        Args:
            prompts: this process's prompts (passed on to ``quality``; when given, each group of
                ``num_generations`` must answer one prompt).
            completions: this process's completions, text or conversational.
            **kwargs: TRL's other reward arguments (passed on to ``quality``).

        Returns:
            One float per completion: the floored diversity; with a ``quality``,
            ``(quality - the group's least quality) x floored diversity`` (``shift_quality=False``:
            the raw quality), ``None`` where the quality is ``None``.

        Raises:
            ValueError: the gathered batch is not whole groups of ``num_generations``, a group
                answers two prompts, or ``quality`` returned a value that is not a finite number.
            TypeError: a completion that is neither text nor a list of messages, or ``quality``
                returned something that is not one number per completion.
        """
        if completions is None:
            raise TypeError(f"{self.__name__} needs completions=")
        if isinstance(completions, str):
            raise TypeError("completions must be a list of completions, got one str")
        local = list(completions)
        local_prompts = None if prompts is None or isinstance(prompts, str) else list(prompts)
        quality: list[float | None] | None = None
        problem: Exception | None = None
        if self.quality is not None:
            try:
                quality = self._quality_values(prompts, completions, len(local), kwargs)
            except (TypeError, ValueError) as error:
                problem = error
        # one collective for everything (a process that found a problem still takes part, then every
        # process raises alike); the raw completions travel, so a bad one fails on every process too
        parts = gather_objects((local, local_prompts, quality, problem))
        for part in parts:
            if part[3] is not None:
                raise part[3]
        everything = [c for part in parts for c in part[0]]
        offset = sum(len(part[0]) for part in parts[: rank_and_world()[0]])
        if all(part[1] is not None for part in parts):
            every_prompt = [p for part in parts for p in part[1]]
            if len(every_prompt) != len(everything):
                raise ValueError(f"{len(every_prompt)} prompts for {len(everything)} completions")
            check_grouped(every_prompt, self.num_generations)
        scores = self.diversity(everything)
        if self.quality is None:
            return list(scores[offset : offset + len(local)])
        every_quality = [q for part in parts for q in part[2]]
        if self.shift_quality:
            every_quality = shift_by_group_minimum(every_quality, self.num_generations)
        rewards = [None if q is None else q * d for q, d in zip(every_quality, scores)]
        return rewards[offset : offset + len(local)]

    def _quality_values(self, prompts: Any, completions: Any, count: int, kwargs: dict[str, Any]) -> list[float | None]:
        """``quality``'s rewards for this process's completions, checked: one finite number or None each."""
        assert self.quality is not None
        who = f"quality ({self._quality_name})"
        raw = self.quality(prompts=prompts, completions=completions, **kwargs)
        if hasattr(raw, "tolist") and not isinstance(raw, (str, bytes)):  # a numpy array or a tensor
            raw = raw.tolist()
        if isinstance(raw, (str, bytes, dict)) or not isinstance(raw, Sequence):
            raise TypeError(
                f"{who} must return one reward per completion (a list of floats or None), got {type(raw).__name__}"
                + (f" {raw!r}" if isinstance(raw, (int, float, str)) or raw is None else "")
            )
        values = list(raw)
        if len(values) != count:
            raise ValueError(f"{who} returned {len(values)} rewards for {count} completions")
        out: list[float | None] = []
        for i, q in enumerate(values):
            if q is None:
                out.append(None)
                continue
            if isinstance(q, (str, bytes)) or not isinstance(q, (int, float, np.integer, np.floating)):
                raise TypeError(f"{who} returned {q!r} for completion {i}: expected a float or None")
            if not math.isfinite(float(q)):
                raise ValueError(f"{who} returned {q!r} for completion {i}: a reward must be a finite number")
            out.append(float(q))
        return out


def group_rewards(trainer: Any) -> list[SemanticGroupReward]:
    """The trainer's SemanticGroupRewards, in ``reward_funcs`` order (none without a trainer)."""
    return [fn for fn in getattr(trainer, "reward_funcs", None) or [] if isinstance(fn, SemanticGroupReward)]


def reward_cluster_ids(trainer: Any, texts: list[str], space: SemanticSpace) -> np.ndarray | None:
    """The ids a SemanticGroupReward of ``trainer``, in ``space``, assigned to these very texts this step (None: none did)."""
    for fn in group_rewards(trainer):
        ids = fn.cluster_ids(texts, space)
        if ids is not None:
            return ids
    return None
