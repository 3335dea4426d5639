"""How the Hugging Face front end names what it logs: ``eval_<metric>``, as the Trainer names its evaluation metrics."""

from __future__ import annotations

__all__ = ["EVAL_PREFIX", "eval_key"]

#: What the Trainer puts before an evaluation metric (``eval_loss``); its trackers show it as ``eval/``.
EVAL_PREFIX = "eval_"


def eval_key(metric: str, name: str | None = None) -> str:
    """The key of a metric measured at a Hugging Face evaluation: ``eval_<metric>`` (``eval_<name>/<metric>``).

    The Trainer's trackers (``transformers.integrations``' TensorBoard, W&B, Comet ... callbacks)
    rewrite ``eval_`` to ``eval/``: ``eval_sem_ent`` is charted as ``eval/sem_ent``, the Lightning
    monitors' ``val/sem_ent`` with ``eval/`` for ``val/``.

    Args:
        metric: the monitors' metric name (``"sem_ent"``, ``"distinct_2"``, ``"ruq"`` ...).
        name: the callback's ``name``, if any.
    """
    return f"{EVAL_PREFIX}{name}/{metric}" if name else f"{EVAL_PREFIX}{metric}"
