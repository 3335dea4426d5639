"""Every corpus metric gives the single-process value on 2 gloo processes (states merge exactly)."""

import math

import pytest
from ddp_utils import run_distributed

from lightning_div.metrics._states import (
    RUQ,
    AveragedDistinct,
    DistinctN,
    ExpectationAdjustedDistinct,
    NGramEntropy,
    SemanticEntropy,
)  # deprecated (docs/measure.md): tested until it goes

TEXTS = [
    "Hello there, how are you?",
    "I'm fine. You?",
    "I don't know.",
    "I don't know.",
    "I don't know what to do.",
    "What a lovely day it is today",
    "yes",
    "",
    "I love going to the beach on sunny days!",
    "me too, me too",
    "do you like pizza?",
    "I do not know.",
    "pizza is great",
    "Hello there!",
]
CLUSTERS = [0, 1, 1, 1, 2, 3, 3, 3, 3, 4, 0, 1, 2, 3]
REFS = [-1.0, [-2.0, -0.5], -3.0, -0.1, [-1.0, -1.2], -2.2, -0.4]
IDK = [-1.5, -1.0, -2.0, -0.2, -1.1, -3.0, -0.4]


def _metrics():
    return {
        "distinct_1": (DistinctN(1), "texts"),
        "distinct_2": (DistinctN(2), "texts"),
        "avg_distinct": (AveragedDistinct(5), "texts"),
        "ent_4": (NGramEntropy(4), "texts"),
        "ead": (ExpectationAdjustedDistinct(500), "texts"),
        "sem_ent": (SemanticEntropy(6), "clusters"),
        "ruq": (RUQ(), "ruq"),
    }


def _compute(rank: int, world_size: int) -> dict:
    out = {}
    for name, (metric, kind) in _metrics().items():
        # uneven, interleaved shards: rank r takes items r, r + W, ...
        if kind == "texts":
            metric.update(TEXTS[rank::world_size])
        elif kind == "clusters":
            metric.update(CLUSTERS[rank::world_size])
        else:
            metric.update(REFS[rank::world_size], IDK[rank::world_size])
        out[name] = float(metric.compute())
    return out


@pytest.mark.slow
@pytest.mark.xdist_group("two_processes")
def test_two_processes_equal_one_process():
    single = _compute(0, 1)
    per_rank = run_distributed(_compute, 2)
    for rank_values in per_rank:
        for name, value in single.items():
            assert math.isclose(rank_values[name], value, rel_tol=0, abs_tol=1e-9), (name, rank_values[name], value)
    # a ratio averaged over ranks would differ: check the merge is not that
    r0, r1 = _compute_shard(0), _compute_shard(1)
    assert abs((r0 + r1) / 2 - single["distinct_1"]) > 1e-3


def _compute_shard(rank: int) -> float:
    m = DistinctN(1)
    m.update(TEXTS[rank::2])
    return float(m.compute())
