"""``lightning-div``: one dispatcher for every subcommand, one error handler.

    lightning-div fit --config configs/demo.yaml
    lightning-div score generated.txt --gold gold.txt --output scores.json
    lightning-div clusters fit --data train.jsonl --out clusters.npz
    lightning-div report runs/demo --out report.html
    lightning-div pairs pools.jsonl --out pairs.jsonl
    lightning-div meta-eval --data mcdiv_con.csv --metrics sent_bert

``fit`` / ``validate`` / ``test`` / ``predict`` are LightningCLI's; the others train nothing and
never import Lightning, so they (and ``--help``) start in about a second. Each subcommand's
module is imported only when it runs. Every user mistake is one line on stderr and exit code 2
(:func:`lightning_div.cli.common.run_command`).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NamedTuple

from lightning_div.cli.common import Parser, UsageError, mistake, progress_bars_hidden, run_command


class Command(NamedTuple):
    """A subcommand: the module that implements it and its one-line description."""

    module: str
    help: str


# The subcommands LightningCLI runs (lightning_div.cli.train); the Trainer method of the same name.
TRAINING = ("fit", "validate", "test", "predict")

COMMANDS = {
    "fit": Command("lightning_div.cli.train", "train from a YAML config, with the monitors (LightningCLI)"),
    "validate": Command("lightning_div.cli.train", "run validation once: the monitors on a model as it is"),
    "test": Command("lightning_div.cli.train", "run the test loop once (LightningCLI)"),
    "predict": Command("lightning_div.cli.train", "run predict_step over a dataset (LightningCLI)"),
    "score": Command("lightning_div.cli.score", "score files of generated responses with every metric"),
    "clusters": Command("lightning_div.cli.clusters", "fit semantic clusters, show their cards, assign responses"),
    "pairs": Command("lightning_div.cli.pairs", "DPO preference pairs (DivPO's rule) from pools of responses"),
    "report": Command("lightning_div.cli.report", "one self-contained HTML page of a run"),
    "meta-eval": Command("lightning_div.cli.meta_eval", "decTest / conTest of diversity metrics (Tevet & Berant)"),
}


def build_parser() -> Parser:
    """The top-level parser: ``--help`` lists every subcommand; the subcommands parse their own arguments."""
    from lightning_div import __version__

    width = max(map(len, COMMANDS)) + 2
    listing = "\n".join(f"  {name.ljust(width)}{command.help}" for name, command in COMMANDS.items())
    p = Parser(
        prog="lightning-div",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Dialogue diversity: train with the monitors, score files, inspect clusters.\n\n"
        f"commands:\n{listing}",
        epilog="'lightning-div COMMAND --help' describes a command's options.\n"
        "A user mistake is one line on stderr and exit code 2;\n"
        "LIGHTNING_DIV_TRACEBACK=1 prints its traceback too.",
    )
    p.add_argument("--version", action="version", version=f"lightning-div {__version__}")
    # the subcommands' own parsers are built (and their modules imported) only when they run
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True, help="one of the commands above")
    for name in COMMANDS:
        sub.add_parser(name, add_help=False)
    return p


def dispatch(argv: list[str], from_sys_argv: bool = False) -> int:
    """Run the subcommand ``argv[0]`` with ``argv[1:]`` under the one error handler.

    Args:
        argv: the arguments without the program name.
        from_sys_argv: ``argv`` is ``sys.argv[1:]`` (LightningCLI then reads it itself, without
            its warning about arguments given twice).

    Returns:
        The exit code.
    """
    try:
        name = build_parser().parse_args(argv[:1]).command
    except UsageError as err:
        return mistake("lightning-div", err)
    prog = f"lightning-div {name}"
    if name in TRAINING:
        try:
            from lightning_div.cli.train import run_lightning, training_user_errors
        except ImportError as err:  # LIGHTNING_DIV_LIGHTNING names no Lightning package: a mistake, not a bug
            if "LIGHTNING_DIV_LIGHTNING" not in str(err):
                raise
            return mistake(prog, err)

        return run_command(prog, lambda: run_lightning(name, argv[1:], from_sys_argv), training_user_errors())
    module = importlib.import_module(COMMANDS[name].module)

    def work() -> int:
        args: argparse.Namespace = module.build_parser(prog).parse_args(argv[1:])
        check = getattr(module, "check_arguments", None)
        if check is not None:  # a mistake in the arguments is said before any model library is imported
            check(args)
        # --quiet: no bars at all, transformers' own "Loading weights" bar included
        with progress_bars_hidden(bool(getattr(args, "quiet", False))):
            return int(module.execute(args))

    return run_command(prog, work)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``lightning-div`` console script.

    Args:
        argv: the arguments without the program name (None = ``sys.argv[1:]``).

    Returns:
        The exit code: 0, or 2 for a user mistake (one line on stderr). ``--help`` and
        ``--version`` return 0 instead of exiting. A bug raises: the console script prints its
        traceback and exits with code 1.
    """
    try:
        return dispatch(list(sys.argv[1:] if argv is None else argv), from_sys_argv=argv is None)
    except SystemExit as done:  # --help, --version, LightningCLI's --print_config: a code, not an exit
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        print(done.code, file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
