"""When a tqdm bar of the package is drawn: on a terminal or in a notebook, never into a log file.

A bar redraws one line with carriage returns; written to a file (``python train.py > log``, a
cluster's job log, CI) each redraw is another piece of one endless line. ``show_progress=True``
therefore means "draw where it can be seen": tqdm's own ``disable=None`` test (its output stream
is a terminal; a notebook's widget bars always draw). ``PlainProgress`` writes plain lines there.
"""

from __future__ import annotations


def bar_disabled(show: bool) -> bool | None:
    """tqdm's ``disable`` for a bar the caller wants shown when ``show``.

    Args:
        show: whether the caller asked for a bar (``show_progress``).

    Returns:
        ``True`` (no bar) when not asked; ``None`` when asked: tqdm then draws it only when its
        stream is a terminal (a Jupyter notebook's bar always).

    Examples:
        >>> bar_disabled(False), bar_disabled(True)
        (True, None)
    """
    return None if show else True
