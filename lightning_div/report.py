"""``lightning-div report RUN_DIR --out report.html``: one self-contained HTML page of a run.

The page is built only from what the callbacks and loggers wrote to disk: the
CSVLogger's ``metrics.csv``, the artifact folder ``<log_dir>/lightning_div`` (PNG
figures and CSV tables named ``<key>_epoch<N>``, ``cluster_cards.csv``,
``cluster_shares.csv``) and the ``config.yaml`` LightningCLI saves. So it works on
any run, including one that crashed halfway (a torn last line of ``metrics.csv`` is
reported on the page, not fatal). Images are embedded as base64 PNG and there are
no scripts or external resources: the file can be mailed, attached to a pull
request or opened offline.

``RUN_DIR`` is a run's ``default_root_dir`` (e.g. ``runs/demo``), where the most
recently written logger version below it is taken, or one version folder.
"""

from __future__ import annotations

import base64
import csv
import datetime as _dt
import html
import io
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning_div.keys import CLUSTER_CARDS_FILE, CLUSTER_SHARES_FILE, HEADLINE_KEYS

ARTIFACTS = "lightning_div"
ARTIFACT_NAME = re.compile(r"^(?P<key>.+)_epoch(?P<epoch>\d+)\.(?P<ext>png|csv)$")
MAX_TABLE_ROWS = 200
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
    """What a run left on disk."""

    root: Path
    version: Path
    metrics_csv: Path | None
    artifacts: Path | None
    configs: list[Path] = field(default_factory=list)


def _is_version(d: Path) -> bool:
    return (d / "metrics.csv").is_file() or (d / ARTIFACTS).is_dir()


def _written_at(d: Path) -> float:
    times = [p.stat().st_mtime for p in [d / "metrics.csv", d / ARTIFACTS] if p.exists()]
    if (d / ARTIFACTS).is_dir():
        times += [p.stat().st_mtime for p in (d / ARTIFACTS).iterdir()]
    return max(times, default=0.0)


def find_run(run_dir: str | Path) -> RunFiles:
    """The version folder of ``run_dir`` to report: itself, or the most recently written one below it."""
    root = Path(run_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such run directory")
    if _is_version(root):
        version = root
    else:
        found = [d for d in root.rglob("*") if d.is_dir() and d.name != ARTIFACTS and _is_version(d)]
        if not found:
            raise ValueError(
                f"{root}: no run below it (no metrics.csv from a CSVLogger and no {ARTIFACTS}/ folder "
                "of lightning-div figures); give a run's default_root_dir or one logger version folder"
            )
        version = max(found, key=lambda d: (_written_at(d), str(d)))
    configs = []
    top = root.resolve()
    for d in [version.resolve(), *version.resolve().parents]:  # LightningCLI saves config.yaml beside the logs
        configs += [p for p in (d / "config.yaml", d / "hparams.yaml") if p.is_file()]
        if d == top:
            break
    return RunFiles(
        root=root,
        version=version,
        metrics_csv=version / "metrics.csv" if (version / "metrics.csv").is_file() else None,
        artifacts=version / ARTIFACTS if (version / ARTIFACTS).is_dir() else None,
        configs=configs,
    )


def read_metrics(path: Path, notes: list[str]) -> dict[str, list[tuple[float, float, float]]]:
    """Per metric, its (epoch, step, value) points from a CSVLogger file; torn or bad lines become notes."""
    series: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        rows = list(csv.reader(f))
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


def _png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def scalar_figures(series: dict[str, list[tuple[float, float, float]]]) -> list[tuple[str, bytes]]:
    """One PNG of small plots per metric group (val, train, dress, timing, ...): each metric over epochs
    (metrics logged once an epoch) or over steps (metrics logged more often)."""
    from lightning_div._internal.tracking import new_figure

    groups: dict[str, list[str]] = defaultdict(list)
    for name in sorted(series):
        groups[name.split("/")[0] if "/" in name else "other"].append(name)
    out = []
    for group, names in sorted(groups.items(), key=lambda kv: (kv[0] not in ("val", "train"), kv[0])):
        cols = min(3, len(names))
        rows = math.ceil(len(names) / cols)
        fig, axes = new_figure(rows, cols, figsize=(4.0 * cols, 2.6 * rows), squeeze=False)
        for ax, name in zip(axes.flat, names):
            points = series[name]
            epochs = [e for e, _, _ in points]
            per_epoch = len(points) <= len(set(epochs)) and not any(math.isnan(e) for e in epochs)
            x = epochs if per_epoch else [s for _, s, _ in points]
            ax.plot(x, [v for _, _, v in points], marker="o" if len(points) <= 30 else None, markersize=3)
            ax.set_title(name, fontsize=9)
            ax.set_xlabel("epoch" if per_epoch else "step", fontsize=8)
            ax.tick_params(labelsize=7)
            if per_epoch:
                ax.xaxis.get_major_locator().set_params(integer=True)
        for ax in list(axes.flat)[len(names) :]:
            ax.axis("off")
        fig.tight_layout()
        out.append((group, _png(fig)))
    return out


def latest_artifacts(folder: Path | None) -> tuple[dict[str, tuple[int, Path]], dict[str, tuple[int, Path]]]:
    """(figures, tables): per key, the file of its latest epoch."""
    figures: dict[str, tuple[int, Path]] = {}
    tables: dict[str, tuple[int, Path]] = {}
    if folder is None:
        return figures, tables
    for p in sorted(folder.iterdir()):
        m = ARTIFACT_NAME.match(p.name)
        if not m or not p.is_file():
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


def _img(data: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode("ascii")}">'


def _table(path: Path, notes: list[str], caption: str = "") -> str:
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as f:
            rows = list(csv.reader(f))
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
            return f"<td>{html.escape(value)}</td>"

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
    return f'<h3>{html.escape(key)} <span class="note">(epoch {epoch})</span></h3>\n{_img(data, key)}'


def build_report(run_dir: str | Path) -> str:
    """The HTML page of the run in ``run_dir`` (see the module doc)."""
    run = find_run(run_dir)
    notes: list[str] = []
    series = read_metrics(run.metrics_csv, notes) if run.metrics_csv else {}
    if run.metrics_csv is None:
        notes.append("no metrics.csv (the run had no CSVLogger): no scalar plots")
    figures, tables = latest_artifacts(run.artifacts)
    if run.artifacts is None:
        notes.append(f"no {ARTIFACTS}/ folder: no figures or tables from the lightning-div callbacks")
    used: set[str] = set()

    def take(prefixes: Sequence[str], kind: str) -> list[str]:
        source = figures if kind == "png" else tables
        out = []
        for key in sorted(source):
            if key in used or not any(key.startswith(p) for p in prefixes):
                continue
            used.add(key)
            epoch, path = source[key]
            if kind == "png":
                out.append(_figure(key.replace("_", "/", 1), epoch, path, notes))
            else:
                out.append(
                    f'<h3>{html.escape(key.replace("_", "/", 1))} <span class="note">(epoch {epoch})'
                    f"</span></h3>\n" + _table(path, notes)
                )
        return out

    summary = []
    last = {name: points[-1] for name, points in series.items()}
    keys = [k for k in HEADLINE_KEYS if k in last]
    if keys:
        rows = "".join(
            f'<tr><td>{html.escape(k)}</td><td class="num">{last[k][2]:.4f}</td>'
            f'<td class="num">{last[k][0]:g}</td></tr>'
            for k in keys
        )
        summary.append(f'<table id="summary"><tr><th>metric</th><th>last value</th><th>epoch</th></tr>{rows}</table>')
    epochs = sorted({int(e) for pts in series.values() for e, _, _ in pts if not math.isnan(e)})

    def clusters_of(folder: Path, prefix: str) -> list[str]:
        """One monitor's cluster files and figures, paired by the name they carry."""
        cards, shares = folder / f"{prefix}{CLUSTER_CARDS_FILE}", folder / f"{prefix}{CLUSTER_SHARES_FILE}"
        return [
            f"<h3>{html.escape(prefix[:-1])}/</h3>" if prefix else "",
            _table(cards, notes, "cluster cards") if cards.is_file() else "",
            *take([f"{prefix}val_cluster_shares", f"{prefix}val_cluster_histogram"], "png"),
            ("<h3>generated and gold share per cluster and epoch</h3>\n" + _table(shares, notes))
            if shares.is_file()
            else "",
        ]

    folder = run.artifacts
    groups = cluster_groups(folder)
    with_cards = folder is not None and any((folder / f"{p}{CLUSTER_CARDS_FILE}").is_file() for p in groups)
    cluster_parts = [part for prefix in groups if folder is not None for part in clusters_of(folder, prefix)]
    sections = [
        _section("Summary", "summary-section", summary),
        _section(
            "Scalars over training",
            "scalars",
            [f"<h3>{html.escape(g)}/*</h3>\n{_img(png, g)}" for g, png in scalar_figures(series)],
        ),
        _section(
            "Semantic clusters",
            "clusters",
            [
                "<p>Each cluster described by the gold responses it holds: share, most distinctive words and "
                "2-grams, the responses nearest its centroid.</p>"
                if with_cards
                else "",
                *cluster_parts,
                *take(["val_cluster_shares", "val_cluster_histogram"], "png"),
            ],
        ),
        _section(
            'RUQ: does the model prefer "I don\'t know"?',
            "ruq",
            take(["val_ruq", "train_ruq"], "png") + take(["val_ruq", "train_ruq"], "csv"),
        ),
        _section("Sample responses", "samples", take(["val_samples", "train_samples"], "csv")),
        _section("DRESS", "dress", take(["dress"], "png") + take(["dress"], "csv")),
        _section("Other figures and tables", "other", take([""], "png") + take([""], "csv")),
        _section(
            "Configuration",
            "config",
            [
                f"<h3>{html.escape(p.name)}</h3><pre>{html.escape(p.read_text(errors='replace'))}</pre>"
                for p in run.configs
            ],
        ),
        _section(
            "Notes", "notes", [f"<ul>{''.join(f'<li>{html.escape(n)}</li>' for n in notes)}</ul>"] if notes else []
        ),
    ]
    present = [s for s in sections if s]
    headings = re.findall(r'<section id="([^"]+)"><h2>([^<]+)', "".join(present))
    nav = " ".join(f'<a href="#{m}">{t}</a>' for m, t in headings)  # t is escaped already, in its heading
    generated = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    span = f"epochs {epochs[0]}-{epochs[-1]}" if epochs else "no epoch measured"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>lightning-div report: {html.escape(str(run.version))}</title><style>{STYLE}</style></head><body>"
        f'<h1>lightning-div report</h1><p class="note">{html.escape(str(run.version))} · {span} · '
        f"generated {generated}</p><nav>{nav}</nav>\n" + "\n".join(present) + "\n</body></html>\n"
    )
