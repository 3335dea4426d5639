"""lightning-div: diversity monitoring and semantic reweighting for dialogue models in PyTorch Lightning."""

__version__ = "0.1.0"

_LAZY = {
    "SemanticDiversityMonitor": "lightning_div.callbacks",
    "RUQMonitor": "lightning_div.callbacks",
    "DRESSReweighting": "lightning_div.callbacks",
    "NLIDiversityMonitor": "lightning_div.callbacks",
    "DialogueDataModule": "lightning_div.datamodules.dialogue",
    "ReweightableDataModule": "lightning_div.datamodules.protocol",
    "DialogueLM": "lightning_div.module",
    "ResponseEncoder": "lightning_div.embedding",
    "SemanticClusters": "lightning_div.clustering",
    "weighted_lm_loss": "lightning_div.dress",
}


def __getattr__(name: str):
    # Lazy, so `import lightning_div.metrics` stays light (no Lightning / transformers import).
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lightning_div' has no attribute {name!r}")


__all__ = list(_LAZY)
