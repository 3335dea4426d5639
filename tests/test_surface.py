"""The 1.0 surface: no front-end class takes more than 15 parameters, inherited ones counted (issue 61).

A parameter a class passes on through ``**kwargs`` to a parent counts as the class's own; the 0.2
keyword arguments still accepted through ``**kwargs`` (deprecated, warning) are not parameters of
the 1.0 surface and are not counted.
"""

from __future__ import annotations

import importlib
import inspect

import pytest

MAX_PARAMETERS = 15
#: Where a front end's parents stop being ours: their parameters are not the class's surface.
THEIRS = ("lightning", "pytorch_lightning", "transformers", "torch", "builtins", "typing")

#: Every class a user configures a run with: the front ends, the datamodules, the reward.
FRONT_ENDS = (
    "lightning_div.callbacks.SemanticDiversityMonitor",
    "lightning_div.callbacks.NLIDiversityMonitor",
    "lightning_div.callbacks.RUQMonitor",
    "lightning_div.callbacks.DRESSReweighting",
    "lightning_div.datamodules.DialogueDataModule",
    "lightning_div.datamodules.StreamingDialogueDataModule",
    "lightning_div.integrations.transformers.TrainerDiversityMonitor",
    "lightning_div.integrations.trl.GroupDiversityMonitor",
    "lightning_div.integrations.trl.SemanticGroupReward",
)


def parameters(cls: type) -> list[str]:
    """The named parameters of ``cls(...)``: its ``__init__``'s, and its parents' while ``**kwargs`` passes them on."""
    names: list[str] = []
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] in THEIRS:  # Lightning's, transformers' or Python's own parents
            break
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        signature = inspect.signature(init)
        names += [
            p.name
            for p in signature.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in names
        ]
        if not any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
            break
    return names


def test_parameters_counts_what_kwargs_pass_on():
    class Base:
        def __init__(self, a: int = 0, b: int = 0, **deprecated: int) -> None: ...

    class Child(Base):
        def __init__(self, c: int = 0, **kwargs: int) -> None: ...

    class Closed(Base):
        def __init__(self, c: int = 0) -> None: ...

    assert parameters(Child) == ["c", "a", "b"]
    assert parameters(Closed) == ["c"]


@pytest.mark.parametrize("path", FRONT_ENDS)
def test_no_front_end_takes_more_than_15_parameters(path):
    module, name = path.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    names = parameters(cls)
    assert len(names) <= MAX_PARAMETERS, f"{name} takes {len(names)} parameters: {names}"
