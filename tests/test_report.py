"""`lightning-div report`: a self-contained page of what a run wrote, also after a crash, seen in a real browser."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from monitor_setup import datamodule, dress, minilm, settings_objects, tiny_lm, trainer
from pytorch_lightning.loggers import CSVLogger

from lightning_div.callbacks.ruq import RUQMonitor, RUQPlot
from lightning_div.callbacks.semantic_diversity import SemanticDiversityMonitor
from lightning_div.cli.main import main
from lightning_div.report import build_report, find_run, run_inputs
from lightning_div.semantic.space import SemanticSpace

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")

#: One worker runs this module's tests, so its module fixtures (a real run, a TensorBoard run) are made once:
#: split over two xdist workers, the run was trained on each (16 s and 14 s of setup).
pytestmark = pytest.mark.xdist_group("report")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A real two-epoch run with the three callbacks and a CSVLogger, as `lightning-div fit` leaves it."""
    root = tmp_path_factory.mktemp("run")
    flat = dict(show_progress=False, batch_size=8, max_new_tokens=8, dirpath=str(root / "cache"))
    space = SemanticSpace(minilm(), num_clusters=4, batch_size=8, show_progress=False)
    callbacks = [
        SemanticDiversityMonitor(space, num_contexts=12, **settings_objects(**flat, log_samples=3)),
        RUQMonitor(
            num_train_contexts=6, num_contexts=6, plot=RUQPlot(num_contexts=3, num_beams=2), **settings_objects(**flat)
        ),
        dress(root),
    ]
    tr = trainer(
        root, callbacks, loggers=[CSVLogger(root, name="csv")], max_epochs=2, limit_train_batches=2, limit_val_batches=1
    )
    tr.fit(tiny_lm(), datamodule=datamodule())
    (Path(tr.loggers[0].log_dir) / "config.yaml").write_text("trainer:\n  max_epochs: 2\n")  # as LightningCLI does
    return root


def test_finds_the_latest_version(run_dir, tmp_path):
    assert find_run(run_dir).version == run_dir / "csv" / "version_0"
    assert find_run(run_dir / "csv" / "version_0").version == run_dir / "csv" / "version_0"
    with pytest.raises(ValueError, match="no run below it"):
        find_run(tmp_path)


@pytest.fixture(scope="module")
def report_html(run_dir, tmp_path_factory) -> Path:
    """``lightning-div report`` of the shared run, written once (building the page is most of a report's
    seconds): the content test reads it, the browser opens it. The command writes build_report's page."""
    out = tmp_path_factory.mktemp("report") / "report.html"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    return out


def test_report_holds_every_part_and_needs_nothing_outside(report_html):
    page = report_html.read_text(encoding="utf-8")
    for section in ("summary-section", "scalars", "clusters", "ruq", "samples", "dress", "config"):
        assert f'<section id="{section}">' in page, section
    assert 'data-source="cluster_cards.csv"' in page and 'data-source="cluster_shares.csv"' in page
    assert 'data-source="val_samples_epoch1.csv"' in page
    for key in ("val/cluster_shares", "val/cluster_histogram", "val/ruq_plot", "dress/clusters"):
        assert f'alt="{key}"' in page, key
    sources = re.findall(r'(?:src|href)="([^"#][^"]*)"', page)
    assert sources and all(s.startswith("data:image/png;base64,") for s in sources)  # self-contained
    assert "<script" not in page
    assert "max_epochs: 2" in page
    # each callback's record of what it measured with, written by the run itself
    config = page.split('<section id="config">')[1].split("</section>")[0]
    for who in ("DRESSReweighting", "RUQMonitor", "SemanticDiversityMonitor"):
        assert f"<h3>measured with: {who}</h3>" in config, who
    assert "&quot;measure&quot;: &quot;SemanticMeasure&quot;" in config and "&quot;lam&quot;: 2.0" in config
    assert '<section id="notes">' not in page  # nothing was missing


def test_report_of_a_run_that_crashed_halfway(run_dir, tmp_path, capsys):
    crashed = tmp_path / "crashed"
    shutil.copytree(run_dir, crashed)
    version = crashed / "csv" / "version_0"
    metrics = (version / "metrics.csv").read_text()
    (version / "metrics.csv").write_text(metrics[: metrics.rstrip("\n").rfind("\n") + 5])  # a torn last line
    for p in (version / "lightning_div").glob("*_epoch1.*"):  # the second epoch's figures never came
        p.unlink()
    out = tmp_path / "report.html"
    assert main(["report", str(crashed), "--out", str(out)]) == 0
    assert "written to" in capsys.readouterr().out
    page = out.read_text()
    assert re.search(r"metrics.csv line \d+ has \d+ of \d+ fields", page)
    assert 'alt="val/cluster_shares"' in page and "(epoch 0)" in page


def test_report_errors_are_one_line(tmp_path, capsys):
    assert main(["report", str(tmp_path / "missing")]) == 2  # a user mistake: exit code 2 (it was 1; issue 31, R17)
    assert capsys.readouterr().err == f"lightning-div report: error: {tmp_path / 'missing'}: no such directory\n"
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"lightning-div report: error: {tmp_path / 'empty'}: no run below it") and err.count("\n") == 1
    )


@pytest.mark.slow
def test_report_opens_in_a_real_browser(report_html, tmp_path):
    if not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()):
        pytest.skip(
            "Debian's chromium and chromium-driver are not installed (/usr/bin/chromium, "
            "/usr/bin/chromedriver); .ci/run installs them when run as root"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    out = report_html
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1200,4000",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        driver.get(out.as_uri())
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth]);"
        )
        assert len(images) >= 6
        assert all(complete and width > 0 for _, complete, width in images), images
        tables = driver.execute_script(
            "return Array.from(document.querySelectorAll('table')).map(t => [t.dataset.source || t.id, t.rows.length]);"
        )
        sources = dict(tables)
        assert sources["summary"] > 1 and sources["cluster_cards.csv"] == 5  # header + 4 clusters
        assert sources["val_samples_epoch1.csv"] == 4  # header + 3 samples
        driver.save_screenshot(str(tmp_path / "report.png"))
        assert (tmp_path / "report.png").stat().st_size > 10_000
    finally:
        driver.quit()


def test_gold_and_negative_losses_are_plotted_apart(tmp_path, monkeypatch):
    # issue 34: train/loss_step alternated between gold batches (~7) and DRESS negative batches (~0.002)
    import lightning_div._internal.tracking as tracking
    from lightning_div.report import read_metrics, scalar_figures

    gold = {0: 7.15, 1: 7.96, 3: 7.01, 4: 6.98}
    negative = {2: 0.0019, 5: 0.0023}
    lines = ["epoch,step,train/loss_step,train/negative_loss_step"]
    last_gold = last_negative = ""
    for step in range(6):  # Lightning's rows: at a step that does not log a key, its last value again
        last_gold = str(gold.get(step, last_gold))
        last_negative = str(negative[step]) if step in negative else last_negative
        lines.append(f"0,{step},{last_gold},{last_negative}")
    (tmp_path / "metrics.csv").write_text("\n".join(lines) + "\n")
    series = read_metrics(tmp_path / "metrics.csv", [])
    figures = []
    real = tracking.new_figure

    def keep(*args, **kwargs):
        fig, axes = real(*args, **kwargs)
        figures.append(fig)
        return fig, axes

    monkeypatch.setattr(tracking, "new_figure", keep)
    scalar_figures(series)
    panels = {ax.get_title(): ax.lines[0].get_ydata().tolist() for fig in figures for ax in fig.axes if ax.lines}
    assert set(panels) == {"train/loss_step", "train/negative_loss_step"}  # two panels, never one curve
    assert min(panels["train/loss_step"]) > 6.0 and max(panels["train/negative_loss_step"]) < 0.01


# ------------------------------------------------------------------------------------------------
# Issue 31: what a run folder can hold that the report must survive (hand-made runs: no training)


def png(width: int = 20) -> bytes:
    """A small, valid PNG."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    noise = np.random.default_rng(0).integers(0, 256, size=(10, width, 3), dtype=np.uint8)  # incompressible
    Image.fromarray(noise).save(buffer, format="PNG")
    return buffer.getvalue()


def hand_made_run(root: Path) -> Path:
    """``root/csv/version_0`` as a CSVLogger and the callbacks leave it: metrics, a figure, a samples table."""
    version = root / "csv" / "version_0"
    (version / "lightning_div").mkdir(parents=True)
    (version / "metrics.csv").write_text("epoch,step,val/sem_ent\n0,3,1.5\n1,7,1.25\n")
    (version / "lightning_div" / "val_cluster_shares_epoch1.png").write_bytes(png())
    (version / "lightning_div" / "val_samples_epoch1.csv").write_text("context,generated\nhi,hello\n")
    return version


def test_a_cell_over_128_kib_is_shown_truncated(tmp_path):
    """Issue 31 R4: ``field larger than field limit (131072)`` ended the report (long gold responses)."""
    import csv

    version = hand_made_run(tmp_path / "run")
    long = "word " * 40_000  # 200,000 characters
    with open(version / "lightning_div" / "val_samples_epoch1.csv", "w", newline="") as f:
        csv.writer(f).writerows([["context", "generated"], ["hi", long]])
    page = build_report(tmp_path / "run")
    cell = re.search(r"<td>(word word[^<]*)</td>", page).group(1)
    assert cell.startswith("word " * 100) and cell.endswith("… (200,000 characters, the first 2,000 shown)")
    assert len(cell) < 2_100
    assert csv.field_size_limit() == 131072  # the process's limit is left as it was


def test_only_files_inside_the_run_folder_are_read(tmp_path):
    """Issue 31 R12 / R13: a symlink out of the run made the report embed config.yaml or /etc/passwd from outside."""
    import os

    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:SECRET\n")
    elsewhere = tmp_path / "elsewhere"
    hand_made_run(elsewhere)
    (elsewhere / "config.yaml").write_text("trainer: {SECRET_OUTSIDE: 1}\n")  # above the linked version
    run = tmp_path / "run"
    version = hand_made_run(run)
    os.symlink(secret, version / "config.yaml")
    os.symlink(secret, version / "lightning_div" / "val_samples_epoch2.csv")
    (run / "hparams.yaml").write_text("lr: 0.5\n")  # inside: read
    page = build_report(run)
    assert "SECRET" not in page and "lr: 0.5" in page
    notes = re.search(r'<section id="notes">(.*?)</section>', page, re.S).group(1)
    assert f"skipped {version / 'config.yaml'}" in notes and "outside the run folder" in notes
    assert f"skipped {version / 'lightning_div' / 'val_samples_epoch2.csv'}" in notes
    # a version folder that is itself a link to another run: its files are outside, none is read
    linked = tmp_path / "linked"
    (linked / "csv").mkdir(parents=True)
    os.symlink(elsewhere / "csv" / "version_0", linked / "csv" / "version_0")
    with pytest.raises(ValueError, match=r"no run below it .*skipped .*version_0 \(a link to .*elsewhere"):
        build_report(linked)


def test_dollar_signs_in_a_metric_name_are_text_not_math(tmp_path):
    """Issue 31 R2: a metric named ``val/$x_{` aborted the report in matplotlib's mathtext parser."""
    version = hand_made_run(tmp_path / "run")
    (version / "metrics.csv").write_text("epoch,step,val/$x_{$,val/cost $5 or $6\n0,3,1.5,2\n1,7,1.25,3\n")
    page = build_report(tmp_path / "run")
    assert '<img alt="val"' in page  # the val group's figure was drawn


def test_a_truncated_png_is_left_out_with_a_note(tmp_path):
    """Issue 31 R11: a torn PNG (right signature, cut short) was embedded as a broken image without a word."""
    version = hand_made_run(tmp_path / "run")
    figure = version / "lightning_div" / "val_cluster_shares_epoch1.png"
    data = png(400)
    assert len(data) > 6_000
    figure.write_bytes(data[: len(data) // 2])
    page = build_report(tmp_path / "run")
    assert 'alt="val/cluster_shares"' not in page
    assert "val_cluster_shares_epoch1.png is not a complete PNG image" in page


# ------------------------------------------------------------------------------------------------
# Issue 43 item 4: a run logged to TensorBoard only (Lightning's default logger), as the quick start's


@pytest.fixture(scope="module")
def tensorboard_run(tmp_path_factory) -> tuple[Path, dict[str, float]]:
    """A real two-epoch run with Lightning's default logger (TensorBoard) and no CSVLogger."""
    root = tmp_path_factory.mktemp("tb_run")
    ruq = RUQMonitor(
        num_train_contexts=6, num_contexts=6, plot=None, **settings_objects(show_progress=False, batch_size=8)
    )
    tr = trainer(root, [ruq], loggers=True, max_epochs=2, limit_train_batches=2, limit_val_batches=1)
    tr.fit(tiny_lm(), datamodule=datamodule())
    assert type(tr.logger).__name__ == "TensorBoardLogger" and not list(root.rglob("metrics.csv"))
    return root, {k: float(v) for k, v in tr.callback_metrics.items()}


def test_a_tensorboard_only_run_has_its_scalars(tensorboard_run):
    from lightning_div.report import read_tensorboard

    root, logged = tensorboard_run
    run = find_run(root)
    assert run.version == root / "lightning_logs" / "version_0" and run.events and run.metrics_csv is None
    series = read_tensorboard(run.version, notes := [])
    assert not notes
    # one point per epoch, each with its epoch (from Lightning's `epoch` scalar at the same step), last = logged
    for key in ("val/ruq", "train/ruq", "val/ruq_margin", "val/loss"):
        assert [e for e, _, _ in series[key]] == [0.0, 1.0], key
        assert series[key][-1][2] == pytest.approx(logged[key], rel=1e-6), key
    steps = [s for _, s, _ in series["val/ruq"]]
    assert steps[1] - steps[0] == 2.0  # 2 training batches an epoch
    assert "epoch" not in series and "hp_metric" not in series  # Lightning's bookkeeping, not metrics
    page = build_report(root)
    assert "epochs 0-1" in page and "no epoch measured" not in page
    assert '<img alt="val"' in page and '<img alt="train"' in page  # the scalar plots
    summary = re.search(r'<table id="summary">(.*?)</table>', page, re.S).group(1)
    assert f'<td>val/ruq</td><td class="num">{logged["val/ruq"]:.1f} %</td><td class="num">1</td>' in summary
    assert "no metrics.csv" not in page


def test_csv_and_figures_are_preferred_over_a_later_tensorboard_folder(tmp_path):
    """The demo logs CSV (with the figures beside it) and TensorBoard to two folders: the CSV one is reported."""
    import os

    version = hand_made_run(tmp_path / "run")
    tb = tmp_path / "run" / "tensorboard" / "version_0"
    tb.mkdir(parents=True)
    (tb / "events.out.tfevents.1.host.1.0").write_bytes(b"")
    os.utime(version / "metrics.csv", (1, 1))  # the TensorBoard folder is the later one
    assert find_run(tmp_path / "run").version == version
    assert find_run(tb).version == tb  # given directly, it is the run


def test_an_unreadable_event_file_is_a_note(tmp_path):
    version = tmp_path / "run" / "lightning_logs" / "version_0"
    version.mkdir(parents=True)
    (version / "events.out.tfevents.1.host.1.0").write_bytes(b"\x00garbage, not a TFRecord" * 10)
    page = build_report(tmp_path / "run")  # neither an error nor a traceback
    assert '<section id="notes">' in page and "no epoch measured" in page


# ------------------------------------------------------------------------------------------------
# A Hugging Face / TRL run: <output_dir>/lightning_div (files named _step<N>) and <output_dir>/runs/<date>/


def hugging_face_run(output_dir: Path, steps=(1, 2, 3)) -> dict[str, list[float]]:
    """``output_dir`` as a TRL GRPOTrainer with ``report_to="tensorboard"`` and the callback leave it."""
    from torch.utils.tensorboard import SummaryWriter

    art = output_dir / "lightning_div"
    art.mkdir(parents=True)
    for step in steps:
        (art / f"diversity_group_sample_step{step}.csv").write_text(
            f"step,group,prompt,completion,cluster\n{step},0,hi,reply {step},1\n"
        )
    (art / "eval_cluster_histogram_step2.png").write_bytes(png())
    logged = {"train/diversity/group_sem_ent": [0.25 * s for s in steps], "train/loss": [1.0 / s for s in steps]}
    writer = SummaryWriter(str(output_dir / "runs" / "Nov28_07-00-00_host"))
    for i, step in enumerate(steps):
        writer.add_scalar("train/epoch", 0.125 * step, step)
        for tag, values in logged.items():
            writer.add_scalar(tag, values[i], step)
    writer.close()
    return logged


def test_a_hugging_face_output_dir_reports_its_scalars_samples_and_figures(tmp_path):
    """Pointed at a GRPO output_dir, the report said "no metrics.csv and no TensorBoard event files": the
    lightning_div/ folder made output_dir the run and runs/<date>/ below it was not read; its _step<N>
    tables and figures were not shown either."""
    hugging_face_run(tmp_path / "grpo")
    run = find_run(tmp_path / "grpo")
    assert run.version == tmp_path / "grpo" and run.events_dir == tmp_path / "grpo" / "runs" / "Nov28_07-00-00_host"
    page = build_report(tmp_path / "grpo")
    assert "no metrics.csv" not in page
    # the diversity/* curves apart, under the keys the docs name (TensorBoard's train/ dropped), before TRL's own
    assert '<img alt="diversity"' in page and '<img alt="train"' in page and "train/diversity" not in page
    assert page.index('<img alt="diversity"') < page.index('<img alt="train"')
    assert "steps 1-3" in page and "epochs 0" not in page  # a run of steps is counted in steps
    assert 'data-source="diversity_group_sample_step3.csv"' in page and "reply 3" in page  # the latest step's
    assert "(first step: step 1)" in page and "(last step: step 3)" in page and 'alt="eval/cluster_histogram"' in page
    from lightning_div.report import read_tensorboard

    series = read_tensorboard(run.events, notes := [])
    assert not notes and "train/epoch" not in series
    assert series["train/diversity/group_sem_ent"] == [(0.125, 1.0, 0.25), (0.25, 2.0, 0.5), (0.375, 3.0, 0.75)]
    # found from a folder above too (the output_dir is the latest run below it)
    assert find_run(tmp_path).version == tmp_path / "grpo"
    # pointed at runs/<date>: the curves, and a note where the figures and tables are
    page = build_report(tmp_path / "grpo" / "runs" / "Nov28_07-00-00_host")
    assert '<img alt="diversity"' in page
    assert f"give {(tmp_path / 'grpo').resolve()} (the Trainer&#x27;s output_dir) as RUN_DIR" in page


def test_two_tensorboard_runs_below_an_output_dir_the_latest_is_read_and_the_other_named(tmp_path):
    import os
    import shutil

    hugging_face_run(tmp_path / "out")
    old = tmp_path / "out" / "runs" / "Nov27_00-00-00_host"
    shutil.copytree(tmp_path / "out" / "runs" / "Nov28_07-00-00_host", old)
    for p in old.iterdir():
        os.utime(p, (1, 1))
    run = find_run(tmp_path / "out")
    assert run.events_dir == tmp_path / "out" / "runs" / "Nov28_07-00-00_host"
    assert any("not shown: runs/Nov27_00-00-00_host" in note for note in run.skipped)


def test_report_refuses_to_write_over_a_file_it_reads(tmp_path, capsys):
    """``report RUN --out RUN/.../metrics.csv`` wrote the page over its own input, exit 0."""
    version = hand_made_run(tmp_path / "run")
    before = (version / "metrics.csv").read_bytes()
    for victim in ("metrics.csv", "lightning_div/val_samples_epoch1.csv"):
        assert main(["report", str(tmp_path / "run"), "--out", str(version / victim)]) == 2
        err = capsys.readouterr().err
        assert f"--out {version / victim} is the input {version / victim}: writing there would destroy it" in err
        assert err.count("\n") == 1 and "Traceback" not in err
    assert (version / "metrics.csv").read_bytes() == before
    logged = hugging_face_run(tmp_path / "hf")
    (event,) = (tmp_path / "hf" / "runs").rglob("events.out.tfevents.*")
    assert main(["report", str(tmp_path / "hf"), "--out", str(event)]) == 2
    assert "is the input" in capsys.readouterr().err and logged
    assert main(["report", str(tmp_path / "hf"), "--out", str(tmp_path)]) == 2
    assert f"--out {tmp_path} is a directory" in capsys.readouterr().err
    # a new file inside the run folder is no input: written
    assert main(["report", str(tmp_path / "run"), "--out", str(version / "report.html")]) == 0


def test_report_out_creates_missing_folders_and_says_so(tmp_path, capsys):
    hand_made_run(tmp_path / "run")
    out = tmp_path / "new" / "dir" / "r.html"
    assert main(["report", str(tmp_path / "run"), "--out", str(out)]) == 0
    assert out.is_file() and f"created the folder {out.parent}" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "run"), "--out", str(out)]) == 0  # the folder exists now: no word of it
    assert "created" not in capsys.readouterr().out


def test_an_infinite_epoch_cell_is_a_note_not_a_crash(tmp_path):
    """An epoch cell ``inf`` in metrics.csv ended the report with OverflowError (exit 1, a traceback)."""
    version = hand_made_run(tmp_path / "run")
    (version / "metrics.csv").write_text("epoch,step,val/sem_ent\n0,3,1.5\ninf,7,1.25\n1,9,-inf\n")
    page = build_report(tmp_path / "run")
    assert "metrics.csv line 3: epoch = &#x27;inf&#x27;, step = &#x27;7&#x27; is not a finite number; left out" in page
    assert "epochs 0-1" in page


def test_a_symlinked_event_file_from_outside_the_run_is_not_read(tmp_path):
    """A tfevents file linked from outside the run showed its values though the notes said links are skipped."""
    import os

    from torch.utils.tensorboard import SummaryWriter

    outside = tmp_path / "outside"
    writer = SummaryWriter(str(outside))
    writer.add_scalar("val/sem_ent", 123456.0, 1)  # a headline key: its last value would be in the summary
    writer.close()
    version = tmp_path / "run" / "lightning_logs" / "version_0"
    writer = SummaryWriter(str(version))
    writer.add_scalar("val/loss", 2.5, 1)
    writer.close()
    (linked,) = outside.glob("events.out.tfevents.*")
    os.symlink(linked, version / "events.out.tfevents.9.elsewhere.1.0")
    page = build_report(tmp_path / "run")
    assert "<td>val/sem_ent</td>" not in page and "123456" not in page and "<td>val/loss</td>" in page
    assert f"skipped {version / 'events.out.tfevents.9.elsewhere.1.0'} (a link to {linked.resolve()}" in page


def test_an_empty_or_unreadable_event_file_is_named_in_the_notes(tmp_path):
    import os

    from torch.utils.tensorboard import SummaryWriter

    version = tmp_path / "run" / "lightning_logs" / "version_0"
    writer = SummaryWriter(str(version))
    writer.add_scalar("val/loss", 2.5, 1)
    writer.close()
    (version / "events.out.tfevents.1.empty.1.0").write_bytes(b"")
    locked = version / "events.out.tfevents.2.locked.1.0"
    locked.write_bytes(b"x")
    os.chmod(locked, 0)
    try:
        page = build_report(tmp_path / "run")
    finally:
        os.chmod(locked, 0o600)
    assert '<td>val/loss</td><td class="num">2.5</td>' in page  # the readable file's scalar still comes (once: a table)
    assert "the TensorBoard event file events.out.tfevents.1.empty.1.0 holds no event" in page
    if os.geteuid() != 0:  # root reads a file of mode 0 all the same
        assert "the TensorBoard event file events.out.tfevents.2.locked.1.0 could not be read" in page
    else:
        assert "the TensorBoard event file events.out.tfevents.2.locked.1.0 holds no event" in page


def test_the_page_says_what_each_callback_measured_with(tmp_path):
    """The callbacks' settings records (lightning_div/settings/*.json) are shown as JSON; a torn one is a note."""
    version = hand_made_run(tmp_path / "run")
    folder = version / "lightning_div" / "settings"
    folder.mkdir()
    record = {"lightning_div": "0.2.0", "who": "SemanticDiversityMonitor", "measures": [{"measure": "SemanticMeasure"}]}
    (folder / "SemanticDiversityMonitor.json").write_text(json.dumps(record))
    (folder / "RUQMonitor.json").write_text('{"who": "RUQ')  # a record cut short
    page = build_report(tmp_path / "run")
    config = page.split('<section id="config">')[1].split("</section>")[0]
    assert "<h3>measured with: SemanticDiversityMonitor</h3>" in config
    assert html.escape(json.dumps(record, indent=1, sort_keys=True)) in config
    assert "measured with: RUQMonitor" not in config
    assert "settings/RUQMonitor.json could not be read (JSONDecodeError" in page
    assert folder / "RUQMonitor.json" in run_inputs(find_run(tmp_path / "run"))  # --out may not overwrite it


def test_a_deep_a_huge_or_an_unparsable_settings_record_is_a_note_not_the_end_of_the_page(tmp_path):
    """Issue 64 L05, L06: a deeply nested record was a RecursionError, a 5,000-digit integer exit 2 for the whole
    page, and a 19 MiB record went into the page whole."""
    version = hand_made_run(tmp_path / "run")
    folder = version / "lightning_div" / "settings"
    folder.mkdir()
    (folder / "Deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (folder / "Digits.json").write_text('{"k": ' + "7" * 5_000 + "}")
    big = {"who": "Big", "measures": [{"settings": {"words": ["w" * 100] * 20_000}}]}  # ~2 MB
    (folder / "Big.json").write_text(json.dumps(big))
    (folder / "Fine.json").write_text(json.dumps({"who": "Fine"}))
    page = build_report(tmp_path / "run")
    config = page.split('<section id="config">')[1].split("</section>")[0]
    assert "<h3>measured with: Fine</h3>" in config  # the other records are still shown
    assert "measured with: Deep" not in config and "measured with: Digits" not in config
    assert "settings/Deep.json could not be read (RecursionError" in page
    assert "settings/Digits.json could not be read (ValueError" in page
    assert "<h3>measured with: Big</h3>" in config
    assert len(page) < 200_000  # the record is cut, not embedded whole
    assert f"settings/Big.json is {len(json.dumps(big)):,} characters long: the first 20,000 are shown" in page
