"""``lightning-div report RUN_DIR --out report.html``: one self-contained HTML page of a run.

The page itself is built by :func:`lightning_div.report.build_report`; this module is its command line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lightning_div.cli.common import Parser, UsageError, say


def build_parser(prog: str = "lightning-div report") -> Parser:
    """``lightning-div report``'s arguments."""
    p = Parser(prog=prog, description="One self-contained HTML page of a run, from what it wrote to disk.")
    p.add_argument("run_dir", help="a run's default_root_dir (its latest logger version is used) or a version folder")
    p.add_argument("--out", default="report.html", help="the HTML file to write (default report.html)")
    return p


def execute(args: argparse.Namespace) -> int:
    """Write the report of ``args.run_dir`` to ``args.out``.

    Args:
        args: what :func:`build_parser` parsed.

    Returns:
        The exit code, 0.

    Raises:
        UsageError: ``run_dir`` does not exist or is not a directory.
    """
    from lightning_div._internal.tracking import write_atomic
    from lightning_div.report import build_report, find_run

    run_dir = Path(args.run_dir)
    if not run_dir.exists():
        raise UsageError(f"{run_dir}: no such directory")
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: not a directory (give a run's default_root_dir or a logger version folder)")
    page = build_report(run_dir)
    write_atomic(Path(args.out), lambda f: f.write(page))
    say(f"report of {find_run(run_dir).version} written to {args.out} ({len(page) // 1024} KiB)")
    return 0
