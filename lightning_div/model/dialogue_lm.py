"""DialogueLM: a ready LightningModule around any Hugging Face causal or seq2seq dialogue model.

For users who do not bring their own module. It has ``model`` and ``tokenizer``
attributes (so every lightning-div callback finds them) and trains with
:func:`lightning_div.dress.losses.dress_loss`, so DRESS sample weights and negatives just
work: gold batches log ``train/loss``, DRESS's negative batches ``train/negative_loss``.
"""

from __future__ import annotations

from typing import Any

import torch

from lightning_div._internal.compat.torch import fsdp1_flattened
from lightning_div._internal.lightning import pl
from lightning_div.dress.losses import DressLoss, dress_loss
from lightning_div.keys import TEST_LOSS, TRAIN_LOSS, TRAIN_NEGATIVE_LOSS, VAL_LOSS
from lightning_div.model.formatting import is_seq2seq
from lightning_div.model.loading import build_model, load_tokenizer
from lightning_div.types import Options


def decay_groups(
    model: torch.nn.Module, weight_decay: float = 0.0
) -> tuple[list[torch.nn.Parameter], list[torch.nn.Parameter]]:
    """(decayed, not decayed) parameters of ``model``: biases and normalisation weights are not decayed.

    Decided by what a parameter is (a ``*bias``, or owned by a module whose class or name says
    norm), not by its shape: under FSDP1 with ``use_orig_params=True`` (Lightning's default)
    every parameter is a flattened 1-D shard when the optimizer is built, so a rule on
    ``ndim`` would put them all in the undecayed group. Any other 1-D parameter of an
    unsharded model is not decayed either, as before.

    Raises:
        ValueError: ``weight_decay`` > 0 on FSDP's flat parameters (``use_orig_params=False``),
            where weights, biases and norms share one tensor and cannot be told apart.
    """
    norm_owned = {
        id(p)
        for module_name, module in model.named_modules()
        if "norm" in type(module).__name__.lower() or "norm" in module_name.rsplit(".", 1)[-1].lower()
        for p in module.parameters(recurse=False)
    }
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for name, p in model.named_parameters():
        flat, flattened = fsdp1_flattened(p)
        if flat and weight_decay > 0:
            raise ValueError(
                f"weight_decay={weight_decay} under FSDP with use_orig_params=False: parameter {name!r} "
                "flattens weights, biases and norms into one tensor, so they cannot be decayed apart; "
                "use FSDPStrategy(use_orig_params=True) (Lightning's default) or weight_decay=0"
            )
        undecayed = id(p) in norm_owned or name.endswith("bias") or "norm" in name.lower()
        # the parameters FSDP1 flattened: their shape is not their own
        (no_decay if undecayed or (p.ndim < 2 and not flattened) else decay).append(p)
    return decay, no_decay


class DialogueLM(pl.LightningModule):
    """Fine-tunes (or trains from scratch) a Hugging Face dialogue model with DRESS-ready weighted loss.

    Args:
        model_name_or_path: Hub name or local path, e.g. ``microsoft/DialoGPT-small``,
            ``facebook/blenderbot-400M-distill``, or ``"local:chitchat-gpt2"``: the shipped base model
            (:func:`~lightning_div.model.base.load_base_model`); ignored for the weights when
            ``from_scratch`` is set.
        tokenizer: Hub name / path (default: ``model_name_or_path``), or ``"local:chitchat"`` to train a
            byte-level BPE on the embedded corpus on first use (cached under ``$LIGHTNING_DIV_CACHE``).
        tokenizer_vocab_size: vocabulary of the locally trained tokenizer.
        from_scratch: a config dict for a random-init model, e.g.
            ``{"model_type": "gpt2", "n_layer": 4, "n_embd": 256, "n_head": 4, "n_positions": 256}``.
        config_overrides: config attributes changed when loading a pretrained model, e.g. its
            dropout ``{"resid_pdrop": 0.4, "embd_pdrop": 0.4, "attn_pdrop": 0.4}``.
        learning_rate: AdamW learning rate.
        weight_decay: AdamW weight decay of the weight matrices and embeddings; biases and
            normalisation weights are not decayed (:func:`decay_groups`, FSDP-safe).
        warmup_steps: steps of linear learning-rate warm-up.
        label_smoothing: smooth the training targets (see
            :func:`~lightning_div.dress.losses.weighted_lm_loss`); ``val/loss`` and ``test/loss`` stay the
            plain cross-entropy, so they remain comparable across settings.
    """

    def __init__(
        self,
        model_name_or_path: str | None = "microsoft/DialoGPT-small",
        tokenizer: str | None = None,
        tokenizer_vocab_size: int = 4000,
        from_scratch: Options | None = None,
        config_overrides: Options | None = None,
        learning_rate: float = 5e-5,
        weight_decay: float = 0.0,
        warmup_steps: int = 0,
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__()
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"DialogueLM: label_smoothing must be in [0, 1), got {label_smoothing!r}")
        self.save_hyperparameters()
        seq2seq_scratch = from_scratch is not None and from_scratch.get("model_type", "gpt2") in (
            "bart",
            "t5",
            "blenderbot",
            "blenderbot-small",
            "mbart",
            "pegasus",
            "marian",
        )
        tok_spec = tokenizer or model_name_or_path
        if tok_spec is None:
            raise ValueError("DialogueLM needs a tokenizer (name/path or 'local:chitchat')")
        self.tokenizer = load_tokenizer(tok_spec, tokenizer_vocab_size, seq2seq=seq2seq_scratch)
        # from_pretrained returns a model in eval mode and Lightning (2.x) does not switch it back, so
        # fine-tuning would run without dropout: a LightningModule starts in train mode, as Lightning's own do
        self.model = build_model(model_name_or_path, from_scratch, self.tokenizer, config_overrides).train()
        self.seq2seq = is_seq2seq(self.model)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits of a DialogueDataModule batch."""
        if self.seq2seq:
            # HF's shift-right turns the -100 label padding into pad ids itself.
            decoder_input_ids = self.model.prepare_decoder_input_ids_from_labels(labels=batch["labels"])
            return self.model(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                decoder_input_ids=decoder_input_ids,
            ).logits
        return self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits

    def loss(self, batch: dict[str, Any], weighted: bool = True) -> DressLoss:
        """The loss of a :class:`~lightning_div.DialogueDataModule` batch, as training or validation takes it.

        Args:
            batch: a batch of the datamodule (``input_ids``, ``attention_mask``, ``labels``; in training
                also DRESS's ``sample_weight``, ``negative`` and ``negative_loss`` when it reweights).
            weighted: True (training, ``training_step``): the batch's weights and negatives count and the
                targets are smoothed by ``label_smoothing``. False (validation and test): every example
                alike, the plain mean negative log-likelihood of the target tokens.

        Returns:
            The loss to backpropagate and its gold and negative parts
            (:class:`~lightning_div.dress.losses.DressLoss`).
        """
        fields = batch if weighted else {}
        smoothing = float(self.hparams["label_smoothing"]) if weighted else 0.0
        return dress_loss(self(batch), batch["labels"], fields, causal=not self.seq2seq, label_smoothing=smoothing)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        """The weighted loss; gold examples log ``train/loss``, DRESS negatives ``train/negative_loss``.

        A batch that mixes both (``negative_batches="mixed"``) logs each part under its key, each
        over its own target tokens; the loss trained on is the whole batch's.
        """
        parts = self.loss(batch, weighted=True)
        size = batch["labels"].size(0)
        for key, value in ((TRAIN_LOSS, parts.gold), (TRAIN_NEGATIVE_LOSS, parts.negative)):
            if value is not None:
                self.log(key, value, on_step=True, on_epoch=True, prog_bar=True, batch_size=size)
        return parts.loss

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        loss = self.loss(batch, weighted=False).loss
        self.log(VAL_LOSS, loss, on_epoch=True, prog_bar=True, sync_dist=True, batch_size=batch["labels"].size(0))

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        loss = self.loss(batch, weighted=False).loss
        self.log(TEST_LOSS, loss, on_epoch=True, sync_dist=True, batch_size=batch["labels"].size(0))

    def configure_optimizers(self) -> Any:
        hp: Any = self.hparams  # Lightning's AttributeDict of the constructor's arguments
        decay, no_decay = decay_groups(self.model, hp.weight_decay)
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": hp.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=hp.learning_rate,
        )
        if hp.warmup_steps <= 0:
            return opt
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / hp.warmup_steps))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
