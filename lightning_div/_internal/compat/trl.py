"""TRL's private state, read in one place: the deprecated ``rollouts_of`` (see :mod:`lightning_div._internal.compat`).

``GroupDiversityMonitor`` reads nothing private of TRL: it is one of the trainer's reward
functions and gets the completions, their token ids, ``trainer_state`` and ``log_metric`` through
TRL's public reward contract (TRL >= 1.0). What remains here serves only
:func:`rollouts_of`, public API of 0.1, kept importable for one release.

Checked on TRL 1.0.0 and 1.16.0.
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["logged_rollouts", "rollouts_of"]


def logged_rollouts(trainer: Any) -> tuple[list[Any], list[Any], int]:
    """The latest generation batch a TRL ``GRPOTrainer`` / ``RLOOTrainer`` keeps: ``(prompts, completions, G)``.

    Reads ``trainer._logs["prompt"]`` and ``trainer._logs["completion"]``: the deques TRL fills for
    its completions table, gathered from every process in the global order (each prompt's G
    completions consecutive), holding the latest generation batch; and ``trainer.num_generations``.
    No public API serves: TRL hands a batch's completions only to its reward functions (the
    callback's own route now), and keeps nothing of it where a caller outside training can read it.
    Checked on TRL 1.0.0 and 1.16.0.

    Raises:
        TypeError: a trainer without them (not a GRPO/RLOO trainer, or a TRL that keeps them elsewhere).
    """
    logs = getattr(trainer, "_logs", None)
    g = getattr(trainer, "num_generations", None)
    if not isinstance(logs, dict) or "completion" not in logs or "prompt" not in logs or not isinstance(g, int):
        raise TypeError(
            f"{type(trainer).__name__} keeps no rollouts where rollouts_of reads them "
            "(trainer._logs['completion'] and trainer.num_generations: TRL's GRPOTrainer and RLOOTrainer)"
        )
    return list(logs["prompt"]), list(logs["completion"]), g


def rollouts_of(trainer: Any) -> tuple[list[Any], list[Any], int]:
    """Deprecated: the latest generation batch of a TRL ``GRPOTrainer`` / ``RLOOTrainer``, ``(prompts, completions, G)``.

    It reads TRL's private ``trainer._logs`` (:func:`logged_rollouts`), which a TRL release may
    move without notice. Read ``GroupDiversityMonitor.last_batch`` instead: the whole batch the
    callback last measured (its prompts, completions, token ids and G), given to it by TRL's
    public reward contract. Removed in the release after 0.2.

    Raises:
        TypeError: a trainer without them (not a GRPO/RLOO trainer, or a TRL that keeps them elsewhere).
    """
    warnings.warn(
        "lightning_div.integrations.trl.rollouts_of is deprecated and will be removed in the release after 0.2: "
        "it reads TRL's private trainer._logs; read GroupDiversityMonitor.last_batch instead (the batch the "
        "callback last measured: .prompts, .completions, .completion_ids, .num_generations)",
        DeprecationWarning,
        stacklevel=2,
    )
    return logged_rollouts(trainer)
