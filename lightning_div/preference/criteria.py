"""Diversity criteria: how diverse each response of a pool is, as one number (higher = more diverse).

DivPO (Lanchantin et al., 2025, arXiv 2501.18101) leaves the criterion open and uses three: the
policy's probability of the response (a less likely reply counts as more diverse), the frequency
of its words in the pool, and an LLM judge. Here:

* ``"semantic"`` (:func:`semantic_rarity`, the default): the share of the pool's *other*
  responses that fall in another cluster of a :class:`~lightning_div.semantic.space.SemanticSpace`,
  ``(N - size of my cluster) / (N - 1)`` (DARLING's per-response diversity,
  :func:`lightning_div.metrics.group.group_diversity_scores`). A reply no other one repeats gets
  1, a pool that all means the same gets 0 everywhere.
* ``"likelihood"`` (:func:`likelihood_diversity`): minus the mean log-probability per token of
  the response (its EOS included) given the prompt, under a causal LM (the policy). The paper
  uses the whole response's log-probability; per token keeps a long reply from counting as
  diverse for its length alone.
* ``"frequency"`` (:func:`word_frequency_diversity`): one minus the mean, over the response's
  distinct words, of the share of the pool's other responses that use the word: a reply of
  words nobody else in the pool used gets 1. An empty reply gets 0.

A criterion is also any callable ``criterion(prompt, responses) -> list[float]`` (one pool).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from typing import Any, Union

import numpy as np

from lightning_div.preference.pools import Pool, Prompt

__all__ = ["CRITERIA", "likelihood_diversity", "semantic_rarity", "word_frequency_diversity"]

CRITERIA = ("semantic", "likelihood", "frequency")
"""The criteria chosen by name."""
Criterion = Union[str, Callable[[Prompt, list[str]], Sequence[float]]]


def semantic_rarity(pools: Sequence[Pool], space: Any) -> list[list[float]]:
    """Per response: the share of its pool's other responses in another cluster of ``space``.

    An unfitted space is fitted on the pools' distinct responses first (its ``num_clusters``
    must then be at most their number). Without a ``dirpath`` the fit is cached in a temporary
    folder, removed after: the space then holds its clusters in memory only, and its
    ``state_dict()`` names no file (``space.save(path)`` keeps them).

    Args:
        pools: the pools.
        space: a :class:`~lightning_div.semantic.space.SemanticSpace`.

    Returns:
        One list of scores in [0, 1] per pool.

    Raises:
        ValueError: no space, or one that cannot be fitted on the pools.
        TypeError: a ``space`` that is not a semantic space (a name such as ``"minilm"``).
    """
    from lightning_div.metrics.group import group_diversity_scores

    if space is None:
        raise ValueError(
            "criterion='semantic' needs space= (a SemanticSpace; e.g. SemanticSpace(encoder='minilm', num_clusters=8))"
        )
    if not all(hasattr(space, name) for name in ("fitted", "assign", "dirpath")):
        shown = f" {space!r}" if isinstance(space, (str, int, float)) else ""
        raise TypeError(
            "space= must be a SemanticSpace (e.g. SemanticSpace(encoder='minilm', num_clusters=8)), "
            f"got {type(space).__name__}{shown}"
        )
    flat = [r for p in pools for r in p.responses]
    if not flat:
        return [[] for _ in pools]
    if not space.fitted:
        texts = list(dict.fromkeys(flat))
        if space.dirpath is None:  # no cache asked for: the fit's cache file lives as long as the fit
            with tempfile.TemporaryDirectory(prefix="lightning_div_pairs_") as tmp:
                space.fit(texts, cache_dir=tmp)
            # the file is gone with its folder: the clusters are in memory, and the space's state must not
            # name a file a resumed run would look for (state_dict() gives None: refitted on resume)
            space.clusters_path = None
        else:
            space.fit(texts)
    ids = np.asarray(space.assign(flat))
    out, at = [], 0
    for p in pools:
        n = len(p.responses)
        out.append(group_diversity_scores(ids[at : at + n], n))
        at += n
    return out


def word_frequency_diversity(pools: Sequence[Pool], tokenizer: Any = "13a") -> list[list[float]]:
    """Per response: 1 - the mean over its distinct words of the share of the pool's other responses using it.

    Args:
        pools: the pools.
        tokenizer: the word tokeniser (as :func:`~lightning_div.metrics.distinct_n`'s; default 13a, lowercased).

    Returns:
        One list of scores in [0, 1] per pool.

    Examples:
        "a b" shares "a" with one of the two others (1/2) and "b" with none: 1 - 1/4;
        "c" is used by nobody else: 1; "a" is used by one of two others: 1 - 1/2:

        >>> word_frequency_diversity([Pool("?", ["a b", "c", "a"])])
        [[0.75, 1.0, 0.5]]
    """
    from lightning_div._internal.text import get_tokenizer

    split = get_tokenizer(tokenizer)
    out = []
    for p in pools:
        words = [set(split(r)) for r in p.responses]
        n = len(words)
        counts: dict[str, int] = {}
        for ws in words:
            for w in ws:
                counts[w] = counts.get(w, 0) + 1
        scores = []
        for ws in words:
            if not ws or n < 2:
                scores.append(0.0 if not ws else 1.0)
                continue
            shared = np.mean([(counts[w] - 1) / (n - 1) for w in ws])
            scores.append(float(1.0 - shared))
        out.append(scores)
    return out


def likelihood_diversity(
    pools: Sequence[Pool], model: Any, tokenizer: Any, batch_size: int = 16, show_progress: bool = False
) -> list[list[float]]:
    """Per response: minus its mean log-probability per token (EOS included) given the prompt, under ``model``.

    The prompt is the text a pool was sampled after (chat messages through the tokenizer's chat
    template); the response's tokens are those of ``prompt + response`` past the prompt's, as
    TRL's ``DPOTrainer`` cuts them, then EOS. Right-padded batches: exact for causal LMs.

    What does not fit the model's window is cut as the package's scoring cuts it
    (:func:`~lightning_div.model.scoring.token_logprobs_batched`, ``reference_nll``, RUQ): a
    response keeps its first ``window - 1`` tokens (its EOS is then not scored), after as many of
    the prompt's last tokens as fit (at least one).

    Args:
        pools: the pools.
        model: a Hugging Face causal LM (the policy).
        tokenizer: its tokenizer.
        batch_size: sequences per forward pass.
        show_progress: a progress bar.

    Returns:
        One list of scores per pool (nats per token, >= 0).

    Raises:
        ValueError: no model or tokenizer.
    """
    if model is None or tokenizer is None:
        raise ValueError("criterion='likelihood' needs model= and tokenizer= (the policy the pools were sampled from)")
    import torch
    from tqdm.auto import tqdm

    from lightning_div._internal.bars import bar_disabled
    from lightning_div.model.formatting import model_window
    from lightning_div.model.generation import evaluation_mode, model_device, pad_batch, pad_id_of
    from lightning_div.preference.pools import _prompt_text

    window = model_window(model)
    eos = tokenizer.eos_token_id
    rows: list[tuple[list[int], int]] = []  # (ids, number of scored tokens at the end)
    for p in pools:
        text = _prompt_text(p.prompt, tokenizer)
        prompt_ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        for r in p.responses:
            full = list(tokenizer(text + r, add_special_tokens=False)["input_ids"])
            cut = 0
            while cut < min(len(prompt_ids), len(full)) and prompt_ids[cut] == full[cut]:
                cut += 1
            cut = max(cut, 1)  # the first token has nothing to be predicted from
            seq = full + ([eos] if eos is not None else [])
            if window is not None and len(seq) > window:
                # the response's first tokens, after the prompt's last ones: as DialogueLayout.encode_pair cuts
                context, reply = seq[:cut], seq[cut:][: max(window - 1, 1)]
                seq = context[-max(window - len(reply), 1) :] + reply
                cut = len(seq) - len(reply)
            rows.append((seq, len(seq) - cut))
    scores: list[float] = [0.0] * len(rows)
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    device = model_device(model)
    pad_id = pad_id_of(tokenizer)
    with evaluation_mode(model):
        for batch in tqdm(batches, desc="likelihood", unit="batch", disable=bar_disabled(show_progress)):
            ids, mask = pad_batch([rows[i][0] for i in batch], pad_id, "right", device)
            logits = model(input_ids=ids, attention_mask=mask).logits.float()
            logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None])[..., 0].cpu()
            for k, i in enumerate(batch):
                seq, scored = rows[i]
                values = logp[k, len(seq) - 1 - scored : len(seq) - 1]
                scores[i] = float(-values.mean()) if scored > 0 else 0.0
    out, at = [], 0
    for p in pools:
        out.append(scores[at : at + len(p.responses)])
        at += len(p.responses)
    return out


def diversity_scores(
    pools: Sequence[Pool],
    criterion: Criterion,
    *,
    space: Any = None,
    model: Any = None,
    tokenizer: Any = None,
) -> list[list[float]]:
    """Each pool's per-response diversity under ``criterion`` (a name of :data:`CRITERIA` or a callable), checked.

    Raises:
        ValueError: an unknown name, what the criterion needs missing, or a callable that returns
            the wrong number of scores or a non-finite one.
    """
    from lightning_div.preference.pools import check_quality

    raw: list[Sequence[float]]
    if callable(criterion):
        raw = [criterion(p.prompt, list(p.responses)) for p in pools]
    elif criterion == "semantic":
        raw = list(semantic_rarity(pools, space))
    elif criterion == "likelihood":
        raw = list(likelihood_diversity(pools, model, tokenizer))
    elif criterion == "frequency":
        raw = list(word_frequency_diversity(pools))
    else:
        raise ValueError(f"criterion must be one of {CRITERIA} or a callable, got {criterion!r}")
    if len(raw) != len(pools):
        raise ValueError(f"the criterion returned {len(raw)} score lists for {len(pools)} pools")
    return [
        check_quality(r, len(p.responses), f"pools[{i}]", name="diversity") for i, (p, r) in enumerate(zip(pools, raw))
    ]
