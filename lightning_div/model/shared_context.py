"""Several responses to one context, the context through the model once.

RUQ scores each prompt's references and every "I don't know" string after the same context.
:func:`~lightning_div.model.scoring.candidate_logprobs_batched` groups the pairs by the context
ids actually fed and runs each batch of groups here:

* **decoder-only** (:class:`_SharedCausalScorer`): pass 1 runs the left-padded contexts with
  ``use_cache=True``; the last column predicts every candidate's first token. Pass 2 runs the
  candidates after their context's cached keys/values, with position ids that continue the
  context's own.
* **encoder-decoder** (:func:`_seq2seq_shared`): the encoder runs once per context, its output
  is repeated for each candidate's decoder pass.

The values equal pair-by-pair scoring (:mod:`lightning_div.model.pairwise`) to float rounding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers.modeling_outputs import BaseModelOutput

from lightning_div.model.formatting import target_prefix
from lightning_div.model.generation import evaluation_mode, model_device, pad_batch, pad_id_of
from lightning_div.model.pairwise import _CausalModel, _decoder_start, _target_logprobs, _unscored

Group = tuple[list[int], list[list[int]]]
"""One context's ids and the ids of the candidates scored after it."""


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


def _context_groups(
    pairs: Sequence[tuple[list[int], list[int]]], batch_size: int
) -> tuple[list[Group], list[list[int]]]:
    """The pairs grouped by their context ids (first-seen order), and each group's pair indices.

    Grouped by the ids actually fed: a long candidate can shorten its context, which then gets
    a group of its own. A group larger than ``batch_size`` is cut into batch-sized groups of the
    same context.
    """
    where: dict[tuple[int, ...], int] = {}
    groups: list[Group] = []
    members: list[list[int]] = []
    for i, (ctx, resp) in enumerate(pairs):
        g = where.setdefault(tuple(ctx), len(groups))
        if g == len(groups):
            groups.append((ctx, []))
            members.append([])
        groups[g][1].append(resp)
        members[g].append(i)
    cut_groups: list[Group] = []
    cut_members: list[list[int]] = []
    for (ctx, rs), ms in zip(groups, members):
        for s in range(0, len(rs), batch_size):
            cut_groups.append((ctx, rs[s : s + batch_size]))
            cut_members.append(ms[s : s + batch_size])
    return cut_groups, cut_members


def _group_batches(groups: list[Group], batch_size: int) -> list[list[int]]:
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


class _SharedCausalScorer(_CausalModel):
    """Each distinct context through the model once; its cached keys/values serve all its candidates.

    Pass 1 runs the left-padded contexts with ``use_cache=True``: the last column holds every
    context's last token, which predicts each candidate's first token. Pass 2 runs the
    candidates without their last token, right-padded, after the context cache expanded to one
    row per candidate, with the attention mask [context mask | candidate mask] and position ids
    that continue each context's own; column t of a candidate predicts its token t + 1. Left
    padding of the contexts with explicit positions is what makes one shared cache possible.

    With a plain output layer (checked on pass 1 as :class:`~lightning_div.model.pairwise._CausalScorer`
    checks it), the final hidden states of all target positions of the batch, in pair order, go
    through the output layer in one product, as the pairwise scorer projects them: the same rows in
    the same order, so a score does not depend on how the work is split into passes (a
    product over a handful of rows can round differently with the number of CPU threads,
    which would break the 1-vs-N-process equality of RUQ).
    """

    def __init__(self, model: Any, side: str, params: set[str]) -> None:
        super().__init__(model, side, params)
        self.cache_arg = _cache_argument(params) or "past_key_values"

    def __call__(self, groups: list[Group], pad_id: int, device: torch.device) -> list[torch.Tensor]:
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
            if self.plain_projection(hidden, ctx_ids, out.logits) and hidden is not None:
                first_hidden = hidden[:, -1].index_select(0, index)
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
    groups: list[Group],
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


def _shares_contexts(model: Any, seq2seq: bool, params: set[str], side: str) -> bool:
    """Whether the model can run a context once for several candidates.

    Decoder-only: its forward takes a key/value cache and the contexts are left-padded (which
    needs ``position_ids``, checked with the side). Encoder-decoder: its forward takes
    ``encoder_outputs`` and it has ``get_encoder``.
    """
    if seq2seq:
        return "encoder_outputs" in params and callable(getattr(model, "get_encoder", None))
    return _cache_argument(params) is not None and side == "left"


def _shared_context_logprobs(
    model: Any,
    tokenizer: Any,
    pairs: list[tuple[list[int], list[int]]],
    *,
    seq2seq: bool,
    params: set[str],
    batch_size: int,
    show_progress: bool,
) -> list[torch.Tensor]:
    """Token log-probs of encoded (context, candidate) pairs, each distinct context through the model once.

    Args:
        model: a causal or seq2seq LM that :func:`_shares_contexts`.
        tokenizer: its tokenizer (for the pad id and a seq2seq target's unscored prefix).
        pairs: (context ids, candidate ids) as :meth:`DialogueFormat.encode_pairs` gives them.
        seq2seq: the model is an encoder-decoder.
        params: the model's forward parameters.
        batch_size: candidates per forward pass.
        show_progress: a tqdm bar.

    Returns:
        One 1-D CPU tensor per pair, in pair order.
    """
    groups, members = _context_groups(pairs, batch_size)
    pad_id = pad_id_of(tokenizer)
    start = _decoder_start(model) if seq2seq else 0
    prefix = target_prefix(tokenizer) if seq2seq else []
    causal = None if seq2seq else _SharedCausalScorer(model, "left", params)
    device = model_device(model)
    out: list[torch.Tensor | None] = [None] * len(pairs)
    with evaluation_mode(model):
        batches = _group_batches(groups, batch_size)
        for batch in tqdm(batches, desc="scoring (shared contexts)", unit="batch", disable=not show_progress):
            chunk = [groups[g] for g in batch]
            if causal is None:
                pieces = _seq2seq_shared(model, chunk, pad_id, start, prefix, device)
            else:
                pieces = causal(chunk, pad_id, device)
            for i, piece in zip((i for g in batch for i in members[g]), pieces):
                out[i] = piece.cpu()
    # clone outside inference mode: callers get ordinary tensors they may use anywhere
    return [t.clone() for t in out]  # type: ignore[union-attr]
