"""The error for an optional package that is not installed: it names the extra that brings it."""

from __future__ import annotations

__all__ = ["missing_extra"]


def missing_extra(package: str, what: str) -> ImportError:
    """The error for an optional package of the ``demo`` extra that is not installed."""
    return ImportError(
        f"{what} needs the package {package!r}, which comes with the demo extra: "
        f'pip install "lightning-div[demo]" (or pip install {package})'
    )
