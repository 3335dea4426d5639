"""Old home of :class:`~lightning_div.semantic_space.ClusterSpec` (no callback): kept as an alias."""

from lightning_div.semantic_space import ClusterSpec, describe

__all__ = ["ClusterSpec", "describe"]
