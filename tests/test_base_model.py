"""The shipped base model: loads offline by one name everywhere, has a pad token, and reaches the loss it reports."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import causal_model, tokenizer

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
    from lightning_div.model.formatting import DialogueFormat

    val = list(read_pairs("chitchat:validation", max_history=2))[: results["check_pairs"]]
    encoded = encode_pairs(val, tok, model, DialogueFormat(max_turns=2), show_progress=False)
    loss = pretrain_base.heldout_loss(model, encoded, tok.pad_token_id)
    assert loss == pytest.approx(results["heldout_loss_check"], abs=1e-4)
