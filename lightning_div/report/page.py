"""The report's HTML page: its sections of scalars, figures, tables, configuration and notes, built from a run's files."""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path

from lightning_div.keys import CLUSTER_CARDS_FILE, CLUSTER_SHARES_FILE
from lightning_div.report.figures import png_problem, scalar_figures
from lightning_div.report.files import (
    ARTIFACTS,
    RunFiles,
    artifact_steps,
    artifact_unit,
    cluster_groups,
    find_run,
    latest_artifacts,
)
from lightning_div.report.overview import read_alerts, run_rows, summary_section
from lightning_div.report.readers import csv_rows, read_metrics, read_tensorboard
from lightning_div.verdict import verdict

MAX_TABLE_ROWS = 200
MAX_CELL_CHARS = 2_000  # a table cell shows this many characters of a longer text
MAX_RECORD_CHARS = 20_000  # a settings record shows this many characters of its JSON
STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;color:#1f2933;
padding:0 1rem}h1{font-size:1.6rem}h2{border-bottom:2px solid #e4e7eb;padding-bottom:.3rem;margin-top:2.2rem}
h3{font-size:1.05rem;margin-top:1.4rem}table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0 1rem;width:100%}
th,td{border:1px solid #d9dee3;padding:.3rem .45rem;text-align:left;vertical-align:top}th{background:#f0f2f5}
td.num{text-align:right;font-variant-numeric:tabular-nums}img{max-width:100%;display:block;margin:.5rem 0}
pre{background:#f5f7fa;padding:.8rem;overflow-x:auto;font-size:.8rem}.note{color:#7b8794;font-size:.85rem}
nav a{margin-right:1rem}.verdict{border-left:6px solid #9aa5b1;background:#f5f7fa;padding:.6rem 1rem;margin:.5rem 0 1rem}
.verdict.bad{border-color:#d64545;background:#fdecec}.verdict.warn{border-color:#e8a33d;background:#fdf5e6}
.verdict.good{border-color:#3ebd93;background:#effcf6}.verdict ul{margin:.3rem 0 0;padding-left:1.2rem}
"""


def _img(data: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode("ascii")}">'


def _shown(value: str) -> str:
    """A cell's text for the page: cut to :data:`MAX_CELL_CHARS`, saying so."""
    if len(value) <= MAX_CELL_CHARS:
        return value
    return f"{value[:MAX_CELL_CHARS]}… ({len(value):,} characters, the first {MAX_CELL_CHARS:,} shown)"


def _table(path: Path, notes: list[str], caption: str = "") -> str:
    try:
        rows = csv_rows(path)
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
    problem = png_problem(data)
    if problem:
        notes.append(f"{path.name} is not a complete PNG image ({problem}; torn write?); left out")
        return ""
    return f'<h3>{html.escape(key)} <span class="note">({artifact_unit(path)} {epoch})</span></h3>\n{_img(data, key)}'


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
                heading = f'<h3>{html.escape(name)} <span class="note">({artifact_unit(path)} {epoch})</span></h3>\n'
                out.append(heading + _table(path, self.notes))
        return out


def _once(series: dict[str, list[tuple[float, float, float]]], unit: str) -> list[str]:
    """The metrics logged once: a table, not a single-point chart."""
    names = [n for n in sorted(series) if len(series[n]) == 1]
    if not names:
        return []
    x = 0 if unit == "epoch" else 1
    rows = "".join(
        f'<tr><td>{html.escape(n)}</td><td class="num">{series[n][0][2]:.6g}</td><td class="num">{series[n][0][x]:g}</td>'
        "</tr>"
        for n in names
    )
    return [f'<h3>logged once</h3><table id="once"><tr><th>metric</th><th>value</th><th>{unit}</th></tr>{rows}</table>']


def _sample_tables(run: RunFiles, key: str, alert_at: float | None, notes: list[str]) -> list[str]:
    """A step sample's tables at the first measured step, the alert's first step and the last step (each once)."""
    found = artifact_steps(run, key)
    if not found:
        return []
    picks: list[tuple[str, int, Path]] = [("first", *found[0])]
    if alert_at is not None:
        at = next(((n, p) for n, p in found if n >= alert_at), None)
        if at is not None:
            picks.append(("the alert's first", *at))
    picks.append(("last", *found[-1]))
    out, seen = [], set()
    for what, n, path in picks:
        if n in seen:
            continue
        seen.add(n)
        unit = artifact_unit(path)
        heading = (
            f'<h3>{html.escape(key.replace("_", "/", 1))} <span class="note">({what} {unit}: {unit} {n})</span></h3>\n'
        )
        out.append(heading + _table(path, notes))
    return out


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


def _settings_record(path: Path, notes: list[str]) -> str:
    """A callback's record of what it measured with (``settings/<who>.json``), shown as its JSON.

    A record that cannot be read (torn, nested deeper than Python parses, an integer of more digits
    than Python converts) is a note; a long one is cut to :data:`MAX_RECORD_CHARS`, saying so: one
    file never ends or swamps the page.
    """
    try:
        text = path.read_text(encoding="utf-8")
        shown = json.dumps(json.loads(text), indent=1, sort_keys=True)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:  # ValueError: JSONDecodeError, digits
        notes.append(f"settings/{path.name} could not be read ({type(err).__name__}: {str(err):.300}); left out")
        return ""
    cut = ""
    if len(shown) > MAX_RECORD_CHARS:
        cut = f"settings/{path.name} is {len(text):,} characters long: the first {MAX_RECORD_CHARS:,} are shown"
        notes.append(cut)
        shown = shown[:MAX_RECORD_CHARS] + "…"
    title = f"measured with: {path.stem}"
    note = f'<p class="note">{html.escape(cut)}</p>' if cut else ""
    return f"<h3>{html.escape(title)}</h3><pre>{html.escape(shown)}</pre>{note}"


def _page(
    run: RunFiles, series: dict[str, list[tuple[float, float, float]]], sections: Sequence[str], unit: str = "epoch"
) -> str:
    """The HTML document around the sections: title, the epochs (or steps) measured, a navigation bar."""
    present = [s for s in sections if s]
    headings = re.findall(r'<section id="([^"]+)"><h2>([^<]+)', "".join(present))
    nav = " ".join(f'<a href="#{m}">{t}</a>' for m, t in headings)  # t is escaped already, in its heading
    generated = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    x = 0 if unit == "epoch" else 1
    counted = sorted({int(p[x]) for pts in series.values() for p in pts if math.isfinite(p[x])})
    span = f"{unit}s {counted[0]}-{counted[-1]}" if counted else f"no {unit} measured"
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
    # a Hugging Face Trainer's TensorBoard writes a training log's keys under train/: the keys the docs name
    series = {(k.removeprefix("train/") if k.startswith("train/diversity/") else k): v for k, v in series.items()}
    # a Hugging Face / TRL run counts steps: its epochs are fractions (0.125, 0.25 ...)
    fractional = any(math.isfinite(e) and not float(e).is_integer() for pts in series.values() for e, _, _ in pts)
    unit = "step" if fractional else "epoch"
    alerts = read_alerts(run.alerts, notes)
    rows = run_rows(series, unit)
    alert_at = verdict(rows, alerts, unit).since
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
    figures = scalar_figures(series)
    diversity = [f for f in figures if f[0].split("/")[0] in ("diversity", "val", "eval")]
    own = [f for f in figures if f not in diversity]
    artifacts.used.update(k for k in artifacts.tables if k.endswith("group_sample"))  # shown at three steps below
    group_samples = sorted({k for k in artifacts.tables if k.endswith("group_sample")})
    sections = [
        _section("Summary", "summary-section", summary_section(series, alerts, unit)),
        _section(
            "Diversity over training",
            "scalars",
            [f"<h3>{html.escape(g)}/*</h3>\n{_img(png, g)}" for g, png in diversity]
            + [s for k in group_samples for s in _sample_tables(run, k, alert_at, notes)],
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
        _section(
            "The trainer's own scalars",
            "trainer-scalars",
            [f"<h3>{html.escape(g)}/*</h3>\n{_img(png, g)}" for g, png in own] + _once(series, unit),
        ),
        _section("Other figures and tables", "other", artifacts.take([""], "png") + artifacts.take([""], "csv")),
        _section(
            "Configuration",
            "config",
            [
                f"<h3>{html.escape(p.name)}</h3><pre>{html.escape(p.read_text(errors='replace'))}</pre>"
                for p in run.configs
            ]
            + [_settings_record(p, notes) for p in run.settings],
        ),
    ]
    notes += run.skipped  # links out of the run folder, found while the sections were read
    notes_html = [f"<ul>{''.join(f'<li>{html.escape(n)}</li>' for n in notes)}</ul>"] if notes else []
    return _page(run, series, [*sections, _section("Notes", "notes", notes_html)], unit)
