"""Which Lightning package lightning-div binds to (lightning_div._internal.lightning.choose_package)."""

from __future__ import annotations

import pytest

from lightning_div._internal.lightning import ENVIRONMENT_VARIABLE, choose_package


def test_the_environment_decides_first():
    loaded = {"pytorch_lightning"}
    assert choose_package({ENVIRONMENT_VARIABLE: "lightning"}, loaded) == "lightning.pytorch"
    assert choose_package({ENVIRONMENT_VARIABLE: "Lightning.PyTorch"}, set()) == "lightning.pytorch"
    assert choose_package({ENVIRONMENT_VARIABLE: "pytorch_lightning"}, {"lightning.pytorch"}) == "pytorch_lightning"
    with pytest.raises(ImportError, match=f"{ENVIRONMENT_VARIABLE}='lightning2': use 'lightning' or"):
        choose_package({ENVIRONMENT_VARIABLE: "lightning2"}, set())


def test_the_package_the_script_imported():
    assert choose_package({}, {"lightning", "lightning.pytorch"}) == "lightning.pytorch"
    # both imported, or neither: pytorch_lightning, lightning-div's own dependency
    assert choose_package({}, {"lightning.pytorch", "pytorch_lightning"}) == "pytorch_lightning"
    assert choose_package({}, set()) == "pytorch_lightning"


def test_this_process_binds_every_class_to_one_package():
    import pytorch_lightning

    from lightning_div import DialogueDataModule, DialogueLM
    from lightning_div.callbacks import PlainProgress, SemanticDiversityMonitor

    # the tests import pytorch_lightning first, so everything is its subclass
    assert issubclass(DialogueLM, pytorch_lightning.LightningModule)
    assert issubclass(DialogueDataModule, pytorch_lightning.LightningDataModule)
    assert issubclass(SemanticDiversityMonitor, pytorch_lightning.Callback)
    assert issubclass(PlainProgress, pytorch_lightning.Callback)
