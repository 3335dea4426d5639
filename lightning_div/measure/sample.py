"""The fixed evaluation sample: drawn once from the evaluation pairs, kept across measurements and restored on resume."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from lightning_div.pairs import DialoguePair

__all__ = ["FixedSample", "check_seed", "sample_indices"]


def check_seed(seed: Any, name: str = "seed") -> int:
    """A seed as given: an integer >= 0 (numpy's ``int64`` too), returned as an ``int``.

    None would seed the draw from the operating system, a different sample at every draw;
    ``True`` and ``"3"`` only look like seeds.

    Raises:
        ValueError: anything else, naming ``name``.
    """
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {seed!r}")
    return int(seed)


def sample_indices(n_total: int, n: int | None, seed: int) -> np.ndarray:
    """The fixed evaluation samples of both front ends: a random subset of ``range(n_total)`` (all of it when n is None or >= n_total), sorted.

    A function of its arguments only, so every process, a resumed run and the Hugging Face
    callback draw the same subset.
    """
    if n is None or n >= n_total:
        return np.arange(n_total)
    if n < 1:
        raise ValueError(f"the sample size must be >= 1 or None, got {n}")
    return np.sort(np.random.default_rng(seed).choice(n_total, size=n, replace=False))


class FixedSample:
    """``size`` pairs drawn with ``seed`` the first time they are asked for, then the same ones at every measurement.

    The draw is :func:`sample_indices`: a function of the
    number of pairs, ``size`` and ``seed`` only, so every process draws the same pairs. The
    indices are the state (:meth:`state_dict`): indices restored from a checkpoint win over a
    new draw, so a resumed run measures the very same examples, unless the data shrank below
    them (then the sample is drawn again).

    Args:
        size: how many pairs (None: all of them).
        seed: the draw's seed (an integer >= 0: a sample drawn without one would not be fixed).

    Raises:
        ValueError: a ``size`` that is not an integer >= 1 or None, or a ``seed`` that is not an integer >= 0.

    Examples:
        >>> from lightning_div.pairs import DialoguePair
        >>> pairs = [DialoguePair(("hi",), f"reply {i}") for i in range(10)]
        >>> sample = FixedSample(3, seed=0)
        >>> [p.response for p in sample.draw(pairs)]
        ['reply 5', 'reply 6', 'reply 9']
        >>> again = FixedSample(3, seed=5)
        >>> again.load_state_dict(sample.state_dict())
        >>> again.draw(pairs) == sample.draw(pairs)
        True
    """

    def __init__(self, size: int | None, seed: int) -> None:
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ValueError(f"the sample size must be an integer >= 1 or None, got {size!r}")
        self.size: int | None = size
        self.seed: int = check_seed(seed, "the sample's seed")
        self._indices: list[int] | None = None
        self._pairs: list[DialoguePair] | None = None

    @property
    def indices(self) -> list[int] | None:
        """The drawn (or restored) indices into the evaluation pairs; None before the first draw."""
        return None if self._indices is None else list(self._indices)

    @property
    def drawn(self) -> bool:
        """Whether :meth:`draw` has picked the pairs."""
        return self._pairs is not None

    def draw(self, pairs: Sequence[DialoguePair]) -> list[DialoguePair]:
        """The sample's pairs of ``pairs`` (drawn at the first call; later calls return the same ones).

        Args:
            pairs: all the evaluation pairs (a sequence: a streaming one reads only the sampled items).

        Returns:
            The sampled pairs, in the order of their indices.

        Raises:
            ValueError: ``pairs`` is empty.
        """
        if self._pairs is None:
            if len(pairs) == 0:
                raise ValueError("the evaluation pairs are empty: there is nothing to sample")
            idx = self._indices
            if idx is None or (idx and max(idx) >= len(pairs)):
                idx = sample_indices(len(pairs), self.size, self.seed).tolist()
            self._indices = [int(i) for i in idx]
            self._pairs = [pairs[i] for i in self._indices]
        return list(self._pairs)

    def forget(self) -> None:
        """Draw again at the next :meth:`draw` (the settings changed on resume)."""
        self._indices, self._pairs = None, None

    def state_dict(self) -> list[int] | None:
        """The indices (None before the first draw): all a resumed run needs to measure the same pairs."""
        return self.indices

    def load_state_dict(self, indices: Any) -> None:
        """Restore :meth:`state_dict`'s indices; the pairs are picked again from them at the next :meth:`draw`.

        Args:
            indices: a list of distinct integers, at most ``size`` of them, or None (nothing drawn yet).

        Raises:
            ValueError: anything else (a damaged state): an empty list, a repeated index, more indices than ``size``.
        """
        checked = self.checked_indices(indices)
        if checked is not None and self.size is not None and len(checked) > self.size:
            raise ValueError(
                f"a sample of size {self.size} cannot have {len(checked)} saved indices, got {indices!r:.80}"
            )
        self._pairs = None
        self._indices = checked

    @staticmethod
    def checked_indices(indices: Any) -> list[int] | None:
        """Saved indices as :meth:`load_state_dict` takes them: a non-empty list of distinct integers >= 0, or None.

        A drawn sample is never empty (drawing from no pairs is an error) and never holds a pair
        twice, so an empty list or a repeated index can only be a damaged state.

        Raises:
            ValueError: anything else (a damaged state).
        """
        if indices is None:
            return None
        if not isinstance(indices, (list, tuple)) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indices
        ):
            raise ValueError(f"a sample's saved indices must be a list of integers >= 0, got {indices!r:.80}")
        if not indices:
            raise ValueError("a sample's saved indices are empty: a drawn sample holds at least one pair")
        if len(set(indices)) != len(indices):
            raise ValueError(f"a sample's saved indices repeat a pair, got {indices!r:.80}")
        return [int(i) for i in indices]
