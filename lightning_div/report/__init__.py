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

The parts: :mod:`~lightning_div.report.files` (which files of the run are read),
:mod:`~lightning_div.report.readers` (the scalars), :mod:`~lightning_div.report.figures` (the
scalar plots) and :mod:`~lightning_div.report.page` (the HTML).
"""

from lightning_div.report.figures import scalar_figures
from lightning_div.report.files import ARTIFACTS, RunFiles, cluster_groups, find_run, latest_artifacts, run_inputs
from lightning_div.report.page import MAX_CELL_CHARS, MAX_TABLE_ROWS, build_report
from lightning_div.report.readers import read_metrics, read_tensorboard

__all__ = [
    "ARTIFACTS",
    "MAX_CELL_CHARS",
    "MAX_TABLE_ROWS",
    "RunFiles",
    "build_report",
    "cluster_groups",
    "find_run",
    "latest_artifacts",
    "read_metrics",
    "read_tensorboard",
    "run_inputs",
    "scalar_figures",
]
