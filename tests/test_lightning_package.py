"""Which Lightning package lightning-div binds to (lightning_div._internal.lightning.choose_package)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from helpers import CHILD_ENV

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


def test_a_bogus_lightning_package_is_one_line():
    # L5: LIGHTNING_DIV_LIGHTNING=bogus lightning-div fit printed an ImportError traceback, exit 1
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_div.cli", "fit", "--help"],
        env={**CHILD_ENV, "LIGHTNING_DIV_LIGHTNING": "bogus"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr == (
        "lightning-div fit: error: LIGHTNING_DIV_LIGHTNING='bogus': use 'lightning' or 'pytorch_lightning'\n"
    )


def test_the_lightning_package_variable_against_the_scripts_package_is_named():
    # L5: LIGHTNING_DIV_LIGHTNING=lightning with a pytorch_lightning Trainer: "model must be a LightningModule"
    probe = "import warnings; warnings.simplefilter('always'); import pytorch_lightning; import lightning_div.callbacks"
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        env={**CHILD_ENV, "LIGHTNING_DIV_LIGHTNING": "lightning"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert re.search(
        r"LIGHTNING_DIV_LIGHTNING='lightning' binds lightning-div's classes to lightning\.pytorch, "
        r"but this process imported pytorch_lightning already: a pytorch_lightning Trainer refuses them",
        proc.stderr,
    ), proc.stderr
