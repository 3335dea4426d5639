"""How a callback reaches the user's dialogue model: the :class:`DialogueModelAdapter` protocol.

An adapter can *generate* responses to contexts and give the *log-probability of each
token* of a given response. :class:`HuggingFaceAdapter` wraps any Hugging Face model and
tokenizer, decoder-only (DialoGPT, GPT-2) or encoder-decoder (BlenderBot, BART, T5);
:func:`resolve_adapter` finds one on a LightningModule.

Adapters keep references, never copies: they always run the model's current weights on
the device it currently sits on, so one may be built once and used every epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from lightning_div.model.formatting import Context, DialogueLayout, is_seq2seq
from lightning_div.model.generation import generate_batched, model_device
from lightning_div.model.scoring import candidate_logprobs_batched, token_logprobs_batched


@runtime_checkable
class DialogueModelAdapter(Protocol):
    """What the callbacks need from a dialogue model.

    Contexts are strings or lists of turns (oldest first).
    """

    def generate(self, contexts: Sequence[Context], **generation_kwargs: Any) -> list[str]:
        """Responses grouped by context: ``len(contexts) * num_return_sequences`` strings.

        Args:
            contexts: strings or lists of turns (oldest first).
            **generation_kwargs: decoding options, e.g. ``num_return_sequences``, ``do_sample``,
                ``top_p``, ``num_beams``, ``seed``.

        Returns:
            The responses, context 0's first.
        """
        ...

    def token_logprobs(self, contexts: Sequence[Context], responses: Sequence[str]) -> list[torch.Tensor]:
        """One 1-D tensor per pair: log p of each response token, the end-of-sequence token included.

        Args:
            contexts: strings or lists of turns (oldest first).
            responses: one response per context.

        Returns:
            One tensor per (context, response) pair.
        """
        ...


class HuggingFaceAdapter:
    """Any Hugging Face dialogue model with its tokenizer, as a :class:`DialogueModelAdapter`.

    One class for both layouts, read from the model (``config.is_encoder_decoder``):
    decoder-only models (DialoGPT, GPT-2, any ``*ForCausalLM``) get
    ``turn<eos>turn<eos>response<eos>`` with left padding; encoder-decoder models (BlenderBot,
    BART, T5) get the turns in the encoder and the response from the decoder. Generation and
    scoring (:mod:`lightning_div.model.generation`, :mod:`lightning_div.model.scoring`) take the
    layout from the model too, so a second class per layout would only repeat it.

    Args:
        model: the Hugging Face model (kept by reference: its current weights and device are used).
        tokenizer: its tokenizer (never modified); it needs an EOS token.
        format: the token layout shared with training (default ``DialogueLayout()``).
        batch_size: contexts per generation batch and pairs per scoring batch.
        max_new_tokens: the generation length unless ``generate`` is given another.
        show_progress: tqdm bars.
        seed: the default sampling seed (None: unseeded).

    Raises:
        TypeError: a model without ``generate``.
        ValueError: a tokenizer without EOS, or a size < 1.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        format: DialogueLayout | None = None,
        batch_size: int = 16,
        max_new_tokens: int = 40,
        show_progress: bool = True,
        seed: int | None = 0,
    ) -> None:
        name = type(self).__name__
        if not callable(getattr(model, "generate", None)):
            raise TypeError(
                f"{name} needs a Hugging Face generation model (with .generate), got {type(model).__name__}"
            )
        if getattr(tokenizer, "eos_token_id", None) is None:
            raise ValueError(f"{name} needs a tokenizer with an EOS token (responses are scored up to EOS)")
        if batch_size < 1 or max_new_tokens < 1:
            raise ValueError(f"batch_size and max_new_tokens must be >= 1, got {batch_size} and {max_new_tokens}")
        self.model = model
        self.tokenizer = tokenizer
        self.format = format or DialogueLayout()
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self.show_progress = show_progress
        self.seed = seed

    @property
    def is_seq2seq(self) -> bool:
        """True for an encoder-decoder model (read from the model each time: it is kept by reference)."""
        return is_seq2seq(self.model)

    @property
    def device(self) -> torch.device:
        """The model's current device; inputs are built there."""
        return model_device(self.model)

    def generate(
        self,
        contexts: Sequence[Context],
        num_return_sequences: int = 1,
        show_progress: bool | None = None,
        seed: int | None = None,
        **generation_kwargs: Any,
    ) -> list[str]:
        """Batched responses, greedy with 3-gram blocking unless keywords say otherwise.

        See :func:`lightning_div.model.generation.generate_batched`; ``seed`` defaults to the
        adapter's, so the same call gives the same samples.

        Args:
            contexts: strings or lists of turns (oldest first).
            num_return_sequences: responses per context.
            show_progress: a tqdm bar (None = the adapter's setting).
            seed: the sampling seed (None = the adapter's).
            **generation_kwargs: Hugging Face ``generate`` keywords; they override the defaults.

        Returns:
            ``len(contexts) * num_return_sequences`` stripped strings, context 0's first.
        """
        generation_kwargs.setdefault("max_new_tokens", self.max_new_tokens)
        return generate_batched(
            self.model,
            self.tokenizer,
            contexts,
            format=self.format,
            batch_size=self.batch_size,
            num_return_sequences=num_return_sequences,
            show_progress=self.show_progress if show_progress is None else show_progress,
            seed=self.seed if seed is None else seed,
            **generation_kwargs,
        )

    def _scored(
        self, score: Any, contexts: Sequence[Context], items: Any, show_progress: bool | None, padding_side: str | None
    ) -> Any:
        """``score`` (a batched scoring function of :mod:`lightning_div.model.scoring`) with this adapter's settings."""
        return score(
            self.model,
            self.tokenizer,
            contexts,
            items,
            format=self.format,
            batch_size=self.batch_size,
            show_progress=self.show_progress if show_progress is None else show_progress,
            padding_side=padding_side,
        )

    def token_logprobs(
        self,
        contexts: Sequence[Context],
        responses: Sequence[str],
        *,
        show_progress: bool | None = None,
        padding_side: str | None = None,
    ) -> list[torch.Tensor]:
        """log p of each response token (EOS included); see :func:`lightning_div.model.scoring.token_logprobs_batched`.

        Args:
            contexts: strings or lists of turns (oldest first).
            responses: one response per context.
            show_progress: a tqdm bar (None = the adapter's setting).
            padding_side: ``"left"`` / ``"right"`` (None = the model's best).

        Returns:
            One 1-D CPU tensor per pair.
        """
        return self._scored(token_logprobs_batched, contexts, responses, show_progress, padding_side)

    def candidate_logprobs(
        self,
        contexts: Sequence[Context],
        candidates: Sequence[Sequence[str]],
        *,
        show_progress: bool | None = None,
        padding_side: str | None = None,
    ) -> list[list[torch.Tensor]]:
        """Several responses per context, each context encoded once; see :func:`lightning_div.model.scoring.candidate_logprobs_batched`.

        Args:
            contexts: strings or lists of turns (oldest first).
            candidates: one list of responses per context.
            show_progress: a tqdm bar (None = the adapter's setting).
            padding_side: ``"left"`` / ``"right"`` (None = the model's best).

        Returns:
            For each context, one 1-D CPU tensor per candidate.
        """
        return self._scored(candidate_logprobs_batched, contexts, candidates, show_progress, padding_side)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.model).__name__}, batch_size={self.batch_size})"


def resolve_adapter(
    pl_module: Any,
    model_attr: str = "model",
    tokenizer_attr: str = "tokenizer",
    format: DialogueLayout | None = None,
    **adapter_kwargs: Any,
) -> DialogueModelAdapter:
    """The adapter for a LightningModule.

    The module itself when it implements :class:`DialogueModelAdapter`; otherwise
    ``getattr(pl_module, model_attr)`` with ``getattr(pl_module, tokenizer_attr)`` wrapped in
    a :class:`HuggingFaceAdapter`. Other keywords go to the adapter.

    Args:
        pl_module: the LightningModule (or any object) to reach the model through.
        model_attr: the attribute holding the Hugging Face model.
        tokenizer_attr: the attribute holding its tokenizer.
        format: the token layout (default ``DialogueLayout()``).
        **adapter_kwargs: :class:`HuggingFaceAdapter` arguments.

    Returns:
        A :class:`DialogueModelAdapter`.

    Raises:
        TypeError: neither the two methods nor the two attributes; the message names what is
            missing and shows both ways.
    """
    if isinstance(pl_module, DialogueModelAdapter):
        return pl_module
    name = type(pl_module).__name__
    model = getattr(pl_module, model_attr, None)
    tokenizer = getattr(pl_module, tokenizer_attr, None)
    problems = []
    if model is None:
        problems.append(f"it has no attribute {model_attr!r} holding the Hugging Face model")
    elif not callable(getattr(model, "generate", None)):
        problems.append(
            f"{name}.{model_attr} is a {type(model).__name__}, which has no .generate() "
            "(a Hugging Face *ForCausalLM / *ForConditionalGeneration model is needed)"
        )
    if tokenizer is None:
        problems.append(f"it has no attribute {tokenizer_attr!r} holding the tokenizer")
    if problems:
        raise TypeError(
            f"cannot reach a dialogue model through {name}: " + "; ".join(problems) + ". Either\n"
            f"  1. keep the model and tokenizer on the module: self.{model_attr} = AutoModelForCausalLM"
            f".from_pretrained(...) (or AutoModelForSeq2SeqLM) and self.{tokenizer_attr} = "
            "AutoTokenizer.from_pretrained(...) — or pass model_attr=/tokenizer_attr= naming your attributes; or\n"
            "  2. implement the DialogueModelAdapter protocol on the module: "
            "generate(contexts, **generation_kwargs) -> list[str] and "
            "token_logprobs(contexts, responses) -> list[torch.Tensor]."
        )
    return HuggingFaceAdapter(model, tokenizer, format=format, **adapter_kwargs)


__all__ = ["DialogueModelAdapter", "HuggingFaceAdapter", "resolve_adapter"]
