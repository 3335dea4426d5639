"""Lightning's callback idioms: what a measurement survives, what it lets through, @override on hooks.

``measuring`` (and ``optional_part``) isolate the failures a measurement can meet from the
model, the data or a tracker (RuntimeError, torch's out-of-memory error among them, ValueError,
OSError ...): one warning, the epoch's values skipped, training goes on. A programming error
(TypeError, AttributeError, NameError ...) is not such a failure: it propagates, so tests see it.
"""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from monitor_setup import fit

from lightning_div.callbacks import DRESSReweighting, NLIDiversityMonitor, RUQMonitor, SemanticDiversityMonitor
from lightning_div.callbacks.base import DiversityCallback
from lightning_div.callbacks.checks import optional_part
from lightning_div.settings import Outputs


class Failing(DiversityCallback):
    """Measures at every epoch end; the measurement raises ``error`` at epoch ``at`` (in an optional part too)."""

    kind = "failing"

    def __init__(self, error: BaseException, at: int = 0, optional: bool = False, **kwargs) -> None:
        super().__init__(outputs=Outputs(show_progress=False), **kwargs)
        self.error, self.at, self.optional = error, at, optional
        self.epochs_ended: list[int] = []

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.epochs_ended.append(trainer.current_epoch)
        with self.measuring(trainer, pl_module, "the failing measurement") as m:
            m["failing/value"] = 1.0
            if trainer.current_epoch == self.at:
                if self.optional:
                    with optional_part(self, trainer, "the optional part"):
                        raise self.error
                else:
                    raise self.error


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("CUDA error: device-side assert"),
        ValueError("bad data"),
        OSError("disk full"),
        torch.cuda.OutOfMemoryError("CUDA out of memory"),
        ModuleNotFoundError("No module named 'faiss'"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_failure_of_the_model_or_data_is_reported_and_training_continues(tmp_path, error):
    cb = Failing(error, at=0)
    with pytest.warns(
        RuntimeWarning,
        match=rf"Failing skipped the failing measurement at epoch 0: "
        rf"{type(error).__name__}\(.*training continues",
    ):
        fit(tmp_path, [cb], max_epochs=2, limit_val_batches=0)
    assert cb.epochs_ended == [0, 1]  # the second epoch ran
    assert "failing/value" not in cb.history[0] and "timing/failing_s" in cb.history[0]  # skipped, timed
    assert cb.history[1]["failing/value"] == 1.0  # the next epoch measures again


@pytest.mark.parametrize(
    "error",
    [
        TypeError("f() takes 2 positional arguments"),
        AttributeError("no .encode"),
        NameError("name 'x' is not defined"),
        KeyError("val"),
        AssertionError(),
        ImportError("cannot import name 'new_figure' from 'lightning_div._internal.tracking'"),
    ],
    ids=lambda e: type(e).__name__,
)
@pytest.mark.parametrize("optional", [False, True], ids=["measuring", "optional_part"])
def test_a_programming_error_in_a_measurement_propagates(tmp_path, error, optional):
    cb = Failing(error, at=0, optional=optional)
    with pytest.raises(type(error), match=re.escape(str(error))):
        fit(tmp_path, [cb], max_epochs=2, limit_val_batches=0)
    assert cb.epochs_ended == [0]  # training stopped at it


def test_an_optional_part_that_fails_keeps_the_values_measured_before_it(tmp_path):
    cb = Failing(OSError("the plot cannot be written"), at=0, optional=True)
    with pytest.warns(RuntimeWarning, match="the optional part failed at epoch 0: OSError"):
        fit(tmp_path, [cb], max_epochs=2, limit_val_batches=0)
    assert cb.history[0]["failing/value"] == 1.0 and cb.epochs_ended == [0, 1]


def test_on_error_raise_lets_a_runtime_error_through(tmp_path):
    cb = Failing(RuntimeError("out of memory"), at=1, on_error="raise")
    with pytest.raises(RuntimeError, match="out of memory"):
        fit(tmp_path, [cb], max_epochs=2, limit_val_batches=0)
    assert cb.epochs_ended == [0, 1]


@pytest.mark.parametrize("cls", [SemanticDiversityMonitor, RUQMonitor, NLIDiversityMonitor, DRESSReweighting])
def test_every_hook_a_callback_defines_is_marked_override(cls):
    hooks = [
        name
        for name, fn in inspect.getmembers(cls, inspect.isfunction)
        if (name.startswith("on_") or name in ("setup", "teardown", "state_dict", "load_state_dict"))
        and fn.__qualname__.split(".")[0] != "Callback"
    ]
    assert hooks, cls
    missing = [name for name in hooks if not getattr(getattr(cls, name), "__override__", False)]
    assert not missing, f"{cls.__name__}: hooks without @override: {missing}"


# ---------------------------------------------------------------------------------------------- one of each


def test_resolve_pairs_takes_one_name():
    from monitor_setup import VAL

    cb = Failing(RuntimeError())
    pairs = cb.resolve_pairs(None, VAL[:3], "val_pairs")
    assert [p.response for p in pairs] == [p.response for p in VAL[:3]]
    with pytest.raises(
        TypeError, match=r"resolve_pairs\(\) takes 4 positional arguments but 5 were given"
    ):  # the fourth argument of 0.1 (it always equalled the name) is gone
        cb.resolve_pairs(None, VAL[:3], "val_pairs", "val_pairs")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="has no data: .*val_pairs="):
        cb.resolve_pairs(None, None, "val_pairs")


def test_fixed_sample_is_drawn_once_and_restored_indices_win():
    from monitor_setup import VAL

    cb = Failing(RuntimeError())
    first = cb.fixed_sample(None, "val", VAL, "val_pairs", 5, seed=3)
    again = cb.fixed_sample(None, "val", VAL[:2], "val_pairs", 5, seed=99)  # already drawn: the same sample
    indices = cb.sample_state()["val"]
    assert again == first and len(first) == 5 and indices == sorted(indices)
    assert first == [VAL[i] for i in indices]
    other = Failing(RuntimeError())
    other.load_sample_state(indices)  # a list: how the monitors' older checkpoints hold it
    assert other.fixed_sample(None, "val", VAL, "val_pairs", 5, seed=12345) == first  # restored indices win
    other.load_sample_state({"train": [0, 1]})
    assert other.sample_state() == {"train": [0, 1]}
    other.load_sample_state({"val": [len(VAL) + 3]})  # the data shrank below them: drawn again
    assert other.fixed_sample(None, "val", VAL, "val_pairs", 5, seed=3) == first
    assert other.sample_state()["val"] == indices
    with pytest.raises(ValueError, match="list of integers"):  # a damaged state is refused, naming what it is
        other.load_sample_state({"val": "garbage"})


def test_one_lexical_name_pattern_and_one_encoder_alias_table():
    from lightning_div.cli.clusters import build_encoder
    from lightning_div.meta_eval import set_metrics
    from lightning_div.metrics import lexical
    from lightning_div.semantic.encoder import ENCODER_ALIASES

    assert set_metrics.LEXICAL_PATTERN is lexical.LEXICAL_PATTERN
    hub, pooling = ENCODER_ALIASES["minilm"]
    for name in ("minilm", hub, f"{hub}@mean"):
        enc = build_encoder(name, None, quiet=True)
        assert (enc.model_name_or_path, enc.pooling) == (hub, pooling), name
    assert build_encoder(f"{hub}@last_token", None, quiet=True).pooling == "last_token"  # a saved pooling wins
    assert build_encoder("minilm", "last_token", quiet=True).pooling == "last_token"  # and a given one
    assert build_encoder("gpt2", None, quiet=True).pooling == "last_token"  # not an alias: the default
