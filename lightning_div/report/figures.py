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


#: The groups drawn first, in this order: the diversity curves before the trainer's own.
GROUP_ORDER = ("diversity", "val", "eval", "train")
#: The alert keys' last parts, and the colour of their band.
ALERT_COLOURS = {"breakdown_alert": "#d64545", "collapse_alert": "#e8a33d", "ruq_alert": "#e8a33d"}


#: The panels of a group in this order (the rest after them, by name): the headline first, as the summary orders it.
PANEL_ORDER = (
    "group_sem_ent",
    "collapsed_groups",
    "group_clusters",
    "reference_nll",
    "length_cut_share",
    "group_top_word_share",
    "group_distinct_2",
    "loss",
    "sem_ent",
    "sem_ent_gold",
    "empty_share",
    "distinct_1",
    "distinct_2",
    "distinct_3",
    "ead",
)


def _panel_rank(name: str) -> tuple[int, str]:
    last = name.split("/")[-1]
    return (PANEL_ORDER.index(last) if last in PANEL_ORDER else len(PANEL_ORDER), name)


def is_alert(name: str) -> bool:
    """A 0/1 alert key (``diversity/breakdown_alert``, ``val/ruq_alert``): drawn as a band, not a panel."""
    return name.split("/")[-1] in ALERT_COLOURS or name.split("/")[-1].removeprefix("eval_") in ALERT_COLOURS


def group_rank(group: str) -> tuple[int, str]:
    """Where a group's figure goes: :data:`GROUP_ORDER` first (a named callback's ``diversity/<name>`` with
    ``diversity``), then the rest by name."""
    head = group.split("/")[0]
    return (GROUP_ORDER.index(head) if head in GROUP_ORDER else len(GROUP_ORDER), group)


def _on_spans(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The x ranges where an alert is 1: from its first 1 to the next 0 (or to its last point)."""
    spans, start, last_x = [], None, None
    for x, v in points:
        if v >= 0.5 and start is None:
            start = x
        elif v < 0.5 and start is not None:
            spans.append((start, x))
            start = None
        last_x = x
    if start is not None and last_x is not None:
        spans.append((start, last_x if last_x > start else start + 0.5))
    return spans


def _per_epoch(points: list[tuple[float, float, float]]) -> bool:
    epochs = [e for e, _, _ in points]
    # a Hugging Face Trainer's epochs are fractions of an epoch: those points are drawn over steps
    return len(points) <= len(set(epochs)) and all(math.isfinite(e) and e.is_integer() for e in epochs)


def drawn(series: dict[str, list[tuple[float, float, float]]]) -> list[str]:
    """The metrics drawn as panels: not the alerts (bands) and not those logged once (a single point is no curve)."""
    return [n for n in sorted(series, key=_panel_rank) if not is_alert(n) and len(series[n]) > 1]


@_text_not_math
def scalar_figures(series: dict[str, list[tuple[float, float, float]]]) -> list[tuple[str, bytes]]:
    """One PNG of small plots per metric group (diversity, val, eval, train, dress, timing, ...): each metric
    over epochs (metrics logged once an epoch) or over steps (metrics logged more often).

    A 0/1 alert (``*_alert``) is drawn as a shaded band on every panel of its group where it is on,
    named in the group's legend, not as a flat line; a metric logged once is not drawn (the page lists it)."""
    from lightning_div._internal.tracking import new_figure

    groups: dict[str, list[str]] = defaultdict(list)
    for name in drawn(series):
        groups[_group_of(name)].append(name)
    alerts: dict[str, list[str]] = defaultdict(list)
    for name in sorted(series):
        if is_alert(name):
            alerts[_group_of(name)].append(name)
    out = []
    for group, names in sorted(groups.items(), key=lambda kv: group_rank(kv[0])):
        cols = min(3, len(names))
        rows = math.ceil(len(names) / cols)
        fig, axes = new_figure(rows, cols, figsize=(4.0 * cols, 2.6 * rows), squeeze=False)
        for ax, name in zip(axes.flat, names):
            points = series[name]
            per_epoch = _per_epoch(points)
            x = [e for e, _, _ in points] if per_epoch else [s for _, s, _ in points]
            for alert in alerts.get(group, []):
                colour = ALERT_COLOURS.get(alert.split("/")[-1].removeprefix("eval_"), "#e8a33d")
                on = [((e if per_epoch else s), v) for e, s, v in series[alert]]
                for i, (a, b) in enumerate(_on_spans(on)):
                    label = f"{alert.split('/')[-1]} on" if i == 0 and ax is axes.flat[0] else None
                    ax.axvspan(a, b, color=colour, alpha=0.18, lw=0, label=label)
            ax.plot(x, [v for _, _, v in points], marker="o" if len(points) <= 30 else None, markersize=3)
            if ax is axes.flat[0] and ax.get_legend_handles_labels()[1]:
                ax.legend(fontsize=7, loc="best")
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
