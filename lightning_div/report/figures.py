"""The report's scalar plots, one PNG per group of metrics (text never parsed as math)."""

from __future__ import annotations

import functools
import io
import math
from collections import defaultdict
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)  # laid out by tight_layout already: a second tight pass doubled the drawing
    plt.close(fig)
    return buf.getvalue()


def _text_not_math(draw: Callable[_P, _T]) -> Callable[_P, _T]:
    """``draw`` with matplotlib's mathtext off: a metric named ``$x_{`` is text, not a formula that fails to parse."""

    @functools.wraps(draw)
    def drawn(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        import matplotlib

        with matplotlib.rc_context({"text.parse_math": False}):
            return draw(*args, **kwargs)

    return drawn


def _fixed_layout(fig: Any, rows: int, cols: int, width: float, height: float) -> None:
    """Margins and gaps in inches for ``rows`` x ``cols`` panels of ``width`` x ``height`` inches: room for a
    title, tick labels and an axis label each. ``tight_layout`` measured every text first, a whole extra
    drawing of the figure (about half a report's time on a Hugging Face run's 30 curves)."""
    total_w, total_h = width * cols, height * rows
    left, right, top, bottom, gap_w, gap_h = 0.6, 0.15, 0.3, 0.45, 0.65, 0.8
    axes_w = (total_w - left - right - gap_w * (cols - 1)) / cols
    axes_h = (total_h - top - bottom - gap_h * (rows - 1)) / rows
    fig.subplots_adjust(
        left=left / total_w,
        right=1 - right / total_w,
        top=1 - top / total_h,
        bottom=bottom / total_h,
        wspace=gap_w / axes_w,
        hspace=gap_h / axes_h,
    )


def _group_of(name: str) -> str:
    """The figure a scalar is drawn in: its first path part (``val``, ``train``, ``dress``, ...). A Hugging
    Face Trainer charts every training scalar under ``train/`` (``train/diversity/group_sem_ent``,
    ``train/rewards/...``) and every evaluation under ``eval/``: those with a further part are grouped
    by their first two parts, so that the ``diversity/*`` curves are one figure, not lost among 30."""
    parts = name.split("/")
    if len(parts) == 1:
        return "other"
    if parts[0] in ("train", "eval") and len(parts) > 2:
        return f"{parts[0]}/{parts[1]}"
    return parts[0]


@_text_not_math
def scalar_figures(series: dict[str, list[tuple[float, float, float]]]) -> list[tuple[str, bytes]]:
    """One PNG of small plots per metric group (val, train, dress, timing, ...): each metric over epochs
    (metrics logged once an epoch) or over steps (metrics logged more often)."""
    from lightning_div._internal.tracking import new_figure

    groups: dict[str, list[str]] = defaultdict(list)
    for name in sorted(series):
        groups[_group_of(name)].append(name)
    out = []
    for group, names in sorted(groups.items(), key=lambda kv: (kv[0] not in ("val", "train"), kv[0])):
        cols = min(3, len(names))
        rows = math.ceil(len(names) / cols)
        fig, axes = new_figure(rows, cols, figsize=(4.0 * cols, 2.6 * rows), squeeze=False)
        for ax, name in zip(axes.flat, names):
            points = series[name]
            epochs = [e for e, _, _ in points]
            # a Hugging Face Trainer's epochs are fractions of an epoch: those points are drawn over steps
            per_epoch = len(points) <= len(set(epochs)) and all(math.isfinite(e) and e.is_integer() for e in epochs)
            x = epochs if per_epoch else [s for _, s, _ in points]
            ax.plot(x, [v for _, _, v in points], marker="o" if len(points) <= 30 else None, markersize=3)
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("epoch" if per_epoch else "step", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.xaxis.get_major_locator().set_params(integer=True)  # epochs and steps are whole numbers
        for ax in list(axes.flat)[len(names) :]:
            ax.axis("off")
        _fixed_layout(fig, rows, cols, 4.0, 2.6)
        out.append((group, _png(fig)))
    return out


def png_problem(data: bytes) -> str | None:
    """Why ``data`` does not decode as a whole PNG (a browser would show a broken image), or None."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()  # decodes every row: a file cut short fails here, not only in the browser
    except Exception as err:  # any decoder failure means the same: the image cannot be shown
        return f"{type(err).__name__}: {err}"
    return None
