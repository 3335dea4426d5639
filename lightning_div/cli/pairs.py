"""``lightning-div pairs POOLS.jsonl --out pairs.jsonl``: DPO preference pairs (DivPO's rule) from pools on disk.

    lightning-div pairs pools.jsonl --out pairs.jsonl
    lightning-div pairs pools.jsonl --out pairs.jsonl --rule dpo
    lightning-div pairs pools.jsonl --out pairs.jsonl --criterion likelihood --model local:chitchat-gpt2

The pools file has one ``{"prompt", "responses", "quality"}`` per line (a first ``{"settings"}``
line, as :func:`~lightning_div.preference.build_pools` writes it, is skipped); every pool needs its
quality scores here. The output has one ``{"prompt", "chosen", "rejected"}`` per line, as TRL's
``DPOTrainer`` reads it (``datasets.load_dataset("json", data_files=...)``); ``--details`` writes
each pair's indices, quality and diversity, every reply's diversity (under DivPO's rule: the rarity
of each reply of the pool), and the skipped pools with their reasons; pools are named by their line
in the file (from 1), as its errors name them.
The selection itself is :func:`lightning_div.preference.select_preference_pairs`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_div.cli.common import (
    OFFLINE_ENCODER,
    Parser,
    UsageError,
    build_encoder,
    refuse_overwriting_inputs,
    require_files,
    say,
    warn,
)

if TYPE_CHECKING:
    from lightning_div.preference.pairs import PairSelection

PROG = "lightning-div pairs"


def build_parser(prog: str = PROG) -> Parser:
    """``lightning-div pairs``'s arguments."""
    p = Parser(prog=prog, description="Preference pairs for DPO from pools of responses with quality scores (DivPO).")
    p.add_argument("pools", help="JSONL: one {'prompt', 'responses', 'quality'} per line")
    p.add_argument("--out", required=True, help="the pairs, JSONL: one {'prompt', 'chosen', 'rejected'} per line")
    p.add_argument("--rule", choices=("divpo", "dpo"), default="divpo", help="DivPO's pair or DPO's (best vs worst)")
    p.add_argument(
        "--criterion",
        choices=("semantic", "likelihood", "frequency"),
        default="semantic",
        help="the diversity criterion (default: semantic rarity in the pool by clusters of --encoder)",
    )
    p.add_argument("--rho", type=float, default=0.5, help="the quality threshold in (0, 1) (default 0.5)")
    p.add_argument(
        "--split",
        choices=("range", "rank"),
        default="range",
        help="rho as a share of the quality range or of the responses",
    )
    p.add_argument("--seed", type=int, default=0, help="the seed of the tie-breaking order (default 0)")
    p.add_argument("--encoder", default=OFFLINE_ENCODER, help="the semantic criterion's encoder (default %(default)r)")
    p.add_argument(
        "--num-clusters", type=int, default=8, help="k of the clusters fitted on the pools' responses (default 8)"
    )
    p.add_argument("--clusters", default=None, help="a clusters file (.npz) to use instead of fitting on the pools")
    p.add_argument("--model", default=None, help="the policy of --criterion likelihood (e.g. local:chitchat-gpt2)")
    p.add_argument(
        "--details",
        default=None,
        help="JSONL: every pair's indices, quality and diversity, each reply's diversity; skipped pools",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def check_arguments(args: argparse.Namespace) -> None:
    """Mistakes in the arguments, before anything is read or loaded.

    Raises:
        UsageError: a missing file, ``--rho`` outside (0, 1), an output over an input, an output
            that is a folder or under a file, or ``--criterion likelihood`` without ``--model``.
    """
    require_files([("", args.pools), ("--clusters", args.clusters)])
    if not 0.0 < args.rho < 1.0 or math.isnan(args.rho):
        raise UsageError(f"--rho must be in (0, 1), got {args.rho}")
    if args.num_clusters < 1:
        raise UsageError(f"--num-clusters must be >= 1, got {args.num_clusters}")
    if args.criterion == "likelihood" and args.rule == "divpo" and not args.model:
        raise UsageError("--criterion likelihood needs --model (the policy the pools were sampled from)")
    outputs = [("--out", args.out), ("--details", args.details)]
    for option, path in outputs:
        if path is not None:
            check_output_file(option, path)
    refuse_overwriting_inputs(outputs, [("", args.pools), ("--clusters", args.clusters)])
    if args.details is not None and Path(args.details).resolve() == Path(args.out).resolve():
        raise UsageError(f"--details {args.details} is --out: give two files")


def check_output_file(option: str, path: str) -> None:
    """An output file the command can write, checked before the (long) selection: not a folder, and its
    nearest existing folder a folder we may write in (missing folders are made when it is written).

    Raises:
        UsageError: ``<option> <path>: is a folder`` (``.`` too), or a parent that is a file or not writable.
    """
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"{option} {path}: is a folder; give the file to write, e.g. {target / 'pairs.jsonl'}")
    existing = next(d for d in [target.parent, *target.parent.parents, Path(".")] if d.exists())
    if not existing.is_dir():
        raise UsageError(f"{option} {path}: {existing} is a file, not a folder to write in")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: the folder {existing} is not writable")


def _load_model(name: str) -> tuple[Any, Any]:
    from lightning_div.model.base import BASE_MODEL, load_base_model

    if name == BASE_MODEL:
        return load_base_model()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        return AutoModelForCausalLM.from_pretrained(name), AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UsageError(f"--model {name}: cannot load it: {reason}") from None


def _write_jsonl(path: str, rows: list[dict[str, Any]]) -> None:
    from lightning_div._internal.io import atomic_write

    with atomic_write(path, "wb", make_parents=True) as f:
        f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8"))


def execute(args: argparse.Namespace) -> int:
    """Read the pools, select one pair per pool, write the pairs (and the details).

    Args:
        args: what :func:`build_parser` parsed.

    Returns:
        The exit code, 0.

    Raises:
        UsageError: a pool without quality scores (named by file and line).
        ValueError: a malformed pool (named by file and line), a bad score.
    """
    from lightning_div.preference.pairs import select_preference_pairs
    from lightning_div.preference.pools import read_pool_lines

    _, pools, lines = read_pool_lines(args.pools)
    for pool, line in zip(pools, lines):
        if pool.quality is None:
            raise UsageError(
                f"{args.pools} line {line}: no 'quality' list; the pairs command needs one score per response"
            )
        if len(pool.responses) < 2:
            raise UsageError(
                f"{args.pools} line {line}: {len(pool.responses)} response(s); a preference pair needs at least 2"
            )
    space = model = tokenizer = None
    if args.rule == "divpo" and args.criterion == "semantic":
        if args.clusters is None:
            texts = list(dict.fromkeys(r for p in pools for r in p.responses))
            if len(texts) < args.num_clusters:
                raise UsageError(
                    f"--num-clusters {args.num_clusters} is more than the pools' {len(texts)} distinct responses"
                )
        from lightning_div.semantic.space import SemanticSpace

        encoder = build_encoder(args.encoder, None, args.quiet)
        space = SemanticSpace(
            encoder=encoder, clusters=args.clusters, num_clusters=args.num_clusters, show_progress=not args.quiet
        )
    if args.rule == "divpo" and args.criterion == "likelihood":
        model, tokenizer = _load_model(args.model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        selection = select_preference_pairs(
            pools,
            rule=args.rule,
            criterion=args.criterion,
            rho=args.rho,
            split=args.split,
            space=space,
            model=model,
            tokenizer=tokenizer,
            seed=args.seed,
        )
    for w in caught:
        if "were skipped" in str(w.message):  # said again by the file's lines (the library counts pools from 0)
            reasons = "; ".join(f"{n} x {why}" for why, n in selection.stats["skipped_by_reason"].items())
            at = [str(lines[i]) for i in list(selection.skipped)[:10]] + (
                ["..."] if len(selection.skipped) > 10 else []
            )
            warn(
                PROG,
                f"{len(selection.skipped)} of {len(pools)} pools gave no preference pair and were skipped ({reasons}): "
                f"{args.pools} line{'s' if len(at) > 1 else ''} {', '.join(at)}",
            )
    _write_jsonl(args.out, selection.records())
    if args.details is not None:
        _write_jsonl(args.details, _detail_rows(selection, lines))
    stats = selection.stats
    say(
        f"{stats['pairs']} pairs from {stats['pools']} pools ({args.rule}"
        + (f", criterion {args.criterion}, rho {args.rho}" if args.rule == "divpo" else "")  # dpo has no rho
        + f"; {stats['skipped']} skipped) written to {args.out}"
    )
    return 0


def _detail_rows(selection: PairSelection, lines: list[int]) -> list[dict[str, Any]]:
    """The ``--details`` rows: one per pool, in pool order, chosen and rejected or why it was skipped."""
    rows: list[dict[str, Any]] = [
        {
            "pool": p.pool,
            "line": lines[p.pool],
            "chosen_index": p.chosen_index,
            "rejected_index": p.rejected_index,
            "chosen_quality": p.chosen_quality,
            "rejected_quality": p.rejected_quality,
            "chosen_diversity": p.chosen_diversity,
            "rejected_diversity": p.rejected_diversity,
            **({"diversity": selection.diversity[p.pool]} if p.pool in selection.diversity else {}),
        }
        for p in selection.pairs
    ]
    rows += [
        {"pool": i, "line": lines[i], "skipped": why}
        | ({"diversity": selection.diversity[i]} if i in selection.diversity else {})
        for i, why in selection.skipped.items()
    ]
    return sorted(rows, key=lambda r: int(r["pool"]))
