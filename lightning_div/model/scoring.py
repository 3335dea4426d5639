"""How likely a given response is under a dialogue model: exact, batched token log-probabilities.

RUQ (Khayrallah & Sedoc, 2021) scores a response y to a context x by its length-normalised
log-likelihood  score(x, y) = (1/|y|) * sum_t log p(y_t | x, y_<t),  the EOS token included.
For encoder-decoder models y is the response tokens + EOS: a BOS the tokenizer puts in front
of a target (BART's ``<s>``) is fed to the decoder, as in training, but never scored.

The pairs are laid out by :meth:`DialogueFormat.encode_pair` (the same ids training uses),
sorted by length into batches, and each batch is one forward pass. Only the rows that
predict a response token are normalised (DialoGPT's vocabulary has 50k entries; a full
``[batch, time, vocab]`` log-softmax would mostly be thrown away), and for decoder-only
models with a plain output layer only those rows are projected onto the vocabulary at all.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers.modeling_outputs import BaseModelOutput

from lightning_div._internal.distributed import length_batches
from lightning_div.model.formatting import Context, DialogueFormat, is_seq2seq, target_prefix
from lightning_div.model.generation import check_contexts, evaluation_mode, model_device, pad_batch, pad_id_of


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


def _forward_params(model: Any) -> set[str]:
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return set()


def _decoder_start(model: Any) -> int:
    for config in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        start = getattr(config, "decoder_start_token_id", None)
        if start is not None:
            return int(start)
    raise ValueError(f"{type(model).__name__} has no decoder_start_token_id in its config or generation_config")


def _target_logprobs(rows: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) for logits rows [N, V]: logit - logsumexp (no [N, V] log-softmax written)."""
    rows = rows.float()
    return rows.gather(1, targets.unsqueeze(1)).squeeze(1) - rows.logsumexp(-1)


class _CausalModel:
    """A decoder-only model, its padding side, and its output layer where logits can be kept to a few positions."""

    def __init__(self, model: Any, side: str, params: set[str]) -> None:
        self.model, self.side = model, side
        self.keep = "logits_to_keep" in params
        head = model.get_output_embeddings() if callable(getattr(model, "get_output_embeddings", None)) else None
        self.head = head if self.keep else None


class _CausalScorer(_CausalModel):
    """One forward per batch; the vocabulary projection only where a response token is predicted.

    Fast path (models with ``logits_to_keep`` and a plain output layer, e.g. GPT-2/DialoGPT):
    the model projects just the last position, and the output layer is applied to the
    final hidden states of the target positions only. That it is a plain projection is
    checked on every batch against the model's own last-position logits; a model that
    post-processes its logits (bias, soft-capping, scaling) fails the check and is scored
    from its logits, restricted to the last max|y| positions when left-padded.
    """

    def __call__(self, pairs: list[tuple[list[int], list[int]]], pad_id: int, device: torch.device) -> torch.Tensor:
        # The input is context + response without its last token; the last len(response)
        # positions of each row predict the response tokens (EOS included).
        inputs = [c + r[:-1] for c, r in pairs]
        ids, mask = pad_batch(inputs, pad_id, self.side, device)
        kwargs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
        if self.side == "left":
            kwargs["position_ids"] = (mask.cumsum(-1) - 1).clamp(min=0)
        width = ids.shape[1]
        targets = torch.zeros((len(pairs), width), dtype=torch.long)
        tmask = torch.zeros((len(pairs), width), dtype=torch.bool)
        for row, ((_, resp), seq) in enumerate(zip(pairs, inputs)):
            end = width if self.side == "left" else len(seq)
            targets[row, end - len(resp) : end] = torch.as_tensor(resp)
            tmask[row, end - len(resp) : end] = True
        targets, tmask = targets.to(device), tmask.to(device)

        if self.head is not None:
            out = self.model(**kwargs, logits_to_keep=1, output_hidden_states=True)
            hidden = out.hidden_states[-1] if out.hidden_states else None
            if hidden is not None and hidden.shape[:2] == ids.shape:
                last = self.head(hidden[:, -1]).float()
                if torch.allclose(last, out.logits[:, -1].float(), rtol=1e-3, atol=1e-3):
                    return _target_logprobs(self.head(hidden[tmask]), targets[tmask])
            self.head = None  # not a plain projection: score from logits for the rest of the call
        if self.side == "left" and self.keep:
            # Left padding right-aligns every response, so the last max|y| columns hold all targets.
            keep = max(len(r) for _, r in pairs)
            kwargs["logits_to_keep"] = keep
            targets, tmask = targets[:, -keep:], tmask[:, -keep:]
        logits = self.model(**kwargs).logits
        return _target_logprobs(logits[tmask], targets[tmask])


def _unscored(response: list[int], prefix: list[int]) -> int:
    """How many leading target ids are the tokenizer's prefix (never scored); at least EOS stays scored."""
    n = len(prefix)
    return n if n and response[:n] == prefix and len(response) > n else 0


def _seq2seq_batch(
    model: Any,
    pairs: list[tuple[list[int], list[int]]],
    pad_id: int,
    start: int,
    prefix: list[int],
    device: torch.device,
) -> torch.Tensor:
    # Right padding on both sides: BART-style learned positions cannot be shifted.
    ids, mask = pad_batch([c for c, _ in pairs], pad_id, "right", device)
    dec, dmask = pad_batch([[start] + r[:-1] for _, r in pairs], pad_id, "right", device)
    targets, _ = pad_batch([r for _, r in pairs], pad_id, "right", device)
    logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec, decoder_attention_mask=dmask).logits
    scored = dmask.bool()
    # The decoder reads the target's BOS (as in training); its prediction is not part of the score.
    for row, (_, r) in enumerate(pairs):
        scored[row, : _unscored(r, prefix)] = False
    return _target_logprobs(logits[scored], targets[scored])


def token_logprobs_batched(
    model: Any,
    tokenizer: Any,
    contexts: Sequence[Context],
    responses: Sequence[str],
    *,
    format: DialogueFormat | None = None,
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
        format: the token layout (default ``DialogueFormat()``).
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
    if not turns:
        return []
    fmt = format or DialogueFormat()
    seq2seq = is_seq2seq(model)
    params = _forward_params(model)
    if padding_side is None:
        padding_side = "left" if not seq2seq and "position_ids" in params else "right"
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left', 'right' or None, got {padding_side!r}")
    if seq2seq and padding_side == "left":
        raise ValueError(
            "seq2seq models are scored with right padding only (their learned positions "
            "cannot be shifted); use padding_side='right' or None"
        )
    if padding_side == "left" and "position_ids" not in params:
        raise ValueError(
            f"{type(model).__name__}.forward takes no position_ids, so left padding would shift "
            "its positions; use padding_side='right' or None"
        )
    pairs = list(fmt.encode_pairs(turns, responses, tokenizer, model))
    pad_id = pad_id_of(tokenizer)
    start = _decoder_start(model) if seq2seq else 0
    prefix = target_prefix(tokenizer) if seq2seq else []
    causal = None if seq2seq else _CausalScorer(model, padding_side, params)
    device = model_device(model)
    out: list[torch.Tensor | None] = [None] * len(pairs)
    batches = length_batches([len(c) + len(r) for c, r in pairs], batch_size)
    with evaluation_mode(model):
        for batch in tqdm(batches, desc="scoring", unit="batch", disable=not show_progress):
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


def _cache_argument(params: set[str]) -> str | None:
    """The forward argument that takes a key/value cache: ``cache`` (transformers >= 5.24), else ``past_key_values``."""
    # transformers 5.24 renamed past_key_values to cache (the old name is deprecated, removed in 5.40);
    # both are read so that a model written against either release shares its contexts.
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    return None


def _returned_cache(out: Any) -> Any:
    """The key/value cache a forward returned, under either name (see :func:`_cache_argument`)."""
    for name in ("cache", "past_key_values"):
        found = getattr(out, name, None)
        if found is not None:
            return found
    raise ValueError(f"{type(out).__name__} returned no key/value cache (use_cache=True): cannot share contexts")


def _expand_cache(cache: Any, index: torch.Tensor) -> Any:
    """The context cache with row ``index[i]`` as row i (a context repeated once per candidate)."""
    if callable(getattr(cache, "batch_select_indices", None)):  # transformers' Cache (DynamicCache, ...)
        cache.batch_select_indices(index)
        return cache
    return tuple(tuple(t.index_select(0, index) for t in layer) for layer in cache)  # legacy tuples


class _SharedCausalScorer(_CausalModel):
    """Each distinct context through the model once; its cached keys/values serve all its candidates.

    Pass 1 runs the left-padded contexts with ``use_cache=True``: the last column holds every
    context's last token, which predicts each candidate's first token. Pass 2 runs the
    candidates without their last token, right-padded, after the context cache expanded to one
    row per candidate, with the attention mask [context mask | candidate mask] and position ids
    that continue each context's own; column t of a candidate predicts its token t + 1. Left
    padding of the contexts with explicit positions is what makes one shared cache possible.

    With a plain output layer (checked on pass 1 as :class:`_CausalScorer` checks it), the
    final hidden states of all target positions of the batch, in pair order, go through the
    output layer in one product, as :class:`_CausalScorer` projects them: the same rows in
    the same order, so a score does not depend on how the work is split into passes (a
    product over a handful of rows can round differently with the number of CPU threads,
    which would break the 1-vs-N-process equality of RUQ).
    """

    def __init__(self, model: Any, side: str, params: set[str]) -> None:
        super().__init__(model, side, params)
        self.cache_arg = _cache_argument(params) or "past_key_values"

    def __call__(
        self,
        groups: list[tuple[list[int], list[list[int]]]],
        pad_id: int,
        device: torch.device,
    ) -> list[torch.Tensor]:
        ctx_ids, ctx_mask = pad_batch([c for c, _ in groups], pad_id, "left", device)
        cands = [r for _, rs in groups for r in rs]
        index = torch.tensor([g for g, (_, rs) in enumerate(groups) for _ in rs], device=device)
        kwargs: dict[str, Any] = {
            "input_ids": ctx_ids,
            "attention_mask": ctx_mask,
            "use_cache": True,
            "position_ids": (ctx_mask.cumsum(-1) - 1).clamp(min=0),
        }
        if self.keep:
            kwargs["logits_to_keep"] = 1
        if self.head is not None:
            kwargs["output_hidden_states"] = True
        out = self.model(**kwargs)
        first_targets = torch.tensor([r[0] for r in cands], device=device)
        first_hidden = None
        if self.head is not None:
            hidden = out.hidden_states[-1] if out.hidden_states else None
            if (
                hidden is not None
                and hidden.shape[:2] == ctx_ids.shape
                and torch.allclose(self.head(hidden[:, -1]).float(), out.logits[:, -1].float(), rtol=1e-3, atol=1e-3)
            ):
                first_hidden = hidden[:, -1].index_select(0, index)
            else:
                self.head = None  # not a plain projection: score from logits for the rest of the call
        lengths = [len(r) for r in cands]
        rest_rows: torch.Tensor | None = None
        rest_targets = first_targets.new_zeros(0)
        if max(lengths) > 1:  # otherwise every candidate is its EOS alone, predicted by pass 1
            ids, mask = pad_batch([r[:-1] or [pad_id] for r in cands], pad_id, "right", device)
            for row, n in enumerate(lengths):
                mask[row, n - 1 :] = 0  # a one-token candidate's stand-in column is masked too
            # Positions continue each context's own; padding columns get 0 (they may lie past the window).
            pos = (
                ctx_mask.sum(-1).index_select(0, index).unsqueeze(1) + torch.arange(ids.shape[1], device=device)
            ) * mask
            targets, _ = pad_batch([r[1:] or [pad_id] for r in cands], pad_id, "right", device)
            tmask = mask.bool()
            step: dict[str, Any] = {
                "input_ids": ids,
                "position_ids": pos,
                "use_cache": False,
                "attention_mask": torch.cat([ctx_mask.index_select(0, index), mask], dim=1),
                self.cache_arg: _expand_cache(_returned_cache(out), index),
            }
            if first_hidden is not None:
                rest_rows = self.model(**step, logits_to_keep=1, output_hidden_states=True).hidden_states[-1][tmask]
            else:
                rest_rows = self.model(**step).logits[tmask]
            rest_targets = targets[tmask]
        # Row order of the pairs: candidate by candidate, its first token (pass 1) then the rest (pass 2).
        order, at = [], len(cands)
        for row, n in enumerate(lengths):
            order.append(row)
            order.extend(range(at, at + n - 1))
            at += n - 1
        perm = torch.tensor(order, device=device)
        all_targets = torch.cat([first_targets, rest_targets]).index_select(0, perm)
        if first_hidden is not None:
            rows = first_hidden if rest_rows is None else torch.cat([first_hidden, rest_rows])
            flat = _target_logprobs(self.head(rows.index_select(0, perm)), all_targets)  # type: ignore[misc]
        else:
            first = out.logits[:, -1].index_select(0, index)
            rows = first if rest_rows is None else torch.cat([first.to(rest_rows.dtype), rest_rows])
            flat = _target_logprobs(rows.index_select(0, perm), all_targets)
        return list(flat.split(lengths))


def _seq2seq_shared(
    model: Any,
    groups: list[tuple[list[int], list[list[int]]]],
    pad_id: int,
    start: int,
    prefix: list[int],
    device: torch.device,
) -> list[torch.Tensor]:
    """The encoder once per distinct context, its output repeated for each candidate's decoder pass."""
    ids, mask = pad_batch([c for c, _ in groups], pad_id, "right", device)
    hidden = model.get_encoder()(input_ids=ids, attention_mask=mask, return_dict=True).last_hidden_state
    owner = torch.tensor([g for g, (_, rs) in enumerate(groups) for _ in rs], device=device)
    cands = [r for _, rs in groups for r in rs]
    encoded = BaseModelOutput(last_hidden_state=hidden.index_select(0, owner))
    dec, dmask = pad_batch([[start] + r[:-1] for r in cands], pad_id, "right", device)
    targets, _ = pad_batch(cands, pad_id, "right", device)
    logits = model(
        encoder_outputs=encoded,
        attention_mask=mask.index_select(0, owner),
        decoder_input_ids=dec,
        decoder_attention_mask=dmask,
    ).logits
    scored = dmask.bool()
    for row, r in enumerate(cands):
        scored[row, : _unscored(r, prefix)] = False
    flat = _target_logprobs(logits[scored], targets[scored])
    return list(flat.split([len(r) - _unscored(r, prefix) for r in cands]))


def _group_batches(groups: list[tuple[list[int], list[list[int]]]], batch_size: int) -> list[list[int]]:
    """Groups packed into batches of at most ``batch_size`` candidates (one larger group alone), longest first."""
    order = sorted(range(len(groups)), key=lambda g: (-len(groups[g][0]), -max(map(len, groups[g][1])), g))
    batches: list[list[int]] = []
    size = 0
    for g in order:
        k = len(groups[g][1])
        if batches and size + k <= batch_size:
            batches[-1].append(g)
            size += k
        else:
            batches.append([g])
            size = k
    return batches


def candidate_logprobs_batched(
    model: Any,
    tokenizer: Any,
    contexts: Sequence[Context],
    candidates: Sequence[Sequence[str]],
    *,
    format: DialogueFormat | None = None,
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
    the window gets its own group. ``batch_size`` counts candidates per forward pass (a
    context with more candidates gets a pass of its own).

    Decoder-only models whose forward takes no ``position_ids``, models that return no
    cache, and ``padding_side="right"`` are scored pair by pair as
    :func:`token_logprobs_batched` does (the same values, without the saving).

    Args:
        model: a Hugging Face causal or seq2seq LM.
        tokenizer: its tokenizer (never modified).
        contexts: strings or lists of turns (oldest first).
        candidates: one list of responses per context (may be empty).
        format: the token layout (default ``DialogueFormat()``).
        batch_size: candidates per forward pass.
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
    seq2seq = is_seq2seq(model)
    params = _forward_params(model)
    shared = (
        (_cache_argument(params) is not None and "position_ids" in params and padding_side != "right")
        if not seq2seq
        else "encoder_outputs" in params and callable(getattr(model, "get_encoder", None))
    )
    if not shared or not flat_resp:
        flat = token_logprobs_batched(
            model,
            tokenizer,
            flat_ctx,
            flat_resp,
            format=format,
            batch_size=batch_size,
            show_progress=show_progress,
            padding_side=padding_side,
        )
        return _unflatten(flat, sizes)
    turns = check_pairs(flat_ctx, flat_resp)
    if padding_side not in (None, "left", "right"):
        raise ValueError(f"padding_side must be 'left', 'right' or None, got {padding_side!r}")
    if seq2seq and padding_side == "left":
        raise ValueError(
            "seq2seq models are scored with right padding only (their learned positions "
            "cannot be shifted); use padding_side='right' or None"
        )
    fmt = format or DialogueFormat()
    pairs = list(fmt.encode_pairs(turns, flat_resp, tokenizer, model))
    # Group by the context ids actually fed (a long candidate can shorten its context), keeping order.
    where: dict[tuple[int, ...], int] = {}
    groups: list[tuple[list[int], list[list[int]]]] = []
    members: list[list[int]] = []
    for i, (ctx, resp) in enumerate(pairs):
        g = where.setdefault(tuple(ctx), len(groups))
        if g == len(groups):
            groups.append((ctx, []))
            members.append([])
        groups[g][1].append(resp)
        members[g].append(i)
    # A group larger than a batch is cut into batch-sized groups of the same context.
    cut_groups, cut_members = [], []
    for (ctx, rs), ms in zip(groups, members):
        for s in range(0, len(rs), batch_size):
            cut_groups.append((ctx, rs[s : s + batch_size]))
            cut_members.append(ms[s : s + batch_size])
    pad_id = pad_id_of(tokenizer)
    start = _decoder_start(model) if seq2seq else 0
    prefix = target_prefix(tokenizer) if seq2seq else []
    causal = None if seq2seq else _SharedCausalScorer(model, "left", params)
    device = model_device(model)
    out: list[torch.Tensor | None] = [None] * len(pairs)
    with evaluation_mode(model):
        for batch in tqdm(
            _group_batches(cut_groups, batch_size),
            desc="scoring (shared contexts)",
            unit="batch",
            disable=not show_progress,
        ):
            chunk = [cut_groups[g] for g in batch]
            if causal is None:
                pieces = _seq2seq_shared(model, chunk, pad_id, start, prefix, device)
            else:
                pieces = causal(chunk, pad_id, device)
            for i, piece in zip((i for g in batch for i in cut_members[g]), pieces):
                out[i] = piece.cpu()
    return _unflatten([t.clone() for t in out], sizes)  # type: ignore[union-attr]


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
