"""GRPO and RLOO (TRL): group diversity from the rollouts the trainer already made, and a semantic group reward.

```python
from lightning_div.integrations.trl import GroupDiversityMonitor, SemanticGroupReward

space = SemanticSpace(encoder="minilm", num_clusters=8, dirpath="runs/cache")
reward = SemanticGroupReward(num_generations=4, space=space, quality=my_reward)  # quality x diversity
diversity = GroupDiversityMonitor(space=space)  # a reward function too: it adds 0.0, it measures
trainer = GRPOTrainer(model=model, reward_funcs=[reward, diversity], args=args, train_dataset=prompts)
diversity.attach(trainer)
```

:class:`GroupDiversityMonitor` (:mod:`.callback`) logs group Sem-Ent, clusters per group and the
share of collapsed groups of every generation batch, which TRL (>= 1.0) hands it as one of its
reward functions; :class:`SemanticGroupReward` (:mod:`.reward`) scores each completion by the
semantic diversity of its group, as DARLING does; :mod:`.rollouts` gathers a batch's slices from
every process. The formulas are :mod:`lightning_div.metrics.group`'s. Nothing here imports
Lightning nor reads anything private of TRL (``rollouts_of``, deprecated, is the one exception,
kept in :mod:`lightning_div._internal.compat.trl`); TRL is imported by the trainer you build, not
by this package (only ``transformers``' callback class is).
"""

from lightning_div._internal.deprecation import moved_names
from lightning_div.integrations.trl.callback import GroupDiversityMonitor, group_metrics, rollouts_of
from lightning_div.integrations.trl.reward import EQUIVALENCES, SemanticGroupReward, group_labels
from lightning_div.integrations.trl.rollouts import (
    CompletionError,
    RolloutBatch,
    check_grouped,
    completion_text,
    completion_texts,
    cut_share,
    end_token_ids,
    gather_batch,
)

__all__ = [
    "EQUIVALENCES",
    "CompletionError",
    "GroupDiversityMonitor",
    "RolloutBatch",
    "SemanticGroupReward",
    "check_grouped",
    "completion_text",
    "completion_texts",
    "cut_share",
    "end_token_ids",
    "gather_batch",
    "group_labels",
    "group_metrics",
    "rollouts_of",
]

#: 0.2's names, importable for one release with a DeprecationWarning.
__getattr__ = moved_names(__name__, {"GroupDiversityCallback": (__name__, "GroupDiversityMonitor")})
