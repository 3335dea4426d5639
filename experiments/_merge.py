"""What the experiments' ``--merge`` shares: each part read and checked, each run kept once, no input overwritten.

A part is a ``results.json`` (or a ``partial.json`` of a run stopped midway) of one experiment. Merging
never drops a run in silence: two parts that hold the same setting and seed must hold the same run
(a part given twice), else the merge is refused naming both files; the same for a seed's measurements
of the untrained base model. The merged folder may not be one whose files are inputs of the merge
(the merge would rewrite a part it reads). A damaged part (not JSON, not an object, no ``config``, a
seed that is not an integer, another experiment's part) is one error naming the file.

From the command line (:func:`fail`): one line ``<script> --merge: error: <message>`` on stderr, exit
code 2.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn


class MergeError(ValueError):
    """Parts that cannot be merged; the message names the file(s) and what is wrong."""


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string"}.get(type(value), type(value).__name__)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_json_object(path: Path) -> dict[str, Any]:
    """A part's file as one JSON object, every way it can fail named with the file.

    Raises:
        MergeError: missing, unreadable, not UTF-8, not JSON (line and column), too deep, or not an object.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MergeError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise MergeError(f"{path}: not UTF-8 text; a results.json is JSON") from None
    except OSError as e:
        raise MergeError(f"{path}: cannot be read ({e.strerror or e})") from None
    try:
        part = json.loads(text)
    except json.JSONDecodeError as e:
        raise MergeError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); a torn part?") from None
    except RecursionError:
        raise MergeError(f"{path}: JSON nested too deeply to be a results.json") from None
    if not isinstance(part, dict):
        raise MergeError(f"{path}: a results.json holds one JSON object, this holds {_kind(part)}")
    return part


def read_part(
    path: Path,
    experiment: str,
    settings: Iterable[str] | Callable[[str], bool],
    measures: Sequence[str],
    run_fields: Callable[[dict[str, Any]], Mapping[str, type]] | None = None,
) -> dict[str, Any]:
    """One part, read and checked: what a merge and its page read of it is there and of the right kind.

    Args:
        path: the part's file.
        experiment: the experiment it must be a part of (its ``"experiment"`` field).
        settings: the setting names a run may have (or a test of a name).
        measures: what each run's ``held_out`` holds (numbers).
        run_fields: more fields a run has, with their type, from the run (``lambda run: {"steps": list}``;
            ``float``: a finite number).

    Returns:
        The part.

    Raises:
        MergeError: naming the file: it cannot be read, is not JSON, not an object, of another
            experiment, without ``config`` / ``quick`` / ``runs``, or a run that is malformed.
    """
    part = read_json_object(path)
    found = part.get("experiment")
    if found != experiment:
        named = f"of the experiment {found!r}" if isinstance(found, str) else "of no experiment ('experiment' missing)"
        raise MergeError(f"{path}: a part {named}, not of {experiment!r}: merge each experiment's parts apart")
    if not isinstance(part.get("config"), dict):
        raise MergeError(f"{path}: no 'config' object (the settings the part ran with), so it cannot be compared")
    if not isinstance(part.get("quick"), bool):
        raise MergeError(f"{path}: 'quick' must be true or false, got {part.get('quick')!r}")
    runs = part.get("runs")
    if not isinstance(runs, list):
        raise MergeError(f"{path}: 'runs' must be a list of runs, got {_kind(runs)}")
    known = settings if callable(settings) else set(settings).__contains__
    for i, run in enumerate(runs):
        where = f"{path}: runs[{i}]"
        if not isinstance(run, dict):
            raise MergeError(f"{where} is {_kind(run)}, not a run (an object)")
        setting, seed = run.get("setting"), run.get("seed")
        if not isinstance(setting, str) or not known(setting):
            raise MergeError(f"{where}: {setting!r} is not a setting of this experiment")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise MergeError(f"{where} ({setting}): the seed must be an integer, got {seed!r}")
        held = run.get("held_out")
        if not isinstance(held, dict) or not all(_number(held.get(m)) for m in measures):
            bad = next((m for m in measures if not isinstance(held, dict) or not _number(held.get(m))), "held_out")
            raise MergeError(f"{where} ({setting} seed {seed}): held_out[{bad!r}] is missing or not a finite number")
        for name, kind in (run_fields(run) if run_fields else {}).items():
            value = run.get(name)
            if not (_number(value) if kind is float else isinstance(value, kind)):
                wanted = "a finite number" if kind is float else _kind(kind())
                raise MergeError(f"{where} ({setting} seed {seed}): {name!r} must be {wanted}, got {value!r:.60}")
    return part


def each_run_once(
    parts: Sequence[tuple[Path, Iterable[dict[str, Any]]]], key: Callable[[dict[str, Any]], tuple[Any, ...]]
) -> list[dict[str, Any]]:
    """Every run of the parts, a run held by two parts kept once when both hold the same run.

    Args:
        parts: ``(file, its runs)``, in order.
        key: a run's ``(setting, seed)`` (or ``(setting..., seed)``: the seed last).

    Returns:
        The runs, in the parts' order.

    Raises:
        MergeError: two parts (or one part twice over) holding different runs of a setting and seed, named
            with both files (a later part used to win, without a word).
    """
    seen: dict[tuple[Any, ...], tuple[Path, dict[str, Any]]] = {}
    for path, runs in parts:
        for run in runs:
            k = key(run)
            if k in seen:
                where, other = seen[k]
                if other == run:  # the same run twice (a part given twice): one run
                    continue
                holders = f"{where} holds two" if Path(where) == Path(path) else f"{where} and {path} hold"
                setting = k[0] if len(k) == 2 else "/".join(map(str, k[:-1]))
                raise MergeError(
                    f"{holders} different runs of {setting} seed {k[-1]}: a merge keeps every run once; "
                    "leave one of them out (or run the other under another seed)"
                )
            seen[k] = (path, run)
    return [run for _, run in seen.values()]


def each_seed_once(parts: Sequence[tuple[Path, Mapping[str, Any]]], what: str) -> dict[str, Any]:
    """Per-seed values of the parts (``{"0": {...}}``), one per seed: parts holding a seed must agree on it.

    Args:
        parts: ``(file, {seed: value})``, in order.
        what: what the values are, for the message (``"the base model's held-out measures"``).

    Returns:
        ``{seed: value}``.

    Raises:
        MergeError: two parts that disagree on a seed's value, named with both files.
    """
    out: dict[str, Any] = {}
    holder: dict[str, Path] = {}
    for path, values in parts:
        for seed, value in values.items():
            if seed in out and out[seed] != value:
                raise MergeError(
                    f"{holder[seed]} and {path} disagree on {what} of seed {seed}: parts of one seed must come "
                    "from the same untrained model and sampling; leave one of them out"
                )
            out.setdefault(seed, value)
            holder.setdefault(seed, path)
    return out


def _same_file(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def refuse_writing_over_inputs(out: Path, written: Iterable[Path], inputs: Iterable[Path]) -> None:
    """The merge's output folder may not be where its inputs are: it would rewrite a part it reads.

    Args:
        out: ``--out``.
        written: the files the merge writes.
        inputs: the files it reads.

    Raises:
        MergeError: a written file that is an input (by any path: a link, another spelling).
    """
    inputs = list(inputs)
    for target in written:
        for source in inputs:
            if _same_file(Path(target), Path(source)):
                raise MergeError(
                    f"--out {out} would write {target}, which is the input {source}: the merge would rewrite "
                    "a part it reads; give another --out (and move the merged folder there after, if you mean it)"
                )


def fail(prog: str, err: MergeError) -> NoReturn:
    """Say a merge that cannot be done: one line ``<prog>: error: <message>`` on stderr, exit code 2."""
    print(f"{prog}: error: {' '.join(str(err).split())}", file=sys.stderr)
    raise SystemExit(2)
