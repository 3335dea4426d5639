"""Batch-level sharding: identical batches and results on 1 and 2 processes, no hang on a failing rank."""

import pytest
from ddp_utils import run_distributed

from lightning_div.distributed import batch_plan, distributed_map

ITEMS = ["a", "bbbb", "cc", "dddddd", "e", "fff", "gggggggg", "hh", "iiiii"]


def _batch_signature(batch):
    # a result that depends on the whole batch composition, like padding does for generation
    return [f"{x}|{'+'.join(batch)}" for x in batch]


def test_batch_plan_sorts_longest_first_and_chunks():
    lengths = [len(x) for x in ITEMS]
    # lengths 1,4,2,6,1,3,8,2,5 -> order by length desc (stable): 6(8) 3(6) 8(5) 1(4) 5(3) 2(2) 7(2) 0(1) 4(1)
    assert batch_plan(len(ITEMS), 4, lengths) == [[6, 3, 8, 1], [5, 2, 7, 0], [4]]
    assert batch_plan(3, 2) == [[0, 1], [2]]
    with pytest.raises(ValueError, match="batch_size"):
        batch_plan(3, 0)


def _map(rank, world):
    return distributed_map(_batch_signature, ITEMS, 4, sort_key=[len(x) for x in ITEMS], show_progress=False)


def _fail_on_rank_1(rank, world):
    def fn(batch):
        if rank == 1:
            raise ValueError("boom")
        return batch

    try:
        distributed_map(fn, ITEMS, 2, show_progress=False)
    except RuntimeError as err:
        return str(err)
    return "no error"


@pytest.mark.slow
def test_two_processes_give_the_single_process_result():
    single = _map(0, 1)
    assert single[6] == "gggggggg|gggggggg+dddddd+iiiii+bbbb"  # batch composition from the global plan
    for result in run_distributed(_map, 2):
        assert result == single
    messages = run_distributed(_fail_on_rank_1, 2)
    assert all("failed on 1 of 2 processes" in m and "boom" in m for m in messages)
