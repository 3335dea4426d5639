"""Which files of a run the report reads: its version folder, figures, tables, logs and configs, inside the run folder."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from lightning_div.keys import CLUSTER_CARDS_FILE, CLUSTER_SHARES_FILE

ARTIFACTS = "lightning_div"
# Lightning names a measurement's files by its epoch, the Hugging Face front ends by the step
ARTIFACT_NAME = re.compile(r"^(?P<key>.+)_(?P<unit>epoch|step)(?P<epoch>\d+)\.(?P<ext>png|csv)$")


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
    #: the callbacks' records of what they measured with (``lightning_div/settings/*.json``)
    settings: list[Path] = field(default_factory=list)
    #: the alerting callbacks' records of their alert, since when and why (``lightning_div/alerts/*.json``)
    alerts: list[Path] = field(default_factory=list)
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


def event_files(d: Path) -> list[Path]:
    return sorted(p for p in d.glob(EVENT_FILES) if p.is_file())


def _ours(d: Path) -> bool:
    """A CSVLogger's or the lightning-div callbacks' folder (preferred over a TensorBoard-only one)."""
    return (d / "metrics.csv").is_file() or (d / ARTIFACTS).is_dir()


def _is_version(d: Path) -> bool:
    return _ours(d) or bool(event_files(d))


def _written_at(d: Path) -> float:
    times = [p.stat().st_mtime for p in [d / "metrics.csv", d / ARTIFACTS, *event_files(d)] if p.exists()]
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
    run.events = [p for p in event_files(version) if run.admit(p)]
    if run.artifacts is not None:
        run.settings = sorted(p for p in (run.artifacts / "settings").glob("*.json") if p.is_file() and run.admit(p))
        run.alerts = sorted(p for p in (run.artifacts / "alerts").glob("*.json") if p.is_file() and run.admit(p))
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
        if d.is_dir() and d.name != ARTIFACTS and event_files(d) and run.admit(d)
    ]
    if not found:
        return
    latest = max(found, key=lambda d: (_written_at(d), str(d)))
    run.events_dir = latest
    run.events = [p for p in event_files(latest) if run.admit(p)]
    others = [str(d.relative_to(run.version)) for d in found if d != latest]
    if others:
        run.skipped.append(
            f"scalars from the latest TensorBoard run {latest.relative_to(run.version)}; not shown: "
            + ", ".join(others)
            + " (give one of them as RUN_DIR to see its scalars)"
        )


def run_inputs(run: RunFiles) -> list[Path]:
    """Every file of ``run`` the report reads: a page written over one of them would destroy it."""
    files = [*([run.metrics_csv] if run.metrics_csv else []), *run.events, *run.configs, *run.settings, *run.alerts]
    if run.artifacts is not None:
        files += sorted(p for p in run.artifacts.iterdir() if p.is_file())
    return files


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


def artifact_steps(run: RunFiles, key: str, kind: str = "csv") -> list[tuple[int, Path]]:
    """Every file of one artifact key (``diversity_group_sample``), by its epoch or step, oldest first."""
    found = []
    if run.artifacts is not None:
        for p in run.artifacts.iterdir():
            m = ARTIFACT_NAME.match(p.name)
            if m and m["key"] == key and m["ext"] == kind and p.is_file() and run.admit(p):
                found.append((int(m["epoch"]), p))
    return sorted(found)


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


def artifact_unit(path: Path) -> str:
    """``epoch`` or ``step``: what the number in an artifact's name counts."""
    m = ARTIFACT_NAME.match(path.name)
    return m["unit"] if m else "epoch"
