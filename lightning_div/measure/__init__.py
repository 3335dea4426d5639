"""The measurement core: everything the front ends measure, written once, with no trainer.

A front end (the Lightning callbacks, the Hugging Face callback, the TRL group callback) adapts
hooks, keys and reporting; what it measures comes from here, every measurement with the one
shape of :class:`~lightning_div.measure.base.Measure` (``prepare`` / ``measure`` / ``state_dict`` /
``load_state_dict`` / ``settings``):

* :class:`~lightning_div.measure.sample.FixedSample`: the evaluation sample, drawn once, restored on resume;
* :func:`~lightning_div.measure.errors.guarded`: the error policy (``on_error``) and the timing;
* :class:`~lightning_div.measure.semantic.SemanticMeasure`: Sem-Ent, the cluster divergence and the
  lexical metrics (``prepare(gold)``, ``measure(adapter, sample)`` or ``scores(responses, sample)``);
* :class:`~lightning_div.measure.ruq.RUQMeasure` and :class:`~lightning_div.measure.alerts.RUQAlert`: RUQ,
  its margin, its plot and its alert;
* :class:`~lightning_div.measure.nli.NLIMeasure`: NLI diversity of sampled response sets and
  Diversity Threshold Generation;
* :class:`~lightning_div.measure.group.GroupMeasure` and :func:`~lightning_div.measure.group.group_metrics`:
  GRPO/RLOO group diversity and its degeneration signals; :class:`~lightning_div.measure.alerts.GroupAlert`:
  its collapse / breakdown alert;
* :class:`~lightning_div.measure.reporting.Reporter`: where results go, implemented by each front end.
"""

from lightning_div.measure.alerts import DRESSAlert, GroupAlert, RUQAlert
from lightning_div.measure.base import Measure
from lightning_div.measure.errors import Measurement, guarded
from lightning_div.measure.group import GroupMeasure, group_metrics, reference_nll
from lightning_div.measure.nli import NLIMeasure
from lightning_div.measure.reporting import RecordingReporter, Reporter, RunMemory, TrackerReporter
from lightning_div.measure.ruq import RUQMeasure, ruq_profile_figure
from lightning_div.measure.sample import FixedSample
from lightning_div.measure.semantic import SemanticMeasure, SemanticResult

__all__ = [
    "FixedSample",
    "DRESSAlert",
    "GroupAlert",
    "GroupMeasure",
    "Measure",
    "Measurement",
    "NLIMeasure",
    "RUQAlert",
    "RUQMeasure",
    "RecordingReporter",
    "Reporter",
    "RunMemory",
    "SemanticMeasure",
    "SemanticResult",
    "TrackerReporter",
    "group_metrics",
    "guarded",
    "reference_nll",
    "ruq_profile_figure",
]
