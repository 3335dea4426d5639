"""Reads of other libraries' private state: only in ``lightning_div/_internal/compat/``, at most eight, each working.

CI runs this file on the newest releases (the README's test command) and on the oldest ones
``pyproject.toml`` declares (``.ci/run``'s minimums stage, ``.ci/minimums.txt``): each read is
exercised against the library actually installed.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import torch

from lightning_div._internal.compat import PRIVATE_READS

PACKAGE = Path(__file__).resolve().parents[1] / "lightning_div"
COMPAT = PACKAGE / "_internal" / "compat"


def _private_name(node: ast.AST) -> str | None:
    """The private name a node reads of an object other than ``self`` / ``cls`` (``x._y``, ``getattr(x, "_y")``)."""
    if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            return None
        return node.attr
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr", "setattr")
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
        and node.args[1].value.startswith("_")
        and not node.args[1].value.startswith("__")
    ):
        return node.args[1].value
    return None


def _own_private_names() -> set[str]:
    """Private names the package defines itself (methods, and attributes it assigns): reading them is no
    other library's state (a factory setting its own object's fields, a subclass calling its own parent)."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        if COMPAT in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("_"):
                names.add(node.name)
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            for target in targets:
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Attribute) and leaf.attr.startswith("_"):
                        names.add(leaf.attr)
    return names


def test_no_private_state_of_another_library_is_read_outside_compat():
    own = _own_private_names()
    foreign = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if COMPAT in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            name = _private_name(node)
            if name is not None and name not in own:
                foreign.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {name}")
    assert foreign == [], "read through lightning_div/_internal/compat/ instead:\n" + "\n".join(foreign)


def test_at_most_eight_reads_each_in_its_listed_function():
    assert sum(len(functions) for functions in PRIVATE_READS.values()) <= 8
    assert sorted(p.stem for p in COMPAT.glob("*.py") if p.stem != "__init__") == sorted(PRIVATE_READS)
    for module, functions in PRIVATE_READS.items():
        tree = ast.parse((COMPAT / f"{module}.py").read_text())
        defined = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert set(functions) <= set(defined), f"compat/{module}.py lacks {set(functions) - set(defined)}"
        outside = [
            (name, node.lineno)
            for fn_name, fn in defined.items()
            if fn_name not in functions
            for node in ast.walk(fn)
            if (name := _private_name(node))
        ]
        assert outside == [], f"compat/{module}.py reads private state outside its listed functions: {outside}"
        for name in functions:  # each says why no public API serves
            doc = ast.get_docstring(defined[name]) or ""
            assert "No public API serves" in doc, f"compat/{module}.py:{name} does not say why it reads private state"
        importlib.import_module(f"lightning_div._internal.compat.{module}")


# -- each read, against the library installed --------------------------------------------------------


def test_lightning_reads_the_resumed_epoch_before_the_loops_and_the_logging_step(tmp_path):
    from lightning_div._internal.compat.lightning import batches_that_stepped, loaded_checkpoint
    from lightning_div._internal.lightning import pl

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            data = torch.utils.data.TensorDataset(torch.ones(6, 2))
            return torch.utils.data.DataLoader(data, batch_size=2)

    seen = {}

    class Probe(pl.Callback):
        def on_fit_start(self, trainer, pl_module):
            loaded = loaded_checkpoint(trainer)
            seen["epoch"] = (
                None if loaded is None else loaded["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"]
            )

        def on_train_end(self, trainer, pl_module):
            seen["stepped"] = batches_that_stepped(trainer)

    def fit(epochs, ckpt=None):
        trainer = pl.Trainer(
            max_epochs=epochs,
            default_root_dir=tmp_path,
            callbacks=[Probe()],
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(Module(), ckpt_path=ckpt)
        return trainer

    first = fit(2)
    assert seen == {"epoch": None, "stepped": 6}  # 3 batches an epoch, 2 epochs
    ckpt = tmp_path / "two.ckpt"
    first.save_checkpoint(ckpt)
    fit(3, str(ckpt))
    assert seen == {"epoch": 2, "stepped": 9}  # in on_fit_start, before Lightning restored its loops


def test_torch_reads_fsdp1_flags_of_an_ordinary_parameter():
    from lightning_div._internal.compat.torch import fsdp1_flattened

    assert fsdp1_flattened(torch.nn.Parameter(torch.ones(2))) == (False, False)
    # what torch.distributed.fsdp marks: a FlatParameter (use_orig_params=False) and every flattened parameter
    from torch.distributed.fsdp._common_utils import _set_fsdp_flattened
    from torch.distributed.fsdp._flat_param import FlatParameter

    flat = FlatParameter(torch.ones(4), requires_grad=True)
    assert fsdp1_flattened(flat)[0] is True
    p = torch.nn.Parameter(torch.ones(2))
    _set_fsdp_flattened(p)
    assert fsdp1_flattened(p) == (False, True)


def test_transformers_gives_the_parent_trainers_own_sampler(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments

    from lightning_div._internal.compat.transformers import train_sampler
    from lightning_div.integrations.transformers import DressTrainer
    from lightning_div.integrations.transformers._dress import DressTrainerMixin

    dataset = [{"input_ids": [1, 2], "labels": [1, 2]}] * 4
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=8, n_positions=8, n_embd=8, n_layer=1, n_head=1))
    trainer = DressTrainer(model=model, args=args, train_dataset=dataset)
    sampler = train_sampler(DressTrainerMixin, trainer, dataset)
    assert isinstance(sampler, torch.utils.data.RandomSampler) and len(sampler) == 4


def test_trackers_leave_out_the_anonymous_argument_lightning_passes_to_wandb(tmp_path):
    pytest.importorskip("wandb")
    from lightning_div._internal.compat.trackers import drop_wandb_anonymous
    from lightning_div._internal.lightning import submodule

    WandbLogger = submodule("loggers").WandbLogger
    logger = WandbLogger(save_dir=str(tmp_path), offline=True)
    assert logger._wandb_init.get("anonymous", "absent") is None  # what Lightning passes (the read's reason)
    drop_wandb_anonymous(logger)
    assert "anonymous" not in logger._wandb_init
