"""``lightning-div``: LightningCLI for fit / validate / test, plus ``score`` and ``meta-eval``.

lightning-div fit --config configs/demo.yaml
lightning-div fit --config configs/demo.yaml --print_config
lightning-div score generated.txt --gold gold.txt --output scores.json
lightning-div clusters fit --data train.jsonl --encoder minilm --out clusters.npz
lightning-div report runs/demo --out report.html
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pytorch_lightning import LightningDataModule, LightningModule
from pytorch_lightning.cli import LightningCLI

from lightning_div._internal.tracking import local_log_dir, tracker_kind

# Imported so that `class_path: DialogueLM` / `DialogueDataModule` resolve by their short names.
from lightning_div.datamodules.dialogue import DialogueDataModule  # noqa: F401
from lightning_div.keys import DEFAULT_ENCODER, SUMMARY_KEYS
from lightning_div.model.dialogue_lm import DialogueLM  # noqa: F401

EXTRA_COMMANDS = {
    "score": "score files of generated responses with every metric (table + JSON)",
    "meta-eval": "decTest / conTest meta-evaluation of diversity metrics (Tevet & Berant)",
    "clusters": "fit semantic clusters (fit), print their cards (show), assign responses to them (assign)",
    "report": "one self-contained HTML page of a run (plots, cluster cards, samples, config)",
}


def run_tool(prog: str, fn: Any, argv: list[str]) -> int:
    """Run a subcommand; a failure is one line in our words on stderr and exit code 1, not a traceback."""
    try:
        return int(fn(argv) or 0)
    except Exception as err:
        what = str(err) or type(err).__name__
        if not isinstance(err, (ValueError, OSError)):
            what = f"{type(err).__name__}: {what}"
        print(f"{prog}: error: {' '.join(what.split())}", file=sys.stderr)
        return 1


def run_summary(trainer: Any) -> str:
    """The last epoch's diversity, RUQ and DRESS figures, and where the logs and plots are."""
    sections = ("val", "train", "dress", "timing")
    # a callback with a name logs "<name>/val/ruq": shown under its full key, after the unnamed ones
    metrics = {
        k: float(v)
        for k, v in trainer.callback_metrics.items()
        if not k.endswith("_step")
        and (k.split("/")[0] in sections or (k.count("/") >= 2 and k.split("/")[1] in sections))
    }
    named = sorted({k.split("/", 1)[0] for k in metrics if k.split("/")[0] not in sections})
    keys = [k for k in SUMMARY_KEYS if k in metrics] + [
        f"{n}/{k}" for n in named for k in SUMMARY_KEYS if f"{n}/{k}" in metrics
    ]
    keys += sorted(k for k in metrics if k.startswith("timing/") or "/timing/" in k)
    lines = [f"lightning-div: fit finished after {trainer.current_epoch} epoch(s), {trainer.global_step} steps"]
    if keys:
        width = max(len(k) for k in keys)
        lines += [f"  {k.ljust(width)}  {metrics[k]:.4f}" for k in keys]
    for lg in trainer.loggers:
        where = getattr(lg, "log_dir", None) or getattr(lg, "save_dir", None)
        lines.append(f"  {type(lg).__name__}: {where}")
        if tracker_kind(lg) == "TensorBoardLogger":
            lines.append(f"    view: tensorboard --logdir {lg.save_dir}")
        if tracker_kind(lg) == "WandbLogger":
            lines.append(f"    offline run: wandb sync {getattr(lg, 'save_dir', '.')}/wandb/offline-run-*")
    log_dir = local_log_dir(trainer)  # not trainer.log_dir: a collective, and this runs on rank 0 only
    if log_dir:
        lines.append(f"  plots and sample tables: {Path(log_dir) / 'lightning_div'}")
        lines.append(f"  one-page report: lightning-div report {trainer.default_root_dir} --out report.html")
    return "\n".join(lines)


class DiversityCLI(LightningCLI):
    """LightningCLI with lightning-div's defaults and an end-of-fit summary."""

    def before_fit(self) -> None:
        # W&B looks for a git repository from its run directory when it starts; a directory that does not
        # exist yet (the demo's runs/demo on a first run) prints "git root ... does not exist".
        for lg in self.trainer.loggers:
            if tracker_kind(lg) == "WandbLogger" and getattr(lg, "save_dir", None):
                Path(str(lg.save_dir)).mkdir(parents=True, exist_ok=True)

    def after_fit(self) -> None:
        if self.trainer.is_global_zero:
            print(run_summary(self.trainer))
        # Lightning leaves the W&B run open (for a later test()); the CLI is done with it, and a run left
        # open would be reused by the next WandbLogger in the same process.
        for lg in self.trainer.loggers:
            if tracker_kind(lg) == "WandbLogger" and getattr(lg, "_experiment", None) is not None:
                lg.experiment.finish()  # type: ignore[attr-defined]  # a WandbLogger (checked above)


# What a user gets wrong (a missing or malformed file, an encoder that cannot load, a bad value): said in one
# line and exit code 2, like argparse's own usage errors. LIGHTNING_DIV_TRACEBACK=1 shows the traceback instead.
USER_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, TypeError, ImportError)


def _fit_user_errors() -> tuple[type[BaseException], ...]:
    from lightning_div.callbacks.guards import MissingInputsError
    from lightning_div.datamodules.formats import DataFormatError

    # narrower than USER_ERRORS: inside a training run a ValueError or TypeError may be a bug worth its
    # traceback; an OSError (a missing file, a model or encoder that cannot be loaded, a full disk) is not
    return (OSError, DataFormatError, MissingInputsError)


def user_error(prog: str, err: BaseException) -> int:
    """Print ``<prog>: error: <message>`` on one line to stderr; returns the exit code 2."""
    import os

    if os.environ.get("LIGHTNING_DIV_TRACEBACK", "").lower() in ("1", "true", "yes", "on"):
        raise err
    message = " ".join(str(err).split()) or type(err).__name__
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def system_labels(paths: list[str], names: list[str] | None, gold: bool) -> list[str]:
    """One unique label per response file: ``names``, else the basenames when unique, else the paths.

    Raises ValueError for a repeated label (the same file twice, repeated ``--names``) and for
    a label ``gold`` while ``--gold`` is scored under that name.
    """
    if names is not None:
        if len(names) != len(paths):
            raise ValueError(f"--names gives {len(names)} name(s) for {len(paths)} response file(s)")
        labels = list(names)
    else:
        labels = [Path(p).name for p in paths]
        if len(set(labels)) < len(labels) or (gold and "gold" in labels):
            labels = list(paths)  # a/out.txt and b/out.txt: the basenames would merge two systems
    seen: set[str] = set()
    for label in labels:
        if label in seen:
            raise ValueError(f"two response files are labelled {label!r}: give each file once, or distinct --names")
        seen.add(label)
    if gold and "gold" in seen:
        raise ValueError("a response file is labelled 'gold', the label of --gold's scores: rename it with --names")
    return labels


def score_main(argv: list[str]) -> int:
    """``lightning-div score``: every metric of one or more response files (exit code 2 on bad input)."""
    from lightning_div.cli.meta_eval import add_tokenizer_arguments
    from lightning_div.metrics import DEFAULT_LEXICAL, LEXICAL_NAMES, check_lexical_names

    p = argparse.ArgumentParser(prog="lightning-div score", description=EXTRA_COMMANDS["score"])
    p.add_argument("responses", nargs="+", help="files of generated responses (.txt one per line, .jsonl, .csv)")
    p.add_argument("--gold", help="gold responses: EAD's vocabulary, the 'gold' column, and clusters to fit on")
    p.add_argument("--clusters", help="a saved SemanticClusters file (.npz) for Sem-Ent")
    p.add_argument("--fit-clusters", type=int, metavar="K", help="fit K clusters on --gold for Sem-Ent")
    p.add_argument(
        "--encoder",
        help=f"encoder model name/path for Sem-Ent (default: {DEFAULT_ENCODER}; "
        "'minilm' = the offline all-MiniLM-L6-v2 weights)",
    )
    p.add_argument("--pooling", default=None, help="last_token or mean (default: the encoder's)")
    p.add_argument(
        "--metrics",
        nargs="+",
        default=list(DEFAULT_LEXICAL),
        help=f"lexical metrics by name: {LEXICAL_NAMES} (default: %(default)s)",
    )
    p.add_argument("--vocab-size", type=int, help="V for EAD (default: counted from --gold)")
    add_tokenizer_arguments(p)
    p.add_argument("--field", default=None, help="JSONL/CSV field holding the response")
    p.add_argument(
        "--names",
        nargs="+",
        metavar="NAME",
        help="one label per response file (default: the file names, or the paths when two are equal)",
    )
    p.add_argument("--output", help="write the scores as JSON here")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    # said before any file is read or model loaded: what is missing for what was asked
    if args.fit_clusters and not args.gold:
        p.error("--fit-clusters K fits Sem-Ent's clusters on the gold responses: add --gold FILE")
    if args.fit_clusters and args.clusters:
        p.error("give --clusters FILE (saved clusters) or --fit-clusters K (fit on --gold), not both")
    try:
        check_lexical_names(args.metrics)
    except ValueError as err:
        p.error(str(err))
    from transformers.utils import logging as hf_logging

    # --quiet means no bars at all, transformers' own "Loading weights" bar included (restored after)
    silence = args.quiet and hf_logging.is_progress_bar_enabled()
    if silence:
        hf_logging.disable_progress_bar()
    try:
        return _score(args)
    except USER_ERRORS as err:
        return user_error(p.prog, err)
    finally:
        if silence:
            hf_logging.enable_progress_bar()


def _score(args: argparse.Namespace) -> int:
    from lightning_div.cli.score import format_table, score_files, write_json
    from lightning_div.datamodules.formats import read_responses

    missing = [
        f
        for f in [*args.responses, *([args.gold] if args.gold else []), *([args.clusters] if args.clusters else [])]
        if not Path(f).exists()
    ]
    if missing:
        raise FileNotFoundError(f"no such file: {', '.join(missing)}")
    labels = system_labels(args.responses, args.names, bool(args.gold))
    files = {label: read_responses(f, field=args.field) for label, f in zip(labels, args.responses)}
    gold = read_responses(args.gold, field=args.field) if args.gold else None
    clusters = encoder = None
    if args.clusters or args.fit_clusters:
        from lightning_div.semantic.encoder import ResponseEncoder

        encoder = ResponseEncoder(args.encoder or DEFAULT_ENCODER, pooling=args.pooling, show_progress=not args.quiet)
        if args.clusters:
            from lightning_div.semantic.clusters import SemanticClusters

            clusters = SemanticClusters.load(args.clusters)
            clusters.check_encoder(encoder, f"--clusters {args.clusters}")
    else:
        print(
            "lightning-div score: Sem-Ent left out (it needs clusters: --clusters FILE, or --fit-clusters K with "
            "--gold FILE)",
            file=sys.stderr,
        )
    scores = score_files(
        files,
        gold,
        args.metrics,
        args.vocab_size,
        clusters,
        encoder,
        args.fit_clusters,
        show_progress=not args.quiet,
        tokenizer=args.tokenizer,
        lowercase=args.lowercase,
        base=args.ent_base,
    )
    print(format_table(scores))
    if args.output:
        write_json(scores, args.output)
        print(f"scores written to {args.output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``lightning-div`` console script."""
    given = argv is not None
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "score":
        return score_main(argv[1:])
    if argv and argv[0] == "meta-eval":
        from lightning_div.cli.meta_eval import meta_eval_main

        return meta_eval_main(argv[1:])
    if argv and argv[0] == "clusters":
        from lightning_div.cli.clusters import clusters_main

        return run_tool("lightning-div clusters", clusters_main, argv[1:])
    if argv and argv[0] == "report":
        from lightning_div.report import report_main

        return run_tool("lightning-div report", report_main, argv[1:])
    extra = "; ".join(f"'{k}': {v}" for k, v in EXTRA_COMMANDS.items())
    command = next((a for a in argv if not a.startswith("-")), "")
    try:
        DiversityCLI(
            LightningModule,
            LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            seed_everything_default=0,
            save_config_kwargs={"overwrite": True},
            args=argv if given else None,
            parser_kwargs={"description": f"lightning-div (LightningCLI). Also: {extra}."},
        )
    except _fit_user_errors() as err:
        return user_error(f"lightning-div {command}".strip(), err)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
