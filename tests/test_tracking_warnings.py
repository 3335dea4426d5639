"""warn_once: Lightning's WarningCache and rank_zero_warn underneath, once per run and key."""

import warnings

import pytest
import torch
from lightning_utilities.core.rank_zero import WarningCache, rank_zero_only
from monitor_setup import fit, ruq_monitor

from lightning_div._internal import tracking
from lightning_div._internal.tracking import warn_once, warnings_of_run
from lightning_div.measure.reporting import RunMemory


def shown(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if w.category is RuntimeWarning]


def test_once_per_key_within_a_run_and_again_in_the_next_run():
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
    # outside any run nothing is cached (no module-global state): each call warns
    assert shown(lambda: [warn_once("k", "outside"), warn_once("k", "outside again")]) == ["outside", "outside again"]
    assert not hasattr(tracking, "_warned")


def test_only_global_rank_zero_shows_it(monkeypatch):
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    assert shown(lambda: warn_once("k", "from rank 1")) == []
    monkeypatch.setattr(rank_zero_only, "rank", 0)
    assert shown(lambda: warn_once("k2", "from rank 0")) == ["from rank 0"]


def test_the_warning_points_at_the_caller_of_the_helper_that_warns():
    with pytest.warns(RuntimeWarning, match="x = nan is not finite") as record:
        tracking.finite_metrics({"x": float("nan")}, "src")  # finite_metrics calls warn_once
    assert record[0].filename == __file__


def test_each_front_end_owns_its_runs_memory():
    from lightning_div.callbacks import RUQMonitor
    from lightning_div.integrations.transformers import TrainerDiversityMonitor

    a, b = RUQMonitor(), RUQMonitor()
    assert isinstance(a.memory, RunMemory) and a.memory is not b.memory  # one per callback, none shared
    a.memory.warned.add("k")
    assert "k" not in b.memory.warned
    hf = TrainerDiversityMonitor(eval_pairs=[("hi", "hello")])
    assert isinstance(hf.memory, RunMemory) and not hf.memory.warned
    # a once-only key is shown once per run; another token under it warns once, naming the key
    memory = RunMemory()
    assert memory.once("clusters/cards", "a") and not memory.once("clusters/cards", "a")
    assert shown(lambda: [memory.once("clusters/cards", "b"), memory.once("clusters/cards", "c")]) == [
        "two callbacks log different 'clusters/cards' under one key: the first one's is kept; give the "
        "callbacks distinct name=... so that each logs its own"
    ]


def test_a_second_run_in_the_same_process_warns_again(tmp_path):
    from monitor_setup import TinyChat

    def nan_module():
        module = TinyChat()
        with torch.no_grad():
            module.model.transformer.ln_f.weight.fill_(float("nan"))
        return module

    for run in range(2):  # a notebook: the same callback class, a second fit
        cb = ruq_monitor(tmp_path / str(run), num_train_contexts=4, num_contexts=4)
        with pytest.warns(RuntimeWarning, match=r"RUQMonitor skipped train RUQ at epoch 0"):
            fit(tmp_path / str(run), [cb], module=nan_module())
    # and within one run, once: two epochs, one warning per kind
    cb = ruq_monitor(tmp_path / "2", num_train_contexts=4, num_contexts=4)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        fit(tmp_path / "2", [cb], module=nan_module(), max_epochs=2)
    assert len([w for w in record if "skipped train RUQ" in str(w.message)]) == 1
