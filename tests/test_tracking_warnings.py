"""warn_once: Lightning's WarningCache and rank_zero_warn underneath, once per run and key."""

import warnings

import pytest
from lightning_utilities.core.rank_zero import WarningCache, rank_zero_only

from lightning_div._internal import tracking
from lightning_div._internal.tracking import warn_once, warnings_of_run


def shown(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if w.category is RuntimeWarning]


def test_once_per_key_within_a_run_and_again_in_the_next_run(monkeypatch):
    monkeypatch.setattr(tracking, "_warned", WarningCache())
    first_run = WarningCache()

    def run(cache):
        with warnings_of_run(cache):
            # the same key with another detail (the epoch) is the same warning; another key is another
            warn_once("skip:sem", "skipped at epoch 0")
            warn_once("skip:sem", "skipped at epoch 1")
            warn_once("skip:ruq", "ruq skipped at epoch 1")

    assert shown(lambda: run(first_run)) == ["skipped at epoch 0", "ruq skipped at epoch 1"]
    assert first_run == {"skip:sem", "skip:ruq"}
    assert shown(lambda: run(first_run)) == []  # still the same run
    assert shown(lambda: run(WarningCache())) == ["skipped at epoch 0", "ruq skipped at epoch 1"]  # a new run
    # outside any run: once per process, in the module's WarningCache
    assert shown(lambda: [warn_once("k", "outside"), warn_once("k", "outside again")]) == ["outside"]
    assert isinstance(tracking._warned, WarningCache) and "k" in tracking._warned


def test_only_global_rank_zero_shows_it(monkeypatch):
    monkeypatch.setattr(tracking, "_warned", WarningCache())
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    assert shown(lambda: warn_once("k", "from rank 1")) == []
    monkeypatch.setattr(rank_zero_only, "rank", 0)
    assert shown(lambda: warn_once("k2", "from rank 0")) == ["from rank 0"]


def test_the_warning_points_at_the_caller_of_the_helper_that_warns(monkeypatch):
    monkeypatch.setattr(tracking, "_warned", WarningCache())
    with pytest.warns(RuntimeWarning, match="x = nan is not finite") as record:
        tracking.finite_metrics({"x": float("nan")}, "src")  # finite_metrics calls warn_once
    assert record[0].filename == __file__


def test_callbacks_keep_their_run_warnings_in_a_warning_cache():
    from lightning_div.callbacks import RUQMonitor

    assert isinstance(RUQMonitor()._warned, WarningCache)
