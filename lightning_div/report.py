"""``lightning-div report RUN_DIR --out report.html``: one self-contained HTML page of a run.

The page is built only from what the callbacks and loggers wrote to disk: the
CSVLogger's ``metrics.csv`` or, in a run without one, the TensorBoardLogger's event files
(``events.out.tfevents.*``, Lightning's default logger; read with TensorBoard's own
``EventAccumulator``), the artifact folder ``<log_dir>/lightning_div`` (PNG
figures and CSV tables named ``<key>_epoch<N>``, ``cluster_cards.csv``,
``cluster_shares.csv``) and the ``config.yaml`` LightningCLI saves. So it works on
any run, including one that crashed halfway (a torn last line of ``metrics.csv`` is
reported on the page, not fatal). Images are embedded as base64 PNG and there are
no scripts or external resources: the file can be mailed, attached to a pull
request or opened offline.

``RUN_DIR`` is a run's ``default_root_dir`` (e.g. ``runs/demo``), where the most
recently written logger version below it is taken, or one version folder. A Hugging Face
``Trainer`` / TRL run is reported from its ``output_dir``: the figures and tables of
``<output_dir>/lightning_div`` (named ``<key>_step<N>``) and the scalars of the latest
TensorBoard run below it (``report_to="tensorboard"`` writes ``<output_dir>/runs/<date>/``).

Only files inside ``RUN_DIR`` are read: a path that resolves outside it (a symlinked version
folder, a ``config.yaml`` linking to ``/etc/passwd``) is skipped and named in the page's notes,
and the search for ``config.yaml`` / ``hparams.yaml`` climbs from the version folder no higher
than ``RUN_DIR``. Text is never parsed as math by matplotlib (a metric named ``$x_{``), CSV cells
of any size are read (long gold responses) and shown cut to :data:`MAX_CELL_CHARS`, and a PNG
is embedded only when it decodes whole (a torn one is named in the notes).
"""

from __future__ import annotations

import base64
import contextlib
import csv
import datetime as _dt
import functools
import html
import io
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from lightning_div.keys import CLUSTER_CARDS_FILE, CLUSTER_SHARES_FILE, HEADLINE_KEYS

_P = ParamSpec("_P")
_T = TypeVar("_T")

ARTIFACTS = "lightning_div"
# Lightning names a measurement's files by its epoch, the Hugging Face front ends by the step
ARTIFACT_NAME = re.compile(r"^(?P<key>.+)_(?P<unit>epoch|step)(?P<epoch>\d+)\.(?P<ext>png|csv)$")
MAX_TABLE_ROWS = 200
MAX_CELL_CHARS = 2_000  # a table cell shows this many characters of a longer text
# the csv module refuses fields over 128 KiB by default: our own files hold whole gold responses
_FIELD_LIMIT = 2**31 - 1
STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;color:#1f2933;
padding:0 1rem}h1{font-size:1.6rem}h2{border-bottom:2px solid #e4e7eb;padding-bottom:.3rem;margin-top:2.2rem}
h3{font-size:1.05rem;margin-top:1.4rem}table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0 1rem;width:100%}
th,td{border:1px solid #d9dee3;padding:.3rem .45rem;text-align:left;vertical-align:top}th{background:#f0f2f5}
td.num{text-align:right;font-variant-numeric:tabular-nums}img{max-width:100%;display:block;margin:.5rem 0}
pre{background:#f5f7fa;padding:.8rem;overflow-x:auto;font-size:.8rem}.note{color:#7b8794;font-size:.85rem}
nav a{margin-right:1rem}
"""


@dataclass
class RunFiles:
    """What a run left on disk (only paths inside ``root``; the others are named in ``skipped``)."""

    root: Path
    version: Path
    metrics_csv: Path | None
    artifacts: Path | None
    events: list[Path] = field(default_factory=list)
    events_dir: Path | None = None
    configs: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def admit(self, path: Path) -> bool:
        """Whether ``path`` resolves inside the run folder; one that does not is noted in ``skipped``."""
        return _admit(path, self.root, self.skipped)


def _admit(path: Path, root: Path, skipped: list[str]) -> bool:
    """Whether ``path`` resolves inside ``root`` (resolved too); else a note in ``skipped`` and False."""
    target = path.resolve()
    if target.is_relative_to(root.resolve()):
        return True
    note = f"skipped {path} (a link to {target}, outside the run folder {root})"
    if note not in skipped:
        skipped.append(note)
    return False


EVENT_FILES = "events.out.tfevents.*"


def _event_files(d: Path) -> list[Path]:
    return sorted(p for p in d.glob(EVENT_FILES) if p.is_file())


def _ours(d: Path) -> bool:
    """A CSVLogger's or the lightning-div callbacks' folder (preferred over a TensorBoard-only one)."""
    return (d / "metrics.csv").is_file() or (d / ARTIFACTS).is_dir()


def _is_version(d: Path) -> bool:
    return _ours(d) or bool(_event_files(d))


def _written_at(d: Path) -> float:
    times = [p.stat().st_mtime for p in [d / "metrics.csv", d / ARTIFACTS, *_event_files(d)] if p.exists()]
    if (d / ARTIFACTS).is_dir():
        times += [p.stat().st_mtime for p in (d / ARTIFACTS).iterdir()]
    return max(times, default=0.0)


def find_run(run_dir: str | Path) -> RunFiles:
    """The version folder of ``run_dir`` to report: itself, or the most recently written one below it.

    A version folder holds a ``metrics.csv``, a ``lightning_div/`` folder of figures or TensorBoard
    event files. Below ``run_dir``, one with a ``metrics.csv`` or figures is preferred: a run logging
    to CSV and TensorBoard (the demo) writes them to two folders, and the figures are in the first.
    Only folders and files that resolve inside ``run_dir`` are taken (the others are in ``skipped``).
    """
    root = Path(run_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such run directory")
    skipped: list[str] = []
    if _is_version(root):
        version = root
    else:
        found = [d for d in root.rglob("*") if d.is_dir() and d.name != ARTIFACTS and _is_version(d)]
        found = [d for d in found if _admit(d, root, skipped)]
        if not found:
            raise ValueError(
                f"{root}: no run below it (no metrics.csv from a CSVLogger, no TensorBoard event files and no "
                f"{ARTIFACTS}/ folder of lightning-div figures); give a run's default_root_dir or one logger version folder"
                + "".join(f"; {note}" for note in skipped)
            )
        version = max(found, key=lambda d: (_ours(d), _written_at(d), str(d)))
    run = RunFiles(root=root, version=version, metrics_csv=None, artifacts=None, skipped=skipped)
    metrics, artifacts = version / "metrics.csv", version / ARTIFACTS
    run.metrics_csv = metrics if metrics.is_file() and run.admit(metrics) else None
    run.artifacts = artifacts if artifacts.is_dir() and run.admit(artifacts) else None
    run.events = [p for p in _event_files(version) if run.admit(p)]
    run.events_dir = version if run.events else None
    if run.metrics_csv is None and not run.events:
        _tensorboard_below(run)
    # LightningCLI saves config.yaml beside the logs: from the version folder up to the run folder, no higher
    folder = version
    while True:
        run.configs += [p for p in (folder / "config.yaml", folder / "hparams.yaml") if p.is_file() and run.admit(p)]
        if folder == root or folder.parent == folder:
            break
        folder = folder.parent
    return run


def _tensorboard_below(run: RunFiles) -> None:
    """A Hugging Face / TRL ``output_dir``: its ``lightning_div/`` folder makes it the version, and its
    scalars are in the TensorBoard run below it (``runs/<date>/``); the most recently written one is read,
    the others named in ``skipped``."""
    found = [
        d
        for d in sorted(run.version.rglob("*"))
        if d.is_dir() and d.name != ARTIFACTS and _event_files(d) and run.admit(d)
    ]
    if not found:
        return
    latest = max(found, key=lambda d: (_written_at(d), str(d)))
    run.events_dir = latest
    run.events = [p for p in _event_files(latest) if run.admit(p)]
    others = [str(d.relative_to(run.version)) for d in found if d != latest]
    if others:
        run.skipped.append(
            f"scalars from the latest TensorBoard run {latest.relative_to(run.version)}; not shown: "
            + ", ".join(others)
            + " (give one of them as RUN_DIR to see its scalars)"
        )


def run_inputs(run: RunFiles) -> list[Path]:
    """Every file of ``run`` the report reads: a page written over one of them would destroy it."""
    files = [*([run.metrics_csv] if run.metrics_csv else []), *run.events, *run.configs]
    if run.artifacts is not None:
        files += sorted(p for p in run.artifacts.iterdir() if p.is_file())
    return files


@contextlib.contextmanager
def _large_fields() -> Iterator[None]:
    """The csv module's field size limit raised for our own files, then put back (it is process-wide)."""
    before = csv.field_size_limit(_FIELD_LIMIT)
    try:
        yield
    finally:
        csv.field_size_limit(before)


def _csv_rows(path: Path) -> list[list[str]]:
    with _large_fields(), open(path, newline="", encoding="utf-8", errors="replace") as f:
        return list(csv.reader(f))


def read_metrics(path: Path, notes: list[str]) -> dict[str, list[tuple[float, float, float]]]:
    """Per metric, its (epoch, step, value) points from a CSVLogger file; torn or bad lines become notes."""
    series: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    rows = _csv_rows(path)
    if not rows:
        notes.append(f"{path.name} is empty")
        return {}
    header = rows[0]
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            notes.append(
                f"{path.name} line {number} has {len(row)} of {len(header)} fields (a run stopped while "
                "writing it?) and was left out"
            )
            continue
        record = dict(zip(header, row))
        try:
            epoch = float(record.get("epoch") or "nan")
            step = float(record.get("step") or "nan")
        except ValueError:
            notes.append(f"{path.name} line {number}: epoch/step are not numbers; left out")
            continue
        if math.isinf(epoch) or math.isinf(step):
            notes.append(
                f"{path.name} line {number}: epoch = {record.get('epoch')!r}, step = {record.get('step')!r} "
                "is not a finite number; left out"
            )
            continue
        for name, cell in record.items():
            if name in ("epoch", "step") or cell == "":
                continue
            try:
                value = float(cell)
            except ValueError:
                notes.append(f"{path.name} line {number}: {name} = {cell!r} is not a number; left out")
                continue
            series[name].append((epoch, step, value))
    return dict(series)


def read_tensorboard(source: Path | Sequence[Path], notes: list[str]) -> dict[str, list[tuple[float, float, float]]]:
    """Per scalar tag, its (epoch, step, value) points from TensorBoard event files.

    ``source`` is the event files to read, or a folder whose ``events.out.tfevents.*`` files are read
    (:func:`build_report` gives the files it admitted: a link out of the run is never opened). Each
    file is read with TensorBoard's own ``EventAccumulator``, every point kept (its default samples
    10,000 per tag). Lightning logs ``epoch`` beside every scalar at the same step, a Hugging Face
    ``Trainer`` ``train/epoch``: a point's epoch is that of the epoch point at its step written
    closest in time (NaN in a log without one). A file that cannot be opened, holds no event (empty,
    or not an event file) or that TensorBoard cannot read becomes a note, not an error.
    """
    from tensorboard.backend.event_processing import event_accumulator

    files = _event_files(source) if isinstance(source, Path) else list(source)
    points: dict[str, list[tuple[float, int, float]]] = defaultdict(list)
    for path in files:
        try:
            with open(path, "rb") as f:
                f.read(1)
        except OSError as err:
            notes.append(f"the TensorBoard event file {path.name} could not be read ({err.strerror or err}); left out")
            continue
        try:
            acc = event_accumulator.EventAccumulator(str(path), size_guidance={event_accumulator.SCALARS: 0})
            acc.Reload()
            try:
                acc.FirstEventTimestamp()
            except ValueError:  # TensorBoard's way of saying the file held no event at all
                notes.append(
                    f"the TensorBoard event file {path.name} holds no event (empty, or not an event file); left out"
                )
                continue
            for tag in acc.Tags().get(event_accumulator.SCALARS, []):
                points[tag] += [(e.wall_time, e.step, e.value) for e in acc.Scalars(tag)]
        except Exception as err:  # a torn or foreign file: the rest of the page still comes
            notes.append(f"the TensorBoard event file {path.name} could not be read ({type(err).__name__}: {err})")
    epoch_tag = "epoch" if "epoch" in points else "train/epoch"  # Lightning's, else the Trainer's (eval_ -> eval/)
    epochs_at: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for wall, step, value in points.pop(epoch_tag, []):
        epochs_at[step].append((wall, value))
    if all(value == -1 for _, _, value in points.get("hp_metric", [])):  # TensorBoardLogger's placeholder
        points.pop("hp_metric", None)

    def epoch_of(wall: float, step: int) -> float:
        near = epochs_at.get(step)
        return min(near, key=lambda p: abs(p[0] - wall))[1] if near else math.nan

    return {
        tag: [
            (epoch_of(wall, step), float(step), float(value))
            for wall, step, value in sorted(pts, key=lambda p: (p[1], p[0]))
        ]
        for tag, pts in points.items()
        if pts
    }


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


def latest_artifacts(run: RunFiles) -> tuple[dict[str, tuple[int, Path]], dict[str, tuple[int, Path]]]:
    """(figures, tables): per key, the file of its latest epoch (``_step<N>``: step, the Hugging Face
    front ends' naming), files inside the run folder only."""
    figures: dict[str, tuple[int, Path]] = {}
    tables: dict[str, tuple[int, Path]] = {}
    if run.artifacts is None:
        return figures, tables
    for p in sorted(run.artifacts.iterdir()):
        m = ARTIFACT_NAME.match(p.name)
        if not m or not p.is_file() or not run.admit(p):
            continue
        target = figures if m["ext"] == "png" else tables
        epoch = int(m["epoch"])
        if m["key"] not in target or epoch > target[m["key"]][0]:
            target[m["key"]] = (epoch, p)
    return figures, tables


def cluster_groups(folder: Path | None) -> list[str]:
    """The file-name prefixes of the semantic monitors that wrote cluster files: ``""`` for an
    unnamed one, ``"<name>_"`` for one with a ``name`` (its ``<name>_cluster_cards.csv`` and
    ``<name>_cluster_shares.csv``, beside its ``<name>_val_cluster_*`` figures), sorted."""
    if folder is None:
        return []
    prefixes = set()
    for p in folder.iterdir():
        for suffix in (CLUSTER_CARDS_FILE, CLUSTER_SHARES_FILE):
            if p.is_file() and p.name.endswith(suffix) and (p.name == suffix or p.name.endswith("_" + suffix)):
                prefixes.add(p.name[: -len(suffix)])
    return sorted(prefixes)


def _unit(path: Path) -> str:
    """``epoch`` or ``step``: what the number in an artifact's name counts."""
    m = ARTIFACT_NAME.match(path.name)
    return m["unit"] if m else "epoch"


def _img(data: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode("ascii")}">'


def _shown(value: str) -> str:
    """A cell's text for the page: cut to :data:`MAX_CELL_CHARS`, saying so."""
    if len(value) <= MAX_CELL_CHARS:
        return value
    return f"{value[:MAX_CELL_CHARS]}… ({len(value):,} characters, the first {MAX_CELL_CHARS:,} shown)"


def _table(path: Path, notes: list[str], caption: str = "") -> str:
    try:
        rows = _csv_rows(path)
    except OSError as err:
        notes.append(f"{path.name} could not be read: {err}")
        return ""
    if not rows:
        return f'<p class="note">{html.escape(path.name)} is empty</p>'
    head, body = rows[0], rows[1:]
    shown = body[:MAX_TABLE_ROWS]

    def cell(value: str) -> str:
        try:
            float(value)
            return f'<td class="num">{html.escape(value)}</td>'
        except ValueError:
            return f"<td>{html.escape(_shown(value))}</td>"

    parts = [f'<table data-source="{html.escape(path.name)}">']
    if caption:
        parts.append(f"<caption>{html.escape(caption)}</caption>")
    parts.append("<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>")
    parts += ["<tr>" + "".join(cell(c) for c in r) + "</tr>" for r in shown]
    parts.append("</table>")
    if len(body) > len(shown):
        parts.append(f'<p class="note">first {len(shown)} of {len(body)} rows of {html.escape(path.name)}</p>')
    return "\n".join(parts)


def _section(title: str, anchor: str, body: Sequence[str]) -> str:
    content = "\n".join(b for b in body if b)
    return f'<section id="{anchor}"><h2>{html.escape(title)}</h2>\n{content}\n</section>' if content else ""


def _figure(key: str, epoch: int, path: Path, notes: list[str]) -> str:
    try:
        data = path.read_bytes()
    except OSError as err:
        notes.append(f"{path.name} could not be read: {err}")
        return ""
    if not data.startswith(b"\x89PNG"):
        notes.append(f"{path.name} is not a PNG image (torn write?); left out")
        return ""
    problem = _png_problem(data)
    if problem:
        notes.append(f"{path.name} is not a complete PNG image ({problem}; torn write?); left out")
        return ""
    return f'<h3>{html.escape(key)} <span class="note">({_unit(path)} {epoch})</span></h3>\n{_img(data, key)}'


def _png_problem(data: bytes) -> str | None:
    """Why ``data`` does not decode as a whole PNG (a browser would show a broken image), or None."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()  # decodes every row: a file cut short fails here, not only in the browser
    except Exception as err:  # any decoder failure means the same: the image cannot be shown
        return f"{type(err).__name__}: {err}"
    return None


class _Artifacts:
    """The latest figure and table of each key; each is shown by the first section that takes it."""

    def __init__(self, run: RunFiles, notes: list[str]) -> None:
        self.figures, self.tables = latest_artifacts(run)
        self.notes = notes
        self.used: set[str] = set()

    def take(self, prefixes: Sequence[str], kind: str) -> list[str]:
        """The HTML of the not yet shown ``kind`` ("png" or "csv") artifacts whose key starts with a prefix."""
        source = self.figures if kind == "png" else self.tables
        out = []
        for key in sorted(source):
            if key in self.used or not any(key.startswith(p) for p in prefixes):
                continue
            self.used.add(key)
            epoch, path = source[key]
            name = key.replace("_", "/", 1)
            if kind == "png":
                out.append(_figure(name, epoch, path, self.notes))
            else:
                heading = f'<h3>{html.escape(name)} <span class="note">({_unit(path)} {epoch})</span></h3>\n'
                out.append(heading + _table(path, self.notes))
        return out


def _summary(series: dict[str, list[tuple[float, float, float]]]) -> list[str]:
    """The last value and epoch of each headline metric the run logged."""
    last = {name: points[-1] for name, points in series.items()}
    keys = [k for k in HEADLINE_KEYS if k in last]
    if not keys:
        return []
    rows = "".join(
        f'<tr><td>{html.escape(k)}</td><td class="num">{last[k][2]:.4f}</td><td class="num">{last[k][0]:g}</td></tr>'
        for k in keys
    )
    return [f'<table id="summary"><tr><th>metric</th><th>last value</th><th>epoch</th></tr>{rows}</table>']


def _cluster_parts(run: RunFiles, artifacts: _Artifacts, notes: list[str]) -> list[str]:
    """The cluster cards, the share figures and the shares over epochs, one group per semantic monitor.

    Each monitor's files carry its name (``<name>_cluster_cards.csv`` beside its
    ``<name>_val_cluster_*`` figures), so two monitors' cards and shares are never paired.
    """
    folder = run.artifacts

    def admitted(path: Path) -> bool:
        return path.is_file() and run.admit(path)

    def group(prefix: str) -> list[str]:
        assert folder is not None  # only called with the groups found in it
        cards, shares = folder / f"{prefix}{CLUSTER_CARDS_FILE}", folder / f"{prefix}{CLUSTER_SHARES_FILE}"
        return [
            f"<h3>{html.escape(prefix[:-1])}/</h3>" if prefix else "",
            _table(cards, notes, "cluster cards") if admitted(cards) else "",
            # a Lightning monitor's val/cluster_*; a Hugging Face Trainer's eval/cluster_* (prefix "eval_")
            *artifacts.take([f"{prefix}{v}cluster_{f}" for v in ("val_", "") for f in ("shares", "histogram")], "png"),
            ("<h3>generated and gold share per cluster and epoch</h3>\n" + _table(shares, notes))
            if admitted(shares)
            else "",
        ]

    groups = cluster_groups(folder)
    with_cards = folder is not None and any(admitted(folder / f"{p}{CLUSTER_CARDS_FILE}") for p in groups)
    return [
        "<p>Each cluster described by the gold responses it holds: share, most distinctive words and "
        "2-grams, the responses nearest its centroid.</p>"
        if with_cards
        else "",
        *[part for prefix in groups for part in group(prefix)],
        *artifacts.take(["val_cluster_shares", "val_cluster_histogram"], "png"),
    ]


def _page(run: RunFiles, series: dict[str, list[tuple[float, float, float]]], sections: Sequence[str]) -> str:
    """The HTML document around the sections: title, the epochs measured, a navigation bar."""
    present = [s for s in sections if s]
    headings = re.findall(r'<section id="([^"]+)"><h2>([^<]+)', "".join(present))
    nav = " ".join(f'<a href="#{m}">{t}</a>' for m, t in headings)  # t is escaped already, in its heading
    generated = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    epochs = sorted({int(e) for pts in series.values() for e, _, _ in pts if math.isfinite(e)})
    span = f"epochs {epochs[0]}-{epochs[-1]}" if epochs else "no epoch measured"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>lightning-div report: {html.escape(str(run.version))}</title><style>{STYLE}</style></head><body>"
        f'<h1>lightning-div report</h1><p class="note">{html.escape(str(run.version))} · {span} · '
        f"generated {generated}</p><nav>{nav}</nav>\n" + "\n".join(present) + "\n</body></html>\n"
    )


def build_report(run_dir: str | Path) -> str:
    """The HTML page of the run in ``run_dir`` (see the module doc)."""
    run = find_run(run_dir)
    notes: list[str] = []
    if run.metrics_csv is not None:
        series = read_metrics(run.metrics_csv, notes)
    elif run.events:
        series = read_tensorboard(run.events, notes)
    else:
        series = {}
        notes.append(
            "no metrics.csv and no TensorBoard event files (the run had neither logger; a Hugging Face / TRL "
            'run writes them with report_to="tensorboard"): no scalar plots'
        )
    artifacts = _Artifacts(run, notes)
    if run.artifacts is None:
        notes.append(f"no {ARTIFACTS}/ folder: no figures or tables from the lightning-div callbacks")
        # RUN_DIR given as a Hugging Face run's runs/<date>: its figures are two folders up, outside RUN_DIR
        above = [d for d in Path(run_dir).resolve().parents[:2] if (d / ARTIFACTS).is_dir()]
        if above:
            notes.append(
                f"{above[0] / ARTIFACTS} holds lightning-div figures and tables of this run: give {above[0]} "
                "(the Trainer's output_dir) as RUN_DIR to see them with these scalars"
            )
    sections = [
        _section("Summary", "summary-section", _summary(series)),
        _section(
            "Scalars over training",
            "scalars",
            [f"<h3>{html.escape(g)}/*</h3>\n{_img(png, g)}" for g, png in scalar_figures(series)],
        ),
        _section("Semantic clusters", "clusters", _cluster_parts(run, artifacts, notes)),
        _section(
            'RUQ: does the model prefer "I don\'t know"?',
            "ruq",
            artifacts.take(["val_ruq", "train_ruq", "eval_ruq"], "png")
            + artifacts.take(["val_ruq", "train_ruq", "eval_ruq"], "csv"),
        ),
        _section(
            "Sample responses",
            "samples",
            artifacts.take(["val_samples", "train_samples", "eval_samples", "diversity_group_sample"], "csv"),
        ),
        _section("DRESS", "dress", artifacts.take(["dress"], "png") + artifacts.take(["dress"], "csv")),
        _section("Other figures and tables", "other", artifacts.take([""], "png") + artifacts.take([""], "csv")),
        _section(
            "Configuration",
            "config",
            [
                f"<h3>{html.escape(p.name)}</h3><pre>{html.escape(p.read_text(errors='replace'))}</pre>"
                for p in run.configs
            ],
        ),
    ]
    notes += run.skipped  # links out of the run folder, found while the sections were read
    notes_html = [f"<ul>{''.join(f'<li>{html.escape(n)}</li>' for n in notes)}</ul>"] if notes else []
    return _page(run, series, [*sections, _section("Notes", "notes", notes_html)])
