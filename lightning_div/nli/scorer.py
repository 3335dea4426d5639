"""NLI Diversity of response sets with any Hugging Face NLI model (Stasaski & Hearst, 2022).

Every ordered pair (i != j) of a set of n responses is classified with premise = r_i and
hypothesis = r_j; the n(n-1) predictions are turned into Baseline / Neutral / Confidence
NLI Diversity by :func:`lightning_div.metrics.nli_diversity`. :meth:`NLIScorer.score_sets`
scores many sets (e.g. a whole validation sample) in one length-sorted, batched pass.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from tqdm.auto import tqdm

from lightning_div._internal.bars import bar_disabled
from lightning_div._internal.distributed import length_batches
from lightning_div.metrics.nli import LABELS, VARIANTS, nli_diversity, normalise_label

DEFAULT_MODEL = "roberta-large-mnli"
# Names of the per-set values SetResult.stats() returns (and mean_set_stats averages):
# what a monitor logs, e.g. as ``val/nli_div_baseline``.
STAT_KEYS = (
    "nli_div_baseline",
    "nli_div_neutral",
    "nli_div_confidence",
    "nli_pairs_entailment",
    "nli_pairs_neutral",
    "nli_pairs_contradiction",
)


class PairScorer(Protocol):
    """What Diversity Threshold Generation needs from an NLI scorer."""

    def score_pairs(
        self, premises: Sequence[str], hypotheses: Sequence[str], show_progress: bool | None = None
    ) -> tuple[list[str], np.ndarray]:
        """Predicted label per pair and class probabilities ``[n, 3]`` in :data:`LABELS` order."""
        ...


def ordered_pairs(n: int) -> list[tuple[int, int]]:
    """All (i, j) with i != j, i-major then j: the order of a set's pair predictions.

    Args:
        n: the set size.

    Returns:
        The n(n-1) index pairs (premise, hypothesis).

    Examples:
        >>> ordered_pairs(3)
        [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    """
    return [(i, j) for i in range(n) for j in range(n) if i != j]


@dataclass(frozen=True, eq=False)
class SetResult:
    """The NLI predictions for one response set.

    ``labels[k]`` / ``probs[k]`` belong to ``pairs[k] = (i, j)`` (premise ``responses[i]``,
    hypothesis ``responses[j]``); ``probs`` columns are entailment, neutral, contradiction.
    """

    responses: tuple[str, ...]
    labels: tuple[str, ...]
    probs: np.ndarray

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SetResult):
            return NotImplemented
        return (
            self.responses == other.responses
            and self.labels == other.labels
            and np.array_equal(self.probs, other.probs)
        )

    __hash__ = object.__hash__

    @property
    def pairs(self) -> list[tuple[int, int]]:
        return ordered_pairs(len(self.responses))

    @property
    def confidences(self) -> np.ndarray:
        """Probability of the predicted class of each pair."""
        idx = np.array([LABELS.index(lab) for lab in self.labels], dtype=np.int64)
        return self.probs[np.arange(len(idx)), idx] if len(idx) else np.zeros(0)

    @property
    def counts(self) -> dict[str, int]:
        """Number of pairs predicted as each class (all three keys, canonical order)."""
        return {name: sum(lab == name for lab in self.labels) for name in LABELS}

    def diversity(self, variant: str = "baseline") -> float:
        """Baseline / Neutral / Confidence NLI Diversity; 0.0 for a set of fewer than 2 responses.

        Args:
            variant: ``"baseline"``, ``"neutral"`` or ``"confidence"``.

        Returns:
            The set's NLI Diversity.
        """
        return nli_diversity(self.labels, variant, self.confidences if variant == "confidence" else None)

    def stats(self) -> dict[str, float]:
        """The three NLI Diversity variants and the pair counts, keyed by :data:`STAT_KEYS`."""
        counts = self.counts
        values = [self.diversity(v) for v in VARIANTS] + [float(counts[name]) for name in LABELS]
        return dict(zip(STAT_KEYS, values))


def mean_set_stats(results: Sequence[SetResult | Mapping[str, float]]) -> dict[str, float]:
    """Mean over sets of each :data:`STAT_KEYS` value (pair counts: mean per set).

    Accepts SetResults or their ``stats()`` dicts (e.g. gathered from other processes).

    Args:
        results: :class:`SetResult` objects or their ``stats()`` dicts.

    Returns:
        ``{key: mean}`` over the sets for every key of :data:`STAT_KEYS`.
    """
    if not results:
        raise ValueError("mean_set_stats needs at least one set")
    rows = [r.stats() if isinstance(r, SetResult) else r for r in results]
    return {key: float(np.mean([row[key] for row in rows])) for key in STAT_KEYS}


def _label_order(id2label: Mapping[Any, Any], label_map: Mapping[int, str] | None, num_labels: int) -> np.ndarray:
    """Model output index of each canonical class (entailment, neutral, contradiction)."""
    source = "label_map" if label_map is not None else "config.id2label"
    mapping = dict(label_map if label_map is not None else id2label)
    fix = (
        "pass label_map={0: 'contradiction', 1: 'neutral', 2: 'entailment'} (with the model's real order, "
        "see its model card) to NLIScorer / NLIScorer.from_model"
    )
    names: dict[int, str] = {}
    try:
        for key, value in mapping.items():
            names[int(key)] = normalise_label(value, f"{source}[{key!r}]")
    except (TypeError, ValueError) as err:
        raise ValueError(f"cannot map {source} = {mapping!r} onto {LABELS}: {err}; {fix}") from None
    if sorted(names) != list(range(num_labels)) or num_labels != 3 or sorted(names.values()) != sorted(LABELS):
        raise ValueError(
            f"{source} = {mapping!r} (model with {num_labels} outputs) does not map one-to-one onto "
            f"the three NLI classes {LABELS}; {fix}"
        )
    by_name = {name: idx for idx, name in names.items()}
    return np.array([by_name[name] for name in LABELS], dtype=np.int64)


class NLIScorer:
    """Pairwise NLI predictions and NLI Diversity with a sequence-classification model.

    ``NLIScorer()`` loads ``roberta-large-mnli`` from the Hub; any MNLI-style model works,
    its label order is read from ``config.id2label`` (or given as ``label_map``).

    Args:
        model_name_or_path: Hub id or local directory of an MNLI-style sequence classifier.
        batch_size: pairs per forward pass.
        device: where to run (None: CUDA if available, else CPU).
        max_length: tokens per pair; longer pairs are truncated, the longer side first.
        show_progress: tqdm bars.
        label_map: ``{class index: "entailment" | "neutral" | "contradiction"}`` when
            ``config.id2label`` does not say (``LABEL_0`` ...).

    Raises:
        ValueError: a label order that cannot be read (shown in the message) and no ``label_map``.
    """

    def __init__(
        self,
        model_name_or_path: str = DEFAULT_MODEL,
        batch_size: int = 32,
        device: str | torch.device | None = None,
        max_length: int = 256,
        show_progress: bool = True,
        label_map: Mapping[int, str] | None = None,
    ) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_name_or_path)
        model = AutoModelForSequenceClassification.from_pretrained(model_name_or_path)
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self._setup(model.eval(), tokenizer, batch_size, device, max_length, show_progress, label_map)

    @classmethod
    def from_model(
        cls,
        model: Any,
        tokenizer: Any,
        batch_size: int = 32,
        device: str | torch.device | None = None,
        max_length: int = 256,
        show_progress: bool = True,
        label_map: Mapping[int, str] | None = None,
    ) -> NLIScorer:
        """A scorer around a model already in memory (``device=None`` leaves it where it is).

        Args:
            model: a Hugging Face sequence-classification model.
            tokenizer: its tokenizer.
            batch_size: pairs per forward pass.
            device: where to run (None: where the model is).
            max_length: tokens per pair.
            show_progress: tqdm bars.
            label_map: the class order, when ``config.id2label`` does not say.

        Returns:
            An NLIScorer around ``model``.
        """
        scorer = cls.__new__(cls)
        scorer._setup(model, tokenizer, batch_size, device, max_length, show_progress, label_map)
        return scorer

    def _setup(
        self,
        model: Any,
        tokenizer: Any,
        batch_size: int,
        device: str | torch.device | None,
        max_length: int,
        show_progress: bool,
        label_map: Mapping[int, str] | None,
    ) -> None:
        if batch_size < 1 or max_length < 1:
            raise ValueError(f"batch_size and max_length must be >= 1, got {batch_size} and {max_length}")
        if getattr(tokenizer, "pad_token_id", None) is None:
            raise ValueError(
                f"NLIScorer needs a tokenizer with a pad token to batch pairs; "
                f"{type(tokenizer).__name__} has none (set tokenizer.pad_token)"
            )
        config = model.config
        self._order = _label_order(
            getattr(config, "id2label", {}) or {},
            label_map,
            int(getattr(config, "num_labels", len(getattr(config, "id2label", {}) or {}))),
        )
        if device is not None:
            model = model.to(device)
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length
        self.show_progress = show_progress

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def score_pairs(
        self, premises: Sequence[str], hypotheses: Sequence[str], show_progress: bool | None = None
    ) -> tuple[list[str], np.ndarray]:
        """Predicted label (argmax) and probabilities ``[n, 3]`` (entailment, neutral, contradiction) per pair.

        Pairs are tokenised once, sorted by length and batched; identical (premise,
        hypothesis) pairs are run through the model once.

        Args:
            premises: the premise of each pair.
            hypotheses: the hypothesis of each pair.
            show_progress: a tqdm bar (None = the scorer's setting).

        Returns:
            ``(labels, probs)``: a list of class names and a float64 array ``[n, 3]``.

        Raises:
            ValueError: ``premises`` and ``hypotheses`` have different lengths.
            TypeError: a single string instead of a list, or a non-string element.
        """
        premises, hypotheses = list(premises), list(hypotheses)
        if len(premises) != len(hypotheses):
            raise ValueError(f"score_pairs got {len(premises)} premises but {len(hypotheses)} hypotheses")
        for name, texts in (("premises", premises), ("hypotheses", hypotheses)):
            for i, t in enumerate(texts):
                if not isinstance(t, str):
                    raise TypeError(f"{name}[{i}] is {type(t).__name__}, expected str")
        unique: dict[tuple[str, str], int] = {}
        where = np.array([unique.setdefault(pair, len(unique)) for pair in zip(premises, hypotheses)], dtype=np.int64)
        probs = self._predict(list(unique), self.show_progress if show_progress is None else show_progress)
        probs = probs[where] if len(where) else np.zeros((0, 3))
        return [LABELS[k] for k in probs.argmax(axis=1)], probs

    def _predict(self, pairs: list[tuple[str, str]], show_progress: bool) -> np.ndarray:
        if not pairs:
            return np.zeros((0, 3))
        encoded = self.tokenizer(
            [p for p, _ in pairs], [h for _, h in pairs], truncation=True, max_length=self.max_length
        )
        ids = encoded["input_ids"]
        # Longest first: similar lengths share a batch (little padding) and memory peaks early.
        batches = length_batches([len(row) for row in ids], self.batch_size)
        out = np.zeros((len(pairs), 3))
        columns = torch.from_numpy(self._order).to(self.device)
        model, was_training = self.model, self.model.training
        model.eval()
        try:
            with torch.inference_mode():
                for batch in tqdm(
                    batches, desc="NLI pairs", unit="batch", disable=bar_disabled(show_progress), leave=False
                ):
                    features = self.tokenizer.pad(
                        {key: [encoded[key][k] for k in batch] for key in encoded.keys()}, return_tensors="pt"
                    )
                    features = {key: value.to(self.device) for key, value in features.items()}
                    logits = model(**features).logits.float()
                    out[batch] = logits.softmax(-1)[:, columns].cpu().numpy()
        finally:
            model.train(was_training)
        return out

    def score_sets(self, sets: Sequence[Sequence[str]], show_progress: bool | None = None) -> list[SetResult]:
        """All ordered pairs of all sets in one batched pass; a SetResult per set.

        A set of fewer than 2 responses has no pairs (diversity 0.0) and gives a warning;
        duplicate responses are scored like any other pair.

        Args:
            sets: lists of responses (one list per context).
            show_progress: a tqdm bar (None = the scorer's setting).

        Returns:
            One :class:`SetResult` per set, in order.

        Raises:
            TypeError: a set that is not a list of strings (named by index).
        """
        if isinstance(sets, str):
            raise TypeError("score_sets expects a list of response sets (lists of str), got one str")
        for si, responses in enumerate(sets):
            if isinstance(responses, str):
                raise TypeError(f"sets[{si}] is a str; each set must be a list of responses")
        sets = [list(s) for s in sets]
        premises: list[str] = []
        hypotheses: list[str] = []
        small = []
        for si, responses in enumerate(sets):
            for ri, r in enumerate(responses):
                if not isinstance(r, str):
                    raise TypeError(f"sets[{si}][{ri}] is {type(r).__name__}, expected str")
            if len(responses) < 2:
                small.append(si)
            for i, j in ordered_pairs(len(responses)):
                premises.append(responses[i])
                hypotheses.append(responses[j])
        if small:
            shown = ", ".join(map(str, small[:10])) + (", ..." if len(small) > 10 else "")
            warnings.warn(
                f"{len(small)} response set(s) have fewer than 2 responses (sets {shown}); "
                f"they have no pairs and NLI Diversity 0.0",
                stacklevel=2,
            )
        labels, probs = self.score_pairs(premises, hypotheses, show_progress)
        results, start = [], 0
        for responses in sets:
            m = len(responses) * (len(responses) - 1)
            results.append(SetResult(tuple(responses), tuple(labels[start : start + m]), probs[start : start + m]))
            start += m
        return results

    def score(self, responses: Sequence[str], variant: str = "baseline") -> float:
        """NLI Diversity of one response set (``variant``: baseline, neutral or confidence).

        Args:
            responses: one set of responses.
            variant: ``"baseline"``, ``"neutral"`` or ``"confidence"``.

        Returns:
            The set's NLI Diversity.
        """
        if variant not in VARIANTS:
            raise ValueError(f"variant={variant!r} is unknown; use one of {VARIANTS}")
        if isinstance(responses, str):
            raise TypeError("score expects a list of responses, got one str")
        return self.score_sets([responses])[0].diversity(variant)

    def __repr__(self) -> str:
        return f"NLIScorer({type(self.model).__name__}, batch_size={self.batch_size}, device={self.device})"


ScorerSource = str | Path | NLIScorer
"""An NLI model name or path, or an NLIScorer: what a ``scorer=`` argument accepts (see :mod:`lightning_div.types`)."""
