"""What the generated results pages share: the hand-written reading a regeneration keeps, and ``--page``.

``--page`` (``divpo.py``, ``grpo_diversity.py``): no run, the page rewritten from its results.json, with
``--rescored`` (``experiments/rescore.py``'s results.json of the runs' saved replies) and ``--stored`` (an
earlier results.json of the same settings: the runs as stored before a rerun) when given.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

READING_START = "## Reading"


def kept_reading(path: Path) -> str:
    """The hand-written reading of an existing page: from its ``## Reading`` heading to the next ``## `` heading."""
    if not path.exists():
        return ""
    text = path.read_text(encoding="utf-8")
    start = text.find("\n" + READING_START)
    if start < 0:
        return ""
    end = text.find("\n## ", start + 1)
    return text[start + 1 : end if end >= 0 else len(text)]


def add_page_arguments(parser: argparse.ArgumentParser) -> None:
    """``--page``, ``--rescored`` and ``--stored`` on a script's parser (read by :func:`rebuild_if_asked`)."""
    parser.add_argument(
        "--page",
        action="store_true",
        help="no run: rewrite --out's page from --out/results.json, keeping its reading (with --rescored, "
        "--stored: their sections)",
    )
    parser.add_argument(
        "--rescored", type=Path, default=None, help="with --page: rescore.py's results.json of the runs' replies"
    )
    parser.add_argument(
        "--stored",
        type=Path,
        default=None,
        help="with --page: an earlier results.json of the same settings (the runs as stored before this rerun)",
    )


def rebuild_if_asked(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    script: str,
    rebuild: Callable[[Path, Path | None, Path | None], str],
) -> bool:
    """Check the ``--page`` arguments and, with ``--page``, rewrite the page: ``rebuild(out, rescored, stored)``.

    Returns:
        Whether the page was rewritten (the script then runs nothing else).

    A mistake is one line on stderr and exit code 2: ``--rescored`` / ``--stored`` without ``--page``,
    ``--page`` with ``--merge`` (argparse's usage above it), or a file ``rebuild`` refuses (``MergeError``).
    """
    from _merge import MergeError, fail

    if (args.rescored or args.stored) and not args.page:
        parser.error("--rescored and --stored go with --page")
    if not args.page:
        return False
    if getattr(args, "merge", None) is not None:
        parser.error("--page rewrites the page of a results.json made before: not with --merge")
    try:
        rebuild(args.out, args.rescored, args.stored)
    except MergeError as err:  # a user's mistake: one line, exit code 2
        fail(f"{script} --page", err)
    return True
