"""The fixed evaluation samples of a Lightning callback, by name: drawn once, checkpointed, restored on resume."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lightning_div.measure.sample import FixedSample
from lightning_div.pairs import DialoguePair

__all__ = ["FixedSamples"]


class FixedSamples:
    """A callback's :class:`~lightning_div.measure.sample.FixedSample` s by name (``"val"``, ``"train"``).

    Indices restored from a checkpoint win over a new draw, so a resumed run measures the very
    same examples (unless the data shrank below them: then the sample is drawn again).
    """

    def __init__(self) -> None:
        self._drawn: dict[str, FixedSample] = {}
        self._restored: dict[str, list[int]] = {}  # indices from a checkpoint, for samples not drawn yet

    def __contains__(self, key: str) -> bool:
        return key in self._drawn

    def get(
        self, key: str, size: int | None, seed: int, pairs: Callable[[], Sequence[DialoguePair]]
    ) -> list[DialoguePair]:
        """Sample ``key``: ``size`` examples of ``pairs()`` drawn with ``seed`` (``pairs`` is called at the first draw only)."""
        sample = self._drawn.get(key)
        if sample is None:
            sample = self._drawn[key] = FixedSample(size, seed)
            if key in self._restored:
                sample.load_state_dict(self._restored[key])
        if not sample.drawn:
            sample.draw(pairs())
        return sample.draw(())  # drawn: the same pairs again

    def state_dict(self) -> dict[str, list[int]]:
        """The samples' indices by name."""
        drawn = {k: s.indices for k, s in self._drawn.items() if s.indices is not None}
        return {**self._restored, **{k: v for k, v in drawn.items() if v is not None}}

    def forget(self) -> None:
        """Draw the samples again when next asked (settings changed on resume)."""
        self._drawn, self._restored = {}, {}

    def load_state_dict(self, indices: Any) -> None:
        """Indices from a checkpoint: ``{name: [...]}``, or one list (the ``"val"`` sample of 0.2), or None.

        Raises:
            ValueError: anything else (a damaged state).
        """
        self.forget()
        if indices is None:
            return
        if not isinstance(indices, dict):
            indices = {"val": indices}
        for key, value in indices.items():
            checked = FixedSample.checked_indices(value)
            if checked is not None:
                self._restored[str(key)] = checked
