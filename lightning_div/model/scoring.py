"""How likely a given response is under a dialogue model: exact, batched token log-probabilities.

RUQ (Khayrallah & Sedoc, 2021) scores a response y to a context x by its length-normalised
log-likelihood  score(x, y) = (1/|y|) * sum_t log p(y_t | x, y_<t),  the EOS token included.
For encoder-decoder models y is the response tokens + EOS: a BOS the tokenizer puts in front
of a target (BART's ``<s>``) is fed to the decoder, as in training, but never scored.

The pairs are laid out by :meth:`DialogueLayout.encode_pair` (the same ids training uses),
sorted by length into batches, and each batch is one forward pass. Only the rows that
predict a response token are normalised (DialoGPT's vocabulary has 50k entries; a full
``[batch, time, vocab]`` log-softmax would mostly be thrown away), and for decoder-only
models with a plain output layer only those rows are projected onto the vocabulary at all.

This module holds the public entry points; a batch goes through the model in
:mod:`lightning_div.model.pairwise` (pair by pair) or :mod:`lightning_div.model.shared_context`
(several responses to one context, the context run once).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from lightning_div._internal.bars import bar_disabled
from lightning_div._internal.distributed import length_batches
from lightning_div.model.formatting import Context, DialogueLayout, is_seq2seq, target_prefix
from lightning_div.model.generation import check_contexts, evaluation_mode, model_device, pad_id_of
from lightning_div.model.pairwise import (
    _CausalScorer,
    _decoder_start,
    _forward_params,
    _padding_side,
    _seq2seq_batch,
    _unscored,
)
from lightning_div.model.shared_context import _shared_context_logprobs, _shares_contexts


def check_pairs(contexts: Sequence[Context], responses: Sequence[str]) -> list[list[str]]:
    """Contexts as lists of turns, after checking both lists line up and hold strings.

    Args:
        contexts: strings or lists of turns.
        responses: one response per context.

    Returns:
        The contexts as lists of turns.

    Raises:
        TypeError: a context or response of the wrong type (named by index), or one string
            instead of a list.
        ValueError: the two lists have different lengths.
    """
    if isinstance(responses, (str, bytes)):
        raise TypeError("responses must be a list of strings, got one string")
    if len(contexts) != len(responses):
        raise ValueError(
            f"contexts has {len(contexts)} entries but responses has {len(responses)}; they must pair up one to one"
        )
    for i, r in enumerate(responses):
        if not isinstance(r, str):
            raise TypeError(f"responses[{i}] is {type(r).__name__}, expected str")
    return check_contexts(contexts)


def token_logprobs_batched(
    model: Any,
    tokenizer: Any,
    contexts: Sequence[Context],
    responses: Sequence[str],
    *,
    format: DialogueLayout | None = None,
    batch_size: int = 16,
    show_progress: bool = True,
    padding_side: str | None = None,
) -> list[torch.Tensor]:
    """log p(y_t | x, y_<t) of every response token (EOS included), one 1-D CPU tensor per pair.

    For seq2seq models the tokens are the response's and EOS: a BOS the tokenizer puts
    before a target (BART's ``<s>``) is fed to the decoder but has no entry.

    ``padding_side``: for decoder-only models ``"left"`` (default when the model's forward
    takes ``position_ids``; position ids are then built from the mask) or ``"right"``; both
    give the unpadded values. Seq2seq models are always right-padded. An empty response is
    scored as its EOS alone; contexts over the model window are left-truncated.

    Args:
        model: a Hugging Face causal or seq2seq LM.
        tokenizer: its tokenizer (never modified).
        contexts: strings or lists of turns (oldest first).
        responses: one response per context.
        format: the token layout (default ``DialogueLayout()``).
        batch_size: pairs per forward pass (pairs are sorted by length first).
        show_progress: a tqdm bar.
        padding_side: ``"left"``, ``"right"`` or None (the best for the model).

    Returns:
        One 1-D CPU tensor per pair.

    Raises:
        TypeError: a context or response of the wrong type (named by index).
        ValueError: different lengths, or ``padding_side="left"`` for a seq2seq model.
    """
    turns = check_pairs(contexts, responses)
    seq2seq = is_seq2seq(model)
    params = _forward_params(model)
    side = _padding_side(model, seq2seq, params, padding_side)
    if not turns:
        return []
    pairs = list((format or DialogueLayout()).encode_pairs(turns, responses, tokenizer, model))
    pad_id = pad_id_of(tokenizer)
    start = _decoder_start(model) if seq2seq else 0
    prefix = target_prefix(tokenizer) if seq2seq else []
    causal = None if seq2seq else _CausalScorer(model, side, params)
    device = model_device(model)
    out: list[torch.Tensor | None] = [None] * len(pairs)
    batches = length_batches([len(c) + len(r) for c, r in pairs], batch_size)
    with evaluation_mode(model):
        for batch in tqdm(batches, desc="scoring", unit="batch", disable=bar_disabled(show_progress)):
            chunk = [pairs[i] for i in batch]
            if causal is None:
                flat = _seq2seq_batch(model, chunk, pad_id, start, prefix, device)
            else:
                flat = causal(chunk, pad_id, device)
            pieces = flat.cpu().split([len(r) - _unscored(r, prefix) for _, r in chunk])
            for i, piece in zip(batch, pieces):
                out[i] = piece
    # clone outside inference mode: callers get ordinary tensors they may use anywhere
    return [t.clone() for t in out]  # type: ignore[union-attr]


def candidate_logprobs_batched(
    model: Any,
    tokenizer: Any,
    contexts: Sequence[Context],
    candidates: Sequence[Sequence[str]],
    *,
    format: DialogueLayout | None = None,
    batch_size: int = 16,
    show_progress: bool = True,
    padding_side: str | None = None,
) -> list[list[torch.Tensor]]:
    """:func:`token_logprobs_batched` of several responses to each context, the context encoded once.

    ``candidates[i]`` are the responses to score after ``contexts[i]`` (RUQ: the references
    and every IDK string). The values equal :func:`token_logprobs_batched` of the flattened
    pairs (to float rounding, 1e-5): a causal model runs each context once and its cached
    keys/values (``cache`` / ``past_key_values``, expanded over the candidates) serve every candidate;
    a seq2seq model runs its encoder once per context and reuses its output. Pairs are
    grouped by their context *ids*, so a context cut differently to fit a long candidate into
    the window gets its own group. Contexts and candidates are batched apart, each by length
    (see :mod:`lightning_div.model.shared_context`): ``batch_size`` bounds the rows of every
    forward pass, contexts or candidates.

    Decoder-only models whose forward takes no ``position_ids``, models that return no
    cache, and ``padding_side="right"`` are scored pair by pair as
    :func:`token_logprobs_batched` does (the same values, without the saving).

    Args:
        model: a Hugging Face causal or seq2seq LM.
        tokenizer: its tokenizer (never modified).
        contexts: strings or lists of turns (oldest first).
        candidates: one list of responses per context (may be empty).
        format: the token layout (default ``DialogueLayout()``).
        batch_size: the most contexts, or candidates, per forward pass.
        show_progress: a tqdm bar.
        padding_side: as for :func:`token_logprobs_batched`.

    Returns:
        For each context, one 1-D CPU tensor per candidate.

    Raises:
        TypeError: a context or candidate of the wrong type (named by index), or a string
            where a list of candidates belongs.
        ValueError: different lengths, an invalid ``padding_side``, or ``batch_size`` < 1.
    """
    flat_ctx, flat_resp, sizes = _flatten_candidates(contexts, candidates)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    turns = check_pairs(flat_ctx, flat_resp)
    seq2seq = is_seq2seq(model)
    params = _forward_params(model)
    side = _padding_side(model, seq2seq, params, padding_side)
    if not turns or not _shares_contexts(model, seq2seq, params, side):
        flat = token_logprobs_batched(
            model,
            tokenizer,
            flat_ctx,
            flat_resp,
            format=format,
            batch_size=batch_size,
            show_progress=show_progress,
            padding_side=side,
        )
        return _unflatten(flat, sizes)
    pairs = list((format or DialogueLayout()).encode_pairs(turns, flat_resp, tokenizer, model))
    flat = _shared_context_logprobs(
        model, tokenizer, pairs, seq2seq=seq2seq, params=params, batch_size=batch_size, show_progress=show_progress
    )
    return _unflatten(flat, sizes)


def _flatten_candidates(
    contexts: Sequence[Context], candidates: Sequence[Sequence[str]]
) -> tuple[list[Context], list[str], list[int]]:
    if isinstance(candidates, (str, bytes)):
        raise TypeError("candidates must be a list of lists of strings (one list per context), got one string")
    if len(contexts) != len(candidates):
        raise ValueError(
            f"contexts has {len(contexts)} entries but candidates has {len(candidates)}; they must pair up one to one"
        )
    flat_ctx: list[Context] = []
    flat_resp: list[str] = []
    sizes = []
    for i, (c, rs) in enumerate(zip(contexts, candidates)):
        if isinstance(rs, (str, bytes)) or not isinstance(rs, Sequence):
            raise TypeError(f"candidates[{i}] is {type(rs).__name__}, expected a list of response strings")
        for j, r in enumerate(rs):
            if not isinstance(r, str):
                raise TypeError(f"candidates[{i}][{j}] is {type(r).__name__}, expected str")
        flat_ctx.extend([c] * len(rs))
        flat_resp.extend(rs)
        sizes.append(len(rs))
    return flat_ctx, flat_resp, sizes


def _unflatten(flat: Sequence[Any], sizes: Sequence[int]) -> list[list[Any]]:
    out, at = [], 0
    for n in sizes:
        out.append(list(flat[at : at + n]))
        at += n
    return out


def candidate_logprobs(
    adapter: Any, contexts: Sequence[Context], candidates: Sequence[Sequence[str]]
) -> list[list[torch.Tensor]]:
    """Token log-probs of several responses per context through any adapter, contexts shared when it can.

    Adapters with a ``candidate_logprobs`` method (:class:`~lightning_div.model.adapters.HuggingFaceAdapter`)
    encode each context once; any other
    :class:`~lightning_div.model.adapters.DialogueModelAdapter` is asked for the flattened pairs
    with ``token_logprobs``. Either way the result is checked as :func:`response_scores` checks it.

    Args:
        adapter: reaches the model.
        contexts: strings or lists of turns (oldest first).
        candidates: one list of responses per context.

    Returns:
        For each context, one 1-D float64 CPU tensor per candidate.

    Raises:
        TypeError: not an adapter, or an input of the wrong type (named by index).
        ValueError: different lengths, or an adapter that returns an empty or NaN tensor.
    """
    _check_adapter(adapter)
    flat_ctx, flat_resp, sizes = _flatten_candidates(contexts, candidates)
    check_pairs(flat_ctx, flat_resp)
    who = type(adapter).__name__
    if not flat_resp:  # nothing to score: the model is not run
        return [[] for _ in sizes]
    if callable(getattr(adapter, "candidate_logprobs", None)):
        nested = adapter.candidate_logprobs(contexts, candidates)
        if len(nested) != len(sizes) or any(len(n) != k for n, k in zip(nested, sizes)):
            raise ValueError(
                f"{who}.candidate_logprobs returned {[len(n) for n in nested]} tensors per context "
                f"for {sizes} candidates"
            )
        flat = _checked([t for n in nested for t in n], len(flat_resp), who)
    else:
        flat = _checked(adapter.token_logprobs(flat_ctx, flat_resp), len(flat_resp), who)
    return _unflatten(flat, sizes)


def candidate_scores(
    adapter: Any, contexts: Sequence[Context], candidates: Sequence[Sequence[str]]
) -> list[list[float]]:
    """:func:`response_scores` of several responses per context, each context encoded once.

    Equal (to 1e-5) to ``response_scores`` of the flattened pairs; see :func:`candidate_logprobs`.

    Args:
        adapter: reaches the model.
        contexts: strings or lists of turns (oldest first).
        candidates: one list of responses per context (RUQ: the references and IDK strings).

    Returns:
        For each context, one mean log-probability per candidate.

    Raises:
        TypeError: as :func:`candidate_logprobs`.
        ValueError: as :func:`candidate_logprobs`.
    """
    return [scores_from_logprobs(ts) for ts in candidate_logprobs(adapter, contexts, candidates)]


def _check_adapter(adapter: Any) -> None:
    if not callable(getattr(adapter, "token_logprobs", None)):
        raise TypeError(
            f"expected a DialogueModelAdapter (with .token_logprobs), got {type(adapter).__name__}; "
            "wrap a Hugging Face model with lightning_div.model.adapters.HuggingFaceAdapter, "
            "or a LightningModule with resolve_adapter(pl_module)"
        )


def _checked(logprobs: Sequence[torch.Tensor], n: int, who: str) -> list[torch.Tensor]:
    who = f"{who}.token_logprobs" if who else "token_logprobs"  # the adapter's class when known
    if len(logprobs) != n:
        raise ValueError(f"{who} returned {len(logprobs)} tensors for {n} pairs")
    out = []
    for i, t in enumerate(logprobs):
        t = torch.as_tensor(t).detach().reshape(-1).double().cpu()
        if t.numel() == 0:
            raise ValueError(f"{who} gave pair {i} no tokens (the EOS token must always be scored)")
        if torch.isnan(t).any():
            raise ValueError(f"{who} gave pair {i} a NaN log-probability")
        out.append(t)
    return out


def response_scores(adapter: Any, contexts: Sequence[Context], responses: Sequence[str]) -> list[float]:
    """RUQ score of each (context, response): mean log-probability of its tokens, EOS included.

    ``adapter`` is any :class:`lightning_div.model.adapters.DialogueModelAdapter`. An empty
    response is scored by its EOS token alone.

    Args:
        adapter: reaches the model (e.g. ``resolve_adapter(pl_module)``).
        contexts: strings or lists of turns (oldest first).
        responses: one response per context.

    Returns:
        One score per pair (natural log, per token).

    Raises:
        TypeError: ``adapter`` is not an adapter (e.g. a LightningModule), or a context or
            response of the wrong type (named by index).
        ValueError: different lengths, or an adapter that returns an empty or NaN tensor.
    """
    _check_adapter(adapter)
    check_pairs(contexts, responses)
    logprobs = _checked(adapter.token_logprobs(contexts, responses), len(responses), type(adapter).__name__)
    return scores_from_logprobs(logprobs)


def scores_from_logprobs(logprobs: Sequence[torch.Tensor]) -> list[float]:
    """Σ_t log p / #tokens of each response, from token log-probs already computed.

    Args:
        logprobs: one 1-D tensor of token log-probabilities per response.

    Returns:
        One mean log-probability per response.

    Raises:
        ValueError: an empty or NaN tensor.

    Examples:
        >>> import torch
        >>> scores_from_logprobs([torch.tensor([-1.0, -3.0]), torch.tensor([-0.5])])
        [-2.0, -0.5]
    """
    return [float(t.sum() / t.numel()) for t in _checked(logprobs, len(logprobs), "")]


def position_profile(
    adapter: Any, contexts: Sequence[Context], responses: Sequence[str], max_positions: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(mean log-prob at each token position, number of responses reaching that position).

    Position 0 is a response's first token; a response contributes to the positions it has
    (its EOS included), so every reported position has a count >= 1 and a finite-or-``-inf``
    mean, never a NaN. ``max_positions`` keeps only the first positions. For the RUQ plots.

    Args:
        adapter: reaches the model.
        contexts: strings or lists of turns (oldest first).
        responses: one response per context.
        max_positions: keep only this many first positions (None = all).

    Returns:
        ``(mean_logprob, count)``: float64 and int64 arrays, one value per position.

    Raises:
        TypeError: as :func:`response_scores`.
        ValueError: as :func:`response_scores`, or ``max_positions`` < 1.
    """
    _check_adapter(adapter)
    check_pairs(contexts, responses)
    logprobs = _checked(adapter.token_logprobs(contexts, responses), len(responses), type(adapter).__name__)
    return profile_from_logprobs(logprobs, max_positions)


def profile_from_logprobs(
    logprobs: Sequence[torch.Tensor], max_positions: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`position_profile` from token log-probs already computed (e.g. by the RUQ scoring pass).

    Args:
        logprobs: one 1-D tensor of token log-probabilities per response.
        max_positions: keep only this many first positions (None = all).

    Returns:
        ``(mean_logprob, count)`` per position.

    Raises:
        ValueError: ``max_positions`` < 1.

    Examples:
        >>> import torch
        >>> means, counts = profile_from_logprobs([torch.tensor([-1.0, -3.0]), torch.tensor([-2.0])])
        >>> means.tolist(), counts.tolist()
        ([-1.5, -3.0], [2, 1])
    """
    if max_positions is not None and max_positions < 1:
        raise ValueError(f"max_positions must be >= 1 or None, got {max_positions}")
    logprobs = [torch.as_tensor(t).detach().reshape(-1).double().cpu() for t in logprobs]
    if not logprobs:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    width = max(t.numel() for t in logprobs)
    if max_positions is not None:
        width = min(width, max_positions)
    padded = torch.nn.utils.rnn.pad_sequence([t[:width] for t in logprobs], batch_first=True)
    present = torch.nn.utils.rnn.pad_sequence(
        [torch.ones(min(t.numel(), width)) for t in logprobs], batch_first=True
    ).bool()
    counts = present.sum(0)
    sums = padded.masked_fill(~present, 0.0).sum(0)
    return (sums / counts).numpy(), counts.numpy().astype(np.int64)


__all__ = [
    "response_scores",
    "position_profile",
    "profile_from_logprobs",
    "scores_from_logprobs",
    "token_logprobs_batched",
    "check_pairs",
    "candidate_logprobs_batched",
    "candidate_logprobs",
    "candidate_scores",
]
