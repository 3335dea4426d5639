"""GRPO and RLOO (TRL): group diversity from the rollouts the trainer already made, and a semantic group reward.

```python
from lightning_div.integrations.trl import GroupDiversityCallback, SemanticGroupReward

space = SemanticSpace(encoder="minilm", num_clusters=8, dirpath="runs/cache")
reward = SemanticGroupReward(num_generations=4, space=space, quality=my_reward)  # quality x diversity
trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=prompts)
GroupDiversityCallback(space=space).attach(trainer)
```

:class:`GroupDiversityCallback` (:mod:`.callback`) logs group Sem-Ent, clusters per group and the
share of collapsed groups at every logging step; :class:`SemanticGroupReward` (:mod:`.reward`)
scores each completion by the semantic diversity of its group, as DARLING does; :mod:`.rollouts`
gathers a batch's slices from every process. The formulas are
:mod:`lightning_div.metrics.group`'s. Nothing here imports Lightning; TRL is imported by the
trainer you build, not by this package (only ``transformers``' callback class is).
"""

from lightning_div.integrations.trl.callback import GroupDiversityCallback, group_metrics, rollouts_of
from lightning_div.integrations.trl.reward import EQUIVALENCES, SemanticGroupReward, group_labels
from lightning_div.integrations.trl.rollouts import (
    CompletionError,
    check_grouped,
    completion_text,
    completion_texts,
    gather_batch,
)

__all__ = [
    "EQUIVALENCES",
    "CompletionError",
    "GroupDiversityCallback",
    "SemanticGroupReward",
    "check_grouped",
    "completion_text",
    "completion_texts",
    "gather_batch",
    "group_labels",
    "group_metrics",
    "rollouts_of",
]
