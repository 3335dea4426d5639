"""Score response files with every metric, outside training (``lightning-div score``)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning_div._internal.io import atomic_write_text
from lightning_div._internal.text import TokenizerSpec
from lightning_div.metrics import DEFAULT_LEXICAL, count_vocab, lexical_scores, semantic_entropy


def score_responses(
    responses: Sequence[str],
    lexical: Sequence[str] = DEFAULT_LEXICAL,
    vocab_size: int | None = None,
    clusters: Any = None,
    encoder: Any = None,
    tokenizer: TokenizerSpec = "13a",
    lowercase: bool | None = None,
    base: float = math.e,
) -> dict[str, float]:
    """Lexical metrics of a response set, plus Sem-Ent when ``clusters`` and ``encoder`` are given.

    Args:
        responses: one system's responses.
        lexical: lexical metric names.
        vocab_size: EAD's V.
        clusters: fitted clusters for Sem-Ent.
        encoder: the encoder for Sem-Ent.
        tokenizer: the lexical tokeniser (see :func:`lightning_div.metrics.lexical_scores`).
        lowercase: lowercase first; None = the tokeniser's own setting.
        base: the logarithm's base for Ent-n.

    Returns:
        ``{metric: value}``, with ``responses`` (their number) and ``sem_ent`` when clusters are given.
    """
    out = dict(lexical_scores(responses, lexical, vocab_size, tokenizer, lowercase, base))
    out["responses"] = float(len(responses))
    if clusters is not None:
        if encoder is None:
            raise ValueError("Sem-Ent needs an encoder to embed the responses before assigning clusters")
        ids = clusters.assign(encoder.encode(list(responses)))
        out["sem_ent"] = semantic_entropy(ids, clusters.num_clusters)
    return out


def score_files(
    files: Mapping[str, Sequence[str]],
    gold: Sequence[str] | None = None,
    lexical: Sequence[str] = DEFAULT_LEXICAL,
    vocab_size: int | None = None,
    clusters: Any = None,
    encoder: Any = None,
    fit_clusters: int | None = None,
    show_progress: bool = True,
    tokenizer: TokenizerSpec = "13a",
    lowercase: bool | None = None,
    base: float = math.e,
) -> dict[str, dict]:
    """Scores of several systems' responses (and of the gold responses, labelled ``gold``).

    EAD's V defaults to the vocabulary of ``gold`` (else of all responses together), counted
    with the same tokenisation. With ``fit_clusters=k`` and no ``clusters``, k clusters are
    fitted on ``gold`` first.

    Args:
        files: ``{system name: its responses}`` (read with
            :func:`~lightning_div.datamodules.formats.read_responses`).
        gold: the gold responses, scored as the system ``gold``.
        lexical: lexical metric names.
        vocab_size: EAD's V (default: counted as above).
        clusters: fitted :class:`~lightning_div.semantic.clusters.SemanticClusters` for Sem-Ent.
        encoder: the :class:`~lightning_div.semantic.encoder.ResponseEncoder` for Sem-Ent.
        fit_clusters: fit this many clusters on ``gold`` instead of ``clusters``.
        show_progress: tqdm bars.
        tokenizer: the lexical tokeniser.
        lowercase: lowercase first; None = the tokeniser's own setting.
        base: the logarithm's base for Ent-n.

    Returns:
        ``{system: {metric: value}}``.

    Raises:
        ValueError: ``fit_clusters`` without ``gold`` and ``encoder``, or fewer gold responses
            than clusters.
    """
    if vocab_size is None and "ead" in lexical:
        vocab_size = count_vocab(list(gold) if gold else [r for rs in files.values() for r in rs], tokenizer, lowercase)
    if clusters is None and fit_clusters:
        if not gold or encoder is None:
            raise ValueError("fitting clusters needs gold responses (--gold) and an encoder (--encoder)")
        from lightning_div.semantic.clusters import SemanticClusters

        clusters = SemanticClusters(
            num_clusters=fit_clusters, encoder_name=encoder.name, show_progress=show_progress
        ).fit_texts(list(gold), encoder)
    systems = dict(files)
    if gold:
        systems["gold"] = list(gold)
    return {
        name: score_responses(rs, lexical, vocab_size, clusters, encoder, tokenizer, lowercase, base)
        for name, rs in systems.items()
    }


def format_table(scores: Mapping[str, Mapping[str, float]]) -> str:
    """Metrics as rows, systems as columns, aligned for a terminal."""
    systems = list(scores)
    metrics: list[str] = []
    for s in systems:
        metrics.extend(m for m in scores[s] if m not in metrics)
    width = max([len(m) for m in metrics] + [6])
    cols = [max(len(s), 10) for s in systems]
    lines = [" " * width + "  " + "  ".join(s.rjust(c) for s, c in zip(systems, cols))]
    for m in metrics:
        cells = []
        for s, c in zip(systems, cols):
            v = scores[s].get(m)
            text = "-" if v is None else (f"{int(v)}" if m == "responses" else f"{v:.4f}")
            cells.append(text.rjust(c))
        lines.append(m.ljust(width) + "  " + "  ".join(cells))
    return "\n".join(lines)


def write_json(scores: Mapping[str, Any], path: str | Path) -> None:
    """Scores as JSON; refuses non-finite values rather than writing NaN."""
    for system, values in scores.items():
        for k, v in values.items():
            if isinstance(v, float) and not math.isfinite(v):
                raise ValueError(f"{system}/{k} = {v} is not finite")
    atomic_write_text(path, json.dumps(scores, indent=2, sort_keys=True) + "\n")
