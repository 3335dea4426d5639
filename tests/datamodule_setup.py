"""A data module's test setup: a tiny LightningModule that records what each batch held, a callback that
owns gold weights and negatives as DRESS does, and what a two-rank run trained on per epoch.

Used by ``test_datamodule.py`` (the in-memory data module), ``test_streaming.py`` (the LitData one, which must
keep the same guarantees) and ``test_progress.py``.
"""

from __future__ import annotations

import json

import numpy as np
import pytorch_lightning as pl
import torch
from helpers import causal_model, seq2seq_model, tokenizer

from lightning_div.datamodules import Negatives, as_pair


class TinyLM(pl.LightningModule):
    """A tiny HF model with `model` and `tokenizer` attributes that records what each batch held."""

    def __init__(self, seq2seq: bool = False, record_dir: str | None = None, lr: float = 1e-2):
        super().__init__()
        self.tokenizer = tokenizer(seq2seq)
        self.model = (seq2seq_model() if seq2seq else causal_model()).train()
        self.record_dir, self.lr = record_dir, lr
        self.seen: list[tuple[int, list[int], list[float]]] = []
        self.losses: list[float] = []

    def training_step(self, batch, batch_idx):
        self.seen.append((self.current_epoch, batch["index"].tolist(), batch["sample_weight"].tolist()))
        loss = self.model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
        ).loss
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)

    def on_train_end(self):
        if self.record_dir is not None:
            with open(f"{self.record_dir}/rank{self.global_rank}.json", "w") as f:
                json.dump(self.seen, f)


def negatives_of(pairs, weights, batches="mixed") -> Negatives:
    return Negatives(tuple(as_pair(p, f"negatives[{i}]") for i, p in enumerate(pairs)), np.array(weights), batches)


class AddNegatives(pl.Callback):
    """Owns gold weights and negatives as the DRESS callback does: applies them at fit start, adds the
    negatives at the end of one epoch, checkpoints both and applies them again on resume."""

    def __init__(self, at_epoch: int, pairs, weights, gold_weights=None):
        self.at_epoch, self.pending = at_epoch, negatives_of(pairs, weights)
        self.gold_weights, self.negatives = gold_weights, Negatives(batches="mixed")

    def apply(self, trainer):
        dm = trainer.datamodule
        gold = dm.sample_weights if self.gold_weights is None else np.asarray(self.gold_weights, dtype=np.float64)
        dm.apply_weights(gold, self.negatives, "loss")

    def on_fit_start(self, trainer, pl_module):
        self.apply(trainer)

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.current_epoch == self.at_epoch:
            self.negatives = self.pending
            self.apply(trainer)

    def state_dict(self):
        return {
            "gold_weights": None if self.gold_weights is None else list(map(float, self.gold_weights)),
            "negatives": [(list(p.context), p.response) for p in self.negatives.pairs],
            "negative_weights": self.negatives.weights.tolist(),
        }

    def load_state_dict(self, state):
        self.gold_weights = state["gold_weights"]
        self.negatives = negatives_of(state["negatives"], state["negative_weights"])


def seen_by_epoch(record_dir):
    """(index, sample_weight) of every row both ranks trained on, per epoch."""
    seen = {}
    for rank in range(2):
        with open(f"{record_dir}/rank{rank}.json") as f:
            for epoch, indices, weights in json.load(f):
                seen.setdefault(epoch, []).extend(zip(indices, weights))
    return seen
