"""Meta-evaluation data: response sets with their diversity parameter.

Read from the CSV files Tevet & Berant released (``GuyTevet/diversity-eval``: one row
per set, ``resp_0 .. resp_{n-1}``, ``label_value``, ``label_name``, optional ``sample_id``,
``context`` and precomputed ``metric_*`` columns) or from our JSONL, or generated afresh
from any dialogue model with :func:`build_dec_test`.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from lightning_div._internal.bars import bar_disabled
from lightning_div._internal.io import atomic_write
from lightning_div.meta_eval.stats import infer_test
from lightning_div.model.formatting import Context
from lightning_div.model.generation import NO_BLOCKING, generate_sets
from lightning_div.nli.threshold import ResponseGenerator, derive_seed

# Pure temperature sampling, as in the paper's decTest: no nucleus / top-k truncation and no
# n-gram blocking, so the temperature alone moves the diversity. Keywords override these.
DEC_TEST_SAMPLING: dict[str, Any] = {"do_sample": True, "top_p": 1.0, "top_k": 0, **NO_BLOCKING}
# JSONL keys accepted for the diversity parameter, first present wins.
PARAMETER_KEYS = ("parameter", "temperature", "label", "label_value")
_RESP = re.compile(r"^resp_(\d+)$")


@dataclass(frozen=True)
class ResponseSet:
    """One response set: its context, diversity parameter (temperature, or the 0/1 content label) and responses."""

    context: Context
    parameter: float
    responses: tuple[str, ...]
    sample_id: str = ""


@dataclass
class MetaEvalData:
    """Response sets of one test; ``precomputed`` holds a released CSV's ``metric_*`` columns by name."""

    sets: list[ResponseSet]
    label_name: str = "parameter"
    precomputed: dict[str, list[float]] = field(default_factory=dict)
    source: str = ""

    @property
    def responses(self) -> list[list[str]]:
        return [list(s.responses) for s in self.sets]

    @property
    def parameters(self) -> list[float]:
        return [s.parameter for s in self.sets]

    def infer_test(self) -> str:
        """``"con"`` when every parameter is 0 or 1 (the conTest labels), else ``"dec"``."""
        return infer_test(self.parameters)


def _number(text: Any, where: str) -> float:
    if isinstance(text, bool):  # JSON true / false: float() reads them as 1 / 0, and they looked like conTest labels
        raise ValueError(f"{where} = {str(text).lower()} is a boolean, not a number")
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{where} = {text!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{where} = {text!r} is not finite")
    return value


def _check_header(fields: list[str] | None, path: Path) -> list[str]:
    if not fields:
        raise ValueError(f"{path}: empty file; expected a header with resp_0, resp_1, ..., label_value")
    duplicates = sorted({f for f in fields if fields.count(f) > 1})
    if duplicates:
        raise ValueError(f"{path}:1: column(s) {duplicates} appear more than once")
    indices = sorted(int(m.group(1)) for f in fields if (m := _RESP.match(f)))
    if not indices:
        raise ValueError(f"{path}:1: no response columns; expected resp_0, resp_1, ... (columns: {fields})")
    missing = sorted(set(range(indices[-1] + 1)) - set(indices))
    if missing:
        raise ValueError(
            f"{path}:1: response columns must be resp_0 .. resp_{indices[-1]} without gaps; "
            f"resp_{missing[0]} is missing"
        )
    if "label_value" not in fields:
        raise ValueError(
            f"{path}:1: no label_value column (the diversity parameter: the temperature for "
            "decTest, 0 = low / 1 = high content diversity for conTest)"
        )
    return [f"resp_{i}" for i in range(len(indices))]


def read_released_csv(path: str | Path) -> MetaEvalData:
    """A decTest / conTest CSV in the layout of Tevet & Berant's released data.

    Required: ``resp_0 .. resp_{n-1}`` and ``label_value``; optional: ``sample_id``,
    ``context``, ``label_name`` (must be the same on every row) and ``metric_*`` columns
    (kept as precomputed scores; ``*_std`` columns are ignored). Errors name the file and
    the line on which the offending row ends.

    Args:
        path: the CSV file.

    Returns:
        The sets, parameters and precomputed scores.

    Raises:
        ValueError: a missing column, a bad value or row, non-UTF-8 bytes or an empty file,
            naming file and line.
    """
    path = Path(path)
    sets: list[ResponseSet] = []
    precomputed: dict[str, list[float]] = {}
    label_name: str | None = None
    line = 1
    try:
        with path.open(encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or [])
            resp_fields = _check_header(header, path)
            metric_fields = [c for c in header if c.startswith("metric_") and not c.endswith("_std")]
            precomputed = {c: [] for c in metric_fields}
            for row in reader:
                line = reader.line_num
                where = f"{path}:{line}"
                extra = row.pop(None, None)  # DictReader: surplus fields under None, missing ones as None
                if extra is not None or any(v is None for v in row.values()):
                    count = len(row) + len(extra) if extra else sum(v is not None for v in row.values())
                    raise ValueError(f"{where}: the row has {count} fields but the header has {len(row)}")
                if "label_name" in row:
                    if label_name is not None and row["label_name"] != label_name:
                        raise ValueError(
                            f"{where}: label_name {row['label_name']!r} differs from {label_name!r} "
                            "on the rows above; one file holds one test"
                        )
                    label_name = row["label_name"]
                for c in metric_fields:
                    precomputed[c].append(_number(row[c], f"{where}: {c}"))
                sets.append(
                    ResponseSet(
                        context=row.get("context", ""),
                        parameter=_number(row["label_value"], f"{where}: label_value"),
                        responses=tuple(row[c] for c in resp_fields),
                        sample_id=row.get("sample_id", "") or str(len(sets)),
                    )
                )
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 after line {line} ({err.reason} at byte {err.start} of a chunk)") from None
    except csv.Error as err:
        raise ValueError(f"{path}:{line}: malformed CSV: {err}") from None
    if not sets:
        raise ValueError(f"{path}: no response sets below the header")
    return MetaEvalData(sets, label_name or "label_value", precomputed, str(path))


def _jsonl_set(obj: Any, where: str, index: int) -> tuple[ResponseSet, str]:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    responses = obj.get("responses")
    if not isinstance(responses, list) or not all(isinstance(r, str) for r in responses):
        raise ValueError(f"{where}: 'responses' must be a list of strings")
    key = next((k for k in PARAMETER_KEYS if k in obj), None)
    if key is None:
        raise ValueError(f"{where}: no diversity parameter; give one of {PARAMETER_KEYS}")
    context = obj.get("context", "")
    if not isinstance(context, str):
        if not isinstance(context, list) or not all(isinstance(t, str) for t in context):
            raise ValueError(f"{where}: 'context' must be a string or a list of turns (strings)")
        context = tuple(context)
    value = _number(obj[key], f"{where}: {key}")
    return ResponseSet(context, value, tuple(responses), str(obj.get("sample_id", index))), obj.get("label_name", key)


def read_sets_jsonl(path: str | Path) -> MetaEvalData:
    """Our JSONL: one object per line, ``{"context": ..., "parameter": 0.7, "responses": [...]}``.

    The parameter may also be called ``temperature``, ``label`` or ``label_value``;
    ``context`` (a string or a list of turns), ``sample_id`` and ``label_name`` are optional.

    Args:
        path: the JSONL file.

    Returns:
        The sets and parameters.

    Raises:
        ValueError: invalid JSON, a missing field or non-UTF-8 bytes, naming file and line.
    """
    path = Path(path)
    sets: list[ResponseSet] = []
    names: list[str] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 ({err.reason} at byte {err.start})") from None
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number}: invalid JSON: {err.msg} (column {err.colno})") from None
        except RecursionError:  # "[" x 100,000: Python's decoder recurses once per level
            raise ValueError(
                f"{path}:{number}: invalid JSON: nested deeper than Python's JSON decoder can read"
            ) from None
        item, name = _jsonl_set(obj, f"{path}:{number}", len(sets))
        sets.append(item)
        names.append(name)
    if not sets:
        raise ValueError(f"{path}: no response sets (expected one JSON object per line)")
    return MetaEvalData(sets, names[0], {}, str(path))


def write_sets_jsonl(sets: Sequence[ResponseSet], path: str | Path) -> Path:
    """Write response sets as JSONL that :func:`read_sets_jsonl` (and ``lightning-div meta-eval``) reads.

    Args:
        sets: the response sets (e.g. from :func:`build_dec_test`).
        path: the file to write.

    Returns:
        The path written.
    """
    path = Path(path)
    with atomic_write(path, "w", encoding="utf-8") as f:
        for s in sets:
            context = s.context if isinstance(s.context, str) else list(s.context)
            f.write(
                json.dumps(
                    {
                        "sample_id": s.sample_id,
                        "context": context,
                        "parameter": s.parameter,
                        "responses": list(s.responses),
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )
    return path


def read_sets(path: str | Path) -> MetaEvalData:
    """A released CSV (``.csv``) or our JSONL (``.jsonl`` / ``.json``), by suffix.

    Args:
        path: the file.

    Returns:
        The sets, with their parameters (``.responses``, ``.parameters``, ``.infer_test()``).

    Raises:
        ValueError: a row or line that cannot be read (file and line named), or an unknown suffix.
        FileNotFoundError: no such file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return read_released_csv(path)
    if suffix in (".jsonl", ".json"):
        return read_sets_jsonl(path)
    raise ValueError(f"{path}: unknown format {suffix!r}; use a released .csv or a .jsonl of response sets")


def build_dec_test(
    adapter: ResponseGenerator,
    contexts: Sequence[Context],
    temperatures: Sequence[float],
    n: int = 10,
    seed: int = 0,
    pairing: str = "grid",
    show_progress: bool = True,
    swept: str = "temperature",
    **generation_kwargs: Any,
) -> list[ResponseSet]:
    """A fresh decTest from any model: ``n`` sampled responses per (context, temperature).

    With ``swept="top_p"`` the values are nucleus sampling's p instead (temperature 1): the
    paper's Table 3 sweeps p linearly over [0.1, 1.0].

    ``adapter`` is anything with ``generate(contexts, num_return_sequences=, do_sample=,
    temperature=, seed=, **kw) -> list[str]`` grouped by context (e.g. ``HuggingFaceAdapter``).
    ``pairing="grid"`` samples every context at every temperature (context-major order);
    ``"round_robin"`` gives context i the temperature ``temperatures[i % len(temperatures)]``,
    the paper's design (one set per context). Sampling is :data:`DEC_TEST_SAMPLING` (pure
    temperature) unless keywords override it; temperature i is sampled with seed
    ``derive_seed(seed, i)``, so equal arguments give equal sets. The paper's sweep is
    ``numpy.linspace(0.2, 1.2, 100)`` with n = 10.

    Args:
        adapter: generates, as above.
        contexts: strings or lists of turns.
        temperatures: sampling temperatures, each > 0.
        n: responses per set, >= 2.
        seed: the base seed.
        pairing: ``"grid"`` or ``"round_robin"``.
        show_progress: a tqdm bar over temperatures.
        swept: ``"temperature"`` or ``"top_p"``: which sampling argument ``temperatures`` holds.
        **generation_kwargs: override the sampling defaults (``top_p=0.9``, ``max_new_tokens=30``, ...).

    Returns:
        One :class:`ResponseSet` per set, its ``parameter`` the swept value.

    Raises:
        ValueError: a temperature <= 0 (a p outside (0, 1] for top_p), n < 2, an unknown pairing
            or ``swept``, or an adapter that returns the wrong number of responses.
    """
    contexts = [c if isinstance(c, str) else tuple(c) for c in contexts]
    if not contexts:
        raise ValueError("build_dec_test needs at least one context")
    if swept not in ("temperature", "top_p"):
        raise ValueError(f"swept={swept!r} is unknown; use 'temperature' or 'top_p'")
    temps = [float(t) for t in temperatures]
    bad = [t for t in temps if not (math.isfinite(t) and t > 0 and (swept == "temperature" or t <= 1))]
    if not temps or bad:
        allowed = "finite and > 0" if swept == "temperature" else "in (0, 1]"
        raise ValueError(f"the {swept} values must be {allowed} (sampling), got {list(temperatures)!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"n must be an integer >= 2 (a set needs pairs of responses), got {n!r}")
    if pairing not in ("grid", "round_robin"):
        raise ValueError(f"pairing={pairing!r} is unknown; use 'grid' or 'round_robin'")
    if pairing == "round_robin" and len(contexts) < len(set(temps)):
        raise ValueError(
            f"round_robin pairing with {len(contexts)} contexts leaves some of the "
            f"{len(set(temps))} temperatures without a set; give more contexts or use 'grid'"
        )
    kwargs = {**DEC_TEST_SAMPLING, **generation_kwargs}
    out: dict[tuple[int, int], ResponseSet] = {}
    for ti, t in enumerate(tqdm(temps, desc="decTest temperatures", unit="temp", disable=bar_disabled(show_progress))):
        chosen = [ci for ci in range(len(contexts)) if pairing == "grid" or ci % len(temps) == ti]
        if not chosen:
            continue
        value = {"temperature": t} if swept == "temperature" else {"temperature": 1.0, "top_p": t}
        groups = generate_sets(
            adapter, [contexts[ci] for ci in chosen], n, seed=derive_seed(seed, ti), **{**kwargs, **value}
        )
        for ci, responses in zip(chosen, groups):
            out[ci, ti] = ResponseSet(contexts[ci], t, tuple(responses), f"c{ci}-t{ti}")
    return [out[key] for key in sorted(out)]
