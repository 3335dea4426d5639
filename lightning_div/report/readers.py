"""A run's scalars: a CSVLogger's ``metrics.csv`` or TensorBoard's event files, as (epoch, step, value) per metric; a bad line becomes a note."""

from __future__ import annotations

import contextlib
import csv
import math
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

from lightning_div.report.files import event_files

# the csv module refuses fields over 128 KiB by default: our own files hold whole gold responses
_FIELD_LIMIT = 2**31 - 1


@contextlib.contextmanager
def _large_fields() -> Iterator[None]:
    """The csv module's field size limit raised for our own files, then put back (it is process-wide)."""
    before = csv.field_size_limit(_FIELD_LIMIT)
    try:
        yield
    finally:
        csv.field_size_limit(before)


def csv_rows(path: Path) -> list[list[str]]:
    with _large_fields(), open(path, newline="", encoding="utf-8", errors="replace") as f:
        return list(csv.reader(f))


def read_metrics(path: Path, notes: list[str]) -> dict[str, list[tuple[float, float, float]]]:
    """Per metric, its (epoch, step, value) points from a CSVLogger file; torn or bad lines become notes."""
    series: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    rows = csv_rows(path)
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
    (:func:`~lightning_div.report.build_report` gives the files it admitted: a link out of the run is never opened). Each
    file is read with TensorBoard's own ``EventAccumulator``, every point kept (its default samples
    10,000 per tag). Lightning logs ``epoch`` beside every scalar at the same step, a Hugging Face
    ``Trainer`` ``train/epoch``: a point's epoch is that of the epoch point at its step written
    closest in time (NaN in a log without one). A file that cannot be opened, holds no event (empty,
    or not an event file) or that TensorBoard cannot read becomes a note, not an error.
    """
    from tensorboard.backend.event_processing import event_accumulator

    files = event_files(source) if isinstance(source, Path) else list(source)
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
