"""Sem-Ent and the lexical metrics of a model's responses to a fixed sample: ``prepare(gold)``, then ``measure``.

The measurement both front ends make (the Lightning :class:`~lightning_div.callbacks.SemanticDiversityMonitor`,
the Hugging Face :class:`~lightning_div.integrations.transformers.TrainerDiversityMonitor`): generate one
response per context (sharded over the processes and gathered), assign them to the
:class:`~lightning_div.semantic.space.SemanticSpace`'s clusters, and compute
:mod:`lightning_div.metrics`. No trainer is needed: a model adapter and a list of pairs are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lightning_div._internal.checks import warn_if_mostly_empty
from lightning_div._internal.deprecation import take_deprecated
from lightning_div.keys import EMPTY_SHARE, MOSTLY_EMPTY
from lightning_div.measure.base import LexicalSettings, Measure
from lightning_div.metrics import (
    DEFAULT_LEXICAL,
    cluster_js_divergence,
    count_vocab,
    empty_share,
    lexical_scores,
    semantic_entropy,
    top_cluster_share,
)
from lightning_div.model.generation import generate_responses
from lightning_div.pairs import DialoguePair
from lightning_div.semantic.space import SemanticSpace

__all__ = ["SemanticMeasure", "SemanticResult", "check_clusters_source"]


def check_clusters_source(
    space: SemanticSpace, gold_given: bool, who: str, alternative: str = "or a fitted space="
) -> None:
    """Check that the clusters have a source: gold responses to fit them on, given clusters, or a fitted space.

    The one "needs gold responses" check of every front end (each raises it when it starts, not
    at its first measurement).

    Args:
        space: the semantic space.
        gold_given: whether gold training responses were given (or found).
        who: the front end, named in the error.
        alternative: the front end's other way to give them, ending the error's list.

    Raises:
        ValueError: no gold responses and no clusters to measure in.
    """
    if not gold_given and space.clusters_source is None and not space.fitted:
        raise ValueError(
            f"{who} needs gold training responses to fit its semantic clusters: pass "
            f"cluster_texts=[...] (or a file), clusters=<a SemanticClusters or saved file>, {alternative}"
        )


@dataclass
class SemanticResult:
    """One measurement of :class:`SemanticMeasure`.

    Attributes:
        values: the metrics by name, unprefixed: ``sem_ent``, ``cluster_js``, ``top_cluster_share``,
            ``empty_share`` (the share of empty replies), the lexical metrics (``distinct_1`` ...) and, at the
            run's first measurement, ``sem_ent_gold``.
        responses: the generated responses, in the sample's order.
        ids: their cluster ids.
        gold_ids: the cluster ids of the sample's gold responses.
        shares: each cluster's share of the generated responses.
        gold_shares: each cluster's share of the gold responses.
    """

    values: dict[str, float]
    responses: list[str]
    ids: np.ndarray
    gold_ids: np.ndarray
    shares: list[float]
    gold_shares: list[float]


class SemanticMeasure(Measure, LexicalSettings):
    """Sem-Ent (Han et al., 2022), the cluster divergence from the gold responses and the lexical metrics.

    :meth:`prepare` once (fits or reads the space's clusters on the gold training responses,
    counts EAD's vocabulary), then :meth:`measure` at every evaluation. Its state
    (:meth:`state_dict`): whether the gold Sem-Ent was reported, EAD's vocabulary size and the
    share history (the collapse heatmap's columns).

    Args:
        space: the semantic space (encoder + clusters), shared by identity with other measures.
        lexical_metrics: names of the lexical metrics (see :func:`~lightning_div.metrics.lexical_scores`).
        lexical_options: ``tokenizer`` / ``lowercase`` / ``base`` of the lexical metrics.
        vocab_size: V of EAD; None: counted from the gold responses at :meth:`prepare`.
        generation_kwargs: overrides of the adapter's greedy + 3-gram-blocking generation.
        batch_size: contexts per generation batch.
        show_progress: progress bars.

    Raises:
        ValueError: unknown lexical names or options, or a ``vocab_size`` that is not an integer >= 1 or None.
    """

    def __init__(
        self,
        space: SemanticSpace,
        lexical_metrics: Sequence[str] = DEFAULT_LEXICAL,
        lexical_options: Mapping[str, Any] | None = None,
        vocab_size: int | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        batch_size: int = 32,
        show_progress: bool = False,
    ) -> None:
        self.space = space
        self._init_lexical(lexical_metrics, lexical_options, vocab_size)
        self.generation_kwargs = dict(generation_kwargs or {})
        self.batch_size, self.show_progress = batch_size, show_progress
        #: Whether ``sem_ent_gold`` was reported in this run (it is reported once).
        self.gold_logged: bool
        self.add_state("gold_logged", False, _check_gold_logged)
        #: EAD's V: the one given, else counted at :meth:`prepare` (a counted one is restored on resume).
        self.add_state("vocab_size", self.vocab_size, self._restored_vocab)
        #: ``(step or epoch, generated share per cluster)`` of every measurement.
        self.share_history: list[tuple[int, list[float]]]
        self.add_state("share_history", [], self._restored_history)
        # the gold responses' cluster ids, by their texts: the same sample is embedded once per run,
        # another sample (scores() is public: any pairs) gets its own
        self._cached_gold_cluster_ids: tuple[tuple[str, ...], np.ndarray] | None = None
        self._prepared = False

    @property
    def ready(self) -> bool:
        """Whether :meth:`prepare` has made the clusters and EAD's vocabulary ready for this run."""
        return self._prepared and not (self.vocab_size is None and "ead" in self.lexical_metrics)

    def prepare(
        self,
        cluster_texts: Sequence[str] | None = None,
        sample: Sequence[DialoguePair] = (),
        *,
        device: Any = None,
        broadcast: Any = None,
        cache_dir: Any = None,
        who: str = "the semantic measure",
        **deprecated: Any,
    ) -> None:
        """Make the clusters ready and count EAD's vocabulary (once; later calls do nothing).

        Under DDP every process must call it (rank 0 fits or reads the cache, the others receive).

        Args:
            cluster_texts: the texts the clusters are fitted on, the training responses (``gold=`` in 0.2;
                None when the space has given or fitted clusters).
            sample: the fixed sample (its references count EAD's vocabulary when there is no gold).
            device: where the encoder runs.
            broadcast: how rank 0's clusters reach the others (None: torch.distributed's).
            cache_dir: the clusters' cache directory when the space has no ``dirpath``.
            who: the front end, named in the error.

        Raises:
            ValueError: no gold responses and no clusters to measure in.
        """
        gold = take_deprecated("SemanticMeasure.prepare", deprecated, {"gold": "cluster_texts"})[0].get(
            "cluster_texts", cluster_texts
        )
        if not self._prepared:
            check_clusters_source(self.space, gold is not None, who)
            self.space.fit(gold, device=device, broadcast=broadcast, cache_dir=cache_dir)
            self._prepared = True
        if self.vocab_size is None and "ead" in self.lexical_metrics:
            self.vocab_size = count_vocab(
                list(gold) if gold else [p.response for p in sample],
                self.lexical_options.get("tokenizer", "13a"),
                self.lexical_options.get("lowercase"),
            )

    def scores(self, responses: Sequence[str], sample: Sequence[DialoguePair], device: Any = None) -> SemanticResult:
        """The metrics of given ``responses`` to ``sample``'s contexts (no model: a file, a list, a rollout).

        Args:
            responses: one response per pair of ``sample``.
            sample: the pairs (their gold responses are the comparison).
            device: where the encoder runs.

        Returns:
            The result; ``sem_ent_gold`` is in its values at the first measurement of the run.

        Raises:
            ValueError: not one response per pair.
        """
        if len(responses) != len(sample):
            raise ValueError(f"{len(responses)} responses for {len(sample)} pairs: give one response per pair")
        clusters = self.space.clusters
        k = clusters.num_clusters
        ids = self.space.assign(list(responses), device)
        gold_texts = tuple(p.response for p in sample)
        if (
            self._cached_gold_cluster_ids is None or self._cached_gold_cluster_ids[0] != gold_texts
        ):  # same texts, same clusters: embedded once
            self._cached_gold_cluster_ids = (gold_texts, self.space.assign(list(gold_texts), device))
        gold_ids = self._cached_gold_cluster_ids[1]
        values = {
            "sem_ent": semantic_entropy(ids, k),
            "cluster_js": cluster_js_divergence(clusters.histogram(ids), clusters.histogram(gold_ids)),
            "top_cluster_share": top_cluster_share(ids, k),
        }
        values[EMPTY_SHARE] = empty_share(responses)  # beside the lexical metrics, which say nothing of empty text
        values.update(lexical_scores(list(responses), self.lexical_metrics, self.vocab_size, **self.lexical_options))
        if not self.gold_logged:
            values["sem_ent_gold"] = semantic_entropy(gold_ids, k)
            self.gold_logged = True
        n, n_gold = max(len(ids), 1), max(len(gold_ids), 1)
        shares = (clusters.histogram(ids) / n).tolist()
        gold_shares = (clusters.histogram(gold_ids) / n_gold).tolist()
        return SemanticResult(values, list(responses), ids, gold_ids, shares, gold_shares)

    def measure(
        self, adapter: Any, sample: Sequence[DialoguePair], *, at: int, device: Any = None, who: str = "lightning-div"
    ) -> SemanticResult:
        """Generate for ``sample``'s contexts and measure the responses (every process must call it).

        Args:
            adapter: the model (a :class:`~lightning_div.model.adapters.DialogueModelAdapter`).
            sample: the fixed sample.
            at: the epoch or step, for the share history (a second measurement at the same one replaces it).
            device: where the encoder runs.
            who: named in the warning when most responses are empty.

        Returns:
            The result (the values, the responses, their clusters and shares).
        """
        responses = generate_responses(
            adapter, [p.context for p in sample], self.generation_kwargs, self.batch_size, self.show_progress
        )
        warn_if_mostly_empty(responses, who, "the evaluation sample", MOSTLY_EMPTY)
        result = self.scores(responses, sample, device)
        self.share_history = [h for h in self.share_history if h[0] != at]
        self.share_history.append((int(at), result.shares))
        return result

    def _check_history_k(self, history: list[tuple[int, list[float]]]) -> None:
        """Each restored row: one share per cluster, summing to 1 (0 for a measurement of nothing).

        The clusters' k once they are read; before, the k the space asks for (a space whose clusters are
        given as a file is checked only for equal rows until they are read).
        """
        space = self.space
        if space.fitted:
            k: int | None = space.clusters.num_clusters
        elif space.clusters_source is None:
            k = getattr(space, "num_clusters", None)
        else:
            k = len(history[0][1]) if history else None
        for e, shares in history:
            if k is not None and len(shares) != k:
                raise ValueError(f"share_history at step {e}: {len(shares)} shares, but the clusters are k = {k}")
            total = math.fsum(shares)
            if total != 0.0 and abs(total - 1.0) > 1e-6:
                raise ValueError(f"share_history at step {e}: the shares sum to {total:.6g}, not 1")

    def forget(self) -> None:
        """Start afresh: the clusters are made ready again at the next :meth:`prepare`, the gold Sem-Ent reported again."""
        self._prepared, self._cached_gold_cluster_ids, self.gold_logged = False, None, False

    def _restored_history(self, history: Any) -> list[tuple[int, list[float]]]:
        """The ``share_history`` state's check: rows of ``[step, [share per cluster]]``, each share in [0, 1],
        one per cluster of the clusters' k (once read; before, the k the space asks for), summing to 1.

        Raises:
            ValueError: a damaged history, naming the step.
        """
        try:
            restored = [(int(e), [float(v) for v in s]) for e, s in history]
        except (TypeError, ValueError) as err:
            raise ValueError(f"share_history must be a list of [step, [shares...]], got {history!r:.80}") from err
        for e, shares in restored:  # a share is a fraction of the responses: a NaN would reach the heatmap
            bad = [v for v in shares if not 0.0 <= v <= 1.0]
            if bad:
                raise ValueError(f"share_history at step {e}: a share must be a number in [0, 1], got {bad[0]!r}")
        self._check_history_k(restored)
        return restored


def _check_gold_logged(value: Any) -> bool:
    """The ``gold_logged`` state's check: true or false."""
    if not isinstance(value, bool):
        raise ValueError(f"gold_logged must be true or false, got {value!r}")
    return value
