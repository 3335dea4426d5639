"""``lightning-div report RUN_DIR --out report.html``: one self-contained HTML page of a run.

The page itself is built by :func:`lightning_div.report.build_report`; this module is its command line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lightning_div.cli.common import Parser, UsageError, refuse_overwriting_inputs, say


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

    The folders of ``--out`` that do not exist are created, and the message says so.

    Raises:
        UsageError: ``run_dir`` does not exist or is not a directory; ``--out`` is a directory or
            one of the files the report reads (``metrics.csv``, an event file, a figure or table, ``config.yaml``).
    """
    from lightning_div._internal.io import atomic_write_with
    from lightning_div.report import build_report, find_run, run_inputs

    run_dir, out = Path(args.run_dir), Path(args.out)
    if not run_dir.exists():
        raise UsageError(f"{run_dir}: no such directory")
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir}: not a directory (give a run's default_root_dir or a logger version folder)")
    if out.is_dir():
        raise UsageError(f"--out {out} is a directory; give the HTML file to write, e.g. {out / 'report.html'}")
    run = find_run(run_dir)
    refuse_overwriting_inputs([("--out", args.out)], [("", str(p)) for p in run_inputs(run)])
    existing = next((d for d in [out.parent, *out.parent.parents] if d.exists()), None)
    created = out.parent if existing != out.parent else None  # atomic_write_with makes the missing folders
    page = build_report(run_dir)
    atomic_write_with(out, lambda f: f.write(page))
    made = f"; created the folder {created}" if created is not None else ""
    say(f"report of {run.version} written to {args.out} ({len(page) // 1024} KiB{made})")
    return 0
