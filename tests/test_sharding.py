"""Sharded strategies: refused ones named at setup; FSDP1 / FSDP2 parameters gathered exactly, without hangs.

1. ``check_strategy`` refuses DeepSpeed ZeRO stage 3 and tensor parallelism with a message naming the
   strategy, and accepts single-device, DDP, DeepSpeed ZeRO 1-2, FSDP and FSDP2 data parallelism.
2. ``full_parameters`` on 2 gloo CPU processes: inside, FSDP1 (root and nested units, with and
   without ``use_orig_params``) and FSDP2 (``fully_shard``) models hold exactly the unsharded
   model's parameters and generate what it generates; ranks may make different numbers of model
   calls (no collective inside); afterwards the local shards and FSDP's state are exactly as before.
3. A 2-epoch fit with Sem-Ent, RUQ and DRESS under FSDP1 and FSDP2 logs what DDP logs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from operator import attrgetter
from pathlib import Path

import pytest
import torch
from ddp_utils import run_distributed
from helpers import causal_model, tokenizer

from lightning_div.callbacks.dress import DRESSReweighting
from lightning_div.callbacks.ruq import RUQMonitor
from lightning_div.model.generation import generate_batched
from lightning_div.model.sharding import check_strategy, forward_communicates, full_parameters
from lightning_div.settings import Outputs

ROOT = Path(__file__).resolve().parent.parent
IDS = torch.tensor([[5, 17, 33, 2, 40], [7, 7, 19, 60, 3]])

# ------------------------------------------------------------------------------- 1. check_strategy


class DeepSpeedStrategy:
    """Stands in for Lightning's DeepSpeedStrategy (deepspeed is not installed): what check_strategy reads."""

    def __init__(self, stage: int, with_property: bool = True) -> None:
        self.config = {"zero_optimization": {"stage": stage}}
        if with_property:
            self.zero_stage_3 = stage == 3


def on(strategy):
    return types.SimpleNamespace(strategy=strategy, callbacks=[])


ZERO3 = (
    "lightning-div cannot measure under DeepSpeedStrategy with ZeRO stage 3: the parameters are partitioned "
    "across processes and gathered by DeepSpeed at every forward call, a collective each time, while the "
    "callbacks' processes generate and score different numbers of batches (they would hang). Use ZeRO stage 1 "
    "or 2 (deepspeed_stage_2), or FSDP (strategy='fsdp'), whose parameters lightning-div gathers once per "
    "measurement."
)


@pytest.mark.parametrize("with_property", [True, False], ids=["zero_stage_3", "config"])
def test_deepspeed_zero3_is_refused_with_the_reason(with_property):
    with pytest.raises(ValueError, match=f"^{re.escape(ZERO3)}") as err:
        check_strategy(on(DeepSpeedStrategy(3, with_property)))
    assert str(err.value).startswith(ZERO3)
    assert "FSDP2 data parallelism" in str(err.value)  # and what is supported


def test_the_callbacks_refuse_it_in_setup_before_any_work():
    trainer = on(DeepSpeedStrategy(3))
    for callback in (
        RUQMonitor(outputs=Outputs(show_progress=False)),
        DRESSReweighting(outputs=Outputs(show_progress=False)),
    ):
        with pytest.raises(ValueError, match="DeepSpeedStrategy with ZeRO stage 3"):
            callback.setup(trainer, torch.nn.Linear(1, 1), "validate")


def test_tensor_parallelism_is_refused():
    from pytorch_lightning.strategies import ModelParallelStrategy as Lightnings

    expected = (
        "lightning-div cannot measure under ModelParallelStrategy with tensor_parallel_size=2: tensor "
        "parallelism splits every layer across processes, which must run every forward in lockstep, while "
        "the callbacks' processes generate and score different batches. Use tensor_parallel_size=1 with "
        "data_parallel_size=<number of processes> (FSDP2 via fully_shard)."
    )

    class Mesh:  # what setup_environment builds (it runs before the callbacks' setup, where the check is made)
        mesh_dim_names = ("data_parallel", "tensor_parallel")

        def __init__(self, tp):
            self.tp = tp

        def __getitem__(self, name):
            return types.SimpleNamespace(size=lambda: {"data_parallel": 1, "tensor_parallel": self.tp}[name])

    class ModelParallelStrategy(Lightnings):
        """Lightning's, after setup_environment: its public device_mesh is what is read."""

        def __init__(self, tp, **kwargs):
            super().__init__(**kwargs)
            self.mesh = Mesh(tp)

        @property
        def device_mesh(self):
            return self.mesh

    with pytest.raises(ValueError, match=f"^{re.escape(expected)}") as err:
        check_strategy(on(ModelParallelStrategy(2, data_parallel_size=1, tensor_parallel_size=2)))
    assert str(err.value).startswith(expected)
    # Lightning's default, "auto", puts every device of the node in one tensor-parallel group: the mesh says 4
    with pytest.raises(ValueError, match="ModelParallelStrategy with tensor_parallel_size=4"):
        check_strategy(on(ModelParallelStrategy(4)))
    # before setup_environment the mesh does not exist (device_mesh raises): nothing to refuse yet
    check_strategy(on(Lightnings(data_parallel_size=1, tensor_parallel_size=2)))
    # any strategy with a public device_mesh is read the same way
    with pytest.raises(ValueError, match="SimpleNamespace with tensor_parallel_size=2"):
        check_strategy(on(types.SimpleNamespace(device_mesh=Mesh(2))))


def test_supported_strategies_pass():
    import yaml
    from jsonargparse import ArgumentParser
    from pytorch_lightning.strategies import (
        DDPStrategy,
        FSDPStrategy,
        ModelParallelStrategy,
        SingleDeviceStrategy,
        Strategy,
    )

    parser = ArgumentParser()
    parser.add_subclass_arguments(Strategy, "strategy")
    config = yaml.safe_load((ROOT / "configs" / "fsdp.yaml").read_text())["trainer"]["strategy"]
    from_config = parser.instantiate(parser.parse_object({"strategy": config})).strategy
    assert isinstance(from_config, FSDPStrategy)  # configs/fsdp.yaml builds the strategy it documents
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    assert from_config.kwargs["auto_wrap_policy"]._module_classes == {GPT2Block}
    for strategy in (
        None,
        SingleDeviceStrategy(torch.device("cpu")),
        DDPStrategy(),
        FSDPStrategy(),
        from_config,
        ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1),
        DeepSpeedStrategy(2),
        DeepSpeedStrategy(1, with_property=False),
    ):
        check_strategy(on(strategy))  # no error


def test_generation_is_never_synced_across_processes():
    model, tok = causal_model(), tokenizer()
    seen = {}
    original = model.generate

    def spy(**kwargs):
        seen.update(kwargs)
        return original(**kwargs)

    model.generate = spy
    generate_batched(model, tok, ["hello there"], max_new_tokens=2, show_progress=False)
    # Hugging Face would turn synced_gpus on by itself for an FSDP-managed model on several processes
    assert seen["synced_gpus"] is False
    with pytest.raises(ValueError, match="synced_gpus=True is not supported"):
        generate_batched(model, tok, ["hello there"], synced_gpus=True, show_progress=False)


def test_full_parameters_is_a_no_op_for_an_unsharded_module():
    model = causal_model()
    params = list(model.parameters())
    with full_parameters(model):
        assert list(model.parameters()) == params
    assert all(a is b for a, b in zip(model.parameters(), params))


# ------------------------------------------------------------------------------- 2. full_parameters


def _greedy(model, ids=IDS):
    with torch.inference_mode():
        return model.generate(
            input_ids=ids, max_new_tokens=4, do_sample=False, pad_token_id=0, synced_gpus=False
        ).tolist()


def _calls_inside(model, rank):
    """Rank 0 makes 3 model calls, rank 1 one: a collective in any of them would wait forever (gloo timeout)."""
    outputs = []
    for _ in range(3 if rank == 0 else 1):
        with torch.inference_mode():
            outputs.append(model(input_ids=IDS).logits.clone())
    return outputs


def _train_step(model):
    """A forward/backward through FSDP after the block: its state machine must still be intact."""
    loss = model(input_ids=IDS, labels=IDS).loss
    loss.backward()
    return float(loss)


def _fsdp1_all(rank, world):
    return {(n, u): _fsdp1(rank, n, u) for n in (False, True) for u in (True, False)}


def _fsdp1(rank, nested, use_orig_params):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    reference = causal_model()
    names = [n for n, _ in reference.named_parameters()]
    expected = {
        "greedy": _greedy(reference),
        "logits": reference(input_ids=IDS).logits.detach(),
        "loss": float(reference(input_ids=IDS, labels=IDS).loss),
    }
    policy = {"auto_wrap_policy": ModuleWrapPolicy({GPT2Block})} if nested else {}
    model = FSDP(causal_model(), device_id=torch.device("cpu"), use_orig_params=use_orig_params, **policy)
    _train_step(model)  # lazy init and one real FSDP forward/backward (gradients not applied)
    model.zero_grad(set_to_none=True)
    shards = [p.detach().clone() for p in model.parameters()]
    out = {"units": sum(isinstance(m, FSDP) for m in model.modules())}
    # a forward of it is a collective (the reference NLL then runs every batch on every process)
    out["communicates"] = forward_communicates(model) and not forward_communicates(reference)
    holder = torch.nn.Module()
    holder.model = model  # full_parameters finds FSDP inside the LightningModule (user-wrapped)
    with full_parameters(holder):
        out["equal_inside"] = all(torch.equal(attrgetter(n)(model), attrgetter(n)(reference)) for n in names)
        out["greedy"] = _greedy(model) == expected["greedy"]
        out["logits"] = all(torch.equal(x, expected["logits"]) for x in _calls_inside(model, rank))
        with torch.no_grad():
            attrgetter(names[0])(model).add_(1.0)  # discarded on exit: writeback=False
    after = [p.detach() for p in model.parameters()]
    out["shards_restored"] = len(after) == len(shards) and all(
        a.shape == b.shape and torch.equal(a, b) for a, b in zip(after, shards)
    )
    out["loss_after"] = _train_step(model) == pytest.approx(expected["loss"], rel=1e-6)
    torch.distributed.barrier()  # both ranks reached the end
    return out


@pytest.mark.slow
@pytest.mark.xdist_group("two_processes")
def test_fsdp1_full_parameters_on_two_processes():
    for rank, results in enumerate(run_distributed(_fsdp1_all, 2, timeout_s=60)):
        assert len(results) == 4
        for (nested, use_orig_params), out in results.items():
            where = f"nested={nested} use_orig_params={use_orig_params} rank {rank}"
            assert out.pop("units") == (3 if nested else 1), where
            assert out == dict.fromkeys(out, True), where


def _fsdp2(rank, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    reference = causal_model()
    names = [n for n, _ in reference.named_parameters()]
    expected = {"greedy": _greedy(reference), "logits": reference(input_ids=IDS).logits.detach()}
    model = causal_model()
    mesh = init_device_mesh("cpu", (world,))
    for block in model.transformer.h:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    groups = [g for m in (*model.transformer.h, model) for g in m._get_fsdp_state()._fsdp_param_groups]

    def state():
        return [(g.is_sharded, g.is_unsharded, g.post_forward_mesh_info) for g in groups]

    out: dict = {"communicates": forward_communicates(model) and not forward_communicates(reference)}
    for phase in ("before any forward", "after training", "after a forward without backward"):
        if phase == "after training":
            _train_step(model)
            model.zero_grad(set_to_none=True)
        elif phase.startswith("after a forward"):
            with torch.no_grad():
                model(input_ids=IDS)  # the root stays unsharded: FSDP2 does not reshard the root after forward
        before = state()
        local = {
            n: p.to_local().clone() if isinstance(p, DTensor) else p.detach().clone()
            for n, p in model.named_parameters()
        }
        with full_parameters(model):
            inside = {
                "plain": not any(isinstance(p, DTensor) for p in model.parameters()),
                "equal": all(torch.equal(attrgetter(n)(model), attrgetter(n)(reference)) for n in names),
                "greedy": _greedy(model) == expected["greedy"],
                "logits": all(torch.equal(x, expected["logits"]) for x in _calls_inside(model, rank)),
            }
        restored = all(
            torch.equal(p.to_local() if isinstance(p, DTensor) else p.detach(), local[n])
            for n, p in model.named_parameters()
        )
        now = state()
        if phase == "before any forward":
            # the first forward ran inside the block: FSDP's lazy initialisation made the model the root and
            # set it not to reshard after forward, as it does outside; the rest is as before
            assert before[-1][2] is not None and now[-1][2] is None
            before[-1] = (*before[-1][:2], None)
        out[phase] = {**inside, "state": now == before, "shards": restored, "root_sharded_before": before[-1][0]}
    out["loss_after"] = _train_step(model) == pytest.approx(float(reference(input_ids=IDS, labels=IDS).loss), rel=1e-6)
    torch.distributed.barrier()
    return out


@pytest.mark.slow
@pytest.mark.xdist_group("two_processes")
def test_fsdp2_full_parameters_on_two_processes():
    """FSDP2 (``fully_shard``) runs on CPU with gloo in torch 2.13: tested like FSDP1."""
    for rank, out in enumerate(run_distributed(_fsdp2, 2, timeout_s=60)):
        assert out.pop("loss_after"), rank
        assert out.pop("communicates"), rank  # fully_shard's DTensor parameters: a forward is a collective
        # the states the block started from: all sharded, then the root left unsharded by a forward alone
        assert [checks.pop("root_sharded_before") for checks in out.values()] == [True, True, False]
        for phase, checks in out.items():
            assert checks == dict.fromkeys(checks, True), (rank, phase)


# ------------------------------------------------------------------------------- 3. end to end

#: Values that differ between DDP and the sharded runs. The two sharded runs log identical values; DDP's
#: RUQ margins differ from theirs by float32 rounding, < 1e-6 relative (see ``test_sharded_fits_log_what_ddp_logs``).
MARGIN_TOLERANCE = 1e-6


def fit(kinds: list[str], out: Path, learning_rate: float = 1e-3, cache: Path | None = None) -> dict[str, list]:
    """Fits each strategy in ``kinds`` one after another in one pair of processes; each rank's histories by kind."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cache_arg = [] if cache is None else [str(cache)]
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests" / "sharded_fit.py"),
            ",".join(kinds),
            str(out),
            str(learning_rate),
            *cache_arg,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # a hang is a failure here, not a stuck CI
    )
    assert done.returncode == 0, f"{kinds}: exit {done.returncode}\n{done.stderr[-4000:]}"
    histories = {}
    for kind in kinds:
        ranks = [json.loads((out / kind / f"rank{r}.json").read_text()) for r in range(2)]
        assert ranks[0] == ranks[1], kind  # every rank logs the global values
        histories[kind] = ranks[0]
    return histories


def flat(histories) -> dict:
    return {(i, row["epoch"], k): v for i, rows in enumerate(histories) for row in rows for k, v in row.items()}


@pytest.mark.slow
@pytest.mark.xdist_group("two_processes")
def test_sharded_fits_log_what_ddp_logs(tmp_path):
    """DDP, FSDP1 and FSDP2 fits, one after another in one pair of processes (tests/sharded_fit.py), log the same."""
    runs = fit(["ddp", "fsdp", "fsdp2"], tmp_path, cache=tmp_path / "cache")  # one clusters cache for the three
    ddp, fsdp1, fsdp2 = (flat(runs[kind]) for kind in ("ddp", "fsdp", "fsdp2"))
    keys = {k for _, _, k in ddp}
    assert {"val/sem_ent", "val/distinct_1", "val/ruq", "train/ruq", "dress/negatives", "dress/head_share"} <= keys
    assert {e for _, e, k in ddp if k == "val/sem_ent"} == {0.0, 1.0}  # both epochs measured
    assert set(fsdp1) == set(ddp) == set(fsdp2)
    assert fsdp1 == fsdp2  # the two sharded runs agree bit for bit
    for key, value in ddp.items():
        if "ruq_margin" in key[2]:
            # Mean log-probability differences: DDP's weights after the optimizer steps differ from FSDP's by
            # float32 rounding (measured: < 6e-7 relative on these margins, the counts all equal).
            assert fsdp1[key] == pytest.approx(value, rel=MARGIN_TOLERANCE, abs=0), key
        else:  # counts, shares and entropies of generated text, DRESS's weights and negatives: exact
            assert fsdp1[key] == value, key


# ------------------------------------------------------------------------------- 4. DialogueLM's weight decay


def _decay_names(model, weight_decay=0.1):
    from lightning_div.model.dialogue_lm import decay_groups

    names = {id(p): n.replace("_fsdp_wrapped_module.", "") for n, p in model.named_parameters()}
    try:
        decay, no_decay = decay_groups(model, weight_decay)
    except ValueError as err:
        return str(err)
    return sorted(names[id(p)] for p in decay), sorted(names[id(p)] for p in no_decay)


def _fsdp1_decay(rank, world):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    out = {"plain": _decay_names(causal_model())}
    for nested in (False, True):
        policy = {"auto_wrap_policy": ModuleWrapPolicy({GPT2Block})} if nested else {}
        for use_orig_params in (True, False):
            model = FSDP(causal_model(), device_id=torch.device("cpu"), use_orig_params=use_orig_params, **policy)
            out[nested, use_orig_params] = _decay_names(model)
            out[nested, use_orig_params, "ndim"] = sorted({p.ndim for p in model.parameters()})
    return out


@pytest.mark.slow
@pytest.mark.xdist_group("two_processes")
def test_weight_decay_groups_under_fsdp1_are_the_unsharded_models():
    """The demo module's AdamW groups: by what a parameter is, so FSDP's 1-D shards are grouped as unsharded."""
    for out in run_distributed(_fsdp1_decay, 2, timeout_s=60):
        decay, no_decay = out["plain"]
        # GPT-2: matrices and embeddings decayed; biases and the ln_* LayerNorms not
        assert decay and all(n.endswith("weight") and ".ln_" not in n for n in decay)
        assert no_decay and all(n.endswith("bias") or ".ln_" in n for n in no_decay)
        assert "transformer.ln_f.weight" in no_decay and "transformer.wte.weight" in decay
        for nested in (False, True):
            assert out[nested, True, "ndim"] == [1]  # every parameter a flattened shard: shape tells nothing
            assert out[nested, True] == (decay, no_decay)
            assert "use_orig_params=False" in out[nested, False] and "cannot be decayed apart" in out[nested, False]
