"""lightning-div: diversity monitoring and semantic reweighting for dialogue models in PyTorch Lightning."""

__version__ = "0.1.0"
