"""Logging scalars, figures and tables to whatever trackers the Trainer has.

Scalars go through ``pl_module.log`` so every logger receives them and
``EarlyStopping`` / ``ModelCheckpoint`` can monitor them. Figures and tables go to
the loggers that support them (TensorBoard, W&B, MLflow) and are always also
written to disk (PNG / CSV), so CSV-only runs keep them too. A tracker or a disk
that raises only costs a warning: a diversity plot is never worth a crashed run.
"""

from __future__ import annotations

import csv
import logging
import math
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_div._internal.io import atomic_write_with

log = logging.getLogger("lightning_div")

# The warnings a run has shown live in the run's own cache (the front end's RunMemory, entered with
# warnings_of_run); this variable only says which cache is in force, it holds none of its own.
_run_warned: ContextVar[set[str] | None] = ContextVar("lightning_div_run_warnings", default=None)


@contextmanager
def warnings_of_run(seen: set[str]) -> Iterator[None]:
    """Within the block, :func:`warn_once` deduplicates in ``seen`` (a callback's per-run ``WarningCache``).

    So a second run in the same process (a notebook, an in-process sweep) warns again about
    its own skipped measurements instead of being silent.

    Args:
        seen: the run's cache of warned keys (a ``WarningCache`` or any set).
    """
    token = _run_warned.set(seen)
    try:
        yield
    finally:
        _run_warned.reset(token)


def warn_once(key: str, message: str) -> None:
    """A RuntimeWarning shown once per run and key (inside :func:`warnings_of_run`); outside a run, at every call.

    Deduplicated by ``key``, not by the message as ``WarningCache.warn`` does: a message carries
    details (the epoch, the error) that change while it is still the same warning. Shown on
    global rank 0 only (Lightning's ``rank_zero_warn``): N processes do not repeat it N times.
    Outside a run (a function called directly) no cache is kept, so nothing outlives a call;
    Python's own warning filter still shows a repeated identical message once per place.

    Args:
        key: what makes two warnings the same one.
        message: the text shown.
    """
    seen = _run_warned.get()
    if seen is None or key not in seen:
        if seen is not None:
            seen.add(key)
        # the Trainer sets Fabric's rank_zero_only.rank; a heavy import, so only when a warning is due
        from lightning_div._internal.lightning import rank_zero

        # 6 frames up: past rank_zero_warn's own three (warn, _warn, its rank-zero wrapper) and this function,
        # to the code that called warn_once's caller, as warnings.warn(stacklevel=3) pointed before
        rank_zero.rank_zero_warn(message, stacklevel=6, category=RuntimeWarning)


# OWASP's CSV-injection rule: a cell starting with one of these is read as a formula by spreadsheets
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_safe(value: Any) -> Any:
    """A text cell that a spreadsheet would run as a formula, prefixed with ``'`` (others unchanged).

    Only for CSV files people open in spreadsheets; trackers and JSON keep the raw text.
    """
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def finite_metrics(metrics: Mapping[str, float], source: str) -> dict[str, float]:
    """Drop non-finite values with a warning naming them: a NaN is never logged as a metric."""
    out = {}
    for name, value in metrics.items():
        v = float(value)
        if math.isfinite(v):
            out[name] = v
        else:
            warn_once(f"nonfinite:{source}:{name}", f"{source}: {name} = {v} is not finite and was not logged")
    return out


def log_scalars(pl_module: Any, metrics: Mapping[str, float], source: str) -> dict[str, float]:
    """``pl_module.log`` each finite value; the values are already global, so no sync."""
    clean = finite_metrics(metrics, source)
    for name, value in clean.items():
        pl_module.log(name, value, on_step=False, on_epoch=True, sync_dist=False, rank_zero_only=False)
    return clean


_TRACKERS = ("TensorBoardLogger", "WandbLogger", "MLFlowLogger")


def tracker_kind(logger: Any) -> str | None:
    """Which tracker API the logger has, by class name along its MRO (a user's subclass counts as its base)."""
    names = {cls.__name__ for cls in type(logger).__mro__}
    return next((kind for kind in _TRACKERS if kind in names), None)


def _safe_name(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", key).strip("_")


def local_log_dir(trainer: Any) -> str | None:
    """``trainer.log_dir`` as this process sees it, without its broadcast; None without a logger.

    ``Trainer.log_dir`` broadcasts rank 0's value, a collective every rank must enter;
    called from rank-0-only code (writing a plot) under DDP it waits forever for the
    others. Only rank 0 writes, so its own value is the one wanted.
    """
    try:
        loggers = list(getattr(trainer, "loggers", None) or [])
        if not loggers:  # Lightning would say the bare working directory; there are no logs
            return None
        first = loggers[0]
        # by class name, so the loggers of pytorch_lightning and of lightning.pytorch both count
        names = {cls.__name__ for cls in type(first).__mro__}
        return first.log_dir if names & {"TensorBoardLogger", "CSVLogger"} else first.save_dir
    except Exception:  # a logger without a directory, or one that fails
        return None


def artifact_dir(trainer: Any, fallback: Path) -> Path:
    """Where plots and tables of this run are written: beside the first logger's files (no collective)."""
    log_dir = local_log_dir(trainer)
    return Path(log_dir) / "lightning_div" if log_dir else Path(fallback)


def log_step(trainer: Any) -> int:
    """The step at which Lightning logs the scalars of the current epoch end, for images and text to match.

    Lightning logs epoch-end scalars at ``fit_loop.epoch_loop._batches_that_stepped``, which
    during the validation that ends an epoch is one behind ``global_step`` (the last batch
    is counted after validation), and in ``on_train_epoch_end`` is decreased by one for the
    logging. Figures logged at ``global_step`` would sit one step to the right of their
    scalars in TensorBoard. Outside fitting, ``global_step``.
    """
    from lightning_div._internal.loop_state import batches_that_stepped

    step = int(getattr(trainer, "global_step", 0))
    stepped = batches_that_stepped(trainer)
    state = getattr(getattr(trainer, "state", None), "fn", None)
    if stepped is None or getattr(state, "value", state) != "fit":
        return step
    return max(stepped - (0 if getattr(trainer, "validating", False) else 1), 0)


def _try(where: str, what: str, fn: Any) -> bool:
    try:
        fn()
        return True
    except Exception as err:  # any tracker or disk failure is isolated from training
        warn_once(f"{where}:{what}", f"lightning-div could not write {what} to {where}: {err!r}; training continues")
        return False


def render_png(fig: Any, dpi: int = 100) -> bytes:
    """The figure as PNG bytes (tight bounding box)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


def new_figure(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """``matplotlib.pyplot.subplots(*args, **kwargs)`` for a figure that is logged, not shown.

    Selects the Agg backend unless one is in use already (no display needed; a user's own
    backend is kept), so every figure of lightning-div is set up in this one place.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)


class _Sink:
    """One tracker as figures and tables reach it: ``image`` and ``table``, each inside :func:`_try`."""

    def __init__(self, where: str, image: Any, table: Any) -> None:
        self.where, self.image, self.table = where, image, table


def _markdown(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    return head + "\n".join("| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows)


def _by_column(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> dict[str, list[Any]]:
    """A table as MLflow's ``log_table`` takes it: one list per column."""
    return {c: [r[i] for r in rows] for i, c in enumerate(columns)}


def _tensorboard(where: str, writer: Any) -> _Sink:
    """A ``SummaryWriter`` (``writer()`` returns it: Lightning's is created on first use)."""
    import numpy as np

    return _Sink(
        where,
        lambda key, image, step, tag: writer().add_image(key, np.asarray(image), global_step=step, dataformats="HWC"),
        lambda key, columns, rows, step, tag: writer().add_text(key, _markdown(columns, rows), global_step=step),
    )


def _lightning_sinks(trainer: Any) -> list[_Sink]:
    sinks = []
    for lg in getattr(trainer, "loggers", None) or []:
        kind, where = tracker_kind(lg), type(lg).__name__
        if kind == "TensorBoardLogger":
            sinks.append(_tensorboard(where, lambda lg=lg: lg.experiment))
        elif kind == "WandbLogger":
            sinks.append(
                _Sink(
                    where,
                    lambda key, image, step, tag, lg=lg: lg.log_image(key=key, images=[image], step=None),
                    lambda key, columns, rows, step, tag, lg=lg: lg.log_table(key=key, columns=columns, data=rows),
                )
            )
        elif kind == "MLFlowLogger":

            def table(
                key: str, columns: Sequence[str], rows: list[list[Any]], step: int, tag: str, lg: Any = lg
            ) -> None:
                lg.experiment.log_table(
                    lg.run_id, data=_by_column(columns, rows), artifact_file=f"{_safe_name(key)}/{tag}.json"
                )

            sinks.append(
                _Sink(
                    where,
                    lambda key, image, step, tag, lg=lg: lg.experiment.log_image(
                        lg.run_id, image, artifact_file=f"{_safe_name(key)}/{tag}.png"
                    ),
                    table,
                )
            )
    return sinks


def _hugging_face_sinks(trainer: Any) -> list[_Sink]:
    """The ``report_to`` trackers of a ``transformers.Trainer`` that take figures and tables, through
    the objects its own integration callbacks hold (the writer, the run they started), by class name
    so that no tracker is imported here. A tracker that has not started yet is skipped."""
    sinks = []
    for cb in trainer.callback_handler.callbacks:
        names = {cls.__name__ for cls in type(cb).__mro__}
        where = type(cb).__name__
        if "TensorBoardCallback" in names and getattr(cb, "tb_writer", None) is not None:
            sinks.append(_tensorboard(where, lambda cb=cb: cb.tb_writer))
        elif "WandbCallback" in names and getattr(sys.modules.get("wandb"), "run", None) is not None:
            # the module WandbCallback imported, and its public run (the callback's own handle is private)
            wandb = sys.modules["wandb"]
            # the Trainer's W&B charts use train/global_step as their x axis (WandbCallback.setup)
            sinks.append(
                _Sink(
                    where,
                    lambda key, image, step, tag, w=wandb: w.log({key: w.Image(image), "train/global_step": step}),
                    lambda key, columns, rows, step, tag, w=wandb: w.log(
                        {key: w.Table(columns=list(columns), data=rows), "train/global_step": step}
                    ),
                )
            )
        elif "MLflowCallback" in names and sys.modules.get("mlflow") is not None:
            # the module MLflowCallback imported, and its public active run (a callback not set up yet has none)
            mlflow = sys.modules["mlflow"]
            if mlflow.active_run() is None:
                continue

            def table(
                key: str, columns: Sequence[str], rows: list[list[Any]], step: int, tag: str, m: Any = mlflow
            ) -> None:
                m.log_table(data=_by_column(columns, rows), artifact_file=f"{_safe_name(key)}/{tag}.json")

            sinks.append(
                _Sink(
                    where,
                    lambda key, image, step, tag, m=mlflow: m.log_image(
                        image, artifact_file=f"{_safe_name(key)}/{tag}.png"
                    ),
                    table,
                )
            )
    return sinks


@dataclass
class Destination:
    """Where a front end's figures and tables go: its trackers, the step they are logged at, and the files' tag.

    Built by the front end, which knows what its trainer is (:func:`lightning_destination`,
    :func:`hugging_face_destination`); nothing here guesses the trainer's kind.

    Attributes:
        sinks: the trackers that take figures and tables.
        step: the x they are logged at.
        tag: what the files' names end with (``epoch_3``, ``step_200``).
        hidden: special tokens left out of a table's text cells when shown (:func:`shown_text`).
    """

    sinks: list[_Sink]
    step: int
    tag: str
    hidden: tuple[str, ...] = ()


def lightning_destination(trainer: Any) -> Destination:
    """A Lightning trainer's loggers, at :func:`log_step`, files tagged ``epoch_<N>``."""
    return Destination(
        _lightning_sinks(trainer), log_step(trainer), f"epoch_{int(getattr(trainer, 'current_epoch', 0))}"
    )


def hugging_face_destination(trainer: Any) -> Destination:
    """A Hugging Face ``Trainer``'s ``report_to`` trackers, at ``state.global_step``, files tagged ``step_<N>``.

    The Trainer evaluates by steps, so the files are named by the step as its own checkpoints are.
    """
    step = int(getattr(trainer.state, "global_step", 0))
    return Destination(_hugging_face_sinks(trainer), step, f"step_{step}", special_tokens(trainer))


def special_tokens(trainer: Any) -> tuple[str, ...]:
    """The special tokens of a trainer's tokenizer (``processing_class``, or a processor's ``tokenizer``):
    a TRL prompt ends with ``<|endoftext|>`` where the model reads it, which a table need not show."""
    tokenizer = getattr(trainer, "processing_class", None)
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a multimodal processor holds its tokenizer
    tokens = getattr(tokenizer, "all_special_tokens", None) or []
    return tuple(sorted({t for t in tokens if isinstance(t, str) and t}, key=len, reverse=True))


def shown_text(value: Any, hidden: Sequence[str]) -> Any:
    """A table cell as shown: a text without the ``hidden`` special tokens, the turns they separated
    joined by `` / ``, stripped (``"Hi<|endoftext|>"`` -> ``"Hi"``); any other value as it is.

    Examples:
        >>> shown_text("How are you?<|endoftext|>", ["<|endoftext|>"])
        'How are you?'
        >>> shown_text("Hi<|endoftext|>Hello<|endoftext|>", ["<|endoftext|>"])
        'Hi / Hello'
        >>> shown_text(3, ["<|endoftext|>"])
        3
    """
    if not isinstance(value, str) or not any(token in value for token in hidden):
        return value
    pieces = [value]
    for token in hidden:  # the longest first: a token that contains another goes whole
        pieces = [part for piece in pieces for part in piece.split(token)]
    return " / ".join(p.strip() for p in pieces if p.strip())


def _unpack(destination: Destination | None) -> tuple[list[_Sink], int, str]:
    if destination is None:
        return [], 0, "epoch_0"
    return destination.sinks, destination.step, destination.tag


def log_figure(destination: Destination | None, key: str, fig: Any, out_dir: Path) -> Path | None:
    """Send a matplotlib figure to TensorBoard / W&B / MLflow and save it as PNG; returns the PNG path.

    ``destination`` is the front end's trackers and step (None: files only, tagged ``epoch_0``). The figure is rendered once and the same image goes everywhere (each tracker
    rendering it again cost most of a figure's time). TensorBoard gets it at the step of the
    scalars it goes with (:func:`log_step` in Lightning). The PNG is ``<key>_epoch<N>.png``
    (Lightning) or ``<key>_step<N>.png`` (Hugging Face) in ``out_dir``.
    """
    import matplotlib.pyplot as plt

    sinks, step, tag = _unpack(destination)
    png = None
    try:
        data = render_png(fig)
    except Exception as err:  # a figure that cannot be drawn is one warning, like a tracker that fails
        warn_once(f"render:{key}", f"lightning-div could not draw {key}: {err!r}; training continues")
        plt.close(fig)
        return None
    plt.close(fig)
    if sinks:
        import io

        from PIL import Image

        image = Image.open(io.BytesIO(data)).convert("RGB")
        for sink in sinks:
            _try(sink.where, key, lambda: sink.image(key, image, step, tag))
    target = Path(out_dir) / f"{_safe_name(key)}_{tag.replace('_', '')}.png"
    if _try(str(target), key, lambda: atomic_write_with(target, lambda f: f.write(data), "wb")):
        png = target
    return png


def log_table(
    destination: Destination | None,
    key: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    out_dir: Path,
    filename: str | None = None,
) -> Path | None:
    """Send a table to W&B / TensorBoard (as markdown text) / MLflow and save it as CSV.

    ``destination`` as for :func:`log_figure`. The CSV
    is ``<key>_epoch<N>.csv`` (``_step<N>`` for Hugging Face) in ``out_dir``, or ``filename``
    there (a table logged once per run); it is written to a temporary file and renamed, so it is
    never half there.
    """
    sinks, step, tag = _unpack(destination)
    hidden = destination.hidden if destination is not None else ()
    rows = [[shown_text(c, hidden) for c in r] for r in rows]
    for sink in sinks:
        _try(sink.where, key, lambda: sink.table(key, list(columns), rows, step, tag))
    target = Path(out_dir) / (filename or f"{_safe_name(key)}_{tag.replace('_', '')}.csv")

    def write(f: Any) -> None:  # cells neutralised for spreadsheets; the trackers above get the raw text
        writer = csv.writer(f)
        writer.writerow([csv_safe(c) for c in columns])
        writer.writerows([csv_safe(c) for c in r] for r in rows)

    def save() -> None:
        atomic_write_with(target, write)

    return target if _try(str(target), key, save) else None
