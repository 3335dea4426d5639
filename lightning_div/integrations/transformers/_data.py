"""What the Hugging Face callback measures on: its evaluation (and training) pairs and their fixed samples."""

from __future__ import annotations

from typing import Any

from lightning_div.measure.sample import FixedSample
from lightning_div.measure.semantic import check_clusters_source
from lightning_div.pairs import DialoguePair

__all__ = ["EvaluationData"]


def _read_pairs(given: Any, field: str, who: str) -> list[DialoguePair]:
    """Pairs given as a list, or read from any source :func:`~lightning_div.datamodules.read_pairs` reads."""
    from lightning_div.datamodules.formats import pairs_from_items, read_pairs

    pairs = list(pairs_from_items(given, name=field)) if isinstance(given, (list, tuple)) else list(read_pairs(given))
    if not pairs:
        raise ValueError(f"{who}: {field} is empty")
    return pairs


class EvaluationData:
    """The evaluation pairs, the cluster texts, the training pairs of RUQ-train, and three fixed samples.

    The samples are drawn as the Lightning monitors draw theirs: the generation sample with
    ``seed`` (SemanticDiversityMonitor's), RUQ's with ``seed + 1`` (RUQMonitor's validation
    prompts), RUQ-train's with ``seed`` (RUQMonitor's training prompts). Each is drawn once and its
    indices are the state a resumed run restores.

    Args:
        who: the callback, named in errors.
        eval_pairs: the evaluation pairs, or a source :func:`~lightning_div.datamodules.read_pairs` reads.
        cluster_texts: the texts the clusters are fitted on (a list or a file), or None.
        train_pairs: RUQ-train's pairs, or None (no RUQ-train).
        num_contexts: size of the generation sample (None: all).
        num_ruq_contexts: size of RUQ's sample (None: all).
        num_train_contexts: size of RUQ-train's sample (None: all).
        seed: the draws' seed.

    Raises:
        ValueError: a sample size that is not an integer >= 1 or None.
    """

    def __init__(
        self,
        who: str,
        eval_pairs: Any,
        cluster_texts: Any,
        train_pairs: Any,
        num_contexts: int | None,
        num_ruq_contexts: int | None,
        num_train_contexts: int | None,
        seed: int,
    ) -> None:
        self.who = who
        self.eval_pairs_arg, self.cluster_texts_arg, self.train_pairs_arg = eval_pairs, cluster_texts, train_pairs
        self.samples = {
            "eval": FixedSample(num_contexts, seed),
            "ruq": FixedSample(num_ruq_contexts, seed + 1),
            "train": FixedSample(num_train_contexts, seed),
        }
        self._pairs: dict[str, list[DialoguePair]] = {}

    def _read(self, which: str) -> list[DialoguePair]:
        if which not in self._pairs:
            given = self.train_pairs_arg if which == "train" else self.eval_pairs_arg
            self._pairs[which] = _read_pairs(given, f"{which}_pairs", self.who)
        return self._pairs[which]

    def pairs(self) -> list[DialoguePair]:
        """The evaluation pairs (read once)."""
        return self._read("eval")

    def sample(self) -> list[DialoguePair]:
        """The fixed generation sample."""
        return self.samples["eval"].draw(self.pairs())

    def ruq_sample(self) -> list[DialoguePair]:
        """The fixed RUQ sample."""
        return self.samples["ruq"].draw(self.pairs())

    def train_ruq_sample(self) -> list[DialoguePair]:
        """RUQ-train's fixed sample; [] without training pairs."""
        return [] if self.train_pairs_arg is None else self.samples["train"].draw(self._read("train"))

    def cluster_texts(self) -> list[str] | None:
        """The texts the clusters are fitted on, or None when not given."""
        if self.cluster_texts_arg is None:
            return None
        from lightning_div.datamodules.formats import read_responses

        return read_responses(self.cluster_texts_arg)

    def check(self, space: Any) -> None:
        """Read the pairs and check that the clusters have a source: a misconfigured callback raises when
        training starts, not at the first evaluation.

        Args:
            space: the callback's semantic space.

        Raises:
            ValueError: empty or unreadable pairs, or neither cluster texts, clusters nor a fitted space.
        """
        self.sample()
        self.train_ruq_sample()
        check_clusters_source(space, self.cluster_texts_arg is not None, self.who)

    def state_dict(self) -> dict[str, list[int] | None]:
        """Each sample's indices."""
        return {k: s.state_dict() for k, s in self.samples.items()}

    def load_state_dict(self, indices: Any) -> None:
        """Restore :meth:`state_dict` (all or nothing).

        Raises:
            ValueError: a damaged state.
        """
        if not isinstance(indices, dict):
            raise ValueError(f"indices must be an object, got {indices!r:.80}")
        for value in indices.values():
            FixedSample.checked_indices(value)  # all checked before any is restored
        for key, value in indices.items():
            if key in self.samples:
                self.samples[key].load_state_dict(value)
