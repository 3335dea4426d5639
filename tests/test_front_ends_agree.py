"""The measurement is written once (lightning_div.measure): both front ends give the same numbers for the same model.

The Lightning monitors and the Hugging Face callback measure one model with the same pairs and settings; one
training step at learning rate 0 each, so both measure the very same weights after a real training step.
"""

from __future__ import annotations

import pytest
import torch
from helpers import base_model_margin_tolerance
from monitor_setup import GOLD, TRAIN, VAL, TinyChat, collate, minilm, trainer
from torch.utils.data import Dataset
from transformers import Trainer, TrainingArguments

from lightning_div import load_base_model
from lightning_div.callbacks.ruq import RUQMonitor
from lightning_div.callbacks.semantic_diversity import SemanticDiversityMonitor
from lightning_div.integrations.transformers import TrainerDiversityMonitor, eval_key
from lightning_div.measure import RUQMeasure, SemanticMeasure
from lightning_div.semantic.space import SemanticSpace
from lightning_div.settings import Generation, Outputs

SETTINGS = dict(show_progress=False, batch_size=8, max_new_tokens=10, seed=0, on_error="raise")
SEMANTIC = (
    "sem_ent",
    "sem_ent_gold",
    "cluster_js",
    "top_cluster_share",
    "distinct_1",
    "distinct_2",
    "distinct_3",
    "ead",
)
RUQ = ("ruq", "ruq_margin", "ruq_idk1", "ruq_idk2", "ruq_margin_idk1", "ruq_margin_idk2")


class FrozenChat(TinyChat):
    """The shipped base model (it writes real replies) trained at learning rate 0: a real step, the same weights."""

    def __init__(self) -> None:
        super().__init__()
        self.model, self.tokenizer = load_base_model()
        self.model.train()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


class Pairs(Dataset):
    def __init__(self, pairs):
        self.pairs = list(pairs)

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        return self.pairs[i]


@pytest.mark.slow
def test_lightning_and_hugging_face_measure_the_same_numbers(tmp_path):
    # Lightning: the two monitors on a one-step fit
    module = FrozenChat()
    before = {k: v.clone() for k, v in module.model.state_dict().items()}
    generation = Generation(batch_size=SETTINGS["batch_size"], max_new_tokens=SETTINGS["max_new_tokens"])
    outputs = Outputs(log_samples=0, show_progress=False, dirpath=str(tmp_path / "cache"))
    sem = SemanticDiversityMonitor(
        SemanticSpace(minilm(), num_clusters=4, batch_size=SETTINGS["batch_size"], show_progress=False),
        num_contexts=12,
        val_pairs=VAL,
        cluster_texts=GOLD,
        generation=generation,
        outputs=outputs,
        seed=SETTINGS["seed"],
        on_error=SETTINGS["on_error"],
    )
    ruq = RUQMonitor(
        num_train_contexts=10,
        num_contexts=12,  # the Hugging Face monitor's RUQ sample is its num_contexts
        train_pairs=TRAIN,
        val_pairs=VAL,
        plot=None,
        generation=generation,
        outputs=outputs,
        seed=SETTINGS["seed"],
        on_error=SETTINGS["on_error"],
    )
    trainer(tmp_path / "pl", [sem, ruq], max_epochs=1, limit_train_batches=1, limit_val_batches=1).fit(module)
    assert all(torch.equal(before[k], v) for k, v in module.model.state_dict().items())  # lr 0: the same weights
    lightning = {**sem.history[-1], **ruq.history[-1], **ruq.history[-2]}

    # Hugging Face: the monitor on a one-step Trainer run with the same weights, pairs and settings
    model, tok = load_base_model()
    model.train()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    args = TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        max_steps=1,
        learning_rate=0.0,
        per_device_train_batch_size=8,
        eval_strategy="steps",
        eval_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        remove_unused_columns=False,
        disable_tqdm=True,
        seed=0,
    )
    hf_trainer = Trainer(
        model=model,
        args=args,
        train_dataset=Pairs(TRAIN[:8]),
        eval_dataset=Pairs(VAL[:8]),
        data_collator=lambda batch: collate(batch, tok, model),
        processing_class=tok,
    )
    space = SemanticSpace(encoder=minilm(), num_clusters=4, batch_size=8, show_progress=False)
    # the seed is the TrainingArguments' (seed=0 above), as the batch size would be without generation=
    cb = TrainerDiversityMonitor(
        eval_pairs=VAL,
        cluster_texts=GOLD,
        measures=[SemanticMeasure(space, batch_size=8), RUQMeasure(batch_size=8)],
        num_contexts=12,
        train_pairs=TRAIN,
        num_train_contexts=10,
        generation=Generation(batch_size=SETTINGS["batch_size"], max_new_tokens=SETTINGS["max_new_tokens"]),
        outputs=Outputs(log_samples=0, dirpath=str(tmp_path / "cache"), show_progress=False),
        on_error="raise",
    ).attach(hf_trainer)
    hf_trainer.train()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    hugging_face = cb.history[-1]

    # the same samples (SemanticDiversityMonitor's and RUQMonitor's draws), the same responses
    assert cb.sample() == sem.sample(None) and cb.last_responses == sem.last_responses
    assert sum(bool(r.strip()) for r in cb.last_responses) >= 10  # real replies, not the empty text of a tiny model
    for name in SEMANTIC:
        assert hugging_face[eval_key(name)] == pytest.approx(lightning[f"val/{name}"], rel=1e-6, abs=1e-9), name
    # RUQ to 1e-6 as the issue asks, and never looser than the margins' float32 rounding (4 eps32 x |score|)
    tolerance = min(1e-6, base_model_margin_tolerance(VAL[:20] + TRAIN[:20]))
    for name in RUQ:  # validation RUQ, and RUQ-train (the Trainer's un-prefixed training keys)
        assert hugging_face[eval_key(name)] == pytest.approx(lightning[f"val/{name}"], rel=0, abs=tolerance), name
        assert hugging_face[name] == pytest.approx(lightning[f"train/{name}"], rel=0, abs=tolerance), name
    assert hugging_face[eval_key("ruq_alert")] == lightning["val/ruq_alert"] == 0.0
