"""Several responses to one context, the context through the model once.

RUQ scores each prompt's references and every "I don't know" string after the same context.
:func:`~lightning_div.model.scoring.candidate_logprobs_batched` hands the encoded pairs here:
they are grouped by the context ids actually fed (a long candidate can shorten its context,
which then gets a group of its own), and each batch goes through the model in two steps:

* **the contexts**, at most ``batch_size`` of similar length per forward: a decoder-only
  model runs them left-padded with ``use_cache=True`` (the last column predicts every
  candidate's first token); an encoder-decoder runs its encoder.
* **the candidates of those contexts, sorted by length**, as many per forward as padding allows,
  each after its own context's keys/values (decoder-only, position ids continuing the
  context's own) or encoder output (encoder-decoder).

The candidates are batched apart from their contexts because their lengths differ more than
the contexts' do: RUQ's reference and its two short "I don't know" strings side by side padded
the candidate forwards 2.5x (measured on the benchmark's prompts, DialoGPT-small's shape),
which cost more than half of what sharing the contexts saved; sorted by length they pad about
1.1x. The values equal pair-by-pair scoring (:mod:`lightning_div.model.pairwise`) to float rounding.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers.modeling_outputs import BaseModelOutput

from lightning_div._internal.bars import bar_disabled
from lightning_div._internal.distributed import length_batches
from lightning_div.model.formatting import target_prefix
from lightning_div.model.generation import evaluation_mode, model_device, pad_batch, pad_id_of
from lightning_div.model.pairwise import _CausalModel, _decoder_start, _target_logprobs, _unscored

# The most padding a forward may carry, as a share of its real positions: a batch ends early rather
# than pad more. RUQ's candidates (a reference, two short IDK strings) and the contexts' long tail
# padded the forwards 1.3-2.5x in full batches; see the module docstring.
_MAX_PADDING = 0.2


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


def _select_cache(cache: Any, index: torch.Tensor) -> Any:
    """A new cache whose row i is row ``index[i]`` of ``cache`` (a context once per candidate); ``cache`` unchanged.

    The contexts' cache serves several candidate batches, and a forward extends the cache it is
    given, so each batch gets its own: a copy (any transformers ``Cache``: whatever its layers
    hold) cut to the rows with the cache's own ``batch_select_indices``; legacy tuples are indexed.
    """
    if callable(getattr(cache, "batch_select_indices", None)):  # transformers' Cache (DynamicCache, ...)
        selected = copy.deepcopy(cache)
        selected.batch_select_indices(index)
        return selected
    return tuple(tuple(t.index_select(0, index) for t in layer) for layer in cache)  # legacy tuples


def _context_groups(pairs: Sequence[tuple[list[int], list[int]]]) -> tuple[list[list[int]], list[int]]:
    """The distinct context ids (first-seen order) and, for each pair, the index of its context."""
    where: dict[tuple[int, ...], int] = {}
    contexts: list[list[int]] = []
    owner = []
    for ctx, _ in pairs:
        g = where.setdefault(tuple(ctx), len(contexts))
        if g == len(contexts):
            contexts.append(ctx)
        owner.append(g)
    return contexts, owner


def _batch_plan(
    contexts: list[list[int]], owner: list[int], lengths: list[int], batch_size: int
) -> Iterator[tuple[list[int], list[list[int]]]]:
    """(context batch, its candidates' batches): contexts by length, then their candidates (pair indices) by length.

    A context forward gets at most ``batch_size`` contexts of similar length. Their candidates,
    longest first whatever context they follow, share forwards cut only where padding would
    exceed ``_MAX_PADDING``, not at ``batch_size`` rows: a candidate is a few tokens, and on a
    CPU a forward of 16 rows of 8 tokens ran its matrix products far below their speed at 48
    rows (``benchmarks/scoring.py --shared-only``, RUQ's 3 candidates per context: 1.69x -> 1.87x
    over pairwise scoring in CPU time). The memory of a candidate forward is then at most the
    candidates per context times a context forward's keys/values (each row holds a copy of its
    context's).
    """
    members: list[list[int]] = [[] for _ in contexts]
    for i, g in enumerate(owner):
        members[g].append(i)
    for batch in length_batches([len(c) for c in contexts], batch_size, _MAX_PADDING):
        pairs = [i for g in batch for i in members[g]]
        cuts = length_batches([lengths[i] for i in pairs], len(pairs), _MAX_PADDING)
        yield batch, [[pairs[j] for j in cut] for cut in cuts]


@dataclass
class _EncodedContexts:
    """What the context pass leaves for the candidates: the cache or encoder output, the mask, the first rows."""

    state: Any  # decoder-only: the key/value cache; encoder-decoder: the encoder's last hidden state
    mask: torch.Tensor  # the contexts' attention mask (left-padded for a decoder-only model)
    first: torch.Tensor | None = None  # decoder-only: the last position's hidden state (plain head) or logits


class _SharedCausalScorer(_CausalModel):
    """Each distinct context through the model once; its cached keys/values serve all its candidates.

    :meth:`contexts` runs the left-padded contexts with ``use_cache=True``: the last column
    holds every context's last token, which predicts each candidate's first token.
    :meth:`candidates` runs candidates without their last token, right-padded, after their
    context's cache rows, with the attention mask [context mask | candidate mask] and position
    ids that continue each context's own; column t of a candidate predicts its token t + 1. Left
    padding of the contexts with explicit positions is what makes one shared cache possible.

    With a plain output layer (checked on the context pass as
    :class:`~lightning_div.model.pairwise._CausalScorer` checks it), the final hidden states of
    all target positions of a candidate batch, in pair order, go through the output layer in
    one product: a score does not depend on which pass computed which of its rows.
    """

    def __init__(self, model: Any, side: str, params: set[str]) -> None:
        super().__init__(model, side, params)
        self.cache_arg = _cache_argument(params) or "past_key_values"

    def contexts(self, contexts: list[list[int]], pad_id: int, device: torch.device) -> _EncodedContexts:
        """Pass 1: the contexts, their cache kept."""
        ids, mask = pad_batch(contexts, pad_id, "left", device)
        kwargs: dict[str, Any] = {
            "input_ids": ids,
            "attention_mask": mask,
            "use_cache": True,
            "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
        }
        if self.keep:
            kwargs["logits_to_keep"] = 1
        if self.head is not None:
            kwargs["output_hidden_states"] = True
        out = self.model(**kwargs)
        if self.head is not None:
            hidden = out.hidden_states[-1] if out.hidden_states else None
            if self.plain_projection(hidden, ids, out.logits) and hidden is not None:
                return _EncodedContexts(_returned_cache(out), mask, hidden[:, -1])
        return _EncodedContexts(_returned_cache(out), mask, out.logits[:, -1])

    def candidates(
        self, ctx: _EncodedContexts, owner: list[int], cands: list[list[int]], pad_id: int, device: torch.device
    ) -> list[torch.Tensor]:
        """Pass 2: candidate ``i`` after context row ``owner[i]``; its token log-probs."""
        index = torch.tensor(owner, device=device)
        first_targets = torch.tensor([r[0] for r in cands], device=device)
        first = ctx.first.index_select(0, index)  # type: ignore[union-attr]
        lengths = [len(r) for r in cands]
        rest_rows: torch.Tensor | None = None
        rest_targets = first_targets.new_zeros(0)
        if max(lengths) > 1:  # otherwise every candidate is its EOS alone, predicted by pass 1
            ids, mask = pad_batch([r[:-1] or [pad_id] for r in cands], pad_id, "right", device)
            for row, n in enumerate(lengths):
                mask[row, n - 1 :] = 0  # a one-token candidate's stand-in column is masked too
            # Positions continue each context's own; padding columns get 0 (they may lie past the window).
            pos = (
                ctx.mask.sum(-1).index_select(0, index).unsqueeze(1) + torch.arange(ids.shape[1], device=device)
            ) * mask
            targets, _ = pad_batch([r[1:] or [pad_id] for r in cands], pad_id, "right", device)
            tmask = mask.bool()
            step: dict[str, Any] = {
                "input_ids": ids,
                "position_ids": pos,
                "use_cache": False,
                "attention_mask": torch.cat([ctx.mask.index_select(0, index), mask], dim=1),
                self.cache_arg: _select_cache(ctx.state, index),
            }
            if self.head is not None:
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
        rows = first if rest_rows is None else torch.cat([first.to(rest_rows.dtype), rest_rows])
        rows = rows.index_select(0, perm)
        targets_all = torch.cat([first_targets, rest_targets]).index_select(0, perm)
        flat = _target_logprobs(rows if self.head is None else self.head(rows), targets_all)
        return list(flat.split(lengths))


class _SharedSeq2Seq:
    """The encoder once per distinct context, its output repeated for each candidate's decoder pass."""

    def __init__(self, model: Any, start: int, prefix: list[int]) -> None:
        self.model, self.start, self.prefix = model, start, prefix

    def contexts(self, contexts: list[list[int]], pad_id: int, device: torch.device) -> _EncodedContexts:
        """The encoder over the (right-padded) contexts."""
        ids, mask = pad_batch(contexts, pad_id, "right", device)
        encoder = self.model.get_encoder()
        return _EncodedContexts(encoder(input_ids=ids, attention_mask=mask, return_dict=True).last_hidden_state, mask)

    def candidates(
        self, ctx: _EncodedContexts, owner: list[int], cands: list[list[int]], pad_id: int, device: torch.device
    ) -> list[torch.Tensor]:
        """The decoder over candidate ``i`` after context row ``owner[i]``'s encoder output."""
        index = torch.tensor(owner, device=device)
        dec, dmask = pad_batch([[self.start] + r[:-1] for r in cands], pad_id, "right", device)
        targets, _ = pad_batch(cands, pad_id, "right", device)
        logits = self.model(
            encoder_outputs=BaseModelOutput(last_hidden_state=ctx.state.index_select(0, index)),
            attention_mask=ctx.mask.index_select(0, index),
            decoder_input_ids=dec,
            decoder_attention_mask=dmask,
        ).logits
        scored = dmask.bool()
        for row, r in enumerate(cands):
            scored[row, : _unscored(r, self.prefix)] = False
        flat = _target_logprobs(logits[scored], targets[scored])
        return list(flat.split([len(r) - _unscored(r, self.prefix) for r in cands]))


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
        pairs: (context ids, candidate ids) as :meth:`DialogueLayout.encode_pairs` gives them.
        seq2seq: the model is an encoder-decoder.
        params: the model's forward parameters.
        batch_size: the most rows (contexts, or candidates) of one forward.
        show_progress: a tqdm bar.

    Returns:
        One 1-D CPU tensor per pair, in pair order.
    """
    contexts, owner = _context_groups(pairs)
    pad_id = pad_id_of(tokenizer)
    scorer: _SharedCausalScorer | _SharedSeq2Seq
    if seq2seq:
        scorer = _SharedSeq2Seq(model, _decoder_start(model), target_prefix(tokenizer))
    else:
        scorer = _SharedCausalScorer(model, "left", params)
    device = model_device(model)
    out: list[torch.Tensor | None] = [None] * len(pairs)
    plan = list(_batch_plan(contexts, owner, [len(r) for _, r in pairs], batch_size))
    with evaluation_mode(model):
        for batch, candidate_batches in tqdm(
            plan, desc="scoring (shared contexts)", unit="batch", disable=bar_disabled(show_progress)
        ):
            encoded = scorer.contexts([contexts[g] for g in batch], pad_id, device)
            row_of = {g: row for row, g in enumerate(batch)}
            for chunk in candidate_batches:
                owners = [row_of[owner[i]] for i in chunk]
                pieces = scorer.candidates(encoded, owners, [pairs[i][1] for i in chunk], pad_id, device)
                for i, piece in zip(chunk, pieces):
                    out[i] = piece.cpu()
    # clone outside inference mode: callers get ordinary tensors they may use anywhere
    return [t.clone() for t in out]  # type: ignore[union-attr]
