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

from lightning_div.keys import CLUSTER_CARDS_FILE, CLUSTER_SHARES_FILE, HEADLINE_KEYS
from lightning_div.report.figures import png_problem, scalar_figures
from lightning_div.report.files import ARTIFACTS, RunFiles, artifact_unit, cluster_groups, find_run, latest_artifacts
from lightning_div.report.readers import csv_rows, read_metrics, read_tensorboard

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
nav a{margin-right:1rem}
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
            ]
            + [_settings_record(p, notes) for p in run.settings],
        ),
    ]
    notes += run.skipped  # links out of the run folder, found while the sections were read
    notes_html = [f"<ul>{''.join(f'<li>{html.escape(n)}</li>' for n in notes)}</ul>"] if notes else []
    return _page(run, series, [*sections, _section("Notes", "notes", notes_html)])
