"""Preference pairs for DPO with DivPO's rule: pools of sampled responses, a diversity criterion, pairs.

```python
from lightning_div.preference import build_pools, diverse_preference_pairs

pools = build_pools(model, tokenizer, prompts, num_responses=8, path="pools.jsonl")
pairs = diverse_preference_pairs(pools, quality=my_reward, space=space)  # a datasets.Dataset
trainer = DPOTrainer(model=model, args=args, train_dataset=pairs, processing_class=tokenizer)
```

:mod:`.pools` samples N replies per prompt from a causal LM (seeded per chunk, resumable to a
JSONL file) or reads a user's pools; :mod:`.criteria` scores how diverse each reply is within its
pool (semantic rarity by a :class:`~lightning_div.semantic.space.SemanticSpace`'s clusters, the
policy's likelihood, word frequency, or your own); :mod:`.pairs` picks DivPO's pair (Lanchantin
et al., 2025, arXiv 2501.18101: the most diverse reply above a quality threshold against the
least diverse below it) or the standard DPO pair. Nothing here imports Lightning or TRL.
"""

from lightning_div.preference.criteria import (
    CRITERIA,
    likelihood_diversity,
    semantic_rarity,
    word_frequency_diversity,
)
from lightning_div.preference.pairs import (
    RULES,
    SPLITS,
    PairSelection,
    PreferencePair,
    diverse_preference_pairs,
    quality_bands,
    select_preference_pairs,
)
from lightning_div.preference.pools import POOL_SAMPLING, Pool, as_pool, build_pools, read_pools, write_pools

__all__ = [
    "CRITERIA",
    "POOL_SAMPLING",
    "RULES",
    "SPLITS",
    "PairSelection",
    "Pool",
    "PreferencePair",
    "as_pool",
    "build_pools",
    "diverse_preference_pairs",
    "likelihood_diversity",
    "quality_bands",
    "read_pools",
    "select_preference_pairs",
    "semantic_rarity",
    "word_frequency_diversity",
    "write_pools",
]
