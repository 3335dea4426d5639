"""The ``lightning-div`` command: one dispatcher (:mod:`lightning_div.cli.main`) for ``fit`` / ``validate`` /
``test`` / ``predict`` (LightningCLI), ``score``, ``clusters``, ``report`` and ``meta-eval``."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """``lightning-div``'s entry point (see :func:`lightning_div.cli.main.main`)."""
    from lightning_div.cli.main import main as _main

    return _main(argv)
