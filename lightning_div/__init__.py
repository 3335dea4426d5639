"""lightning-div: diversity monitoring and semantic reweighting for dialogue models in PyTorch Lightning."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "1.0.0.dev0"

if TYPE_CHECKING:  # what IDEs and type checkers see; at run time the names load on first use (below)
    from lightning_div.callbacks import (
        DRESSReweighting,
        NLIDiversityMonitor,
        RUQMonitor,
        RUQScoring,
        SemanticDiversityMonitor,
        ThresholdGeneration,
    )
    from lightning_div.datamodules.dialogue import DialogueDataModule
    from lightning_div.dress.losses import dress_loss, weighted_lm_loss
    from lightning_div.model.base import load_base_model
    from lightning_div.model.dialogue_lm import DialogueLM
    from lightning_div.pairs import DialoguePair
    from lightning_div.reweighting import ReweightableDataModule
    from lightning_div.semantic.clusters import SemanticClusters
    from lightning_div.semantic.encoder import ResponseEncoder
    from lightning_div.semantic.space import SemanticSpace
    from lightning_div.settings import Generation, Lexical, Mining, ModelAccess, Outputs, RUQPlot
    from lightning_div.summary import print_summary

_LAZY = {
    "SemanticDiversityMonitor": "lightning_div.callbacks",
    "RUQMonitor": "lightning_div.callbacks",
    "DRESSReweighting": "lightning_div.callbacks",
    "NLIDiversityMonitor": "lightning_div.callbacks",
    "RUQPlot": "lightning_div.settings",
    "RUQScoring": "lightning_div.callbacks",
    "ThresholdGeneration": "lightning_div.callbacks",
    "ModelAccess": "lightning_div.settings",
    "Generation": "lightning_div.settings",
    "Lexical": "lightning_div.settings",
    "Outputs": "lightning_div.settings",
    "Mining": "lightning_div.settings",
    "DialogueDataModule": "lightning_div.datamodules.dialogue",
    "DialoguePair": "lightning_div.pairs",
    "ReweightableDataModule": "lightning_div.reweighting",
    "DialogueLM": "lightning_div.model.dialogue_lm",
    "load_base_model": "lightning_div.model.base",
    "ResponseEncoder": "lightning_div.semantic.encoder",
    "SemanticClusters": "lightning_div.semantic.clusters",
    "SemanticSpace": "lightning_div.semantic.space",
    "weighted_lm_loss": "lightning_div.dress.losses",
    "dress_loss": "lightning_div.dress.losses",
    "print_summary": "lightning_div.summary",
}


def __getattr__(name: str) -> Any:
    # Lazy, so `import lightning_div.metrics` stays light (no Lightning / transformers import).
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lightning_div' has no attribute {name!r}")


def __dir__() -> list[str]:
    # the lazy names too, so tab completion and dir() show the public API before first use
    return sorted(set(globals()) | set(_LAZY))


__all__ = list(_LAZY)
