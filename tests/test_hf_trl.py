"""TRL's SFTTrainer with TrainerDiversityMonitor (conversational format), the chat template, and docs/hugging-face.md's script."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from docs_blocks import run_page_script
from helpers import report_of_hugging_face_run

pytest.importorskip("trl", reason="the hf extra is not installed: pip install -e '.[hf]'")
datasets = pytest.importorskip("datasets", reason="the demo extra is not installed")

from trl import SFTConfig, SFTTrainer  # noqa: E402

from lightning_div import load_base_model  # noqa: E402
from lightning_div.datamodules import read_pairs  # noqa: E402
from lightning_div.integrations.transformers import (  # noqa: E402
    DIALOGPT_CHAT_TEMPLATE,
    TrainerDiversityMonitor,
    as_messages,
    eval_key,
)
from lightning_div.metrics import semantic_entropy  # noqa: E402
from lightning_div.model.adapters import HuggingFaceAdapter  # noqa: E402
from lightning_div.model.formatting import DialogueLayout  # noqa: E402
from lightning_div.semantic.space import SemanticSpace  # noqa: E402
from lightning_div.settings import Generation, Outputs  # noqa: E402

PAGE = Path(__file__).resolve().parents[1] / "docs" / "hugging-face.md"


def _pairs():
    return read_pairs("chitchat:finetune", max_turns=2)[:24], read_pairs("chitchat:validation", max_turns=2)[:16]


def test_as_messages_alternates_back_from_the_response():
    from lightning_div.pairs import DialoguePair

    pair = DialoguePair(context=("a", "b", "c"), response="d")
    assert as_messages(pair) == {
        "messages": [
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"},
            {"role": "assistant", "content": "d"},
        ]
    }
    assert [m["role"] for m in as_messages(DialoguePair(context=("x", "y"), response="z"))["messages"]] == [
        "assistant",
        "user",
        "assistant",
    ]


def test_the_chat_template_is_dialogueformat_token_for_token():
    model, tokenizer = load_base_model()
    tokenizer.chat_template = DIALOGPT_CHAT_TEMPLATE
    fmt = DialogueLayout()
    pairs = read_pairs("chitchat:finetune", max_turns=3)[:40]
    assert {len(p.context) for p in pairs} >= {1, 2}  # one- and several-turn contexts are both checked
    for p in pairs:
        rendered = tokenizer.apply_chat_template(as_messages(p)["messages"], tokenize=True, return_dict=True)
        context = fmt.encode_context(list(p.context), tokenizer, seq2seq=False)
        response = tokenizer(p.response, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        assert rendered["input_ids"] == context + response, p.source
        # the generation marks cover the response (and earlier assistant turns): assistant_only_loss trains on them
        masked = tokenizer.apply_chat_template(
            as_messages(p)["messages"], tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )["assistant_masks"]
        assert masked[len(context) :] == [1] * len(response)


@pytest.mark.slow
def test_sft_trainer_logs_the_monitors_metrics(tmp_path):
    train, val = _pairs()
    model, tokenizer = load_base_model()
    tokenizer.chat_template = DIALOGPT_CHAT_TEMPLATE
    args = SFTConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=2,
        per_device_train_batch_size=8,
        learning_rate=1e-3,
        eval_strategy="steps",
        eval_steps=1,
        assistant_only_loss=True,
        max_length=128,
        save_strategy="no",
        report_to="tensorboard",  # for the report of this run, below
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        disable_tqdm=True,
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=datasets.Dataset.from_list([as_messages(p) for p in train]),
        eval_dataset=datasets.Dataset.from_list([as_messages(p) for p in val]),
        processing_class=tokenizer,
    )
    cb = TrainerDiversityMonitor(
        eval_pairs=val,
        cluster_texts=[p.response for p in train],
        space=SemanticSpace(encoder="minilm", num_clusters=3, show_progress=False),
        num_contexts=10,
        generation=Generation(batch_size=32, max_new_tokens=10),
        outputs=Outputs(dirpath=str(tmp_path / "cache"), show_progress=False),
        on_error="raise",
        measure_at_start=True,
    ).attach(trainer)
    trainer.train()
    rows = [r for r in trainer.state.log_history if eval_key("sem_ent") in r]
    assert [r["step"] for r in rows] == [0, 1, 2]  # the baseline, then every evaluation
    for row in rows:
        assert 0.0 <= row[eval_key("sem_ent")] <= math.log(3) + 1e-9
        assert 0.0 <= row[eval_key("distinct_2")] <= 1.0 and 0.0 <= row[eval_key("ruq")] <= 100.0
    # the responses SFTTrainer's model gives now are those measured last, and Sem-Ent is theirs
    adapter = HuggingFaceAdapter(model, tokenizer, batch_size=32, max_new_tokens=10, show_progress=False)
    assert adapter.generate([p.context for p in cb.sample()]) == cb.last_responses
    ids = cb.space.assign(cb.last_responses)
    assert rows[-1][eval_key("sem_ent")] == pytest.approx(semantic_entropy(ids, 3), abs=1e-12)
    # `lightning-div report` of the output_dir: the curves of these very values, the latest sample table
    logged = {f"eval/{k}": [r[eval_key(k)] for r in rows] for k in ("sem_ent", "distinct_2", "ruq")}
    report_of_hugging_face_run(tmp_path / "out", logged, "eval_samples_step2.csv", tmp_path / "report.html")


@pytest.mark.slow
def test_the_pages_script_runs_verbatim(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # its output_dir and the clusters' cache are written beside it
    run_page_script(PAGE, "A whole script")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in lines] == ["step 4", "step 8"]
    for line in lines:
        sem_ent, distinct_2, ruq = (float(x) for x in re.findall(r"(?:Sem-Ent|distinct-2|RUQ) ([\d.]+)", line))
        assert 0.0 <= sem_ent <= math.log(4) + 1e-3 and 0.0 <= distinct_2 <= 1.0 and 0.0 <= ruq <= 100.0
    assert list((tmp_path / "sft-chitchat" / "lightning_div_cache").glob("clusters-*.npz"))
