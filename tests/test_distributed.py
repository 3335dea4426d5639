"""Batch-level sharding: identical batches and results on 1 and 2 processes, no hang on a failing rank."""

import pytest
from ddp_utils import run_distributed

from lightning_div._internal.distributed import batch_plan, distributed_map

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
@pytest.mark.xdist_group("two_processes")
def test_two_processes_give_the_single_process_result():
    single = _map(0, 1)
    assert single[6] == "gggggggg|gggggggg+dddddd+iiiii+bbbb"  # batch composition from the global plan
    for result in run_distributed(_map, 2):
        assert result == single
    messages = run_distributed(_fail_on_rank_1, 2)
    assert all("failed on 1 of 2 processes" in m and "boom" in m for m in messages)


def test_one_length_batching_helper_for_generation_nli_and_embedding():
    from lightning_div._internal.distributed import length_batches
    from lightning_div.model import generation
    from lightning_div.nli import scorer as nli

    # generation's helper (which scoring imports) and NLI's are the distributed one
    assert generation.length_batches is length_batches and nli.length_batches is length_batches
    # longest first, ties in input order, as each of the three former helpers did
    assert length_batches([1, 3, 3, 2, 5], 2) == [[4, 1], [2, 3], [0]]
    assert length_batches([], 4) == []
    with pytest.raises(ValueError, match="sort_key has 2 keys for 3 items"):
        batch_plan(3, 2, [1, 2])
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1, got True"):
        length_batches([1], True)


def test_length_batches_end_a_batch_before_it_pads_too_much():
    from lightning_div._internal.distributed import length_batches

    # by hand: 10, 9 (padding 1 of 19); adding 2 would pad 30 - 21 = 9 > 0.25 x 21; then 2, 2, 1 (1 of 5)
    assert length_batches([10, 9, 2, 2, 1], 4, max_padding=0.25) == [[0, 1], [2, 3, 4]]
    assert length_batches([10, 9, 2, 2, 1], 2, max_padding=0.25) == [[0, 1], [2, 3], [4]]  # batch_size still holds
    assert length_batches([3, 5, 3, 3, 0, 0], 8, max_padding=0.0) == [[1], [0, 2, 3], [4, 5]]  # equal lengths only
    lengths = [7, 1, 30, 12, 12, 5, 9, 2, 2, 2, 18]
    for max_padding in (0.0, 0.1, 0.5, 3.0):
        batches = length_batches(lengths, 4, max_padding=max_padding)
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))  # every item once
        for b in batches:
            longest = max(lengths[i] for i in b)
            assert len(b) <= 4 and len(b) * longest <= (1 + max_padding) * sum(lengths[i] for i in b)
    assert length_batches(lengths, 4, max_padding=100.0) == length_batches(lengths, 4)  # never binding: as before
    assert length_batches([], 4, max_padding=0.2) == []
    with pytest.raises(ValueError, match="max_padding must be >= 0 or None, got -0.1"):
        length_batches([1], 4, max_padding=-0.1)


def _collectives(rank, world):
    import torch

    from lightning_div._internal.distributed import all_gather_rows, check_same_on_all_ranks, on_rank_zero

    rows = all_gather_rows(torch.full((rank + 1, 2), float(rank)))  # 1 row on rank 0, 2 on rank 1
    fitted = on_rank_zero(lambda: {"fitted_on": rank}, "fitting")
    broadcasts = []

    def strategy_broadcast(obj, src):  # what trainer.strategy.broadcast would be given
        from lightning_div._internal.distributed import broadcast_object

        broadcasts.append(src)
        return broadcast_object(obj, src)

    via_strategy = on_rank_zero(lambda: "rank 0's", "work", broadcast=strategy_broadcast)

    def fail():
        raise ValueError("no points")

    try:
        on_rank_zero(fail, "fitting the clusters")
        failure = "no error"
    except Exception as err:  # rank 0: its own error; the others: a RuntimeError naming it
        failure = f"{type(err).__name__}: {err}"
    try:
        check_same_on_all_ranks(10 + rank, "the number of texts")
        mismatch = "no error"
    except ValueError as err:
        mismatch = str(err)
    return [r.tolist() for r in rows], fitted, via_strategy, broadcasts, failure, mismatch


@pytest.mark.slow
@pytest.mark.xdist_group("two_processes")
def test_rank_zero_work_and_uneven_gathers_on_two_processes():
    from lightning_div._internal.distributed import on_rank_zero

    assert on_rank_zero(lambda: 7, "alone") == 7  # one process: just the call
    for rank, (rows, fitted, via_strategy, broadcasts, failure, mismatch) in enumerate(
        run_distributed(_collectives, 2)
    ):
        assert rows == [[[0.0, 0.0]], [[1.0, 1.0], [1.0, 1.0]]]  # every rank's own count of rows, in rank order
        assert fitted == {"fitted_on": 0} and via_strategy == "rank 0's" and broadcasts == [0]
        if rank == 0:
            assert failure == "ValueError: no points"
        else:
            assert failure == "RuntimeError: fitting the clusters failed on rank 0: ValueError: no points"
        assert mismatch == "the number of texts must be the same on every rank; got [10, 11] per rank"
