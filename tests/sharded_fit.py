"""Train the tiny demo model for 2 epochs on 2 CPU processes (gloo) with Sem-Ent, RUQ and DRESS attached.

    python tests/sharded_fit.py KIND[,KIND...] OUT_DIR [LEARNING_RATE [CACHE_DIR]]    (KIND: ddp, fsdp, fsdp2)

``fsdp``: Lightning's FSDPStrategy wraps the LightningModule from outside with the GPT-2 blocks as
nested FSDP units (FSDP1), as on GPUs. Lightning passes FSDP ``device_id=None`` on CPU, which torch
refuses ("FSDP needs a non-CPU accelerator device"), so the strategy here passes the CPU device;
nothing else changes. ``fsdp2``: ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)
with ``fully_shard`` on every block and on the model in ``configure_model``. ``ddp``: the reference.
Each rank writes its callbacks' histories (timings left out) to ``OUT_DIR/<kind>/rank<r>.json``. The clusters
are cached in ``CACHE_DIR`` (default ``OUT_DIR/cache``): content-addressed, so the runs share one.
Several kinds are fitted one after another in the same two processes: Lightning launches the second rank
once (it then finds ``LOCAL_RANK`` set) and keeps the gloo process group for the later fits, so the three
strategies cost one pair of interpreters, not three. Each fit starts from the same seed and weights.
tests/test_sharding.py runs it in a subprocess with a timeout, so a hang is a failure.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import pytorch_lightning as pl
import torch
from monitor_setup import datamodule, dress, minilm, tiny_lm, trainer
from pytorch_lightning import Callback
from pytorch_lightning.strategies import FSDPStrategy, ModelParallelStrategy
from transformers.models.gpt2.modeling_gpt2 import GPT2Block

from lightning_div.callbacks.base import DiversityCallback
from lightning_div.callbacks.ruq import RUQMonitor, RUQPlot, RUQScoring
from lightning_div.callbacks.semantic_diversity import SemanticDiversityMonitor
from lightning_div.model.dialogue_lm import DialogueLM
from lightning_div.semantic.space import SemanticSpace
from lightning_div.settings import Generation, Outputs


class CPUFSDPStrategy(FSDPStrategy):
    """Lightning's FSDPStrategy, with the CPU as FSDP's device (Lightning gives None there, which torch refuses)."""

    def _setup_model(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel(
            module=model,
            cpu_offload=self.cpu_offload,
            mixed_precision=self.mixed_precision_config,
            sharding_strategy=self.sharding_strategy,
            device_id=torch.device("cpu"),
            **self.kwargs,
        )


class FullyShardedLM(DialogueLM):
    """DialogueLM sharded with FSDP2 in configure_model, as ModelParallelStrategy requires."""

    def configure_model(self) -> None:
        from torch.distributed.fsdp import FSDPModule, fully_shard

        if isinstance(self.model, FSDPModule):
            return
        mesh = self.device_mesh["data_parallel"]
        for block in self.model.transformer.h:
            fully_shard(block, mesh=mesh)
        fully_shard(self.model, mesh=mesh)


class SaveHistories(Callback):
    """Each rank's diversity-callback histories, without wall-clock timings, to ``<out>/rank<r>.json``."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def on_fit_end(self, trainer, pl_module):
        histories = [
            [{k: v for k, v in row.items() if not k.startswith("timing/")} for row in cb.history]
            for cb in trainer.callbacks
            if isinstance(cb, DiversityCallback)
        ]
        (self.out / f"rank{trainer.global_rank}.json").write_text(json.dumps(histories))


def main(kinds: str, out: Path, learning_rate: float = 1e-3, cache: Path | None = None) -> None:
    cache = out / "cache" if cache is None else cache
    # Chit-Chat read once per process: the fits' datamodules get its 160 / 16 examples as pairs (the same
    # examples in the same order; reading the whole corpus again cost each fit seconds on every rank).
    read = datamodule()
    data = {"train": read.train_pairs(), "val": read.val_pairs()}
    for kind in kinds.split(","):
        fit(kind, out / kind, learning_rate, cache, data)


def fit(kind: str, out: Path, learning_rate: float, cache: Path, data: dict[str, list]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    pl.seed_everything(0, verbose=False)  # each fit starts from one RNG state, whatever ran before it
    generation, outputs = Generation(batch_size=4, max_new_tokens=6), Outputs(show_progress=False, dirpath=str(cache))
    callbacks = [
        # 10 contexts / batches of 4 and 6 prompts / 4: 3 and 2 batches, so the ranks make different
        # numbers of generate and forward calls (a collective in any of them would hang)
        SemanticDiversityMonitor(
            SemanticSpace(minilm(), num_clusters=4, batch_size=4, show_progress=False),
            num_contexts=10,
            generation=generation,
            outputs=Outputs(log_samples=2, show_progress=False, dirpath=str(cache)),
        ),
        # pair-by-pair scoring: bit-identical however the batches fall (tests/test_invariants.py)
        RUQMonitor(
            num_train_contexts=6,
            num_contexts=6,
            plot=RUQPlot(num_contexts=3, num_beams=2),
            scoring=RUQScoring(shared_contexts=False),
            generation=generation,
            outputs=outputs,
        ),
        # mined at fit start (outside the measurements) and at the end of epoch 0 for epoch 1
        dress(out, mining={"at": "start", "num_contexts": 10}, batch_size=4, max_new_tokens=6, dirpath=str(cache)),
        SaveHistories(out),
    ]
    module: DialogueLM
    if kind == "ddp":
        strategy, module = "ddp", tiny_lm(learning_rate)
    elif kind == "fsdp":
        strategy, module = CPUFSDPStrategy(auto_wrap_policy={GPT2Block}), tiny_lm(learning_rate)
    elif kind == "fsdp2":
        strategy = ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)
        reference = tiny_lm(learning_rate)
        module = FullyShardedLM(**reference.hparams)
        module.load_state_dict(reference.state_dict())  # the very weights the other runs start from
    else:
        raise SystemExit(f"unknown strategy {kind!r}: ddp, fsdp or fsdp2")
    tr = trainer(
        out,
        callbacks,
        max_epochs=2,
        limit_train_batches=2,
        limit_val_batches=1,
        devices=2,
        strategy=strategy,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tr.fit(module, datamodule=datamodule(**data))


if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main(
        sys.argv[1],
        Path(sys.argv[2]),
        *(float(a) for a in sys.argv[3:4]),
        *(Path(a) for a in sys.argv[4:5]),
    )
