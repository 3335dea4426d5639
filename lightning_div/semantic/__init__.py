"""The semantic space behind Sem-Ent and DRESS: response encoder, k-means clusters, their disk cache, cards and plots.

``encoder`` turns responses into vectors, ``clusters`` fits and assigns the k-means partition,
``cache`` keeps fitted clusters on disk by content hash, ``cards`` says in words what a
cluster holds, ``plots`` draws the figures, and ``space`` puts the encoder and the clusters
together as one :class:`~lightning_div.semantic.space.SemanticSpace` the callbacks measure in
(and share, when given the same one).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightning_div.semantic.clusters import SemanticClusters
    from lightning_div.semantic.encoder import ResponseEncoder
    from lightning_div.semantic.space import SemanticSpace

_LAZY = {"SemanticClusters": "clusters", "ResponseEncoder": "encoder", "SemanticSpace": "space"}
__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    # lazy: the encoder imports transformers, the clusters faiss
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
