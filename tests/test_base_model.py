"""The shipped base model: loads offline by one name everywhere, has a pad token, and reaches the loss it reports."""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import CHILD_ENV, base_model_copy, causal_model, tokenizer, truncate_weights

from lightning_div.cli.main import main
from lightning_div.model.base import BASE_MODEL, base_model_path, load_base_model
from lightning_div.model.loading import build_model

ROOT = Path(__file__).resolve().parents[1]


def test_config_overrides_change_a_pretrained_models_config(tmp_path):
    causal_model().save_pretrained(tmp_path)
    model = build_model(str(tmp_path), None, tokenizer(), {"resid_pdrop": 0.4, "attn_pdrop": 0.3})
    assert (model.config.resid_pdrop, model.config.attn_pdrop) == (0.4, 0.3)
    assert model.transformer.h[0].mlp.dropout.p == 0.4  # reached the modules, not only the config
    with pytest.raises(ValueError, match=r"\['resid_dropout'\] are not attributes"):
        build_model(str(tmp_path), None, tokenizer(), {"resid_dropout": 0.4})


def test_the_base_model_loads_offline_with_a_pad_token_distinct_from_eos():
    model, tok = load_base_model()
    assert type(model).__name__ == "GPT2LMHeadModel" and model.training  # ready to fine-tune (issue 43 item 6)
    assert next(model.parameters()).dtype == torch.float32  # stored in float16, used in float32
    assert tok.pad_token == "<pad>" and tok.pad_token_id == 4000 and tok.pad_token_id != tok.eos_token_id
    assert len(tok) == model.config.vocab_size == 4001
    # the 4,000 tokens before the pad are local:chitchat's, so losses compare with the from-scratch runs
    from lightning_div.model.loading import load_tokenizer

    local = load_tokenizer("local:chitchat")
    text = "hey, how are you doing today? i'm fine"
    assert tok(text).input_ids == local(text).input_ids
    # padding a batch works (the error users hit with GPT-2's tokenizer: no padding token)
    batch = tok(["hi", "how are you?"], padding=True, return_tensors="pt")
    assert batch["input_ids"][0, -1] == 4000 and batch["attention_mask"][0, -1] == 0


def test_one_name_everywhere_and_from_pretrained_on_its_folder():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lightning_div import DialogueLM

    module = DialogueLM(BASE_MODEL)
    # in train mode like any LightningModule (from_pretrained returns eval mode, and Lightning does not switch
    # it back: fine-tuning would run without its dropout)
    assert module.model.training and all(m.training for m in module.model.modules())
    shipped, _ = load_base_model()
    direct = AutoModelForCausalLM.from_pretrained(base_model_path(), dtype=torch.float32)
    for a, b, c in zip(module.model.parameters(), shipped.parameters(), direct.parameters()):
        assert torch.equal(a, b) and torch.equal(b, c)
    assert module.tokenizer.pad_token_id == AutoTokenizer.from_pretrained(base_model_path()).pad_token_id == 4000


def test_the_model_card_states_what_the_issue_asks_and_the_weights_are_small():
    folder = base_model_path()
    card = (folder / "README.md").read_text()
    for needed in ("pretrain", "License", "python experiments/pretrain_base.py", "seed", "held-out", "minutes"):
        assert needed in card, needed
    assert (folder / "model.safetensors").stat().st_size <= 12_000_000


def test_the_base_model_is_package_data():
    meta = (ROOT / "pyproject.toml").read_text()
    assert '"model/chitchat-gpt2/*"' in meta


@pytest.mark.slow
def test_load_base_model_in_a_fresh_process_is_fast_and_offline():
    """Also covers what two tests checked in fresh processes of their own (one interpreter start, not three):
    tests/test_semantic_space.py's test_the_space_needs_no_lightning (lightning_div.semantic.space imports
    no Lightning) and tests/test_hf_trainer.py's test_the_hugging_face_front_end_imports_no_lightning (nor
    does the Hugging Face front end, nor lightning_div.callbacks), each checked right after its import."""
    # a new process, no Hub: the import and the load finish in well under the issue's 20 s (not a timing
    # assertion: a timeout that only a hang or a download would reach)
    code = (
        "import sys, lightning_div.semantic.space; "
        "print(sorted(m for m in ('pytorch_lightning', 'lightning', 'lightning_fabric') if m in sys.modules)); "
        "import lightning_div.integrations.transformers; "
        "print(sorted(m for m in ('pytorch_lightning', 'lightning', 'lightning_div.callbacks') if m in sys.modules)); "
        "from lightning_div import load_base_model; m, t = load_base_model(); print(type(m).__name__)"
    )
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    # the space, then the front end, import no Lightning (a tracker may print a line of its own first); the
    # load prints nothing
    assert out.stdout.strip().splitlines()[-3:] == ["[]", "[]", "GPT2LMHeadModel"]


@pytest.mark.slow
def test_the_base_model_reaches_the_heldout_loss_it_reports():
    sys.path.insert(0, str(ROOT / "experiments"))
    import pretrain_base

    results = json.loads((ROOT / "docs" / "results" / "pretrain_base" / "results.json").read_text())
    model, tok = load_base_model()
    from lightning_div.datamodules.encoding import encode_pairs
    from lightning_div.datamodules.formats import read_pairs
    from lightning_div.model.formatting import DialogueLayout

    val = list(read_pairs("chitchat:validation", max_turns=2))[: results["check_pairs"]]
    encoded = encode_pairs(val, tok, model, DialogueLayout(max_turns=2), show_progress=False)
    loss = pretrain_base.heldout_loss(model, encoded, tok.pad_token_id)
    assert loss == pytest.approx(results["heldout_loss_check"], abs=1e-4)


# Damaged or unknown models and tokenizers


def test_a_damaged_tokenizer_cache_is_retrained_with_one_warning(tmp_path):
    from lightning_div.model.tiny import train_tokenizer

    texts = [f"hello there number {i % 7}" for i in range(50)]
    first = train_tokenizer(texts, vocab_size=300, cache_dir=tmp_path)
    (cached,) = tmp_path.glob("tokenizer-*/tokenizer.json")
    cached.write_text(cached.read_text()[:50])  # a partial write of the old code
    with pytest.warns(UserWarning, match=rf"cached tokenizer '.*{cached.parent.name}/tokenizer.json' cannot be read"):
        second = train_tokenizer(texts, vocab_size=300, cache_dir=tmp_path)
    assert second("hello there")["input_ids"] == first("hello there")["input_ids"]
    third = train_tokenizer(texts, vocab_size=300, cache_dir=tmp_path)  # the rewritten cache loads
    assert third.get_vocab() == first.get_vocab()
    assert [p.name for p in tmp_path.iterdir()] == [cached.parent.name]  # no temporary directory left


def test_local_names_work_wherever_a_name_is_taken(tmp_path, capsys):
    # M2: DialogueDataModule(tokenizer="local:...") and ResponseEncoder("local:chitchat-gpt2") went to the Hub
    from lightning_div import DialogueDataModule, ResponseEncoder

    assert len(DialogueDataModule(tokenizer="local:chitchat-gpt2").tokenizer) == 4001
    assert len(DialogueDataModule(tokenizer="local:chitchat").tokenizer) == 4000
    encoder = ResponseEncoder("local:chitchat-gpt2", batch_size=2, show_progress=False)
    vectors = encoder.encode(["hello there", "i don't know ."])
    assert vectors.shape == (2, 256) and vectors.dtype == np.float32 and np.isfinite(vectors).all()
    assert encoder.name == "local:chitchat-gpt2"
    assert next(encoder.model.parameters()).dtype == torch.float32  # stored float16, embeds in float32
    gold = tmp_path / "gold.txt"
    gold.write_text("".join(f"reply {i} about {['cats', 'rain', 'work'][i % 3]}\n" for i in range(12)))
    argv = ["score", str(gold), "--gold", str(gold), "--fit-clusters", "2", "--encoder", "local:chitchat-gpt2"]
    assert main([*argv, "--quiet"]) == 0, capsys.readouterr().err
    assert "sem_ent: 2 clusters (fitted on --gold" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["local:chitchat-gpt3", "LOCAL:chitchat-gpt2", "local:"])
def test_an_unknown_local_name_lists_the_local_names(name, tmp_path, capsys):
    from lightning_div import DialogueDataModule, DialogueLM, ResponseEncoder
    from lightning_div.model.loading import load_tokenizer

    listing = r"is not a local name; the local names are 'local:chitchat-gpt2' \(.*\) and 'local:chitchat' \("
    for make in (
        lambda: DialogueDataModule(tokenizer=name).tokenizer,
        lambda: ResponseEncoder(name),
        lambda: load_tokenizer(name),
        lambda: DialogueLM(model_name_or_path=name),
    ):
        with pytest.raises(OSError, match=listing):
            make()
    gold = tmp_path / "gold.txt"
    gold.write_text("a\nb\nc\n")
    assert main(["score", str(gold), "--gold", str(gold), "--fit-clusters", "2", "--encoder", name]) == 2
    assert re.fullmatch(rf"lightning-div score: error: '{re.escape(name)}' {listing}.*\n", capsys.readouterr().err)


def test_the_local_tokenizer_is_not_a_model():
    from lightning_div import ResponseEncoder

    with pytest.raises(OSError, match=r"'local:chitchat' names a tokenizer, not a encoder; .*'local:chitchat-gpt2'"):
        ResponseEncoder("local:chitchat")


def test_damaged_shipped_weights_are_named_with_the_fix(tmp_path, monkeypatch):
    # L1: a truncated or header-flipped model.safetensors gave a raw SafetensorError naming no file;
    # L2: one float16 weight set to +inf loaded silently and every logit was NaN
    from safetensors.torch import load_file, save_file

    from lightning_div import DialogueLM, load_base_model
    from lightning_div.model import base
    from lightning_div.model.base import ModelLoadError, check_base_weights

    folder = base_model_copy(tmp_path)
    assert check_base_weights(folder) == folder  # the shipped bytes pass
    weights = folder / "model.safetensors"
    tensors = load_file(str(weights))
    name = next(k for k, v in tensors.items() if v.dtype == torch.float16)
    tensors[name].view(-1)[0] = float("inf")
    save_file(tensors, str(weights), metadata={"format": "pt"})
    damaged = {
        "an infinite weight": lambda: None,
        "truncated": lambda: truncate_weights(folder),
        "a flipped header byte": lambda: weights.write_bytes(
            b"\xff" + base_model_copy(tmp_path / "again").joinpath("model.safetensors").read_bytes()[1:]
        ),
    }
    monkeypatch.setattr(base, "base_model_path", lambda: folder)
    for damage in damaged.values():
        damage()
        message = (
            rf"{re.escape(str(weights))}: not the shipped weights of local:chitchat-gpt2 .*reinstall lightning-div"
        )
        with pytest.raises(ModelLoadError, match=message):
            check_base_weights(folder)
        with pytest.raises(ModelLoadError, match=message):
            load_base_model()
        with pytest.raises(ModelLoadError, match=message):
            DialogueLM("local:chitchat-gpt2")


def test_a_truncated_model_by_path_is_one_error_naming_it(tmp_path):
    from lightning_div import DialogueLM
    from lightning_div.model.base import ModelLoadError

    folder = base_model_copy(tmp_path)
    truncate_weights(folder)
    with pytest.raises(ModelLoadError, match=rf"cannot load model '{re.escape(str(folder))}': "):
        DialogueLM(str(folder))


def test_the_base_model_loads_ready_to_fine_tune_and_silently():
    # issue 43 item 6: load_base_model() returned eval mode (fine-tuning then ran without dropout), and the
    # first loss printed "`loss_type=None` was set in the config but it is unrecognized"
    from lightning_div import DialogueLM, load_base_model

    model, _ = load_base_model()
    assert model.training and all(m.training for m in model.modules())
    assert model.loss_type == "ForCausalLM"  # what transformers falls back to, with its warning
    assert DialogueLM("local:chitchat-gpt2").model.loss_type == "ForCausalLM"
    probe = textwrap.dedent(
        """
        import torch
        from lightning_div import load_base_model
        model, _ = load_base_model()
        ids = torch.tensor([[5, 6, 7, 8]])
        print(float(model(input_ids=ids, labels=ids).loss))
        """
    )
    proc = subprocess.run([sys.executable, "-c", probe], env=CHILD_ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "loss_type" not in proc.stderr and float(proc.stdout) > 0, proc.stderr
