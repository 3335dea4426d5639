"""Lightning callbacks: they gather texts, call the metric/embedding/scoring modules, and log."""

from lightning_div.callbacks.dress import DRESSReweighting
from lightning_div.callbacks.nli_diversity import NLIDiversityMonitor
from lightning_div.callbacks.progress import PlainProgress
from lightning_div.callbacks.ruq import RUQMonitor, RUQPlot, RUQScoring
from lightning_div.callbacks.semantic_diversity import SemanticDiversityMonitor
from lightning_div.nli.threshold_settings import ThresholdGeneration

__all__ = [
    "SemanticDiversityMonitor",
    "RUQMonitor",
    "DRESSReweighting",
    "NLIDiversityMonitor",
    "PlainProgress",
    "RUQPlot",
    "RUQScoring",
    "ThresholdGeneration",
]
