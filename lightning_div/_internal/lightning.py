"""The Lightning package lightning-div binds to: ``pytorch_lightning`` or the unified ``lightning.pytorch``.

The two packages hold the same code under two names, and a ``lightning.pytorch.Trainer`` refuses a
``pytorch_lightning.LightningModule`` (and the other way round). So :class:`~lightning_div.DialogueLM`,
:class:`~lightning_div.DialogueDataModule` and the callbacks subclass the package the user's script
uses, chosen once, when lightning-div first imports Lightning:

1. ``LIGHTNING_DIV_LIGHTNING=lightning`` (or ``pytorch_lightning``) in the environment decides;
2. else ``lightning.pytorch`` when the script imported it and not ``pytorch_lightning`` (the usual
   ``import lightning.pytorch as pl`` before ``from lightning_div import ...``);
3. else ``pytorch_lightning`` (a dependency of lightning-div), or ``lightning.pytorch`` when only
   that one is installed.

Modules that subclass or call Lightning import ``pl`` from here; for the type checker it is
``pytorch_lightning`` (the two are the same code).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

__all__ = [
    "ENVIRONMENT_VARIABLE",
    "FABRIC",
    "PACKAGE",
    "TrainerFn",
    "choose_package",
    "pl",
    "rank_zero",
    "reload_every",
    "submodule",
]

#: The environment variable that picks the package: ``lightning`` or ``pytorch_lightning``.
ENVIRONMENT_VARIABLE = "LIGHTNING_DIV_LIGHTNING"

_NAMES = {
    "lightning": "lightning.pytorch",
    "lightning.pytorch": "lightning.pytorch",
    "pytorch_lightning": "pytorch_lightning",
    "pytorch-lightning": "pytorch_lightning",
}


def choose_package(environ: dict[str, str] | None = None, loaded: set[str] | None = None) -> str:
    """``"pytorch_lightning"`` or ``"lightning.pytorch"``, by the rules of the module doc.

    Args:
        environ: the environment (default ``os.environ``).
        loaded: the names of the modules imported so far (default ``sys.modules``).

    Raises:
        ImportError: the environment variable names neither package.
    """
    environ = dict(os.environ) if environ is None else environ
    loaded = set(sys.modules) if loaded is None else loaded
    asked = environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if asked:
        if asked.lower() not in _NAMES:
            raise ImportError(f"{ENVIRONMENT_VARIABLE}={asked!r}: use 'lightning' or 'pytorch_lightning'")
        return _NAMES[asked.lower()]
    if "lightning.pytorch" in loaded and "pytorch_lightning" not in loaded:
        return "lightning.pytorch"
    if importlib.util.find_spec("pytorch_lightning") is None:  # only the unified package is installed
        return "lightning.pytorch"
    return "pytorch_lightning"


#: The Lightning package every lightning-div class binds to in this process.
PACKAGE = choose_package()
_OTHER = "pytorch_lightning" if PACKAGE == "lightning.pytorch" else "lightning.pytorch"
if os.environ.get(ENVIRONMENT_VARIABLE, "").strip() and _OTHER in sys.modules:
    # the variable overrode the package the script uses: that package's Trainer will refuse our classes
    # with "`model` must be a `LightningModule`", which does not name the variable
    import warnings

    warnings.warn(
        f"{ENVIRONMENT_VARIABLE}={os.environ[ENVIRONMENT_VARIABLE].strip()!r} binds lightning-div's classes to "
        f"{PACKAGE}, but this process imported {_OTHER} already: a {_OTHER} Trainer refuses them ('`model` must "
        f"be a `LightningModule`'). Unset {ENVIRONMENT_VARIABLE}, or use {PACKAGE}'s Trainer",
        RuntimeWarning,
        stacklevel=2,
    )
#: Its Fabric package (rank-zero utilities): ``lightning_fabric`` or ``lightning.fabric``.
FABRIC = "lightning.fabric" if PACKAGE == "lightning.pytorch" else "lightning_fabric"


def submodule(name: str) -> ModuleType:
    """``<PACKAGE>.<name>``, e.g. ``submodule("cli")``; ``submodule("fabric.<name>")`` is Fabric's."""
    if name.startswith("fabric."):
        return importlib.import_module(f"{FABRIC}.{name.removeprefix('fabric.')}")
    return importlib.import_module(f"{PACKAGE}.{name}")


if TYPE_CHECKING:  # the same code under either name: the type checker reads pytorch_lightning's
    import lightning_fabric.utilities.rank_zero as rank_zero
    import pytorch_lightning as pl
    from pytorch_lightning.trainer.states import TrainerFn
else:
    pl = importlib.import_module(PACKAGE)
    TrainerFn = submodule("trainer.states").TrainerFn
    #: Fabric's rank-zero utilities (``rank_zero_only``, ``rank_zero_warn``), whose rank the Trainer sets.
    rank_zero = submodule("fabric.utilities.rank_zero")


def reload_every(trainer: Any) -> int:
    """``Trainer(reload_dataloaders_every_n_epochs=)``: set in ``Trainer.__init__``, not declared on the class."""
    return int(getattr(trainer, "reload_dataloaders_every_n_epochs", 0) or 0)
