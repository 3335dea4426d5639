"""Batched response generation from a Hugging Face dialogue model, without disturbing training.

Contexts are laid out by :class:`lightning_div.model.formatting.DialogueLayout`, sorted by
length into batches (left padding for decoder-only models, right padding for the
encoder of seq2seq models) and decoded with ``model.generate``. The model runs in eval
mode under ``torch.inference_mode()`` inside a forked RNG, so the training loop's mode,
gradients and random stream are exactly as before the call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from tqdm.auto import tqdm

from lightning_div._internal.bars import bar_disabled
from lightning_div._internal.distributed import distributed_map, length_batches
from lightning_div.model.formatting import Context, DialogueLayout, as_turns, is_seq2seq

#: Evaluation decoding (the Sem-Ent authors'; docs/paper-settings.md): greedy with 3-gram blocking.
#: Caller kwargs override these.
GREEDY_DEFAULTS: dict[str, Any] = {"do_sample": False, "num_beams": 1, "no_repeat_ngram_size": 3}
#: No n-gram blocking at all. Given explicitly (0, not absent) so that a model whose own
#: ``generation_config`` blocks n-grams (BlenderBot blocks 3-grams of the response and of the
#: context) samples unblocked too; ``encoder_no_repeat_ngram_size=0`` is accepted by decoder-only models.
NO_BLOCKING: dict[str, Any] = {"no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0}
#: Response sets for NLI diversity (docs/paper-settings.md): plain nucleus sampling, p = 0.9, no n-gram blocking
#: (Stasaski & Hearst sample with nucleus p = 0.9 and nothing else).
SAMPLING_DEFAULTS: dict[str, Any] = {"do_sample": True, "top_p": 0.9, **NO_BLOCKING}


def decoding_defaults(generation_kwargs: dict[str, Any], seq2seq: bool) -> dict[str, Any]:
    """The decoding arguments ``generate`` gets: defaults for the mode, then the caller's keywords.

    Sampling (``do_sample=True``) starts from :data:`NO_BLOCKING`: the papers sample with plain
    nucleus or temperature sampling. Anything else starts from :data:`GREEDY_DEFAULTS`, plus
    ``encoder_no_repeat_ngram_size=3`` for seq2seq models (the Sem-Ent evaluation also blocks
    the context's 3-grams; a decoder-only model's ``no_repeat_ngram_size`` already sees the prompt).
    A caller who wants blocking while sampling asks for it, e.g. ``no_repeat_ngram_size=3``.
    """
    if generation_kwargs.get("do_sample"):
        kwargs: dict[str, Any] = dict(NO_BLOCKING)
    else:
        kwargs = dict(GREEDY_DEFAULTS)
        if seq2seq:
            kwargs["encoder_no_repeat_ngram_size"] = 3
    kwargs.update(generation_kwargs)
    return kwargs


def model_device(model: Any) -> torch.device:
    """The device the model's weights live on (read each time: Lightning moves modules)."""
    device = getattr(model, "device", None)
    if isinstance(device, torch.device):
        return device
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def _seed_rng(device: torch.device, seed: int) -> None:
    # Seed only the CPU generator and the model's device, which are exactly the ones forked.
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        with torch.cuda.device(device):
            torch.cuda.manual_seed(seed)
    elif device.type != "cpu" and hasattr(getattr(torch, device.type, None), "manual_seed"):
        getattr(torch, device.type).manual_seed(seed)


@contextlib.contextmanager
def evaluation_mode(model: torch.nn.Module, seed: int | None = None) -> Iterator[None]:
    """Run ``model`` in eval mode, without autograd, inside a forked RNG seeded with ``seed``.

    Every submodule's ``training`` flag is restored afterwards (not just the top one: a user
    may keep e.g. a frozen encoder in eval mode while training), and the global RNG of the
    CPU and of the model's device continue as if the block never ran.
    """
    modes = [(m, m.training) for m in model.modules()]
    device = model_device(model)
    fork: dict[str, Any] = {"devices": []}
    if device.type != "cpu":
        index = device.index
        if index is None and device.type == "cuda":
            index = torch.cuda.current_device()
        fork = {"devices": [index if index is not None else 0]}
        if device.type != "cuda":  # fork_rng's default; older torch has no device_type argument
            fork["device_type"] = device.type
    try:
        with torch.random.fork_rng(**fork), torch.inference_mode():
            if seed is not None:
                _seed_rng(device, seed)
            model.eval()
            yield
    finally:
        for module, mode in modes:
            module.training = mode


def check_contexts(contexts: Sequence[Context], name: str = "contexts") -> list[list[str]]:
    """Each context as a list of turns; a TypeError names the first bad entry."""
    if isinstance(contexts, (str, bytes)):
        raise TypeError(f"{name} must be a list of contexts (each a string or a list of turns), got one string")
    out = []
    for i, context in enumerate(contexts):
        if not isinstance(context, (str, Sequence)) or isinstance(context, bytes):
            raise TypeError(f"{name}[{i}] is {type(context).__name__}, expected str or a list of str")
        out.append(as_turns(context, where=f"{name}[{i}]"))
    return out


def pad_batch(
    sequences: Sequence[Sequence[int]], pad_id: int, side: str, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention_mask) of equal-length rows, padded on ``side`` ("left" or "right").

    Built here rather than with ``tokenizer.pad`` so that a tokenizer without a pad token
    (GPT-2, DialoGPT) works and the user's tokenizer is never modified.
    """
    if side not in ("left", "right"):
        raise ValueError(f"padding side must be 'left' or 'right', got {side!r}")
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        if not seq:
            continue
        cols = slice(width - len(seq), width) if side == "left" else slice(0, len(seq))
        ids[row, cols] = torch.as_tensor(seq, dtype=torch.long)
        mask[row, cols] = 1
    return ids.to(device), mask.to(device)


def pad_id_of(tokenizer: Any) -> int:
    """The id used under the attention mask: the pad token, else EOS (GPT-2 has no pad token)."""
    for name in ("pad_token_id", "eos_token_id", "bos_token_id"):
        value = getattr(tokenizer, name, None)
        if value is not None:
            return int(value)
    return 0


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = set(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids


def _decode(tokenizer: Any, rows: torch.Tensor, eos_ids: set[int]) -> list[str]:
    texts = []
    for row in rows.tolist():
        # Cut at the first EOS: whatever generate pads a finished row with is not part of it.
        end = next((k for k, t in enumerate(row) if t in eos_ids), len(row))
        texts.append(tokenizer.decode(row[:end], skip_special_tokens=True).strip())
    return texts


def generate_batched(
    model: Any,
    tokenizer: Any,
    contexts: Sequence[Context],
    *,
    format: DialogueLayout | None = None,
    batch_size: int = 16,
    max_new_tokens: int = 40,
    num_return_sequences: int = 1,
    show_progress: bool = True,
    seed: int | None = 0,
    **generation_kwargs: Any,
) -> list[str]:
    """Responses of a Hugging Face model to ``contexts``, ``num_return_sequences`` per context.

    Decoding defaults to :data:`GREEDY_DEFAULTS` (plus ``encoder_no_repeat_ngram_size=3`` for
    seq2seq models, so 3-grams of the context are blocked as in the Sem-Ent evaluation;
    a decoder-only model's ``no_repeat_ngram_size`` already sees the prompt); with
    ``do_sample=True`` it defaults to no n-gram blocking at all (:func:`decoding_defaults`).
    Any keyword overrides them (``top_p=0.9``; ``num_beams=5``; ``max_new_tokens=...``).

    Returns a flat list of ``len(contexts) * num_return_sequences`` strings grouped by
    context (context 0's responses first), special tokens removed, whitespace stripped.
    The context is left-truncated to leave ``max_new_tokens`` positions in the window.
    """
    turns = check_contexts(contexts)
    if num_return_sequences < 1:
        raise ValueError(f"num_return_sequences must be >= 1, got {num_return_sequences}")
    if not turns:
        return []
    fmt = format or DialogueLayout()
    seq2seq = is_seq2seq(model)
    kwargs = decoding_defaults(generation_kwargs, seq2seq)
    max_new = int(kwargs.pop("max_new_tokens", max_new_tokens))
    if kwargs.get("synced_gpus"):
        raise ValueError(
            "synced_gpus=True is not supported: lightning-div generates each process's own batches "
            "independently (a process may have one batch more than another), and synced steps would wait "
            "forever for a process that has finished"
        )
    # Explicitly off: Hugging Face turns it on by itself for an FSDP-managed model on several processes,
    # which would make each decoding step a collective. Each rank has the full parameters here (the callbacks
    # generate inside lightning_div.model.sharding.full_parameters), and no forward communicates, so a rank can
    # run a different number of batches and steps than the others without anyone waiting: no hang.
    kwargs["synced_gpus"] = False
    pad_id = pad_id_of(tokenizer)
    kwargs.setdefault("pad_token_id", pad_id)
    budget = fmt.context_budget(model, reserve=max_new)
    encoded = fmt.encode_contexts(turns, tokenizer, seq2seq, budget)
    eos_ids = _eos_ids(model, tokenizer)

    results: list[list[str]] = [[] for _ in encoded]
    device = model_device(model)
    batches = length_batches([len(e) for e in encoded], batch_size)
    with evaluation_mode(model, seed):
        for batch in tqdm(batches, desc="generating", unit="batch", disable=bar_disabled(show_progress)):
            ids, mask = pad_batch([encoded[i] for i in batch], pad_id, "right" if seq2seq else "left", device)
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=max_new,
                num_return_sequences=num_return_sequences,
                **kwargs,
            )
            # decoder-only output repeats the prompt; seq2seq output starts with the decoder start token
            new = out[:, 1:] if seq2seq else out[:, ids.shape[1] :]
            texts = _decode(tokenizer, new.cpu(), eos_ids)
            for k, i in enumerate(batch):
                results[i] = texts[k * num_return_sequences : (k + 1) * num_return_sequences]
    return [text for group in results for text in group]


def generate_sets(adapter: Any, contexts: Sequence[Context], n: int, **generation_kwargs: Any) -> list[list[str]]:
    """``n`` responses per context (for NLI diversity), from any :class:`DialogueModelAdapter`.

    Defaults to nucleus sampling without any n-gram blocking (:data:`SAMPLING_DEFAULTS`, as in
    Stasaski & Hearst); keywords override it, e.g. ``do_sample=False, num_beams=n`` for beam
    sets, or ``no_repeat_ngram_size=3`` to block repeated 3-grams.

    Args:
        adapter: reaches the model.
        contexts: strings or lists of turns (oldest first).
        n: responses per context, >= 1.
        **generation_kwargs: decoding options; they override the nucleus-sampling defaults.

    Returns:
        One list of ``n`` responses per context.

    Raises:
        ValueError: ``n`` < 1, or an adapter that returns the wrong number of responses.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    kwargs = {**SAMPLING_DEFAULTS, **generation_kwargs}
    flat = adapter.generate(contexts, num_return_sequences=n, **kwargs)
    if len(flat) != len(contexts) * n:
        raise ValueError(
            f"{type(adapter).__name__}.generate returned {len(flat)} responses for "
            f"{len(contexts)} contexts x {n}; expected {len(contexts) * n}"
        )
    return [list(flat[i * n : (i + 1) * n]) for i in range(len(contexts))]


def generate_responses(
    adapter: Any,
    contexts: Sequence[Sequence[str]],
    generation_kwargs: dict[str, Any] | None = None,
    batch_size: int = 32,
    show_progress: bool = False,
    desc: str = "generating",
) -> list[str]:
    """One response per context, batches sharded across the processes and gathered back in order.

    Every process must call it with the same contexts; every process gets every response.

    Args:
        adapter: the model (a :class:`~lightning_div.model.adapters.DialogueModelAdapter`).
        contexts: the contexts, each a list of turns.
        generation_kwargs: passed to ``adapter.generate`` (greedy with 3-gram blocking by default).
        batch_size: contexts per batch (batches hold contexts of similar length).
        show_progress: a progress bar on the first process.
        desc: the bar's label.

    Returns:
        The responses, in the order of ``contexts``.
    """
    kwargs = dict(generation_kwargs or {})

    def gen(batch: list[list[str]]) -> list[str]:
        return list(adapter.generate(batch, **kwargs))

    turns = [list(c) for c in contexts]
    return distributed_map(
        gen,
        turns,
        batch_size,
        sort_key=[sum(map(len, c)) for c in turns],
        show_progress=show_progress,
        desc=f"{desc} ({len(turns)} contexts)",
    )
